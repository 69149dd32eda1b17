//! Client behaviour against a scripted stand-in server on loopback: what
//! goes on the wire, hang-ups on timeout and cancellation, and how odd
//! answers are reported. Runs without the real server.

use locking_center::{CancelToken, Client, Error, WaitOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// What the stand-in saw on one connection.
#[derive(Debug)]
struct Seen {
    frame: Vec<u8>,
    /// True when the client hung up (EOF) before being answered.
    hung_up: bool,
}

/// Accepts one connection, reads a whole frame, then runs `script`.
fn serve_one(
    script: impl FnOnce(&mut TcpStream) -> bool + Send + 'static,
) -> (String, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let frame = read_frame(&mut s);
        let hung_up = script(&mut s);
        let _ = tx.send(Seen { frame, hung_up });
    });
    (addr, rx)
}

fn read_frame(s: &mut TcpStream) -> Vec<u8> {
    let mut head = [0u8; 2];
    s.read_exact(&mut head).unwrap();
    let mut key = vec![0u8; head[1] as usize];
    s.read_exact(&mut key).unwrap();
    let mut ss = [0u8; 1];
    s.read_exact(&mut ss).unwrap();
    let mut source = vec![0u8; ss[0] as usize];
    s.read_exact(&mut source).unwrap();
    let mut frame = head.to_vec();
    frame.extend(key);
    frame.push(ss[0]);
    frame.extend(source);
    frame
}

/// Waits for EOF from the client (its hang-up) for up to 5 s.
fn sees_eof(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0))
}

fn answer(byte: u8) -> impl FnOnce(&mut TcpStream) -> bool + Send + 'static {
    move |s| {
        s.write_all(&[byte]).unwrap();
        false
    }
}

#[test]
fn sends_the_frame_and_maps_plus() {
    let (addr, rx) = serve_one(answer(b'+'));
    Client::new(addr)
        .with_source("svc-a")
        .lock("abc")
        .unwrap()
        .detach();
    assert_eq!(rx.recv().unwrap().frame, b"\x01\x03abc\x05svc-a");
}

#[test]
fn lock_answered_minus_is_reset() {
    let (addr, _rx) = serve_one(answer(b'-'));
    assert!(matches!(Client::new(addr).lock("k"), Err(Error::Reset)));
}

#[test]
fn unlock_answered_minus_is_refused() {
    let (addr, _rx) = serve_one(answer(b'-'));
    let err = Client::new(addr).unlock("k").unwrap_err();
    assert!(matches!(err, Error::Refused) && err.is_refused());
}

#[test]
fn try_lock_not_won_is_none() {
    let (addr, _rx) = serve_one(answer(b'#'));
    assert!(Client::new(addr).try_lock("k").unwrap().is_none());
}

#[test]
fn reset_by_source_sends_an_empty_key() {
    let (addr, rx) = serve_one(answer(b'+'));
    Client::new(addr)
        .with_source("me")
        .reset_by_source("svc-b")
        .unwrap();
    assert_eq!(rx.recv().unwrap().frame, b"\x04\x00\x05svc-b");
    let (addr, rx) = serve_one(answer(b'+'));
    Client::new(addr)
        .with_source("me")
        .reset_by_key("k")
        .unwrap();
    assert_eq!(rx.recv().unwrap().frame, b"\x03\x01k\x00");
}

#[test]
fn closed_without_answer_is_unreachable() {
    let (addr, _rx) = serve_one(|_| false); // drops the connection
    assert!(matches!(
        Client::new(addr).unlock("k"),
        Err(Error::Unreachable(_))
    ));
}

#[test]
fn refused_connection_is_unreachable() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let err = Client::new(addr).lock("k").unwrap_err();
    assert!(matches!(err, Error::Unreachable(_)), "{err:?}");
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn unexpected_byte_is_reported() {
    let (addr, _rx) = serve_one(answer(b'?'));
    assert!(matches!(
        Client::new(addr).unlock("k"),
        Err(Error::UnexpectedAnswer(b'?'))
    ));
}

#[test]
fn timeout_hangs_up_so_the_server_withdraws() {
    let (addr, rx) = serve_one(sees_eof);
    let start = Instant::now();
    let err = Client::new(addr)
        .lock_timeout("k", Duration::from_millis(200))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout), "{err:?}");
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert!(
        rx.recv().unwrap().hung_up,
        "stand-in did not see the hang-up"
    );
}

#[test]
fn cancel_from_another_thread_hangs_up() {
    let (addr, rx) = serve_one(sees_eof);
    let token = CancelToken::new();
    let t2 = token.clone();
    let canceller = thread::spawn(move || {
        thread::sleep(Duration::from_millis(150));
        t2.cancel();
    });
    let err = Client::new(addr)
        .lock_with("k", &WaitOptions::new().cancel_token(&token))
        .unwrap_err();
    assert!(matches!(err, Error::Cancelled), "{err:?}");
    assert!(rx.recv().unwrap().hung_up);
    canceller.join().unwrap();
    // A cancelled token stays cancelled; nothing is opened.
    let err = Client::new("127.0.0.1:1")
        .lock_with("k", &WaitOptions::new().cancel_token(&token))
        .unwrap_err();
    assert!(matches!(err, Error::Cancelled));
}

#[test]
fn grant_crossing_the_timeout_is_kept() {
    // The stand-in answers '+' only after the client's hang-up: the grant
    // crossed the timeout on the wire and must not be lost.
    let (addr, rx) = serve_one(|s| {
        let eof = sees_eof(s);
        let _ = s.write_all(b"+");
        eof
    });
    Client::new(addr)
        .lock_timeout("k", Duration::from_millis(100))
        .unwrap()
        .detach();
    assert!(
        rx.recv().unwrap().hung_up,
        "the grant did not cross a hang-up"
    );
}

/// Accepts `count` connections, answering each frame with `reply(action)`;
/// the receiver yields the action byte of every frame.
fn serve_actions(
    count: usize,
    reply: impl Fn(u8) -> u8 + Send + 'static,
) -> (String, mpsc::Receiver<u8>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for _ in 0..count {
            let (mut s, _) = listener.accept().unwrap();
            let frame = read_frame(&mut s);
            s.write_all(&[reply(frame[0])]).unwrap();
            tx.send(frame[0]).unwrap();
        }
    });
    (addr, rx)
}

#[test]
fn guard_drop_unlocks_and_explicit_unlock_reports() {
    let (addr, rx) = serve_actions(5, |action| if action == 2 { b'-' } else { b'+' });
    let c = Client::new(addr);
    {
        let _g = c.lock("k").unwrap();
    } // dropped while held: unlocks (answered '-', reported on stderr)
    let g = c.lock("k").unwrap();
    assert_eq!(g.key(), "k");
    assert!(matches!(g.unlock(), Err(Error::Refused)));
    // Detached: no unlock is sent.
    assert_eq!(c.lock("k").unwrap().detach(), "k");
    let got: Vec<u8> = rx.iter().take(5).collect();
    assert_eq!(got, vec![1, 2, 1, 2, 1]);
}

#[test]
fn with_lock_unlocks_when_the_closure_panics() {
    let (addr, rx) = serve_actions(2, |_| b'+');
    let c = Client::new(addr);
    let result = std::panic::catch_unwind(|| c.with_lock("k", || panic!("inside with_lock")));
    assert!(result.is_err());
    let got: Vec<u8> = rx.iter().take(2).collect();
    assert_eq!(got, vec![1, 2], "lock, then the unlock");
}

#[test]
fn try_lock_grant_crossing_the_request_timeout_is_kept() {
    // A TryLock has no wait options, only the request timeout. The
    // stand-in answers '+' only after the client's hang-up (say, a slow
    // fsync): the key is this client's and must not be lost.
    let (addr, rx) = serve_one(|s| {
        let eof = sees_eof(s);
        let _ = s.write_all(b"+");
        eof
    });
    let won = Client::new(addr)
        .with_request_timeout(Some(Duration::from_millis(200)))
        .try_lock("k")
        .unwrap();
    assert_eq!(won.map(|g| g.detach()).as_deref(), Some("k"));
    assert!(
        rx.recv().unwrap().hung_up,
        "the grant did not cross a hang-up"
    );
}

#[test]
fn try_lock_refusal_crossing_the_request_timeout_stays_unreachable() {
    // Only a crossing '+' changes the outcome; anything else is still the
    // request timeout's Unreachable.
    let (addr, rx) = serve_one(|s| {
        let eof = sees_eof(s);
        let _ = s.write_all(b"-");
        eof
    });
    let err = Client::new(addr)
        .with_request_timeout(Some(Duration::from_millis(200)))
        .try_lock("k")
        .unwrap_err();
    assert!(
        matches!(&err, Error::Unreachable(e) if e.kind() == std::io::ErrorKind::TimedOut),
        "{err:?}"
    );
    assert!(rx.recv().unwrap().hung_up);
}
