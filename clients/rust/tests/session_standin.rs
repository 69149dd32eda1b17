//! A session against a scripted stand-in server on loopback: after a
//! dropped connection the pending Lock is reissued with its old id, and a
//! reset whose answer was lost is reported as not known and never sent
//! again. Runs without the real server.

use locking_center::{Error, Session};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Reads the open frame; answers `+` with a 10 s TTL and session 7.
fn accept_open(l: &TcpListener) -> (TcpStream, u64) {
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 14];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head[0], 16);
    let resume = u64::from_be_bytes(head[6..14].try_into().unwrap());
    for _ in 0..2 {
        let mut n = [0u8; 1];
        s.read_exact(&mut n).unwrap();
        let mut skip = vec![0u8; n[0] as usize];
        s.read_exact(&mut skip).unwrap();
    }
    let mut answer = vec![b'+'];
    answer.extend(10_000u32.to_be_bytes());
    answer.extend(7u64.to_be_bytes());
    s.write_all(&answer).unwrap();
    (s, resume)
}

/// One request: (action, id, key).
fn request(s: &mut TcpStream) -> (u8, u32, String) {
    let mut head = [0u8; 14];
    s.read_exact(&mut head).unwrap();
    let mut key = vec![0u8; head[13] as usize];
    s.read_exact(&mut key).unwrap();
    let id = u32::from_be_bytes(head[1..5].try_into().unwrap());
    (head[0], id, String::from_utf8(key).unwrap())
}

fn answer(s: &mut TcpStream, id: u32, status: u8, token: u64) {
    let mut a = id.to_be_bytes().to_vec();
    a.push(status);
    a.extend(token.to_be_bytes());
    s.write_all(&a).unwrap();
}

#[test]
fn a_pending_lock_is_reissued_with_its_id_and_a_lost_reset_is_not_resent() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    let server = thread::spawn(move || {
        let (mut s, resume) = accept_open(&l);
        assert_eq!(resume, 0);
        let mut lock_id = None;
        let mut reset = false;
        while lock_id.is_none() || !reset {
            match request(&mut s) {
                (1, id, k) if k == "k" => lock_id = Some(id),
                (3, _, k) if k == "r" => reset = true,
                (7, id, _) => answer(&mut s, id, b'+', 0),
                other => panic!("unexpected {other:?}"),
            }
        }
        drop(s); // the grant is made, its answer lost with the connection
        let (mut s, resume) = accept_open(&l);
        assert_eq!(resume, 7, "a resume of the session");
        loop {
            match request(&mut s) {
                (1, id, k) if k == "k" => {
                    assert_eq!(Some(id), lock_id, "reissued with its old id");
                    answer(&mut s, id, b'+', 42);
                }
                // The guard's release when the test drops it.
                (2, id, k) if k == "k" => answer(&mut s, id, b'+', 42),
                (8, id, _) => {
                    answer(&mut s, id, b'+', 0);
                    break;
                }
                (7, id, _) => answer(&mut s, id, b'+', 0),
                other => panic!("sent again blindly, or unexpected: {other:?}"),
            }
        }
        tx.send(()).unwrap();
    });
    let s = Session::builder(addr).open().unwrap();
    let locker = {
        let s = s.clone();
        thread::spawn(move || s.lock("k").map(|g| g.token()))
    };
    let reset = s.reset_by_key("r");
    assert!(matches!(reset, Err(Error::OutcomeUnknown)), "{reset:?}");
    let token = locker.join().unwrap().expect("the reissued Lock's grant");
    assert_eq!(token, 42);
    s.close().unwrap();
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    server.join().unwrap();
}
