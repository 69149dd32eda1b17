package io.lockingcenter;

/**
 * Base class of every error raised by the Locking-Center client.
 *
 * <p>It is unchecked, so it travels through lambdas and {@code CompletableFuture} chains; catch it to
 * handle every client failure at once, or catch one of its subclasses:
 *
 * <ul>
 *   <li>{@link NotWonException}: {@link LockingCenter#tryLockOrThrow} found the key held;
 *   <li>{@link ResetWhileWaitingException}: a lock request was answered {@code '-'} (the key or the
 *       source was reset while waiting, or the server could not make the grant durable);
 *   <li>{@link RefusedException}: unlock, reset or try-lock answered {@code '-'}; its subclass
 *       {@link InvalidRequestException} is raised for bad input before anything is sent;
 *   <li>{@link UnreachableException}: the server could not be reached, or closed without answering;
 *   <li>{@link LockTimeoutException} and {@link LockInterruptedException}: the caller gave up waiting.
 * </ul>
 */
public class LockingCenterException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** Creates an exception with a message. */
    public LockingCenterException(String message) {
        super(message);
    }

    /** Creates an exception with a message and the cause. */
    public LockingCenterException(String message, Throwable cause) {
        super(message, cause);
    }
}
