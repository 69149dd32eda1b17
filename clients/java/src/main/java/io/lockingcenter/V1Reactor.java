package io.lockingcenter;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Runs the asynchronous v1 requests of one {@link LockingCenter}: every request's connection is a
 * non-blocking channel on one selector, served by one thread, so a thousand waiting
 * {@code lockAsync} calls are a thousand sockets and one thread. The thread starts with the first
 * request and ends as soon as no request is left (a v1 client has nothing to close).
 *
 * <p>Each request connects, writes its whole frame, and reads the one-byte answer. Giving up
 * after the frame was sent (a timeout, or the caller completing the future) hangs up: the write side
 * is shut, so the server withdraws the waiter, and the channel is read for
 * {@link Call#HANG_UP_GRACE_MILLIS} more; a '+' that crossed the hang-up is handed to
 * {@link Op#grantAfterGiveUp}, which unlocks the key.
 */
final class V1Reactor {
    private static final System.Logger LOG = System.getLogger(V1Reactor.class.getName());
    private static final long NO_DEADLINE = Long.MAX_VALUE;

    /** Guards thread, selector and inbox. */
    private final Object mu = new Object();
    private Thread thread;
    private Selector selector;
    /** New requests and aborts for the thread to take. */
    private final ArrayDeque<Runnable> inbox = new ArrayDeque<>();
    private final String name;

    V1Reactor(String name) {
        this.name = name;
    }

    /** What a request does with its outcome; the callbacks run on the reactor thread and must not block. */
    interface Handler {
        /** The answer byte arrived. */
        void answer(int b);

        /** The request failed before an answer. */
        void failed(LockingCenterException e);

        /** A '+' arrived after the request was given up: nobody owns the grant. */
        void grantAfterGiveUp();
    }

    /** One v1 request; its fields other than {@link #claimed} are the reactor thread's. */
    static final class Op {
        /** The addresses to try, in order, until one takes the connection. */
        final List<InetSocketAddress> targets;
        /** The address being tried; the reactor thread's. */
        InetSocketAddress target;
        /** How many of targets were tried. */
        int tried;
        final byte[] frame;
        final boolean withdrawable;
        final long connectNanos;
        /** System.nanoTime() after which the request gives up, or NO_DEADLINE. */
        final long deadline;
        /** The error of a passed deadline. */
        final java.util.function.Supplier<LockingCenterException> onDeadline;
        final Handler handler;
        /** Set once by whoever settles the request first: its answer, or the caller's giving up. */
        final AtomicBoolean claimed = new AtomicBoolean();

        SocketChannel channel;
        ByteBuffer out;
        long connectDeadline;
        boolean connected;
        boolean hungUp;
        long graceDeadline;

        Op(List<InetSocketAddress> targets, byte[] frame, boolean withdrawable, long connectNanos, long deadline,
                java.util.function.Supplier<LockingCenterException> onDeadline, Handler handler) {
            this.targets = List.copyOf(targets);
            this.target = targets.get(0);
            this.frame = frame;
            this.withdrawable = withdrawable;
            this.connectNanos = connectNanos;
            this.deadline = deadline;
            this.onDeadline = onDeadline;
            this.handler = handler;
        }

        /** Claims the outcome for its handler; false when the caller gave up first. */
        boolean claim() {
            return claimed.compareAndSet(false, true);
        }
    }

    /** Starts a request. */
    void start(Op op) {
        post(() -> begin(op));
    }

    /** The caller gave up op (it claimed it): withdraw it. */
    void abandon(Op op) {
        post(() -> giveUp(op));
    }

    private void post(Runnable r) {
        synchronized (mu) {
            inbox.add(r);
            if (thread == null) {
                try {
                    selector = Selector.open();
                } catch (IOException e) {
                    inbox.clear();
                    throw new UnreachableException("cannot open a selector: " + e.getMessage(), e);
                }
                Selector sel = selector;
                thread = new Thread(() -> loop(sel), name);
                thread.setDaemon(true);
                thread.start();
            } else {
                selector.wakeup();
            }
        }
    }

    /** Whether no request is in progress (the thread has ended or is ending): for tests. */
    boolean idle() {
        synchronized (mu) {
            return thread == null;
        }
    }

    /** The thread this reactor runs on while requests are in progress, or null: for tests. */
    Thread thread() {
        synchronized (mu) {
            return thread;
        }
    }

    private final Set<Op> ops = new HashSet<>();
    private Selector sel;

    private void loop(Selector s) {
        sel = s;
        List<Runnable> batch = new ArrayList<>();
        while (true) {
            synchronized (mu) {
                batch.addAll(inbox);
                inbox.clear();
                if (batch.isEmpty() && ops.isEmpty()) {
                    thread = null;
                    selector = null;
                    try {
                        s.close();
                    } catch (IOException e) {
                        LOG.log(System.Logger.Level.DEBUG, "closing the selector: {0}", e.toString());
                    }
                    return;
                }
            }
            for (Runnable r : batch) {
                r.run();
            }
            batch.clear();
            long now = System.nanoTime();
            long next = NO_DEADLINE;
            for (Op op : new ArrayList<>(ops)) {
                long d = deadlineOf(op);
                if (d - now <= 0) {
                    expire(op);
                } else if (d < next) {
                    next = d;
                }
            }
            if (ops.isEmpty()) {
                continue;
            }
            try {
                long wait = next == NO_DEADLINE ? 0 : Math.max(1, TimeUnit.NANOSECONDS.toMillis(next - System.nanoTime()) + 1);
                s.select(wait);
            } catch (IOException e) {
                LOG.log(System.Logger.Level.WARNING, "selector failed: {0}", e.toString());
            }
            for (SelectionKey k : s.selectedKeys()) {
                Op op = (Op) k.attachment();
                if (k.isValid() && ops.contains(op)) {
                    ready(op, k);
                }
            }
            s.selectedKeys().clear();
        }
    }

    private static long deadlineOf(Op op) {
        if (op.hungUp) {
            return op.graceDeadline;
        }
        if (!op.connected) {
            return Math.min(op.connectDeadline, op.deadline);
        }
        return op.deadline;
    }

    private void begin(Op op) {
        if (op.claimed.get()) {
            return; // given up before it started: nothing was sent
        }
        op.target = op.targets.get(op.tried++);
        op.connectDeadline = System.nanoTime() + op.connectNanos;
        try {
            SocketChannel ch = SocketChannel.open();
            op.channel = ch;
            ch.configureBlocking(false);
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            op.out = ByteBuffer.wrap(op.frame);
            ops.add(op);
            if (ch.connect(op.target)) {
                connected(op);
            } else {
                ch.register(sel, SelectionKey.OP_CONNECT, op);
            }
        } catch (IOException e) {
            connectFailed(op, new UnreachableException("cannot connect to " + op.target + ": " + e.getMessage(), e));
        }
    }

    /**
     * The connection to op's address failed before anything was sent: try the next address, or
     * fail op when none is left.
     */
    private void connectFailed(Op op, LockingCenterException e) {
        if (op.tried >= op.targets.size() || op.claimed.get()) {
            fail(op, e);
            return;
        }
        end(op);
        op.channel = null;
        begin(op);
    }

    private void connected(Op op) throws IOException {
        op.connected = true;
        op.channel.write(op.out);
        op.channel.register(sel, op.out.hasRemaining() ? SelectionKey.OP_WRITE : SelectionKey.OP_READ, op);
    }

    private void ready(Op op, SelectionKey k) {
        try {
            if (k.isConnectable()) {
                op.channel.finishConnect();
                connected(op);
                return;
            }
            if (k.isWritable()) {
                op.channel.write(op.out);
                if (!op.out.hasRemaining()) {
                    k.interestOps(SelectionKey.OP_READ);
                }
                return;
            }
            if (k.isReadable()) {
                ByteBuffer one = ByteBuffer.allocate(1);
                int n = op.channel.read(one);
                if (n == 0) {
                    return;
                }
                int b = n < 0 ? -1 : one.get(0) & 0xff;
                if (op.hungUp) {
                    end(op);
                    if (b == Wire.OK) {
                        op.handler.grantAfterGiveUp();
                    }
                    return;
                }
                if (b < 0) {
                    fail(op, new UnreachableException("server at " + op.target
                            + " closed the connection without an answer", null));
                    return;
                }
                end(op);
                if (op.claim()) {
                    op.handler.answer(b);
                } else if (b == Wire.OK && op.withdrawable) {
                    op.handler.grantAfterGiveUp(); // the caller gave up as the grant came in
                }
            }
        } catch (IOException e) {
            UnreachableException why = new UnreachableException("connection to " + op.target + " failed: " + e.getMessage(), e);
            if (!op.connected) {
                connectFailed(op, why); // nothing was sent: the next address may take it
            } else {
                fail(op, why);
            }
        }
    }

    /** A deadline passed: of the connect, of the request, or of the hang-up's grace. */
    private void expire(Op op) {
        if (op.hungUp) {
            end(op); // nothing crossed the hang-up
            return;
        }
        if (!op.connected && op.connectDeadline - op.deadline <= 0) {
            connectFailed(op, new UnreachableException("connect to " + op.target + " timed out after "
                    + TimeUnit.NANOSECONDS.toMillis(op.connectNanos) + " ms", null));
            return;
        }
        boolean mine = op.claim();
        giveUp(op);
        if (mine) {
            op.handler.failed(op.onDeadline.get());
        }
    }

    /** Withdraws op: hang up if its frame was sent (and may wait), close otherwise. */
    private void giveUp(Op op) {
        if (!ops.contains(op) || op.hungUp) {
            return;
        }
        if (op.withdrawable && op.connected && !op.out.hasRemaining()) {
            try {
                op.channel.shutdownOutput();
                op.hungUp = true;
                op.graceDeadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(Call.HANG_UP_GRACE_MILLIS);
                return;
            } catch (IOException e) {
                // already broken: close it
            }
        }
        end(op);
    }

    private void fail(Op op, LockingCenterException e) {
        end(op);
        if (op.claim()) {
            op.handler.failed(e);
        }
    }

    private void end(Op op) {
        ops.remove(op);
        if (op.channel != null) {
            try {
                op.channel.close();
            } catch (IOException e) {
                LOG.log(System.Logger.Level.DEBUG, "closing a request channel: {0}", e.toString());
            }
        }
    }
}
