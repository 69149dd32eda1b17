package io.lockingcenter;

/**
 * The session's connection dropped before this call's answer came. The session resumes on its own; the call may be made again. A failed Lock or TryLock holds nothing: a grant the server made meanwhile is released by the session after the resume.
 */
public class DisconnectedException extends UnreachableException {
    private static final long serialVersionUID = 1L;

    /** Creates the exception with a message and the cause (may be null). */
    public DisconnectedException(String message, Throwable cause) {
        super(message, cause);
    }
}
