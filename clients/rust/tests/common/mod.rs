//! Helpers shared by the integration tests: a tiny JSON reader (the crate
//! has no dependencies, dev ones included), unique keys, and the JSON API.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

impl Json {
    pub fn get(&self, k: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.get(k),
            _ => None,
        }
    }
    pub fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }
    pub fn num(&self) -> f64 {
        match self {
            Json::Num(n) => *n,
            other => panic!("not a number: {other:?}"),
        }
    }
    pub fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
    pub fn field(&self, k: &str) -> &Json {
        self.get(k).unwrap_or_else(|| panic!("missing field {k:?}"))
    }
}

pub fn parse_json(text: &str) -> Json {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    let v = p.value();
    p.ws();
    assert_eq!(p.i, p.s.len(), "trailing bytes in JSON");
    v
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\n' | b'\r' | b'\t') {
            self.i += 1;
        }
    }
    fn eat(&mut self, b: u8) {
        self.ws();
        assert_eq!(
            self.s.get(self.i),
            Some(&b),
            "JSON: expected {:?} at {}",
            b as char,
            self.i
        );
        self.i += 1;
    }
    fn value(&mut self) -> Json {
        self.ws();
        match self.s[self.i] {
            b'{' => {
                self.i += 1;
                let mut m = BTreeMap::new();
                self.ws();
                if self.s[self.i] == b'}' {
                    self.i += 1;
                    return Json::Obj(m);
                }
                loop {
                    self.ws();
                    let k = self.string();
                    self.eat(b':');
                    let v = self.value();
                    m.insert(k, v);
                    self.ws();
                    let c = self.s[self.i];
                    self.i += 1;
                    if c == b'}' {
                        return Json::Obj(m);
                    }
                    assert_eq!(c, b',', "JSON: expected , or }}");
                }
            }
            b'[' => {
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.s[self.i] == b']' {
                    self.i += 1;
                    return Json::Arr(a);
                }
                loop {
                    a.push(self.value());
                    self.ws();
                    let c = self.s[self.i];
                    self.i += 1;
                    if c == b']' {
                        return Json::Arr(a);
                    }
                    assert_eq!(c, b',', "JSON: expected , or ]");
                }
            }
            b'"' => Json::Str(self.string()),
            b't' => self.word("true", Json::Bool(true)),
            b'f' => self.word("false", Json::Bool(false)),
            b'n' => self.word("null", Json::Null),
            _ => {
                let start = self.i;
                while self.i < self.s.len()
                    && matches!(
                        self.s[self.i],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                Json::Num(
                    t.parse()
                        .unwrap_or_else(|_| panic!("JSON: bad number {t:?}")),
                )
            }
        }
    }
    fn word(&mut self, w: &str, v: Json) -> Json {
        assert!(self.s[self.i..].starts_with(w.as_bytes()));
        self.i += w.len();
        v
    }
    fn hex4(&mut self) -> u32 {
        let t = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
        self.i += 4;
        u32::from_str_radix(t, 16).unwrap()
    }
    fn string(&mut self) -> String {
        assert_eq!(self.s[self.i], b'"');
        self.i += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = self.s[self.i];
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).unwrap(),
                b'\\' => {
                    let e = self.s[self.i];
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let mut cp = self.hex4();
                            if (0xD800..0xDC00).contains(&cp) {
                                assert_eq!(&self.s[self.i..self.i + 2], b"\\u");
                                self.i += 2;
                                let lo = self.hex4();
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            }
                            char::from_u32(cp).unwrap()
                        }
                        _ => panic!("JSON: bad escape"),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                _ => out.push(c),
            }
        }
    }
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A key no other run or test uses: `rust-<name>-<random>`.
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

/// GET /api/v1/keys/{key}: `Some(None)` when the key is not held (404),
/// `Some(Some(json))` when it is, `None` when the web port is not set or
/// the API does not answer as the contract says.
pub fn key_info(key: &str) -> Option<Option<Json>> {
    let web = std::env::var("LC_TEST_WEB_ADDRESS")
        .ok()
        .filter(|s| !s.is_empty())?;
    let mut s = TcpStream::connect(&web).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    // Keys used here are [a-z0-9-] only, so the path needs no escaping.
    write!(
        s,
        "GET /api/v1/keys/{key} HTTP/1.0\r\nHost: {web}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status: u16 = resp.split(' ').nth(1)?.parse().ok()?;
    if status == 404 {
        return Some(None);
    }
    if status != 200 {
        return None;
    }
    let body = resp.split_once("\r\n\r\n")?.1;
    if !body.trim_start().starts_with('{') {
        return None;
    }
    Some(Some(parse_json(body)))
}

/// The length of the wait queue of `key`, which the caller knows is held:
/// `None` when the JSON API is not available (a 404 for a held key means
/// the route is missing).
pub fn queue_len(key: &str) -> Option<usize> {
    match key_info(key)? {
        None => None,
        Some(info) => match info.get("queue")? {
            Json::Arr(q) => Some(q.len()),
            _ => None,
        },
    }
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
