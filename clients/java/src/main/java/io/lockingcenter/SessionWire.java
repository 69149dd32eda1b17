package io.lockingcenter;

import java.nio.ByteBuffer;

/**
 * Encoding of the session frames (docs/protocol.md, "Sessions"). All integers are big-endian and
 * unsigned; sizes are signed bytes, so a source, auth token or key is at most 127 bytes.
 *
 * <pre>
 *   open    [16][version:1][ttl_ms:4][resume:8][sourceSize:1][source][authSize:1][auth]
 *   answer  [status:1][ttl_ms:4][session:8]                                     13 bytes
 *   request [action:1][id:4][token:8][keySize:1][key]                           14 + k bytes
 *   answer  [id:4][status:1][token:8]                                           13 bytes
 * </pre>
 */
final class SessionWire {
    /** The first byte of a session connection. */
    static final int OPEN = 16;
    /** The only session protocol version. */
    static final int VERSION = 1;
    /** Length of both kinds of answer. */
    static final int ANSWER_SIZE = 13;

    static final int LOCK = 1;
    static final int UNLOCK = 2;
    static final int RESET_BY_KEY = 3;
    static final int RESET_BY_SOURCE = 4;
    static final int TRY_LOCK = 5;
    static final int CANCEL = 6;
    static final int PING = 7;
    static final int CLOSE = 8;

    private SessionWire() {}

    /** The answer to an open: status, granted TTL and session id. */
    record OpenAnswer(int status, long ttlMillis, long session) {}

    /** The answer to a request: the id it answers, status and token. */
    record Answer(int id, int status, long token) {}

    /**
     * Encodes an open (resume 0: a new session), refusing a source or auth token over 127 bytes with
     * {@link InvalidRequestException}. ttlMillis is an unsigned 32-bit value.
     */
    static byte[] open(int version, long ttlMillis, long resume, String source, String auth) {
        byte[] s = Wire.sourceBytes(source);
        byte[] a = authBytes(auth);
        ByteBuffer b = ByteBuffer.allocate(16 + s.length + a.length);
        b.put((byte) OPEN).put((byte) version).putInt((int) ttlMillis).putLong(resume);
        b.put((byte) s.length).put(s).put((byte) a.length).put(a);
        return b.array();
    }

    /** The UTF-8 bytes of an auth token, refused over 127 bytes. */
    static byte[] authBytes(String auth) {
        byte[] a = (auth == null ? "" : auth).getBytes(java.nio.charset.StandardCharsets.UTF_8);
        if (a.length > Wire.MAX_SIZE) {
            throw new InvalidRequestException("auth token is " + a.length + " bytes once UTF-8 encoded; at most "
                    + Wire.MAX_SIZE + " allowed");
        }
        return a;
    }

    /** Decodes the 13-byte answer to an open. */
    static OpenAnswer openAnswer(byte[] b) {
        ByteBuffer x = ByteBuffer.wrap(b, 0, ANSWER_SIZE);
        int status = x.get() & 0xff;
        long ttl = x.getInt() & 0xffffffffL;
        return new OpenAnswer(status, ttl, x.getLong());
    }

    /**
     * The key bytes of a request: Lock, TryLock, Unlock and ResetByKey need 1..127 bytes;
     * ResetBySource carries a source of 0..127 bytes; Cancel, Ping and Close carry none.
     */
    static byte[] keyBytes(int action, String key) {
        switch (action) {
            case LOCK:
            case TRY_LOCK:
            case UNLOCK:
            case RESET_BY_KEY:
                return Wire.keyBytes(key);
            case RESET_BY_SOURCE:
                return Wire.sourceBytes(key);
            case CANCEL:
            case PING:
            case CLOSE:
                if (key != null && !key.isEmpty()) {
                    throw new InvalidRequestException("action " + action + " takes no key");
                }
                return new byte[0];
            default:
                throw new InvalidRequestException("unknown session action " + action);
        }
    }

    /** Encodes a request whose key bytes were checked by {@link #keyBytes}. */
    static void request(ByteBuffer b, int action, int id, long token, byte[] key) {
        b.put((byte) action).putInt(id).putLong(token).put((byte) key.length).put(key);
    }

    /** Encodes one request, checking the key first. */
    static byte[] request(int action, int id, long token, String key) {
        byte[] k = keyBytes(action, key);
        ByteBuffer b = ByteBuffer.allocate(14 + k.length);
        request(b, action, id, token, k);
        return b.array();
    }

    /** Decodes a 13-byte answer to a request. */
    static Answer answer(byte[] b) {
        ByteBuffer x = ByteBuffer.wrap(b, 0, ANSWER_SIZE);
        int id = x.getInt();
        int status = x.get() & 0xff;
        return new Answer(id, status, x.getLong());
    }
}
