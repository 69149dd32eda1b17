//! Helpers shared by the integration tests: the vectors, unique keys, the
//! JSON API over plain HTTP/1.0, a server of the tests' own (from
//! `$LC_SERVER_BIN`), and child processes made of this test binary.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The shared vectors: `$LC_VECTORS` when set (the repository's
/// wire/testdata/vectors.json under clients/run-tests), else the copy
/// shipped in the crate (tests/vectors.json).
pub fn vectors() -> Value {
    let path = match std::env::var("LC_VECTORS") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => shipped_vectors(),
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The copy of the vectors shipped in the crate. The folder is read when
/// the test runs (cargo sets CARGO_MANIFEST_DIR then): a build cached from
/// another unpacked copy must not point at a folder that is gone.
pub fn shipped_vectors() -> PathBuf {
    let dir = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    PathBuf::from(dir).join("tests/vectors.json")
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A key no other run or test uses: `rust-<name>-<random>`, [a-z0-9-] only
/// so it goes into a URL path as it is.
pub fn unique_key(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "rust-{name}-{:x}{:x}",
        std::process::id(),
        nanos & 0xffff_ffff_ffff
    )
}

/// The env var's value, or `None` when unset or empty.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

/// One HTTP/1.0 request to `web`; (status, body).
pub fn http(web: &str, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(web).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {web}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status: u16 = resp.split(' ').nth(1)?.parse().ok()?;
    Some((status, resp.split_once("\r\n\r\n")?.1.to_owned()))
}

/// GET /api/v1/keys/{key} on `web`: `Some(None)` when not held (404).
pub fn key_info_at(web: &str, key: &str) -> Option<Option<Value>> {
    let (status, body) = http(web, "GET", &format!("/api/v1/keys/{key}"), "")?;
    match status {
        404 => Some(None),
        200 => serde_json::from_str(&body).ok().map(Some),
        _ => None,
    }
}

/// [`key_info_at`] on `$LC_TEST_WEB_ADDRESS`; `None` when it is unset.
pub fn key_info(key: &str) -> Option<Option<Value>> {
    key_info_at(&env("LC_TEST_WEB_ADDRESS")?, key)
}

/// The length of the wait queue of `key`, which the caller knows is held.
pub fn queue_len(key: &str) -> Option<usize> {
    key_info(key)??.get("queue")?.as_array().map(Vec::len)
}

/// Polls [`queue_len`] until it equals `want` or `deadline` passes. Returns
/// the last value seen.
pub fn wait_queue_len(key: &str, want: usize, deadline: Duration) -> Option<usize> {
    let end = Instant::now() + deadline;
    loop {
        let got = queue_len(key);
        if got == Some(want) || Instant::now() >= end {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `cond` every 10 ms until it holds or `deadline` passes.
pub fn eventually(deadline: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + deadline;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server of the test's own, started from `$LC_SERVER_BIN` on free
/// loopback ports; stopped by PID with SIGTERM when dropped.
pub struct OwnServer {
    pub address: String,
    pub web: String,
    envs: Vec<(String, String)>,
    child: Option<Child>,
}

impl OwnServer {
    /// `None` (the test returns early, saying why) when `$LC_SERVER_BIN` is
    /// unset.
    pub fn start(envs: &[(&str, &str)]) -> Option<OwnServer> {
        let Some(_) = env("LC_SERVER_BIN") else {
            eprintln!("LC_SERVER_BIN unset: test skipped");
            return None;
        };
        let mut s = OwnServer {
            address: format!("127.0.0.1:{}", free_port()),
            web: format!("127.0.0.1:{}", free_port()),
            envs: envs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
        };
        s.restart();
        Some(s)
    }

    /// Starts the server (again, on the same ports and settings) and waits
    /// for GET /readyz 200.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let bin = env("LC_SERVER_BIN").unwrap();
        let child = Command::new(bin)
            .env("BIND_ADDRESS", &self.address)
            .env("WEB_ADDRESS", &self.web)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the server");
        self.child = Some(child);
        let web = self.web.clone();
        assert!(
            eventually(Duration::from_secs(10), || {
                matches!(http(&web, "GET", "/readyz", ""), Some((200, _)))
            }),
            "server not ready"
        );
    }

    /// Stops it with SIGTERM (by PID) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs the test named `name` of this binary in a child process (it is
/// `#[ignore]`d, so only a child runs it), with `envs`. Its stdout is piped.
pub fn spawn_child(name: &str, envs: &[(&str, &str)]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning the child test")
}

/// Reads the child's stdout until a line that ends with `want` (the test
/// harness prints the test's name before its output on the same line).
pub fn wait_for_line(child: &mut Child, want: &str) {
    let out = child.stdout.as_mut().expect("piped stdout");
    let mut r = BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        let n = r.read_line(&mut line).unwrap();
        assert!(n > 0, "child ended before printing {want:?}");
        if line.trim_end().ends_with(want) {
            return;
        }
    }
}
