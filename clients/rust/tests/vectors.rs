//! The shared wire vectors ($LC_VECTORS, else the repository's
//! wire/testdata/vectors.json), byte for byte.

mod common;

use common::{parse_json, unhex, Json};
use locking_center::wire::{self, Action, Answer};
use locking_center::{Client, Error};
use std::path::PathBuf;
use std::time::Duration;

fn vectors() -> Json {
    let path = match std::env::var("LC_VECTORS") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../wire/testdata/vectors.json"),
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    parse_json(&text)
}

fn action(v: &Json) -> Action {
    Action::from_code(v.field("action").num() as u8).expect("known action")
}

#[test]
fn action_codes_match() {
    let v = vectors();
    let actions = v.field("actions");
    for (name, want) in [
        ("lock", Action::Lock),
        ("unlock", Action::Unlock),
        ("reset_by_key", Action::ResetByKey),
        ("reset_by_source", Action::ResetBySource),
        ("trylock", Action::TryLock),
    ] {
        assert_eq!(actions.field(name).num() as u8, want.code(), "{name}");
    }
}

#[test]
fn every_frame_encodes_byte_for_byte() {
    let v = vectors();
    let frames = v.field("frames").arr();
    assert!(!frames.is_empty());
    for f in frames {
        let name = f.field("name").str();
        let got = wire::encode(action(f), f.field("key").str(), f.field("source").str())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, unhex(f.field("hex").str()), "{name}");
    }
}

#[test]
fn every_invalid_entry_is_refused_by_the_encoder() {
    let v = vectors();
    let invalid = v.field("invalid").arr();
    assert!(!invalid.is_empty());
    for f in invalid {
        let name = f.field("name").str();
        match wire::encode(action(f), f.field("key").str(), f.field("source").str()) {
            Err(Error::Invalid(reason)) => {
                assert_eq!(reason, f.field("reason").str(), "{name}")
            }
            other => panic!("{name}: expected Invalid, got {other:?}"),
        }
    }
}

#[test]
fn every_invalid_entry_is_refused_before_connecting() {
    // Port 1 on loopback: nothing listens there, so a connection attempt
    // would give Unreachable. Invalid proves nothing was opened.
    let v = vectors();
    for f in v.field("invalid").arr() {
        let name = f.field("name").str();
        let (key, source) = (f.field("key").str(), f.field("source").str());
        let c = Client::new("127.0.0.1:1")
            .with_source(source)
            .with_connect_timeout(Duration::from_millis(200));
        let result = match action(f) {
            Action::Lock => c.lock(key).map(|_| true),
            Action::Unlock => c.unlock(key).map(|_| true),
            Action::ResetByKey => c.reset_by_key(key).map(|_| true),
            Action::TryLock => c.try_lock(key),
            Action::ResetBySource => c.reset_by_source(source).map(|_| true),
        };
        assert!(
            matches!(result, Err(Error::Invalid(_))),
            "{name}: got {result:?}"
        );
    }
}

#[test]
fn answers_map_to_outcomes() {
    let v = vectors();
    let answers = v.field("answers").arr();
    assert_eq!(answers.len(), 3);
    for a in answers {
        let byte = unhex(a.field("hex").str())[0];
        assert_eq!(a.field("char").str().as_bytes(), [byte]);
        let parsed = Answer::from_byte(byte).expect("known answer");
        assert_eq!(parsed.byte(), byte);
        match parsed {
            Answer::Success => {
                for act in [
                    Action::Lock,
                    Action::Unlock,
                    Action::ResetByKey,
                    Action::ResetBySource,
                    Action::TryLock,
                ] {
                    assert!(matches!(wire::interpret(act, byte), Ok(true)), "{act:?} +");
                }
            }
            Answer::Failure => {
                assert!(matches!(
                    wire::interpret(Action::Lock, byte),
                    Err(Error::Reset)
                ));
                for act in [
                    Action::Unlock,
                    Action::ResetByKey,
                    Action::ResetBySource,
                    Action::TryLock,
                ] {
                    assert!(
                        matches!(wire::interpret(act, byte), Err(Error::Refused)),
                        "{act:?} -"
                    );
                }
            }
            Answer::NotWon => {
                assert!(matches!(wire::interpret(Action::TryLock, byte), Ok(false)));
                for act in [
                    Action::Lock,
                    Action::Unlock,
                    Action::ResetByKey,
                    Action::ResetBySource,
                ] {
                    assert!(
                        matches!(wire::interpret(act, byte), Err(Error::UnexpectedAnswer(_))),
                        "{act:?} #"
                    );
                }
            }
        }
    }
    assert!(matches!(
        wire::interpret(Action::Lock, b'?'),
        Err(Error::UnexpectedAnswer(b'?'))
    ));
}
