package io.lockingcenter;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import java.util.Collection;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * TLS contexts from PEM files, with the JDK alone, for a server started with TLS_CERT/TLS_KEY (and
 * TLS_CLIENT_CA for mutual TLS). Give the result to {@link Session.Builder#tls(SSLContext)} or to
 * the v1 client's {@link LockingCenter.Builder#tls(SSLContext)}; either checks the server's name
 * (the host dialled, or {@code serverName}).
 *
 * <pre>{@code
 * SSLContext tls = Tls.context(Path.of("ca.pem"), Path.of("client.pem"), Path.of("client-key.pem"));
 * }</pre>
 */
public final class Tls {
    private Tls() {}

    /**
     * A context that trusts the certificates of {@code caPem} (a PEM bundle), or the JDK's default
     * roots when it is null, and presents no client certificate.
     *
     * @throws IOException a file cannot be read or holds no certificate
     */
    public static SSLContext context(Path caPem) throws IOException {
        return context(caPem, null, null);
    }

    /**
     * A context that trusts {@code caPem} (null: the JDK's default roots) and, when {@code certPem}
     * and {@code keyPem} are given, presents that client certificate chain and its key (PEM, PKCS#8
     * "PRIVATE KEY": EC, RSA or Ed25519) for mutual TLS.
     *
     * @throws IOException a file cannot be read, holds no certificate or key, or the key does not
     *     parse
     */
    public static SSLContext context(Path caPem, Path certPem, Path keyPem) throws IOException {
        try {
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            if (caPem == null) {
                tmf.init((KeyStore) null);
            } else {
                KeyStore trust = KeyStore.getInstance("PKCS12");
                trust.load(null, null);
                int i = 0;
                for (Certificate c : certificates(caPem)) {
                    trust.setCertificateEntry("ca-" + i++, c);
                }
                tmf.init(trust);
            }
            KeyManagerFactory kmf = null;
            if (certPem != null || keyPem != null) {
                if (certPem == null || keyPem == null) {
                    throw new IllegalArgumentException("a client certificate needs both its PEM chain and its key");
                }
                Collection<? extends Certificate> chain = certificates(certPem);
                char[] none = new char[0];
                KeyStore keys = KeyStore.getInstance("PKCS12");
                keys.load(null, null);
                keys.setKeyEntry("client", privateKey(keyPem), none, chain.toArray(new Certificate[0]));
                kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                kmf.init(keys, none);
            }
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
            return ctx;
        } catch (GeneralSecurityException e) {
            throw new IOException("TLS context: " + e.getMessage(), e);
        }
    }

    private static Collection<? extends Certificate> certificates(Path pem) throws IOException {
        try (InputStream in = Files.newInputStream(pem)) {
            Collection<? extends Certificate> list = CertificateFactory.getInstance("X.509").generateCertificates(in);
            if (list.isEmpty()) {
                throw new IOException(pem + ": no certificate in it");
            }
            return list;
        } catch (GeneralSecurityException e) {
            throw new IOException(pem + ": " + e.getMessage(), e);
        }
    }

    private static PrivateKey privateKey(Path pem) throws IOException {
        String text = Files.readString(pem, StandardCharsets.US_ASCII);
        String begin = "-----BEGIN PRIVATE KEY-----";
        String end = "-----END PRIVATE KEY-----";
        int b = text.indexOf(begin);
        int e = text.indexOf(end);
        if (b < 0 || e < b) {
            throw new IOException(pem + ": no PKCS#8 \"PRIVATE KEY\" PEM block (convert with openssl pkcs8 -topk8 -nocrypt)");
        }
        byte[] der = Base64.getMimeDecoder().decode(text.substring(b + begin.length(), e));
        PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(der);
        for (String alg : new String[] {"EC", "RSA", "Ed25519"}) {
            try {
                return KeyFactory.getInstance(alg).generatePrivate(spec);
            } catch (GeneralSecurityException ignored) {
                // not this algorithm: try the next
            }
        }
        throw new IOException(pem + ": a private key that is not EC, RSA or Ed25519");
    }
}
