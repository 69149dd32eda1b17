//! Sessions (docs/protocol.md, "Sessions"): one TCP connection that carries
//! the requests of many threads and tasks at once, answered out of order by
//! id, and that owns the keys it takes.
//!
//! Guarantees:
//! - Every grant comes with its fencing token ([`SessionGuard::token`]).
//! - A Lock that gives up (timeout, [`crate::CancelToken`], a dropped
//!   future) sends Cancel; if the grant crosses the Cancel it is released by
//!   its token, so an error from a Lock always means nothing is held.
//! - Ping goes out whenever nothing was sent for a third of the TTL.
//! - A dropped connection is resumed, through any of the session's
//!   addresses (in random order), with a growing back-off as long as the
//!   TTL allows (counted from the send time of the last answered request).
//!   Pending Locks and TryLocks are reissued with their old ids, so a grant
//!   whose answer was lost is returned, not waited for (Reissue); an Unlock
//!   or a reset pending on it fails with [`Error::OutcomeUnknown`] and is
//!   never resent blindly; after the resume the session releases any grant
//!   nobody owns.
//! - When the session is lost (the resume refused, the TTL passed), every
//!   pending and later call fails with [`Error::SessionLost`], and
//!   [`Session::lost`] / [`Session::wait_lost`] report it.
//!
//! Threads: a session runs two threads of its own, a supervisor (it writes
//! every frame, sends Pings and resumes) and a reader per connection (it
//! matches answers to calls). Both end after [`Session::close`] returns, or
//! on their own after the last handle is dropped (which closes the session).
//! The async methods need no particular runtime: their futures are woken by
//! those threads.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::io::{self, BufReader, Read};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::conn::{self, Conn};
use crate::wire::{self, SessionAction};
use crate::{CancelToken, Error, LostReason, TlsConfig, WaitOptions, DEFAULT_REQUEST_TIMEOUT};

/// The server's bound on requests awaiting an answer on one connection:
/// one more drops the connection. Cancel does not count.
const MAX_PENDING: usize = 1024;
/// The wait after the first failed resume attempt; it doubles up to
/// [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Settings of a session, given before it opens. Made by
/// [`Session::builder`].
#[derive(Debug, Clone)]
pub struct SessionBuilder {
    addresses: Vec<String>,
    tls: Option<TlsConfig>,
    ttl: Duration,
    source: String,
    auth: Vec<u8>,
    connect_timeout: Duration,
    request_timeout: Duration,
}

impl SessionBuilder {
    /// The servers to try, instead of those given to [`Session::builder`]:
    /// the nodes of a cluster (each `host:port`, a bare host gets port
    /// 22119; a name with several DNS records counts as all of them). The
    /// session connects to any that answers, in random order, and after a
    /// dropped connection resumes through any of them.
    pub fn addresses<I, S>(mut self, addresses: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.addresses = addresses
            .into_iter()
            .flat_map(|a| conn::split_addresses(a.as_ref()))
            .collect();
        self
    }

    /// Speaks TLS with this configuration (a server started with
    /// `TLS_CERT`/`TLS_KEY`, and `TLS_CLIENT_CA` for mutual TLS). Only with
    /// the crate's `tls` feature.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, config: TlsConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// The TTL to ask for: the holds outlive a silent client by this long.
    /// Zero (the default) asks for the server's `SESSION_TTL`; the server
    /// clamps anything else to 1 s ..= 10 min.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Names the requester (0..=127 bytes; empty: the server uses the
    /// peer's IP address).
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// The server's `AUTH_TOKEN` (1..=127 bytes), sent on the open and on
    /// every resume.
    pub fn auth_token(mut self, token: impl Into<Vec<u8>>) -> Self {
        self.auth = token.into();
        self
    }

    /// Time allowed for one attempt to connect and open (or resume) on one
    /// address (default 5 s). [`SessionBuilder::open`] tries every address
    /// at least once, and goes round them again with a back-off until this
    /// much time has passed.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Time allowed for the answer to TryLock, Unlock, the resets and Close
    /// (default 30 s). A Lock waits as long as its own timeout says.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Connects and opens the session, blocking.
    ///
    /// Errors: [`Error::Invalid`] (source or auth over 127 bytes, nothing
    /// sent), [`Error::Unreachable`] (no address answered; a failed TLS
    /// handshake says why in its cause), and
    /// [`Error::Refused`] when the server refused the session (a wrong
    /// auth token, its connection limit).
    pub fn open(self) -> Result<Session, Error> {
        Session::start(self)
    }

    /// [`SessionBuilder::open`] as a future: the connect runs on a thread of
    /// its own, so no executor thread blocks.
    pub async fn open_async(self) -> Result<Session, Error> {
        let slot = Arc::new(Mutex::new(OpenSlot::default()));
        let worker = Arc::clone(&slot);
        thread::Builder::new()
            .name("locking-center-open".into())
            .spawn(move || {
                let result = self.open();
                let mut s = lock(&worker);
                s.result = Some(result);
                if let Some(w) = s.waker.take() {
                    w.wake();
                }
            })
            .map_err(Error::Unreachable)?;
        OpenFuture { slot }.await
    }
}

#[derive(Default)]
struct OpenSlot {
    result: Option<Result<Session, Error>>,
    waker: Option<Waker>,
}

struct OpenFuture {
    slot: Arc<Mutex<OpenSlot>>,
}

impl Future for OpenFuture {
    type Output = Result<Session, Error>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = lock(&self.slot);
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A session: one connection shared by every thread and task that holds a
/// clone of it, owning the keys it takes. See the module documentation.
///
/// Cheap to clone (`Send + Sync`). The session is closed by
/// [`Session::close`], or when the last clone and the last guard are
/// dropped.
#[derive(Debug, Clone)]
pub struct Session {
    handle: Arc<Handle>,
}

/// Closes the session when the last [`Session`] clone goes.
#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.close_on_drop();
    }
}

struct Shared {
    address: String,
    cfg: SessionBuilder,
    id: u64,
    ttl: Duration,
    /// Guards every mutable part of the session (see [`State`]).
    state: Mutex<State>,
    /// Wakes the supervisor: something to send, the connection broke, the
    /// session ended.
    wake: Condvar,
    /// Notified once, when the session ends.
    ended: Condvar,
    /// The supervisor thread, joined by [`Session::close`].
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("address", &self.address)
            .field("id", &format_args!("{:016x}", self.id))
            .field("ttl", &self.ttl)
            .finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Lost(LostReason),
    Closed,
}

impl End {
    fn error(self) -> Error {
        match self {
            End::Lost(r) => Error::SessionLost(r),
            End::Closed => Error::SessionClosed,
        }
    }
}

type Handle64 = u64;

struct State {
    /// A clone of the connection being served, to shut it down; `None`
    /// between connections.
    conn: Option<Conn>,
    /// The connection being served has failed (reader or writer).
    broken: bool,
    /// Calls not yet written, in order.
    queue: VecDeque<Handle64>,
    /// Every live call, by handle.
    calls: HashMap<Handle64, Call>,
    next_handle: Handle64,
    /// Calls written on this connection and not yet answered, by id.
    pending: HashMap<u32, Handle64>,
    next_id: u32,
    /// Grants the program holds through this session: key to token.
    held: HashMap<String, u64>,
    /// The id of the request that made each grant of `held`, by key.
    held_id: HashMap<String, u32>,
    /// Ids no new request may take: those of `held_id` and of the Locks
    /// and TryLocks waiting to be reissued. Reissue finds a grant by the id
    /// of its request, so an id reused while its grant is held would find
    /// the wrong request's.
    reserved: HashSet<u32>,
    /// Grants the session may hold that no caller owns (a Lock lost with
    /// its connection, an Unlock whose answer was lost), released after the
    /// resume; token 0 when unknown.
    strays: Vec<(String, u64)>,
    /// When the latest request the server answered was sent: the server's
    /// TTL runs out no earlier than `confirmed + ttl`.
    confirmed: Instant,
    last_sent: Instant,
    /// The Ping awaiting its answer.
    ping: Option<Handle64>,
    closing: bool,
    close_ok: bool,
    end: Option<End>,
    lost_wakers: Vec<Waker>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// A caller waits for the outcome (or has gone: `owner_gone`).
    User,
    /// The session's own Ping or Cancel: nobody waits.
    Internal,
    /// The session's own release of a stray grant.
    StrayUnlock,
}

enum Waiter {
    None,
    Thread(Thread),
    Task(Waker),
}

struct Call {
    action: SessionAction,
    key: String,
    /// The request's token; for Cancel, the id of the Lock it names.
    token: u64,
    kind: Kind,
    id: u32,
    sent: bool,
    sent_at: Instant,
    /// A Lock or TryLock sent on a connection lost before its answer: it is
    /// sent again with the same id after the resume (Reissue).
    reissue: bool,
    /// The caller stopped waiting after the call was sent: a `+` to come is
    /// released by its token.
    gave_up: bool,
    /// Nobody will collect the outcome: the call is removed when it settles.
    owner_gone: bool,
    outcome: Option<Result<(u8, u64), Error>>,
    waiter: Waiter,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in a thread that held the lock leaves the state consistent
    // enough to fail calls cleanly: every update is a single step.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Session {
    /// Opens a session on `address` (`host:port`, a bare host gets port
    /// 22119) with the server's TTL, an empty source and no auth token.
    pub fn open(address: impl Into<String>) -> Result<Session, Error> {
        Session::builder(address).open()
    }

    /// Settings for a session on `address`; finish with
    /// [`SessionBuilder::open`] or [`SessionBuilder::open_async`].
    ///
    /// `address` may list several servers, `"a:22119,b:22119,c:22119"` (the
    /// nodes of a cluster; see [`SessionBuilder::addresses`]).
    pub fn builder(address: impl Into<String>) -> SessionBuilder {
        SessionBuilder {
            addresses: conn::split_addresses(&address.into()),
            tls: None,
            ttl: Duration::ZERO,
            source: String::new(),
            auth: Vec::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    fn start(cfg: SessionBuilder) -> Result<Session, Error> {
        let (conn, answer, sent_at) = open_first(&cfg)?;
        let shared = Arc::new(Shared {
            address: cfg.addresses.join(","),
            id: answer.session,
            ttl: Duration::from_millis(u64::from(answer.ttl_ms)),
            cfg,
            state: Mutex::new(State {
                conn: None,
                broken: false,
                queue: VecDeque::new(),
                calls: HashMap::new(),
                next_handle: 0,
                pending: HashMap::new(),
                next_id: 0,
                held: HashMap::new(),
                held_id: HashMap::new(),
                reserved: HashSet::new(),
                strays: Vec::new(),
                confirmed: sent_at,
                last_sent: sent_at,
                ping: None,
                closing: false,
                close_ok: false,
                end: None,
                lost_wakers: Vec::new(),
            }),
            wake: Condvar::new(),
            ended: Condvar::new(),
            supervisor: Mutex::new(None),
        });
        let worker = Arc::clone(&shared);
        let join = thread::Builder::new()
            .name("locking-center-session".into())
            .spawn(move || worker.run(conn))
            .map_err(Error::Unreachable)?;
        *lock(&shared.supervisor) = Some(join);
        Ok(Session {
            handle: Arc::new(Handle { shared }),
        })
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// The session id the server gave (64 random bits, never 0).
    pub fn id(&self) -> u64 {
        self.shared().id
    }

    /// The TTL the server granted.
    pub fn ttl(&self) -> Duration {
        self.shared().ttl
    }

    /// Waits (FIFO) until `key` is granted to this session, without a time
    /// limit, and returns the guard that holds it and its fencing token.
    ///
    /// A thread that locks a key this session already holds waits for
    /// itself, as with a non-reentrant mutex. Errors: [`Error::Reset`] (the
    /// key or this source was reset while waiting), [`Error::Invalid`],
    /// [`Error::Disconnected`], [`Error::SessionLost`],
    /// [`Error::SessionClosed`].
    pub fn lock(&self, key: &str) -> Result<SessionGuard, Error> {
        self.lock_with(key, &WaitOptions::new())
    }

    /// [`Session::lock`], giving up with [`Error::Timeout`] after `timeout`.
    pub fn lock_timeout(&self, key: &str, timeout: Duration) -> Result<SessionGuard, Error> {
        self.lock_with(key, &WaitOptions::new().timeout(timeout))
    }

    /// [`Session::lock`] with a timeout and/or a [`CancelToken`]. Giving up
    /// sends Cancel and waits for the Lock's one answer; a grant that
    /// crossed the Cancel is released by its token, so an error means
    /// nothing is held.
    pub fn lock_with(&self, key: &str, options: &WaitOptions) -> Result<SessionGuard, Error> {
        if options
            .cancel
            .as_ref()
            .is_some_and(CancelToken::is_cancelled)
        {
            wire::validate_request(SessionAction::Lock, key)?;
            return Err(Error::Cancelled);
        }
        let deadline = options.timeout.map(|t| Instant::now() + t);
        let h = self.shared().submit(SessionAction::Lock, key, 0)?;
        let (status, token) = self.shared().wait(h, deadline, options.cancel.as_ref())?;
        self.lock_outcome(key, status, token)
    }

    fn lock_outcome(&self, key: &str, status: u8, token: u64) -> Result<SessionGuard, Error> {
        match status {
            b'+' => Ok(SessionGuard::new(self.clone(), key, token)),
            b'-' => Err(self.shared().refusal(Error::Reset)),
            other => Err(Error::UnexpectedAnswer(other)),
        }
    }

    /// Takes `key` only if it is free right now: `Ok(Some(guard))` with the
    /// token, `Ok(None)` if anyone holds it (this session included).
    pub fn try_lock(&self, key: &str) -> Result<Option<SessionGuard>, Error> {
        let h = self.shared().submit(SessionAction::TryLock, key, 0)?;
        let (status, token) = self.shared().wait_request(h)?;
        self.try_lock_outcome(key, status, token)
    }

    fn try_lock_outcome(
        &self,
        key: &str,
        status: u8,
        token: u64,
    ) -> Result<Option<SessionGuard>, Error> {
        match status {
            b'+' => Ok(Some(SessionGuard::new(self.clone(), key, token))),
            b'#' => Ok(None),
            b'-' => Err(self.shared().refusal(Error::Refused)),
            other => Err(Error::UnexpectedAnswer(other)),
        }
    }

    /// Releases the grant of `key` with fencing token `token` (what a guard
    /// does). [`Error::Refused`] if this session does not hold that grant:
    /// nothing was released. Token 0 would release whichever grant this
    /// session holds on the key; prefer the token.
    pub fn unlock(&self, key: &str, token: u64) -> Result<(), Error> {
        let h = self.shared().submit(SessionAction::Unlock, key, token)?;
        let (status, _) = self.shared().wait_request(h)?;
        unit_outcome(status)
    }

    /// Drops the holder of `key` (whoever it is) and refuses every waiter
    /// of it ([`Error::Reset`]). The operator's tool.
    pub fn reset_by_key(&self, key: &str) -> Result<(), Error> {
        let h = self.shared().submit(SessionAction::ResetByKey, key, 0)?;
        unit_outcome(self.shared().wait_request(h)?.0)
    }

    /// Refuses every waiter from `source` and releases every key it holds
    /// (empty: this connection's IP address as the server sees it).
    pub fn reset_by_source(&self, source: &str) -> Result<(), Error> {
        let h = self
            .shared()
            .submit(SessionAction::ResetBySource, source, 0)?;
        unit_outcome(self.shared().wait_request(h)?.0)
    }

    /// Runs `f(token)` while holding `key`, then releases it (also when `f`
    /// panics). If the session was lost while `f` ran, the result is
    /// [`Error::SessionLost`]: `f` worked without the lock for some of its
    /// time, and its writes should have carried the token.
    pub fn with_lock<T>(&self, key: &str, f: impl FnOnce(u64) -> T) -> Result<T, Error> {
        let guard = self.lock(key)?;
        let value = f(guard.token());
        guard.unlock()?;
        Ok(value)
    }

    /// Async [`Session::lock`]. Dropping the future (for instance through
    /// `tokio::time::timeout`) gives up: Cancel is sent, and a grant that
    /// crosses it is released by its token.
    pub async fn lock_async(&self, key: &str) -> Result<SessionGuard, Error> {
        let h = self.shared().submit(SessionAction::Lock, key, 0)?;
        let (status, token) = CallFuture::new(self.shared(), h).await?;
        self.lock_outcome(key, status, token)
    }

    /// Async [`Session::try_lock`].
    pub async fn try_lock_async(&self, key: &str) -> Result<Option<SessionGuard>, Error> {
        let h = self.shared().submit(SessionAction::TryLock, key, 0)?;
        let (status, token) = CallFuture::new(self.shared(), h).await?;
        self.try_lock_outcome(key, status, token)
    }

    /// Async [`Session::unlock`].
    pub async fn unlock_async(&self, key: &str, token: u64) -> Result<(), Error> {
        let h = self.shared().submit(SessionAction::Unlock, key, token)?;
        unit_outcome(CallFuture::new(self.shared(), h).await?.0)
    }

    /// Async [`Session::reset_by_key`].
    pub async fn reset_by_key_async(&self, key: &str) -> Result<(), Error> {
        let h = self.shared().submit(SessionAction::ResetByKey, key, 0)?;
        unit_outcome(CallFuture::new(self.shared(), h).await?.0)
    }

    /// Async [`Session::reset_by_source`].
    pub async fn reset_by_source_async(&self, source: &str) -> Result<(), Error> {
        let h = self
            .shared()
            .submit(SessionAction::ResetBySource, source, 0)?;
        unit_outcome(CallFuture::new(self.shared(), h).await?.0)
    }

    /// A future that completes when the session ends, with
    /// [`Error::SessionLost`] (its holds are gone) or
    /// [`Error::SessionClosed`]. Any number may wait.
    pub fn lost(&self) -> Lost {
        Lost {
            shared: Arc::clone(self.shared()),
        }
    }

    /// Blocks until the session ends; returns why (see [`Session::lost`]).
    pub fn wait_lost(&self) -> Error {
        let sh = self.shared();
        let mut st = lock(&sh.state);
        loop {
            if let Some(end) = st.end {
                return end.error();
            }
            st = sh.ended.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// [`Session::wait_lost`] bounded by `timeout`: `None` if the session
    /// still lives.
    pub fn wait_lost_timeout(&self, timeout: Duration) -> Option<Error> {
        let sh = self.shared();
        let deadline = Instant::now() + timeout;
        let mut st = lock(&sh.state);
        loop {
            if let Some(end) = st.end {
                return Some(end.error());
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            st = sh
                .ended
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Why the session ended, or `None` while it lives.
    pub fn err(&self) -> Option<Error> {
        lock(&self.shared().state).end.map(End::error)
    }

    /// Ends the session: its pending Locks are refused, every key it holds
    /// is released at once, and its threads end before this returns.
    /// `Ok(())` also when it was already closed; [`Error::SessionLost`] if
    /// it had been lost. On another error the server releases the holds
    /// one TTL after it last heard from the session.
    pub fn close(&self) -> Result<(), Error> {
        let sh = self.shared();
        let result = sh.close_blocking();
        sh.finish(End::Closed);
        let join = lock(&sh.supervisor).take();
        if let Some(join) = join {
            let _ = join.join(); // a panic there has already failed every call
        }
        result
    }

    /// Async [`Session::close`]: the Close is awaited; the threads end on
    /// their own right after.
    pub async fn close_async(&self) -> Result<(), Error> {
        let sh = self.shared();
        let result = loop {
            let h = match sh.begin_close() {
                Ok(Some(h)) => h,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            };
            match CallFuture::new(sh, h).await {
                Err(Error::Disconnected) => continue,
                Ok(_) | Err(Error::SessionClosed) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        sh.finish(End::Closed);
        result
    }
}

fn unit_outcome(status: u8) -> Result<(), Error> {
    match status {
        b'+' => Ok(()),
        b'-' => Err(Error::Refused),
        other => Err(Error::UnexpectedAnswer(other)),
    }
}

/// A key held by a session, with the fencing token of its grant. Returned
/// by [`Session::lock`], [`Session::try_lock`] and their async forms.
///
/// [`SessionGuard::unlock`] releases it and reports the outcome. Dropping
/// the guard releases it too, quietly and without blocking (the Unlock by
/// token is queued on the session): that is the normal way out of a scope
/// on an error path.
#[derive(Debug)]
#[must_use = "dropping the guard at once releases the lock"]
pub struct SessionGuard {
    session: Session,
    key: String,
    token: u64,
    held: bool,
}

impl SessionGuard {
    fn new(session: Session, key: &str, token: u64) -> SessionGuard {
        SessionGuard {
            session,
            key: key.to_owned(),
            token,
            held: true,
        }
    }

    /// The key held.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The grant's fencing token: pass it with every write to the resource
    /// the lock protects, which refuses a token lower than the highest it
    /// has seen.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The session holding the key.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Releases the key. [`Error::Refused`]: the session no longer held
    /// this grant (a reset took it); [`Error::SessionLost`]: the session was
    /// lost, so the hold had ended anyway.
    pub fn unlock(mut self) -> Result<(), Error> {
        self.held = false;
        self.session.unlock(&self.key, self.token)
    }

    /// Async [`SessionGuard::unlock`].
    pub async fn unlock_async(mut self) -> Result<(), Error> {
        self.held = false;
        self.session.unlock_async(&self.key, self.token).await
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        self.held = false;
        // Nobody waits for this answer; an Unlock by token is safe to
        // settle after a resume, so the session takes care of it. A session
        // already ended has no holds left: nothing to release.
        let sh = self.session.shared();
        if let Ok(h) = sh.submit(SessionAction::Unlock, &self.key, self.token) {
            let mut st = lock(&sh.state);
            if let Some(c) = st.calls.get_mut(&h) {
                c.owner_gone = true;
                if c.outcome.is_some() {
                    st.calls.remove(&h);
                }
            }
        }
    }
}

/// Completes when the session ends. From [`Session::lost`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Lost {
    shared: Arc<Shared>,
}

impl Future for Lost {
    type Output = Error;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Error> {
        let mut st = lock(&self.shared.state);
        if let Some(end) = st.end {
            return Poll::Ready(end.error());
        }
        if !st.lost_wakers.iter().any(|w| w.will_wake(cx.waker())) {
            st.lost_wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// The outcome of one call, awaited. Dropping it before it completes gives
/// the call up.
struct CallFuture {
    shared: Arc<Shared>,
    h: Handle64,
    done: bool,
}

impl CallFuture {
    fn new(shared: &Arc<Shared>, h: Handle64) -> CallFuture {
        CallFuture {
            shared: Arc::clone(shared),
            h,
            done: false,
        }
    }
}

impl Future for CallFuture {
    type Output = Result<(u8, u64), Error>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let shared = Arc::clone(&self.shared);
        let mut st = lock(&shared.state);
        if let Some(outcome) = take_outcome(&mut st, self.h) {
            self.done = true;
            return Poll::Ready(outcome);
        }
        if let Some(c) = st.calls.get_mut(&self.h) {
            c.waiter = Waiter::Task(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Drop for CallFuture {
    fn drop(&mut self) {
        if !self.done {
            let mut st = lock(&self.shared.state);
            self.shared.abandon(&mut st, self.h);
        }
    }
}

fn take_outcome(st: &mut State, h: Handle64) -> Option<Result<(u8, u64), Error>> {
    let c = st.calls.get_mut(&h)?;
    let outcome = c.outcome.take()?;
    st.calls.remove(&h);
    Some(outcome)
}

/// Opens a new session on any of the addresses: rounds over all of them
/// (each attempt within the connect timeout), with a back-off between
/// rounds, until one opens or the connect timeout has passed since the
/// start (every address is tried at least once).
fn open_first(cfg: &SessionBuilder) -> Result<(Conn, wire::OpenAnswer, Instant), Error> {
    let start = Instant::now();
    let mut backoff = MIN_BACKOFF;
    loop {
        match open_round(cfg, 0, None) {
            Ok(opened) => return Ok(opened),
            Err(e @ Error::Unreachable(_)) => {
                let left = cfg.connect_timeout.saturating_sub(start.elapsed());
                if left.is_zero() {
                    return Err(e);
                }
                thread::sleep((backoff + conn::jitter(backoff)).min(left));
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => return Err(e),
        }
    }
}

/// One round: tries every address (all the records of each name) in random
/// order until one opens, or resumes session `resume`, each attempt within
/// the connect timeout and before `deadline`. A node that closes without an
/// answer (a follower that knows no leader) or fails the TLS handshake is
/// passed over; a refusal ends the round.
fn open_round(
    cfg: &SessionBuilder,
    resume: u64,
    deadline: Option<Instant>,
) -> Result<(Conn, wire::OpenAnswer, Instant), Error> {
    let ttl_ms = u32::try_from(cfg.ttl.as_millis()).unwrap_or(u32::MAX);
    let ttl_ms = if ttl_ms == 0 && !cfg.ttl.is_zero() {
        1
    } else {
        ttl_ms
    };
    let frame = wire::encode_open(&wire::Open {
        version: wire::SESSION_VERSION,
        ttl_ms,
        resume,
        source: &cfg.source,
        auth: &cfg.auth,
    })?;
    let addrs = conn::resolve(&cfg.addresses).map_err(Error::Unreachable)?;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
    for (addr, host) in addrs {
        let limit = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => cfg.connect_timeout,
        }
        .min(cfg.connect_timeout);
        if limit.is_zero() {
            return Err(Error::Unreachable(io::Error::new(
                io::ErrorKind::TimedOut,
                "connect timed out",
            )));
        }
        match open_on(&addr, &host, cfg, &frame, resume, limit) {
            Err(Error::Unreachable(e)) => {
                last = io::Error::new(e.kind(), format!("{addr}: {e}"));
            }
            other => return other,
        }
    }
    Err(Error::Unreachable(last))
}

/// One attempt: connect to `addr`, send the open frame, read its answer,
/// all within `limit`.
fn open_on(
    addr: &std::net::SocketAddr,
    host: &str,
    cfg: &SessionBuilder,
    frame: &[u8],
    resume: u64,
    limit: Duration,
) -> Result<(Conn, wire::OpenAnswer, Instant), Error> {
    let deadline = Instant::now() + limit;
    let conn = Conn::connect(addr, host, limit, cfg.tls.as_ref()).map_err(Error::Unreachable)?;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    conn.set_read_timeout(Some(left))
        .map_err(Error::Unreachable)?;
    conn.set_write_timeout(Some(left))
        .map_err(Error::Unreachable)?;
    let sent_at = Instant::now();
    conn.write_all(frame).map_err(Error::Unreachable)?;
    let mut b = [0u8; wire::ANSWER_LEN];
    conn.read_exact(&mut b).map_err(Error::Unreachable)?;
    let answer = wire::decode_open_answer(&b);
    match answer.status {
        b'+' if answer.ttl_ms != 0 && answer.session != 0 => {
            conn.set_read_timeout(None).map_err(Error::Unreachable)?;
            Ok((conn, answer, sent_at))
        }
        b'-' if resume != 0 => Err(Error::SessionLost(LostReason::ResumeRefused)),
        b'-' => Err(Error::Refused),
        other => Err(Error::UnexpectedAnswer(other)),
    }
}

impl Shared {
    /// Queues a request of the program's; the handle names its outcome.
    fn submit(&self, action: SessionAction, key: &str, token: u64) -> Result<Handle64, Error> {
        wire::validate_request(action, key)?;
        let mut st = lock(&self.state);
        if let Some(end) = st.end {
            return Err(end.error());
        }
        let h = push(&mut st, action, key, token, Kind::User);
        drop(st);
        self.wake.notify_all();
        Ok(h)
    }

    /// The error for a `-` answer: a Lock refused by this session's own
    /// Close reports the Close.
    fn refusal(&self, err: Error) -> Error {
        if lock(&self.state).closing {
            Error::SessionClosed
        } else {
            err
        }
    }

    /// Waits for a call of the program's other than Lock, bounded by the
    /// request timeout.
    fn wait_request(&self, h: Handle64) -> Result<(u8, u64), Error> {
        self.wait(h, Some(Instant::now() + self.cfg.request_timeout), None)
    }

    /// Waits for the outcome of call `h` until `deadline` or `cancel`. A
    /// Lock that gives up sends Cancel and waits (a request timeout more)
    /// for its one answer, so that a grant crossing the Cancel is released
    /// before this returns the error.
    fn wait(
        &self,
        h: Handle64,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> Result<(u8, u64), Error> {
        let me = thread::current();
        let _registration = cancel.map(|t| {
            let me = me.clone();
            t.register(Box::new(move || me.unpark()))
        });
        let mut deadline = deadline;
        let mut given_up: Option<Error> = None;
        loop {
            {
                let mut st = lock(&self.state);
                if let Some(outcome) = take_outcome(&mut st, h) {
                    return match given_up {
                        Some(e) => Err(e),
                        None => outcome,
                    };
                }
                let now = Instant::now();
                let cancelled = given_up.is_none() && cancel.is_some_and(CancelToken::is_cancelled);
                let expired = deadline.is_some_and(|d| now >= d);
                if given_up.is_some() && expired {
                    // The answer to the Cancel is late: leave it to the
                    // session (a '+' is still released by its token).
                    self.abandon(&mut st, h);
                    return Err(given_up.take().unwrap_or(Error::Timeout));
                }
                if cancelled || expired {
                    let why = if cancelled {
                        Error::Cancelled
                    } else {
                        Error::Timeout
                    };
                    match self.give_up(&mut st, h, why) {
                        GiveUp::Now(e) => return Err(e),
                        GiveUp::AwaitAnswer(e) => {
                            given_up = Some(e);
                            deadline = Some(now + self.cfg.request_timeout);
                            continue;
                        }
                    }
                }
                if let Some(c) = st.calls.get_mut(&h) {
                    c.waiter = Waiter::Thread(me.clone());
                }
            }
            match deadline {
                Some(d) => thread::park_timeout(d.saturating_duration_since(Instant::now())),
                None => thread::park(),
            }
        }
    }

    /// The caller of `h` stops waiting (timeout, cancellation) and will
    /// collect nothing more unless told to await the answer.
    fn give_up(&self, st: &mut State, h: Handle64, why: Error) -> GiveUp {
        let Some(c) = st.calls.get_mut(&h) else {
            return GiveUp::Now(why);
        };
        if !c.sent && !c.reissue {
            // Nothing reached the server.
            st.calls.remove(&h);
            st.queue.retain(|q| *q != h);
            return GiveUp::Now(why);
        }
        c.gave_up = true;
        let (action, id) = (c.action, c.id);
        if action != SessionAction::Lock {
            c.owner_gone = true;
        }
        let sent = c.sent;
        match action {
            SessionAction::Lock => {
                if sent {
                    push(st, SessionAction::Cancel, "", u64::from(id), Kind::Internal);
                    self.wake.notify_all();
                } // else its reissue goes out first, and its Cancel with it (take)
                GiveUp::AwaitAnswer(why)
            }
            SessionAction::Unlock | SessionAction::ResetByKey | SessionAction::ResetBySource => {
                GiveUp::Now(Error::OutcomeUnknown)
            }
            // TryLock (a '+' to come is given back), Close, Ping.
            _ => GiveUp::Now(Error::Unreachable(io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer within the request timeout",
            ))),
        }
    }

    /// The owner of `h` has gone (a dropped future, a late answer to a
    /// Cancel): settle the call without it.
    fn abandon(&self, st: &mut State, h: Handle64) {
        let Some(c) = st.calls.get_mut(&h) else {
            return;
        };
        if let Some(outcome) = c.outcome.take() {
            // Completed but never collected: a grant nobody will use is
            // given back.
            let (action, key) = (c.action, c.key.clone());
            st.calls.remove(&h);
            if let (SessionAction::Lock | SessionAction::TryLock, Ok((b'+', token))) =
                (action, outcome)
            {
                push(st, SessionAction::Unlock, &key, token, Kind::StrayUnlock);
                self.wake.notify_all();
            }
            return;
        }
        if !c.sent && !c.reissue {
            st.calls.remove(&h);
            st.queue.retain(|q| *q != h);
            return;
        }
        c.owner_gone = true;
        // A reissue not yet sent gets its Cancel when it goes out (take).
        let cancel = c.action == SessionAction::Lock && !c.gave_up && c.sent;
        c.gave_up = true;
        let id = c.id;
        if cancel {
            push(st, SessionAction::Cancel, "", u64::from(id), Kind::Internal);
            self.wake.notify_all();
        }
    }

    /// Sets the outcome of call `h` and wakes its caller.
    fn complete(&self, st: &mut State, h: Handle64, outcome: Result<(u8, u64), Error>) {
        let Some(c) = st.calls.get_mut(&h) else {
            return;
        };
        match c.kind {
            Kind::Internal => {
                st.calls.remove(&h);
            }
            Kind::StrayUnlock => {
                let key = c.key.clone();
                let token = c.token;
                st.calls.remove(&h);
                if matches!(outcome, Err(Error::Disconnected)) {
                    st.strays.push((key, token)); // the next resume tries again
                }
            }
            Kind::User if c.owner_gone => {
                st.calls.remove(&h);
            }
            Kind::User => {
                c.outcome = Some(outcome);
                match std::mem::replace(&mut c.waiter, Waiter::None) {
                    Waiter::None => {}
                    Waiter::Thread(t) => t.unpark(),
                    Waiter::Task(w) => w.wake(),
                }
            }
        }
    }

    /// An answer from the server.
    fn deliver(&self, st: &mut State, a: wire::SessionAnswer) {
        let Some(h) = st.pending.remove(&a.id) else {
            return; // no such pending call: ignored, as the protocol says
        };
        if st.pending.len() == MAX_PENDING - 2 && !st.queue.is_empty() {
            self.wake.notify_all(); // the writer may be holding requests back
        }
        let Some(c) = st.calls.get(&h) else { return };
        let (action, sent_at, gave_up, key) = (c.action, c.sent_at, c.gave_up, c.key.clone());
        if sent_at > st.confirmed {
            st.confirmed = sent_at;
        }
        if st.ping == Some(h) {
            st.ping = None;
        }
        if matches!(action, SessionAction::Lock | SessionAction::TryLock) && a.status == b'+' {
            if gave_up {
                push(st, SessionAction::Unlock, &key, a.token, Kind::StrayUnlock);
                self.wake.notify_all();
            } else {
                st.held.insert(key.clone(), a.token);
                st.held_id.insert(key, a.id);
                st.reserved.insert(a.id);
            }
        }
        if action == SessionAction::Close && a.status == b'+' {
            st.close_ok = true;
        }
        self.complete(st, h, Ok((a.status, a.token)));
    }

    /// The connection was lost: set aside every pending Lock and TryLock
    /// to be reissued with its id after the resume, fail the other pending
    /// calls.
    fn disconnected(&self, st: &mut State) {
        let mut pending: Vec<(u32, Handle64)> = st.pending.drain().collect();
        // Handles grow with each call made: the order the program asked in.
        pending.sort_by_key(|&(_, h)| h);
        let mut reissue = Vec::new();
        for (id, h) in pending {
            let Some(c) = st.calls.get_mut(&h) else {
                continue;
            };
            if matches!(c.action, SessionAction::Lock | SessionAction::TryLock)
                && c.kind == Kind::User
                && !c.gave_up
            {
                // The server answers a grant it made for this request at
                // once when the same id comes again (Reissue).
                c.sent = false;
                c.reissue = true;
                st.reserved.insert(id);
                reissue.push(h);
                continue;
            }
            let (action, kind, key, token) = (c.action, c.kind, c.key.clone(), c.token);
            let err = match action {
                SessionAction::Lock | SessionAction::TryLock => {
                    st.strays.push((key, 0));
                    Error::Disconnected
                }
                SessionAction::Unlock => {
                    if kind == Kind::User && token != 0 {
                        st.strays.push((key, token));
                    }
                    Error::OutcomeUnknown
                }
                SessionAction::ResetByKey | SessionAction::ResetBySource => Error::OutcomeUnknown,
                _ => Error::Disconnected,
            };
            // A stray release lost again is set aside again by complete().
            let err = if kind == Kind::StrayUnlock {
                Error::Disconnected
            } else {
                err
            };
            self.complete(st, h, Err(err));
        }
        st.ping = None;
        // Pings and Cancels queued for the lost connection mean nothing on
        // the next one.
        let stale: Vec<Handle64> = st
            .queue
            .iter()
            .copied()
            .filter(|h| {
                st.calls.get(h).is_some_and(|c| {
                    matches!(c.action, SessionAction::Cancel | SessionAction::Ping)
                })
            })
            .collect();
        for h in stale {
            st.calls.remove(&h);
        }
        let calls = &st.calls;
        st.queue.retain(|h| calls.contains_key(h));
        // The reissues go first, in the order they were made, so that
        // they keep their place before what was asked after them.
        for h in reissue.into_iter().rev() {
            st.queue.push_front(h);
        }
    }

    /// A resume succeeded: queue the releases of stray grants first.
    fn resumed(&self, st: &mut State, sent_at: Instant) {
        st.confirmed = sent_at;
        st.last_sent = sent_at;
        let strays = std::mem::take(&mut st.strays);
        let mut unknown_done: Vec<String> = Vec::new();
        let mut head = Vec::new();
        for (key, token) in strays {
            if let Some(&held) = st.held.get(&key) {
                if token == 0 || token == held {
                    // The program holds this key through the session: a lost
                    // Lock was waiting behind that hold and was not granted.
                    continue;
                }
            }
            if token == 0 {
                if unknown_done.contains(&key) {
                    continue;
                }
                unknown_done.push(key.clone());
            }
            head.push(new_call(
                st,
                SessionAction::Unlock,
                &key,
                token,
                Kind::StrayUnlock,
            ));
        }
        for h in head.into_iter().rev() {
            st.queue.push_front(h);
        }
    }

    /// Ends the session for good: every call fails with the reason.
    fn finish(&self, end: End) {
        let mut st = lock(&self.state);
        if st.end.is_some() {
            return;
        }
        st.end = Some(end);
        if let Some(conn) = &st.conn {
            conn.shutdown(); // a blocked write ends now
        }
        let mut all: Vec<Handle64> = st.pending.drain().map(|(_, h)| h).collect();
        all.extend(st.queue.drain(..));
        for h in all {
            self.complete(&mut st, h, Err(end.error()));
        }
        st.strays.clear();
        st.held.clear();
        st.held_id.clear();
        st.reserved.clear();
        for w in st.lost_wakers.drain(..) {
            w.wake();
        }
        drop(st);
        self.ended.notify_all();
        self.wake.notify_all();
    }

    /// Queues Close once (and marks the session closing); `Ok(None)` when it
    /// is already closed.
    fn begin_close(&self) -> Result<Option<Handle64>, Error> {
        let mut st = lock(&self.state);
        match st.end {
            Some(End::Closed) => return Ok(None),
            Some(e) => return Err(e.error()),
            None => {}
        }
        st.closing = true;
        let h = push(&mut st, SessionAction::Close, "", 0, Kind::User);
        drop(st);
        self.wake.notify_all();
        Ok(Some(h))
    }

    fn close_blocking(&self) -> Result<(), Error> {
        loop {
            let Some(h) = self.begin_close()? else {
                return Ok(());
            };
            match self.wait_request(h) {
                Err(Error::Disconnected) => continue, // resumed: send it again
                Ok(_) | Err(Error::SessionClosed) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// The last handle went: close without waiting for anyone.
    fn close_on_drop(&self) {
        let mut st = lock(&self.state);
        if st.end.is_some() || st.closing {
            return;
        }
        st.closing = true;
        let h = push(&mut st, SessionAction::Close, "", 0, Kind::User);
        if let Some(c) = st.calls.get_mut(&h) {
            c.owner_gone = true;
        }
        drop(st);
        self.wake.notify_all();
    }

    /// The supervisor: serves each connection, resumes after a loss, ends
    /// with the session.
    fn run(self: Arc<Self>, mut conn: Conn) {
        loop {
            self.serve(conn);
            let mut st = lock(&self.state);
            if st.end.is_some() {
                return;
            }
            if st.closing && st.close_ok {
                drop(st);
                self.finish(End::Closed);
                return;
            }
            self.disconnected(&mut st);
            drop(st);
            match self.resume() {
                Ok(c) => conn = c,
                Err(end) => {
                    let closing = lock(&self.state).closing;
                    self.finish(if closing { End::Closed } else { end });
                    return;
                }
            }
        }
    }

    /// Reconnects to any address with `resume` = the session id, with a
    /// growing back-off between rounds, until the server's TTL may have
    /// passed (counted from the send time of the last answered frame).
    fn resume(&self) -> Result<Conn, End> {
        let mut backoff = MIN_BACKOFF;
        loop {
            let deadline = {
                let st = lock(&self.state);
                if let Some(end) = st.end {
                    return Err(end);
                }
                st.confirmed + self.ttl
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(End::Lost(LostReason::TtlPassed));
            }
            match open_round(&self.cfg, self.id, Some(deadline)) {
                Ok((conn, _, sent_at)) => {
                    let mut st = lock(&self.state);
                    self.resumed(&mut st, sent_at);
                    return Ok(conn);
                }
                Err(Error::SessionLost(r)) => return Err(End::Lost(r)),
                Err(_) => {}
            }
            // Back off (with jitter), waking early when the session ends.
            let jitter = conn::jitter(backoff);
            let pause = (backoff + jitter).min(deadline.saturating_duration_since(Instant::now()));
            let st = lock(&self.state);
            if st.end.is_none() {
                let _ = self.wake.wait_timeout(st, pause);
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Serves one connection until it breaks or the session ends: this
    /// thread writes, a reader thread reads.
    fn serve(self: &Arc<Self>, conn: Conn) {
        let reader = conn.clone();
        {
            let mut st = lock(&self.state);
            st.conn = Some(conn.clone());
            st.broken = false;
            if st.end.is_some() {
                conn.shutdown();
                st.conn = None;
                return;
            }
        }
        let me = Arc::clone(self);
        let reading = thread::Builder::new()
            .name("locking-center-reader".into())
            .spawn(move || me.read(reader));
        if reading.is_ok() {
            self.write(conn);
        }
        let mut st = lock(&self.state);
        st.broken = true;
        if let Some(c) = st.conn.take() {
            c.shutdown();
        }
        drop(st);
        if let Ok(r) = reading {
            let _ = r.join();
        }
    }

    fn read(&self, conn: Conn) {
        let mut r = BufReader::with_capacity(64 * wire::ANSWER_LEN, ConnReader(conn));
        let mut b = [0u8; wire::ANSWER_LEN];
        while r.read_exact(&mut b).is_ok() {
            let mut st = lock(&self.state);
            self.deliver(&mut st, wire::decode_answer(&b));
        }
        lock(&self.state).broken = true;
        self.wake.notify_all();
    }

    fn write(&self, conn: Conn) {
        let ping_every = self.ttl / 3;
        let dead_after = self.ttl / 3; // a Ping unanswered this long: the connection is dead
        let _ = conn.set_write_timeout(Some(ping_every.max(Duration::from_secs(1))));
        let mut buf = Vec::with_capacity(4096);
        let mut st = lock(&self.state);
        loop {
            if st.end.is_some() || st.broken {
                return;
            }
            let now = Instant::now();
            if let Some(p) = st.ping {
                if st
                    .calls
                    .get(&p)
                    .is_some_and(|c| c.sent && now - c.sent_at >= dead_after)
                {
                    return; // resume on a new connection
                }
            }
            if st.ping.is_none()
                && (now - st.last_sent >= ping_every || now - st.confirmed >= ping_every)
            {
                let h = push(&mut st, SessionAction::Ping, "", 0, Kind::Internal);
                st.ping = Some(h);
            }
            buf.clear();
            take(&mut st, &mut buf, now);
            if !buf.is_empty() {
                drop(st);
                let ok = conn.write_all(&buf).is_ok();
                st = lock(&self.state);
                if !ok {
                    return;
                }
                continue; // what was queued during the write goes next
            }
            let ping_sent = st
                .ping
                .and_then(|p| st.calls.get(&p))
                .filter(|c| c.sent)
                .map(|c| c.sent_at);
            let wait = match (st.ping, ping_sent) {
                (Some(_), Some(at)) => (at + dead_after).saturating_duration_since(now),
                (Some(_), None) => ping_every, // held back: an answer wakes the writer
                (None, _) => {
                    (st.last_sent.min(st.confirmed) + ping_every).saturating_duration_since(now)
                }
            };
            st = self
                .wake
                .wait_timeout(st, wait.max(Duration::from_millis(1)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// [`Read`] over a [`Conn`], for the reader's buffer.
struct ConnReader(Conn);

impl Read for ConnReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

enum GiveUp {
    Now(Error),
    AwaitAnswer(Error),
}

fn new_call(st: &mut State, action: SessionAction, key: &str, token: u64, kind: Kind) -> Handle64 {
    let h = st.next_handle;
    st.next_handle += 1;
    st.calls.insert(
        h,
        Call {
            action,
            key: key.to_owned(),
            token,
            kind,
            id: 0,
            sent: false,
            sent_at: Instant::now(),
            reissue: false,
            gave_up: false,
            owner_gone: false,
            outcome: None,
            waiter: Waiter::None,
        },
    );
    h
}

fn push(st: &mut State, action: SessionAction, key: &str, token: u64, kind: Kind) -> Handle64 {
    let h = new_call(st, action, key, token, kind);
    st.queue.push_back(h);
    h
}

/// Moves what may be sent from the queue into `buf`, giving ids: at most
/// 1,023 requests pending (the last slot is kept for Ping).
fn take(st: &mut State, buf: &mut Vec<u8>, now: Instant) {
    let mut rest = VecDeque::new();
    let queue = std::mem::take(&mut st.queue);
    let mut sent_any = false;
    for h in queue {
        let Some(c) = st.calls.get(&h) else { continue };
        let limit = if c.action == SessionAction::Ping {
            MAX_PENDING
        } else {
            MAX_PENDING - 1
        };
        if c.action != SessionAction::Cancel && st.pending.len() >= limit {
            rest.push_back(h);
            continue;
        }
        sent_any = true;
        if c.action == SessionAction::Cancel {
            let id = c.token as u32;
            let _ = wire::encode_request(buf, SessionAction::Cancel, id, 0, "");
            st.calls.remove(&h);
            continue;
        }
        let (reissue, old_id) = (c.reissue, c.id);
        if reissue {
            st.reserved.remove(&old_id);
        }
        let id = if reissue && !st.pending.contains_key(&old_id) {
            old_id
        } else {
            let mut id = st.next_id;
            while st.pending.contains_key(&id) || st.reserved.contains(&id) {
                id = id.wrapping_add(1);
            }
            st.next_id = id.wrapping_add(1);
            id
        };
        st.pending.insert(id, h);
        let c = st.calls.get_mut(&h).expect("present above");
        c.id = id;
        c.sent = true;
        c.reissue = false;
        c.sent_at = now;
        let (action, token, key, gave_up) = (c.action, c.token, c.key.clone(), c.gave_up);
        if action == SessionAction::Unlock
            && c.kind == Kind::User
            && st.held.get(&key).is_some_and(|&t| token == 0 || token == t)
        {
            st.held.remove(&key);
            if let Some(old) = st.held_id.remove(&key) {
                st.reserved.remove(&old);
            }
        }
        // Keys were checked when the call was made.
        let _ = wire::encode_request(buf, action, id, token, &key);
        if action == SessionAction::Lock && gave_up {
            // A reissue whose caller gave up before it went out: withdrawn
            // at once (a grant it finds is given back when its '+' comes).
            let _ = wire::encode_request(buf, SessionAction::Cancel, id, 0, "");
        }
    }
    if sent_any {
        st.last_sent = now;
    }
    st.queue = rest;
}
