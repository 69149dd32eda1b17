package io.lockingcenter;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * A session with a Locking-Center server (docs/protocol.md, "Sessions"): one TCP connection that
 * carries the requests of many threads at once, answered out of order, and that owns the keys it
 * takes. Its holds end with it: at {@link #close()}, when the server ends it, or one TTL after the
 * server last heard from it, so a crashed program's keys free themselves. Every grant carries its
 * fencing token.
 *
 * <pre>{@code
 * try (Session session = Session.builder().address("127.0.0.1:22119").source("billing").open();
 *      SessionLock held = session.lock("invoices/2026-11")) {
 *     storage.write(data, held.token()); // the storage refuses tokens lower than the last it saw
 * }
 * }</pre>
 *
 * <p>Threads: one reader per connection reads the answers and completes the calls' futures (it runs
 * the reconnect loop too), one writer sends every frame (the frames queued by all callers go out
 * together), and one timer thread runs the timeouts and watches the Ping. A waiting
 * {@link #lockAsync} holds no thread: 200 pending calls are 200 futures, not 200 threads. The
 * futures are completed through the builder's executor (default {@link ForkJoinPool#commonPool()}),
 * never on the reader, so a callback that blocks cannot stop the session. {@link #close()} ends every
 * thread the session started.
 *
 * <p>Several addresses (the nodes of a cluster, {@code "a:22119,b:22119,c:22119"}, and every DNS
 * record of each name) are tried in random order until one answers. When nothing was sent for a
 * third of the TTL the session sends Ping. When the connection drops (a node killed, a leader that
 * steps down), the session reconnects to any address and resumes, with a growing back-off between
 * rounds, while the TTL allows (counted from the send time of the last answered request); calls made
 * meanwhile wait for the new connection. A Lock or TryLock pending on the lost connection is reissued
 * with its old id (Reissue): a grant the server made before the drop, whose answer was lost, is
 * returned at once with its token, not waited for. An unlock or a reset pending on it fails with
 * {@link OutcomeUnknownException} and is never sent again blindly (a lost unlock is settled by its
 * token after the resume), a Ping or Close with {@link DisconnectedException}.
 *
 * <p>TLS: {@link Builder#tls(SSLContext)} (see {@link Tls} for contexts from PEM files); the server's
 * certificate must name the host dialled, or {@link Builder#serverName(String)}.
 *
 * <p>The session is lost when the server refuses the resume or the TTL passes without one:
 * {@link #done()} then completes exceptionally with {@link SessionLostException}, every pending and
 * later call fails with it, and {@link SessionLock#close()} of a key held at that moment throws it.
 *
 * <p>A failed Lock or TryLock always means nothing is held: when a timeout, a cancellation or an
 * interrupt ends the wait, the session sends Cancel; if the grant crossed the Cancel, the session
 * unlocks it by its token.
 *
 * <p>Instances are thread-safe.
 */
public final class Session implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(Session.class.getName());

    /** The server's bound on requests awaiting an answer on one connection; one more drops it. */
    static final int MAX_PENDING = 1024;
    private static final long MIN_BACKOFF_NANOS = TimeUnit.MILLISECONDS.toNanos(50);
    private static final long MAX_BACKOFF_NANOS = TimeUnit.SECONDS.toNanos(1);
    /** Largest request frame: 14 bytes of header and a key of 127. */
    private static final int MAX_FRAME = 14 + Wire.MAX_SIZE;
    private static final byte[] NO_KEY = new byte[0];

    private final String address;
    /** Every address given: host and port, resolved at each attempt. */
    private final List<String[]> endpoints;
    private final SSLContext tls;
    private final String serverName;
    private final String source;
    private final String auth;
    private final Duration connectTimeout;
    private final Duration requestTimeout;
    private final Executor executor;
    private final long id;
    private final Duration ttl;
    private final long ttlNanos;

    private final ScheduledThreadPoolExecutor timer;
    private final Thread reader;
    private final Thread writer;
    /** Completes when the session ends: normally after close(), with SessionLostException when lost. */
    private final EndFuture done = new EndFuture();
    /** Counted down when the session ends; the reconnect back-off waits on it. */
    private final CountDownLatch ended = new CountDownLatch(1);

    /** Guards every field below, and the state of every Call. */
    private final ReentrantLock mu = new ReentrantLock();
    /** Signalled when the writer may have something to do (a call queued, a connection, the end). */
    private final Condition wake = mu.newCondition();
    /** The connection being served; null between connections. */
    private Socket socket;
    private OutputStream out;
    /** Calls not yet taken by the writer, in order. */
    private final ArrayDeque<Call> queue = new ArrayDeque<>();
    /** Calls written on the current connection whose answer has not come, by id. */
    private final Map<Integer, Call> pending = new HashMap<>();
    private int nextId = 1;
    /** Every grant this session holds that the program knows of: key to token. */
    private final Map<String, Long> held = new HashMap<>();
    /** The id of the request that made each grant of held, by key. */
    private final Map<String, Integer> heldId = new HashMap<>();
    /**
     * Ids no new request may take: those of heldId and of the Locks and TryLocks waiting to be
     * reissued. Reissue finds a grant by its request's id, so an id reused while its grant is held
     * would find the wrong request's.
     */
    private final Set<Integer> reserved = new HashSet<>();
    /** Numbers the calls in the order they were made: reissues keep that order. */
    private long nextSeq;
    /** Grants the session may hold that no caller owns, released after the next resume. */
    private final List<Stray> strays = new ArrayList<>();
    /** System.nanoTime() when the latest request the server has answered was sent. */
    private long confirmed;
    /** System.nanoTime() of the latest write. */
    private long lastSent;
    /** The session's Ping awaiting its answer, if any. */
    private Call ping;
    private boolean closing;
    private boolean closeAnswered;
    private boolean lossReported;
    /** Why the session ended; null while it lives. */
    private LockingCenterException failure;

    private Session(Builder b, Opened opened) throws IOException {
        this.address = b.address;
        this.endpoints = b.endpoints;
        this.tls = b.tls;
        this.serverName = b.serverName;
        this.source = b.source;
        this.auth = b.auth;
        this.connectTimeout = b.connectTimeout;
        this.requestTimeout = b.requestTimeout;
        this.executor = b.executor != null ? b.executor : ForkJoinPool.commonPool();
        this.id = opened.answer.session();
        this.ttl = Duration.ofMillis(opened.answer.ttlMillis());
        this.ttlNanos = ttl.toNanos();
        this.confirmed = opened.sentAt;
        this.lastSent = opened.sentAt;
        this.socket = opened.socket;
        this.out = opened.socket.getOutputStream();
        String name = "locking-center-session-" + idHex();
        this.timer = new ScheduledThreadPoolExecutor(1, r -> daemon(r, name + "-timer"));
        this.timer.setRemoveOnCancelPolicy(true);
        this.timer.setExecuteExistingDelayedTasksAfterShutdownPolicy(false); // the timer ends with the session
        long every = Math.max(TimeUnit.MILLISECONDS.toNanos(50), ttlNanos / 12);
        this.timer.scheduleAtFixedRate(this::watchPing, every, every, TimeUnit.NANOSECONDS);
        this.reader = daemon(() -> supervise(opened.socket), name + "-reader");
        this.writer = daemon(this::writeLoop, name + "-writer");
        this.reader.start();
        this.writer.start();
    }

    private static Thread daemon(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    /** A builder: address {@code localhost:22119}, the server's TTL, empty source and auth token. */
    public static Builder builder() {
        return new Builder();
    }

    /** Opens a session with the server's TTL and an empty source at {@code address} ("host:port"). */
    public static Session open(String address) {
        return builder().address(address).open();
    }

    /** The session id the server gave (unsigned 64 bits; see {@link #idHex()}). */
    public long id() {
        return id;
    }

    /** The session id as 16 hex digits, as the JSON API and the dashboard show it. */
    public String idHex() {
        return String.format("%016x", id);
    }

    /** The TTL the server granted. */
    public Duration ttl() {
        return ttl;
    }

    /**
     * A future that completes when the session has ended: normally after {@link #close()},
     * exceptionally with {@link SessionLostException} when the session was lost. Every hold the
     * session had is then gone (or goes at the server's expiry). Its callbacks run on the executor.
     */
    public CompletableFuture<Void> done() {
        return done;
    }

    /**
     * The future of {@link #done()}: only the session completes it (completing or cancelling it from
     * outside does nothing); the futures derived from it are ordinary ones.
     */
    private static final class EndFuture extends CompletableFuture<Void> {
        @Override
        public <U> CompletableFuture<U> newIncompleteFuture() {
            return new CompletableFuture<>();
        }

        @Override
        public boolean complete(Void value) {
            return false;
        }

        @Override
        public boolean completeExceptionally(Throwable e) {
            return false;
        }

        @Override
        public boolean cancel(boolean mayInterrupt) {
            return false;
        }

        @Override
        public void obtrudeValue(Void value) {
            throw new UnsupportedOperationException("only the session completes done()");
        }

        @Override
        public void obtrudeException(Throwable e) {
            throw new UnsupportedOperationException("only the session completes done()");
        }

        void end(LockingCenterException lost) {
            if (lost != null) {
                super.completeExceptionally(lost);
            } else {
                super.complete(null);
            }
        }
    }

    /** Whether the session is still alive (neither closed nor lost). */
    public boolean isOpen() {
        mu.lock();
        try {
            return failure == null;
        } finally {
            mu.unlock();
        }
    }

    /** The exception the session ended with (closed or lost), or null while it lives. */
    LockingCenterException failure() {
        mu.lock();
        try {
            return failure;
        } finally {
            mu.unlock();
        }
    }

    // ---------------------------------------------------------------- calls

    /**
     * Waits for {@code key} in FIFO order with every other waiter, this session's own included (a
     * thread that locks a key the session already holds waits for it, as with a non-reentrant
     * mutex), and returns the held key with its fencing token. Interrupting the thread gives up.
     *
     * @throws ResetWhileWaitingException the key or this session's source was reset while waiting
     * @throws LockInterruptedException the thread was interrupted; nothing is held
     * @throws DisconnectedException the connection dropped while waiting; nothing is held
     * @throws SessionLostException the session is lost
     * @throws SessionClosedException the session was closed
     * @throws InvalidRequestException the key is empty or longer than 127 bytes
     */
    public SessionLock lock(String key) {
        return await(lockAsync(key), key);
    }

    /**
     * Like {@link #lock(String)}, giving up after {@code timeout}.
     *
     * @throws LockTimeoutException the timeout passed; the session sent Cancel and holds nothing
     */
    public SessionLock lock(String key, Duration timeout) {
        return await(lockAsync(key, timeout), key);
    }

    /**
     * Asynchronous {@link #lock(String)}. Completing the returned future in any other way
     * ({@code cancel}, {@code orTimeout}, {@code completeExceptionally}) sends Cancel; a grant that
     * crosses it is unlocked by its token. Derived futures ({@code thenApply}) do not pass a
     * cancellation back: cancel this one.
     */
    public CompletableFuture<SessionLock> lockAsync(String key) {
        return submit(SessionWire.LOCK, key, 0, null, o -> lockResult(key, o));
    }

    /** Asynchronous {@link #lock(String, Duration)}: fails with {@link LockTimeoutException}. */
    public CompletableFuture<SessionLock> lockAsync(String key, Duration timeout) {
        Duration t = positive(timeout);
        return submit(SessionWire.LOCK, key, 0, () -> new LockTimeoutException(key, t), o -> lockResult(key, o), t);
    }

    /**
     * Takes {@code key} only if nobody holds it now, this session included: the held key, or empty
     * when someone holds it (answer '#'). Never waits for the key.
     *
     * @throws RefusedException the server answered '-'
     */
    public Optional<SessionLock> tryLock(String key) {
        return await(tryLockAsync(key), key);
    }

    /**
     * Scoped {@link #tryLock(String)} for try-with-resources.
     *
     * @throws NotWonException someone holds the key
     */
    public SessionLock tryLockOrThrow(String key) {
        return tryLock(key).orElseThrow(() -> new NotWonException(key));
    }

    /** Asynchronous {@link #tryLock(String)}; a grant won after the future was cancelled is unlocked. */
    public CompletableFuture<Optional<SessionLock>> tryLockAsync(String key) {
        return submit(SessionWire.TRY_LOCK, key, 0, () -> noAnswer("try-lock", key, false), o -> {
            switch (o.status) {
                case Wire.OK:
                    return Optional.of(new SessionLock(this, key, o.token));
                case Wire.NOT_WON:
                    return Optional.empty();
                case Wire.FAIL:
                    throw new RefusedException("try-lock on key " + Wire.quote(key) + " was answered '-'");
                default:
                    throw unexpected("try-lock", o.status);
            }
        }, requestTimeout);
    }

    /**
     * Releases the grant of {@code key} with that {@code token} (0: whichever grant this session
     * holds on the key). It is never sent twice: when its answer is lost it throws
     * {@link OutcomeUnknownException}, and the session settles that grant after the resume with an
     * Unlock by token, which cannot release anything else.
     *
     * @throws NotHeldException this session does not hold that grant; nothing was released
     */
    public void unlock(String key, long token) {
        await(unlockAsync(key, token), key);
    }

    /** Asynchronous {@link #unlock(String, long)}. */
    public CompletableFuture<Void> unlockAsync(String key, long token) {
        return submit(SessionWire.UNLOCK, key, token, () -> noAnswer("unlock", key, true), o -> {
            if (o.status == Wire.OK) {
                return null;
            }
            if (o.status == Wire.FAIL) {
                throw new NotHeldException("unlock of key " + Wire.quote(key) + " token "
                        + Long.toUnsignedString(token) + ": this session does not hold that grant", null);
            }
            throw unexpected("unlock", o.status);
        }, requestTimeout);
    }

    /** Drops the holder of {@code key}, whoever it is, and refuses its waiters. */
    public void resetByKey(String key) {
        await(resetByKeyAsync(key), key);
    }

    /** Asynchronous {@link #resetByKey(String)}. */
    public CompletableFuture<Void> resetByKeyAsync(String key) {
        return reset(SessionWire.RESET_BY_KEY, key);
    }

    /**
     * Refuses every waiter of {@code source} and releases every key it holds; empty means this
     * connection's IP address. The session stays open, though it loses its holds if the source is
     * its own.
     */
    public void resetBySource(String source) {
        await(resetBySourceAsync(source), source);
    }

    /** Asynchronous {@link #resetBySource(String)}. */
    public CompletableFuture<Void> resetBySourceAsync(String source) {
        return reset(SessionWire.RESET_BY_SOURCE, source == null ? "" : source);
    }

    private CompletableFuture<Void> reset(int action, String what) {
        String name = action == SessionWire.RESET_BY_KEY ? "reset of key" : "reset by source";
        return submit(action, what, 0, () -> noAnswer(name, what, true), o -> {
            if (o.status == Wire.OK) {
                return null;
            }
            if (o.status == Wire.FAIL) {
                throw new RefusedException(name + " " + Wire.quote(what) + " was answered '-'");
            }
            throw unexpected(name, o.status);
        }, requestTimeout);
    }

    /**
     * Ends the session: the server refuses its pending Locks and releases every key it holds, then
     * the session's threads end. When the server cannot be told (it stays unreachable for the TTL),
     * the threads end all the same and the server releases the holds when the TTL passes. Closing
     * again does nothing.
     *
     * @throws SessionLostException the session had been lost before (reported once)
     */
    @Override
    public void close() {
        LockingCenterException ended;
        boolean report;
        mu.lock();
        try {
            ended = failure;
            report = ended instanceof SessionLostException && !lossReported;
            if (ended != null) {
                lossReported = true;
            }
            closing = true;
        } finally {
            mu.unlock();
        }
        if (ended != null) {
            stopThreads();
            if (report) {
                throw ended;
            }
            return;
        }
        long deadline = System.nanoTime() + ttlNanos + connectTimeout.toNanos();
        while (true) {
            CompletableFuture<Void> f = submit(SessionWire.CLOSE, "", 0, null, o -> null);
            try {
                f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (ExecutionException e) {
                if (e.getCause() instanceof DisconnectedException && System.nanoTime() < deadline) {
                    continue; // sent again on the next connection: closing twice is harmless
                }
                LOG.log(System.Logger.Level.DEBUG, "close of session {0}: {1}", idHex(), e.getCause().toString());
            } catch (TimeoutException e) {
                LOG.log(System.Logger.Level.WARNING, "session {0} not closed by the server; it releases the holds after the TTL ({1} ms)",
                        idHex(), ttl.toMillis());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            break;
        }
        mu.lock();
        try {
            finish(new SessionClosedException("session " + idHex() + " closed", null));
        } finally {
            mu.unlock();
        }
        stopThreads();
        done.end(null); // done() is complete when close() returns
    }

    private void stopThreads() {
        timer.shutdownNow();
        for (Thread t : new Thread[] {reader, writer}) {
            if (t == Thread.currentThread()) {
                continue;
            }
            try {
                t.join(TimeUnit.NANOSECONDS.toMillis(connectTimeout.toNanos()) + 1000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    @Override
    public String toString() {
        return "Session[" + idHex() + ", " + address + ", ttl=" + ttl.toMillis() + "ms]";
    }

    // ---------------------------------------------------------------- the calls' life

    /** Maps an answer to a call's value, or throws the call's error. */
    private interface Mapper<T> {
        T map(Outcome o);
    }

    /** The outcome of a call: an answer, or an error. */
    private record Outcome(int status, long token, LockingCenterException error) {
        static Outcome failed(LockingCenterException e) {
            return new Outcome(0, 0, e);
        }
    }

    /** A grant the session may hold that no caller owns; token 0 when it is not known. */
    private record Stray(String key, long token) {}

    /** One request of the session. Its mutable state is guarded by mu. */
    private static final class Call {
        final int action;
        final String key;
        final byte[] keyBytes;
        final long token;
        /** For a Cancel: the id of the Lock it withdraws. */
        final int cancels;
        /** Hands the outcome to the caller (runs on the executor); null for the session's own calls. */
        final Consumer<Outcome> deliver;
        /** Handles the outcome of the session's own calls; runs with mu held. */
        final Consumer<Outcome> internal;

        int id;
        boolean sent;
        long sentAt;
        /** The order the call was made in. */
        long seq;
        /** A Lock or TryLock sent on a connection lost before its answer: sent again with its id. */
        boolean reissue;
        /** Given up before it was sent: the writer skips it. */
        boolean dropped;
        /** The caller stopped waiting after it was sent: a grant to come is given back. */
        boolean gaveUp;
        /** The caller has its outcome, or has given up. */
        boolean finished;

        Call(int action, String key, byte[] keyBytes, long token, int cancels, Consumer<Outcome> deliver,
                Consumer<Outcome> internal) {
            this.action = action;
            this.key = key;
            this.keyBytes = keyBytes;
            this.token = token;
            this.cancels = cancels;
            this.deliver = deliver;
            this.internal = internal;
        }

        boolean grants() {
            return action == SessionWire.LOCK || action == SessionWire.TRY_LOCK;
        }
    }

    private <T> CompletableFuture<T> submit(int action, String key, long token, java.util.function.Supplier<LockingCenterException> onTimeout,
            Mapper<T> map) {
        return submit(action, key, token, onTimeout, map, null);
    }

    /**
     * Queues a call and returns its future. A future completed by anyone but the session (a
     * cancel, a timeout) gives the call up: a Lock is cancelled, a grant that comes anyway is
     * released by its token.
     */
    private <T> CompletableFuture<T> submit(int action, String key, long token,
            java.util.function.Supplier<LockingCenterException> onTimeout, Mapper<T> map, Duration timeout) {
        CompletableFuture<T> f = new CompletableFuture<>();
        byte[] k;
        try {
            k = SessionWire.keyBytes(action, key);
        } catch (InvalidRequestException e) {
            f.completeExceptionally(e);
            return f;
        }
        Call c = new Call(action, key, k, token, 0, o -> settle(f, map, o, key), null);
        mu.lock();
        try {
            if (failure != null) {
                c.finished = true;
                f.completeExceptionally(failure);
                return f;
            }
            c.seq = nextSeq++;
            queue.add(c);
            wake.signal();
        } finally {
            mu.unlock();
        }
        f.whenComplete((v, e) -> abandon(c));
        if (timeout != null && onTimeout != null) {
            try {
                ScheduledFuture<?> t = timer.schedule(() -> {
                    f.completeExceptionally(onTimeout.get());
                }, timeout.toNanos(), TimeUnit.NANOSECONDS);
                f.whenComplete((v, e) -> t.cancel(false));
            } catch (RejectedExecutionException e) {
                // the session ended meanwhile: the call fails with its end
            }
        }
        return f;
    }

    /** Hands an outcome to the caller's future; a grant nobody takes any more is released. */
    private <T> void settle(CompletableFuture<T> f, Mapper<T> map, Outcome o, String key) {
        T value;
        try {
            if (o.error != null) {
                throw o.error;
            }
            value = map.map(o);
        } catch (LockingCenterException e) {
            f.completeExceptionally(e);
            return;
        }
        if (!f.complete(value) && o.status == Wire.OK && o.token != 0 && (value instanceof SessionLock
                || value instanceof Optional<?>)) {
            giveBack(key, o.token); // the caller gave up as the grant came in
        }
    }

    /** Releases a grant no caller owns, by its token. */
    private void giveBack(String key, long token) {
        mu.lock();
        try {
            Long t = held.get(key);
            if (t != null && t == token) {
                forget(key);
            }
            if (failure == null) {
                queue.add(strayUnlock(new Stray(key, token)));
                wake.signal();
            }
        } finally {
            mu.unlock();
        }
    }

    /** The caller's future was completed: if the session has not finished the call, give it up. */
    private void abandon(Call c) {
        mu.lock();
        try {
            if (c.finished) {
                return;
            }
            c.finished = true;
            if (!c.sent && !c.reissue) {
                c.dropped = true; // nothing reached the server
                queue.remove(c);
                return;
            }
            c.gaveUp = true;
            // A reissue not yet sent gets its Cancel right after it (take).
            if (c.action == SessionWire.LOCK && c.sent) {
                queue.add(new Call(SessionWire.CANCEL, "", NO_KEY, 0, c.id, null, o -> { }));
                wake.signal();
            }
        } finally {
            mu.unlock();
        }
    }

    /** Hands c its outcome, once; mu is held. */
    private void complete(Call c, Outcome o) {
        if (c.internal != null) {
            c.internal.accept(o);
            return;
        }
        if (c.finished) {
            return;
        }
        c.finished = true;
        try {
            executor.execute(() -> c.deliver.accept(o));
        } catch (RejectedExecutionException e) {
            c.deliver.accept(o);
        }
    }

    /** The session's own Unlock of a stray grant; if its answer is lost too, it waits for the next resume. */
    private Call strayUnlock(Stray st) {
        return new Call(SessionWire.UNLOCK, st.key, Wire.keyBytes(st.key), st.token, 0, null, o -> {
            if (o.error instanceof DisconnectedException || o.error instanceof OutcomeUnknownException) {
                strays.add(st);
            } else if (o.error == null && o.status == Wire.OK) {
                LOG.log(System.Logger.Level.INFO, "session {0} released a stray grant of {1} (token {2})",
                        idHex(), Wire.quote(st.key), Long.toUnsignedString(o.token));
            }
        });
    }

    private SessionLock lockResult(String key, Outcome o) {
        switch (o.status) {
            case Wire.OK:
                return new SessionLock(this, key, o.token);
            case Wire.FAIL:
                mu.lock();
                try {
                    if (closing) {
                        throw new SessionClosedException("lock of key " + Wire.quote(key)
                                + " refused by the close of session " + idHex(), null);
                    }
                } finally {
                    mu.unlock();
                }
                throw new ResetWhileWaitingException(key);
            default:
                throw unexpected("lock", o.status);
        }
    }

    private UnreachableException noAnswer(String what, String key, boolean unknown) {
        String m = "no answer to the " + what + " " + Wire.quote(key) + " within " + requestTimeout.toMillis() + " ms";
        return unknown ? new OutcomeUnknownException(m + "; outcome unknown", null) : new UnreachableException(m, null);
    }

    private static LockingCenterException unexpected(String what, int status) {
        return new LockingCenterException("unexpected answer " + Wire.answer(status) + " to " + what);
    }

    /** Waits for a call's future in the caller's thread; an interrupt gives the call up. */
    private static <T> T await(CompletableFuture<T> f, String key) {
        try {
            return f.get();
        } catch (InterruptedException e) {
            LockInterruptedException why = new LockInterruptedException(key);
            if (!f.completeExceptionally(why)) {
                // The outcome came first: it stands (a grant is returned, not leaked). The future is
                // done, so get() returns at once whatever the interrupt flag.
                Thread.currentThread().interrupt();
                return await(f, key);
            }
            Thread.currentThread().interrupt();
            throw why;
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof LockingCenterException) {
                throw (LockingCenterException) c;
            }
            throw new LockingCenterException("session call failed", c);
        }
    }

    private static Duration positive(Duration timeout) {
        Objects.requireNonNull(timeout, "timeout");
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("timeout must be positive (use tryLock not to wait)");
        }
        return timeout;
    }

    // ---------------------------------------------------------------- connections

    /** A connection whose open was answered: the answer, and when the open was sent. */
    private record Opened(Socket socket, SessionWire.OpenAnswer answer, long sentAt) {}

    /**
     * One round over every address (every record of each name), in random order: connects, speaks
     * TLS when {@code tls} is given, sends the open and reads its answer, each attempt within
     * {@code attemptMillis} and before {@code deadline} (System.nanoTime(); 0: none). Returns the
     * first answer, whatever its status (the socket is closed unless it is '+'). A node that closes
     * without answering (a follower that knows no leader), fails the handshake or does not answer
     * in time is passed over; the last such failure is thrown when none answered.
     */
    private static Opened dialAny(List<String[]> endpoints, SSLContext tls, String serverName, byte[] frame,
            long attemptMillis, long deadline) throws IOException {
        List<InetSocketAddress[]> targets = new ArrayList<>(); // {address, unresolved name}
        IOException last = null;
        for (String[] hp : endpoints) {
            int port = Integer.parseInt(hp[1]);
            try {
                for (InetAddress ip : InetAddress.getAllByName(hp[0])) {
                    targets.add(new InetSocketAddress[] {new InetSocketAddress(ip, port),
                        InetSocketAddress.createUnresolved(hp[0], port)});
                }
            } catch (IOException e) {
                last = new IOException("cannot resolve " + hp[0] + ": " + e.getMessage(), e);
            }
        }
        if (targets.isEmpty()) {
            throw last != null ? last : new IOException("no address given");
        }
        Collections.shuffle(targets, ThreadLocalRandom.current()); // a cluster's clients spread over its nodes
        for (InetSocketAddress[] t : targets) {
            long limit = attemptMillis;
            if (deadline != 0) {
                limit = Math.min(limit, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()));
                if (limit <= 0) {
                    throw new SocketTimeoutException("the TTL passed while connecting");
                }
            }
            try {
                return dial(t[0], t[1].getHostString(), tls, serverName, frame, limit);
            } catch (IOException e) {
                last = new IOException(t[0] + ": " + e.getMessage(), e);
            }
        }
        throw last;
    }

    /** One attempt on one address, all within {@code limitMillis}. */
    private static Opened dial(InetSocketAddress target, String host, SSLContext tls, String serverName, byte[] frame,
            long limitMillis) throws IOException {
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(limitMillis);
        Socket s = new Socket();
        boolean ok = false;
        try {
            s.setTcpNoDelay(true);
            s.setKeepAlive(true);
            keepAliveTimes(s);
            s.connect(target, (int) Math.max(1, Math.min(Integer.MAX_VALUE, limitMillis)));
            s.setSoTimeout(millisLeft(end));
            if (tls != null) {
                String name = serverName != null ? serverName : host;
                SSLSocket t = (SSLSocket) tls.getSocketFactory().createSocket(s, name, target.getPort(), true);
                SSLParameters p = t.getSSLParameters();
                p.setEndpointIdentificationAlgorithm("HTTPS"); // the certificate must name the server
                if (!name.isEmpty() && !Character.isDigit(name.charAt(0)) && name.indexOf(':') < 0) {
                    p.setServerNames(List.of(new SNIHostName(name)));
                }
                t.setSSLParameters(p);
                s = t;
                t.startHandshake();
                s.setSoTimeout(millisLeft(end));
            }
            long sentAt = System.nanoTime();
            OutputStream o = s.getOutputStream();
            o.write(frame);
            o.flush();
            InputStream in = s.getInputStream();
            byte[] b = new byte[SessionWire.ANSWER_SIZE];
            int n = 0;
            while (n < b.length) {
                int r = in.read(b, n, b.length - n);
                if (r < 0) {
                    if (n >= 1 && b[0] == Wire.FAIL) {
                        return new Opened(null, new SessionWire.OpenAnswer(Wire.FAIL, 0, 0), sentAt);
                    }
                    throw new EOFException("the server closed the connection during the open");
                }
                n += r;
            }
            SessionWire.OpenAnswer a = SessionWire.openAnswer(b);
            if (a.status() != Wire.OK) {
                return new Opened(null, a, sentAt);
            }
            if (a.ttlMillis() == 0 || a.session() == 0) {
                throw new IOException("the server opened a session with ttl " + a.ttlMillis() + " ms, id " + a.session());
            }
            s.setSoTimeout(0); // between answers the connection may be silent for as long as Locks wait
            ok = true;
            return new Opened(s, a, sentAt);
        } finally {
            if (!ok) {
                s.close();
            }
        }
    }

    private static int millisLeft(long end) throws SocketTimeoutException {
        long ms = TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime());
        if (ms <= 0) {
            throw new SocketTimeoutException("attempt timed out");
        }
        return (int) Math.min(Integer.MAX_VALUE, ms);
    }

    /** TCP keepalive as the server sets it (15 s idle, 15 s between probes), where the JDK can. */
    private static void keepAliveTimes(Socket s) {
        try {
            s.setOption(jdk.net.ExtendedSocketOptions.TCP_KEEPIDLE, 15);
            s.setOption(jdk.net.ExtendedSocketOptions.TCP_KEEPINTERVAL, 15);
            s.setOption(jdk.net.ExtendedSocketOptions.TCP_KEEPCOUNT, 4);
        } catch (IOException | UnsupportedOperationException e) {
            // the platform's default keepalive times apply
        }
    }

    private byte[] openFrame(long resume) {
        return SessionWire.open(SessionWire.VERSION, 0, resume, source, auth);
    }

    /** The reader: serves a connection until it breaks, then resumes on a new one, until the end. */
    private void supervise(Socket first) {
        Socket conn = first;
        while (conn != null) {
            IOException cause = read(conn);
            mu.lock();
            try {
                if (failure != null) {
                    return;
                }
                if (closing && closeAnswered) {
                    finish(new SessionClosedException("session " + idHex() + " closed", null));
                    return;
                }
                socket = null;
                out = null;
                closeQuietly(conn);
                disconnected(cause);
            } finally {
                mu.unlock();
            }
            LOG.log(System.Logger.Level.INFO, "session {0} connection lost ({1}); resuming", idHex(), cause.toString());
            conn = resume();
        }
    }

    /** Reads answers and settles their calls until the connection fails; returns why. */
    private IOException read(Socket conn) {
        try {
            DataInputStream in = new DataInputStream(new BufferedInputStream(conn.getInputStream(), 64 * SessionWire.ANSWER_SIZE));
            byte[] b = new byte[SessionWire.ANSWER_SIZE];
            while (true) {
                in.readFully(b);
                mu.lock();
                try {
                    deliver(SessionWire.answer(b));
                    while (in.available() >= SessionWire.ANSWER_SIZE) { // what is already read, under one lock
                        in.readFully(b);
                        deliver(SessionWire.answer(b));
                    }
                } finally {
                    mu.unlock();
                }
            }
        } catch (IOException e) {
            return e;
        }
    }

    /** Settles the call an answer is for; mu is held. */
    private void deliver(SessionWire.Answer a) {
        Call c = pending.remove(a.id());
        if (c == null) {
            LOG.log(System.Logger.Level.DEBUG, "session {0}: answer for no pending request, id {1}", idHex(),
                    Integer.toUnsignedString(a.id()));
            return;
        }
        if (!queue.isEmpty()) {
            wake.signal(); // the writer may be holding requests back at the pending bound
        }
        if (c.sentAt - confirmed > 0) {
            confirmed = c.sentAt;
        }
        if (c == ping) {
            ping = null;
        }
        if (c.grants() && a.status() == Wire.OK) {
            if (c.gaveUp) {
                // The grant crossed the Cancel (or the caller's end): nobody owns it, so it goes back.
                queue.add(strayUnlock(new Stray(c.key, a.token())));
                wake.signal();
            } else {
                held.put(c.key, a.token());
                heldId.put(c.key, c.id);
                reserved.add(c.id);
            }
        }
        if (c.action == SessionWire.CLOSE && a.status() == Wire.OK) {
            closeAnswered = true;
        }
        complete(c, new Outcome(a.status(), a.token(), null));
    }

    /**
     * Sets aside the Locks and TryLocks that were waiting on the lost connection, to be reissued
     * with their ids after the resume, and fails the other calls; mu is held. A Lock or TryLock
     * whose caller had given up may have been granted: it becomes a stray, released after the
     * resume.
     */
    private void disconnected(IOException cause) {
        String why = "session " + idHex() + " connection lost before the answer: " + cause;
        List<Call> reissue = new ArrayList<>();
        for (Call c : pending.values()) {
            if (c.grants() && c.internal == null && !c.gaveUp) {
                // The server answers a grant it made for this request at once when the same id
                // comes again (Reissue), and otherwise carries the request out anew.
                c.sent = false;
                c.reissue = true;
                reserved.add(c.id);
                reissue.add(c);
                continue;
            }
            switch (c.action) {
                case SessionWire.LOCK:
                case SessionWire.TRY_LOCK:
                    strays.add(new Stray(c.key, 0));
                    complete(c, Outcome.failed(new DisconnectedException(why + "; nothing is held", cause)));
                    break;
                case SessionWire.UNLOCK:
                    if (c.internal == null) {
                        strays.add(new Stray(c.key, c.token));
                    }
                    complete(c, Outcome.failed(new OutcomeUnknownException(why + "; outcome unknown", cause)));
                    break;
                case SessionWire.RESET_BY_KEY:
                case SessionWire.RESET_BY_SOURCE:
                    complete(c, Outcome.failed(new OutcomeUnknownException(why + "; outcome unknown", cause)));
                    break;
                default:
                    complete(c, Outcome.failed(new DisconnectedException(why, cause)));
            }
        }
        pending.clear();
        ping = null;
        // Queued Cancels name Locks of the lost connection, now failed; a queued Ping is of no use.
        queue.removeIf(c -> c.action == SessionWire.CANCEL || c.action == SessionWire.PING);
        // The reissues go first, in the order they were made, so that they keep their place before
        // what was asked after them.
        reissue.sort(Comparator.comparingLong(c -> c.seq));
        for (int i = reissue.size() - 1; i >= 0; i--) {
            queue.addFirst(reissue.get(i));
        }
    }

    /** The program no longer holds key through this session; mu is held. */
    private void forget(String key) {
        held.remove(key);
        Integer old = heldId.remove(key);
        if (old != null) {
            reserved.remove(old);
        }
    }

    /**
     * Reconnects with a growing back-off until the server takes the session back, refuses it, or
     * the TTL has passed; null when the session ended.
     */
    private Socket resume() {
        long backoff = MIN_BACKOFF_NANOS;
        while (true) {
            long deadline;
            mu.lock();
            try {
                if (failure != null) {
                    return null;
                }
                deadline = confirmed + ttlNanos;
            } finally {
                mu.unlock();
            }
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                lose("its TTL (" + ttl.toMillis() + " ms) passed without a resume", null);
                return null;
            }
            try {
                Opened o = dialAny(endpoints, tls, serverName, openFrame(id), connectTimeout.toMillis(), deadline);
                if (o.answer.status() != Wire.OK) {
                    lose("the server refused to resume it (expired, ended from the web, or the server restarted without its log)", null);
                    return null;
                }
                mu.lock();
                try {
                    if (failure != null) {
                        closeQuietly(o.socket);
                        return null;
                    }
                    socket = o.socket;
                    out = o.socket.getOutputStream();
                    resumed(o.sentAt);
                    wake.signal();
                } finally {
                    mu.unlock();
                }
                LOG.log(System.Logger.Level.INFO, "session {0} resumed", idHex());
                return o.socket;
            } catch (IOException e) {
                LOG.log(System.Logger.Level.DEBUG, "session {0} resume failed: {1}", idHex(), e.toString());
            }
            long sleep = Math.min(backoff / 2 + ThreadLocalRandom.current().nextLong(backoff / 2 + 1),
                    Math.max(0, deadline - System.nanoTime()));
            try {
                if (ended.await(sleep, TimeUnit.NANOSECONDS)) {
                    return null;
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                lose("interrupted while resuming", e);
                return null;
            }
            backoff = Math.min(2 * backoff, MAX_BACKOFF_NANOS);
        }
    }

    private void lose(String why, Throwable cause) {
        mu.lock();
        try {
            finish(closing ? new SessionClosedException("session " + idHex() + " closed (" + why + ")", cause)
                    : new SessionLostException("session " + idHex() + " lost: " + why, cause));
        } finally {
            mu.unlock();
        }
    }

    /**
     * Restarts the TTL and puts the unlocks of the strays first in the queue, so that they reach
     * the server before any new request; mu is held.
     */
    private void resumed(long sentAt) {
        confirmed = sentAt;
        lastSent = sentAt;
        List<Call> head = new ArrayList<>();
        Set<String> unknown = new HashSet<>();
        for (Stray st : strays) {
            Long tok = held.get(st.key);
            if (tok != null && (st.token == 0 || st.token == tok)) {
                continue; // the program holds this key through the session: no stray can hold it
            }
            if (st.token == 0 && !unknown.add(st.key)) {
                continue;
            }
            head.add(strayUnlock(st));
        }
        strays.clear();
        for (int i = head.size() - 1; i >= 0; i--) {
            queue.addFirst(head.get(i));
        }
    }

    /** Ends the session with why (once): every call fails, the threads stop. mu is held. */
    private void finish(LockingCenterException why) {
        if (failure != null) {
            return;
        }
        failure = why;
        closeQuietly(socket);
        for (Call c : pending.values()) {
            complete(c, Outcome.failed(why));
        }
        pending.clear();
        for (Call c : queue) {
            if (!c.dropped) {
                complete(c, Outcome.failed(why));
            }
        }
        queue.clear();
        strays.clear();
        held.clear();
        heldId.clear();
        reserved.clear();
        wake.signalAll();
        ended.countDown();
        timer.shutdown();
        boolean lost = why instanceof SessionLostException;
        if (lost) {
            LOG.log(System.Logger.Level.WARNING, why.getMessage());
        }
        try {
            executor.execute(() -> endDone(lost, why));
        } catch (RejectedExecutionException e) {
            endDone(lost, why);
        }
    }

    private void endDone(boolean lost, LockingCenterException why) {
        done.end(lost ? why : null);
    }

    /** The writer: sends the queued requests, all that fit in one write, and the Pings. */
    private void writeLoop() {
        long pingEvery = Math.max(1, ttlNanos / 3);
        ByteBuffer buf = ByteBuffer.allocate(64 * 1024);
        while (true) {
            OutputStream o;
            Socket s;
            mu.lock();
            try {
                while (true) {
                    if (failure != null) {
                        return;
                    }
                    long now = System.nanoTime();
                    long wait;
                    if (socket != null) {
                        if (ping == null && (now - lastSent >= pingEvery || now - confirmed >= pingEvery)) {
                            ping = new Call(SessionWire.PING, "", NO_KEY, 0, 0, null, x -> { });
                            queue.add(ping);
                        }
                        take(buf, now);
                        if (buf.position() > 0) {
                            break;
                        }
                        // With a Ping out, its answer (or the timer's watch) wakes the writer.
                        wait = ping != null ? pingEvery : Math.min(lastSent, confirmed) + pingEvery - now;
                    } else {
                        wait = TimeUnit.SECONDS.toNanos(1);
                    }
                    try {
                        wake.awaitNanos(Math.max(wait, TimeUnit.MILLISECONDS.toNanos(1)));
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                o = out;
                s = socket;
            } finally {
                mu.unlock();
            }
            try {
                o.write(buf.array(), 0, buf.position());
                o.flush();
            } catch (IOException e) {
                closeQuietly(s); // the reader sees it and resumes
            }
            buf.clear();
        }
    }

    /**
     * Moves the queued calls the server may receive now into pending and writes their frames into
     * buf; mu is held. A call is held back while MAX_PENDING - 1 requests await their answer (the
     * last place is kept for a Ping, so that a session whose every request waits still keeps itself
     * alive); a Cancel is never pending.
     */
    private void take(ByteBuffer buf, long now) {
        boolean any = false;
        for (Iterator<Call> it = queue.iterator(); it.hasNext(); ) {
            Call c = it.next();
            if (c.dropped) {
                it.remove();
                continue;
            }
            int limit = c.action == SessionWire.PING ? MAX_PENDING : MAX_PENDING - 1;
            if (c.action != SessionWire.CANCEL && pending.size() >= limit) {
                continue;
            }
            if (buf.remaining() < MAX_FRAME + 14) { // a frame, and perhaps its Cancel
                break;
            }
            it.remove();
            c.sent = true;
            c.sentAt = now;
            any = true;
            if (c.action == SessionWire.CANCEL) {
                SessionWire.request(buf, SessionWire.CANCEL, c.cancels, 0, NO_KEY);
                continue;
            }
            int i;
            if (c.reissue) {
                reserved.remove(c.id);
            }
            if (c.reissue && !pending.containsKey(c.id)) {
                i = c.id;
            } else {
                i = nextId;
                while (pending.containsKey(i) || reserved.contains(i)) {
                    i++;
                }
                nextId = i + 1;
            }
            c.reissue = false;
            c.id = i;
            pending.put(i, c);
            if (c.action == SessionWire.UNLOCK && c.internal == null) {
                Long t = held.get(c.key);
                if (t != null && (c.token == 0 || c.token == t)) {
                    forget(c.key);
                }
            }
            SessionWire.request(buf, c.action, i, c.token, c.keyBytes);
            if (c.action == SessionWire.LOCK && c.gaveUp) {
                // A reissue whose caller gave up before it went out: withdrawn at once (a grant it
                // finds is given back when its '+' comes).
                SessionWire.request(buf, SessionWire.CANCEL, i, 0, NO_KEY);
            }
        }
        if (any) {
            lastSent = now;
        }
    }

    /** The timer's watch: a Ping unanswered for a third of the TTL means the connection is dead. */
    private void watchPing() {
        mu.lock();
        try {
            if (socket != null && ping != null && ping.sent && System.nanoTime() - ping.sentAt >= ttlNanos / 3) {
                LOG.log(System.Logger.Level.INFO, "session {0}: no answer to Ping for {1} ms; reconnecting", idHex(),
                        ttl.toMillis() / 3);
                closeQuietly(socket);
                ping = null;
            }
            wake.signal();
        } finally {
            mu.unlock();
        }
    }

    private static void closeQuietly(Socket s) {
        if (s == null) {
            return;
        }
        try {
            s.close();
        } catch (IOException e) {
            LOG.log(System.Logger.Level.DEBUG, "closing a session socket: {0}", e.toString());
        }
    }

    /** Builder of a {@link Session}. */
    public static final class Builder {
        private String address = "localhost:" + LockingCenter.DEFAULT_PORT;
        private List<String[]> endpoints = List.<String[]>of(new String[] {"localhost", String.valueOf(LockingCenter.DEFAULT_PORT)});
        private SSLContext tls;
        private String serverName;
        private String source = "";
        private String auth = "";
        private Duration ttl = Duration.ZERO;
        private Duration connectTimeout = Duration.ofSeconds(5);
        private Duration requestTimeout = Duration.ofSeconds(30);
        private Executor executor;

        private Builder() {}

        /**
         * Server address: "host:port", "host" (port 22119) or "[::1]:port"; or several, comma
         * separated ("a:22119,b:22119,c:22119", the nodes of a cluster). A name with several DNS
         * records counts as all of them. The session opens on any that answers, in random order, and
         * resumes through any of them.
         */
        public Builder address(String address) {
            if (address == null || address.isBlank()) {
                throw new IllegalArgumentException("address must not be empty");
            }
            return addresses(List.of(address.split(",")));
        }

        /** The servers to try, as {@link #address(String)} says; each "host:port" or "host". */
        public Builder addresses(List<String> addresses) {
            List<String[]> list = new ArrayList<>();
            for (String a : addresses) {
                if (a != null && !a.isBlank()) {
                    list.add(LockingCenter.splitAddress(a.trim()));
                }
            }
            if (list.isEmpty()) {
                throw new IllegalArgumentException("no address given");
            }
            this.endpoints = List.copyOf(list);
            this.address = String.join(",", addresses);
            return this;
        }

        /**
         * Speaks TLS with this context (a server started with TLS_CERT/TLS_KEY; with a client
         * certificate in it for TLS_CLIENT_CA). {@link Tls#context} makes one from PEM files. The
         * server's certificate must name the host dialled, or {@link #serverName(String)}.
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

        /** Name of the requester, 0..127 bytes; empty lets the server use the peer IP address. */
        public Builder source(String source) {
            this.source = source == null ? "" : source;
            Wire.sourceBytes(this.source);
            return this;
        }

        /** The server's AUTH_TOKEN (1..127 bytes), sent on the open and on every resume. */
        public Builder authToken(String token) {
            this.auth = token == null ? "" : token;
            SessionWire.authBytes(this.auth);
            return this;
        }

        /**
         * The TTL to ask for: the server clamps it to 1 s .. 10 min; zero (the default) asks for the
         * server's SESSION_TTL. The session's holds are released one TTL after the server last heard
         * from it.
         */
        public Builder ttl(Duration ttl) {
            Objects.requireNonNull(ttl, "ttl");
            if (ttl.isNegative()) {
                throw new IllegalArgumentException("ttl must not be negative");
            }
            this.ttl = ttl;
            return this;
        }

        /**
         * Time allowed for one attempt on one address: connect, TLS handshake and the open's answer
         * (default 5 s). {@link #open()} tries every address at least once, and goes round them
         * again with a back-off until this much time has passed.
         */
        public Builder connectTimeout(Duration timeout) {
            this.connectTimeout = positive(timeout);
            return this;
        }

        /**
         * Time allowed for the answer to a request that never waits (try-lock, unlock, resets; default
         * 30 s, as for the other calls of every Locking-Center client). A Lock waits as long as its own
         * timeout says.
         */
        public Builder requestTimeout(Duration timeout) {
            this.requestTimeout = positive(timeout);
            return this;
        }

        /**
         * The executor that completes the calls' futures (and so runs their non-async callbacks);
         * default {@link ForkJoinPool#commonPool()}. It must not run tasks in the calling thread.
         */
        public Builder executor(Executor executor) {
            this.executor = executor;
            return this;
        }

        /**
         * Opens the session.
         *
         * @throws UnreachableException no connection could be made, or it closed during the open
         * @throws RefusedException the server refused the session (wrong auth token, connection
         *     limit, a server without sessions)
         * @throws InvalidRequestException the source or auth token is longer than 127 bytes
         */
        public Session open() {
            long ms = ttl.toMillis();
            long ttlMillis = ttl.isZero() ? 0 : Math.min(0xffffffffL, Math.max(1, ms));
            byte[] frame = SessionWire.open(SessionWire.VERSION, ttlMillis, 0, source, auth);
            Opened o;
            long start = System.nanoTime();
            long backoff = MIN_BACKOFF_NANOS;
            while (true) {
                try {
                    o = dialAny(endpoints, tls, serverName, frame, connectTimeout.toMillis(), 0);
                    break;
                } catch (IOException e) {
                    long left = connectTimeout.toNanos() - (System.nanoTime() - start);
                    if (left <= 0) {
                        throw new UnreachableException("cannot open a session with " + address + ": " + e.getMessage(), e);
                    }
                    try {
                        Thread.sleep(TimeUnit.NANOSECONDS.toMillis(Math.min(left,
                                backoff / 2 + ThreadLocalRandom.current().nextLong(backoff / 2 + 1))) + 1);
                    } catch (InterruptedException ie) {
                        Thread.currentThread().interrupt();
                        throw new UnreachableException("interrupted while opening a session with " + address, ie);
                    }
                    backoff = Math.min(2 * backoff, MAX_BACKOFF_NANOS);
                }
            }
            if (o.answer.status() != Wire.OK) {
                throw new RefusedException("the server at " + address
                        + " refused the session (wrong auth token, connection limit, or no session support)");
            }
            try {
                return new Session(this, o);
            } catch (IOException e) {
                closeQuietly(o.socket);
                throw new UnreachableException("cannot use the session connection: " + e.getMessage(), e);
            }
        }
    }
}
