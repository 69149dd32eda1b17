package io.lockingcenter;

/**
 * A lock (or wait) request was answered {@code '-'}: the key, or this client's source, was reset while
 * the request waited in the queue, or the server could not make the grant durable. The key is not held
 * by this client.
 */
public class ResetWhileWaitingException extends LockingCenterException {
    private static final long serialVersionUID = 1L;
    private final String key;

    /** Creates the exception for the key whose lock request was answered '-'. */
    public ResetWhileWaitingException(String key) {
        super("lock on key " + Wire.quote(key) + " was answered '-' (reset while waiting, or not made durable)");
        this.key = key;
    }

    /** The key that was being waited for. */
    public String key() {
        return key;
    }
}
