package io.lockingcenter;

import java.io.IOException;
import java.net.Socket;
import java.net.SocketException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The cancellation handle of one request: it owns the request's socket so that another thread can
 * hang it up. Hanging up is how a waiter is withdrawn: the server sees the end of the stream and
 * drops it from the queue. Once connected the hang-up only closes the write side, so the worker
 * still reads an answer that crossed it (a grant to give back); the socket is closed after
 * {@link #HANG_UP_GRACE_MILLIS} if the server does not close it first.
 */
final class Call {
    /** How long a hung-up request may still read an answer already on its way. */
    static final int HANG_UP_GRACE_MILLIS = 2000;

    /** Guards socket and aborted. */
    private final Object mu = new Object();
    private Socket socket;
    private boolean aborted;

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

    /**
     * Marks the call aborted and hangs up its socket, from any thread. Idempotent. A connected socket
     * only has its write side shut; one that is not connected yet (shutdownOutput throws) is closed.
     * An abort after the connect but before the frame is written makes that write fail.
     */
    void abort() {
        Socket s;
        synchronized (mu) {
            if (aborted) {
                return;
            }
            aborted = true;
            s = socket;
        }
        if (s == null || s.isClosed()) {
            return;
        }
        try {
            s.shutdownOutput();
            CompletableFuture.delayedExecutor(HANG_UP_GRACE_MILLIS, TimeUnit.MILLISECONDS)
                    .execute(() -> close(s));
        } catch (IOException e) {
            // not connected, or already closed: close it
            close(s);
        }
    }

    /**
     * The TLS socket layered over the one {@link #open} made: an abort hangs it up instead, with
     * close_notify before the FIN.
     *
     * @throws SocketException the call was aborted already
     */
    void layered(Socket tls) throws SocketException {
        synchronized (mu) {
            if (aborted) {
                throw new SocketException("request cancelled");
            }
            socket = tls;
        }
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
