//! The Locking-Center wire protocol (SPEC §1): one frame out, one byte back.
//!
//! ```text
//! request : [action:1][keySize:1][key:keySize][sourceSize:1][source:sourceSize]
//! answer  : '+' (0x2B) success | '-' (0x2D) failure | '#' (0x23) try-lock not won
//! ```
//!
//! Sizes are signed bytes on the wire, so a key or a source is at most 127
//! bytes of UTF-8. Everything here is pure: no sockets, so the shared test
//! vectors can check it byte for byte.

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
