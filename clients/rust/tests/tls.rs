//! TLS against real servers, sessions and the v1 client:
//! $LC_TEST_TLS_ADDRESS (TLS_CERT/TLS_KEY),
//! $LC_TEST_MTLS_ADDRESS (TLS_CLIENT_CA too), with the PEM files of
//! $LC_TEST_TLS_DIR. Without them the tests say so and return, except under
//! CI=true, where they fail.
#![cfg(feature = "tls")]

mod common;

use common::{env, unique_key};
use locking_center::{Client, Error, Session, TlsConfig};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// (address, PEM folder) of `var`, or `None` (skipped loudly; a failure
/// under CI=true).
fn server(var: &str, test: &str) -> Option<(String, PathBuf)> {
    match (env(var), env("LC_TEST_TLS_DIR")) {
        (Some(a), Some(d)) => Some((a, PathBuf::from(d))),
        _ => {
            assert!(
                env("CI").as_deref() != Some("true"),
                "{test}: {var} / LC_TEST_TLS_DIR unset under CI=true"
            );
            eprintln!("SKIPPED {test}: {var} unset (no TLS server to test against)");
            None
        }
    }
}

fn open(addr: &str, tls: TlsConfig) -> Result<Session, Error> {
    Session::builder(addr)
        .tls(tls)
        .ttl(Duration::from_secs(10))
        .connect_timeout(Duration::from_secs(3))
        .open()
}

fn lock_and_close(s: Session) {
    let key = unique_key("tls");
    let g = s.lock(&key).expect("lock over TLS");
    assert!(g.token() > 0);
    assert!(s.try_lock(&key).unwrap().is_none());
    g.unlock().unwrap();
    s.close().unwrap();
}

#[test]
fn a_session_over_tls_with_the_test_ca() {
    let Some((addr, dir)) = server("LC_TEST_TLS_ADDRESS", "a_session_over_tls_with_the_test_ca")
    else {
        return;
    };
    let tls = TlsConfig::builder()
        .ca_file(dir.join("ca.pem"))
        .build()
        .unwrap();
    lock_and_close(open(&addr, tls).expect("open over TLS"));
    // The certificate names localhost too.
    let port = addr.rsplit_once(':').unwrap().1;
    let tls = TlsConfig::builder()
        .ca_file(dir.join("ca.pem"))
        .build()
        .unwrap();
    lock_and_close(open(&format!("localhost:{port}"), tls).expect("open over TLS by name"));
}

#[test]
fn a_wrong_server_name_is_refused() {
    let Some((addr, dir)) = server("LC_TEST_TLS_ADDRESS", "a_wrong_server_name_is_refused") else {
        return;
    };
    let tls = TlsConfig::builder()
        .ca_file(dir.join("ca.pem"))
        .server_name("wrong.invalid")
        .build()
        .unwrap();
    match open(&addr, tls) {
        Err(Error::Unreachable(e)) => {
            let why = e.to_string();
            assert!(why.contains("certificate"), "{why}");
        }
        other => panic!("a wrong name was accepted: {other:?}"),
    }
}

#[test]
fn an_unrelated_ca_is_refused() {
    let Some((addr, dir)) = server("LC_TEST_TLS_ADDRESS", "an_unrelated_ca_is_refused") else {
        return;
    };
    let tls = TlsConfig::builder()
        .ca_file(dir.join("other-ca.pem"))
        .build()
        .unwrap();
    assert!(matches!(open(&addr, tls), Err(Error::Unreachable(_))));
}

#[test]
fn mutual_tls_with_a_client_certificate() {
    let Some((addr, dir)) = server(
        "LC_TEST_MTLS_ADDRESS",
        "mutual_tls_with_a_client_certificate",
    ) else {
        return;
    };
    let tls = TlsConfig::builder()
        .ca_file(dir.join("ca.pem"))
        .client_cert_files(dir.join("client.pem"), dir.join("client-key.pem"))
        .build()
        .unwrap();
    lock_and_close(open(&addr, tls).expect("open with a client certificate"));
}

#[test]
fn mutual_tls_without_a_client_certificate_is_refused() {
    let Some((addr, dir)) = server(
        "LC_TEST_MTLS_ADDRESS",
        "mutual_tls_without_a_client_certificate_is_refused",
    ) else {
        return;
    };
    let tls = TlsConfig::builder()
        .ca_file(dir.join("ca.pem"))
        .build()
        .unwrap();
    assert!(matches!(open(&addr, tls), Err(Error::Unreachable(_))));
}

/// A v1 client for `addr` with the test CA (and the client certificate
/// when `mutual`).
fn v1(addr: &str, dir: &Path, mutual: bool) -> Client {
    let mut tls = TlsConfig::builder().ca_file(dir.join("ca.pem"));
    if mutual {
        tls = tls.client_cert_files(dir.join("client.pem"), dir.join("client-key.pem"));
    }
    Client::new(addr)
        .with_source("rust-v1-tls")
        .with_connect_timeout(Duration::from_secs(3))
        .with_tls(tls.build().unwrap())
}

/// Lock, TryLock (held and free), Unlock (held and not), and a Lock that
/// gives up: its hang-up (close_notify, then FIN) withdraws the waiter.
fn v1_round(c: &Client) {
    let key = unique_key("v1-tls");
    let g = c.lock(&key).expect("v1 lock over TLS");
    assert!(c.try_lock(&key).unwrap().is_none(), "TryLock of a held key");
    let start = Instant::now();
    let err = c
        .lock_timeout(&key, Duration::from_millis(300))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout), "{err:?}");
    // The client returns once the server closed the connection it hung up
    // on (or after a 2 s grace): well before, the waiter is withdrawn, and
    // the release below leaves the key free.
    assert!(
        start.elapsed() < Duration::from_millis(2000),
        "the server did not close a hung-up waiter's connection: {:?}",
        start.elapsed()
    );
    g.unlock().expect("v1 unlock over TLS");
    c.try_lock(&key)
        .unwrap()
        .expect("key granted to a withdrawn waiter")
        .unlock()
        .unwrap();
    assert!(matches!(c.unlock(&key), Err(Error::Refused)));
}

#[test]
fn v1_requests_over_tls() {
    let Some((addr, dir)) = server("LC_TEST_TLS_ADDRESS", "v1_requests_over_tls") else {
        return;
    };
    v1_round(&v1(&addr, &dir, false));
    // By name: the certificate names localhost too.
    let port = addr.rsplit_once(':').unwrap().1;
    v1_round(&v1(&format!("localhost:{port}"), &dir, false));
}

#[test]
fn v1_refuses_a_wrong_name_and_an_unrelated_ca() {
    let Some((addr, dir)) = server(
        "LC_TEST_TLS_ADDRESS",
        "v1_refuses_a_wrong_name_and_an_unrelated_ca",
    ) else {
        return;
    };
    let key = unique_key("v1-tls-refused");
    let wrong_name = TlsConfig::builder()
        .ca_file(dir.join("ca.pem"))
        .server_name("wrong.invalid")
        .build()
        .unwrap();
    match Client::new(&addr).with_tls(wrong_name).try_lock(&key) {
        Err(Error::Unreachable(e)) => assert!(e.to_string().contains("certificate"), "{e}"),
        other => panic!("a wrong name was accepted: {other:?}"),
    }
    let other_ca = TlsConfig::builder()
        .ca_file(dir.join("other-ca.pem"))
        .build()
        .unwrap();
    match Client::new(&addr).with_tls(other_ca).lock(&key) {
        Err(Error::Unreachable(e)) => assert!(e.to_string().contains("certificate"), "{e}"),
        other => panic!("an unrelated CA was accepted: {other:?}"),
    }
    // Nothing was sent: the key is free.
    v1(&addr, &dir, false)
        .try_lock(&key)
        .unwrap()
        .expect("free")
        .unlock()
        .unwrap();
}

#[test]
fn v1_mutual_tls_with_and_without_a_client_certificate() {
    let Some((addr, dir)) = server(
        "LC_TEST_MTLS_ADDRESS",
        "v1_mutual_tls_with_and_without_a_client_certificate",
    ) else {
        return;
    };
    v1_round(&v1(&addr, &dir, true));
    // Without one, TLS 1.3 tells at the first read: the frame went out but
    // the server never read it.
    let key = unique_key("v1-mtls-refused");
    for r in [
        v1(&addr, &dir, false)
            .try_lock(&key)
            .map(|g| g.map(|g| g.detach())),
        v1(&addr, &dir, false).lock(&key).map(|g| Some(g.detach())),
    ] {
        assert!(matches!(r, Err(Error::Unreachable(_))), "{r:?}");
    }
    assert!(matches!(
        v1(&addr, &dir, false).unlock(&key),
        Err(Error::Unreachable(_))
    ));
    v1(&addr, &dir, true)
        .try_lock(&key)
        .unwrap()
        .expect("free")
        .unlock()
        .unwrap();
}

#[test]
fn bad_files_are_named() {
    let missing = TlsConfig::builder().ca_file("/nonexistent/ca.pem").build();
    match missing {
        Err(Error::TlsConfig(why)) => assert!(why.contains("/nonexistent/ca.pem"), "{why}"),
        other => panic!("{other:?}"),
    }
}
