package io.lockingcenter;

import java.io.IOException;
import java.net.Socket;
import java.net.SocketException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The cancellation handle of one request: it owns the request's socket so that another thread can
 * hang it up. Hanging up is how a waiter is withdrawn: the server sees the end of the stream and
 * drops it from the queue. Once the frame is on its way the hang-up only closes the write side, so
 * the worker still reads an answer that crossed it (a grant to give back); the socket is closed
 * after {@link #HANG_UP_GRACE_MILLIS} if the server does not close it first.
 */
final class Call {
    /** How long a hung-up request may still read an answer already on its way. */
    static final int HANG_UP_GRACE_MILLIS = 2000;

    private final Object mu = new Object();
    private Socket socket;
    private boolean aborted;
    private boolean sent;

    /** Creates the request's socket, unless the call was already aborted. */
    Socket open() throws IOException {
        synchronized (mu) {
            if (aborted) {
                throw new SocketException("request cancelled");
            }
            socket = new Socket();
            return socket;
        }
    }

    /** Called just before the frame is written: from now on an abort half-closes instead of closing. */
    void sending() throws IOException {
        synchronized (mu) {
            if (aborted) {
                throw new SocketException("request cancelled");
            }
            sent = true;
        }
    }

    /** Marks the call aborted and hangs up its socket, from any thread. Idempotent. */
    void abort() {
        Socket s;
        boolean hangUp;
        synchronized (mu) {
            if (aborted) {
                return;
            }
            aborted = true;
            s = socket;
            hangUp = sent;
        }
        if (s == null || s.isClosed()) {
            return;
        }
        if (hangUp) {
            try {
                s.shutdownOutput();
                CompletableFuture.delayedExecutor(HANG_UP_GRACE_MILLIS, TimeUnit.MILLISECONDS)
                        .execute(() -> close(s));
                return;
            } catch (IOException e) {
                // not connected or already shut: close it
            }
        }
        close(s);
    }

    boolean isAborted() {
        synchronized (mu) {
            return aborted;
        }
    }

    private static void close(Socket s) {
        try {
            s.close();
        } catch (IOException ignored) {
            // closing is best effort; the socket is unusable either way
        }
    }
}
