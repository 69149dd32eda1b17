package io.lockingcenter;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.SSLContext;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * TLS, sessions and the v1 client, against real servers: $LC_TEST_TLS_ADDRESS (TLS_CERT/TLS_KEY) and $LC_TEST_MTLS_ADDRESS
 * (TLS_CLIENT_CA too), with the PEM files of $LC_TEST_TLS_DIR. Skipped loudly without them; under
 * CI=true that is a failure.
 */
class TlsTest {
    private static final String RUN = UUID.randomUUID().toString().substring(0, 8);

    private static String need(String var) {
        String v = System.getenv(var);
        String dir = System.getenv("LC_TEST_TLS_DIR");
        if (v == null || v.isEmpty() || dir == null || dir.isEmpty()) {
            if ("true".equals(System.getenv("CI"))) {
                fail(var + " / LC_TEST_TLS_DIR unset under CI=true");
            }
            System.err.println("SKIPPED TlsTest: " + var + " unset (no TLS server to test against)");
            Assumptions.abort(var + " unset");
        }
        return v;
    }

    private static Path pem(String name) {
        return Path.of(System.getenv("LC_TEST_TLS_DIR"), name);
    }

    private static Session open(String address, SSLContext tls, String name) {
        Session.Builder b = Session.builder().address(address).tls(tls).connectTimeout(Duration.ofSeconds(3));
        if (name != null) {
            b.serverName(name);
        }
        return b.open();
    }

    private static void lockAndClose(Session s) {
        try (s; SessionLock l = s.lock("java-tls-" + RUN)) {
            assertTrue(l.token() > 0);
            assertTrue(s.tryLock(l.key()).isEmpty());
        }
    }

    @Test
    void aSessionOverTlsWithTheTestCa() throws IOException {
        String addr = need("LC_TEST_TLS_ADDRESS");
        SSLContext tls = Tls.context(pem("ca.pem"));
        lockAndClose(open(addr, tls, null));
        // The certificate names localhost too.
        lockAndClose(open("localhost:" + addr.substring(addr.lastIndexOf(':') + 1), tls, null));
    }

    @Test
    void aWrongServerNameIsRefused() throws IOException {
        String addr = need("LC_TEST_TLS_ADDRESS");
        UnreachableException e = assertThrows(UnreachableException.class,
                () -> open(addr, Tls.context(pem("ca.pem")), "wrong.invalid"));
        assertTrue(e.getMessage().contains("wrong.invalid") || e.getMessage().toLowerCase().contains("certificate"),
                e.getMessage());
    }

    @Test
    void anUnrelatedCaIsRefused() throws IOException {
        String addr = need("LC_TEST_TLS_ADDRESS");
        assertThrows(UnreachableException.class, () -> open(addr, Tls.context(pem("other-ca.pem")), null));
    }

    @Test
    void mutualTlsWithAClientCertificate() throws IOException {
        String addr = need("LC_TEST_MTLS_ADDRESS");
        lockAndClose(open(addr, Tls.context(pem("ca.pem"), pem("client.pem"), pem("client-key.pem")), null));
    }

    @Test
    void mutualTlsWithoutAClientCertificateIsRefused() throws IOException {
        String addr = need("LC_TEST_MTLS_ADDRESS");
        assertThrows(UnreachableException.class, () -> open(addr, Tls.context(pem("ca.pem")), null));
    }

    // ---- the v1 client: one request per TLS connection

    private static LockingCenter v1(String address, SSLContext tls, String name) {
        LockingCenter.Builder b = LockingCenter.builder().address(address).source("java-v1-tls").tls(tls)
                .connectTimeout(Duration.ofSeconds(3));
        if (name != null) {
            b.serverName(name);
        }
        return b.build();
    }

    private static String key(String name) {
        return "java-" + name + "-" + RUN + "-" + UUID.randomUUID().toString().substring(0, 6);
    }

    /**
     * Lock, TryLock (held and free), Unlock (held and not), and Locks that give up, blocking (a
     * timeout) and async (the future cancelled): each hang-up (close_notify, then the FIN) withdraws
     * the waiter, so the release after them leaves the key free.
     */
    private static void v1Round(LockingCenter lc) throws Exception {
        String k = key("v1-tls");
        HeldLock held = lc.lock(k);
        assertFalse(lc.tryLock(k), "try-lock of a held key over TLS was won");
        assertFalse(lc.tryLockAsync(k).get(10, TimeUnit.SECONDS), "async try-lock of a held key was won");
        long start = System.nanoTime();
        assertThrows(LockTimeoutException.class, () -> lc.lock(k, Duration.ofMillis(300)));
        // The timeout is raised once the server closed the connection it was hung up on (or after a
        // 2 s grace): well before that, the waiter is withdrawn.
        long tookMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        assertTrue(tookMillis < 2000, "the server did not close a hung-up waiter's connection: " + tookMillis + " ms");
        ExecutionException timedOut = assertThrows(ExecutionException.class,
                () -> lc.lockAsync(k, Duration.ofMillis(300)).get(10, TimeUnit.SECONDS));
        assertTrue(timedOut.getCause() instanceof LockTimeoutException, timedOut.toString());
        CompletableFuture<HeldLock> waiting = lc.lockAsync(k);
        assertThrows(java.util.concurrent.TimeoutException.class, () -> waiting.get(300, TimeUnit.MILLISECONDS));
        assertTrue(waiting.cancel(true));
        assertThrows(CancellationException.class, waiting::join);
        held.close();
        // The cancelled waiter may still be on its way out: the server withdraws it when its
        // close_notify arrives, or hands the grant back when it crossed; either way the key ends
        // free, which a Lock with a deadline shows without racing it.
        try (HeldLock again = lc.lock(k, Duration.ofSeconds(10))) {
            assertEquals(k, again.key());
        }
        assertTrue(lc.tryLock(k), "the key was granted to a withdrawn waiter");
        lc.unlockAsync(k).get(10, TimeUnit.SECONDS);
        assertThrows(RefusedException.class, () -> lc.unlock(k));
    }

    @Test
    void v1RequestsOverTlsByIpAndByName() throws Exception {
        String addr = need("LC_TEST_TLS_ADDRESS");
        SSLContext tls = Tls.context(pem("ca.pem"));
        v1Round(v1(addr, tls, null));
        v1Round(v1("localhost:" + addr.substring(addr.lastIndexOf(':') + 1), tls, null));
    }

    @Test
    void v1RefusesAWrongServerNameAndAnUnrelatedCa() throws Exception {
        String addr = need("LC_TEST_TLS_ADDRESS");
        String k = key("v1-tls-refused");
        UnreachableException e = assertThrows(UnreachableException.class,
                () -> v1(addr, Tls.context(pem("ca.pem")), "wrong.invalid").tryLock(k));
        assertTrue(e.getMessage().contains("TLS"), e.getMessage());
        assertThrows(UnreachableException.class, () -> v1(addr, Tls.context(pem("other-ca.pem")), null).lock(k));
        ExecutionException async = assertThrows(ExecutionException.class,
                () -> v1(addr, Tls.context(pem("other-ca.pem")), null).lockAsync(k).get(10, TimeUnit.SECONDS));
        assertTrue(async.getCause() instanceof UnreachableException, async.toString());
        // Nothing was sent: the key is free.
        LockingCenter lc = v1(addr, Tls.context(pem("ca.pem")), null);
        assertTrue(lc.tryLock(k), "a refused request took the key");
        lc.unlock(k);
    }

    @Test
    void v1MutualTlsWithAndWithoutAClientCertificate() throws Exception {
        String addr = need("LC_TEST_MTLS_ADDRESS");
        SSLContext with = Tls.context(pem("ca.pem"), pem("client.pem"), pem("client-key.pem"));
        v1Round(v1(addr, with, null));
        // Without one, TLS 1.3 tells at the first read: the frame went out, the server never read it.
        String k = key("v1-mtls-refused");
        LockingCenter without = v1(addr, Tls.context(pem("ca.pem")), null);
        assertThrows(UnreachableException.class, () -> without.tryLock(k));
        assertThrows(UnreachableException.class, () -> without.lock(k, Duration.ofSeconds(5)));
        assertThrows(UnreachableException.class, () -> without.unlock(k));
        LockingCenter lc = v1(addr, with, null);
        assertTrue(lc.tryLock(k), "a refused request took the key");
        lc.unlock(k);
    }

    @Test
    void badFilesAreNamed() {
        IOException e = assertThrows(IOException.class, () -> Tls.context(Path.of("/nonexistent/ca.pem")));
        assertTrue(e.getMessage().contains("/nonexistent/ca.pem"), e.getMessage());
    }
}
