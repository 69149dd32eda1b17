using System;
using System.Globalization;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Security.Authentication;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter
{
    /// <summary>Settings of a <see cref="LockingCenterClient"/>.</summary>
    public sealed class LockingCenterOptions
    {
        /// <summary>
        /// Server address: "host:port", "host" (port 22119) or "[::1]:port", or a comma-separated list of them
        /// (each call tries them in random order until one connects). Default "localhost:22119".
        /// </summary>
        public string Address { get; set; } = "localhost:" + LockingCenterClient.DefaultPort;

        /// <summary>Name of the requester, 0..127 bytes; empty (the default) lets the server use the peer IP.</summary>
        public string Source { get; set; } = "";

        /// <summary>
        /// Time allowed to open a connection (default 5 s), and again for its TLS handshake; past it the next
        /// address is tried, and a call that runs out of addresses raises <see cref="UnreachableException"/>.
        /// </summary>
        public TimeSpan ConnectTimeout { get; set; } = TimeSpan.FromSeconds(5);

        /// <summary>
        /// TLS (SslStream) on every connection, the same settings a session takes; null (the default): plain
        /// TCP. The handshake comes before the frame is written, so a refused one sends nothing.
        /// </summary>
        public TlsOptions Tls { get; set; }

        /// <summary>
        /// Time allowed for the answer to a request that never waits (unlock, try-lock, resets; default
        /// 30 s); past it the call raises <see cref="UnreachableException"/>.
        /// </summary>
        public TimeSpan RequestTimeout { get; set; } = TimeSpan.FromSeconds(30);
    }

    /// <summary>
    /// Client of a Locking-Center server. The address and the source are given once; every call then
    /// opens one TCP connection (with <see cref="LockingCenterOptions.Tls"/>, a TLS one), writes one frame,
    /// reads the one-byte answer and closes. The client holds no connection and no state, so one instance
    /// can be shared by every thread.
    /// </summary>
    /// <remarks>
    /// Giving up waiting: pass a timeout, or cancel the <see cref="CancellationToken"/>. Either closes the
    /// connection, so the server withdraws the waiter; a grant that races with giving up is unlocked
    /// again. Keys must be 1..127 bytes and sources 0..127 bytes once UTF-8 encoded; anything else fails
    /// with <see cref="InvalidRequestException"/> before a connection is opened.
    /// </remarks>
    public sealed class LockingCenterClient
    {
        /// <summary>The server's default TCP port.</summary>
        public const int DefaultPort = 22119;

        /// <summary>How long a Lock that gave up still reads after its hang-up, for a grant already sent.</summary>
        private static readonly TimeSpan HangUpGrace = TimeSpan.FromSeconds(2);

        // Appended, with the unlock's error message, to the message of giving up when the give-back of a
        // grant that came in meanwhile failed (OperationCanceledException and LockTimeoutException).
        internal const string GiveBackFailedNote = "; the lock granted meanwhile could not be unlocked again: ";

        private readonly Endpoint[] _endpoints;
        private readonly Random _order = new Random(); // locked while used
        private readonly TimeSpan _connectTimeout;
        private readonly TimeSpan _requestTimeout;
        private readonly TlsOptions _tls; // null: plain TCP

        /// <summary>A client of the server at <paramref name="address"/> naming itself <paramref name="source"/>.</summary>
        /// <param name="address">"host:port", "host" (port 22119) or "[::1]:port".</param>
        /// <param name="source">Name of the requester (0..127 bytes); empty lets the server use the peer IP.</param>
        /// <exception cref="ArgumentException">The address cannot be parsed.</exception>
        /// <exception cref="InvalidRequestException">The source is longer than 127 bytes.</exception>
        public LockingCenterClient(string address, string source = "")
            : this(new LockingCenterOptions { Address = address, Source = source ?? "" })
        {
        }

        /// <summary>A client with the given settings.</summary>
        /// <param name="options">Address, source and timeouts.</param>
        /// <exception cref="ArgumentException">The address or a timeout is invalid.</exception>
        /// <exception cref="InvalidRequestException">The source is longer than 127 bytes.</exception>
        public LockingCenterClient(LockingCenterOptions options)
        {
            if (options == null) throw new ArgumentNullException("options");
            _endpoints = Transport.Parse(options.Address);
            Address = options.Address;
            Source = options.Source ?? "";
            WireFormat.SourceBytes(Source);
            _connectTimeout = Positive(options.ConnectTimeout, "ConnectTimeout");
            _requestTimeout = Positive(options.RequestTimeout, "RequestTimeout");
            _tls = options.Tls;
        }

        /// <summary>The server address as given.</summary>
        public string Address { get; private set; }

        /// <summary>The source this client names itself with ("" lets the server use the peer IP).</summary>
        public string Source { get; private set; }

        /// <summary>
        /// Waits in FIFO order until the key is granted and returns the held key; dispose it (or call
        /// <see cref="UnlockAsync"/>) to release.
        /// </summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="cancellationToken">Cancelling closes the connection: the server withdraws the waiter.</param>
        /// <returns>The held key.</returns>
        /// <exception cref="ResetWhileWaitingException">The key or source was reset while waiting.</exception>
        /// <exception cref="UnreachableException">The server could not be reached or closed without an answer.</exception>
        /// <exception cref="InvalidRequestException">The key is empty or longer than 127 bytes.</exception>
        /// <exception cref="OperationCanceledException">The token was cancelled; the waiter was withdrawn.</exception>
        public Task<LockHandle> LockAsync(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            return LockCoreAsync(key, null, cancellationToken);
        }

        /// <summary>Like <see cref="LockAsync(string, CancellationToken)"/>, but gives up after <paramref name="timeout"/>.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="timeout">How long to wait, connecting included.</param>
        /// <param name="cancellationToken">Cancelling closes the connection: the server withdraws the waiter.</param>
        /// <returns>The held key.</returns>
        /// <exception cref="LockTimeoutException">The timeout passed; the waiter was withdrawn.</exception>
        public Task<LockHandle> LockAsync(string key, TimeSpan timeout, CancellationToken cancellationToken = default(CancellationToken))
        {
            return LockCoreAsync(key, Positive(timeout, "timeout"), cancellationToken);
        }

        /// <summary>Takes the key only if nobody holds it. Never waits.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="cancellationToken">Cancels the request.</param>
        /// <returns>True if the key is now held by this client, false if someone holds it ('#').</returns>
        /// <exception cref="RefusedException">The server answered '-'.</exception>
        public async Task<bool> TryLockAsync(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            byte[] frame = WireFormat.Encode(LockAction.TryLock, key, Source);
            byte answer = await ExchangeAsync(frame, key, false, null, cancellationToken).ConfigureAwait(false);
            switch (answer)
            {
                case WireFormat.Ok: return true;
                case WireFormat.NotWon: return false;
                case WireFormat.Fail: throw new RefusedException("try-lock on key " + WireFormat.Quote(key) + " was answered '-'");
                default: throw Unexpected(LockAction.TryLock, answer);
            }
        }

        /// <summary>Scoped try-lock: returns the held key when it was free, for a using statement.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="cancellationToken">Cancels the request.</param>
        /// <returns>The held key.</returns>
        /// <exception cref="NotWonException">Someone holds the key ('#').</exception>
        /// <exception cref="RefusedException">The server answered '-'.</exception>
        public async Task<LockHandle> TryLockOrThrowAsync(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            if (!await TryLockAsync(key, cancellationToken).ConfigureAwait(false))
                throw new NotWonException(key);
            return new LockHandle(this, key);
        }

        /// <summary>Releases a key; the first live waiter is granted at once. Any client may release any key.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="cancellationToken">Cancels the request (the outcome is then unknown).</param>
        /// <returns>A task that completes when the key is released.</returns>
        /// <exception cref="RefusedException">The key was not held, or the release could not be recorded ('-').</exception>
        public Task UnlockAsync(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            return RequestOkAsync(LockAction.Unlock, key, Source, cancellationToken);
        }

        /// <summary>Waits for one's turn on the key: locks it, then unlocks it at once.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="cancellationToken">Cancelling while queued withdraws the waiter.</param>
        /// <returns>A task that completes after the turn came and the key was released again.</returns>
        /// <exception cref="ResetWhileWaitingException">The key or source was reset while waiting.</exception>
        /// <exception cref="RefusedException">The unlock after the grant was answered '-'.</exception>
        public Task WaitAsync(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            return WaitCoreAsync(key, null, cancellationToken);
        }

        /// <summary>Like <see cref="WaitAsync(string, CancellationToken)"/>, but gives up after <paramref name="timeout"/>.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="timeout">How long to wait for the turn.</param>
        /// <param name="cancellationToken">Cancelling while queued withdraws the waiter.</param>
        /// <returns>A task that completes after the turn came and the key was released again.</returns>
        /// <exception cref="LockTimeoutException">The timeout passed; the waiter was withdrawn.</exception>
        public Task WaitAsync(string key, TimeSpan timeout, CancellationToken cancellationToken = default(CancellationToken))
        {
            return WaitCoreAsync(key, Positive(timeout, "timeout"), cancellationToken);
        }

        /// <summary>Drops the key's holder and answers '-' to every waiter of the key. Idempotent.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="cancellationToken">Cancels the request.</param>
        /// <returns>A task that completes when the key is reset.</returns>
        /// <exception cref="RefusedException">The server answered '-'.</exception>
        public Task ResetByKeyAsync(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            return RequestOkAsync(LockAction.ResetByKey, key, Source, cancellationToken);
        }

        /// <summary>
        /// Answers '-' to every waiter from <paramref name="source"/> (on any key), then releases every key
        /// it holds. A null source means this client's own <see cref="Source"/>; an empty one means the
        /// peer IP address of the connection.
        /// </summary>
        /// <param name="source">The source to reset, 0..127 bytes; null for this client's own.</param>
        /// <param name="cancellationToken">Cancels the request.</param>
        /// <returns>A task that completes when the source is reset.</returns>
        /// <exception cref="RefusedException">The server answered '-'.</exception>
        public Task ResetBySourceAsync(string source = null, CancellationToken cancellationToken = default(CancellationToken))
        {
            return RequestOkAsync(LockAction.ResetBySource, "", source ?? Source, cancellationToken);
        }

        // ------------------------------------------------------------ blocking forms

        /// <summary>Blocking form of <see cref="LockAsync(string, CancellationToken)"/>.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="cancellationToken">Cancelling withdraws the waiter.</param>
        /// <returns>The held key.</returns>
        public LockHandle Lock(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            return LockAsync(key, cancellationToken).GetAwaiter().GetResult();
        }

        /// <summary>Blocking form of <see cref="LockAsync(string, TimeSpan, CancellationToken)"/>.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="timeout">How long to wait.</param>
        /// <param name="cancellationToken">Cancelling withdraws the waiter.</param>
        /// <returns>The held key.</returns>
        public LockHandle Lock(string key, TimeSpan timeout, CancellationToken cancellationToken = default(CancellationToken))
        {
            return LockAsync(key, timeout, cancellationToken).GetAwaiter().GetResult();
        }

        /// <summary>Blocking form of <see cref="TryLockAsync"/>.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <returns>True if the key is now held, false if someone holds it.</returns>
        public bool TryLock(string key)
        {
            return TryLockAsync(key).GetAwaiter().GetResult();
        }

        /// <summary>Blocking form of <see cref="UnlockAsync"/>.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        public void Unlock(string key)
        {
            UnlockAsync(key).GetAwaiter().GetResult();
        }

        /// <summary>Blocking form of <see cref="WaitAsync(string, CancellationToken)"/>.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        /// <param name="cancellationToken">Cancelling withdraws the waiter.</param>
        public void Wait(string key, CancellationToken cancellationToken = default(CancellationToken))
        {
            WaitAsync(key, cancellationToken).GetAwaiter().GetResult();
        }

        /// <summary>Blocking form of <see cref="ResetByKeyAsync"/>.</summary>
        /// <param name="key">The key, 1..127 bytes.</param>
        public void ResetByKey(string key)
        {
            ResetByKeyAsync(key).GetAwaiter().GetResult();
        }

        /// <summary>Blocking form of <see cref="ResetBySourceAsync"/>.</summary>
        /// <param name="source">The source to reset; null for this client's own.</param>
        public void ResetBySource(string source = null)
        {
            ResetBySourceAsync(source).GetAwaiter().GetResult();
        }

        /// <summary>The address and source of this client.</summary>
        /// <returns>A short description.</returns>
        public override string ToString()
        {
            return "LockingCenterClient[" + Address + (Source.Length == 0 ? "" : ", source=" + WireFormat.Quote(Source)) + "]";
        }

        // ------------------------------------------------------------ internals

        private async Task<LockHandle> LockCoreAsync(string key, TimeSpan? timeout, CancellationToken cancellationToken)
        {
            byte[] frame = WireFormat.Encode(LockAction.Lock, key, Source);
            byte answer = await ExchangeAsync(frame, key, true, timeout, cancellationToken).ConfigureAwait(false);
            switch (answer)
            {
                case WireFormat.Ok: return new LockHandle(this, key);
                case WireFormat.Fail: throw new ResetWhileWaitingException(key);
                default: throw Unexpected(LockAction.Lock, answer);
            }
        }

        private async Task WaitCoreAsync(string key, TimeSpan? timeout, CancellationToken cancellationToken)
        {
            await LockCoreAsync(key, timeout, cancellationToken).ConfigureAwait(false);
            // The key is ours now: release it even if the caller gives up meanwhile.
            await UnlockAsync(key, CancellationToken.None).ConfigureAwait(false);
        }

        /// <summary>An unlock or reset: completes on '+', fails as <see cref="Expect"/> says otherwise.</summary>
        private async Task RequestOkAsync(LockAction action, string key, string source, CancellationToken cancellationToken)
        {
            byte[] frame = WireFormat.Encode(action, key, source);
            byte answer = await ExchangeAsync(frame, key, false, null, cancellationToken).ConfigureAwait(false);
            Expect(action, key, answer);
        }

        /// <summary>
        /// One request: connect (and the TLS handshake), write the whole frame in one write, read exactly
        /// one byte, close. A failed connect or handshake tries the next address: nothing was sent yet. The
        /// frame, once written, is never sent again. The write side is never shut down before the answer:
        /// the server would take that as a hang-up.
        /// Cancellation and timeouts close the socket, which is how a waiter is withdrawn; a Lock or
        /// TryLock closes its write side first (<see cref="HangUp"/>), and if a '+' still comes in as it
        /// gives up, a Lock unlocks the key again before the cancellation or timeout is raised, while a
        /// TryLock's answer stands.
        /// </summary>
        private async Task<byte> ExchangeAsync(byte[] frame, string key, bool waits, TimeSpan? lockTimeout, CancellationToken cancellationToken)
        {
            cancellationToken.ThrowIfCancellationRequested();
            TimeSpan? budget = waits ? lockTimeout : _requestTimeout;
            // A Lock or TryLock may be granted as the caller gives up: its '+' must still be read.
            bool grants = waits || frame[0] == (byte)LockAction.TryLock;
            using (var limit = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken))
            {
                if (budget.HasValue) limit.CancelAfter(budget.Value);
                // Every address of every endpoint, the endpoints in random order and each one's addresses too.
                var order = (Endpoint[])_endpoints.Clone();
                lock (_order) Transport.Shuffle(order, _order);
                Exception last = null;
                TlsException tlsFailure = null;
                foreach (Endpoint ep in order)
                {
                IPAddress[] addresses;
                try { addresses = await Transport.ResolveAsync(ep.Host).ConfigureAwait(false); }
                catch (UnreachableException e)
                {
                    if (order.Length == 1) throw;
                    last = e;
                    continue;
                }
                lock (_order) Transport.Shuffle(addresses, _order);
                foreach (IPAddress address in addresses)
                {
                    var socket = new Socket(address.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
                    Stream tls = null; // the SslStream over socket, with TLS
                    bool connected = false;
                    int answer = -1; // the byte read; -1 when none was
                    Exception error = null;
                    try
                    {
                        // ConnectAsync closes the socket itself when limit.Token is cancelled.
                        await ConnectAsync(socket, new IPEndPoint(address, ep.Port), limit.Token).ConfigureAwait(false);
                        if (_tls != null)
                        {
                            try { tls = await HandshakeAsync(socket, ep, limit.Token).ConfigureAwait(false); }
                            catch (TlsException e) when (!limit.IsCancellationRequested)
                            {
                                tlsFailure = e; // nothing was sent: the next address may take it
                                continue;
                            }
                            catch (TimeoutException e)
                            {
                                last = e;
                                continue;
                            }
                        }
                        connected = true;
                        using (limit.Token.Register(() => { if (grants) HangUp(socket); else socket.Close(); }))
                        {
                            socket.NoDelay = true;
                            var buffer = new byte[1];
                            int n;
                            if (tls == null)
                            {
                                socket.Send(frame);
                                n = await Task.Factory.FromAsync(
                                    (callback, state) => socket.BeginReceive(buffer, 0, 1, SocketFlags.None, callback, state),
                                    socket.EndReceive, null).ConfigureAwait(false);
                            }
                            else
                            {
                                // One write: the frame leaves in one TLS record.
                                await tls.WriteAsync(frame, 0, frame.Length).ConfigureAwait(false);
                                n = await tls.ReadAsync(buffer, 0, 1).ConfigureAwait(false);
                            }
                            if (n == 1) answer = buffer[0];
                        }
                    }
                    catch (IOException e) when (tls != null && e.InnerException is AuthenticationException && !limit.IsCancellationRequested)
                    {
                        // The server refused this client (an alert after the handshake, as in TLS 1.3).
                        throw new TlsException("the TLS server " + ep + " refused the connection: " + e.Message, e);
                    }
                    catch (Exception e) when (!(e is LockingCenterException) || limit.IsCancellationRequested)
                    {
                        error = e; // given up (below) when limit is cancelled, whatever broke
                    }
                    finally
                    {
                        if (tls != null) tls.Dispose();
                        socket.Close();
                    }
                    // An answer to a request that never waits stands even if the caller gave up meanwhile.
                    if (answer >= 0 && !(waits && limit.IsCancellationRequested)) return (byte)answer;
                    if (limit.IsCancellationRequested)
                        throw await GaveUpAsync(key, waits && answer == WireFormat.Ok, waits, lockTimeout, error, cancellationToken).ConfigureAwait(false);
                    if (connected)
                    {
                        if (error == null)
                            throw new UnreachableException("server at " + Address + " closed the connection without an answer", null);
                        throw new UnreachableException("connection to " + Address + " lost before the answer: " + error.Message, error);
                    }
                    last = error;
                }
                }
                // A certificate refused says more than a later address that did not answer.
                if (tlsFailure != null) throw tlsFailure;
                throw new UnreachableException("cannot connect to " + Address + ": " + (last == null ? "no address" : last.Message), last);
            }
        }

        /// <summary>
        /// The error for a request given up (cancelled, or past its timeout). When a Lock was granted as it
        /// gave up, the key is ours though the caller will not get it: it is unlocked again first, and if
        /// that unlock fails its error becomes the inner exception instead of replacing the cancellation.
        /// </summary>
        private async Task<Exception> GaveUpAsync(string key, bool granted, bool waits, TimeSpan? lockTimeout, Exception error, CancellationToken cancellationToken)
        {
            string note = "";
            Exception unlockError = null;
            if (granted)
            {
                try
                {
                    await UnlockAsync(key, CancellationToken.None).ConfigureAwait(false);
                    note = "; the lock granted meanwhile was unlocked again";
                }
                catch (LockingCenterException e)
                {
                    unlockError = e;
                    note = GiveBackFailedNote + e.Message;
                }
            }
            if (cancellationToken.IsCancellationRequested)
                return new OperationCanceledException("request cancelled; the connection was closed" + note, unlockError ?? error, cancellationToken);
            if (waits)
                return new LockTimeoutException(key, lockTimeout.Value, unlockError);
            return new UnreachableException("no answer from " + Address + " within " + (long)_requestTimeout.TotalMilliseconds + " ms", error);
        }

        /// <summary>
        /// Hangs up a Lock or TryLock: shuts down the write side, so the server reads EOF and withdraws the
        /// waiter, but keeps reading for up to <see cref="HangUpGrace"/> so that a grant that crossed the
        /// hang-up on the wire is read (and given back) rather than left held; then closes the socket.
        /// Over TLS the FIN alone is the hang-up (the server reads the end of the TLS stream either way):
        /// netstandard2.0 has no SslStream.ShutdownAsync to send close_notify with, and a close_notify
        /// written while the read is pending would race with it inside SslStream.
        /// </summary>
        private static void HangUp(Socket socket)
        {
            try
            {
                socket.Shutdown(SocketShutdown.Send);
            }
            catch (Exception e) when (e is SocketException || e is ObjectDisposedException)
            {
                socket.Close();
                return;
            }
            Task.Delay(HangUpGrace).ContinueWith(t => socket.Close(), TaskScheduler.Default);
        }

        /// <summary>
        /// The TLS handshake on a connected socket, within the connect timeout (and token): the SslStream,
        /// which does not own the socket. TlsException: the certificate or the handshake was refused;
        /// TimeoutException: the connect timeout passed first. Either way nothing was sent.
        /// </summary>
        private async Task<Stream> HandshakeAsync(Socket socket, Endpoint ep, CancellationToken token)
        {
            using (var bound = CancellationTokenSource.CreateLinkedTokenSource(token))
            {
                bound.CancelAfter(_connectTimeout);
                using (bound.Token.Register(() => socket.Close()))
                {
                    try
                    {
                        return await Transport.HandshakeAsync(new NetworkStream(socket, false), ep.Host, _tls).ConfigureAwait(false);
                    }
                    catch (Exception e) when (bound.IsCancellationRequested && !token.IsCancellationRequested
                        && (e is ObjectDisposedException || e is IOException || e is SocketException || e is TlsException))
                    {
                        throw new TimeoutException("TLS handshake with " + ep + " timed out after " + (long)_connectTimeout.TotalMilliseconds + " ms", e);
                    }
                }
            }
        }

        private async Task ConnectAsync(Socket socket, IPEndPoint endpoint, CancellationToken token)
        {
            Task connect = Task.Factory.FromAsync(socket.BeginConnect, socket.EndConnect, endpoint, null);
            using (var delayCancel = CancellationTokenSource.CreateLinkedTokenSource(token))
            {
                Task delay = Task.Delay(_connectTimeout, delayCancel.Token);
                Task first = await Task.WhenAny(connect, delay).ConfigureAwait(false);
                delayCancel.Cancel();
                if (first != connect)
                {
                    socket.Close();
                    IgnoreFault(connect);
                    token.ThrowIfCancellationRequested();
                    throw new UnreachableException("connect to " + Address + " timed out after " + (long)_connectTimeout.TotalMilliseconds + " ms", null);
                }
                await connect.ConfigureAwait(false);
            }
        }

        private static void IgnoreFault(Task task)
        {
            task.ContinueWith(t => { var ignored = t.Exception; }, TaskContinuationOptions.OnlyOnFaulted);
        }

        private static void Expect(LockAction action, string key, byte answer)
        {
            if (answer == WireFormat.Ok) return;
            if (answer != WireFormat.Fail) throw Unexpected(action, answer);
            switch (action)
            {
                case LockAction.Unlock:
                    throw new RefusedException("unlock of key " + WireFormat.Quote(key) + " was answered '-' (not held, or the release could not be recorded)");
                case LockAction.ResetByKey:
                    throw new RefusedException("reset of key " + WireFormat.Quote(key) + " was answered '-'");
                default:
                    throw new RefusedException("reset by source was answered '-'");
            }
        }

        private static LockingCenterException Unexpected(LockAction action, byte answer)
        {
            return new LockingCenterException("unexpected answer " + WireFormat.Answer(answer) + " to " + action);
        }

        private static TimeSpan Positive(TimeSpan t, string name)
        {
            if (t <= TimeSpan.Zero) throw new ArgumentOutOfRangeException(name, "must be positive (use TryLock not to wait)");
            return t;
        }

        /// <summary>Splits "host:port", "host", "[v6]:port" or a bare IPv6 address into host and port.</summary>
        internal static string[] SplitAddress(string address)
        {
            if (string.IsNullOrWhiteSpace(address)) throw new ArgumentException("address must not be empty", "address");
            string a = address.Trim();
            string host;
            string port = DefaultPort.ToString(CultureInfo.InvariantCulture);
            if (a.StartsWith("[", StringComparison.Ordinal))
            {
                int end = a.IndexOf(']');
                if (end < 0) throw new ArgumentException("bad address " + address, "address");
                host = a.Substring(1, end - 1);
                string rest = a.Substring(end + 1);
                if (rest.Length > 0)
                {
                    if (rest[0] != ':') throw new ArgumentException("bad address " + address, "address");
                    port = rest.Substring(1);
                }
            }
            else if (a.IndexOf(':') >= 0 && a.IndexOf(':') == a.LastIndexOf(':'))
            {
                host = a.Substring(0, a.IndexOf(':'));
                port = a.Substring(a.IndexOf(':') + 1);
            }
            else
            {
                host = a; // a host name, or a bare IPv6 address without port
            }
            int p;
            if (!int.TryParse(port, NumberStyles.None, CultureInfo.InvariantCulture, out p) || p < 1 || p > 65535 || host.Length == 0)
                throw new ArgumentException("bad address " + address, "address");
            return new[] { host, p.ToString(CultureInfo.InvariantCulture) };
        }
    }
}
