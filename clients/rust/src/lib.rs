//! Client for [Locking-Center], a small distributed lock server.
//!
//! Two ways to take a lock:
//!
//! - A [`Session`] (recommended): one connection shared by every thread and
//!   task, holds that end with their holder (a crashed program's keys are
//!   released one TTL later), a fencing token with every grant, blocking
//!   and async methods, automatic Ping and resume, and a signal when the
//!   session is lost ([`Session::lost`]). Give it every node of a cluster
//!   (`"a:22119,b:22119,c:22119"`): it opens on any that answers and rides
//!   through a failover, reissuing its pending Locks. TLS with the `tls`
//!   feature (`SessionBuilder::tls`).
//! - A [`Client`]: the v1 protocol, one request per TCP connection. Its
//!   holds have no owner: a key stays held until it is unlocked or reset,
//!   even after the program dies. TLS with the `tls` feature
//!   (`Client::with_tls`).
//!
//! ```no_run
//! use locking_center::{Error, Session};
//! use std::time::Duration;
//!
//! let session = Session::builder("localhost:22119")
//!     .ttl(Duration::from_secs(10))
//!     .source("billing-worker")
//!     .open()?;
//! let guard = session.lock("invoices/2026-11")?; // waits its turn (FIFO)
//! println!("holding {} with token {}", guard.key(), guard.token());
//! guard.unlock()?; // or let it drop: the key is released either way
//! session.close()?;
//! # Ok::<(), Error>(())
//! ```
//!
//! The default answer timeout of every request that does not wait in a
//! queue (TryLock, Unlock, the resets, Close) is 30 s; a Lock waits as long
//! as its own timeout or cancellation says.
//!
//! [Locking-Center]: https://github.com/locking-center/locking-center

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod conn;
mod error;
mod session;
#[cfg(feature = "tls")]
mod tls;
pub mod wire;

pub use error::{Error, LostReason};
#[cfg(feature = "tls")]
pub use tls::{TlsConfig, TlsConfigBuilder};

/// Without the `tls` feature there is no TLS configuration to give.
#[cfg(not(feature = "tls"))]
#[derive(Debug, Clone)]
pub(crate) enum TlsConfig {}
pub use session::{Lost, Session, SessionBuilder, SessionGuard};
pub use wire::Action;

/// The answer timeout of requests that never wait in a queue (TryLock,
/// Unlock, the resets, Close), the same in every Locking-Center client.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// `address` with the default port added when it names none.
pub(crate) fn add_default_port(address: String) -> String {
    if has_port(&address) {
        address
    } else {
        format!("{address}:{DEFAULT_PORT}")
    }
}

/// The server's default TCP port, used when the address names none.
pub const DEFAULT_PORT: u16 = 22119;

/// How long the client waits for the server to close a connection it hung
/// up on (timeout or cancellation) before giving up on it. In that window a
/// grant that crossed the hang-up is still read, so it is not lost.
const HANG_UP_GRACE: Duration = Duration::from_secs(2);

/// While a [`CancelToken`] is attached, a waiting read wakes up this often to
/// notice a server that does not close after the hang-up.
const CANCEL_POLL: Duration = Duration::from_millis(500);

/// A v1 Locking-Center client: an address and a source given once.
///
/// Cheap to clone; every call opens its own connection, so one `Client` may
/// be shared between threads. Its holds have no owner: a key stays held
/// until someone unlocks or resets it, also after this program dies. Use a
/// [`Session`] for holds that end with their holder.
#[derive(Debug, Clone)]
pub struct Client {
    address: String,
    source: String,
    connect_timeout: Duration,
    request_timeout: Option<Duration>,
    tls: Option<TlsConfig>,
}

impl Client {
    /// A client for `address` (`host:port`; a bare host gets port 22119;
    /// several, `"a:22119,b:22119"`, are tried in random order, each name
    /// with all its DNS records, until one connects),
    /// with an empty source (the server then names the requester by its IP
    /// address), a 5 s connect timeout and a 30 s answer timeout for calls
    /// that do not wait in a queue.
    pub fn new(address: impl Into<String>) -> Client {
        Client {
            address: conn::split_addresses(&address.into()).join(","),
            source: String::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            tls: None,
        }
    }

    /// Sets the source sent with every request (0..=127 bytes; checked on
    /// each call, before connecting).
    pub fn with_source(mut self, source: impl Into<String>) -> Client {
        self.source = source.into();
        self
    }

    /// Sets how long to wait for the TCP connection to be established (and
    /// over TLS, for each step of the handshake).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Client {
        self.connect_timeout = timeout;
        self
    }

    /// Speaks TLS with this configuration on every connection (a server
    /// started with `TLS_CERT`/`TLS_KEY`, and `TLS_CLIENT_CA` for mutual
    /// TLS): the same [`TlsConfig`] a [`Session`] takes. A failed handshake
    /// is [`Error::Unreachable`]; it happens before the frame is written,
    /// so the next address of a list is tried. Only with the crate's `tls`
    /// feature.
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, config: TlsConfig) -> Client {
        self.tls = Some(config);
        self
    }

    /// Sets how long TryLock, Unlock and the resets wait for their answer
    /// (`None`: forever). Lock and Wait use [`WaitOptions`] instead.
    pub fn with_request_timeout(mut self, timeout: Option<Duration>) -> Client {
        self.request_timeout = timeout;
        self
    }

    /// The server address, `host:port` (a list: comma-separated).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The source sent with every request.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Waits (FIFO) until `key` is granted, without a time limit, and
    /// returns the guard that holds it.
    ///
    /// Errors: [`Error::Reset`] if the key or this source is reset while
    /// waiting; [`Error::Invalid`], [`Error::Unreachable`].
    pub fn lock(&self, key: &str) -> Result<LockGuard, Error> {
        self.lock_with(key, &WaitOptions::new())
    }

    /// Like [`Client::lock`], giving up with [`Error::Timeout`] after
    /// `timeout`; the client hangs up (its write side closed; over TLS a
    /// close_notify first) so the server withdraws the waiter.
    pub fn lock_timeout(&self, key: &str, timeout: Duration) -> Result<LockGuard, Error> {
        self.lock_with(key, &WaitOptions::new().timeout(timeout))
    }

    /// Like [`Client::lock`] with a timeout and/or a [`CancelToken`].
    ///
    /// If the grant crosses the timeout or the cancellation on the wire,
    /// the call returns the guard: the key is held.
    pub fn lock_with(&self, key: &str, options: &WaitOptions) -> Result<LockGuard, Error> {
        self.call(Action::Lock, key, &self.source, Some(options))?;
        Ok(LockGuard::new(self.clone(), key))
    }

    /// Takes `key` only if it is free right now: `Ok(Some(guard))` if it is
    /// now held by this client, `Ok(None)` if someone holds it.
    ///
    /// Errors: [`Error::Refused`] (answer `-`), [`Error::Invalid`],
    /// [`Error::Unreachable`].
    pub fn try_lock(&self, key: &str) -> Result<Option<LockGuard>, Error> {
        if self.call(Action::TryLock, key, &self.source, None)? {
            Ok(Some(LockGuard::new(self.clone(), key)))
        } else {
            Ok(None)
        }
    }

    /// Releases `key`. Any client may release any key.
    ///
    /// Errors: [`Error::Refused`] if the key was not held;
    /// [`Error::Invalid`], [`Error::Unreachable`] (for an Unlock whose frame
    /// was written, the key may or may not have been released: it is never
    /// sent again).
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
        self.lock_with(key, options)?.unlock()
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

    /// Runs `f` while holding `key`, then unlocks it whatever `f` returned
    /// (also when it panics). An unlock failure is returned only when the
    /// lock was taken and `f` finished.
    pub fn with_lock<T>(&self, key: &str, f: impl FnOnce() -> T) -> Result<T, Error> {
        let guard = self.lock(key)?;
        let value = f();
        guard.unlock()?;
        Ok(value)
    }

    /// One request: validate, connect (and the TLS handshake), write the
    /// frame once, read one byte.
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

        let stream = self.connect()?;
        let _registration = match token {
            Some(t) => {
                let clone = stream.clone();
                // The server reads the end of the stream (EOF, or
                // close_notify over TLS) as a hang-up and withdraws the
                // waiter; the read side stays open to catch a grant already
                // sent.
                let reg = t.register(Box::new(move || {
                    let _ = clone.close_write();
                }));
                if t.is_cancelled() {
                    return Err(Error::Cancelled);
                }
                Some(reg)
            }
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

    /// A connection to the first address that answers (and completes the
    /// TLS handshake, with TLS). Nothing is written yet, so trying the next
    /// address after a failure resends nothing.
    fn connect(&self) -> Result<conn::Conn, Error> {
        let addrs =
            conn::resolve(&conn::split_addresses(&self.address)).map_err(Error::Unreachable)?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
        for (addr, host) in addrs {
            match conn::Conn::connect(&addr, &host, self.connect_timeout, self.tls.as_ref()) {
                Ok(stream) => return Ok(stream),
                Err(e) => last = e,
            }
        }
        Err(Error::Unreachable(last))
    }
}

/// Hangs up a waiting request, or a TryLock past its request timeout:
/// closes the write side (over TLS after a close_notify) so the server sees
/// the end of the stream and withdraws the waiter, then reads briefly so a
/// grant that crossed the hang-up on the wire is not lost. For a TryLock
/// only a '+' changes `why`. The connection is closed on return.
fn give_up(action: Action, stream: conn::Conn, why: Error) -> Result<bool, Error> {
    let _ = stream.close_write();
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
    pub(crate) timeout: Option<Duration>,
    pub(crate) cancel: Option<CancelToken>,
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
/// gives up every call still waiting under it: a v1 Lock hangs up its
/// connection (the server withdraws the waiter), a session's Lock sends
/// Cancel. The calls return [`Error::Cancelled`]. A cancelled token stays
/// cancelled: later calls with it fail at once.
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Mutex<TokenState>>,
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

type OnCancel = Box<dyn Fn() + Send>;

#[derive(Default)]
struct TokenState {
    cancelled_at: Option<Instant>,
    next_id: u64,
    /// What to do for each call waiting under the token when it is
    /// cancelled.
    waiting: Vec<(u64, OnCancel)>,
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
        for (_, on_cancel) in &state.waiting {
            on_cancel();
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

    /// Runs `on_cancel` when the token is cancelled, until the registration
    /// is dropped. The caller checks [`CancelToken::is_cancelled`] after
    /// registering, so a cancel in between is not missed.
    pub(crate) fn register(&self, on_cancel: OnCancel) -> Registration<'_> {
        let mut state = self.state();
        let id = state.next_id;
        state.next_id += 1;
        state.waiting.push((id, on_cancel));
        Registration { token: self, id }
    }
}

/// Ends a [`CancelToken::register`] when dropped.
pub(crate) struct Registration<'a> {
    token: &'a CancelToken,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.token.state().waiting.retain(|(id, _)| *id != self.id);
    }
}

/// A key held through a v1 [`Client`], returned by [`Client::lock`] and
/// [`Client::try_lock`].
///
/// [`LockGuard::unlock`] releases it and reports the outcome. Dropping the
/// guard releases it too, quietly (the way out of a scope on an error path
/// or a panic); only a failed release is reported, on stderr, since Drop
/// cannot return it. [`LockGuard::detach`] keeps the key held after the
/// guard is gone (the v1 meaning of a lock: it outlives the program).
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

    /// Gives the guard up without unlocking: the key stays held until
    /// someone unlocks or resets it. Returns the key.
    pub fn detach(mut self) -> String {
        self.held = false;
        std::mem::take(&mut self.key)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        self.held = false;
        if let Err(e) = self.client.unlock(&self.key) {
            // Drop cannot return the error and the key may still be held:
            // say so rather than hide it.
            eprintln!(
                "locking-center: release of key {:?} when its guard was dropped failed: {e}",
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
