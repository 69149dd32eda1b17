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


# -- sessions ------------------------------------------------------------------

STATUS = {"+": proto.OK, "-": proto.FAIL, "#": proto.NOT_WON}


def test_session_actions_match():
    from locking_center import SessionAction

    expected = {name.lower().replace("try_lock", "trylock"): int(a) for name, a in SessionAction.__members__.items()}
    expected["open"] = proto.SESSION_OPEN
    assert {name: int(n) for name, n in VECTORS["session_actions"].items()} == expected


@pytest.mark.parametrize("vec", VECTORS["session_open"], ids=lambda v: v["name"])
def test_session_open(vec):
    frame = proto.encode_open(vec["version"], vec["ttl_ms"], int(vec["resume"]), vec["source"], vec["auth"])
    assert frame.hex() == vec["hex"]


@pytest.mark.parametrize("vec", VECTORS["session_open_answers"], ids=lambda v: v["name"])
def test_session_open_answer(vec):
    answer = proto.decode_open_answer(bytes.fromhex(vec["hex"]))
    assert answer == (STATUS[vec["status"]], vec["ttl_ms"], int(vec["session"]))


@pytest.mark.parametrize("vec", VECTORS["session_requests"], ids=lambda v: v["name"])
def test_session_request(vec):
    frame = proto.encode_request(vec["action"], vec["id"], int(vec["token"]), vec["key"])
    assert frame.hex() == vec["hex"]


@pytest.mark.parametrize("vec", VECTORS["session_answers"], ids=lambda v: v["name"])
def test_session_answer(vec):
    answer = proto.decode_answer(bytes.fromhex(vec["hex"]))
    assert answer == (vec["id"], STATUS[vec["status"]], int(vec["token"]))


@pytest.mark.parametrize("vec", VECTORS["session_invalid"], ids=lambda v: v["name"])
def test_session_invalid_refused(vec):
    with pytest.raises(InvalidRequestError):
        proto.encode_request(vec["action"], vec["id"], int(vec["token"]), vec["key"])


@pytest.mark.parametrize("vec", VECTORS["session_open_invalid"], ids=lambda v: v["name"])
def test_session_open_invalid_refused(vec):
    with pytest.raises(InvalidRequestError):
        proto.encode_open(vec["version"], vec["ttl_ms"], int(vec["resume"]), vec["source"], vec["auth"])


@pytest.mark.parametrize("vec", VECTORS["session_open_invalid"], ids=lambda v: v["name"])
def test_session_refuses_invalid_open_before_connecting(vec):
    """The session constructor checks its source and auth before any I/O."""
    from locking_center import AsyncSession

    with pytest.raises(InvalidRequestError):
        AsyncSession("127.0.0.1:1", source=vec["source"], auth_token=vec["auth"])
