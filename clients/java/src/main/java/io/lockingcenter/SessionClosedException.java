package io.lockingcenter;

/**
 * A call was made on a session after close() (or was still pending when close() ended it). Nothing is held through a closed session.
 */
public class SessionClosedException extends LockingCenterException {
    private static final long serialVersionUID = 1L;

    /** Creates the exception with a message and the cause (may be null). */
    public SessionClosedException(String message, Throwable cause) {
        super(message, cause);
    }
}
