package io.lockingcenter;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/** Loads the shared test vectors: $LC_VECTORS, else the repository's wire/testdata/vectors.json. */
final class Vectors {
    private Vectors() {}

    static Path path() {
        String env = System.getenv("LC_VECTORS");
        if (env != null && !env.isEmpty()) {
            return Path.of(env);
        }
        return Path.of("..", "..", "wire", "testdata", "vectors.json").toAbsolutePath().normalize();
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> load() throws IOException {
        return TestServer.JSON.readValue(Files.readString(path(), StandardCharsets.UTF_8), Map.class);
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> list(String name) throws IOException {
        return (List<Map<String, Object>>) load().get(name);
    }

    /** The action of a frame or invalid entry. */
    static Action action(Map<String, Object> v) {
        return Action.fromCode(((Number) v.get("action")).intValue());
    }

    static byte[] hex(String hex) {
        byte[] b = new byte[hex.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }

    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) {
            s.append(String.format("%02x", x));
        }
        return s.toString();
    }

    /** A loopback port nothing listens on (bound, then released). */
    static int deadPort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }
}
