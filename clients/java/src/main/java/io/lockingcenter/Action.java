package io.lockingcenter;

/** The five actions of the wire protocol, with their code on the wire. */
public enum Action {
    /** Wait in FIFO order until the key is granted. */
    LOCK(1),
    /** Release a held key (any client may release any key). */
    UNLOCK(2),
    /** Drop the holder of a key and answer '-' to its waiters. */
    RESET_BY_KEY(3),
    /** Answer '-' to every waiter of a source, then release every key it holds. */
    RESET_BY_SOURCE(4),
    /** Take the key only if it is free at this instant. */
    TRY_LOCK(5);

    private final int code;

    Action(int code) {
        this.code = code;
    }

    /** The action's byte on the wire. */
    public int code() {
        return code;
    }

    /** The action with the given wire code. */
    public static Action fromCode(int code) {
        for (Action a : values()) {
            if (a.code == code) {
                return a;
            }
        }
        throw new IllegalArgumentException("unknown action " + code);
    }
}
