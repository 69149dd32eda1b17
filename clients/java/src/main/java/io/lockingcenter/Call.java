package io.lockingcenter;

import java.io.IOException;
import java.net.Socket;
import java.net.SocketException;

/**
 * The cancellation handle of one request: it owns the request's socket so that another thread can
 * close it. Closing the socket is how a waiter is withdrawn: the server sees the hang-up and drops it
 * from the queue.
 */
final class Call {
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

    /** Marks the call aborted and closes its socket, from any thread. Idempotent. */
    void abort() {
        Socket s;
        synchronized (mu) {
            aborted = true;
            s = socket;
        }
        if (s != null) {
            try {
                s.close();
            } catch (IOException ignored) {
                // closing is best effort; the socket is unusable either way
            }
        }
    }

    boolean isAborted() {
        synchronized (mu) {
            return aborted;
        }
    }
}
