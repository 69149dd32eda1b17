package io.lockingcenter;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A key held by this process, returned by {@link LockingCenter#lock} and its variants. Closing it
 * unlocks the key, so it fits try-with-resources:
 *
 * <pre>{@code
 * try (HeldLock held = lc.lock("deploy/prod")) {
 *     deploy();
 * }
 * }</pre>
 *
 * Unlocking through the handle happens at most once; {@link #close()} after {@link #unlock()} does
 * nothing. The handle is thread-safe.
 */
public final class HeldLock implements AutoCloseable {
    private final LockingCenter client;
    private final String key;
    private final AtomicBoolean released = new AtomicBoolean();

    HeldLock(LockingCenter client, String key) {
        this.client = client;
        this.key = key;
    }

    /** The key that is held. */
    public String key() {
        return key;
    }

    /** Whether this handle has released the key. */
    public boolean isReleased() {
        return released.get();
    }

    /**
     * Unlocks the key, once. If the server cannot be reached the handle stays unreleased, so the call
     * can be repeated.
     *
     * @throws RefusedException if the server answered '-' (the key was no longer held, e.g. reset)
     * @throws UnreachableException if the server could not be reached
     */
    public void unlock() {
        if (!released.compareAndSet(false, true)) {
            return;
        }
        try {
            client.unlock(key);
        } catch (UnreachableException | LockInterruptedException e) {
            released.set(false);
            throw e;
        }
    }

    /** Unlocks the key without blocking, once; later calls return a completed future. */
    public CompletableFuture<Void> unlockAsync() {
        if (!released.compareAndSet(false, true)) {
            return CompletableFuture.completedFuture(null);
        }
        return client.unlockAsync(key).whenComplete((v, e) -> {
            if (e != null && unwrap(e) instanceof UnreachableException) {
                released.set(false);
            }
        });
    }

    /** Same as {@link #unlock()}: releases the key at the end of a try-with-resources block. */
    @Override
    public void close() {
        unlock();
    }

    @Override
    public String toString() {
        return "HeldLock[" + Wire.quote(key) + (released.get() ? ", released]" : "]");
    }

    private static Throwable unwrap(Throwable e) {
        while (e instanceof java.util.concurrent.CompletionException && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }
}
