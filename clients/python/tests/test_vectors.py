"""The shared wire vectors: byte-for-byte frames, refused input, answers."""

import pytest

from locking_center import Action, InvalidRequestError, encode_frame
from locking_center import _protocol as proto

from conftest import load_vectors

VECTORS = load_vectors()


def test_actions_match():
    assert {name: int(n) for name, n in VECTORS["actions"].items()} == {
        "lock": Action.LOCK,
        "unlock": Action.UNLOCK,
        "reset_by_key": Action.RESET_BY_KEY,
        "reset_by_source": Action.RESET_BY_SOURCE,
        "trylock": Action.TRY_LOCK,
    }


@pytest.mark.parametrize("vec", VECTORS["frames"], ids=lambda v: v["name"])
def test_frame(vec):
    assert encode_frame(vec["action"], vec["key"], vec["source"]).hex() == vec["hex"]


@pytest.mark.parametrize("vec", VECTORS["invalid"], ids=lambda v: v["name"])
def test_invalid_refused(vec):
    with pytest.raises(InvalidRequestError):
        encode_frame(vec["action"], vec["key"], vec["source"])


def test_answers():
    known = {"+": proto.OK, "-": proto.FAIL, "#": proto.NOT_WON}
    assert len(VECTORS["answers"]) == len(known)
    for ans in VECTORS["answers"]:
        byte = bytes.fromhex(ans["hex"])
        assert len(byte) == 1
        assert byte.decode("ascii") == ans["char"]
        assert known[ans["char"]] == byte[0]
