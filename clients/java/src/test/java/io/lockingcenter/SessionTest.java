package io.lockingcenter;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Sessions against real servers: the shared one at $LC_TEST_ADDRESS (JSON API at
 * $LC_TEST_WEB_ADDRESS), and servers of the test's own from $LC_SERVER_BIN for restarts and expiry.
 * Skipped when LC_TEST_ADDRESS is unset. Keys carry a random suffix: one server serves every suite.
 */
class SessionTest {
    private static final String RUN = UUID.randomUUID().toString().substring(0, 8);
    private static final String address = TestServer.SHARED;
    private static final String web = TestServer.SHARED_WEB;

    @BeforeEach
    void server() {
        Assumptions.assumeTrue(address != null && !address.isEmpty(), "LC_TEST_ADDRESS is not set");
    }

    private static String key(String name) {
        return "java-session-" + RUN + "-" + name;
    }

    private static Session open(String source) {
        return Session.builder().address(address).source(source).open();
    }

    private static void needOwnServer() {
        Assumptions.assumeTrue(TestServer.BIN != null && !TestServer.BIN.isEmpty(), "LC_SERVER_BIN is not set");
    }

    @Test
    void lockTryLockUnlockWithTokens() throws Exception {
        String k = key("basic");
        try (Session a = open("java-a"); Session b = open("java-b")) {
            try (SessionLock held = a.lock(k)) {
                assertTrue(held.token() > 0);
                assertEquals(Optional.empty(), b.tryLock(k), "# while a holds it");
                assertThrows(NotWonException.class, () -> b.tryLockOrThrow(k));
                JsonNode info = TestServer.keyInfo(web, k);
                assertEquals(held.token(), info.get("token").asLong());
                assertEquals(a.idHex(), info.get("session").asText());
                // b cannot release a's grant, whatever the token
                assertThrows(NotHeldException.class, () -> b.unlock(k, held.token()));
                assertThrows(NotHeldException.class, () -> b.unlock(k, 0));
            }
            TestServer.awaitKey(web, k, n -> n == null, "released");
        }
    }

    @Test
    void staleUnlockByTokenReleasesNothing() {
        String k = key("stale");
        try (Session a = open("java-a")) {
            SessionLock first = a.lock(k);
            first.unlock();
            SessionLock second = a.lock(k);
            assertTrue(second.token() > first.token());
            assertThrows(NotHeldException.class, () -> a.unlock(k, first.token()), "the old grant is gone");
            assertNotNull(TestServer.keyInfo(web, k), "the stale unlock released nothing");
            second.close();
        }
    }

    @Test
    void tokensStrictlyIncrease() {
        String k = key("tokens");
        try (Session a = open("java-a"); Session b = open("java-b")) {
            long last = 0;
            for (int i = 0; i < 20; i++) {
                Session s = i % 2 == 0 ? a : b;
                try (SessionLock held = s.lock(k)) {
                    assertTrue(Long.compareUnsigned(held.token(), last) > 0, "token " + held.token() + " after " + last);
                    last = held.token();
                }
            }
        }
    }

    @Test
    void fifoAcrossTwoSessions() throws Exception {
        String k = key("fifo");
        try (Session a = open("java-a"); Session b = open("java-b")) {
            SessionLock first = a.lock(k);
            List<String> order = new ArrayList<>();
            CompletableFuture<SessionLock> second = b.lockAsync(k);
            TestServer.awaitKey(web, k, n -> n != null && n.get("queue").size() == 1, "one waiter");
            CompletableFuture<SessionLock> third = a.lockAsync(k); // a waits behind b, and behind itself
            TestServer.awaitKey(web, k, n -> n != null && n.get("queue").size() == 2, "two waiters");
            second.thenRun(() -> order.add("b"));
            first.unlock();
            SessionLock s2 = second.get(5, TimeUnit.SECONDS);
            assertFalse(third.isDone(), "a's second Lock waits behind b");
            s2.unlock();
            SessionLock s3 = third.get(5, TimeUnit.SECONDS);
            assertEquals(List.of("b"), order);
            assertTrue(s2.token() > first.token() && s3.token() > s2.token());
            s3.unlock();
        }
    }

    @Test
    void timeoutAndCancelWithdrawTheWaiter() throws Exception {
        String k = key("cancel");
        try (Session a = open("java-a"); Session b = open("java-b")) {
            try (SessionLock held = a.lock(k)) {
                assertThrows(LockTimeoutException.class, () -> b.lock(k, Duration.ofMillis(300)));
                TestServer.awaitKey(web, k, n -> n != null && n.get("queue").size() == 0, "the timed-out waiter withdrawn");
                CompletableFuture<SessionLock> f = b.lockAsync(k);
                TestServer.awaitKey(web, k, n -> n != null && n.get("queue").size() == 1, "one waiter");
                assertTrue(f.cancel(true));
                TestServer.awaitKey(web, k, n -> n != null && n.get("queue").size() == 0, "the cancelled waiter withdrawn");
                // The session goes on: its other calls still work.
                assertTrue(b.tryLock(key("cancel-other")).orElseThrow().token() > held.token());
            }
        }
    }

    @Test
    void manyPendingLocksOnOneSessionHoldNoThreads() throws Exception {
        String k = key("many");
        try (Session a = open("java-a"); Session b = open("java-b")) {
            SessionLock held = a.lock(k);
            int before = Thread.activeCount();
            List<CompletableFuture<SessionLock>> waiting = new ArrayList<>();
            for (int i = 0; i < 200; i++) {
                waiting.add(b.lockAsync(k));
            }
            TestServer.awaitKey(web, k, n -> n != null && n.get("queue").size() == 200, "200 waiters");
            int during = Thread.activeCount();
            System.out.println("session: 200 pending lockAsync: threads " + before + " -> " + during);
            assertTrue(during - before <= 2, "threads grew from " + before + " to " + during);
            // Each grant is released as it comes: the 200 pass one after another, in order.
            long start = System.nanoTime();
            held.unlock();
            long last = held.token();
            for (CompletableFuture<SessionLock> f : waiting) {
                SessionLock l = f.get(10, TimeUnit.SECONDS);
                assertTrue(l.token() > last, "FIFO: tokens grow in the order of the Locks");
                last = l.token();
                l.unlock();
            }
            System.out.println("session: 200 hand-overs on one key in "
                    + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start) + " ms");
        }
    }

    @Test
    void killedHolderReleasesItsKeysWithinTheTtl() throws Exception {
        List<String> keys = List.of(key("kill-1"), key("kill-2"), key("kill-3"));
        long ttlMs = 2000;
        String cp = Path.of(Session.class.getProtectionDomain().getCodeSource().getLocation().toURI())
                + File.pathSeparator
                + Path.of(HoldMain.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", cp, HoldMain.class.getName(), address, Long.toString(ttlMs)));
        cmd.addAll(keys);
        Process child = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        try (Session s = open("java-waiter")) {
            BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
            assertEquals("held", out.readLine(), "the holder took its keys");
            List<CompletableFuture<SessionLock>> waiting = new ArrayList<>();
            for (String k : keys) {
                waiting.add(s.lockAsync(k));
            }
            for (String k : keys) {
                TestServer.awaitKey(web, k, n -> n != null && n.get("queue").size() == 1, "a waiter");
            }
            long killed = System.nanoTime();
            child.destroyForcibly(); // SIGKILL: no Close, no unlock
            child.waitFor();
            for (CompletableFuture<SessionLock> f : waiting) {
                f.get(ttlMs + 3000, TimeUnit.MILLISECONDS).close();
            }
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killed);
            System.out.println("session: keys of a SIGKILLed holder (TTL " + ttlMs + " ms) passed on after " + ms + " ms");
            assertTrue(ms <= ttlMs + 1000, "passed on after " + ms + " ms, TTL " + ttlMs + " ms");
        } finally {
            child.destroyForcibly();
        }
    }

    @Test
    void endedFromTheWebIsReportedAsLost() throws Exception {
        String k = key("ended");
        Session s = open("java-a");
        SessionLock held = s.lock(k);
        assertEquals(200, TestServer.post(web, "/api/v1/sessions/" + s.idHex() + "/end"));
        ExecutionException e = assertThrows(ExecutionException.class, () -> s.done().get(10, TimeUnit.SECONDS));
        assertInstanceOf(SessionLostException.class, e.getCause());
        assertFalse(s.isOpen());
        assertThrows(SessionLostException.class, held::check);
        assertThrows(SessionLostException.class, held::close, "the scoped form reports the loss");
        assertThrows(SessionLostException.class, () -> s.lock(k), "later calls fail");
        assertThrows(SessionLostException.class, s::close, "close reports it once");
        s.close();
    }

    @Test
    void resumesAfterAServerRestartWithDataPath() throws Exception {
        needOwnServer();
        Path dir = Files.createTempDirectory("lc-java-data");
        Map<String, String> env = Map.of("DATA_PATH", dir.resolve("wal").toString());
        TestServer first = TestServer.start(0, env);
        int port = Integer.parseInt(first.address.substring(first.address.lastIndexOf(':') + 1));
        String k = key("restart");
        try (Session s = Session.builder().address(first.address).source("java-r").ttl(Duration.ofSeconds(10)).open()) {
            SessionLock held = s.lock(k);
            first.close();
            try (TestServer second = TestServer.start(port, env)) {
                // The session resumes on its own; then its held key is still its own, same token.
                SessionLock other = s.lock(key("restart-other"), Duration.ofSeconds(10));
                JsonNode info = TestServer.keyInfo(second.web, k);
                assertNotNull(info, "the key stays held across the restart");
                assertEquals(held.token(), info.get("token").asLong());
                assertEquals(s.idHex(), info.get("session").asText());
                assertTrue(other.token() > held.token());
                held.close();
                other.close();
                assertTrue(s.isOpen());
            }
        } finally {
            first.close();
            try (var files = Files.list(dir)) {
                files.forEach(p -> p.toFile().delete());
            }
            Files.deleteIfExists(dir);
        }
    }

    @Test
    void sessionLostPastItsTtlIsReported() throws Exception {
        needOwnServer();
        TestServer server = TestServer.start(0, Map.of());
        String k = key("expiry");
        Session s = Session.builder().address(server.address).ttl(Duration.ofSeconds(1)).open();
        try {
            assertEquals(Duration.ofSeconds(1), s.ttl());
            SessionLock held = s.lock(k);
            long stopped = System.nanoTime();
            server.close(); // nothing to resume to: the TTL runs out
            ExecutionException e = assertThrows(ExecutionException.class, () -> s.done().get(5, TimeUnit.SECONDS));
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - stopped);
            System.out.println("session: loss reported " + ms + " ms after the server stopped (TTL 1000 ms)");
            assertInstanceOf(SessionLostException.class, e.getCause());
            assertTrue(ms <= 1500, "reported after " + ms + " ms");
            assertThrows(SessionLostException.class, held::close);
            assertThrows(SessionLostException.class, () -> s.tryLock(k));
        } finally {
            server.close();
            try {
                s.close();
            } catch (SessionLostException expected) {
                // reported above already
            }
        }
    }

    @Test
    void closeReleasesEveryHoldAndEndsTheThreads() throws Exception {
        String k = key("close");
        int before = Thread.activeCount();
        Session s = open("java-a");
        s.lock(k);
        s.lock(key("close-2"));
        s.close();
        assertTrue(s.done().isDone());
        assertEquals(null, TestServer.keyInfo(web, k), "Close released the key at once");
        assertThrows(SessionClosedException.class, () -> s.lock(k));
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (Thread.activeCount() > before && System.nanoTime() < deadline) {
            Thread.sleep(10); // the timer thread's end is not joined by close()
        }
        assertTrue(Thread.activeCount() <= before, "threads left after close: " + Thread.activeCount() + " > " + before);
    }
}
