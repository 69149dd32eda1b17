//! Conformance against a real server at $LC_TEST_ADDRESS (the withdrawal
//! checks also read $LC_TEST_WEB_ADDRESS's JSON API). Each test returns
//! early, printing why, when LC_TEST_ADDRESS is unset.

mod common;

use common::{key_info, unique_key, wait_queue_len};
use locking_center::{CancelToken, Client, Error, LockGuard, WaitOptions};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

fn server() -> Option<String> {
    match std::env::var("LC_TEST_ADDRESS") {
        Ok(a) if !a.is_empty() => Some(a),
        _ => {
            eprintln!("LC_TEST_ADDRESS unset: conformance test skipped");
            None
        }
    }
}

/// True when a try-lock took the key; the guard is detached so the test
/// releases the key itself.
fn took(r: Result<Option<LockGuard>, Error>) -> bool {
    r.unwrap().map(LockGuard::detach).is_some()
}

fn client(addr: &str, source: &str) -> Client {
    Client::new(addr)
        .with_source(source)
        .with_connect_timeout(Duration::from_secs(2))
}

/// Waits until `key` has `n` waiters. With the JSON API this is exact;
/// without it, a pause long enough for a loopback connection to queue.
fn until_queued(key: &str, n: usize) {
    if wait_queue_len(key, n, Duration::from_secs(5)).is_none() {
        thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn lock_then_unlock() {
    let Some(addr) = server() else { return };
    let c = client(&addr, "rust-a");
    let key = unique_key("lock-unlock");
    c.lock(&key).unwrap().detach();
    c.unlock(&key).unwrap();
    // Not held any more: Unlock is refused.
    let err = c.unlock(&key).unwrap_err();
    assert!(matches!(err, Error::Refused), "{err:?}");
}

#[test]
fn try_lock_on_a_held_key_is_none() {
    let Some(addr) = server() else { return };
    let a = client(&addr, "rust-a");
    let b = client(&addr, "rust-b");
    let key = unique_key("trylock");
    let g = a.try_lock(&key).unwrap().expect("free key taken");
    assert!(b.try_lock(&key).unwrap().is_none());
    g.unlock().unwrap();
    let g = b.try_lock(&key).unwrap().expect("released key taken");
    g.unlock().unwrap();
}

#[test]
fn waiters_are_served_in_fifo_order() {
    let Some(addr) = server() else { return };
    let key = unique_key("fifo");
    let holder = client(&addr, "rust-holder");
    holder.lock(&key).unwrap().detach();

    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for (i, name) in ["first", "second", "third"].into_iter().enumerate() {
        let (c, k, tx) = (
            client(&addr, &format!("rust-{name}")),
            key.clone(),
            tx.clone(),
        );
        threads.push(thread::spawn(move || {
            c.lock_timeout(&k, Duration::from_secs(20))
                .unwrap()
                .detach();
            tx.send(name).unwrap();
            thread::sleep(Duration::from_millis(20));
            c.unlock(&k).unwrap();
        }));
        until_queued(&key, i + 1);
    }
    holder.unlock(&key).unwrap();
    let order: Vec<&str> = rx.iter().take(3).collect();
    assert_eq!(order, ["first", "second", "third"]);
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn wait_returns_when_the_holder_releases() {
    let Some(addr) = server() else { return };
    let key = unique_key("wait");
    let a = client(&addr, "rust-a");
    a.lock(&key).unwrap().detach();
    let (b, k) = (client(&addr, "rust-b"), key.clone());
    let waiter = thread::spawn(move || b.wait_timeout(&k, Duration::from_secs(20)));
    until_queued(&key, 1);
    assert!(!waiter.is_finished());
    a.unlock(&key).unwrap();
    waiter.join().unwrap().unwrap();
    // Wait released the key again.
    assert!(took(a.try_lock(&key)));
    a.unlock(&key).unwrap();
}

/// Checks that `key`'s queue empties (when the JSON API is there), then
/// that releasing the holder leaves the key free: the withdrawn waiter was
/// not handed the lock.
fn assert_withdrawn(holder: &Client, key: &str) {
    if std::env::var("LC_TEST_WEB_ADDRESS").is_ok_and(|w| !w.is_empty()) {
        let got = wait_queue_len(key, 0, Duration::from_secs(5));
        assert_eq!(
            got,
            Some(0),
            "waiter still queued (or JSON API unavailable)"
        );
    }
    holder.unlock(key).unwrap();
    assert!(
        took(holder.try_lock(key)),
        "key was granted to a withdrawn waiter"
    );
    holder.unlock(key).unwrap();
}

#[test]
fn timeout_withdraws_the_waiter() {
    let Some(addr) = server() else { return };
    let key = unique_key("timeout");
    let a = client(&addr, "rust-a");
    a.lock(&key).unwrap().detach();
    let err = client(&addr, "rust-b")
        .lock_timeout(&key, Duration::from_millis(300))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout), "{err:?}");
    assert_withdrawn(&a, &key);
}

#[test]
fn cancellation_withdraws_the_waiter() {
    let Some(addr) = server() else { return };
    let key = unique_key("cancel");
    let a = client(&addr, "rust-a");
    a.lock(&key).unwrap().detach();
    let token = CancelToken::new();
    let (b, k, t) = (client(&addr, "rust-b"), key.clone(), token.clone());
    let waiter = thread::spawn(move || b.lock_with(&k, &WaitOptions::new().cancel_token(&t)));
    until_queued(&key, 1);
    token.cancel();
    let err = waiter.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::Cancelled), "{err:?}");
    assert_withdrawn(&a, &key);
}

#[test]
fn reset_by_key_while_waiting_is_the_reset_error() {
    let Some(addr) = server() else { return };
    let key = unique_key("reset-key");
    let a = client(&addr, "rust-a");
    a.lock(&key).unwrap().detach();
    let (b, k) = (client(&addr, "rust-b"), key.clone());
    let waiter = thread::spawn(move || b.lock_timeout(&k, Duration::from_secs(20)));
    until_queued(&key, 1);
    a.reset_by_key(&key).unwrap();
    let err = waiter.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::Reset), "{err:?}");
    // The holder was dropped too.
    assert!(matches!(a.unlock(&key), Err(Error::Refused)));
    // Idempotent.
    a.reset_by_key(&key).unwrap();
}

#[test]
fn reset_by_source_fails_its_waiters_and_frees_its_keys() {
    let Some(addr) = server() else { return };
    let key = unique_key("reset-src");
    let held = unique_key("reset-src-held");
    let source = unique_key("src");
    let a = client(&addr, "rust-a");
    let s = client(&addr, &source);
    a.lock(&key).unwrap().detach();
    s.lock(&held).unwrap().detach();
    let (s2, k) = (s.clone(), key.clone());
    let waiter = thread::spawn(move || s2.lock_timeout(&k, Duration::from_secs(20)));
    until_queued(&key, 1);
    a.reset_by_source(&source).unwrap();
    let err = waiter.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::Reset), "{err:?}");
    assert!(took(a.try_lock(&held)), "source's key was not released");
    a.unlock(&held).unwrap();
    a.unlock(&key).unwrap();
}

#[test]
fn guard_and_closure_forms_release_the_key() {
    let Some(addr) = server() else { return };
    let key = unique_key("guard");
    let c = client(&addr, "rust-a");
    let g = c.lock(&key).unwrap();
    assert!(c.try_lock(&key).unwrap().is_none());
    g.unlock().unwrap();
    {
        let _g = c.lock(&key).unwrap();
    } // dropped while held: released
    let v = c.with_lock(&key, || {
        assert!(c.try_lock(&key).unwrap().is_none());
        42
    });
    assert_eq!(v.unwrap(), 42);
    assert!(took(c.try_lock(&key)));
    c.unlock(&key).unwrap();
}

#[test]
fn over_long_key_is_refused_before_connecting() {
    // No server needed: an address nothing listens on must not even be
    // tried, so the error is Invalid and not Unreachable.
    let c = Client::new("127.0.0.1:1");
    let err = c.lock(&"k".repeat(128)).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    let err = c
        .clone()
        .with_source("s".repeat(128))
        .try_lock("k")
        .unwrap_err();
    assert!(
        matches!(err, Error::Invalid(_)) && err.is_refused(),
        "{err:?}"
    );
    // A valid request to the same address is Unreachable.
    assert!(matches!(c.unlock("k"), Err(Error::Unreachable(_))));
}

#[test]
fn empty_source_is_the_peer_ip() {
    let Some(addr) = server() else { return };
    let key = unique_key("peer-ip");
    let c = client(&addr, "");
    c.lock(&key).unwrap().detach();
    match key_info(&key) {
        None => eprintln!("JSON API unavailable: holder source not checked"),
        Some(None) => panic!("JSON API says {key} is not held"),
        Some(Some(info)) => assert_eq!(info["source"], "127.0.0.1"),
    }
    c.unlock(&key).unwrap();
}
