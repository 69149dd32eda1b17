package io.lockingcenter;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** Client behaviour against a loopback stand-in: errors, giving up, scoped forms. */
class ClientBehaviourTest {

    private static boolean hungUp(FakeServer fake) throws InterruptedException {
        return fake.hangUp.await(3, TimeUnit.SECONDS);
    }

    /** A stand-in that answers the first request of {@code action} with '+' only after the hang-up, and '+' to the rest. */
    private static FakeServer grantingAfterHangUp(Action action) throws java.io.IOException {
        return new FakeServer(f -> f[0] == action.code() ? FakeServer.GRANT_AFTER_HANG_UP : (int) '+');
    }

    /** The client's next connection gave back key "k" of source "a": an Unlock, and nothing else. */
    private static void assertGivenBack(FakeServer fake, String why) throws InterruptedException {
        assertTrue(fake.awaitFrames(2, 3000), why);
        assertEquals(2, fake.frames.size());
        assertArrayEquals(Vectors.hex("02016b0161"), fake.frames.get(1));
    }

    /** Waits until the client has no async request in progress (its selector thread has ended). */
    private static void awaitAsyncIdle(LockingCenter lc) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (!lc.asyncIdle()) {
            assertTrue(System.nanoTime() < deadline, "async requests still in progress after 5 s");
            Thread.sleep(10);
        }
    }

    /**
     * Starts {@code call} (an async request of {@code action} for key "k" from source "a") against a
     * stand-in that grants it only after the hang-up, cancels it once the frame is in, and checks the
     * client gave the key back, once: the worker is joined first, so a second give-back would show.
     * Returns the cancelled future.
     */
    private static CompletableFuture<?> assertCancelGivesBack(Action action,
            Function<LockingCenter, CompletableFuture<?>> call, String why) throws Exception {
        try (FakeServer fake = grantingAfterHangUp(action)) {
            LockingCenter lc = LockingCenter.builder().address(fake.address()).source("a").build();
            CompletableFuture<?> f = call.apply(lc);
            assertTrue(fake.received.await(3, TimeUnit.SECONDS));
            assertTrue(f.cancel(true));
            assertTrue(hungUp(fake), "server did not see the hang-up");
            // The stand-in granted after the hang-up: the client must give the key back, once.
            assertTrue(fake.awaitFrames(2, 3000), why);
            awaitAsyncIdle(lc);
            assertGivenBack(fake, why);
            return f;
        }
    }

    /** Blocks lc.lock("k") in a thread, interrupts it once the stand-in has the frame, and checks it threw
     * LockInterruptedException with the interrupt flag restored. */
    private static void interruptBlockedLock(LockingCenter lc, FakeServer fake) throws InterruptedException {
        interruptBlocked(() -> lc.lock("k"), fake);
    }

    /** interruptBlockedLock for any blocking call. */
    private static void interruptBlocked(Runnable call, FakeServer fake) throws InterruptedException {
        AtomicReference<Throwable> thrown = new AtomicReference<>();
        AtomicReference<Boolean> flag = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                call.run();
            } catch (Throwable e) {
                thrown.set(e);
                flag.set(Thread.currentThread().isInterrupted());
            }
        });
        t.start();
        assertTrue(fake.received.await(3, TimeUnit.SECONDS));
        t.interrupt();
        t.join(5000);
        assertInstanceOf(LockInterruptedException.class, thrown.get());
        assertTrue(flag.get(), "interrupt flag restored");
    }

    @Test
    void connectionRefusedIsUnreachable() throws Exception {
        LockingCenter lc = new LockingCenter("127.0.0.1:" + Vectors.deadPort());
        assertThrows(UnreachableException.class, () -> lc.lock("k"));
        assertThrows(UnreachableException.class, () -> lc.tryLock("k"));
        ExecutionException e = assertThrows(ExecutionException.class, () -> lc.unlockAsync("k").get(5, TimeUnit.SECONDS));
        assertInstanceOf(UnreachableException.class, e.getCause());
    }

    @Test
    void unknownHostIsUnreachable() {
        LockingCenter lc = new LockingCenter("no-such-host.invalid:22119");
        assertThrows(UnreachableException.class, () -> lc.unlock("k"));
    }

    @Test
    void closedWithoutAnswerIsUnreachable() throws Exception {
        try (FakeServer fake = new FakeServer(f -> FakeServer.CLOSE)) {
            LockingCenter lc = new LockingCenter(fake.address());
            assertThrows(UnreachableException.class, () -> lc.lock("k"));
            assertThrows(UnreachableException.class, () -> lc.unlock("k"));
        }
    }

    @Test
    void silentServerPastRequestTimeoutIsUnreachable() throws Exception {
        try (FakeServer fake = new FakeServer(f -> FakeServer.HOLD)) {
            LockingCenter lc = LockingCenter.builder().address(fake.address())
                    .requestTimeout(Duration.ofMillis(200)).build();
            assertThrows(UnreachableException.class, () -> lc.unlock("k"));
            assertTrue(hungUp(fake));
        }
    }

    @Test
    void lockTimeoutClosesTheConnection() throws Exception {
        try (FakeServer fake = new FakeServer(f -> FakeServer.HOLD)) {
            LockingCenter lc = new LockingCenter(fake.address(), "svc");
            long start = System.nanoTime();
            LockTimeoutException e = assertThrows(LockTimeoutException.class,
                    () -> lc.lock("k", Duration.ofMillis(300)));
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(ms >= 290 && ms < 3000, "gave up after " + ms + " ms");
            assertEquals("k", e.key());
            assertTrue(hungUp(fake), "server did not see the hang-up");
            assertEquals(1, fake.frames.size(), "no grant crossed the hang-up: nothing to unlock");
        }
    }

    @Test
    void waitForTimeoutClosesTheConnection() throws Exception {
        try (FakeServer fake = new FakeServer(f -> FakeServer.HOLD)) {
            LockingCenter lc = new LockingCenter(fake.address());
            assertThrows(LockTimeoutException.class, () -> lc.waitFor("k", Duration.ofMillis(200)));
            assertTrue(hungUp(fake));
        }
    }

    @Test
    void cancellingLockAsyncClosesTheConnection() throws Exception {
        try (FakeServer fake = new FakeServer(f -> FakeServer.HOLD)) {
            LockingCenter lc = new LockingCenter(fake.address());
            CompletableFuture<HeldLock> f = lc.lockAsync("k");
            assertTrue(fake.received.await(3, TimeUnit.SECONDS));
            assertTrue(f.cancel(true));
            assertTrue(f.isCancelled());
            assertThrows(CancellationException.class, f::join);
            assertTrue(hungUp(fake), "server did not see the hang-up");
        }
    }

    @Test
    void lockAsyncTimeoutClosesTheConnection() throws Exception {
        try (FakeServer fake = new FakeServer(f -> FakeServer.HOLD)) {
            LockingCenter lc = new LockingCenter(fake.address());
            CompletableFuture<HeldLock> f = lc.lockAsync("k", Duration.ofMillis(200));
            ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(3, TimeUnit.SECONDS));
            assertInstanceOf(LockTimeoutException.class, e.getCause());
            assertTrue(hungUp(fake));
        }
    }

    @Test
    void orTimeoutOnLockAsyncClosesTheConnection() throws Exception {
        try (FakeServer fake = new FakeServer(f -> FakeServer.HOLD)) {
            LockingCenter lc = new LockingCenter(fake.address());
            CompletableFuture<HeldLock> f = lc.lockAsync("k").orTimeout(200, TimeUnit.MILLISECONDS);
            ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(3, TimeUnit.SECONDS));
            assertInstanceOf(TimeoutException.class, e.getCause());
            assertTrue(hungUp(fake));
        }
    }

    @Test
    void cancellingWaitForAsyncClosesTheConnection() throws Exception {
        try (FakeServer fake = new FakeServer(f -> FakeServer.HOLD)) {
            LockingCenter lc = new LockingCenter(fake.address());
            CompletableFuture<Void> f = lc.waitForAsync("k");
            assertTrue(fake.received.await(3, TimeUnit.SECONDS));
            f.cancel(true);
            assertTrue(hungUp(fake));
        }
    }

    @Test
    void interruptingABlockedLockClosesTheConnection() throws Exception {
        try (FakeServer fake = new FakeServer(f -> FakeServer.HOLD)) {
            interruptBlockedLock(new LockingCenter(fake.address()), fake);
            assertTrue(hungUp(fake));
        }
    }

    @Test
    void grantCrossingACancelIsUnlockedAgain() throws Exception {
        CompletableFuture<?> f = assertCancelGivesBack(Action.LOCK, lc -> lc.lockAsync("k"),
                "no unlock after a grant that crossed the cancel");
        assertThrows(CancellationException.class, f::join);
    }

    @Test
    void grantCrossingALockTimeoutIsUnlockedAgain() throws Exception {
        try (FakeServer fake = grantingAfterHangUp(Action.LOCK)) {
            LockingCenter lc = new LockingCenter(fake.address(), "a");
            assertThrows(LockTimeoutException.class, () -> lc.lock("k", Duration.ofMillis(200)));
            assertTrue(hungUp(fake), "server did not see the hang-up");
            assertGivenBack(fake, "no unlock after a grant that crossed the timeout");
        }
    }

    @Test
    void grantCrossingAnInterruptIsUnlockedAgain() throws Exception {
        try (FakeServer fake = grantingAfterHangUp(Action.LOCK)) {
            interruptBlockedLock(new LockingCenter(fake.address(), "a"), fake);
            assertGivenBack(fake, "no unlock after a grant that crossed the interrupt");
        }
    }

    @Test
    void grantCrossingAnInterruptedTryLockIsUnlockedAgain() throws Exception {
        try (FakeServer fake = grantingAfterHangUp(Action.TRY_LOCK)) {
            LockingCenter lc = new LockingCenter(fake.address(), "a");
            interruptBlocked(() -> lc.tryLock("k"), fake);
            assertGivenBack(fake, "no unlock after a try-lock grant that crossed the interrupt");
        }
    }

    @Test
    void cancelWithoutAGrantSendsNoUnlock() throws Exception {
        try (FakeServer fake = new FakeServer(f -> f[0] == Action.LOCK.code() ? FakeServer.HOLD : (int) '+')) {
            LockingCenter lc = LockingCenter.builder().address(fake.address()).source("a").build();
            CompletableFuture<HeldLock> f = lc.lockAsync("k");
            assertTrue(fake.received.await(3, TimeUnit.SECONDS));
            assertTrue(f.cancel(true));
            assertTrue(hungUp(fake), "server did not see the hang-up");
            // The stand-in withdrew the waiter without answering: once the request has ended, the
            // Lock must be the only frame (an unlock here could release someone else's hold).
            awaitAsyncIdle(lc);
            assertEquals(1, fake.frames.size());
        }
    }

    @Test
    void grantCrossingACancelledTryLockAsyncIsUnlockedAgain() throws Exception {
        assertCancelGivesBack(Action.TRY_LOCK, lc -> lc.tryLockAsync("k"),
                "no unlock after a try-lock won as it was cancelled");
    }

    @Test
    void silentServerAfterTheHangUpDelaysTheTimeoutByAtMostTheGrace() throws Exception {
        // The stand-in reads the client's hang-up, then neither answers nor closes for 5 s: the client
        // reads on for at most Call.HANG_UP_GRACE_MILLIS (the README's "at most 2 s more"), not 5 s.
        try (FakeServer fake = new FakeServer(f -> FakeServer.SILENT_AFTER_HANG_UP)) {
            LockingCenter lc = new LockingCenter(fake.address(), "a");
            long start = System.nanoTime();
            assertThrows(LockTimeoutException.class, () -> lc.lock("k", Duration.ofMillis(200)));
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            long bound = 200 + Call.HANG_UP_GRACE_MILLIS + 1000;
            assertTrue(ms >= 190 && ms < bound, "gave up after " + ms + " ms, bound " + bound + " ms");
            assertTrue(hungUp(fake), "server did not see the EOF");
            assertEquals(1, fake.frames.size(), "nothing crossed the hang-up: nothing to unlock");
        }
    }

    @Test
    void asyncCallsAreCompletedOnTheGivenExecutor() throws Exception {
        try (FakeServer fake = new FakeServer(f -> f[0] == Action.TRY_LOCK.code() ? (int) '#' : (int) '+')) {
            // An executor that only queues: nothing completes until the test runs a task in a named thread.
            BlockingQueue<Runnable> tasks = new LinkedBlockingQueue<>();
            LockingCenter lc = LockingCenter.builder().address(fake.address()).source("a").executor(tasks::add).build();
            CompletableFuture<HeldLock> lock = lc.lockAsync("k");
            Runnable first = tasks.poll(3, TimeUnit.SECONDS);
            CompletableFuture<Boolean> tryLock = lc.tryLockAsync("k");
            Runnable second = tasks.poll(3, TimeUnit.SECONDS);
            assertNotNull(first, "the answer to the lock is one task for the given executor");
            assertNotNull(second, "the answer to the try-lock is one task for the given executor");
            assertFalse(lock.isDone());
            assertFalse(tryLock.isDone());

            AtomicReference<String> lockedIn = new AtomicReference<>();
            AtomicReference<String> triedIn = new AtomicReference<>();
            lock.whenComplete((v, e) -> lockedIn.set(Thread.currentThread().getName()));
            tryLock.whenComplete((v, e) -> triedIn.set(Thread.currentThread().getName()));
            runIn("custom-executor-1", first);
            runIn("custom-executor-2", second);

            assertEquals("k", lock.getNow(null).key());
            assertEquals(Boolean.FALSE, tryLock.getNow(null));
            assertEquals("custom-executor-1", lockedIn.get());
            assertEquals("custom-executor-2", triedIn.get());
            assertTrue(tasks.isEmpty());
            assertArrayEquals(Vectors.hex("01016b0161"), fake.frames.get(0));
            assertArrayEquals(Vectors.hex("05016b0161"), fake.frames.get(1));
        }
    }

    @Test
    void pendingLockAsyncCallsHoldNoThreads() throws Exception {
        // 200 Locks that the stand-in never answers: they wait on one selector thread.
        try (ServerSocket server = new ServerSocket(0, 300, InetAddress.getLoopbackAddress())) {
            List<Socket> accepted = new CopyOnWriteArrayList<>();
            Thread acceptor = new Thread(() -> {
                try {
                    while (true) {
                        accepted.add(server.accept());
                    }
                } catch (IOException e) {
                    // closed by the test
                }
            });
            acceptor.start();
            LockingCenter lc = new LockingCenter("127.0.0.1:" + server.getLocalPort(), "a");
            int before = Thread.activeCount();
            List<CompletableFuture<HeldLock>> calls = new ArrayList<>();
            for (int i = 0; i < 200; i++) {
                calls.add(lc.lockAsync("k" + i));
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (accepted.size() < 200 && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            assertEquals(200, accepted.size(), "all 200 requests connected");
            int during = Thread.activeCount();
            System.out.println("v1: 200 pending lockAsync: threads " + before + " -> " + during);
            assertTrue(during - before <= 2, "threads grew from " + before + " to " + during);
            calls.forEach(c -> c.cancel(true));
            awaitAsyncIdle(lc);
            server.close();
            acceptor.join(5000);
            for (Socket s : accepted) {
                s.close();
            }
        }
    }

    private static void runIn(String threadName, Runnable task) throws InterruptedException {
        Thread t = new Thread(task, threadName);
        t.start();
        t.join(5000);
        assertFalse(t.isAlive(), threadName + " did not finish its task");
    }

    @Test
    void connectTimeoutBoundsAConnectThatCannotComplete() throws Exception {
        // A listener with backlog 1 that never accepts: once its accept queue is full, Linux drops
        // further SYNs, so a connect hangs until its timeout (a port nobody listens on refuses at once).
        try (ServerSocket full = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            List<Socket> fillers = new ArrayList<>();
            try {
                boolean hangs = false;
                for (int i = 0; i < 8 && !hangs; i++) {
                    Socket s = new Socket();
                    fillers.add(s);
                    try {
                        s.connect(full.getLocalSocketAddress(), 1000); // long enough not to time out on a loaded machine
                    } catch (SocketTimeoutException e) {
                        hangs = true;
                    }
                }
                Assumptions.assumeTrue(hangs, "connects to a full accept queue do not hang on this system");

                LockingCenter lc = LockingCenter.builder().address("127.0.0.1:" + full.getLocalPort())
                        .connectTimeout(Duration.ofMillis(300)).build();
                long start = System.nanoTime();
                // A lock timeout too, so that a connect that completes after all cannot hang the test.
                UnreachableException e = assertThrows(UnreachableException.class, () -> lc.lock("k", Duration.ofSeconds(10)));
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                assertTrue(ms >= 250 && ms < 3000, "gave up after " + ms + " ms, connect timeout 300 ms");
                assertInstanceOf(SocketTimeoutException.class, e.getCause());
            } finally {
                for (Socket s : fillers) {
                    try {
                        s.close();
                    } catch (IOException ignored) {
                        // a filler that never connected
                    }
                }
            }
        }
    }

    @Test
    void scopedLockUnlocksAtTheEndOfTheBlock() throws Exception {
        try (FakeServer fake = new FakeServer(f -> (int) '+')) {
            LockingCenter lc = new LockingCenter(fake.address(), "a");
            try (HeldLock held = lc.lock("k")) {
                assertEquals("k", held.key());
                held.unlock(); // explicit unlock; close() must not send a second one
            }
            try (var held = lc.tryLockOrThrow("k")) {
                assertEquals("k", held.key());
            }
            assertEquals(4, fake.frames.size());
            assertArrayEquals(Vectors.hex("01016b0161"), fake.frames.get(0));
            assertArrayEquals(Vectors.hex("02016b0161"), fake.frames.get(1));
            assertArrayEquals(Vectors.hex("05016b0161"), fake.frames.get(2));
            assertArrayEquals(Vectors.hex("02016b0161"), fake.frames.get(3));
        }
    }

    @Test
    void unlockAsyncReleasesOnce() throws Exception {
        try (FakeServer fake = new FakeServer(f -> (int) '+')) {
            LockingCenter lc = new LockingCenter(fake.address(), "a");
            HeldLock held = lc.lock("k");
            held.unlockAsync().get(3, TimeUnit.SECONDS);
            assertTrue(held.isReleased());
            held.unlockAsync().get(3, TimeUnit.SECONDS); // already released: sends nothing
            held.close();
            assertEquals(2, fake.frames.size());
            assertArrayEquals(Vectors.hex("02016b0161"), fake.frames.get(1));
        }
    }

    @Test
    void waitForLocksThenUnlocks() throws Exception {
        try (FakeServer fake = new FakeServer(f -> (int) '+')) {
            LockingCenter lc = new LockingCenter(fake.address());
            lc.waitFor("k");
            lc.waitForAsync("k").get(3, TimeUnit.SECONDS);
            assertEquals(4, fake.frames.size());
            assertEquals(1, fake.frames.get(0)[0]);
            assertEquals(2, fake.frames.get(1)[0]);
            assertEquals(1, fake.frames.get(2)[0]);
            assertEquals(2, fake.frames.get(3)[0]);
        }
    }

    @Test
    void resetBySourceSendsNoKey() throws Exception {
        try (FakeServer fake = new FakeServer(f -> (int) '+')) {
            LockingCenter lc = new LockingCenter(fake.address(), "me");
            lc.resetBySource();
            lc.resetBySource("other");
            lc.resetBySourceAsync("").get(3, TimeUnit.SECONDS);
            assertArrayEquals(Vectors.hex("0400026d65"), fake.frames.get(0));
            assertArrayEquals(Vectors.hex("0400056f74686572"), fake.frames.get(1));
            assertArrayEquals(Vectors.hex("040000"), fake.frames.get(2));
        }
    }

    @Test
    void addressForms() {
        assertArrayEquals(new String[] {"localhost", "22119"}, LockingCenter.splitAddress("localhost"));
        assertArrayEquals(new String[] {"10.1.2.3", "80"}, LockingCenter.splitAddress("10.1.2.3:80"));
        assertArrayEquals(new String[] {"::1", "9000"}, LockingCenter.splitAddress("[::1]:9000"));
        assertArrayEquals(new String[] {"::1", "22119"}, LockingCenter.splitAddress("::1"));
        assertThrows(IllegalArgumentException.class, () -> LockingCenter.splitAddress("host:0"));
        assertThrows(IllegalArgumentException.class, () -> LockingCenter.splitAddress("host:x"));
        assertThrows(IllegalArgumentException.class, () -> LockingCenter.splitAddress(""));
    }

    @Test
    void nonPositiveTimeoutIsRejected() {
        LockingCenter lc = new LockingCenter("127.0.0.1:1");
        assertThrows(IllegalArgumentException.class, () -> lc.lock("k", Duration.ZERO));
    }
}
