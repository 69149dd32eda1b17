package io.lockingcenter;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Conformance against the real server at $LC_TEST_ADDRESS (JSON API at $LC_TEST_WEB_ADDRESS). Skipped
 * when LC_TEST_ADDRESS is unset. Keys carry a random suffix: one server serves every client's suite.
 */
class ConformanceTest {
    private static final String address = System.getenv("LC_TEST_ADDRESS");
    private static final String web = System.getenv("LC_TEST_WEB_ADDRESS");
    private static final String RUN = UUID.randomUUID().toString().substring(0, 8);

    @BeforeEach
    void server() {
        Assumptions.assumeTrue(address != null && !address.isEmpty(), "LC_TEST_ADDRESS is not set");
    }

    private static String key(String name) {
        return "java-" + RUN + "-" + name;
    }

    private static LockingCenter client(String source) {
        return new LockingCenter(address, source);
    }

    @Test
    void lockThenUnlock() {
        LockingCenter lc = client("java-a");
        String k = key("lock-unlock");
        HeldLock held = lc.lock(k);
        assertEquals(k, held.key());
        lc.unlock(k);
        assertThrows(RefusedException.class, () -> lc.unlock(k), "second unlock of a free key");
    }

    @Test
    void tryLockOnAHeldKeyIsNotWon() {
        LockingCenter a = client("java-a");
        LockingCenter b = client("java-b");
        String k = key("trylock");
        try (HeldLock held = a.lock(k)) {
            assertFalse(b.tryLock(k));
            NotWonException e = assertThrows(NotWonException.class, () -> b.tryLockOrThrow(k));
            assertEquals(k, e.key());
        }
        assertFree(b, k);
    }

    @Test
    void scopedLockReleasesTheKey() {
        LockingCenter lc = client("java-a");
        String k = key("scoped");
        try (var held = lc.lock(k)) {
            assertFalse(lc.tryLock(k));
        }
        try (var held = lc.tryLockOrThrow(k)) {
            assertEquals(k, held.key());
        }
        assertFree(lc, k);
    }

    @Test
    void waitersAreServedInFifoOrder() throws Exception {
        LockingCenter lc = client("java-fifo");
        String k = key("fifo");
        HeldLock first = lc.lock(k);
        CompletableFuture<HeldLock> second = lc.lockAsync(k);
        settle(k, 1);
        CompletableFuture<HeldLock> third = lc.lockAsync(k);
        settle(k, 2);
        assertFalse(second.isDone());
        assertFalse(third.isDone());

        first.unlock();
        HeldLock got2 = second.get(5, TimeUnit.SECONDS);
        Thread.sleep(100);
        assertFalse(third.isDone(), "third was granted while second held the key");
        got2.unlock();
        HeldLock got3 = third.get(5, TimeUnit.SECONDS);
        got3.close();
        assertFree(lc, k);
    }

    @Test
    void timeoutWithdrawsTheWaiter() throws Exception {
        LockingCenter lc = client("java-timeout");
        String k = key("timeout");
        try (HeldLock held = lc.lock(k)) {
            assertThrows(LockTimeoutException.class, () -> lc.lock(k, Duration.ofMillis(300)));
            assertQueueEmpties(k);
        }
        // The withdrawn waiter was not granted the key on release.
        assertFree(lc, k);
    }

    @Test
    void cancellationWithdrawsTheWaiter() throws Exception {
        LockingCenter lc = client("java-cancel");
        String k = key("cancel");
        try (HeldLock held = lc.lock(k)) {
            CompletableFuture<HeldLock> waiting = lc.lockAsync(k);
            settle(k, 1);
            assertTrue(waiting.cancel(true));
            assertQueueEmpties(k);
        }
        assertFree(lc, k);
    }

    @Test
    void resetWhileWaitingRaisesTheResetError() throws Exception {
        LockingCenter lc = client("java-reset");
        String k = key("reset");
        lc.lock(k);
        CompletableFuture<HeldLock> waiting = lc.lockAsync(k);
        settle(k, 1);
        lc.resetByKey(k);
        ExecutionException e = assertThrows(ExecutionException.class, () -> waiting.get(5, TimeUnit.SECONDS));
        assertInstanceOf(ResetWhileWaitingException.class, e.getCause());
        assertFree(lc, k);
        lc.resetByKey(k); // idempotent
    }

    @Test
    void resetBySourceReleasesItsKeys() {
        String source = "java-src-" + RUN;
        LockingCenter owner = client(source);
        LockingCenter other = client("java-other");
        String k1 = key("by-source-1");
        String k2 = key("by-source-2");
        owner.lock(k1);
        owner.lock(k2);
        other.resetBySource(source);
        assertFree(other, k1);
        assertFree(other, k2);
    }

    @Test
    void waitForWaitsForItsTurnAndLeavesTheKeyFree() throws Exception {
        LockingCenter lc = client("java-wait");
        String k = key("wait");
        HeldLock held = lc.lock(k);
        CompletableFuture<Void> turn = lc.waitForAsync(k);
        settle(k, 1);
        assertFalse(turn.isDone());
        held.unlock();
        turn.get(5, TimeUnit.SECONDS);
        assertFree(lc, k);
        lc.waitFor(k); // free key: returns at once
    }

    @Test
    void overLongKeyIsRefusedBeforeConnecting() throws IOException {
        LockingCenter nowhere = new LockingCenter("127.0.0.1:" + Vectors.deadPort());
        String longKey = "k".repeat(128);
        assertThrows(InvalidRequestException.class, () -> nowhere.lock(longKey));
        assertThrows(UnreachableException.class, () -> nowhere.lock("k"));
        // and the real server never sees it
        assertThrows(InvalidRequestException.class, () -> client("").tryLock("é".repeat(64)));
    }

    /** The key is free: a try-lock wins it (then it is released again). */
    private static void assertFree(LockingCenter lc, String k) {
        assertTrue(lc.tryLock(k), "key " + k + " is not free");
        lc.unlock(k);
    }

    // ---------------------------------------------------------------- JSON API helpers

    /** GET /api/v1/keys/{key}: the JSON as a map, or null when the key is not held. */
    @SuppressWarnings("unchecked")
    private static Map<String, Object> keyInfo(String k) {
        if (web == null || web.isEmpty()) {
            return null;
        }
        com.fasterxml.jackson.databind.JsonNode n = TestServer.keyInfo(web, k);
        return n == null ? null : TestServer.JSON.convertValue(n, Map.class);
    }

    /** The number of waiters in a key's JSON, or -1 when it has no "queue" list. */
    private static int queueLength(Map<String, Object> info) {
        Object q = info.get("queue");
        return q instanceof List ? ((List<?>) q).size() : -1;
    }

    /**
     * Waits until the key shows n waiters in the JSON API; when the API gives no answer for the key
     * (not available), waits a fixed 300 ms so the request has surely reached the queue.
     */
    private static void settle(String k, int n) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(3);
        boolean seen = false;
        while (System.nanoTime() < deadline) {
            Map<String, Object> info = keyInfo(k);
            if (info != null) {
                seen = true;
                if (queueLength(info) == n) {
                    return;
                }
            } else if (!seen) {
                Thread.sleep(300);
                return;
            }
            Thread.sleep(20);
        }
        fail("key " + k + " never showed " + n + " waiters");
    }

    /** Polls GET /api/v1/keys/{key} until the held key's queue is empty (5 s deadline). */
    private static void assertQueueEmpties(String k) throws InterruptedException {
        assertNotNull(web, "LC_TEST_WEB_ADDRESS is not set");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        Map<String, Object> last = null;
        while (System.nanoTime() < deadline) {
            last = keyInfo(k);
            if (last != null && queueLength(last) == 0) {
                return;
            }
            Thread.sleep(50);
        }
        fail("queue of " + k + " did not become empty; last answer: " + last);
    }
}
