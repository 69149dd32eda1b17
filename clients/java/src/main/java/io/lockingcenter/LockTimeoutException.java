package io.lockingcenter;

import java.time.Duration;

/**
 * The caller's timeout passed while a lock (or wait) request was queued. The connection was closed, so
 * the server withdrew the waiter; the key is not held by this client.
 */
public class LockTimeoutException extends LockingCenterException {
    private static final long serialVersionUID = 1L;
    private final String key;

    /** Creates the exception for the key and the timeout that passed. */
    public LockTimeoutException(String key, Duration timeout) {
        super("gave up waiting for key " + Wire.quote(key) + " after " + timeout.toMillis() + " ms");
        this.key = key;
    }

    /** The key that was being waited for. */
    public String key() {
        return key;
    }
}
