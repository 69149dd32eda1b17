package io.lockingcenter;

import java.time.Duration;

/**
 * A holder for the SIGKILL test, run in its own JVM: opens a session with the given TTL, locks the
 * keys, prints "held" and waits to be killed. Arguments: address ttl-ms key...
 */
public final class HoldMain {
    private HoldMain() {}

    /** Entry point. */
    public static void main(String[] args) throws InterruptedException {
        Session s = Session.builder().address(args[0]).source("java-holder")
                .ttl(Duration.ofMillis(Long.parseLong(args[1]))).open();
        for (int i = 2; i < args.length; i++) {
            s.lock(args[i]);
        }
        System.out.println("held");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}
