// Tests of the C++ client against a real 3-node cluster and real TLS
// servers, through the fixture clients/run-tests starts (LC_TEST_CLUSTER,
// LC_TEST_CLUSTER_CONTROL, LC_TEST_LOST_ANSWER_PREFIX, LC_TEST_TLS_ADDRESS,
// LC_TEST_MTLS_ADDRESS, LC_TEST_TLS_DIR). Without them they skip, loudly;
// with CI=true they fail instead.
#include "lockingcenter.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace lc = lockingcenter;
using namespace std::chrono_literals;
using support::json;
using clock_type = std::chrono::steady_clock;

namespace {

std::string key_for(const std::string& name) {
    static const std::string id = std::to_string(::getpid()) + "-" +
                                  std::to_string(clock_type::now().time_since_epoch().count() % 1000000);
    return "cpp-cluster-" + id + "-" + name;
}

/// The fixture's variable; empty when unset (the caller skips, or fails
/// under CI=true: see NEED).
std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

bool in_ci() { return env("CI") == "true"; }

#define NEED(var)                                                                               \
    do {                                                                                        \
        if (env(var).empty()) {                                                                 \
            if (in_ci()) FAIL() << var << " not set under CI=true (clients/run-tests starts the fixture)"; \
            GTEST_SKIP() << var << " not set: SKIPPED (clients/run-tests starts the fixture)";  \
        }                                                                                       \
    } while (0)

/// One HTTP/1.0 request; the status and body.
std::pair<int, std::string> http(const std::string& addr, const std::string& method, const std::string& path) {
    auto colon = addr.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(addr.substr(colon + 1))));
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::inet_pton(AF_INET, addr.substr(0, colon).c_str(), &a.sin_addr) != 1 ||
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return {-1, ""};
    }
    std::string req = method + " " + path + " HTTP/1.0\r\nHost: " + addr + "\r\nContent-Length: 0\r\n\r\n";
    ::send(fd, req.data(), req.size(), 0);
    std::string resp;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    int status = -1;
    std::sscanf(resp.c_str(), "HTTP/%*s %d", &status);
    auto body = resp.find("\r\n\r\n");
    return {status, body == std::string::npos ? "" : resp.substr(body + 4)};
}

json control(const std::string& path) {
    auto [status, body] = http(env("LC_TEST_CLUSTER_CONTROL"), "POST", path);
    if (status != 200) throw std::runtime_error("fixture " + path + ": status " + std::to_string(status));
    return support::json_parser(body).parse();
}

/// The address ("address") or web address ("web") of the leader or of a follower.
std::string node(bool leader, const char* field) {
    json v = control("/await-leader");
    for (const auto& n : v["nodes"].items) {
        if ((n["leader"].num != 0) == leader && n["up"].num != 0) return n[field].str;
    }
    throw std::runtime_error("no such node");
}

/// Waits until the leader's queue of key has want waiters (queues live on the leader).
bool leader_waiters(const std::string& web, const std::string& key, int want) {
    auto end = clock_type::now() + 10s;
    while (clock_type::now() < end) {
        auto [status, body] = http(web, "GET", "/api/v1/keys/" + key);
        if (status == 200 && static_cast<int>(support::json_parser(body).parse()["waiters"].num) == want) return true;
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

lc::session_options cluster_options() {
    lc::session_options o;
    o.source = "cpp-cluster-test";
    o.ttl = 10s;
    o.connect_timeout = 3s;
    return o;
}

// A session holding 10 keys and waiting on 10 more (held by a second
// session) rides through kill -9 of the leader: holds and tokens kept,
// nothing granted twice, the reissued locks granted once the other lets go.
TEST(Cluster, FailoverKillLeader) {
    NEED("LC_TEST_CLUSTER");
    NEED("LC_TEST_CLUSTER_CONTROL");
    control("/await-leader");
    const std::string nodes = env("LC_TEST_CLUSTER");
    lc::session a(nodes, cluster_options()), b(nodes, cluster_options());
    constexpr int n = 10;
    std::vector<std::string> held, wanted;
    std::vector<std::uint64_t> tokens, btokens;
    for (int i = 0; i < n; i++) {
        held.push_back(key_for("held-" + std::to_string(i)));
        wanted.push_back(key_for("wait-" + std::to_string(i)));
        tokens.push_back(a.lock(held.back(), 10s));
        btokens.push_back(b.lock(wanted.back(), 10s));
    }
    std::mutex mu;  // guards got and done
    std::vector<std::uint64_t> got(n);
    std::vector<bool> done(n);
    std::vector<std::thread> waiters;
    for (int i = 0; i < n; i++) {
        waiters.emplace_back([&, i] {
            std::uint64_t t = 0;
            try {
                t = a.lock(wanted[i], 60s);
            } catch (const lc::error& e) {
                ADD_FAILURE() << "reissued lock: " << e.what();
            }
            std::lock_guard<std::mutex> g(mu);
            got[i] = t;
            done[i] = true;
        });
    }
    const std::string web = node(true, "web");
    for (int i = 0; i < n; i++) EXPECT_TRUE(leader_waiters(web, wanted[i], 1)) << wanted[i];

    auto killed_at = clock_type::now();
    json killed = control("/kill-leader");
    auto probe = key_for("probe");
    auto t = a.try_lock(probe);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - killed_at).count();
    EXPECT_TRUE(t.has_value());
    if (t) a.unlock(probe, *t);
    std::printf("  failover: killed %s; the session answered again %lld ms after the kill -9\n",
                killed["killed"].str.c_str(), static_cast<long long>(ms));
    std::fflush(stdout);

    EXPECT_FALSE(a.lost());
    EXPECT_FALSE(b.lost());
    for (int i = 0; i < n; i++) {
        EXPECT_FALSE(a.try_lock(wanted[i]).has_value());  // still b's: nothing granted twice
        EXPECT_FALSE(a.try_lock(held[i]).has_value());
        std::lock_guard<std::mutex> g(mu);
        EXPECT_FALSE(done[i]);
    }
    for (int i = 0; i < n; i++) b.unlock(wanted[i], btokens[i]);
    for (auto& w : waiters) w.join();
    for (int i = 0; i < n; i++) {
        EXPECT_GT(got[i], btokens[i]);
        a.unlock(held[i], tokens[i]);  // the grant made before the kill, same token
        if (got[i]) a.unlock(wanted[i], got[i]);
    }
    a.close();
    b.close();
    control("/restart");
}

// A Lock whose answer the leader never sends (it kills itself after the
// commit) gets its grant through the reissue, not a wait behind itself.
TEST(Cluster, LostAnswerReissued) {
    NEED("LC_TEST_CLUSTER");
    NEED("LC_TEST_CLUSTER_CONTROL");
    NEED("LC_TEST_LOST_ANSWER_PREFIX");
    control("/await-leader");
    lc::session s(env("LC_TEST_CLUSTER"), cluster_options());
    const std::string key = env("LC_TEST_LOST_ANSWER_PREFIX") + "cpp-" + key_for("lost");
    auto t0 = clock_type::now();
    std::uint64_t token = s.lock(key, 30s);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
    EXPECT_NE(token, 0u);
    std::printf("  lost answer: the reissued lock got its grant %lld ms after it was sent\n",
                static_cast<long long>(ms));
    std::fflush(stdout);
    EXPECT_FALSE(s.try_lock(key).has_value());
    s.unlock(key, token);
    s.close();
    control("/restart");
}

// A follower's address alone works; so does a list whose other address is dead.
TEST(Cluster, FollowerAddress) {
    NEED("LC_TEST_CLUSTER");
    NEED("LC_TEST_CLUSTER_CONTROL");
    const std::string follower = node(false, "address");
    for (const std::string& addr : {follower, support::dead_address() + "," + follower}) {
        auto key = key_for("follower");
        lc::session s(addr, cluster_options());
        std::uint64_t token = s.lock(key, 10s);
        EXPECT_FALSE(s.try_lock(key).has_value());
        s.unlock(key, token);
        s.close();
        lc::client c(addr, "cpp-cluster-v1");
        EXPECT_TRUE(c.try_lock(key));
        c.unlock(key);
    }
    lc::client two("127.0.0.1:1, [::1]:2");
    EXPECT_EQ(two.addresses(), (std::vector<std::string>{"127.0.0.1:1", "[::1]:2"}));
}

lc::tls_config tls(const std::string& ca, bool client_cert, const std::string& name = {}) {
    const std::string dir = env("LC_TEST_TLS_DIR");
    lc::tls_options o;
    o.ca_file = dir + "/" + ca;
    if (client_cert) {
        o.cert_file = dir + "/client.pem";
        o.key_file = dir + "/client-key.pem";
    }
    o.server_name = name;
    return lc::tls_config(o);
}

lc::session_options tls_session(const lc::tls_config& t) {
    lc::session_options o;
    o.tls = t;
    o.connect_timeout = 3s;
    return o;
}

TEST(Tls, SessionAndClient) {
    NEED("LC_TEST_TLS_ADDRESS");
    NEED("LC_TEST_TLS_DIR");
    if (!lc::tls_config::available()) {
        EXPECT_THROW(tls("ca.pem", false), lc::unsupported_error);
        GTEST_SKIP() << "this build has no TLS (no OpenSSL)";
    }
    const std::string addr = env("LC_TEST_TLS_ADDRESS");
    const std::string by_name = "localhost" + addr.substr(addr.rfind(':'));
    lc::tls_config t = tls("ca.pem", false);
    for (const auto& a : {addr, by_name}) {
        auto key = key_for("tls");
        lc::session s(a, tls_session(t));
        {
            lc::session_lock held(s, key, 5s);
            EXPECT_NE(held.token(), 0u);
            EXPECT_FALSE(s.try_lock(key).has_value());
        }
        s.close();
        lc::options o;
        o.tls = t;
        lc::client c(a, "cpp-tls-v1", o);
        c.lock(key, 5s);
        EXPECT_FALSE(c.try_lock(key));
        c.unlock(key);
    }
}

TEST(Tls, WrongNameAndOtherCaRefused) {
    NEED("LC_TEST_TLS_ADDRESS");
    NEED("LC_TEST_TLS_DIR");
    if (!lc::tls_config::available()) GTEST_SKIP() << "this build has no TLS (no OpenSSL)";
    const std::string addr = env("LC_TEST_TLS_ADDRESS");
    for (const auto& t : {tls("ca.pem", false, "wrong.invalid"), tls("other-ca.pem", false)}) {
        EXPECT_THROW(lc::session(addr, tls_session(t)), lc::tls_error);
        lc::options o;
        o.tls = t;
        EXPECT_THROW(lc::client(addr, "", o).try_lock(key_for("tls-refused")), lc::tls_error);
    }
    EXPECT_THROW(tls("no-such-ca.pem", false), lc::tls_error);
}

TEST(Tls, Mutual) {
    NEED("LC_TEST_MTLS_ADDRESS");
    NEED("LC_TEST_TLS_DIR");
    if (!lc::tls_config::available()) GTEST_SKIP() << "this build has no TLS (no OpenSSL)";
    const std::string addr = env("LC_TEST_MTLS_ADDRESS");
    auto key = key_for("mtls");
    lc::session s(addr, tls_session(tls("ca.pem", true)));
    s.unlock(key, s.lock(key, 5s));
    s.close();
    try {
        lc::session refused(addr, tls_session(tls("ca.pem", false)));
        ADD_FAILURE() << "a session without a client certificate was opened";
    } catch (const lc::tls_error&) {
    } catch (const lc::unreachable_error&) {
    }
}

}  // namespace
