//! The shared wire vectors, byte for byte: every key of the file.
//! ($LC_VECTORS, else the copy shipped in the crate.)

mod common;

use common::{env, unhex, vectors};
use locking_center::wire::{self, Action, SessionAction};
use locking_center::{Client, Error, Session};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str()
        .unwrap_or_else(|| panic!("{k} is not a string in {v}"))
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} is not a number in {v}"))
}

/// A 64-bit value: the vectors write them as decimal strings.
fn big(v: &Value, k: &str) -> u64 {
    s(v, k).parse().unwrap_or_else(|e| panic!("{k}: {e}"))
}

fn entries<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    let a = v[k].as_array().unwrap_or_else(|| panic!("{k} missing"));
    assert!(!a.is_empty(), "{k} is empty");
    a
}

fn action(v: &Value) -> Action {
    Action::from_code(n(v, "action") as u8).expect("known action")
}

fn session_action(v: &Value) -> SessionAction {
    SessionAction::from_code(n(v, "action") as u8).expect("known session action")
}

fn bytes13(hex: &str) -> [u8; 13] {
    unhex(hex).try_into().expect("13 bytes")
}

#[test]
fn action_codes_match() {
    let v = vectors();
    for (name, want) in [
        ("lock", Action::Lock),
        ("unlock", Action::Unlock),
        ("reset_by_key", Action::ResetByKey),
        ("reset_by_source", Action::ResetBySource),
        ("trylock", Action::TryLock),
    ] {
        assert_eq!(n(&v["actions"], name), u64::from(want.code()), "{name}");
    }
    let sa = &v["session_actions"];
    assert_eq!(n(sa, "open"), u64::from(wire::OPEN));
    for (name, want) in [
        ("lock", SessionAction::Lock),
        ("unlock", SessionAction::Unlock),
        ("reset_by_key", SessionAction::ResetByKey),
        ("reset_by_source", SessionAction::ResetBySource),
        ("trylock", SessionAction::TryLock),
        ("cancel", SessionAction::Cancel),
        ("ping", SessionAction::Ping),
        ("close", SessionAction::Close),
    ] {
        assert_eq!(n(sa, name), u64::from(want.code()), "{name}");
    }
}

#[test]
fn every_frame_encodes_byte_for_byte() {
    let v = vectors();
    for f in entries(&v, "frames") {
        let name = s(f, "name");
        let got = wire::encode(action(f), s(f, "key"), s(f, "source"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, unhex(s(f, "hex")), "{name}");
    }
}

#[test]
fn every_invalid_entry_is_refused_by_the_encoder_and_before_connecting() {
    let v = vectors();
    // An address nothing listens on: an error other than Invalid would
    // mean the client tried to connect.
    for f in entries(&v, "invalid") {
        let name = s(f, "name");
        match wire::encode(action(f), s(f, "key"), s(f, "source")) {
            Err(Error::Invalid(_)) => {}
            other => panic!("{name}: expected Invalid, got {other:?}"),
        }
        let c = Client::new("127.0.0.1:1").with_source(s(f, "source"));
        let key = s(f, "key");
        let err = match action(f) {
            Action::Lock => c.lock(key).map(|g| g.detach()).map(drop).unwrap_err(),
            Action::TryLock => c.try_lock(key).map(drop).unwrap_err(),
            Action::Unlock => c.unlock(key).unwrap_err(),
            Action::ResetByKey => c.reset_by_key(key).unwrap_err(),
            Action::ResetBySource => c.reset_by_source(s(f, "source")).unwrap_err(),
        };
        assert!(matches!(err, Error::Invalid(_)), "{name}: {err:?}");
    }
}

#[test]
fn answers_map_to_outcomes() {
    let v = vectors();
    for a in entries(&v, "answers") {
        let byte = unhex(s(a, "hex"))[0];
        assert_eq!(byte, s(a, "char").as_bytes()[0]);
        let answer = wire::Answer::from_byte(byte).expect("known answer");
        assert_eq!(answer.byte(), byte);
    }
    assert!(matches!(wire::interpret(Action::Lock, b'+'), Ok(true)));
    assert!(matches!(
        wire::interpret(Action::Lock, b'-'),
        Err(Error::Reset)
    ));
    assert!(matches!(wire::interpret(Action::TryLock, b'#'), Ok(false)));
    assert!(matches!(
        wire::interpret(Action::Unlock, b'-'),
        Err(Error::Refused)
    ));
    assert!(matches!(
        wire::interpret(Action::Unlock, b'#'),
        Err(Error::UnexpectedAnswer(b'#'))
    ));
}

#[test]
fn every_session_open_encodes_byte_for_byte() {
    let v = vectors();
    for f in entries(&v, "session_open") {
        let name = s(f, "name");
        let got = wire::encode_open(&wire::Open {
            version: n(f, "version") as u8,
            ttl_ms: n(f, "ttl_ms") as u32,
            resume: big(f, "resume"),
            source: s(f, "source"),
            auth: s(f, "auth").as_bytes(),
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, unhex(s(f, "hex")), "{name}");
    }
}

#[test]
fn every_session_open_answer_decodes() {
    let v = vectors();
    for f in entries(&v, "session_open_answers") {
        let name = s(f, "name");
        let got = wire::decode_open_answer(&bytes13(s(f, "hex")));
        assert_eq!(got.status, s(f, "status").as_bytes()[0], "{name}");
        assert_eq!(u64::from(got.ttl_ms), n(f, "ttl_ms"), "{name}");
        assert_eq!(got.session, big(f, "session"), "{name}");
    }
}

#[test]
fn every_session_request_encodes_byte_for_byte() {
    let v = vectors();
    for f in entries(&v, "session_requests") {
        let name = s(f, "name");
        let mut got = Vec::new();
        wire::encode_request(
            &mut got,
            session_action(f),
            n(f, "id") as u32,
            big(f, "token"),
            s(f, "key"),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, unhex(s(f, "hex")), "{name}");
    }
}

#[test]
fn every_session_answer_decodes() {
    let v = vectors();
    for f in entries(&v, "session_answers") {
        let name = s(f, "name");
        let got = wire::decode_answer(&bytes13(s(f, "hex")));
        assert_eq!(u64::from(got.id), n(f, "id"), "{name}");
        assert_eq!(got.status, s(f, "status").as_bytes()[0], "{name}");
        assert_eq!(got.token, big(f, "token"), "{name}");
    }
}

#[test]
fn every_invalid_session_request_is_refused() {
    let v = vectors();
    for f in entries(&v, "session_invalid") {
        let name = s(f, "name");
        let mut buf = Vec::new();
        let got = wire::encode_request(
            &mut buf,
            session_action(f),
            n(f, "id") as u32,
            big(f, "token"),
            s(f, "key"),
        );
        assert!(matches!(got, Err(Error::Invalid(_))), "{name}: {got:?}");
        assert!(buf.is_empty(), "{name}: bytes written");
    }
}

#[test]
fn every_invalid_session_open_is_refused_before_connecting() {
    let v = vectors();
    // A listener that records whether anyone connected.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    for f in entries(&v, "session_open_invalid") {
        let name = s(f, "name");
        let got = wire::encode_open(&wire::Open {
            version: n(f, "version") as u8,
            ttl_ms: n(f, "ttl_ms") as u32,
            resume: big(f, "resume"),
            source: s(f, "source"),
            auth: s(f, "auth").as_bytes(),
        });
        assert!(matches!(got, Err(Error::Invalid(_))), "{name}: {got:?}");
        let err = Session::builder(addr.clone())
            .source(s(f, "source"))
            .auth_token(s(f, "auth"))
            .ttl(Duration::from_millis(n(f, "ttl_ms")))
            .open()
            .unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{name}: {err:?}");
    }
    assert!(listener.accept().is_err(), "a refused open connected");
}

/// The original server's frames: sent as they are to the real server, each
/// is answered at once (Unlock and ResetByKey of a key this test holds,
/// ResetBySource of a source this test holds a key with).
#[test]
fn original_frames_are_answered_by_the_server() {
    let Some(addr) = env("LC_TEST_ADDRESS") else {
        eprintln!("LC_TEST_ADDRESS unset: original frames not sent");
        return;
    };
    let v = vectors();
    for f in entries(&v, "original_frames") {
        let name = s(f, "name");
        let frame = unhex(s(f, "hex"));
        let (key, source) = (s(f, "key"), s(f, "source"));
        // Hold what the frame releases, so '+' is the answer.
        let holder = Client::new(addr.clone()).with_source(source);
        let held_key = if key.is_empty() {
            format!("rust-original-{}", std::process::id())
        } else {
            key.to_owned()
        };
        Client::new(addr.clone()).reset_by_key(&held_key).unwrap();
        holder.lock(&held_key).unwrap().detach();
        let mut c = TcpStream::connect(&addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(&frame).unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b)
            .unwrap_or_else(|e| panic!("{name}: no answer: {e}"));
        assert_eq!(b[0], b'+', "{name}");
        // The key is free again.
        let g = Client::new(addr.clone()).try_lock(&held_key).unwrap();
        assert!(g.is_some(), "{name}: key still held");
    }
}

#[test]
fn shipped_copy_matches_the_repository() {
    // Under clients/run-tests, LC_VECTORS is the repository's file: the copy
    // in the crate must be the same bytes.
    let Some(path) = env("LC_VECTORS") else {
        return;
    };
    let repo = std::fs::read(path).unwrap();
    let copy = std::fs::read(common::shipped_vectors()).unwrap();
    assert!(
        repo == copy,
        "tests/vectors.json differs from $LC_VECTORS: copy it again"
    );
}
