package io.lockingcenter;

/**
 * The request was refused by the client before any connection was opened: an empty key, a key or
 * source longer than 127 bytes once UTF-8 encoded, or a key given where none is allowed.
 */
public class InvalidRequestException extends RefusedException {
    private static final long serialVersionUID = 1L;

    /** Creates the exception with the reason. */
    public InvalidRequestException(String message) {
        super(message);
    }
}
