package io.lockingcenter;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

/**
 * Helpers for tests against real servers: the JSON API of the shared server
 * ($LC_TEST_WEB_ADDRESS), and servers of a test's own started from $LC_SERVER_BIN on free loopback
 * ports (stopped by their PID with SIGTERM).
 */
final class TestServer implements AutoCloseable {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String SHARED = System.getenv("LC_TEST_ADDRESS");
    static final String SHARED_WEB = System.getenv("LC_TEST_WEB_ADDRESS");
    static final String BIN = System.getenv("LC_SERVER_BIN");

    final String address;
    final String web;
    private final Process process;
    private final Path log;

    private TestServer(String address, String web, Process process, Path log) {
        this.address = address;
        this.web = web;
        this.process = process;
        this.log = log;
    }

    /** A free loopback port (bound, then released). */
    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    /** Starts $LC_SERVER_BIN with env on free ports (or the given TCP port when not 0) and waits for /readyz. */
    static TestServer start(int tcpPort, Map<String, String> env) throws Exception {
        int tcp = tcpPort != 0 ? tcpPort : freePort();
        int webPort = freePort();
        Path log = Files.createTempFile("lc-server", ".log");
        ProcessBuilder pb = new ProcessBuilder(BIN);
        pb.environment().putAll(env);
        pb.environment().put("BIND_ADDRESS", "127.0.0.1:" + tcp);
        pb.environment().put("WEB_ADDRESS", "127.0.0.1:" + webPort);
        pb.redirectErrorStream(true).redirectOutput(log.toFile());
        TestServer s = new TestServer("127.0.0.1:" + tcp, "127.0.0.1:" + webPort, pb.start(), log);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (System.nanoTime() < deadline) {
            if (!s.process.isAlive()) {
                throw new IllegalStateException("server exited: " + Files.readString(log));
            }
            if (get(s.web, "/readyz") != null) {
                return s;
            }
            Thread.sleep(20);
        }
        s.close();
        throw new IllegalStateException("server not ready: " + Files.readString(log));
    }

    /** SIGTERM by PID, then waits for the exit. */
    @Override
    public void close() throws InterruptedException {
        process.destroy(); // SIGTERM
        if (!process.waitFor(10, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            process.waitFor();
        }
        try {
            Files.deleteIfExists(log);
        } catch (IOException e) {
            // a temp file left behind
        }
    }

    /** GET path on a web address: the body of a 200, else null. */
    static String get(String web, String path) {
        try {
            HttpURLConnection c = (HttpURLConnection) URI.create("http://" + web + path).toURL().openConnection();
            c.setConnectTimeout(2000);
            c.setReadTimeout(2000);
            if (c.getResponseCode() != 200) {
                c.disconnect();
                return null;
            }
            try (InputStream in = c.getInputStream()) {
                return new String(in.readAllBytes(), StandardCharsets.UTF_8);
            }
        } catch (IOException | IllegalArgumentException e) {
            return null;
        }
    }

    /** POST an empty body: the status code. */
    static int post(String web, String path) throws IOException {
        HttpURLConnection c = (HttpURLConnection) URI.create("http://" + web + path).toURL().openConnection();
        c.setRequestMethod("POST");
        c.setDoOutput(true);
        c.setRequestProperty("Content-Type", "application/json");
        c.getOutputStream().close();
        int code = c.getResponseCode();
        c.disconnect();
        return code;
    }

    /** GET /api/v1/keys/{key}: the JSON, or null when the key is not held. */
    static JsonNode keyInfo(String web, String key) {
        String body = get(web, "/api/v1/keys/" + URLEncoder.encode(key, StandardCharsets.UTF_8).replace("+", "%20"));
        if (body == null) {
            return null;
        }
        try {
            return JSON.readTree(body);
        } catch (IOException e) {
            throw new IllegalStateException("bad JSON from the server: " + body, e);
        }
    }

    /** The length of a key's "queue", or -1 when the key is not held. */
    static int queueLength(String web, String key) {
        JsonNode n = keyInfo(web, key);
        return n == null ? -1 : n.get("queue").size();
    }

    /** Polls until the condition holds on the key's JSON (null when not held), or fails after 5 s. */
    static JsonNode awaitKey(String web, String key, Predicate<JsonNode> condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        JsonNode last = null;
        while (System.nanoTime() < deadline) {
            last = keyInfo(web, key);
            if (condition.test(last)) {
                return last;
            }
            Thread.sleep(20);
        }
        throw new AssertionError("key " + key + " never showed " + what + "; last answer: " + last);
    }

    /** The classpath of this test run, for child JVMs. */
    static String classpath() {
        return System.getProperty("java.class.path") + File.pathSeparator + System.getProperty("surefire.test.class.path", "");
    }
}
