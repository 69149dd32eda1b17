package io.lockingcenter;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Sessions against a real 3-node cluster ($LC_TEST_CLUSTER, its control API
 * $LC_TEST_CLUSTER_CONTROL): a failover by kill -9 of the leader, a grant whose answer is lost
 * ($LC_TEST_LOST_ANSWER_PREFIX), a follower's address alone. Skipped loudly without the cluster;
 * under CI=true that is a failure.
 */
class ClusterTest {
    private static final String RUN = UUID.randomUUID().toString().substring(0, 8);
    private static final String CLUSTER = System.getenv("LC_TEST_CLUSTER");
    private static final String CONTROL = System.getenv("LC_TEST_CLUSTER_CONTROL");

    @BeforeEach
    void cluster() {
        if (CLUSTER == null || CLUSTER.isEmpty() || CONTROL == null || CONTROL.isEmpty()) {
            if ("true".equals(System.getenv("CI"))) {
                fail("LC_TEST_CLUSTER / LC_TEST_CLUSTER_CONTROL unset under CI=true");
            }
            System.err.println("SKIPPED ClusterTest: LC_TEST_CLUSTER unset (no cluster to test against)");
            Assumptions.abort("LC_TEST_CLUSTER unset");
        }
    }

    private static String key(String name) {
        return "java-cluster-" + RUN + "-" + name;
    }

    private static Session open(String addresses, String source) {
        return Session.builder().address(addresses).source(source).ttl(Duration.ofSeconds(10)).open();
    }

    /** One request to the fixture's control API: its JSON answer. */
    static JsonNode control(String method, String path) throws IOException {
        HttpURLConnection c = (HttpURLConnection) URI.create("http://" + CONTROL + path).toURL().openConnection();
        c.setRequestMethod(method);
        c.setConnectTimeout(5000);
        c.setReadTimeout(60000);
        if (method.equals("POST")) {
            c.setDoOutput(true);
            c.getOutputStream().close();
        }
        int code = c.getResponseCode();
        try (InputStream in = code == 200 ? c.getInputStream() : c.getErrorStream()) {
            String body = in == null ? "" : new String(in.readAllBytes(), StandardCharsets.UTF_8);
            assertEquals(200, code, method + " " + path + ": " + body);
            return TestServer.JSON.readTree(body);
        }
    }

    /** Restarts every killed node when closed: a 3-node cluster survives one node down, not two. */
    private static AutoCloseable restartAfter() {
        return () -> control("POST", "/restart");
    }

    /** The key as the leader sees it (?consistent=1 through any live node's web port); null when not held. */
    private static JsonNode atLeader(String key) throws IOException {
        for (JsonNode n : control("GET", "/nodes").get("nodes")) {
            if (!n.path("up").asBoolean()) {
                continue;
            }
            HttpURLConnection c = (HttpURLConnection) URI.create("http://" + n.get("web").asText() + "/api/v1/keys/" + key
                    + "?consistent=1").toURL().openConnection();
            c.setConnectTimeout(2000);
            c.setReadTimeout(10000);
            try {
                int code = c.getResponseCode();
                if (code == 404) {
                    return null;
                }
                if (code == 200) {
                    try (InputStream in = c.getInputStream()) {
                        return TestServer.JSON.readTree(in);
                    }
                }
            } catch (IOException e) {
                // that node is going down: ask another
            }
        }
        throw new AssertionError("no node answered for " + key);
    }

    @Test
    void aSessionRidesThroughAKillOfTheLeader() throws Exception {
        control("POST", "/await-leader");
        try (Session s = open(CLUSTER, "java-failover"); Session holder = open(CLUSTER, "java-failover-holder");
                Session other = open(CLUSTER, "java-failover-other")) {
            List<SessionLock> held = new ArrayList<>();
            List<SessionLock> blockers = new ArrayList<>();
            List<CompletableFuture<SessionLock>> waits = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                held.add(s.lock(key("held-" + i)));
                blockers.add(holder.lock(key("wait-" + i)));
            }
            for (int i = 0; i < 10; i++) {
                waits.add(s.lockAsync(key("wait-" + i)));
            }
            for (int i = 0; i < 10; i++) {
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (true) {
                    JsonNode n = atLeader(key("wait-" + i));
                    if (n != null && n.get("queue").size() == 1) {
                        break;
                    }
                    assertTrue(System.nanoTime() < until, "the Lock of wait-" + i + " did not queue");
                    Thread.sleep(20);
                }
            }
            try (AutoCloseable restart = restartAfter()) {
                long killed = System.nanoTime();
                JsonNode k = control("POST", "/kill-leader");
                assertFalse(k.path("killed").asText().isEmpty(), k.toString());
                // Working again: a request made now is answered after the resume.
                try (SessionLock probe = s.tryLockOrThrow(key("probe"))) {
                    System.out.println("session: failover: the session works again "
                            + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killed) + " ms after kill -9 of the leader");
                }
                assertTrue(s.isOpen() && holder.isOpen());
                // Holds kept with their tokens; none granted to anyone else.
                for (SessionLock l : held) {
                    JsonNode n = atLeader(l.key());
                    assertNotNull(n, l.key() + " still held");
                    assertEquals(l.token(), n.get("token").asLong(), l.key());
                    assertEquals(s.idHex(), n.get("session").asText());
                    assertTrue(other.tryLock(l.key()).isEmpty(), l.key() + " granted twice");
                }
                // The waits were reissued: each is granted when its key is released, in that order.
                for (CompletableFuture<SessionLock> w : waits) {
                    assertFalse(w.isDone(), "a wait was granted while its key was held");
                }
                Set<Long> tokens = new HashSet<>();
                for (SessionLock l : held) {
                    tokens.add(l.token());
                }
                for (int i = 0; i < 10; i++) {
                    long before = blockers.get(i).token();
                    blockers.get(i).unlock();
                    SessionLock got = waits.get(i).get(20, TimeUnit.SECONDS);
                    for (int j = i + 1; j < 10; j++) {
                        assertFalse(waits.get(j).isDone(), "wait " + j + " granted when " + i + " was released");
                    }
                    assertTrue(got.token() > before, "token " + got.token() + " after " + before);
                    assertEquals(got.token(), atLeader(got.key()).get("token").asLong());
                    assertTrue(tokens.add(got.token()), "a token given twice");
                }
            }
        }
    }

    @Test
    void aLockWhoseAnswerIsLostIsReissuedAndReturnsItsGrant() throws Exception {
        String prefix = System.getenv("LC_TEST_LOST_ANSWER_PREFIX");
        assertNotNull(prefix, "LC_TEST_LOST_ANSWER_PREFIX");
        control("POST", "/await-leader");
        try (AutoCloseable restart = restartAfter(); Session s = open(CLUSTER, "java-lost-answer")) {
            String k = prefix + key("lost");
            long started = System.nanoTime();
            // The leader dies after the grant commits, before its '+' is sent.
            try (SessionLock l = s.lock(k, Duration.ofSeconds(30))) {
                System.out.println("session: lost answer: the grant came back "
                        + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started) + " ms after the Lock (through the reissue)");
                JsonNode n = atLeader(k);
                assertNotNull(n, "held");
                assertEquals(l.token(), n.get("token").asLong());
                assertEquals(s.idHex(), n.get("session").asText());
                assertEquals(0, n.get("queue").size(), "waiting behind itself");
            }
            assertNull(atLeader(k));
        }
    }

    @Test
    void aFollowerAddressAloneWorks() throws Exception {
        String follower = null;
        for (JsonNode n : control("POST", "/await-leader").get("nodes")) {
            if (n.path("up").asBoolean() && !n.path("leader").asBoolean()) {
                follower = n.get("address").asText();
            }
        }
        assertNotNull(follower, "a follower");
        String k = key("follower");
        try (Session s = open(follower, "java-follower")) {
            try (SessionLock l = s.lock(k)) {
                assertTrue(l.token() > 0);
                assertTrue(s.tryLock(k).isEmpty());
            }
        }
        LockingCenter v1 = LockingCenter.builder().address(follower).build();
        v1.lock(k);
        assertFalse(v1.tryLock(k));
        v1.unlock(k);
    }

    @Test
    void aListWithDeadAddressesOpensOnALiveOne() throws Exception {
        List<String> list = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            try (ServerSocket free = new ServerSocket(0)) {
                list.add("127.0.0.1:" + free.getLocalPort()); // nothing listens there once closed
            }
        }
        list.addAll(List.of(CLUSTER.split(",")));
        for (int i = 0; i < 5; i++) {
            try (Session s = Session.builder().addresses(list).open()) {
                assertTrue(s.isOpen());
            }
        }
        // The v1 client too: each request tries the next address when one refuses.
        LockingCenter v1 = LockingCenter.builder().address(String.join(",", list)).build();
        String k = key("v1-list");
        for (int i = 0; i < 5; i++) {
            v1.lock(k);
            v1.unlock(k);
            v1.lockAsync(k).get(10, TimeUnit.SECONDS);
            v1.unlockAsync(k).get(10, TimeUnit.SECONDS);
        }
    }
}
