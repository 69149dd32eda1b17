package io.lockingcenter;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * A loopback stand-in for the server: it reads one whole frame per connection, records it, then
 * answers what the responder returns (a byte), closes without answering (CLOSE), keeps the
 * connection open until the client hangs up (HOLD), or waits for the hang-up and only then answers
 * '+' (GRANT_AFTER_HANG_UP: a grant that crossed the client's hang-up on the wire), or reads the
 * hang-up and then stays silent without closing for SILENCE_MILLIS (SILENT_AFTER_HANG_UP).
 * Connections are served one at a time.
 */
final class FakeServer implements AutoCloseable {
    static final int CLOSE = -1;
    static final int HOLD = -2;
    static final int GRANT_AFTER_HANG_UP = -3;
    static final int SILENT_AFTER_HANG_UP = -4;
    /** How long SILENT_AFTER_HANG_UP keeps the connection open after the hang-up: past Call.HANG_UP_GRACE_MILLIS. */
    static final int SILENCE_MILLIS = 5000;
    /** How long after the hang-up GRANT_AFTER_HANG_UP sends its '+': well within Call.HANG_UP_GRACE_MILLIS. */
    static final int GRANT_DELAY_MILLIS = 200;

    final List<byte[]> frames = new CopyOnWriteArrayList<>();
    /** Set when the client closed its side after the frame, before any answer. */
    final List<Boolean> halfClosedEarly = new CopyOnWriteArrayList<>();
    final CountDownLatch hangUp = new CountDownLatch(1);
    final CountDownLatch received = new CountDownLatch(1);

    private final ServerSocket server;
    private final Function<byte[], Integer> responder;
    private final Thread thread;

    FakeServer(Function<byte[], Integer> responder) throws IOException {
        this.responder = responder;
        this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        this.thread = new Thread(this::serve, "fake-server");
        this.thread.setDaemon(true);
        this.thread.start();
    }

    String address() {
        return "127.0.0.1:" + server.getLocalPort();
    }

    private void serve() {
        while (!server.isClosed()) {
            try (Socket c = server.accept()) {
                handle(c);
            } catch (IOException e) {
                // accept failed because we are closing, or the client went away
            }
        }
    }

    private void handle(Socket c) throws IOException {
        c.setSoTimeout(5000);
        InputStream in = c.getInputStream();
        ByteArrayOutputStream frame = new ByteArrayOutputStream();
        int action = in.read();
        int keySize = in.read();
        frame.write(action);
        frame.write(keySize);
        frame.write(in.readNBytes(keySize));
        int sourceSize = in.read();
        frame.write(sourceSize);
        frame.write(in.readNBytes(sourceSize));
        byte[] f = frame.toByteArray();
        synchronized (frames) {
            frames.add(f);
            frames.notifyAll();
        }
        // The client must keep its write side open until it has the answer.
        c.setSoTimeout(50);
        boolean eof;
        try {
            eof = in.read() < 0;
        } catch (SocketTimeoutException e) {
            eof = false;
        }
        halfClosedEarly.add(eof);
        received.countDown();
        int answer = responder.apply(f);
        if (answer == CLOSE) {
            return;
        }
        if (answer == GRANT_AFTER_HANG_UP) {
            c.setSoTimeout(10_000);
            if (in.read() < 0) {
                hangUp.countDown();
                // The grant was on the wire when the client hung up; it lands a little later, once a
                // client that simply closed its socket is certainly gone (one that only closed its
                // write side still reads it).
                try {
                    Thread.sleep(GRANT_DELAY_MILLIS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
                c.getOutputStream().write('+');
            }
            return;
        }
        if (answer == SILENT_AFTER_HANG_UP) {
            c.setSoTimeout(10_000);
            if (in.read() < 0) {
                hangUp.countDown();
                try {
                    Thread.sleep(SILENCE_MILLIS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return;
        }
        if (answer == HOLD) {
            c.setSoTimeout(10_000);
            try {
                if (in.read() < 0) {
                    hangUp.countDown();
                }
            } catch (SocketTimeoutException e) {
                // the client stayed connected
            } catch (IOException e) {
                hangUp.countDown();
            }
            return;
        }
        c.getOutputStream().write(answer);
    }

    /** Waits until {@code n} frames have been received; false if that took longer than {@code millis}. */
    boolean awaitFrames(int n, long millis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        synchronized (frames) {
            while (frames.size() < n) {
                long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
                if (left <= 0) {
                    return false;
                }
                frames.wait(left);
            }
            return true;
        }
    }

    @Override
    public void close() throws IOException {
        server.close();
    }
}
