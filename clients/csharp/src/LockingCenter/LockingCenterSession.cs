using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Security.Authentication;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter
{
    /// <summary>Settings of a <see cref="LockingCenterSession"/>.</summary>
    public sealed class SessionOptions
    {
        /// <summary>
        /// Server address: "host:port", "host" (port 22119) or "[::1]:port", or a comma-separated list of them
        /// (a cluster's nodes, any of which answers: tried in random order, every address a name resolves to
        /// included). Default "localhost:22119".
        /// </summary>
        public string Address { get; set; } = "localhost:" + LockingCenterClient.DefaultPort;

        /// <summary>Name of the requester, 0..127 bytes; empty (the default) lets the server use the peer IP.</summary>
        public string Source { get; set; } = "";

        /// <summary>The server's AUTH_TOKEN (1..127 bytes) when it has one; sent on the open and every resume.</summary>
        public string AuthToken { get; set; } = "";

        /// <summary>
        /// The TTL to ask for; the server clamps it to 1 s .. 10 min. Zero (the default) asks for the
        /// server's SESSION_TTL. The session's holds are released one TTL after the server last heard from it.
        /// </summary>
        public TimeSpan Ttl { get; set; } = TimeSpan.Zero;

        /// <summary>
        /// Time allowed for each attempt, to one address: the connect, then again the TLS handshake and the
        /// open's answer (default 5 s).
        /// </summary>
        public TimeSpan ConnectTimeout { get; set; } = TimeSpan.FromSeconds(5);

        /// <summary>TLS (SslStream); null (the default): plain TCP.</summary>
        public TlsOptions Tls { get; set; }

        /// <summary>
        /// Time allowed for the answer to a request that never waits (try-lock, unlock, resets; default 30 s,
        /// as in every Locking-Center client). A Lock waits as long as its own timeout or token says.
        /// </summary>
        public TimeSpan RequestTimeout { get; set; } = TimeSpan.FromSeconds(30);

        /// <summary>Where the session reports reconnects and a loss (one line each); null: nowhere.</summary>
        public Action<string> Log { get; set; }
    }

    /// <summary>
    /// A session with a Locking-Center server (docs/protocol.md, "Sessions"): one TCP connection that
    /// carries the requests of many tasks at once, answered out of order, and that owns the keys it takes.
    /// Its holds end with it: at <see cref="CloseAsync"/>, when the server ends it, or one TTL after the
    /// server last heard from it, so a crashed program's keys free themselves. Every grant carries its
    /// fencing token.
    /// <code>
    /// using (var session = await LockingCenterSession.OpenAsync(new SessionOptions { Address = "127.0.0.1:22119" }))
    /// using (var held = await session.LockAsync("reports/daily"))
    /// {
    ///     await storage.WriteAsync(data, held.Token); // the storage refuses tokens lower than the last it saw
    /// }
    /// </code>
    /// </summary>
    /// <remarks>
    /// <para>
    /// One reader task per connection reads the answers and completes the calls (it runs the reconnect
    /// loop too), one writer task sends every frame (the frames of all callers batched into one write), and
    /// a timer watches the Ping. A waiting <see cref="LockAsync(string, CancellationToken)"/> holds no
    /// thread. Calls complete with continuations run asynchronously, never on the reader.
    /// </para>
    /// <para>
    /// When nothing was sent for a third of the TTL the session sends Ping. When the connection drops (a
    /// server restart, a cluster's leader change), the session reconnects to any of its addresses and
    /// resumes, with a growing back-off between rounds, while the TTL allows (counted from the send time of
    /// the last answered request); calls made meanwhile wait for the new connection. The Locks and
    /// TryLocks that were pending are reissued with their old ids after the resume (Reissue,
    /// docs/protocol.md): a grant made before the drop is answered at once with its token, so the caller
    /// just goes on waiting. An unlock or a reset pending on the lost connection fails with
    /// <see cref="OutcomeUnknownException"/> (it is never resent blindly), a Close with
    /// <see cref="DisconnectedException"/>. A Lock that the caller gave up on may have been granted: after
    /// the resume, the session releases such a grant unless the program holds that key through this session.
    /// </para>
    /// <para>
    /// The session is lost when the server refuses the resume or the TTL passes without one:
    /// <see cref="Completion"/> faults with <see cref="SessionLostException"/>, <see cref="Ended"/> is
    /// cancelled, every pending and later call fails with it, and disposing a <see cref="SessionLock"/>
    /// held at that moment throws it. A failed Lock or TryLock always means nothing is held: cancelling
    /// or a timeout sends Cancel, and a grant that crosses it is unlocked by its token.
    /// </para>
    /// <para>Instances are thread-safe.</para>
    /// </remarks>
    public sealed class LockingCenterSession : IDisposable
#if NETSTANDARD2_1_OR_GREATER || NETCOREAPP3_0_OR_GREATER || LC_ASYNC_DISPOSABLE
        , IAsyncDisposable
#endif
    {
        /// <summary>The server's bound on requests awaiting an answer on one connection; one more drops it.</summary>
        internal const int MaxPending = 1024;
        private const int MaxFrame = 14 + WireFormat.MaxSize;
        private static readonly Stopwatch Clock = Stopwatch.StartNew();
        private static readonly long MinBackoff = TimeSpan.FromMilliseconds(50).Ticks;
        private static readonly long MaxBackoff = TimeSpan.FromSeconds(1).Ticks;
        private static readonly byte[] NoKey = new byte[0];
        /// <summary>Rounds over the addresses an open makes before it gives up.</summary>
        private const int OpenRounds = 3;

        private readonly SessionOptions _options;
        private readonly Endpoint[] _endpoints;
        private readonly long _ttlTicks;
        private readonly Random _jitter; // locked while used: the order of addresses and back-off jitter
        private readonly TaskCompletionSource<bool> _completion = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
        private readonly CancellationTokenSource _ended = new CancellationTokenSource();
        private readonly SemaphoreSlim _wake = new SemaphoreSlim(0, 1);
        private Timer _pingWatch;
        private Task _reader;
        private Task _writer;

        // _mu guards every field below and the state of every Call.
        private readonly object _mu = new object();
        private Socket _socket;           // the connection being served; null between connections
        private Stream _stream;
        private readonly LinkedList<Call> _queue = new LinkedList<Call>();       // not yet written, in order
        private readonly Dictionary<uint, Call> _pending = new Dictionary<uint, Call>(); // written, awaiting the answer
        private uint _nextId = 1;
        private readonly Dictionary<string, ulong> _held = new Dictionary<string, ulong>(); // key to token
        private readonly Dictionary<string, uint> _heldId = new Dictionary<string, uint>(); // key to the id of the request that made its grant
        // Ids no new request may take: those of the grants held (Reissue finds a grant by its request's id)
        // and of the Locks and TryLocks queued to be reissued.
        private readonly HashSet<uint> _reserved = new HashSet<uint>();
        private readonly List<Stray> _strays = new List<Stray>(); // grants no caller owns, released after a resume
        private long _confirmed;          // Clock ticks when the latest answered request was sent
        private long _lastSent;           // Clock ticks of the latest write
        private Call _ping;               // the Ping awaiting its answer, if any
        private bool _closing;
        private bool _closeAnswered;
        private bool _lossReported;
        private LockingCenterException _failure; // why the session ended; null while it lives

        private LockingCenterSession(SessionOptions options, Endpoint[] endpoints, Random rng, Dialed dialed)
        {
            _options = options;
            _endpoints = endpoints;
            _jitter = rng;
            Id = dialed.Session;
            Ttl = TimeSpan.FromMilliseconds(dialed.TtlMillis);
            _ttlTicks = Ttl.Ticks;
            _confirmed = dialed.SentAt;
            _lastSent = dialed.SentAt;
            _socket = dialed.Socket;
            _stream = dialed.Stream;
        }

        /// <summary>Opens a session with the server's TTL and an empty source.</summary>
        /// <param name="address">"host:port", "host" (port 22119) or "[::1]:port".</param>
        /// <param name="cancellationToken">Cancels the open.</param>
        /// <returns>The open session.</returns>
        public static Task<LockingCenterSession> OpenAsync(string address, CancellationToken cancellationToken = default(CancellationToken))
        {
            return OpenAsync(new SessionOptions { Address = address }, cancellationToken);
        }

        /// <summary>Opens a session.</summary>
        /// <param name="options">Address, source, auth token, TTL and timeouts.</param>
        /// <param name="cancellationToken">Cancels the open.</param>
        /// <returns>The open session.</returns>
        /// <exception cref="UnreachableException">No connection could be made, or it closed during the open.</exception>
        /// <exception cref="RefusedException">The server refused the session (wrong auth token, connection limit, no session support).</exception>
        /// <exception cref="InvalidRequestException">The source or auth token is longer than 127 bytes.</exception>
        public static async Task<LockingCenterSession> OpenAsync(SessionOptions options, CancellationToken cancellationToken = default(CancellationToken))
        {
            if (options == null) throw new ArgumentNullException("options");
            Endpoint[] endpoints = Transport.Parse(options.Address);
            if (options.Ttl < TimeSpan.Zero) throw new ArgumentException("Ttl must not be negative");
            long ms = (long)options.Ttl.TotalMilliseconds;
            uint ttl = options.Ttl == TimeSpan.Zero ? 0u : (uint)Math.Min(uint.MaxValue, Math.Max(1, ms));
            byte[] frame = SessionWire.EncodeOpen(SessionWire.Version, ttl, 0, options.Source, options.AuthToken);
            var rng = new Random();
            Dialed d = null;
            long backoff = MinBackoff;
            for (int round = 1; ; round++)
            {
                try
                {
                    d = await DialAsync(endpoints, options.Tls, frame, options.ConnectTimeout, rng, cancellationToken).ConfigureAwait(false);
                    break;
                }
                catch (UnreachableException)
                {
                    if (round == OpenRounds) throw;
                }
                long sleep = backoff / 2 + (long)(rng.NextDouble() * (backoff / 2));
                await Task.Delay(TimeSpan.FromTicks(sleep), cancellationToken).ConfigureAwait(false);
                backoff = Math.Min(2 * backoff, MaxBackoff);
            }
            if (d.Status != WireFormat.Ok)
                throw new RefusedException("the server at " + options.Address + " refused the session (wrong auth token, connection limit, or no session support)");
            var s = new LockingCenterSession(options, endpoints, rng, d);
            s.Start(d);
            return s;
        }

        private void Start(Dialed d)
        {
            long every = Math.Max(TimeSpan.FromMilliseconds(50).Ticks, _ttlTicks / 12);
            _pingWatch = new Timer(_ => WatchPing(), null, TimeSpan.FromTicks(every), TimeSpan.FromTicks(every));
            _reader = Task.Run(() => SuperviseAsync(d.Socket, d.Stream));
            _writer = Task.Run(() => WriteLoopAsync());
        }

        /// <summary>The session id the server gave.</summary>
        public ulong Id { get; private set; }

        /// <summary>The session id as 16 hex digits, as the JSON API and the dashboard show it.</summary>
        public string IdHex
        {
            get { return Id.ToString("x16"); }
        }

        /// <summary>The TTL the server granted.</summary>
        public TimeSpan Ttl { get; private set; }

        /// <summary>
        /// Completes when the session has ended: successfully after <see cref="CloseAsync"/>, faulted with
        /// <see cref="SessionLostException"/> when the session was lost (every hold it had is then gone).
        /// </summary>
        public Task Completion
        {
            get { return _completion.Task; }
        }

        /// <summary>Cancelled when the session ends, lost or closed: pass it to work that needs the holds.</summary>
        public CancellationToken Ended
        {
            get { return _ended.Token; }
        }

        /// <summary>Whether the session is alive (neither closed nor lost).</summary>
        public bool IsOpen
        {
            get { lock (_mu) return _failure == null; }
        }

        internal LockingCenterException Failure
        {
            get { lock (_mu) return _failure; }
        }

        // ------------------------------------------------------------------ calls

        /// <summary>
        /// Waits for <paramref name="key"/> in FIFO order with every other waiter, this session's own
        /// included (locking a key the session already holds waits for it, as with a non-reentrant mutex),
        /// and returns the held key with its fencing token.
        /// </summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="cancellationToken">Cancelling sends Cancel: the server withdraws the waiter; nothing is held.</param>
        /// <returns>The held key.</returns>
        /// <exception cref="ResetWhileWaitingException">The key or this session's source was reset while waiting.</exception>
        /// <exception cref="SessionLostException">The session is lost.</exception>
        /// <exception cref="SessionClosedException">The session was closed.</exception>
        /// <exception cref="OperationCanceledException">The token was cancelled; nothing is held.</exception>
        /// <exception cref="InvalidRequestException">The key is empty or longer than 127 bytes.</exception>
        public Task<SessionLock> LockAsync(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            return LockCoreAsync(key, null, cancellationToken);
        }

        /// <summary>Like <see cref="LockAsync(string, CancellationToken)"/>, giving up after <paramref name="timeout"/>.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="timeout">How long to wait.</param>
        /// <param name="cancellationToken">Cancelling sends Cancel.</param>
        /// <returns>The held key.</returns>
        /// <exception cref="LockTimeoutException">The timeout passed; the session sent Cancel and holds nothing.</exception>
        public Task<SessionLock> LockAsync(string key, TimeSpan timeout, CancellationToken cancellationToken = default(CancellationToken))
        {
            if (timeout <= TimeSpan.Zero) throw new ArgumentException("timeout must be positive (use TryLockAsync not to wait)");
            return LockCoreAsync(key, timeout, cancellationToken);
        }

        private async Task<SessionLock> LockCoreAsync(string key, TimeSpan? timeout, CancellationToken cancellationToken)
        {
            Outcome o = await RoundTripAsync(SessionWire.Lock, key, 0, timeout,
                () => new LockTimeoutException(key, timeout.Value), cancellationToken).ConfigureAwait(false);
            switch (o.Status)
            {
                case WireFormat.Ok:
                    return new SessionLock(this, key, o.Token);
                case WireFormat.Fail:
                    lock (_mu)
                    {
                        if (_closing) throw new SessionClosedException("lock of key " + WireFormat.Quote(key) + " refused by the close of session " + IdHex);
                    }
                    throw new ResetWhileWaitingException(key);
                default:
                    throw Unexpected("lock", o.Status);
            }
        }

        /// <summary>Takes <paramref name="key"/> only if nobody holds it now, this session included. Never waits.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="cancellationToken">Cancels the call; a grant that comes anyway is unlocked.</param>
        /// <returns>The held key, or null when someone holds it ('#').</returns>
        /// <exception cref="RefusedException">The server answered '-'.</exception>
        public async Task<SessionLock> TryLockAsync(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            Outcome o = await RoundTripAsync(SessionWire.TryLock, key, 0, _options.RequestTimeout,
                () => NoAnswer("try-lock", key, false), cancellationToken).ConfigureAwait(false);
            switch (o.Status)
            {
                case WireFormat.Ok: return new SessionLock(this, key, o.Token);
                case WireFormat.NotWon: return null;
                case WireFormat.Fail: throw new RefusedException("try-lock on key " + WireFormat.Quote(key) + " was answered '-'");
                default: throw Unexpected("try-lock", o.Status);
            }
        }

        /// <summary>
        /// Releases the grant of <paramref name="key"/> with that <paramref name="token"/> (0: whichever
        /// grant this session holds on the key). Never sent twice: when its answer is lost it throws
        /// <see cref="OutcomeUnknownException"/>, and the session settles that grant after the resume with an
        /// Unlock by token, which cannot release anything else.
        /// </summary>
        /// <param name="key">The key.</param>
        /// <param name="token">The grant's token, or 0.</param>
        /// <param name="cancellationToken">Stops waiting for the answer.</param>
        /// <returns>A task that completes when the grant is released.</returns>
        /// <exception cref="NotHeldException">This session does not hold that grant; nothing was released.</exception>
        public async Task UnlockAsync(string key, ulong token, CancellationToken cancellationToken = default(CancellationToken))
        {
            Outcome o = await RoundTripAsync(SessionWire.Unlock, key, token, _options.RequestTimeout,
                () => NoAnswer("unlock", key, true), cancellationToken).ConfigureAwait(false);
            if (o.Status == WireFormat.Ok) return;
            if (o.Status == WireFormat.Fail)
                throw new NotHeldException("unlock of key " + WireFormat.Quote(key) + " token " + token + ": this session does not hold that grant");
            throw Unexpected("unlock", o.Status);
        }

        /// <summary>Drops the holder of <paramref name="key"/>, whoever it is, and refuses its waiters.</summary>
        /// <param name="key">The key.</param>
        /// <param name="cancellationToken">Stops waiting for the answer.</param>
        /// <returns>A task that completes when done.</returns>
        public Task ResetByKeyAsync(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            return ResetAsync(SessionWire.ResetByKey, "reset of key", key, cancellationToken);
        }

        /// <summary>
        /// Refuses every waiter of <paramref name="source"/> and releases every key it holds; empty means
        /// this connection's IP address. The session stays open, though it loses its holds if the source
        /// is its own.
        /// </summary>
        /// <param name="source">The source, 0..127 bytes.</param>
        /// <param name="cancellationToken">Stops waiting for the answer.</param>
        /// <returns>A task that completes when done.</returns>
        public Task ResetBySourceAsync(string source, CancellationToken cancellationToken = default(CancellationToken))
        {
            return ResetAsync(SessionWire.ResetBySource, "reset by source", source ?? "", cancellationToken);
        }

        private async Task ResetAsync(byte action, string name, string what, CancellationToken cancellationToken)
        {
            Outcome o = await RoundTripAsync(action, what, 0, _options.RequestTimeout,
                () => NoAnswer(name, what, true), cancellationToken).ConfigureAwait(false);
            if (o.Status == WireFormat.Ok) return;
            if (o.Status == WireFormat.Fail) throw new RefusedException(name + " " + WireFormat.Quote(what) + " was answered '-'");
            throw Unexpected(name, o.Status);
        }

        /// <summary>
        /// Ends the session: the server refuses its pending Locks and releases every key it holds, then the
        /// session's tasks end. When the server cannot be told (unreachable for the TTL), they end all the
        /// same and the server releases the holds when the TTL passes. Closing again does nothing.
        /// </summary>
        /// <param name="cancellationToken">Stops waiting for the server's answer to Close.</param>
        /// <returns>A task that completes when the session has ended.</returns>
        /// <exception cref="SessionLostException">The session had been lost before (reported once).</exception>
        public async Task CloseAsync(CancellationToken cancellationToken = default(CancellationToken))
        {
            LockingCenterException ended;
            bool report;
            lock (_mu)
            {
                ended = _failure;
                report = ended is SessionLostException && !_lossReported;
                if (ended != null) _lossReported = true;
                _closing = true;
            }
            if (ended != null)
            {
                await StopAsync().ConfigureAwait(false);
                if (report) throw ended;
                return;
            }
            long deadline = Now() + _ttlTicks + _options.ConnectTimeout.Ticks;
            while (true)
            {
                try
                {
                    TimeSpan left = TimeSpan.FromTicks(Math.Max(TimeSpan.TicksPerMillisecond, deadline - Now()));
                    await RoundTripAsync(SessionWire.Close, "", 0, left,
                        () => new UnreachableException("no answer to Close", null), cancellationToken).ConfigureAwait(false);
                }
                catch (DisconnectedException)
                {
                    if (Now() < deadline) continue; // sent again on the next connection: closing twice is harmless
                }
                catch (LockingCenterException e)
                {
                    Log("close of session " + IdHex + ": " + e.Message + "; the server releases its holds after the TTL");
                }
                catch (OperationCanceledException)
                {
                    Log("close of session " + IdHex + " cancelled; the server releases its holds after the TTL");
                }
                break;
            }
            lock (_mu) Finish(new SessionClosedException("session " + IdHex + " closed"));
            await StopAsync().ConfigureAwait(false);
            _completion.TrySetResult(true);
        }

        /// <summary>Closes the session (see <see cref="CloseAsync"/>), blocking until it has ended.</summary>
        public void Dispose()
        {
            CloseAsync().ConfigureAwait(false).GetAwaiter().GetResult();
        }

#if NETSTANDARD2_1_OR_GREATER || NETCOREAPP3_0_OR_GREATER || LC_ASYNC_DISPOSABLE
        /// <summary>Closes the session (see <see cref="CloseAsync"/>), for <c>await using</c>.</summary>
        /// <returns>A task that completes when the session has ended.</returns>
        public ValueTask DisposeAsync()
        {
            return new ValueTask(CloseAsync());
        }
#endif

        private async Task StopAsync()
        {
            Timer t = _pingWatch;
            if (t != null) t.Dispose();
            _ended.Cancel();
            Task all = Task.WhenAll(_reader, _writer);
            await Task.WhenAny(all, Task.Delay(_options.ConnectTimeout + TimeSpan.FromSeconds(1))).ConfigureAwait(false);
        }

        /// <summary>The session id and address.</summary>
        /// <returns>A short description.</returns>
        public override string ToString()
        {
            return "LockingCenterSession[" + IdHex + ", " + _options.Address + ", ttl=" + (long)Ttl.TotalMilliseconds + "ms]";
        }

        // ------------------------------------------------------------------ the calls' life

        private struct Outcome
        {
            public byte Status;
            public ulong Token;
            public Exception Error;
        }

        private struct Stray
        {
            public string Key;
            public ulong Token; // 0 when not known
        }

        private sealed class Call
        {
            public byte Action;
            public string Key;
            public byte[] KeyBytes;
            public ulong Token;
            public uint Cancels;                     // for a Cancel: the Lock it withdraws
            public TaskCompletionSource<Outcome> Tcs; // the caller's; null for the session's own calls
            public Action<Outcome> Internal;          // the session's own calls; runs with _mu held
            public uint Id;
            public bool Sent;
            public long SentAt;
            public bool Reissue;  // a Lock or TryLock sent on a lost connection: sent again with its id
            public bool Dropped;  // given up before it was sent: the writer skips it
            public bool GaveUp;   // the caller stopped waiting after it was sent: a grant to come is given back
            public bool Finished; // the caller has its outcome, or gave up

            public bool Grants
            {
                get { return Action == SessionWire.Lock || Action == SessionWire.TryLock; }
            }
        }

        private static long Now()
        {
            return Clock.Elapsed.Ticks;
        }

        /// <summary>Queues a call and waits for its outcome, its timeout or the token.</summary>
        private async Task<Outcome> RoundTripAsync(byte action, string key, ulong token, TimeSpan? timeout,
            Func<Exception> onTimeout, CancellationToken cancellationToken)
        {
            byte[] k = SessionWire.KeyBytes(action, key);
            cancellationToken.ThrowIfCancellationRequested();
            var c = new Call
            {
                Action = action, Key = key, KeyBytes = k, Token = token,
                Tcs = new TaskCompletionSource<Outcome>(TaskCreationOptions.RunContinuationsAsynchronously),
            };
            lock (_mu)
            {
                if (_failure != null) throw _failure;
                _queue.AddLast(c);
                Signal();
            }
            CancellationTokenSource timer = timeout.HasValue ? new CancellationTokenSource(timeout.Value) : null;
            try
            {
                using (cancellationToken.Register(() => Abandon(c, () => new OperationCanceledException("the call was cancelled", cancellationToken))))
                using (timer == null ? default(CancellationTokenRegistration) : timer.Token.Register(() => Abandon(c, onTimeout)))
                {
                    Outcome o = await c.Tcs.Task.ConfigureAwait(false);
                    if (o.Error != null) throw o.Error;
                    return o;
                }
            }
            finally
            {
                if (timer != null) timer.Dispose();
            }
        }

        /// <summary>The caller stopped waiting: give the call up, unless the session has settled it.</summary>
        private void Abandon(Call c, Func<Exception> why)
        {
            lock (_mu)
            {
                if (c.Finished) return;
                c.Finished = true;
                if (!c.Sent && !c.Reissue)
                {
                    c.Dropped = true; // nothing reached the server
                    _queue.Remove(c);
                }
                else
                {
                    // A reissue waiting for the resume may find a grant made before the drop: it goes out all
                    // the same, a Lock's Cancel right behind it (Take), and a grant it finds is given back.
                    c.GaveUp = true;
                    if (c.Action == SessionWire.Lock && c.Sent)
                    {
                        _queue.AddLast(new Call { Action = SessionWire.Cancel, KeyBytes = NoKey, Cancels = c.Id, Internal = _ => { } });
                        Signal();
                    }
                }
                c.Tcs.TrySetResult(new Outcome { Error = why() });
            }
        }

        /// <summary>Hands c its outcome, once; _mu is held.</summary>
        private void Complete(Call c, Outcome o)
        {
            if (c.Internal != null)
            {
                c.Internal(o);
                return;
            }
            if (c.Finished) return;
            c.Finished = true;
            c.Tcs.TrySetResult(o); // continuations run asynchronously
        }

        /// <summary>The session's own Unlock of a stray grant; if its answer is lost too, it waits for the next resume.</summary>
        private Call StrayUnlock(Stray st)
        {
            return new Call
            {
                Action = SessionWire.Unlock, Key = st.Key, KeyBytes = WireFormat.KeyBytes(st.Key), Token = st.Token,
                Internal = o =>
                {
                    if (o.Error is DisconnectedException || o.Error is OutcomeUnknownException) _strays.Add(st);
                    else if (o.Error == null && o.Status == WireFormat.Ok)
                        Log("session " + IdHex + " released a stray grant of " + WireFormat.Quote(st.Key) + " (token " + o.Token + ")");
                },
            };
        }

        private Exception NoAnswer(string what, string key, bool unknown)
        {
            string m = "no answer to the " + what + " " + WireFormat.Quote(key) + " within " + (long)_options.RequestTimeout.TotalMilliseconds + " ms";
            if (unknown) return new OutcomeUnknownException(m + "; outcome unknown", null);
            return new UnreachableException(m, null);
        }

        private static LockingCenterException Unexpected(string what, byte status)
        {
            return new LockingCenterException("unexpected answer " + WireFormat.Answer(status) + " to " + what);
        }

        private void Log(string line)
        {
            Action<string> log = _options.Log;
            if (log != null) log(line);
        }

        /// <summary>Wakes the writer; _mu is held.</summary>
        private void Signal()
        {
            if (_wake.CurrentCount == 0) _wake.Release();
        }

        // ------------------------------------------------------------------ connections

        private sealed class Dialed
        {
            public Socket Socket;
            public Stream Stream;
            public byte Status;
            public uint TtlMillis;
            public ulong Session;
            public long SentAt;
        }

        /// <summary>
        /// One round over the addresses, in random order (every address a name resolves to included), until
        /// one answers the open: returns that answer whatever its status (the connection is closed unless it
        /// is '+'; a server that answers one '-' and closes, without sessions, reads as a refusal). Each
        /// attempt gets <paramref name="attempt"/> for its connect, and again for the TLS handshake and the
        /// open's answer (a node with no leader holds a connection and then closes it: the next is tried).
        /// </summary>
        private static async Task<Dialed> DialAsync(Endpoint[] endpoints, TlsOptions tls, byte[] frame, TimeSpan attempt,
            Random rng, CancellationToken token)
        {
            var order = (Endpoint[])endpoints.Clone();
            lock (rng) Transport.Shuffle(order, rng);
            Exception last = null;
            TlsException tlsFailure = null;
            foreach (Endpoint ep in order)
            {
                IPAddress[] addresses;
                try { addresses = await Transport.ResolveAsync(ep.Host).ConfigureAwait(false); }
                catch (UnreachableException e)
                {
                    last = e;
                    continue;
                }
                lock (rng) Transport.Shuffle(addresses, rng);
                foreach (IPAddress address in addresses)
                {
                    try
                    {
                        Dialed d = await DialOneAsync(ep, address, tls, frame, attempt, token).ConfigureAwait(false);
                        if (d != null) return d;
                    }
                    catch (TlsException e)
                    {
                        tlsFailure = e;
                    }
                    catch (Exception e) when (e is IOException || e is SocketException || e is TimeoutException || e is ObjectDisposedException)
                    {
                        last = e;
                    }
                }
            }
            if (tlsFailure != null) throw tlsFailure;
            string list = string.Join(",", Array.ConvertAll(endpoints, e => e.ToString()));
            throw new UnreachableException("cannot open a session with " + list + ": " + (last == null ? "no address" : last.Message), last);
        }

        private static async Task<Dialed> DialOneAsync(Endpoint ep, IPAddress address, TlsOptions tls, byte[] frame, TimeSpan attempt, CancellationToken token)
        {
            var socket = new Socket(address.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
            bool ok = false;
            try
            {
                socket.NoDelay = true;
                socket.SetSocketOption(SocketOptionLevel.Socket, SocketOptionName.KeepAlive, true);
                using (var limit = CancellationTokenSource.CreateLinkedTokenSource(token))
                {
                    limit.CancelAfter(attempt);
                    using (limit.Token.Register(() => socket.Close()))
                    {
                        try
                        {
                            await Task.Factory.FromAsync(socket.BeginConnect, socket.EndConnect, new IPEndPoint(address, ep.Port), null).ConfigureAwait(false);
                        }
                        catch (Exception e) when (limit.IsCancellationRequested && (e is ObjectDisposedException || e is SocketException))
                        {
                            token.ThrowIfCancellationRequested();
                            throw new TimeoutException("connect to " + address + ":" + ep.Port + " timed out after " + (long)attempt.TotalMilliseconds + " ms");
                        }
                    }
                }
                Stream stream = new NetworkStream(socket, true);
                long sentAt = 0;
                var b = new byte[SessionWire.AnswerSize];
                int n = 0;
                using (var limit = CancellationTokenSource.CreateLinkedTokenSource(token))
                {
                    limit.CancelAfter(attempt);
                    using (limit.Token.Register(() => socket.Close()))
                    {
                        try
                        {
                            if (tls != null) stream = await Transport.HandshakeAsync((NetworkStream)stream, ep.Host, tls).ConfigureAwait(false);
                            sentAt = Now();
                            await stream.WriteAsync(frame, 0, frame.Length).ConfigureAwait(false);
                            while (n < b.Length)
                            {
                                int r = await stream.ReadAsync(b, n, b.Length - n).ConfigureAwait(false);
                                if (r == 0) break;
                                n += r;
                            }
                        }
                        catch (Exception e) when (limit.IsCancellationRequested && (e is ObjectDisposedException || e is IOException || e is SocketException || e is TlsException))
                        {
                            token.ThrowIfCancellationRequested();
                            throw new TimeoutException("no answer to the open from " + ep + " within " + (long)attempt.TotalMilliseconds + " ms");
                        }
                        catch (IOException e) when (tls != null && e.InnerException is AuthenticationException)
                        {
                            // The server refused this client's certificate (an alert after the handshake).
                            throw new TlsException("the TLS server " + ep + " refused the connection: " + e.Message, e);
                        }
                    }
                }
                if (n < b.Length)
                {
                    if (n >= 1 && b[0] == WireFormat.Fail) return new Dialed { Status = WireFormat.Fail, SentAt = sentAt };
                    throw new EndOfStreamException("the server " + ep + " closed the connection during the open");
                }
                var d = new Dialed { Socket = socket, Stream = stream, SentAt = sentAt };
                SessionWire.DecodeOpenAnswer(b, out d.Status, out d.TtlMillis, out d.Session);
                if (d.Status != WireFormat.Ok) return new Dialed { Status = d.Status, SentAt = sentAt };
                if (d.TtlMillis == 0 || d.Session == 0)
                    throw new IOException("the server opened a session with ttl " + d.TtlMillis + " ms, id " + d.Session);
                ok = true;
                return d;
            }
            finally
            {
                if (!ok) socket.Close();
            }
        }

        private byte[] OpenFrame(ulong resume)
        {
            return SessionWire.EncodeOpen(SessionWire.Version, 0, resume, _options.Source, _options.AuthToken);
        }

        /// <summary>The reader: serves a connection until it breaks, then resumes on a new one, until the end.</summary>
        private async Task SuperviseAsync(Socket socket, Stream stream)
        {
            while (socket != null)
            {
                Exception cause = await ReadLoopAsync(stream).ConfigureAwait(false);
                lock (_mu)
                {
                    if (_failure != null) return;
                    if (_closing && _closeAnswered)
                    {
                        Finish(new SessionClosedException("session " + IdHex + " closed"));
                        return;
                    }
                    _socket = null;
                    _stream = null;
                    socket.Close();
                    Disconnected(cause);
                }
                Log("session " + IdHex + " connection lost (" + cause.Message + "); resuming");
                Dialed d = await ResumeAsync().ConfigureAwait(false);
                socket = d == null ? null : d.Socket;
                stream = d == null ? null : d.Stream;
            }
        }

        /// <summary>Reads answers and settles their calls until the connection fails; returns why.</summary>
        private async Task<Exception> ReadLoopAsync(Stream stream)
        {
            var buf = new byte[64 * SessionWire.AnswerSize];
            var one = new byte[SessionWire.AnswerSize];
            int have = 0;
            try
            {
                while (true)
                {
                    int n = await stream.ReadAsync(buf, have, buf.Length - have).ConfigureAwait(false);
                    if (n == 0) return new EndOfStreamException("the server closed the connection");
                    have += n;
                    int off = 0;
                    lock (_mu)
                    {
                        for (; have - off >= SessionWire.AnswerSize; off += SessionWire.AnswerSize)
                        {
                            Buffer.BlockCopy(buf, off, one, 0, SessionWire.AnswerSize);
                            uint id;
                            byte status;
                            ulong token;
                            SessionWire.DecodeAnswer(one, out id, out status, out token);
                            Deliver(id, status, token);
                        }
                    }
                    Buffer.BlockCopy(buf, off, buf, 0, have - off);
                    have -= off;
                }
            }
            catch (Exception e) when (e is IOException || e is SocketException || e is ObjectDisposedException)
            {
                return e;
            }
        }

        /// <summary>Settles the call an answer is for; _mu is held.</summary>
        private void Deliver(uint id, byte status, ulong token)
        {
            Call c;
            if (!_pending.TryGetValue(id, out c)) return; // an answer for no pending request: ignored
            _pending.Remove(id);
            if (_queue.Count > 0) Signal(); // the writer may be holding requests back at the pending bound
            if (c.SentAt > _confirmed) _confirmed = c.SentAt;
            if (c == _ping) _ping = null;
            if (c.Grants && status == WireFormat.Ok)
            {
                if (c.GaveUp)
                {
                    // The grant crossed the Cancel (or the caller's end): nobody owns it, so it goes back.
                    _queue.AddLast(StrayUnlock(new Stray { Key = c.Key, Token = token }));
                    Signal();
                }
                else
                {
                    uint old;
                    if (_heldId.TryGetValue(c.Key, out old)) _reserved.Remove(old);
                    _held[c.Key] = token;
                    _heldId[c.Key] = c.Id;
                    _reserved.Add(c.Id);
                }
            }
            if (c.Action == SessionWire.Close && status == WireFormat.Ok) _closeAnswered = true;
            Complete(c, new Outcome { Status = status, Token = token });
        }

        /// <summary>
        /// The connection is lost; _mu is held. The Locks and TryLocks a caller still waits for are queued
        /// again, first and in the order they were sent, to be reissued with their ids after the resume (the
        /// server answers a grant it made for one at once, with its token); the rest fail. A Lock given up
        /// on may have been granted: it becomes a stray, released after the resume.
        /// </summary>
        private void Disconnected(Exception cause)
        {
            string why = "session " + IdHex + " connection lost before the answer: " + cause.Message;
            var reissue = new List<Call>();
            foreach (Call c in _pending.Values)
            {
                switch (c.Action)
                {
                    case SessionWire.Lock:
                    case SessionWire.TryLock:
                        if (c.Internal == null && !c.GaveUp)
                        {
                            c.Sent = false;
                            c.Reissue = true;
                            _reserved.Add(c.Id);
                            reissue.Add(c);
                            break;
                        }
                        _strays.Add(new Stray { Key = c.Key });
                        Complete(c, new Outcome { Error = new DisconnectedException(why + "; nothing is held", cause) });
                        break;
                    case SessionWire.Unlock:
                        if (c.Internal == null) _strays.Add(new Stray { Key = c.Key, Token = c.Token });
                        Complete(c, new Outcome { Error = new OutcomeUnknownException(why + "; outcome unknown", cause) });
                        break;
                    case SessionWire.ResetByKey:
                    case SessionWire.ResetBySource:
                        Complete(c, new Outcome { Error = new OutcomeUnknownException(why + "; outcome unknown", cause) });
                        break;
                    default:
                        Complete(c, new Outcome { Error = new DisconnectedException(why, cause) });
                        break;
                }
            }
            _pending.Clear();
            _ping = null;
            // Queued Cancels name Locks of the lost connection, now failed; a queued Ping is of no use.
            for (var n = _queue.First; n != null;)
            {
                var next = n.Next;
                if (n.Value.Action == SessionWire.Cancel || n.Value.Action == SessionWire.Ping) _queue.Remove(n);
                n = next;
            }
            reissue.Sort((x, y) => x.SentAt.CompareTo(y.SentAt));
            for (int i = reissue.Count - 1; i >= 0; i--) _queue.AddFirst(reissue[i]);
        }

        /// <summary>Reconnects with a growing back-off until the server takes the session back, refuses it, or the TTL passes.</summary>
        private async Task<Dialed> ResumeAsync()
        {
            long backoff = MinBackoff;
            while (true)
            {
                long deadline;
                lock (_mu)
                {
                    if (_failure != null) return null;
                    deadline = _confirmed + _ttlTicks;
                }
                long left = deadline - Now();
                if (left <= 0)
                {
                    Lose("its TTL (" + (long)Ttl.TotalMilliseconds + " ms) passed without a resume");
                    return null;
                }
                try
                {
                    TimeSpan l = TimeSpan.FromTicks(left);
                    Dialed d = await DialAsync(_endpoints, _options.Tls, OpenFrame(Id), l < _options.ConnectTimeout ? l : _options.ConnectTimeout, _jitter, _ended.Token).ConfigureAwait(false);
                    if (d.Status != WireFormat.Ok)
                    {
                        Lose("the server refused to resume it (expired, ended from the web, or the server restarted without its log)");
                        return null;
                    }
                    lock (_mu)
                    {
                        if (_failure != null)
                        {
                            d.Socket.Close();
                            return null;
                        }
                        _socket = d.Socket;
                        _stream = d.Stream;
                        Resumed(d.SentAt);
                        Signal();
                    }
                    Log("session " + IdHex + " resumed");
                    return d;
                }
                catch (OperationCanceledException)
                {
                    return null; // the session ended
                }
                catch (LockingCenterException e) when (e is UnreachableException || e is TlsException)
                {
                    Log("session " + IdHex + " resume failed: " + e.Message);
                }
                long sleep;
                lock (_jitter) sleep = backoff / 2 + (long)(_jitter.NextDouble() * (backoff / 2));
                sleep = Math.Min(sleep, Math.Max(0, deadline - Now()));
                try
                {
                    await Task.Delay(TimeSpan.FromTicks(sleep), _ended.Token).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    return null;
                }
                backoff = Math.Min(2 * backoff, MaxBackoff);
            }
        }

        private void Lose(string why)
        {
            lock (_mu)
            {
                if (_closing) Finish(new SessionClosedException("session " + IdHex + " closed (" + why + ")"));
                else Finish(new SessionLostException("session " + IdHex + " lost: " + why, null));
            }
        }

        /// <summary>Restarts the TTL and puts the unlocks of the strays first in the queue; _mu is held.</summary>
        private void Resumed(long sentAt)
        {
            _confirmed = sentAt;
            _lastSent = sentAt;
            var head = new List<Call>();
            var unknown = new HashSet<string>();
            foreach (Stray st in _strays)
            {
                ulong tok;
                if (_held.TryGetValue(st.Key, out tok) && (st.Token == 0 || st.Token == tok))
                    continue; // the program holds this key through the session: no stray can hold it
                if (st.Token == 0 && !unknown.Add(st.Key)) continue;
                head.Add(StrayUnlock(st));
            }
            _strays.Clear();
            for (int i = head.Count - 1; i >= 0; i--) _queue.AddFirst(head[i]);
        }

        /// <summary>Ends the session with why (once): every call fails, the tasks stop. _mu is held.</summary>
        private void Finish(LockingCenterException why)
        {
            if (_failure != null) return;
            _failure = why;
            if (_socket != null) _socket.Close();
            foreach (Call c in _pending.Values) Complete(c, new Outcome { Error = why });
            _pending.Clear();
            foreach (Call c in _queue)
                if (!c.Dropped) Complete(c, new Outcome { Error = why });
            _queue.Clear();
            _strays.Clear();
            _held.Clear();
            _heldId.Clear();
            _reserved.Clear();
            Signal();
            bool lost = why is SessionLostException;
            if (lost) Log(why.Message);
            // Outside _mu: cancelling runs the callbacks registered on Ended, which are the program's.
            ThreadPool.QueueUserWorkItem(_ =>
            {
                Timer t = _pingWatch;
                if (t != null) t.Dispose();
                _ended.Cancel();
                if (lost) _completion.TrySetException(why);
                else _completion.TrySetResult(true);
            });
        }

        /// <summary>The writer: sends the queued requests, all that fit in one write, and the Pings.</summary>
        private async Task WriteLoopAsync()
        {
            long pingEvery = Math.Max(1, _ttlTicks / 3);
            var buf = new byte[64 * 1024];
            while (true)
            {
                int len = 0;
                long wait;
                Stream stream;
                Socket socket;
                lock (_mu)
                {
                    if (_failure != null) return;
                    long now = Now();
                    if (_socket != null)
                    {
                        if (_ping == null && (now - _lastSent >= pingEvery || now - _confirmed >= pingEvery))
                        {
                            _ping = new Call { Action = SessionWire.Ping, KeyBytes = NoKey, Internal = _ => { } };
                            _queue.AddLast(_ping);
                        }
                        len = Take(buf, now);
                        // With a Ping out, its answer (or the ping watch) wakes the writer.
                        wait = _ping != null ? pingEvery : Math.Min(_lastSent, _confirmed) + pingEvery - now;
                    }
                    else wait = TimeSpan.TicksPerSecond;
                    stream = _stream;
                    socket = _socket;
                }
                if (len > 0)
                {
                    try
                    {
                        await stream.WriteAsync(buf, 0, len).ConfigureAwait(false);
                    }
                    catch (Exception e) when (e is IOException || e is SocketException || e is ObjectDisposedException)
                    {
                        socket.Close(); // the reader sees it and resumes
                    }
                    continue;
                }
                try
                {
                    await _wake.WaitAsync(TimeSpan.FromTicks(Math.Max(wait, TimeSpan.TicksPerMillisecond)), _ended.Token).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    return;
                }
            }
        }

        /// <summary>
        /// Moves the queued calls the server may receive now into pending and writes their frames into buf;
        /// _mu is held. A call is held back while MaxPending - 1 requests await their answer (the last place
        /// is kept for a Ping); a Cancel is never pending. Returns the bytes written.
        /// </summary>
        private int Take(byte[] buf, long now)
        {
            int len = 0;
            for (var n = _queue.First; n != null;)
            {
                var next = n.Next;
                Call c = n.Value;
                if (c.Dropped)
                {
                    if (c.Reissue) _reserved.Remove(c.Id);
                    _queue.Remove(n);
                    n = next;
                    continue;
                }
                int limit = c.Action == SessionWire.Ping ? MaxPending : MaxPending - 1;
                if (c.Action != SessionWire.Cancel && _pending.Count >= limit)
                {
                    n = next;
                    continue;
                }
                if (buf.Length - len < 2 * MaxFrame) break;
                _queue.Remove(n);
                n = next;
                c.Sent = true;
                c.SentAt = now;
                if (c.Action == SessionWire.Cancel)
                {
                    len += SessionWire.Put(buf, len, SessionWire.Cancel, c.Cancels, 0, NoKey);
                    continue;
                }
                uint id;
                if (c.Reissue && !_pending.ContainsKey(c.Id))
                {
                    id = c.Id; // sent again with its old id, reserved until now
                    _reserved.Remove(id);
                }
                else
                {
                    if (c.Reissue) _reserved.Remove(c.Id);
                    id = _nextId;
                    while (_pending.ContainsKey(id) || _reserved.Contains(id)) id++;
                    _nextId = id + 1;
                }
                c.Reissue = false;
                c.Id = id;
                _pending[id] = c;
                ulong tok;
                if (c.Action == SessionWire.Unlock && c.Internal == null && _held.TryGetValue(c.Key, out tok) && (c.Token == 0 || c.Token == tok))
                {
                    _held.Remove(c.Key);
                    uint hid;
                    if (_heldId.TryGetValue(c.Key, out hid)) _reserved.Remove(hid);
                    _heldId.Remove(c.Key);
                }
                len += SessionWire.Put(buf, len, c.Action, id, c.Token, c.KeyBytes);
                if (c.Action == SessionWire.Lock && c.GaveUp)
                    // A reissue whose caller gave up before it went out: withdrawn at once (a grant it finds
                    // is given back when its '+' comes).
                    len += SessionWire.Put(buf, len, SessionWire.Cancel, id, 0, NoKey);
            }
            if (len > 0) _lastSent = now;
            return len;
        }

        /// <summary>The ping watch: a Ping unanswered for a third of the TTL means the connection is dead.</summary>
        private void WatchPing()
        {
            lock (_mu)
            {
                if (_socket != null && _ping != null && _ping.Sent && Now() - _ping.SentAt >= _ttlTicks / 3)
                {
                    Log("session " + IdHex + ": no answer to Ping for " + (long)Ttl.TotalMilliseconds / 3 + " ms; reconnecting");
                    _socket.Close();
                    _ping = null;
                }
                Signal();
            }
        }
    }
}
