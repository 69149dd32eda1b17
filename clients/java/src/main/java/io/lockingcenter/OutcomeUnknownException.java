package io.lockingcenter;

/**
 * An unlock or a reset was sent but its answer never came (the connection dropped, or the caller stopped waiting): it may or may not have taken effect. It is never resent blindly; a session's unlock by token is settled after the resume, where it can release only that grant.
 */
public class OutcomeUnknownException extends UnreachableException {
    private static final long serialVersionUID = 1L;

    /** Creates the exception with a message and the cause (may be null). */
    public OutcomeUnknownException(String message, Throwable cause) {
        super(message, cause);
    }
}
