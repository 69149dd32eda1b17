//! TLS against real servers: $LC_TEST_TLS_ADDRESS (TLS_CERT/TLS_KEY),
//! $LC_TEST_MTLS_ADDRESS (TLS_CLIENT_CA too), with the PEM files of
//! $LC_TEST_TLS_DIR. Without them the tests say so and return, except under
//! CI=true, where they fail.
#![cfg(feature = "tls")]

mod common;

use common::{env, unique_key};
use locking_center::{Error, Session, TlsConfig};
use std::path::PathBuf;
use std::time::Duration;

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

#[test]
fn bad_files_are_named() {
    let missing = TlsConfig::builder().ca_file("/nonexistent/ca.pem").build();
    match missing {
        Err(Error::TlsConfig(why)) => assert!(why.contains("/nonexistent/ca.pem"), "{why}"),
        other => panic!("{other:?}"),
    }
}
