package io.lockingcenter;

import java.nio.charset.StandardCharsets;

/**
 * Encoding of one request frame (SPEC section 1):
 *
 * <pre>
 *   +--------+---------+-----------------+------------+--------------------+
 *   | action | keySize | key (keySize B) | sourceSize | source (sourceSize)|
 *   | 1 byte | 1 byte  | UTF-8 bytes     | 1 byte     | UTF-8 bytes        |
 *   +--------+---------+-----------------+------------+--------------------+
 * </pre>
 *
 * Sizes are signed bytes, so key and source are at most 127 bytes. The answer is one byte.
 */
final class Wire {
    /** Largest key or source, in bytes. */
    static final int MAX_SIZE = 127;
    /** Answer: success. */
    static final int OK = '+';
    /** Answer: failure. */
    static final int FAIL = '-';
    /** Answer: try-lock not won. */
    static final int NOT_WON = '#';

    private Wire() {}

    /** Checks a source (null means empty) and returns its UTF-8 bytes. */
    static byte[] sourceBytes(String source) {
        return utf8("source", source == null ? "" : source);
    }

    /** Checks a key for an action that needs one and returns its UTF-8 bytes. */
    static byte[] keyBytes(String key) {
        if (key == null || key.isEmpty()) {
            throw new InvalidRequestException("key must not be empty");
        }
        return utf8("key", key);
    }

    /** The UTF-8 bytes of a key or source, refused when longer than {@link #MAX_SIZE}. */
    private static byte[] utf8(String what, String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        if (b.length > MAX_SIZE) {
            throw new InvalidRequestException(
                    what + " is " + b.length + " bytes once UTF-8 encoded; at most " + MAX_SIZE + " allowed");
        }
        return b;
    }

    /**
     * Encodes one frame, refusing invalid input with {@link InvalidRequestException}. ResetBySource takes
     * no key (keySize 0); every other action needs a key of 1..127 bytes.
     */
    static byte[] encode(Action action, String key, String source) {
        byte[] k;
        if (action == Action.RESET_BY_SOURCE) {
            if (key != null && !key.isEmpty()) {
                throw new InvalidRequestException("reset by source takes no key");
            }
            k = new byte[0];
        } else {
            k = keyBytes(key);
        }
        byte[] s = sourceBytes(source);
        byte[] frame = new byte[3 + k.length + s.length];
        frame[0] = (byte) action.code();
        frame[1] = (byte) k.length;
        System.arraycopy(k, 0, frame, 2, k.length);
        frame[2 + k.length] = (byte) s.length;
        System.arraycopy(s, 0, frame, 3 + k.length, s.length);
        return frame;
    }

    /** A key or source quoted for messages, shortened when long. */
    static String quote(String s) {
        if (s == null) {
            return "null";
        }
        String t = s.length() > 40 ? s.substring(0, 40) + "..." : s;
        return '"' + t + '"';
    }

    /** Printable form of an answer byte for messages. */
    static String answer(int b) {
        return b >= 0x20 && b < 0x7f ? "'" + (char) b + "'" : String.format("0x%02x", b);
    }
}
