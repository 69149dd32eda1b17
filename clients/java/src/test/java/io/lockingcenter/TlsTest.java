package io.lockingcenter;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.UUID;
import javax.net.ssl.SSLContext;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * TLS against real servers: $LC_TEST_TLS_ADDRESS (TLS_CERT/TLS_KEY) and $LC_TEST_MTLS_ADDRESS
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

    @Test
    void badFilesAreNamed() {
        IOException e = assertThrows(IOException.class, () -> Tls.context(Path.of("/nonexistent/ca.pem")));
        assertTrue(e.getMessage().contains("/nonexistent/ca.pem"), e.getMessage());
    }
}
