package io.lockingcenter;

/**
 * The server answered {@code '-'} to an unlock, reset or try-lock (for unlock: the key was not held, or
 * the release could not be recorded). Its subclass {@link InvalidRequestException} covers input the
 * client refuses itself, before connecting.
 */
public class RefusedException extends LockingCenterException {
    private static final long serialVersionUID = 1L;

    /** Creates the exception with a message. */
    public RefusedException(String message) {
        super(message);
    }

    /** Creates the exception with a message and the cause (may be null). */
    public RefusedException(String message, Throwable cause) {
        super(message, cause);
    }
}
