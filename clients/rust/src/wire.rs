//! The Locking-Center wire protocol (docs/protocol.md), without I/O, so the
//! shared test vectors can check it byte for byte.
//!
//! v1, one request per connection:
//!
//! ```text
//! request : [action:1][keySize:1][key:keySize][sourceSize:1][source:sourceSize]
//! answer  : '+' (0x2B) success | '-' (0x2D) failure | '#' (0x23) try-lock not won
//! ```
//!
//! A session (first byte 16), many requests answered out of order by id;
//! integers big-endian:
//!
//! ```text
//! open    : [16][version:1 = 1][ttl_ms:4][resume:8][sourceSize:1][source][authSize:1][auth]
//! answer  : [status:1][ttl_ms:4][session:8]                          (13 bytes)
//! request : [action:1][id:4][token:8][keySize:1][key]
//! answer  : [id:4][status:1][token:8]                                (13 bytes)
//! ```
//!
//! Sizes are signed bytes on the wire, so a key, a source or an auth token
//! is at most 127 bytes (UTF-8 bytes, not characters).

use crate::Error;

/// The longest key or source the protocol can carry, in bytes.
pub const MAX_LEN: usize = 127;

/// A request type. The discriminant is the byte sent on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Action {
    /// Wait in FIFO order until the key is granted.
    Lock = 1,
    /// Release a held key (any client may release any key).
    Unlock = 2,
    /// Drop the holder of a key and fail all of its waiters.
    ResetByKey = 3,
    /// Fail every waiter of a source, then release every key it holds.
    ResetBySource = 4,
    /// Take the key only if it is free right now.
    TryLock = 5,
}

impl Action {
    /// The action for a wire code, or `None` for an unknown code.
    pub fn from_code(code: u8) -> Option<Action> {
        match code {
            1 => Some(Action::Lock),
            2 => Some(Action::Unlock),
            3 => Some(Action::ResetByKey),
            4 => Some(Action::ResetBySource),
            5 => Some(Action::TryLock),
            _ => None,
        }
    }

    /// The byte sent on the wire.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// One answer byte from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `+`: done.
    Success,
    /// `-`: failed (reset while waiting, not held, invalid input, ...).
    Failure,
    /// `#`: a try-lock found the key held.
    NotWon,
}

impl Answer {
    /// Parses an answer byte; `None` for anything the server never sends.
    pub fn from_byte(b: u8) -> Option<Answer> {
        match b {
            b'+' => Some(Answer::Success),
            b'-' => Some(Answer::Failure),
            b'#' => Some(Answer::NotWon),
            _ => None,
        }
    }

    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        match self {
            Answer::Success => b'+',
            Answer::Failure => b'-',
            Answer::NotWon => b'#',
        }
    }
}

/// Checks a key and a source against the limits of `action` without
/// building anything. ResetBySource takes an empty key; every other action
/// needs a key of 1..=127 bytes. A source may be empty (the server then uses
/// the peer's IP address).
pub fn validate(action: Action, key: &str, source: &str) -> Result<(), Error> {
    if key.is_empty() && action != Action::ResetBySource {
        return Err(Error::Invalid("empty key"));
    }
    if key.len() > MAX_LEN {
        return Err(Error::Invalid("key longer than 127 bytes"));
    }
    if source.len() > MAX_LEN {
        return Err(Error::Invalid("source longer than 127 bytes"));
    }
    Ok(())
}

/// Builds the request frame for `action`, after [`validate`].
pub fn encode(action: Action, key: &str, source: &str) -> Result<Vec<u8>, Error> {
    validate(action, key, source)?;
    let mut frame = Vec::with_capacity(3 + key.len() + source.len());
    frame.push(action.code());
    frame.push(key.len() as u8);
    frame.extend_from_slice(key.as_bytes());
    frame.push(source.len() as u8);
    frame.extend_from_slice(source.as_bytes());
    Ok(frame)
}

/// Maps the answer byte of `action` to the client's result:
///
/// | action | `+` | `-` | `#` |
/// | --- | --- | --- | --- |
/// | Lock | `Ok(true)` | [`Error::Reset`] | [`Error::UnexpectedAnswer`] |
/// | TryLock | `Ok(true)` | [`Error::Refused`] | `Ok(false)` |
/// | Unlock, ResetByKey, ResetBySource | `Ok(true)` | [`Error::Refused`] | [`Error::UnexpectedAnswer`] |
pub fn interpret(action: Action, answer: u8) -> Result<bool, Error> {
    match (action, Answer::from_byte(answer)) {
        (_, Some(Answer::Success)) => Ok(true),
        (Action::Lock, Some(Answer::Failure)) => Err(Error::Reset),
        (_, Some(Answer::Failure)) => Err(Error::Refused),
        (Action::TryLock, Some(Answer::NotWon)) => Ok(false),
        _ => Err(Error::UnexpectedAnswer(answer)),
    }
}

/// The first byte of a session's open frame.
pub const OPEN: u8 = 16;

/// The session protocol version this client speaks.
pub const SESSION_VERSION: u8 = 1;

/// The length of every answer in a session, the open's included.
pub const ANSWER_LEN: usize = 13;

/// A request inside a session. The discriminant is the byte on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SessionAction {
    /// Wait in FIFO order until the key is granted; `+` carries the token.
    Lock = 1,
    /// Release the grant named by the request's token (0: this session's
    /// grant of the key).
    Unlock = 2,
    /// As in v1: drop the holder of the key and refuse its waiters.
    ResetByKey = 3,
    /// As in v1; the source to reset travels in the key field.
    ResetBySource = 4,
    /// Take the key only if it is free; `+` carries the token.
    TryLock = 5,
    /// Withdraw the pending Lock whose id the request carries. Never
    /// answered.
    Cancel = 6,
    /// Keep the session alive.
    Ping = 7,
    /// End the session: its holds are released.
    Close = 8,
}

impl SessionAction {
    /// The action for a wire code, or `None` for an unknown code.
    pub fn from_code(code: u8) -> Option<SessionAction> {
        use SessionAction::*;
        [
            Lock,
            Unlock,
            ResetByKey,
            ResetBySource,
            TryLock,
            Cancel,
            Ping,
            Close,
        ]
        .into_iter()
        .find(|a| a.code() == code)
    }

    /// The byte sent on the wire.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// True for the actions whose key field must hold 1..=127 bytes.
    pub fn needs_key(self) -> bool {
        matches!(
            self,
            SessionAction::Lock
                | SessionAction::Unlock
                | SessionAction::ResetByKey
                | SessionAction::TryLock
        )
    }
}

/// The open frame of a session: a new one (`resume` 0) or a resume.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Open<'a> {
    /// Protocol version; [`SESSION_VERSION`].
    pub version: u8,
    /// The TTL asked for in milliseconds; 0 asks for the server's default.
    pub ttl_ms: u32,
    /// 0 for a new session, else the id of the session to take back.
    pub resume: u64,
    /// Names the requester (0..=127 bytes; empty: the peer's IP).
    pub source: &'a str,
    /// The server's AUTH_TOKEN, or empty (0..=127 bytes).
    pub auth: &'a [u8],
}

/// Builds the open frame, refusing a source or auth over 127 bytes.
pub fn encode_open(open: &Open<'_>) -> Result<Vec<u8>, Error> {
    if open.source.len() > MAX_LEN {
        return Err(Error::Invalid("source longer than 127 bytes"));
    }
    if open.auth.len() > MAX_LEN {
        return Err(Error::Invalid("auth token longer than 127 bytes"));
    }
    let mut f = Vec::with_capacity(16 + open.source.len() + open.auth.len());
    f.push(OPEN);
    f.push(open.version);
    f.extend_from_slice(&open.ttl_ms.to_be_bytes());
    f.extend_from_slice(&open.resume.to_be_bytes());
    f.push(open.source.len() as u8);
    f.extend_from_slice(open.source.as_bytes());
    f.push(open.auth.len() as u8);
    f.extend_from_slice(open.auth);
    Ok(f)
}

/// The answer to an open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenAnswer {
    /// `+` opened or resumed, `-` refused.
    pub status: u8,
    /// The TTL granted, in milliseconds (0 when refused).
    pub ttl_ms: u32,
    /// The session id (0 when refused).
    pub session: u64,
}

/// Decodes the 13-byte answer to an open.
pub fn decode_open_answer(b: &[u8; ANSWER_LEN]) -> OpenAnswer {
    OpenAnswer {
        status: b[0],
        ttl_ms: u32::from_be_bytes([b[1], b[2], b[3], b[4]]),
        session: u64::from_be_bytes([b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12]]),
    }
}

/// Checks a session request's key field: 1..=127 bytes for the actions
/// that need a key, 0..=127 for ResetBySource's source; Cancel, Ping and
/// Close send none.
pub fn validate_request(action: SessionAction, key: &str) -> Result<(), Error> {
    if key.is_empty() && action.needs_key() {
        return Err(Error::Invalid("empty key"));
    }
    if key.len() > MAX_LEN {
        return Err(Error::Invalid(if action == SessionAction::ResetBySource {
            "source longer than 127 bytes"
        } else {
            "key longer than 127 bytes"
        }));
    }
    Ok(())
}

/// Appends one session request to `buf`, after [`validate_request`].
/// Cancel, Ping and Close are sent with an empty key whatever `key` is.
pub fn encode_request(
    buf: &mut Vec<u8>,
    action: SessionAction,
    id: u32,
    token: u64,
    key: &str,
) -> Result<(), Error> {
    validate_request(action, key)?;
    let key = match action {
        SessionAction::Cancel | SessionAction::Ping | SessionAction::Close => "",
        _ => key,
    };
    buf.push(action.code());
    buf.extend_from_slice(&id.to_be_bytes());
    buf.extend_from_slice(&token.to_be_bytes());
    buf.push(key.len() as u8);
    buf.extend_from_slice(key.as_bytes());
    Ok(())
}

/// One answer in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionAnswer {
    /// The id of the request answered.
    pub id: u32,
    /// `+`, `-` or `#`.
    pub status: u8,
    /// The grant's token (`+` to Lock, TryLock, Unlock), else 0.
    pub token: u64,
}

/// Decodes a 13-byte session answer.
pub fn decode_answer(b: &[u8; ANSWER_LEN]) -> SessionAnswer {
    SessionAnswer {
        id: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        status: b[4],
        token: u64::from_be_bytes([b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12]]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_layout() {
        assert_eq!(
            encode(Action::TryLock, "k", "s").unwrap(),
            vec![5, 1, b'k', 1, b's']
        );
        assert_eq!(
            encode(Action::ResetBySource, "", "").unwrap(),
            vec![4, 0, 0]
        );
    }

    #[test]
    fn limits_count_bytes_not_chars() {
        let k = "é".repeat(63); // 126 bytes
        assert!(encode(Action::Lock, &k, "").is_ok());
        let k = "é".repeat(64); // 128 bytes
        assert!(matches!(
            encode(Action::Lock, &k, ""),
            Err(Error::Invalid(_))
        ));
    }

    #[test]
    fn action_codes_round_trip() {
        for code in 1..=5 {
            assert_eq!(Action::from_code(code).unwrap().code(), code);
        }
        assert_eq!(Action::from_code(0), None);
        assert_eq!(Action::from_code(6), None);
    }
}
