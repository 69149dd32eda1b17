//! Client for [Locking-Center], a small distributed lock server.
//!
//! One request per TCP connection, on `std::net` only: connect, write one
//! frame, read one answer byte, close. No dependencies.
//!
//! ```no_run
//! use std::time::Duration;
//! use locking_center::{Client, Error};
//!
//! let client = Client::new("127.0.0.1:22119").with_source("billing-worker");
//! let guard = client.lock_guard("invoices/2026-11")?;   // waits its turn (FIFO)
//! // ... critical section ...
//! guard.unlock()?;                                       // explicit release
//!
//! match client.lock_timeout("reports", Duration::from_secs(2)) {
//!     Ok(()) => client.unlock("reports")?,
//!     Err(Error::Timeout) => eprintln!("busy, try later"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), Error>(())
//! ```
//!
//! [Locking-Center]: https://github.com/locking-center/locking-center

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod error;
pub mod wire;

pub use error::Error;
pub use wire::Action;

/// The server's default TCP port, used when the address names none.
pub const DEFAULT_PORT: u16 = 22119;

/// How long the client waits for the server to close a connection it hung
/// up on (timeout or cancellation) before giving up on it. In that window a
/// grant that crossed the hang-up is still read, so it is not lost.
const HANG_UP_GRACE: Duration = Duration::from_secs(2);

/// While a [`CancelToken`] is attached, a waiting read wakes up this often to
/// notice a server that does not close after the hang-up.
const CANCEL_POLL: Duration = Duration::from_millis(500);

/// A Locking-Center client: an address and a source given once.
///
/// Cheap to clone; every call opens its own connection, so one `Client` may
/// be shared between threads.
#[derive(Debug, Clone)]
pub struct Client {
    address: String,
    source: String,
    connect_timeout: Duration,
    request_timeout: Option<Duration>,
}

impl Client {
    /// A client for `address` (`host:port`; a bare host gets port 22119),
    /// with an empty source (the server then names the requester by its IP
    /// address), a 5 s connect timeout and a 30 s answer timeout for calls
    /// that do not wait in a queue.
    pub fn new(address: impl Into<String>) -> Client {
        let mut address = address.into();
        if !has_port(&address) {
            address = format!("{address}:{DEFAULT_PORT}");
        }
        Client {
            address,
            source: String::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Some(Duration::from_secs(30)),
        }
    }

    /// Sets the source sent with every request (0..=127 bytes; checked on
    /// each call, before connecting).
    pub fn with_source(mut self, source: impl Into<String>) -> Client {
        self.source = source.into();
        self
    }

    /// Sets how long to wait for the TCP connection to be established.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Client {
        self.connect_timeout = timeout;
        self
    }

    /// Sets how long TryLock, Unlock and the resets wait for their answer
    /// (`None`: forever). Lock and Wait use [`WaitOptions`] instead.
    pub fn with_request_timeout(mut self, timeout: Option<Duration>) -> Client {
        self.request_timeout = timeout;
        self
    }

    /// The server address, `host:port`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The source sent with every request.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Waits (FIFO) until `key` is granted, without a time limit.
    ///
    /// Errors: [`Error::Reset`] if the key or this source is reset while
    /// waiting; [`Error::Invalid`], [`Error::Unreachable`].
    pub fn lock(&self, key: &str) -> Result<(), Error> {
        self.lock_with(key, &WaitOptions::new())
    }

    /// Like [`Client::lock`], giving up with [`Error::Timeout`] after
    /// `timeout`; the connection is closed so the server withdraws the
    /// waiter.
    pub fn lock_timeout(&self, key: &str, timeout: Duration) -> Result<(), Error> {
        self.lock_with(key, &WaitOptions::new().timeout(timeout))
    }

    /// Like [`Client::lock`] with a timeout and/or a [`CancelToken`].
    ///
    /// If the grant crosses the timeout or the cancellation on the wire,
    /// the call returns `Ok(())`: the key is held and must be unlocked.
    pub fn lock_with(&self, key: &str, options: &WaitOptions) -> Result<(), Error> {
        self.call(Action::Lock, key, &self.source, Some(options))
            .map(|_| ())
    }

    /// Takes `key` only if it is free right now: `Ok(true)` if it is now
    /// held by this client, `Ok(false)` if someone holds it.
    ///
    /// Errors: [`Error::Refused`] (answer `-`), [`Error::Invalid`],
    /// [`Error::Unreachable`].
    pub fn try_lock(&self, key: &str) -> Result<bool, Error> {
        self.call(Action::TryLock, key, &self.source, None)
    }

    /// Releases `key`. Any client may release any key.
    ///
    /// Errors: [`Error::Refused`] if the key was not held;
    /// [`Error::Invalid`], [`Error::Unreachable`].
    pub fn unlock(&self, key: &str) -> Result<(), Error> {
        self.call(Action::Unlock, key, &self.source, None)
            .map(|_| ())
    }

    /// Waits for one's turn on `key` and releases it at once: returns when
    /// every earlier holder and waiter is done.
    pub fn wait(&self, key: &str) -> Result<(), Error> {
        self.wait_with(key, &WaitOptions::new())
    }

    /// [`Client::wait`] with a timeout.
    pub fn wait_timeout(&self, key: &str, timeout: Duration) -> Result<(), Error> {
        self.wait_with(key, &WaitOptions::new().timeout(timeout))
    }

    /// [`Client::wait`] with a timeout and/or a [`CancelToken`].
    pub fn wait_with(&self, key: &str, options: &WaitOptions) -> Result<(), Error> {
        self.lock_with(key, options)?;
        self.unlock(key)
    }

    /// Drops the holder of `key` and answers `-` ([`Error::Reset`]) to every
    /// waiter of it. Idempotent.
    pub fn reset_by_key(&self, key: &str) -> Result<(), Error> {
        self.call(Action::ResetByKey, key, "", None).map(|_| ())
    }

    /// Fails every waiter from `source` (on any key), then releases every
    /// key it holds. An empty `source` means the caller's own IP address as
    /// the server sees it.
    pub fn reset_by_source(&self, source: &str) -> Result<(), Error> {
        self.call(Action::ResetBySource, "", source, None)
            .map(|_| ())
    }

    /// Locks `key` and returns a guard that holds it. Release it with
    /// [`LockGuard::unlock`]; dropping a guard that is still held unlocks
    /// too, but reports that on stderr.
    pub fn lock_guard(&self, key: &str) -> Result<LockGuard, Error> {
        self.lock_guard_with(key, &WaitOptions::new())
    }

    /// [`Client::lock_guard`] with a timeout and/or a [`CancelToken`].
    pub fn lock_guard_with(&self, key: &str, options: &WaitOptions) -> Result<LockGuard, Error> {
        self.lock_with(key, options)?;
        Ok(LockGuard::new(self.clone(), key))
    }

    /// Try-locks `key` and returns a guard; [`Error::NotWon`] if the key is
    /// held by someone.
    pub fn try_lock_guard(&self, key: &str) -> Result<LockGuard, Error> {
        if self.try_lock(key)? {
            Ok(LockGuard::new(self.clone(), key))
        } else {
            Err(Error::NotWon)
        }
    }

    /// Runs `f` while holding `key`, then unlocks it whatever `f` returned
    /// (also when it panics). An unlock failure is returned only when the
    /// lock was taken and `f` finished.
    pub fn with_lock<T>(&self, key: &str, f: impl FnOnce() -> T) -> Result<T, Error> {
        let mut guard = self.lock_guard(key)?;
        let value = {
            // Unlock quietly if `f` panics: the guard's Drop would report it
            // as forgotten, which it is not.
            struct Quiet<'a>(&'a mut LockGuard);
            impl Drop for Quiet<'_> {
                fn drop(&mut self) {
                    if self.0.held && std::thread::panicking() {
                        self.0.held = false;
                        let _ = self.0.client.unlock(&self.0.key);
                    }
                }
            }
            let _quiet = Quiet(&mut guard);
            f()
        };
        guard.unlock()?;
        Ok(value)
    }

    /// One request: validate, connect, write the frame, read one byte.
    fn call(
        &self,
        action: Action,
        key: &str,
        source: &str,
        wait: Option<&WaitOptions>,
    ) -> Result<bool, Error> {
        // Validation comes first: nothing is opened for a bad request.
        let frame = wire::encode(action, key, source)?;
        let token = wait.and_then(|w| w.cancel.as_ref());
        if token.is_some_and(CancelToken::is_cancelled) {
            return Err(Error::Cancelled);
        }
        let deadline = wait.and_then(|w| w.timeout).map(|t| Instant::now() + t);
        // A broken connection is the cancellation when the token shut it down.
        let broken = |e: io::Error| {
            if token.is_some_and(CancelToken::is_cancelled) {
                Error::Cancelled
            } else {
                Error::Unreachable(e)
            }
        };

        let mut stream = self.connect()?;
        let _registration = match token {
            Some(t) => Some(t.register(&stream)?),
            None => None,
        };
        stream.write_all(&frame).map_err(broken)?;

        let mut answer = [0u8; 1];
        loop {
            let now = Instant::now();
            let mut read_timeout = match (wait, deadline) {
                (Some(_), Some(d)) => {
                    if now >= d {
                        return give_up(action, stream, Error::Timeout);
                    }
                    Some(d - now)
                }
                (Some(_), None) => None,
                (None, _) => self.request_timeout,
            };
            if let Some(t) = token {
                if let Some(at) = t.cancelled_at() {
                    if at.elapsed() >= HANG_UP_GRACE {
                        return Err(Error::Cancelled);
                    }
                }
                read_timeout = Some(read_timeout.map_or(CANCEL_POLL, |r| r.min(CANCEL_POLL)));
            }
            // A zero Duration is refused by set_read_timeout.
            let read_timeout = read_timeout.map(|t| t.max(Duration::from_millis(1)));
            stream
                .set_read_timeout(read_timeout)
                .map_err(Error::Unreachable)?;

            match stream.read(&mut answer) {
                Ok(1) => return wire::interpret(action, answer[0]),
                Ok(_) => {
                    return Err(broken(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed without an answer",
                    )));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if wait.is_none() {
                        let why = Error::Unreachable(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no answer within the request timeout",
                        ));
                        // A TryLock's '+' may be on its way (a slow fsync):
                        // hang up and keep a grant that crosses it.
                        if action == Action::TryLock {
                            return give_up(action, stream, why);
                        }
                        return Err(why);
                    }
                    // Deadline or cancellation poll: the loop decides.
                    continue;
                }
                Err(e) => return Err(broken(e)),
            }
        }
    }

    fn connect(&self) -> Result<TcpStream, Error> {
        let addrs: Vec<SocketAddr> = self
            .address
            .to_socket_addrs()
            .map_err(Error::Unreachable)?
            .collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, self.connect_timeout) {
                Ok(stream) => {
                    // One small frame: send it now rather than wait for Nagle.
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Err(e) => last = e,
            }
        }
        Err(Error::Unreachable(last))
    }
}

/// Hangs up a waiting request, or a TryLock past its request timeout:
/// closes the write side so the server sees EOF and withdraws the waiter,
/// then reads briefly so a grant that crossed the hang-up on the wire is not
/// lost. For a TryLock only a '+' changes `why`. The stream is closed on
/// return.
fn give_up(action: Action, mut stream: TcpStream, why: Error) -> Result<bool, Error> {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(HANG_UP_GRACE));
    let mut answer = [0u8; 1];
    match stream.read(&mut answer) {
        Ok(1) if answer[0] == b'+' => wire::interpret(action, answer[0]),
        Ok(1) if answer[0] == b'-' && action != Action::TryLock => Err(Error::Reset),
        _ => Err(why),
    }
}

fn has_port(address: &str) -> bool {
    if address.ends_with(']') {
        return false; // "[::1]"
    }
    match address.rsplit_once(':') {
        Some((host, port)) => {
            !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && !host.is_empty()
        }
        None => false,
    }
}

/// How long a Lock or Wait may wait, and how it can be cancelled.
#[derive(Debug, Clone, Default)]
pub struct WaitOptions {
    timeout: Option<Duration>,
    cancel: Option<CancelToken>,
}

impl WaitOptions {
    /// Wait forever, not cancellable.
    pub fn new() -> WaitOptions {
        WaitOptions::default()
    }

    /// Give up with [`Error::Timeout`] after `timeout` (counted from the
    /// call, connecting included).
    pub fn timeout(mut self, timeout: Duration) -> WaitOptions {
        self.timeout = Some(timeout);
        self
    }

    /// Give up with [`Error::Cancelled`] when `token` is cancelled.
    pub fn cancel_token(mut self, token: &CancelToken) -> WaitOptions {
        self.cancel = Some(token.clone());
        self
    }
}

/// Cancels waiting calls from another thread.
///
/// Pass a clone in [`WaitOptions::cancel_token`]; [`CancelToken::cancel`]
/// hangs up every connection still waiting under it, so the server
/// withdraws those waiters and the calls return [`Error::Cancelled`]. A
/// cancelled token stays cancelled: later calls with it fail at once.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<Mutex<TokenState>>,
}

#[derive(Debug, Default)]
struct TokenState {
    cancelled_at: Option<Instant>,
    next_id: u64,
    streams: Vec<(u64, TcpStream)>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels every call waiting under this token, now and later.
    pub fn cancel(&self) {
        let mut state = self.state();
        if state.cancelled_at.is_none() {
            state.cancelled_at = Some(Instant::now());
        }
        for (_, stream) in &state.streams {
            // The server reads EOF as a hang-up and withdraws the waiter;
            // the read side stays open to catch a grant already sent.
            let _ = stream.shutdown(Shutdown::Write);
        }
    }

    /// True once [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.state().cancelled_at.is_some()
    }

    fn cancelled_at(&self) -> Option<Instant> {
        self.state().cancelled_at
    }

    fn state(&self) -> MutexGuard<'_, TokenState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn register(&self, stream: &TcpStream) -> Result<Registration<'_>, Error> {
        let clone = stream.try_clone().map_err(Error::Unreachable)?;
        let mut state = self.state();
        if state.cancelled_at.is_some() {
            return Err(Error::Cancelled);
        }
        let id = state.next_id;
        state.next_id += 1;
        state.streams.push((id, clone));
        Ok(Registration { token: self, id })
    }
}

struct Registration<'a> {
    token: &'a CancelToken,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.token.state().streams.retain(|(id, _)| *id != self.id);
    }
}

/// A held key, returned by [`Client::lock_guard`] and
/// [`Client::try_lock_guard`].
///
/// Release it with [`LockGuard::unlock`], which reports failures. If a
/// guard is dropped while still held, Drop unlocks the key and writes a
/// line to stderr saying so: that usually means an early return or `?`
/// skipped the unlock.
#[derive(Debug)]
#[must_use = "dropping the guard at once releases the lock"]
pub struct LockGuard {
    client: Client,
    key: String,
    held: bool,
}

impl LockGuard {
    fn new(client: Client, key: &str) -> LockGuard {
        LockGuard {
            client,
            key: key.to_owned(),
            held: true,
        }
    }

    /// The key held.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Releases the key; [`Error::Refused`] if it was no longer held (a
    /// reset dropped it), [`Error::Unreachable`] if the server could not be
    /// reached.
    pub fn unlock(mut self) -> Result<(), Error> {
        self.held = false;
        self.client.unlock(&self.key)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        self.held = false;
        eprintln!(
            "locking-center: lock guard for key {:?} dropped while held; unlocking it",
            self.key
        );
        if let Err(e) = self.client.unlock(&self.key) {
            eprintln!(
                "locking-center: unlock of key {:?} on drop failed: {e}",
                self.key
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_port_is_added() {
        assert_eq!(Client::new("localhost").address(), "localhost:22119");
        assert_eq!(Client::new("10.0.0.1:7").address(), "10.0.0.1:7");
        assert_eq!(Client::new("[::1]").address(), "[::1]:22119");
        assert_eq!(Client::new("[::1]:9").address(), "[::1]:9");
    }
}
