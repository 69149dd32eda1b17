package io.lockingcenter;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The session entries of the shared vectors, byte for byte: the codec on every entry, and the
 * frames the public API sends to a loopback stand-in that speaks the session protocol.
 */
class SessionVectorsTest {

    private static long u64(Object decimal) {
        return Long.parseUnsignedLong((String) decimal);
    }

    private static int num(Map<String, Object> v, String field) {
        return ((Number) v.get(field)).intValue();
    }

    @Test
    void sessionActionsAreTheProtocolNumbers() throws IOException {
        @SuppressWarnings("unchecked")
        Map<String, Object> a = (Map<String, Object>) Vectors.load().get("session_actions");
        assertEquals(SessionWire.OPEN, num(a, "open"));
        assertEquals(SessionWire.LOCK, num(a, "lock"));
        assertEquals(SessionWire.UNLOCK, num(a, "unlock"));
        assertEquals(SessionWire.RESET_BY_KEY, num(a, "reset_by_key"));
        assertEquals(SessionWire.RESET_BY_SOURCE, num(a, "reset_by_source"));
        assertEquals(SessionWire.TRY_LOCK, num(a, "trylock"));
        assertEquals(SessionWire.CANCEL, num(a, "cancel"));
        assertEquals(SessionWire.PING, num(a, "ping"));
        assertEquals(SessionWire.CLOSE, num(a, "close"));
    }

    @Test
    void opensEncodeByteForByte() throws IOException {
        List<Map<String, Object>> all = Vectors.list("session_open");
        assertTrue(all.size() >= 10);
        for (Map<String, Object> v : all) {
            long ttl = ((Number) v.get("ttl_ms")).longValue();
            byte[] got = SessionWire.open(num(v, "version"), ttl, u64(v.get("resume")), (String) v.get("source"),
                    (String) v.get("auth"));
            assertEquals(v.get("hex"), Vectors.hex(got), (String) v.get("name"));
        }
    }

    @Test
    void openAnswersDecode() throws IOException {
        for (Map<String, Object> v : Vectors.list("session_open_answers")) {
            SessionWire.OpenAnswer a = SessionWire.openAnswer(Vectors.hex((String) v.get("hex")));
            String name = (String) v.get("name");
            assertEquals(((String) v.get("status")).charAt(0), (char) a.status(), name);
            assertEquals(((Number) v.get("ttl_ms")).longValue(), a.ttlMillis(), name);
            assertEquals(u64(v.get("session")), a.session(), name);
        }
    }

    @Test
    void requestsEncodeByteForByte() throws IOException {
        for (Map<String, Object> v : Vectors.list("session_requests")) {
            int id = (int) ((Number) v.get("id")).longValue();
            byte[] got = SessionWire.request(num(v, "action"), id, u64(v.get("token")), (String) v.get("key"));
            assertEquals(v.get("hex"), Vectors.hex(got), (String) v.get("name"));
        }
    }

    @Test
    void answersDecode() throws IOException {
        for (Map<String, Object> v : Vectors.list("session_answers")) {
            SessionWire.Answer a = SessionWire.answer(Vectors.hex((String) v.get("hex")));
            String name = (String) v.get("name");
            assertEquals((int) ((Number) v.get("id")).longValue(), a.id(), name);
            assertEquals(((String) v.get("status")).charAt(0), (char) a.status(), name);
            assertEquals(u64(v.get("token")), a.token(), name);
        }
    }

    @Test
    void invalidRequestsAreRefusedBeforeSending() throws IOException {
        for (Map<String, Object> v : Vectors.list("session_invalid")) {
            assertThrows(InvalidRequestException.class, () -> SessionWire.request(num(v, "action"), num(v, "id"),
                    u64(v.get("token")), (String) v.get("key")), (String) v.get("name"));
        }
    }

    @Test
    void invalidOpensAreRefusedBeforeConnecting() throws IOException {
        for (Map<String, Object> v : Vectors.list("session_open_invalid")) {
            String name = (String) v.get("name");
            assertThrows(InvalidRequestException.class, () -> SessionWire.open(num(v, "version"),
                    ((Number) v.get("ttl_ms")).longValue(), u64(v.get("resume")), (String) v.get("source"),
                    (String) v.get("auth")), name);
            // Through the public API: refused by the builder, before any connection.
            assertThrows(InvalidRequestException.class, () -> Session.builder().address("127.0.0.1:" + Vectors.deadPort())
                    .source((String) v.get("source")).authToken((String) v.get("auth")).open(), name);
        }
    }

    @Test
    void originalFramesAreThePrefixOfTheFullFrames() throws IOException {
        // The client sends the full v1 frame; the original server's clients sent these shorter
        // forms. Unlock and ResetByKey: the full frame is the original one and an empty source field.
        // ResetBySource: the original [4][size][source] is the full frame without its empty key.
        for (Map<String, Object> v : Vectors.list("original_frames")) {
            String hex = (String) v.get("hex");
            Action action = Vectors.action(v);
            byte[] full = Wire.encode(action, (String) v.get("key"), (String) v.get("source"));
            String expected = action == Action.RESET_BY_SOURCE ? "0400" + hex.substring(2) : hex + "00";
            assertEquals(expected, Vectors.hex(full), (String) v.get("name"));
        }
    }

    /** A one-connection stand-in: answers the open, records each request, answers what the test queues. */
    private static final class FakeSessionServer implements AutoCloseable {
        final ServerSocket server = new ServerSocket(0, 5, InetAddress.getLoopbackAddress());
        final BlockingQueue<byte[]> opens = new LinkedBlockingQueue<>();
        final BlockingQueue<byte[]> requests = new LinkedBlockingQueue<>();
        volatile OutputStream out;
        final Thread thread = new Thread(this::serve, "fake-session-server");

        FakeSessionServer() throws IOException {
            thread.setDaemon(true);
            thread.start();
        }

        String address() {
            return "127.0.0.1:" + server.getLocalPort();
        }

        private void serve() {
            try (Socket c = server.accept()) {
                DataInputStream in = new DataInputStream(c.getInputStream());
                byte[] head = new byte[15];
                in.readFully(head);
                byte[] src = new byte[head[14]];
                in.readFully(src);
                int authSize = in.readByte();
                byte[] auth = new byte[authSize];
                in.readFully(auth);
                ByteBuffer open = ByteBuffer.allocate(16 + src.length + auth.length);
                open.put(head).put(src).put((byte) authSize).put(auth);
                opens.add(open.array());
                out = c.getOutputStream();
                out.write(Vectors.hex("2b000027100123456789abcdef"));
                while (true) {
                    byte[] h = new byte[14];
                    in.readFully(h);
                    byte[] k = new byte[h[13]];
                    in.readFully(k);
                    requests.add(ByteBuffer.allocate(14 + k.length).put(h).put(k).array());
                }
            } catch (IOException e) {
                // the client went away, or the test closed the server
            }
        }

        void answer(String hex) throws IOException {
            out.write(Vectors.hex(hex));
        }

        String next() throws InterruptedException {
            byte[] r = requests.poll(3, TimeUnit.SECONDS);
            return r == null ? "nothing" : Vectors.hex(r);
        }

        @Override
        public void close() throws IOException {
            server.close();
        }
    }

    @Test
    void theSessionSendsTheVectorsBytes() throws Exception {
        try (FakeSessionServer fake = new FakeSessionServer();
             Session s = Session.builder().address(fake.address()).ttl(Duration.ofSeconds(30)).source("svc-a").open()) {
            // "new session, TTL 30 s, with source"
            assertEquals("1001000075300000000000000000057376632d6100", Vectors.hex(fake.opens.take()));
            assertEquals(81985529216486895L, s.id());
            assertEquals("0123456789abcdef", s.idHex());
            assertEquals(Duration.ofSeconds(10), s.ttl());

            var lock = s.lockAsync("abc");
            assertEquals("0100000001000000000000000003616263", fake.next()); // "lock", id 1
            var tryLock = s.tryLockAsync("abc");
            assertEquals("0500000002000000000000000003616263", fake.next()); // "trylock", id 2
            fake.answer("00000002230000000000000000"); // # with token 0
            assertTrue(tryLock.get(3, TimeUnit.SECONDS).isEmpty());
            fake.answer("000000012b00062887831d0c35"); // lock granted, token 1733412345678901
            SessionLock held = lock.get(3, TimeUnit.SECONDS);
            assertEquals(1733412345678901L, held.token());

            var unlock = held.unlockAsync(); // id 2 is free again: the counter goes on at 3
            assertEquals("0200000003" + "00062887831d0c35" + "03616263", fake.next());
            fake.answer("000000032b00062887831d0c35");
            unlock.get(3, TimeUnit.SECONDS);

            var reset = s.resetBySourceAsync("svc-a");
            assertEquals("04000000040000000000000000057376632d61", fake.next());
            fake.answer("000000042b0000000000000000");
            reset.get(3, TimeUnit.SECONDS);

            // Cancel: a Lock given up sends Cancel with its id; the '-' then settles it.
            var waiting = s.lockAsync("abc", Duration.ofMillis(100));
            assertEquals("0100000005000000000000000003616263", fake.next());
            assertEquals("0600000005000000000000000000", fake.next());
            assertThrows(java.util.concurrent.ExecutionException.class, () -> waiting.get(3, TimeUnit.SECONDS));
            fake.answer("000000052d0000000000000000");

            // A grant that crossed the Cancel is unlocked by its token.
            var crossing = s.lockAsync("abc");
            assertEquals("0100000006000000000000000003616263", fake.next());
            crossing.cancel(true);
            assertEquals("0600000006000000000000000000", fake.next());
            fake.answer("000000062b8000000000000001"); // + with a token above 2^63
            assertEquals("0200000007" + "8000000000000001" + "03616263", fake.next());
            fake.answer("000000072b8000000000000001");

            // Close: answered '+', then the server closes.
            Thread closer = new Thread(s::close);
            closer.start();
            assertEquals("0800000008000000000000000000", fake.next());
            fake.answer("000000082b0000000000000000");
            fake.close();
            closer.join(5000);
            assertTrue(s.done().isDone());
        }
    }

    @Test
    void idleSessionSendsPing() throws Exception {
        try (FakeSessionServer fake = new FakeSessionServer();
             Session s = Session.builder().address(fake.address()).open()) {
            fake.opens.take();
            // TTL 10 s from the stand-in: a Ping after a third of it.
            long start = System.nanoTime();
            byte[] r = fake.requests.poll(6, TimeUnit.SECONDS);
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(r != null, "no Ping within 6 s");
            assertEquals("07", Vectors.hex(r).substring(0, 2), "the first request of an idle session is a Ping");
            assertEquals(14, r.length);
            assertTrue(ms >= 3000 && ms < 4500, "Ping after " + ms + " ms, TTL 10 s");
        }
    }
}
