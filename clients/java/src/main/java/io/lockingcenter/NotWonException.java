package io.lockingcenter;

/**
 * A try-lock did not win the key: somebody holds it (answer {@code '#'}).
 *
 * <p>Raised only by the scoped form {@link LockingCenter#tryLockOrThrow}; {@link LockingCenter#tryLock}
 * returns {@code false} instead.
 */
public class NotWonException extends LockingCenterException {
    private static final long serialVersionUID = 1L;
    private final String key;

    /** Creates the exception for the key that was not won. */
    public NotWonException(String key) {
        super("key " + Wire.quote(key) + " is held by someone else");
        this.key = key;
    }

    /** The key that was already held. */
    public String key() {
        return key;
    }
}
