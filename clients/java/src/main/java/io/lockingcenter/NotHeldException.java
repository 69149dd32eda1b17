package io.lockingcenter;

/**
 * A session's unlock was answered '-': the session does not hold that grant (it was reset, released already, or ended). Nothing was released, never another holder's grant.
 */
public class NotHeldException extends RefusedException {
    private static final long serialVersionUID = 1L;

    /** Creates the exception with a message and the cause (may be null). */
    public NotHeldException(String message, Throwable cause) {
        super(message, cause);
    }
}
