//! Sessions against the real server: $LC_TEST_ADDRESS (and its web port
//! $LC_TEST_WEB_ADDRESS), or servers of the tests' own from $LC_SERVER_BIN
//! for restarts and expiry. Each test returns early, saying why, when what
//! it needs is unset.

mod common;

use common::{
    env, eventually, http, key_info, key_info_at, spawn_child, unique_key, wait_for_line,
    wait_queue_len, OwnServer,
};
use locking_center::{CancelToken, Client, Error, LostReason, Session, WaitOptions};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

fn server() -> Option<String> {
    let a = env("LC_TEST_ADDRESS");
    if a.is_none() {
        eprintln!("LC_TEST_ADDRESS unset: session test skipped");
    }
    a
}

fn open(addr: &str, source: &str) -> Session {
    Session::builder(addr)
        .source(source)
        .ttl(Duration::from_secs(10))
        .open()
        .expect("open a session")
}

/// Waits until `key` has `n` waiters (exact with the JSON API).
fn until_queued(key: &str, n: usize) {
    if env("LC_TEST_WEB_ADDRESS").is_some() {
        assert_eq!(
            wait_queue_len(key, n, Duration::from_secs(5)),
            Some(n),
            "queue of {key}"
        );
    } else {
        thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn lock_returns_a_token_and_tokens_strictly_increase() {
    let Some(addr) = server() else { return };
    let s = open(&addr, "rust-tokens");
    assert_ne!(s.id(), 0);
    assert_eq!(s.ttl(), Duration::from_secs(10));
    let key = unique_key("tokens");
    let mut last = 0;
    for _ in 0..20 {
        let g = s.lock(&key).unwrap();
        assert!(g.token() > last, "token {} after {last}", g.token());
        last = g.token();
        if let Some(Some(info)) = key_info(&key) {
            assert_eq!(info["token"].as_u64(), Some(g.token()));
            assert_eq!(info["session"], format!("{:016x}", s.id()));
        }
        g.unlock().unwrap();
    }
    // TryLock tokens come from the same sequence; a held key is None.
    let g = s.try_lock(&key).unwrap().expect("free");
    assert!(g.token() > last);
    assert!(s.try_lock(&key).unwrap().is_none(), "held by this session");
    let token = g.token();
    g.unlock().unwrap();
    // The same grant again: refused, nothing released.
    assert!(matches!(s.unlock(&key, token), Err(Error::Refused)));
    s.close().unwrap();
}

#[test]
fn many_threads_share_one_session() {
    let Some(addr) = server() else { return };
    let s = open(&addr, "rust-many");
    let shared = unique_key("many-shared");
    let counter = std::sync::Arc::new(std::sync::Mutex::new((0u32, 0u32)));
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let (s, shared, counter) = (s.clone(), shared.clone(), counter.clone());
            thread::spawn(move || {
                let own = s.lock(&format!("{shared}-{i}")).unwrap();
                for _ in 0..5 {
                    let g = s.lock_timeout(&shared, Duration::from_secs(20)).unwrap();
                    {
                        let mut c = counter.lock().unwrap();
                        c.0 += 1;
                        assert_eq!(c.1, 0, "two threads inside the lock");
                        c.1 = 1;
                    }
                    thread::sleep(Duration::from_millis(1));
                    counter.lock().unwrap().1 = 0;
                    g.unlock().unwrap();
                }
                own.unlock().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(counter.lock().unwrap().0, 80);
    s.close().unwrap();
}

#[test]
fn fifo_across_sessions() {
    let Some(addr) = server() else { return };
    let key = unique_key("fifo");
    let holder = open(&addr, "rust-holder");
    let g = holder.lock(&key).unwrap();
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for (i, name) in ["first", "second", "third"].into_iter().enumerate() {
        let (s, k, tx) = (
            open(&addr, &format!("rust-{name}")),
            key.clone(),
            tx.clone(),
        );
        threads.push(thread::spawn(move || {
            let g = s.lock_timeout(&k, Duration::from_secs(20)).unwrap();
            tx.send((name, g.token())).unwrap();
            g.unlock().unwrap();
            s.close().unwrap();
        }));
        until_queued(&key, i + 1);
    }
    let first_token = g.token();
    g.unlock().unwrap();
    let order: Vec<(&str, u64)> = rx.iter().take(3).collect();
    assert_eq!(
        order.iter().map(|o| o.0).collect::<Vec<_>>(),
        ["first", "second", "third"]
    );
    assert!(order[0].1 > first_token && order[1].1 > order[0].1 && order[2].1 > order[1].1);
    for t in threads {
        t.join().unwrap();
    }
    holder.close().unwrap();
}

/// The waiter is gone from the queue, and releasing the holder leaves the
/// key free (the withdrawn Lock was not granted).
fn assert_withdrawn(holder: &Session, guard: locking_center::SessionGuard, key: &str) {
    if env("LC_TEST_WEB_ADDRESS").is_some() {
        assert_eq!(
            wait_queue_len(key, 0, Duration::from_secs(5)),
            Some(0),
            "waiter still queued"
        );
    }
    guard.unlock().unwrap();
    assert!(
        holder.try_lock(key).unwrap().is_some(),
        "granted to a withdrawn waiter"
    );
}

#[test]
fn timeout_sends_cancel_and_withdraws_the_waiter() {
    let Some(addr) = server() else { return };
    let key = unique_key("s-timeout");
    let a = open(&addr, "rust-a");
    let b = open(&addr, "rust-b");
    let g = a.lock(&key).unwrap();
    let start = Instant::now();
    let err = b
        .lock_timeout(&key, Duration::from_millis(300))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout), "{err:?}");
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert_withdrawn(&a, g, &key);
    // The session goes on: same connection, other calls work.
    assert!(b.err().is_none());
    let _g = b
        .try_lock(&unique_key("s-timeout-after"))
        .unwrap()
        .expect("free");
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn cancel_token_withdraws_the_waiter() {
    let Some(addr) = server() else { return };
    let key = unique_key("s-cancel");
    let a = open(&addr, "rust-a");
    let b = open(&addr, "rust-b");
    let g = a.lock(&key).unwrap();
    let token = CancelToken::new();
    let (b2, k, t) = (b.clone(), key.clone(), token.clone());
    let waiter = thread::spawn(move || {
        b2.lock_with(&k, &WaitOptions::new().cancel_token(&t))
            .map(drop)
    });
    until_queued(&key, 1);
    token.cancel();
    let err = waiter.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::Cancelled), "{err:?}");
    assert_withdrawn(&a, g, &key);
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn guard_drop_releases_and_close_releases_everything() {
    let Some(addr) = server() else { return };
    let key = unique_key("s-drop");
    let other = unique_key("s-drop-other");
    let a = open(&addr, "rust-a");
    let probe = Client::new(addr.clone());
    {
        let _g = a.lock(&key).unwrap();
        assert!(probe.try_lock(&key).unwrap().is_none());
    }
    // The Unlock by token queued by the drop is written before this TryLock.
    assert!(a.try_lock(&key).unwrap().is_some());
    let _kept = a.lock(&other).unwrap();
    a.close().unwrap();
    // Close released the key held by a guard still alive.
    assert!(probe.try_lock(&other).unwrap().is_some());
    assert!(matches!(a.lock(&key), Err(Error::SessionClosed)));
}

#[test]
fn reset_while_waiting_is_reset_not_lost() {
    let Some(addr) = server() else { return };
    let key = unique_key("s-reset");
    let a = open(&addr, "rust-a");
    let b = open(&addr, "rust-b");
    let _g = a.lock(&key).unwrap();
    let (b2, k) = (b.clone(), key.clone());
    let waiter = thread::spawn(move || b2.lock_timeout(&k, Duration::from_secs(20)).map(drop));
    until_queued(&key, 1);
    a.reset_by_key(&key).unwrap();
    let err = waiter.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::Reset), "{err:?}");
    assert!(b.err().is_none(), "a refused Lock is not a lost session");
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn async_lock_timeout_and_lost_future() {
    let Some(addr) = server() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let key = unique_key("s-async");
        let a = Session::builder(addr.as_str())
            .source("rust-async-a")
            .open_async()
            .await
            .unwrap();
        let b = Session::builder(addr.as_str())
            .source("rust-async-b")
            .open_async()
            .await
            .unwrap();
        let g = a.lock_async(&key).await.unwrap();
        // Dropping the future at the timeout sends Cancel.
        let r = tokio::time::timeout(Duration::from_millis(300), b.lock_async(&key)).await;
        assert!(r.is_err(), "the lock should have timed out");
        if env("LC_TEST_WEB_ADDRESS").is_some() {
            let k = key.clone();
            let q =
                tokio::task::spawn_blocking(move || wait_queue_len(&k, 0, Duration::from_secs(5)))
                    .await
                    .unwrap();
            assert_eq!(q, Some(0), "the dropped Lock is still queued");
        }
        // Many concurrent locks from tasks on one session.
        let keys: Vec<String> = (0..50).map(|i| format!("{key}-{i}")).collect();
        let guards = futures_join(keys.iter().map(|k| b.lock_async(k))).await;
        let mut tokens: Vec<u64> = guards.iter().map(|g| g.as_ref().unwrap().token()).collect();
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 50);
        for g in guards {
            g.unwrap().unlock_async().await.unwrap();
        }
        let token = g.token();
        g.unlock_async().await.unwrap();
        assert!(matches!(
            a.unlock_async(&key, token).await,
            Err(Error::Refused)
        ));
        // End b from the web API: its lost() future completes.
        if let Some(web) = env("LC_TEST_WEB_ADDRESS") {
            let lost = b.lost();
            let path = format!("/api/v1/sessions/{:016x}/end", b.id());
            let (status, body) =
                tokio::task::spawn_blocking(move || http(&web, "POST", &path, "").unwrap())
                    .await
                    .unwrap();
            assert_eq!(status, 200, "{body}");
            let err = tokio::time::timeout(Duration::from_secs(5), lost)
                .await
                .expect("lost() completes");
            assert!(
                matches!(err, Error::SessionLost(LostReason::ResumeRefused)),
                "{err:?}"
            );
            assert!(matches!(
                b.lock_async(&key).await,
                Err(Error::SessionLost(_))
            ));
        }
        a.close_async().await.unwrap();
    });
}

/// Awaits every future concurrently (a small join_all, to need no more
/// dependencies): each is polled until it is ready.
async fn futures_join<F: std::future::Future>(fs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = fs.map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (f, r) in futures.iter_mut().zip(results.iter_mut()) {
            if r.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *r = Some(v),
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    results.into_iter().map(Option::unwrap).collect()
}

/// Child side of `killed_holder_keys_pass_on_within_the_ttl`: holds the
/// keys of $LC_CHILD_KEYS on a 1 s session, says READY, waits to be killed.
#[test]
#[ignore = "run as a child process by killed_holder_keys_pass_on_within_the_ttl"]
fn child_holds_keys_until_killed() {
    let addr = env("LC_CHILD_ADDRESS").expect("LC_CHILD_ADDRESS");
    let s = Session::builder(addr)
        .source("rust-child")
        .ttl(Duration::from_secs(1))
        .open()
        .unwrap();
    let guards: Vec<_> = env("LC_CHILD_KEYS")
        .unwrap()
        .split(',')
        .map(|k| s.lock(k).unwrap())
        .collect();
    println!("READY");
    thread::sleep(Duration::from_secs(60));
    drop(guards);
}

#[test]
fn killed_holder_keys_pass_on_within_the_ttl() {
    let Some(addr) = server() else { return };
    let keys: Vec<String> = (0..5).map(|i| unique_key(&format!("killed-{i}"))).collect();
    let joined = keys.join(",");
    let mut child = spawn_child(
        "child_holds_keys_until_killed",
        &[("LC_CHILD_ADDRESS", &addr), ("LC_CHILD_KEYS", &joined)],
    );
    wait_for_line(&mut child, "READY");
    let waiter = open(&addr, "rust-next");
    let handles: Vec<_> = keys
        .iter()
        .map(|k| {
            let (s, k) = (waiter.clone(), k.clone());
            thread::spawn(move || {
                s.lock_timeout(&k, Duration::from_secs(10))
                    .map(|g| (Instant::now(), g))
            })
        })
        .collect();
    for k in &keys {
        until_queued(k, 1);
    }
    let killed = Instant::now();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    for h in handles {
        let (at, g) = h.join().unwrap().expect("granted after the holder died");
        let after = at - killed;
        eprintln!("key passed on {after:?} after SIGKILL (TTL 1 s)");
        assert!(
            after <= Duration::from_secs(2),
            "took {after:?}, more than TTL + 1 s"
        );
        g.unlock().unwrap();
    }
    waiter.close().unwrap();
}

/// Child side of `normal_guard_drops_print_nothing`.
#[test]
#[ignore = "run as a child process by normal_guard_drops_print_nothing"]
fn child_drops_guards() {
    let addr = env("LC_CHILD_ADDRESS").expect("LC_CHILD_ADDRESS");
    let key = unique_key("quiet");
    {
        let _g = Client::new(addr.clone()).lock(&key).unwrap();
    }
    let s = Session::open(addr).unwrap();
    {
        let _g = s.lock(&key).unwrap();
    }
    s.close().unwrap();
    println!("DONE");
}

#[test]
fn normal_guard_drops_print_nothing() {
    let Some(addr) = server() else { return };
    let child = spawn_child("child_drops_guards", &[("LC_CHILD_ADDRESS", &addr)]);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("DONE"),
        "{stdout}{stderr}"
    );
    assert!(
        !stderr.contains("locking-center"),
        "a guard drop printed: {stderr}"
    );
    assert!(
        !stdout.contains("locking-center"),
        "a guard drop printed: {stdout}"
    );
}

#[test]
fn resume_after_a_restart_with_data_path() {
    let dir = std::env::temp_dir().join(format!("lc-rust-{}", common::unique_key("wal")));
    std::fs::create_dir_all(&dir).unwrap();
    let wal = dir.join("wal.log");
    let wal_s = wal.to_str().unwrap().to_owned();
    let Some(mut srv) = OwnServer::start(&[("DATA_PATH", &wal_s)]) else {
        return;
    };
    let s = Session::builder(srv.address.as_str())
        .ttl(Duration::from_secs(5))
        .source("rust-resume")
        .open()
        .unwrap();
    let key = unique_key("resume");
    let g = s.lock(&key).unwrap();
    let token = g.token();
    srv.stop();
    srv.restart();
    // A call made now waits for the resumed connection.
    let other = unique_key("resume-other");
    let g2 = s.try_lock(&other);
    let g2 = match g2 {
        Err(Error::Disconnected) => s.try_lock(&other), // sent on the dying connection
        r => r,
    }
    .unwrap()
    .expect("free key after the resume");
    assert!(s.err().is_none());
    let info = key_info_at(&srv.web, &key)
        .unwrap()
        .expect("held across the restart");
    assert_eq!(
        info["token"].as_u64(),
        Some(token),
        "the hold keeps its token"
    );
    assert_eq!(info["session"], format!("{:016x}", s.id()));
    assert!(g2.token() > token);
    g.unlock().unwrap();
    g2.unlock().unwrap();
    s.close().unwrap();
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn session_lost_past_its_ttl_is_reported() {
    let Some(mut srv) = OwnServer::start(&[]) else {
        return;
    };
    let s = Session::builder(srv.address.as_str())
        .ttl(Duration::from_secs(1))
        .open()
        .unwrap();
    let key = unique_key("lost");
    let g = s.lock(&key).unwrap();
    let (lost_tx, lost_rx) = mpsc::channel();
    let s2 = s.clone();
    let watcher = thread::spawn(move || lost_tx.send((Instant::now(), s2.wait_lost())).unwrap());
    let stopped = Instant::now();
    srv.stop(); // and never back: the resume cannot succeed within the TTL
    let (_, err) = lost_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("lost reported");
    let took = stopped.elapsed();
    eprintln!("session lost reported {took:?} after the server stopped (TTL 1 s)");
    assert!(
        matches!(err, Error::SessionLost(LostReason::TtlPassed)),
        "{err:?}"
    );
    assert!(took <= Duration::from_millis(2500), "took {took:?}");
    watcher.join().unwrap();
    assert!(matches!(g.unlock(), Err(Error::SessionLost(_))));
    assert!(matches!(s.lock(&key), Err(Error::SessionLost(_))));
    assert!(s.err().is_some_and(|e| e.is_session_lost()));
    assert!(matches!(s.close(), Err(Error::SessionLost(_))));
}

/// A restart without DATA_PATH forgets the session: the resume is refused
/// and the session reported lost; `with_lock` reports it.
#[test]
fn with_lock_reports_a_session_lost_meanwhile() {
    let Some(mut srv) = OwnServer::start(&[]) else {
        return;
    };
    let s = Session::builder(srv.address.as_str())
        .ttl(Duration::from_secs(5))
        .open()
        .unwrap();
    let key = unique_key("with-lock-lost");
    let r = s.with_lock(&key, |token| {
        assert!(token > 0);
        srv.stop();
        srv.restart();
        assert!(
            eventually(Duration::from_secs(5), || s.err().is_some()),
            "loss not noticed"
        );
        7
    });
    assert!(
        matches!(r, Err(Error::SessionLost(LostReason::ResumeRefused))),
        "{r:?}"
    );
}
