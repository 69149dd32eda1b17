package io.lockingcenter;

/**
 * The server could not be reached (name not resolved, connection refused, connect timeout), the frame
 * could not be sent, or the connection closed (or stayed silent past the request timeout) without an
 * answer. The outcome of the request is unknown only in the last case.
 */
public class UnreachableException extends LockingCenterException {
    private static final long serialVersionUID = 1L;

    /** Creates the exception with a message and the I/O cause (may be null). */
    public UnreachableException(String message, Throwable cause) {
        super(message, cause);
    }
}
