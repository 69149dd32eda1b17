package io.lockingcenter;

/**
 * The session ended without Close: the server refused to resume it (it expired, was ended from the web API, or the server restarted without its log), or its TTL passed without a successful resume. Every hold it had is gone, or goes at the server's expiry; every pending and later call on it fails with this exception.
 */
public class SessionLostException extends LockingCenterException {
    private static final long serialVersionUID = 1L;

    /** Creates the exception with a message and the cause (may be null). */
    public SessionLostException(String message, Throwable cause) {
        super(message, cause);
    }
}
