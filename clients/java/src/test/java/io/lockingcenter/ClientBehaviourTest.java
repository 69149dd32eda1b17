package io.lockingcenter;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** Client behaviour against a loopback stand-in: errors, giving up, scoped forms. */
class ClientBehaviourTest {

    private static boolean hungUp(FakeServer fake) throws InterruptedException {
        return fake.hangUp.await(3, TimeUnit.SECONDS);
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
            LockingCenter lc = new LockingCenter(fake.address());
            AtomicReference<Throwable> thrown = new AtomicReference<>();
            AtomicReference<Boolean> flag = new AtomicReference<>();
            Thread t = new Thread(() -> {
                try {
                    lc.lock("k");
                } catch (Throwable e) {
                    thrown.set(e);
                    flag.set(Thread.currentThread().isInterrupted());
                }
            });
            t.start();
            assertTrue(fake.received.await(3, TimeUnit.SECONDS));
            t.interrupt();
            t.join(3000);
            assertInstanceOf(LockInterruptedException.class, thrown.get());
            assertTrue(flag.get(), "interrupt flag restored");
            assertTrue(hungUp(fake));
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
