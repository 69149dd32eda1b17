package io.lockingcenter;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.function.Executable;

/** The shared vectors: every frame byte for byte, every invalid entry refused, every answer mapped. */
class WireVectorsTest {

    @TestFactory
    List<DynamicTest> framesEncodeByteForByte() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (Map<String, Object> v : Vectors.list("frames")) {
            tests.add(DynamicTest.dynamicTest("frame: " + v.get("name"), () -> {
                byte[] frame = Wire.encode(Vectors.action(v), (String) v.get("key"), (String) v.get("source"));
                assertEquals((String) v.get("hex"), Vectors.hex(frame));
            }));
        }
        assertEquals(10, tests.size(), "vector count changed: update this test's expectations");
        return tests;
    }

    /** The same frames, sent by the public API to a loopback stand-in, arrive byte for byte. */
    @TestFactory
    List<DynamicTest> framesSentByTheClient() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (Map<String, Object> v : Vectors.list("frames")) {
            tests.add(DynamicTest.dynamicTest("sent: " + v.get("name"), () -> {
                Action action = Vectors.action(v);
                String key = (String) v.get("key");
                try (FakeServer fake = new FakeServer(f -> (int) '+')) {
                    LockingCenter lc = new LockingCenter(fake.address(), (String) v.get("source"));
                    call(lc, action, key);
                    assertEquals(1, fake.frames.size());
                    assertArrayEquals(Vectors.hex((String) v.get("hex")), fake.frames.get(0));
                    assertFalse(fake.halfClosedEarly.get(0), "client half-closed before the answer");
                }
            }));
        }
        return tests;
    }

    @TestFactory
    List<DynamicTest> invalidEntriesAreRefusedBeforeConnecting() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        int dead = Vectors.deadPort();
        for (Map<String, Object> v : Vectors.list("invalid")) {
            tests.add(DynamicTest.dynamicTest("invalid: " + v.get("name"), () -> {
                Action action = Vectors.action(v);
                String key = (String) v.get("key");
                String source = (String) v.get("source");
                assertThrows(InvalidRequestException.class, () -> Wire.encode(action, key, source));
                // Through the API, against an address nothing listens on: the validation error,
                // not UnreachableException, proves nothing was attempted.
                Executable viaApi = () -> call(new LockingCenter("127.0.0.1:" + dead), action, key);
                if (((String) v.get("reason")).startsWith("source")) {
                    assertThrows(InvalidRequestException.class,
                            () -> new LockingCenter("127.0.0.1:" + dead, source));
                    assertThrows(InvalidRequestException.class,
                            () -> LockingCenter.builder().source(source));
                } else {
                    assertThrows(InvalidRequestException.class, viaApi);
                    CompletionException async = assertThrows(CompletionException.class,
                            () -> asyncCall(new LockingCenter("127.0.0.1:" + dead), action, key).join());
                    assertInstanceOf(InvalidRequestException.class, async.getCause());
                }
            }));
        }
        assertEquals(7, tests.size(), "vector count changed: update this test's expectations");
        return tests;
    }

    @Test
    void answersAreTheThreeKnownBytes() throws IOException {
        List<Map<String, Object>> answers = Vectors.list("answers");
        assertEquals(3, answers.size());
        assertEquals("+", answers.get(0).get("char"));
        assertEquals(Wire.OK, Vectors.hex((String) answers.get(0).get("hex"))[0]);
        assertEquals(Wire.FAIL, Vectors.hex((String) answers.get(1).get("hex"))[0]);
        assertEquals(Wire.NOT_WON, Vectors.hex((String) answers.get(2).get("hex"))[0]);
    }

    /** Every answer of the vectors, for every action, maps to its documented outcome. */
    @TestFactory
    List<DynamicTest> answersMapToOutcomes() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (Map<String, Object> a : Vectors.list("answers")) {
            int answer = Vectors.hex((String) a.get("hex"))[0];
            for (Action action : Action.values()) {
                tests.add(DynamicTest.dynamicTest("answer " + a.get("char") + " to " + action, () -> {
                    try (FakeServer fake = new FakeServer(f -> answer)) {
                        LockingCenter lc = new LockingCenter(fake.address(), "svc");
                        checkOutcome(lc, action, answer);
                    }
                }));
            }
        }
        return tests;
    }

    private static void checkOutcome(LockingCenter lc, Action action, int answer) {
        switch (action) {
            case LOCK:
                if (answer == '+') {
                    HeldLock held = lc.lock("k");
                    assertEquals("k", held.key());
                    assertFalse(held.isReleased());
                } else if (answer == '-') {
                    assertThrows(ResetWhileWaitingException.class, () -> lc.lock("k"));
                } else {
                    LockingCenterException e = assertThrows(LockingCenterException.class, () -> lc.lock("k"));
                    assertEquals(LockingCenterException.class, e.getClass());
                }
                break;
            case TRY_LOCK:
                if (answer == '+') {
                    assertTrue(lc.tryLock("k"));
                } else if (answer == '#') {
                    assertFalse(lc.tryLock("k"));
                    assertThrows(NotWonException.class, () -> lc.tryLockOrThrow("k"));
                } else {
                    RefusedException e = assertThrows(RefusedException.class, () -> lc.tryLock("k"));
                    assertFalse(e instanceof InvalidRequestException);
                }
                break;
            default:
                String key = action == Action.RESET_BY_SOURCE ? "" : "k";
                if (answer == '+') {
                    call(lc, action, key);
                } else if (answer == '-') {
                    RefusedException e = assertThrows(RefusedException.class, () -> call(lc, action, key));
                    assertFalse(e instanceof InvalidRequestException);
                } else {
                    LockingCenterException e =
                            assertThrows(LockingCenterException.class, () -> call(lc, action, key));
                    assertEquals(LockingCenterException.class, e.getClass());
                }
        }
    }

    /** Calls the public API for the action; reset by source resets the client's own source. */
    static void call(LockingCenter lc, Action action, String key) {
        switch (action) {
            case LOCK: lc.lock(key); break;
            case UNLOCK: lc.unlock(key); break;
            case RESET_BY_KEY: lc.resetByKey(key); break;
            case RESET_BY_SOURCE:
                // The API takes no key here. Not an InvalidRequestException: the helper must not stand
                // in for a refusal that the client itself is expected to make.
                if (!key.isEmpty()) {
                    throw new IllegalArgumentException("the API cannot send a key with reset by source");
                }
                lc.resetBySource();
                break;
            case TRY_LOCK: lc.tryLock(key); break;
            default: throw new AssertionError(action);
        }
    }

    static CompletableFuture<?> asyncCall(LockingCenter lc, Action action, String key) {
        switch (action) {
            case LOCK: return lc.lockAsync(key).orTimeout(5, TimeUnit.SECONDS);
            case UNLOCK: return lc.unlockAsync(key);
            case RESET_BY_KEY: return lc.resetByKeyAsync(key);
            case TRY_LOCK: return lc.tryLockAsync(key);
            default: return lc.resetBySourceAsync(lc.source());
        }
    }
}
