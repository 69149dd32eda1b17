package io.lockingcenter;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * A session against a scripted stand-in server: after a dropped connection the pending Lock is
 * reissued with its old id, and a reset whose answer was lost is reported as not known and never
 * sent again.
 */
class SessionReissueTest {
    private record Request(int action, int id, String key) {}

    /** Reads the open frame and answers '+', TTL 10 s, session 7; returns the resume field. */
    private static long acceptOpen(Socket s) throws IOException {
        s.setSoTimeout(10000);
        DataInputStream in = new DataInputStream(s.getInputStream());
        assertEquals(16, in.readUnsignedByte());
        in.readUnsignedByte();
        in.readInt();
        long resume = in.readLong();
        in.skipNBytes(in.readUnsignedByte());
        in.skipNBytes(in.readUnsignedByte());
        DataOutputStream out = new DataOutputStream(s.getOutputStream());
        out.writeByte('+');
        out.writeInt(10000);
        out.writeLong(7);
        out.flush();
        return resume;
    }

    private static Request request(Socket s) throws IOException {
        DataInputStream in = new DataInputStream(s.getInputStream());
        int action = in.readUnsignedByte();
        int id = in.readInt();
        in.readLong();
        byte[] key = in.readNBytes(in.readUnsignedByte());
        return new Request(action, id, new String(key, StandardCharsets.UTF_8));
    }

    private static void answer(Socket s, int id, int status, long token) throws IOException {
        DataOutputStream out = new DataOutputStream(s.getOutputStream());
        out.writeInt(id);
        out.writeByte(status);
        out.writeLong(token);
        out.flush();
    }

    @Test
    void aPendingLockIsReissuedWithItsIdAndALostResetIsNotResent() throws Exception {
        try (ServerSocket l = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            CompletableFuture<Void> server = CompletableFuture.runAsync(() -> {
                try {
                    Integer lockId = null;
                    boolean reset = false;
                    try (Socket s = l.accept()) {
                        assertEquals(0, acceptOpen(s));
                        while (lockId == null || !reset) {
                            Request r = request(s);
                            if (r.action == 1 && r.key.equals("k")) {
                                lockId = r.id;
                            } else if (r.action == 3 && r.key.equals("r")) {
                                reset = true;
                            } else if (r.action == 7) {
                                answer(s, r.id, '+', 0);
                            } else {
                                throw new AssertionError("unexpected " + r);
                            }
                        }
                    } // the grant is made, its answer lost with the connection
                    try (Socket s = l.accept()) {
                        assertEquals(7, acceptOpen(s), "a resume of the session");
                        while (true) {
                            Request r = request(s);
                            if (r.action == 1 && r.key.equals("k")) {
                                assertEquals(lockId, r.id, "reissued with its old id");
                                answer(s, r.id, '+', 42);
                            } else if (r.action == 2 && r.key.equals("k")) {
                                answer(s, r.id, '+', 42); // the test's release
                            } else if (r.action == 8) {
                                answer(s, r.id, '+', 0);
                                return;
                            } else if (r.action == 7) {
                                answer(s, r.id, '+', 0);
                            } else {
                                throw new AssertionError("sent again blindly, or unexpected: " + r);
                            }
                        }
                    }
                } catch (IOException e) {
                    throw new RuntimeException(e);
                }
            });
            try (Session s = Session.builder().address("127.0.0.1:" + l.getLocalPort()).open()) {
                CompletableFuture<SessionLock> lock = s.lockAsync("k");
                LockingCenterException e = assertThrows(LockingCenterException.class, () -> s.resetByKey("r"));
                assertInstanceOf(OutcomeUnknownException.class, e);
                try (SessionLock held = lock.get(10, TimeUnit.SECONDS)) {
                    assertEquals(42, held.token());
                }
            }
            server.get(10, TimeUnit.SECONDS);
        }
    }
}
