use std::fmt;
use std::io;

/// Everything a Locking-Center call can fail with.
///
/// The outcomes a caller usually branches on are kept apart: "not won" is
/// not an error (`try_lock` returns `Ok(None)`), [`Error::Reset`] (a Lock
/// refused while waiting), [`Error::Refused`] (with [`Error::Invalid`] for
/// input refused before sending) and [`Error::Unreachable`]. Giving up a
/// wait is [`Error::Timeout`] or [`Error::Cancelled`]. Sessions add
/// [`Error::Disconnected`], [`Error::OutcomeUnknown`],
/// [`Error::SessionLost`] and [`Error::SessionClosed`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A Lock was answered `-`: the key or the waiter's source was reset
    /// while waiting (or the server could not make the grant durable).
    /// Nothing is held.
    Reset,
    /// Unlock, a reset or TryLock was answered `-`. For a v1 Unlock: the
    /// key was not held. For a session's Unlock: this session does not hold
    /// that grant (a reset took it, or it was already released).
    Refused,
    /// The request was refused by the client before anything was sent or
    /// any connection was opened: the reason says which limit was broken.
    Invalid(&'static str),
    /// The server could not be reached: the address did not resolve, the
    /// connection failed or timed out, it closed without an answer, no
    /// answer came within the request timeout.
    Unreachable(io::Error),
    /// The wait timeout passed before the key was granted. The server has
    /// withdrawn the waiter; nothing is held.
    Timeout,
    /// The wait was cancelled through a [`crate::CancelToken`]. The server
    /// has withdrawn the waiter; nothing is held.
    Cancelled,
    /// The server answered a byte this action never gets.
    UnexpectedAnswer(u8),
    /// A session request (a Close, a Ping) was sent on a connection that
    /// broke before its answer came. The session resumes on its own; the
    /// call may be made again. A pending Lock or TryLock is not failed so:
    /// it is reissued with its id after the resume (Reissue).
    Disconnected,
    /// An Unlock or a reset whose frame may have reached the server but
    /// whose answer never came: it may or may not have taken effect. It is
    /// never resent blindly. (A session settles an Unlock by token after the
    /// resume; a v1 Unlock names no grant, so nothing is sent again.)
    OutcomeUnknown,
    /// The session ended without Close: every hold it had is gone, or will
    /// be within the server's expiry. Every later call fails with it too.
    SessionLost(LostReason),
    /// The session was closed by [`crate::Session::close`] (or the last
    /// handle was dropped); its holds were released.
    SessionClosed,
    /// A TLS configuration could not be built: a file that cannot be read
    /// or holds no certificate or key, a key that does not fit its
    /// certificate. (A failed handshake is [`Error::Unreachable`].)
    TlsConfig(String),
}

/// Why a session was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The server answered `-` to the resume: the session had expired, was
    /// ended from the web API, or the server restarted without its log.
    ResumeRefused,
    /// The TTL passed, counted from the last request the server is known to
    /// have received, without a successful resume.
    TtlPassed,
    /// The server closed the session's connection and the resume failed;
    /// also used when the session's own threads could not be started.
    Ended,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::ResumeRefused => {
                "the server refused to resume it (expired, ended from the web, or restarted without its log)"
            }
            LostReason::TtlPassed => "its TTL passed without a resume",
            LostReason::Ended => "it ended",
        })
    }
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

    /// True for [`Error::SessionLost`]: the session's holds are gone.
    pub fn is_session_lost(&self) -> bool {
        matches!(self, Error::SessionLost(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Reset => f.write_str("reset while waiting for the lock"),
            Error::Refused => f.write_str("refused by the server"),
            Error::Invalid(reason) => write!(f, "invalid request: {reason}"),
            Error::Unreachable(e) => write!(f, "lock server unreachable: {e}"),
            Error::Timeout => f.write_str("timed out waiting for the lock"),
            Error::Cancelled => f.write_str("cancelled while waiting for the lock"),
            Error::UnexpectedAnswer(b) => write!(f, "unexpected answer byte 0x{b:02x}"),
            Error::Disconnected => {
                f.write_str("session connection lost before the answer; the session is resuming")
            }
            Error::OutcomeUnknown => f.write_str("answer lost: the outcome is unknown"),
            Error::SessionLost(r) => write!(f, "session lost: {r}; its holds are gone"),
            Error::SessionClosed => f.write_str("session closed"),
            Error::TlsConfig(why) => write!(f, "TLS configuration: {why}"),
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
