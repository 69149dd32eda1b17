package io.lockingcenter;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A key held through a {@link Session}, with the fencing token of its grant. Closing it unlocks that
 * grant (by its token, so it can never release a later holder's), which fits try-with-resources:
 *
 * <pre>{@code
 * try (SessionLock held = session.lock("deploy/prod")) {
 *     deploy(held.token());
 * } // unlocked here; throws SessionLostException if the session was lost meanwhile
 * }</pre>
 *
 * <p>If the session is lost while the key is held, the hold is gone (the server released it, or
 * will at the session's expiry): {@link #close()} then throws {@link SessionLostException}, so the
 * scoped form reports it; {@link #check()} throws it at any moment. A fencing token is what keeps a
 * holder that did not notice harmless: pass {@link #token()} to the resource with every write.
 *
 * <p>The handle is thread-safe; it unlocks at most once.
 */
public final class SessionLock implements AutoCloseable {
    private final Session session;
    private final String key;
    private final long token;
    private final AtomicBoolean released = new AtomicBoolean();

    SessionLock(Session session, String key, long token) {
        this.session = session;
        this.key = key;
        this.token = token;
    }

    /** The key that is held. */
    public String key() {
        return key;
    }

    /**
     * The grant's fencing token: an unsigned 64-bit number, greater than every token the server
     * gave before (print it with {@link Long#toUnsignedString(long)}).
     */
    public long token() {
        return token;
    }

    /** The session the key is held through. */
    public Session session() {
        return session;
    }

    /** Whether this handle has released the key. */
    public boolean isReleased() {
        return released.get();
    }

    /**
     * Throws {@link SessionLostException} if the session was lost, so the hold is gone; returns
     * otherwise. (A reset by an operator can still end a hold unseen: the token covers that.)
     */
    public void check() {
        LockingCenterException f = session.failure();
        if (f instanceof SessionLostException) {
            throw new SessionLostException("key " + Wire.quote(key) + " is no longer held: " + f.getMessage(), f);
        }
    }

    /**
     * Unlocks the grant, once.
     *
     * @throws NotHeldException the session no longer holds it (reset meanwhile)
     * @throws OutcomeUnknownException the answer was lost; the session settles it after the resume
     * @throws SessionLostException the session was lost while the key was held
     * @throws SessionClosedException the session was closed (which released the key)
     */
    public void unlock() {
        if (!released.compareAndSet(false, true)) {
            return;
        }
        check();
        session.unlock(key, token);
    }

    /** Unlocks the grant without blocking, once; later calls return a completed future. */
    public CompletableFuture<Void> unlockAsync() {
        if (!released.compareAndSet(false, true)) {
            return CompletableFuture.completedFuture(null);
        }
        try {
            check();
        } catch (SessionLostException e) {
            return CompletableFuture.failedFuture(e);
        }
        return session.unlockAsync(key, token);
    }

    /**
     * Releases the key at the end of a try-with-resources block. After {@link Session#close()} it
     * does nothing (the close released the key); an unlock whose answer was lost is left to the
     * session, which settles it after the resume.
     *
     * @throws SessionLostException the session was lost while the key was held
     * @throws NotHeldException the hold had ended meanwhile (a reset)
     */
    @Override
    public void close() {
        if (released.get()) {
            return;
        }
        if (session.failure() instanceof SessionClosedException) {
            released.set(true);
            return;
        }
        try {
            unlock();
        } catch (OutcomeUnknownException e) {
            // the session unlocks this grant by its token after the resume
        }
    }

    @Override
    public String toString() {
        return "SessionLock[" + Wire.quote(key) + ", token=" + Long.toUnsignedString(token)
                + (released.get() ? ", released]" : "]");
    }
}
