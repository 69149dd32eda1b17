package io.lockingcenter;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * Client of a Locking-Center server.
 *
 * <p>The address and the source are given once; every call then opens one TCP connection (a TLS
 * one with {@link Builder#tls}), writes one frame, reads the one-byte answer and closes. The client holds no connection and no state, so one
 * instance can be shared by every thread.
 *
 * <pre>{@code
 * LockingCenter lc = new LockingCenter("127.0.0.1:22119", "billing-worker");
 * try (HeldLock held = lc.lock("invoices/2026-11")) {
 *     // only one holder of the key at a time runs this
 * }
 * }</pre>
 *
 * <p>Giving up waiting: {@link #lock(String, Duration)} and {@link #waitFor(String, Duration)} take a
 * timeout; blocking calls also give up when their thread is interrupted; the futures of the
 * {@code ...Async} methods give up when cancelled or completed by anyone else (e.g. {@code orTimeout}).
 * In every case the connection is closed, so the server withdraws the waiter.
 *
 * <p>TLS: {@link Builder#tls(SSLContext)} (see {@link Tls} for contexts from PEM files), the same
 * options a {@link Session} takes; the server's certificate must name the host dialled, or
 * {@link Builder#serverName(String)}. Each request then makes its own TLS connection: the handshake
 * comes before the frame, so a refused handshake has sent nothing. Over TLS the asynchronous calls
 * run on a thread each while they wait (a blocking {@link SSLSocket}), not on the selector thread;
 * giving up sends close_notify and half-closes, which the server reads as the hang-up.
 *
 * <p>Keys must be 1..127 bytes and sources 0..127 bytes once UTF-8 encoded; anything else raises
 * {@link InvalidRequestException} before a connection is opened (the async methods return a future
 * failed with it).
 */
public final class LockingCenter {
    /** The server's default TCP port. */
    public static final int DEFAULT_PORT = 22119;

    private static final long NO_DEADLINE = Long.MAX_VALUE;
    /** How often a blocked call looks at its thread's interrupt flag. */
    private static final int POLL_MILLIS = 100;

    private final String address;
    /** Every address given: host and port, resolved at each request. */
    private final List<String[]> endpoints;
    private final String source;
    private final Duration connectTimeout;
    private final Duration requestTimeout;
    /** TLS on every connection, or null: plain TCP. */
    private final SSLContext tls;
    /** The name the server's certificate must show, or null: the host of each address. */
    private final String serverName;
    private final Executor executor;
    /** The selector thread of the async calls; it runs only while some are in progress. */
    private final V1Reactor reactor = new V1Reactor("locking-center-async");
    private static final System.Logger LOG = System.getLogger(LockingCenter.class.getName());

    /** A client of the server at {@code address} ("host:port", "host", "[::1]:port") with an empty
     *  source: the server then names the requester by its IP address. */
    public LockingCenter(String address) {
        this(builder().address(address));
    }

    /** A client of the server at {@code address} that names itself {@code source} (0..127 bytes). */
    public LockingCenter(String address, String source) {
        this(builder().address(address).source(source));
    }

    private LockingCenter(Builder b) {
        this.address = b.address;
        List<String[]> list = new ArrayList<>();
        for (String a : b.address.split(",")) {
            if (!a.isBlank()) {
                list.add(splitAddress(a.trim()));
            }
        }
        this.endpoints = List.copyOf(list);
        this.source = b.source; // checked by Builder.source
        this.connectTimeout = b.connectTimeout;
        this.requestTimeout = b.requestTimeout;
        this.tls = b.tls;
        this.serverName = b.serverName;
        this.executor = b.executor != null ? b.executor : ForkJoinPool.commonPool();
    }

    /** A builder with the defaults: address {@code localhost:22119}, empty source, connect timeout
     *  5 s, request timeout 30 s, async calls completed on {@link ForkJoinPool#commonPool()}. */
    public static Builder builder() {
        return new Builder();
    }

    /** The server address as given. */
    public String address() {
        return address;
    }

    /** The source this client names itself with ("" lets the server use the peer IP). */
    public String source() {
        return source;
    }

    // ---------------------------------------------------------------- blocking calls

    /**
     * Waits in FIFO order until the key is granted, and returns the held key; close it (or call
     * {@link #unlock}) to release. Interrupting the thread gives up waiting.
     *
     * @throws ResetWhileWaitingException the key or source was reset while waiting (answer '-')
     * @throws UnreachableException the server could not be reached or closed without an answer
     * @throws LockInterruptedException the thread was interrupted; the waiter was withdrawn
     * @throws InvalidRequestException the key is empty or longer than 127 bytes
     */
    public HeldLock lock(String key) {
        return lockBlocking(key, null);
    }

    /**
     * Like {@link #lock(String)} but gives up after {@code timeout} (connecting included).
     *
     * @throws LockTimeoutException the timeout passed; the connection was closed, so the server
     *     withdrew the waiter
     */
    public HeldLock lock(String key, Duration timeout) {
        return lockBlocking(key, positive(timeout));
    }

    /**
     * Takes the key only if nobody holds it: {@code true} if it is now held by this client, {@code false}
     * if someone else holds it (answer '#'). Never waits.
     *
     * @throws RefusedException the server answered '-'
     */
    public boolean tryLock(String key) {
        return tryResult(key, request(Action.TRY_LOCK, key, source));
    }

    /**
     * Scoped try-lock: returns the held key when the key was free, for try-with-resources.
     *
     * @throws NotWonException someone holds the key (answer '#')
     * @throws RefusedException the server answered '-'
     */
    public HeldLock tryLockOrThrow(String key) {
        if (!tryLock(key)) {
            throw new NotWonException(key);
        }
        return new HeldLock(this, key);
    }

    /**
     * Releases a key. Any client may release any key; the first live waiter is granted at once.
     *
     * @throws RefusedException the key was not held, or the release could not be recorded (answer '-')
     */
    public void unlock(String key) {
        okResult(Action.UNLOCK, key, request(Action.UNLOCK, key, source));
    }

    /**
     * Waits for one's turn on the key: locks it, then unlocks it at once.
     *
     * @throws ResetWhileWaitingException the key or source was reset while waiting
     * @throws RefusedException the unlock that follows the grant was answered '-'
     */
    public void waitFor(String key) {
        lockBlocking(key, null);
        unlock(key);
    }

    /** Like {@link #waitFor(String)} but gives up after {@code timeout} with {@link LockTimeoutException}. */
    public void waitFor(String key, Duration timeout) {
        lockBlocking(key, positive(timeout));
        unlock(key);
    }

    /**
     * Drops the key's holder and answers '-' to every waiter of the key. Idempotent.
     *
     * @throws RefusedException the server answered '-'
     */
    public void resetByKey(String key) {
        okResult(Action.RESET_BY_KEY, key, request(Action.RESET_BY_KEY, key, source));
    }

    /**
     * Answers '-' to every waiter from {@code source} (on any key), then releases every key it holds.
     * An empty source means the peer IP address of this connection.
     *
     * @throws RefusedException the server answered '-'
     */
    public void resetBySource(String source) {
        okResult(Action.RESET_BY_SOURCE, "", request(Action.RESET_BY_SOURCE, "", source));
    }

    /** Resets this client's own source (see {@link #resetBySource(String)}). */
    public void resetBySource() {
        resetBySource(source);
    }

    // ---------------------------------------------------------------- asynchronous calls

    /**
     * Asynchronous {@link #lock(String)}. Cancelling the returned future (or completing it in any other
     * way, e.g. {@code orTimeout}) closes the connection, so the server withdraws the waiter; if the
     * grant raced with the cancellation, the key is unlocked again. Futures derived from it with
     * {@code thenApply} and the like do not pass a cancellation back: cancel this one.
     */
    public CompletableFuture<HeldLock> lockAsync(String key) {
        return lockTask(key, null, false);
    }

    /** Asynchronous {@link #lock(String, Duration)}: the future fails with {@link LockTimeoutException}
     *  when the timeout passes, and the waiter is withdrawn. */
    public CompletableFuture<HeldLock> lockAsync(String key, Duration timeout) {
        return lockTask(key, positive(timeout), false);
    }

    /** Asynchronous {@link #tryLock(String)}. */
    public CompletableFuture<Boolean> tryLockAsync(String key) {
        return async(Action.TRY_LOCK, key, source, null, b -> tryResult(key, b));
    }

    /** Asynchronous {@link #unlock(String)}. */
    public CompletableFuture<Void> unlockAsync(String key) {
        return submitOk(Action.UNLOCK, key, source);
    }

    /** Asynchronous {@link #waitFor(String)}; cancelling withdraws the waiter. */
    public CompletableFuture<Void> waitForAsync(String key) {
        return lockTask(key, null, true);
    }

    /** Asynchronous {@link #waitFor(String, Duration)}. */
    public CompletableFuture<Void> waitForAsync(String key, Duration timeout) {
        return lockTask(key, positive(timeout), true);
    }

    /** Asynchronous {@link #resetByKey(String)}. */
    public CompletableFuture<Void> resetByKeyAsync(String key) {
        return submitOk(Action.RESET_BY_KEY, key, source);
    }

    /** Asynchronous {@link #resetBySource(String)}. */
    public CompletableFuture<Void> resetBySourceAsync(String source) {
        return submitOk(Action.RESET_BY_SOURCE, "", source);
    }

    @Override
    public String toString() {
        return "LockingCenter[" + address + (source.isEmpty() ? "" : ", source=" + Wire.quote(source)) + "]";
    }

    // ---------------------------------------------------------------- internals

    private HeldLock lockBlocking(String key, Duration timeout) {
        byte[] frame = Wire.encode(Action.LOCK, key, source);
        long deadline = timeout == null ? NO_DEADLINE : System.nanoTime() + timeout.toNanos();
        int answer = exchange(frame, key, new Call(), deadline, timeout, true);
        return lockResult(key, answer);
    }

    /**
     * Asynchronous Lock: with thenUnlock (waitFor) the future completes with null after the unlock,
     * which is made even if the caller gave up meanwhile (the key is ours by then).
     */
    private <T> CompletableFuture<T> lockTask(String key, Duration timeout, boolean thenUnlock) {
        CompletableFuture<HeldLock> lock = async(Action.LOCK, key, source, timeout, b -> lockResult(key, b));
        if (!thenUnlock) {
            @SuppressWarnings("unchecked")
            CompletableFuture<T> f = (CompletableFuture<T>) lock;
            return f;
        }
        CompletableFuture<T> out = new CompletableFuture<>();
        lock.whenComplete((held, e) -> {
            if (e != null) {
                out.completeExceptionally(e);
                return;
            }
            unlockAsync(key).whenComplete((v, e2) -> {
                if (e2 != null) {
                    out.completeExceptionally(e2);
                } else {
                    out.complete(null);
                }
            });
        });
        out.whenComplete((v, e) -> lock.cancel(false)); // the caller gave up: withdraw the Lock
        return out;
    }

    /** Maps an answer byte to a call's value, or throws its error. */
    private interface AnswerMapper<T> {
        T map(int answer);
    }

    /**
     * Starts one request on the client's selector thread (no thread waits for it) and returns its
     * future. Invalid input fails the future at once. A future completed by anyone but the client
     * (cancel, orTimeout, completeExceptionally) withdraws the request; a Lock or TryLock that is
     * granted anyway is unlocked again. Only Lock waits without a deadline (unless given a timeout);
     * every other action gets the request timeout.
     */
    private <T> CompletableFuture<T> async(Action action, String key, String src, Duration lockTimeout,
            AnswerMapper<T> map) {
        CompletableFuture<T> f = new CompletableFuture<>();
        byte[] frame;
        try {
            frame = Wire.encode(action, key, src);
        } catch (InvalidRequestException e) {
            f.completeExceptionally(e);
            return f;
        }
        List<InetSocketAddress> targets;
        try {
            targets = targets();
        } catch (UnreachableException e) {
            f.completeExceptionally(e);
            return f;
        }
        long now = System.nanoTime();
        long deadline;
        java.util.function.Supplier<LockingCenterException> onDeadline;
        if (action == Action.LOCK) {
            deadline = lockTimeout == null ? NO_DEADLINE : now + lockTimeout.toNanos();
            onDeadline = () -> new LockTimeoutException(key, lockTimeout);
        } else {
            deadline = now + requestTimeout.toNanos();
            onDeadline = () -> (LockingCenterException) expired(key, null);
        }
        boolean grants = action == Action.LOCK || action == Action.TRY_LOCK;
        if (tls != null) {
            return tlsAsync(f, frame, key, deadline, action == Action.LOCK ? lockTimeout : null, grants, map);
        }
        V1Reactor.Op op = new V1Reactor.Op(targets, frame, grants, connectTimeout.toNanos(), deadline, onDeadline,
                new V1Reactor.Handler() {
                    @Override
                    public void answer(int b) {
                        run(() -> {
                            T value;
                            try {
                                value = map.map(b);
                            } catch (LockingCenterException e) {
                                f.completeExceptionally(e);
                                return;
                            }
                            completeOrGiveBack(f, value, grants && b == Wire.OK, key);
                        });
                    }

                    @Override
                    public void failed(LockingCenterException e) {
                        run(() -> f.completeExceptionally(e));
                    }

                    @Override
                    public void grantAfterGiveUp() {
                        releaseAsync(key);
                    }
                });
        f.whenComplete((v, e) -> {
            if (op.claim()) {
                reactor.abandon(op);
            }
        });
        try {
            reactor.start(op);
        } catch (UnreachableException e) {
            f.completeExceptionally(e); // no selector could be opened
        }
        return f;
    }

    /**
     * An async request over TLS: the blocking exchange on a thread of its own, which ends with the
     * request. Why not the selector: TLS over a non-blocking channel means driving an SSLEngine by
     * hand (handshake, wrap and unwrap, post-handshake messages, close_notify) in the reactor, for a
     * path that pays a handshake per request anyway; the JDK's SSLSocket does all of it. Completing
     * f from outside (cancel, orTimeout) aborts the call: close_notify and the write side shut, so
     * the server withdraws the waiter; a '+' that crossed it is unlocked again.
     */
    private <T> CompletableFuture<T> tlsAsync(CompletableFuture<T> f, byte[] frame, String key, long deadline,
            Duration lockTimeout, boolean grants, AnswerMapper<T> map) {
        Call call = new Call();
        f.whenComplete((v, e) -> call.abort());
        Thread t = new Thread(() -> {
            int b;
            try {
                b = exchange(frame, key, call, deadline, lockTimeout, false);
            } catch (RuntimeException e) {
                run(() -> f.completeExceptionally(e));
                return;
            }
            run(() -> {
                T value;
                try {
                    value = map.map(b);
                } catch (LockingCenterException e) {
                    f.completeExceptionally(e);
                    return;
                }
                completeOrGiveBack(f, value, grants && b == Wire.OK, key);
            });
        }, "locking-center-tls-request");
        t.setDaemon(true);
        t.start();
        return f;
    }

    /** An async unlock or reset: completes with null on '+', fails as {@link #okResult} says otherwise. */
    private CompletableFuture<Void> submitOk(Action action, String key, String src) {
        return async(action, key, src, null, b -> {
            okResult(action, key, b);
            return null;
        });
    }

    /** A blocking request that never waits (everything but Lock): its answer byte. */
    private int request(Action action, String key, String src) {
        byte[] frame = Wire.encode(action, key, src);
        return exchange(frame, key, new Call(), requestDeadline(), null, true);
    }

    /** Runs a completion on the executor (inline if it refuses), never on the selector thread's time. */
    private void run(Runnable task) {
        try {
            executor.execute(task);
        } catch (RejectedExecutionException e) {
            task.run();
        }
    }

    /**
     * Completes f with value; if the caller gave up first (f is already done) and the request was
     * granted, nobody will release the key, so it is released now.
     */
    private <T> void completeOrGiveBack(CompletableFuture<T> f, T value, boolean granted, String key) {
        if (!f.complete(value) && granted) {
            releaseAsync(key);
        }
    }

    /** Unlocks a key nobody owns any more (a grant that crossed a give-up), without waiting. */
    private void releaseAsync(String key) {
        unlockAsync(key).whenComplete((v, e) -> {
            if (e != null) {
                LOG.log(System.Logger.Level.WARNING, "unlocking {0} after a grant that crossed a give-up: {1}",
                        Wire.quote(key), e.toString());
            }
        });
    }

    /** Whether no async request is in progress: for tests. */
    boolean asyncIdle() {
        return reactor.idle();
    }

    private void releaseQuietly(String key) {
        try {
            unlock(key);
        } catch (LockingCenterException ignored) {
            // best effort: the key may have been reset meanwhile
        }
    }

    private long requestDeadline() {
        return System.nanoTime() + requestTimeout.toNanos();
    }

    /**
     * One request: connect, write the whole frame in one write, read exactly one byte, close. The
     * write side is never shut down before the answer: the server would take that as a hang-up.
     *
     * @param deadline System.nanoTime() value after which the call gives up, or NO_DEADLINE
     * @param timeout the caller's lock timeout (deadline expiry raises LockTimeoutException), or null
     *     (expiry means the server stayed silent: UnreachableException)
     * @param blocking true in the caller's thread: watch the interrupt flag
     * @throws CancellationException when the call was aborted by another thread
     */
    private int exchange(byte[] frame, String key, Call call, long deadline, Duration timeout, boolean blocking) {
        if (blocking && Thread.currentThread().isInterrupted()) {
            throw interrupted(key);
        }
        Socket socket = connectAny(call, key, deadline, timeout);
        try {
            try {
                socket.getOutputStream().write(frame);
            } catch (IOException e) {
                throw lost(call, "cannot send to " + address + ": " + e.getMessage(), e);
            }
            InputStream in;
            try {
                in = socket.getInputStream();
            } catch (IOException e) {
                throw lost(call, "cannot read from " + address + ": " + e.getMessage(), e);
            }
            while (true) {
                long slice = blocking ? POLL_MILLIS : 0;
                if (deadline != NO_DEADLINE) {
                    long left = remainingMillis(deadline);
                    if (left <= 0) {
                        hangUp(frame, socket, in, key);
                        throw expired(key, timeout);
                    }
                    slice = slice == 0 ? left : Math.min(slice, left);
                }
                try {
                    socket.setSoTimeout((int) Math.min(Integer.MAX_VALUE, slice));
                    int b = in.read();
                    if (b < 0) {
                        throw lost(call, "server at " + address + " closed the connection without an answer", null);
                    }
                    return b;
                } catch (SocketTimeoutException e) {
                    if (blocking && Thread.interrupted()) {
                        hangUp(frame, socket, in, key); // with the flag clear, so that it can unlock
                        throw interrupted(key);
                    }
                    // otherwise loop: the deadline check above decides
                } catch (IOException e) {
                    throw lost(call, "connection to " + address + " lost before the answer: " + e.getMessage(), e);
                }
            }
        } finally {
            try {
                socket.close();
            } catch (IOException ignored) {
                // nothing more to do with this connection
            }
        }
    }

    /**
     * Every address of every endpoint (all the records of each name), in random order, so that the
     * requests of many clients spread over the nodes of a cluster.
     *
     * @throws UnreachableException no name resolved
     */
    private List<InetSocketAddress> targets() {
        List<InetSocketAddress> all = new ArrayList<>();
        String unresolved = null;
        for (String[] hp : endpoints) {
            try {
                for (InetAddress ip : InetAddress.getAllByName(hp[0])) {
                    all.add(new InetSocketAddress(ip, Integer.parseInt(hp[1])));
                }
            } catch (IOException e) {
                unresolved = hp[0];
            }
        }
        if (all.isEmpty()) {
            throw new UnreachableException("cannot resolve " + unresolved, null);
        }
        Collections.shuffle(all, ThreadLocalRandom.current());
        return all;
    }

    /**
     * Connects the call's socket to the first address that takes the connection, each attempt
     * within the connect timeout (and the call's deadline). Nothing is sent before a connection is
     * made, so trying the next address is always safe.
     */
    private Socket connectAny(Call call, String key, long deadline, Duration timeout) {
        List<InetSocketAddress> targets = targets();
        RuntimeException last = null;
        for (InetSocketAddress target : targets) {
            Socket socket;
            try {
                socket = call.open();
            } catch (IOException e) {
                throw new CancellationException("request cancelled");
            }
            boolean ok = false;
            try {
                socket.setTcpNoDelay(true);
                long connectMillis = connectTimeout.toMillis();
                if (deadline != NO_DEADLINE) {
                    long left = remainingMillis(deadline);
                    if (left <= 0) {
                        throw expired(key, timeout);
                    }
                    connectMillis = Math.min(connectMillis, left);
                }
                socket.connect(target, (int) Math.min(Integer.MAX_VALUE, Math.max(1, connectMillis)));
                if (tls != null) {
                    socket = handshake(call, socket, target, deadline);
                }
                ok = true;
                return socket;
            } catch (javax.net.ssl.SSLException e) {
                // A certificate refused, or a handshake that failed: nothing was sent.
                last = lost(call, "TLS with " + target + " failed: " + e.getMessage(), e);
                if (call.isAborted()) {
                    throw last;
                }
            } catch (SocketTimeoutException e) {
                if (limitedByDeadline(deadline)) {
                    throw expired(key, timeout);
                }
                last = new UnreachableException("connect to " + target + " timed out after "
                        + connectTimeout.toMillis() + " ms", e);
            } catch (IOException e) {
                last = lost(call, "cannot connect to " + target + ": " + e.getMessage(), e);
                if (call.isAborted()) {
                    throw last;
                }
            } finally {
                if (!ok) {
                    try {
                        socket.close();
                    } catch (IOException ignored) {
                        // a socket that never connected
                    }
                }
            }
        }
        throw last;
    }

    /**
     * The TLS handshake on a connected socket, within the connect timeout (and the call's deadline):
     * the certificate must chain to the context's roots and name the host dialled, or serverName.
     */
    private Socket handshake(Call call, Socket socket, InetSocketAddress target, long deadline) throws IOException {
        long millis = connectTimeout.toMillis();
        if (deadline != NO_DEADLINE) {
            millis = Math.min(millis, remainingMillis(deadline));
        }
        socket.setSoTimeout((int) Math.min(Integer.MAX_VALUE, Math.max(1, millis)));
        String name = serverName != null ? serverName : target.getHostString();
        SSLSocket t = (SSLSocket) tls.getSocketFactory().createSocket(socket, name, target.getPort(), true);
        SSLParameters p = t.getSSLParameters();
        p.setEndpointIdentificationAlgorithm("HTTPS"); // the certificate must name the server
        if (!name.isEmpty() && !Character.isDigit(name.charAt(0)) && name.indexOf(':') < 0) {
            p.setServerNames(List.of(new SNIHostName(name)));
        }
        t.setSSLParameters(p);
        call.layered(t);
        t.startHandshake();
        return t;
    }

    private boolean limitedByDeadline(long deadline) {
        return deadline != NO_DEADLINE && remainingMillis(deadline) <= connectTimeout.toMillis();
    }

    /**
     * A blocking Lock or TryLock gives up after its frame was sent: hang up (close the write side;
     * over TLS, {@link SSLSocket#shutdownOutput} sends close_notify first) so the server withdraws
     * the waiter, then read for a moment, so that a grant which crossed the
     * hang-up on the wire is unlocked again instead of held by nobody. The caller then throws why it
     * gave up.
     */
    private void hangUp(byte[] frame, Socket socket, InputStream in, String key) {
        if (frame[0] != Action.LOCK.code() && frame[0] != Action.TRY_LOCK.code()) {
            return;
        }
        try {
            socket.shutdownOutput();
            socket.setSoTimeout(Call.HANG_UP_GRACE_MILLIS);
            if (in.read() == Wire.OK) {
                releaseQuietly(key);
            }
        } catch (IOException ignored) {
            // the server closed, or stayed silent: no grant came back
        }
    }

    private static long remainingMillis(long deadline) {
        long nanos = deadline - System.nanoTime();
        return nanos <= 0 ? 0 : Math.max(1, TimeUnit.NANOSECONDS.toMillis(nanos));
    }

    private RuntimeException expired(String key, Duration timeout) {
        if (timeout != null) {
            return new LockTimeoutException(key, timeout);
        }
        return new UnreachableException("no answer from " + address + " within " + requestTimeout.toMillis() + " ms", null);
    }

    private static RuntimeException interrupted(String key) {
        Thread.currentThread().interrupt();
        return new LockInterruptedException(key);
    }

    private static RuntimeException lost(Call call, String message, IOException cause) {
        if (call.isAborted()) {
            return new CancellationException("request cancelled");
        }
        return new UnreachableException(message, cause);
    }

    private HeldLock lockResult(String key, int answer) {
        switch (answer) {
            case Wire.OK:
                return new HeldLock(this, key);
            case Wire.FAIL:
                throw new ResetWhileWaitingException(key);
            default:
                throw unexpected(Action.LOCK, answer);
        }
    }

    private static boolean tryResult(String key, int answer) {
        switch (answer) {
            case Wire.OK:
                return true;
            case Wire.NOT_WON:
                return false;
            case Wire.FAIL:
                throw new RefusedException("try-lock on key " + Wire.quote(key) + " was answered '-'");
            default:
                throw unexpected(Action.TRY_LOCK, answer);
        }
    }

    private static void okResult(Action action, String key, int answer) {
        if (answer == Wire.OK) {
            return;
        }
        if (answer == Wire.FAIL) {
            switch (action) {
                case UNLOCK:
                    throw new RefusedException("unlock of key " + Wire.quote(key)
                            + " was answered '-' (not held, or the release could not be recorded)");
                case RESET_BY_KEY:
                    throw new RefusedException("reset of key " + Wire.quote(key) + " was answered '-'");
                default:
                    throw new RefusedException("reset by source was answered '-'");
            }
        }
        throw unexpected(action, answer);
    }

    private static LockingCenterException unexpected(Action action, int answer) {
        return new LockingCenterException("unexpected answer " + Wire.answer(answer) + " to " + action);
    }

    private static Duration positive(Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("timeout must be positive (use tryLock not to wait)");
        }
        return timeout;
    }

    /** Splits "host:port", "host", "[v6]:port" or a bare IPv6 address into host and port. */
    static String[] splitAddress(String address) {
        if (address == null || address.isBlank()) {
            throw new IllegalArgumentException("address must not be empty");
        }
        String a = address.trim();
        String host;
        String port = String.valueOf(DEFAULT_PORT);
        if (a.startsWith("[")) {
            int end = a.indexOf(']');
            if (end < 0) {
                throw new IllegalArgumentException("bad address " + address);
            }
            host = a.substring(1, end);
            String rest = a.substring(end + 1);
            if (!rest.isEmpty()) {
                if (!rest.startsWith(":")) {
                    throw new IllegalArgumentException("bad address " + address);
                }
                port = rest.substring(1);
            }
        } else if (a.indexOf(':') >= 0 && a.indexOf(':') == a.lastIndexOf(':')) {
            host = a.substring(0, a.indexOf(':'));
            port = a.substring(a.indexOf(':') + 1);
        } else {
            host = a; // a host name, or a bare IPv6 address without port
        }
        int p;
        try {
            p = Integer.parseInt(port);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bad port in address " + address);
        }
        if (p < 1 || p > 65535 || host.isEmpty()) {
            throw new IllegalArgumentException("bad address " + address);
        }
        return new String[] {host, String.valueOf(p)};
    }

    /** Builder of a {@link LockingCenter} client. */
    public static final class Builder {
        private String address = "localhost:" + DEFAULT_PORT;
        private String source = "";
        private Duration connectTimeout = Duration.ofSeconds(5);
        private Duration requestTimeout = Duration.ofSeconds(30);
        private SSLContext tls;
        private String serverName;
        private Executor executor;

        private Builder() {}

        /**
         * Speaks TLS with this context on every connection (a server started with
         * TLS_CERT/TLS_KEY; with a client certificate in it for TLS_CLIENT_CA), as
         * {@link Session.Builder#tls(SSLContext)} does. {@link Tls#context} makes one from PEM
         * files. The server's certificate must name the host dialled, or {@link #serverName}. A
         * refused handshake is {@link UnreachableException}.
         */
        public Builder tls(SSLContext context) {
            this.tls = Objects.requireNonNull(context, "context");
            return this;
        }

        /** The name the server's certificate must show, instead of the host of each address. */
        public Builder serverName(String name) {
            this.serverName = name;
            return this;
        }

        /**
         * Server address: "host:port", "host" (port 22119) or "[::1]:port"; or several, comma
         * separated (the nodes of a cluster). Each request connects to one of them (every DNS record
         * of each name counts), in random order, trying the next when one refuses the connection.
         */
        public Builder address(String address) {
            if (address == null || address.isBlank()) {
                throw new IllegalArgumentException("address must not be empty");
            }
            for (String a : address.split(",")) {
                if (!a.isBlank()) {
                    splitAddress(a.trim());
                }
            }
            this.address = address;
            return this;
        }

        /** Name of the requester, 0..127 bytes; empty lets the server use the peer IP address. */
        public Builder source(String source) {
            this.source = source == null ? "" : source;
            Wire.sourceBytes(this.source);
            return this;
        }

        /** Time allowed to open a connection (default 5 s), and again for its TLS handshake; past it
         *  the call raises {@link UnreachableException}. */
        public Builder connectTimeout(Duration timeout) {
            this.connectTimeout = positive(timeout);
            return this;
        }

        /** Time allowed for the answer to a request that never waits (unlock, try-lock, resets;
         *  default 30 s); past it the call raises {@link UnreachableException}. */
        public Builder requestTimeout(Duration timeout) {
            this.requestTimeout = positive(timeout);
            return this;
        }

        /** Executor that completes the async calls' futures (and so runs their non-async callbacks);
         *  default {@link ForkJoinPool#commonPool()}. The calls themselves wait on one selector thread,
         *  not on this executor. */
        public Builder executor(Executor executor) {
            this.executor = executor;
            return this;
        }

        /** Builds the client. */
        public LockingCenter build() {
            return new LockingCenter(this);
        }
    }
}
