package io.lockingcenter;

/**
 * The waiting thread was interrupted. The connection was closed, so the server withdrew the waiter,
 * and the thread's interrupt flag is set again before this is thrown.
 */
public class LockInterruptedException extends LockingCenterException {
    private static final long serialVersionUID = 1L;

    /** Creates the exception for the key that was being waited for. */
    public LockInterruptedException(String key) {
        super("interrupted while waiting for key " + Wire.quote(key));
    }
}
