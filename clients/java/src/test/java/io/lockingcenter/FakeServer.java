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
import java.util.function.Function;

/**
 * A loopback stand-in for the server: it reads one whole frame per connection, records it, then
 * answers what the responder returns (a byte), closes without answering (CLOSE), or keeps the
 * connection open until the client hangs up (HOLD).
 */
final class FakeServer implements AutoCloseable {
    static final int CLOSE = -1;
    static final int HOLD = -2;

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
        frames.add(f);
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

    @Override
    public void close() throws IOException {
        server.close();
    }
}
