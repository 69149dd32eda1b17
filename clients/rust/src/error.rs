use std::fmt;
use std::io;

/// Everything a Locking-Center call can fail with.
///
/// The four outcomes a caller usually branches on are kept apart:
/// [`Error::NotWon`], [`Error::Reset`], [`Error::Refused`] (with
/// [`Error::Invalid`] for input refused before sending) and
/// [`Error::Unreachable`]. Giving up a wait is [`Error::Timeout`] or
/// [`Error::Cancelled`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A scoped try-lock ([`crate::Client::try_lock_guard`]) found the key
    /// held by someone (answer `#`). Plain [`crate::Client::try_lock`]
    /// returns `Ok(false)` instead.
    NotWon,
    /// A Lock or Wait was answered `-`: the key or the waiter's source was
    /// reset while waiting (or the server could not make the grant durable).
    Reset,
    /// Unlock, a reset or TryLock was answered `-` (for Unlock: the key was
    /// not held).
    Refused,
    /// The request was refused by the client before anything was sent or
    /// any connection was opened: the reason says which limit was broken.
    Invalid(&'static str),
    /// The server could not be reached: the address did not resolve, the
    /// connection failed or timed out, or it closed without an answer.
    Unreachable(io::Error),
    /// The wait timeout passed before the key was granted. The connection
    /// was closed, so the server has withdrawn the waiter.
    Timeout,
    /// The wait was cancelled through a [`crate::CancelToken`]. The
    /// connection was closed, so the server has withdrawn the waiter.
    Cancelled,
    /// The server answered a byte this action never gets.
    UnexpectedAnswer(u8),
}

impl Error {
    /// True for [`Error::Refused`] and [`Error::Invalid`]: the request
    /// itself was turned down.
    pub fn is_refused(&self) -> bool {
        matches!(self, Error::Refused | Error::Invalid(_))
    }

    /// True for [`Error::Timeout`] and [`Error::Cancelled`]: the caller gave
    /// up waiting.
    pub fn is_given_up(&self) -> bool {
        matches!(self, Error::Timeout | Error::Cancelled)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotWon => f.write_str("lock not won: the key is held"),
            Error::Reset => f.write_str("reset while waiting for the lock"),
            Error::Refused => f.write_str("refused by the server"),
            Error::Invalid(reason) => write!(f, "invalid request: {reason}"),
            Error::Unreachable(e) => write!(f, "lock server unreachable: {e}"),
            Error::Timeout => f.write_str("timed out waiting for the lock"),
            Error::Cancelled => f.write_str("cancelled while waiting for the lock"),
            Error::UnexpectedAnswer(b) => write!(f, "unexpected answer byte 0x{b:02x}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Unreachable(e) => Some(e),
            _ => None,
        }
    }
}
