// Tests of the C++ session layer: the session vectors through the codec
// wrappers, the error category, and against the real server at
// $LC_TEST_ADDRESS (web API at $LC_TEST_WEB_ADDRESS; own servers from
// $LC_SERVER_BIN for the restart and expiry cases). Skipped without them.
#include "lockingcenter.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
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
    return "cpp-session-" + id + "-" + name;
}

std::uint64_t dec(const json& v) { return std::stoull(v.str); }

// One HTTP/1.0 request; the status, the body in *body.
int http(const std::string& web, const std::string& method, const std::string& path, std::string* body = nullptr) {
    auto colon = web.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(web.substr(colon + 1))));
    std::string host = web.substr(0, colon);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &a.sin_addr) != 1 ||
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    std::string req = method + " " + path + " HTTP/1.0\r\nHost: " + web + "\r\nContent-Length: 0\r\n\r\n";
    ::send(fd, req.data(), req.size(), 0);
    std::string resp;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    int status = 0;
    if (std::sscanf(resp.c_str(), "HTTP/%*s %d", &status) != 1) return -1;
    auto b = resp.find("\r\n\r\n");
    if (body) *body = b == std::string::npos ? "" : resp.substr(b + 4);
    return status;
}

// Polls the web API until key has want waiters (the condition, not a pause).
bool queue_is(const std::string& key, int want, std::chrono::milliseconds limit = 5s) {
    auto end = clock_type::now() + limit;
    do {
        if (support::queue_length(key) == want) return true;
        std::this_thread::sleep_for(20ms);
    } while (clock_type::now() < end);
    return false;
}

// A server of the test's own from $LC_SERVER_BIN on free loopback ports.
class own_server {
public:
    explicit own_server(std::string data = {}, std::string auth = {}) : data_(std::move(data)), auth_(std::move(auth)) {
        port_ = free_port();
        do web_port_ = free_port();
        while (web_port_ == port_);
    }
    ~own_server() { stop(); }
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
    std::string web() const { return "127.0.0.1:" + std::to_string(web_port_); }
    /// Starts it and waits for /readyz; false when it did not come up.
    bool start() {
        const char* bin = std::getenv("LC_SERVER_BIN");
        std::string e_bind = "BIND_ADDRESS=" + address(), e_web = "WEB_ADDRESS=" + web(), e_data = "DATA_PATH=" + data_,
                    e_auth = "AUTH_TOKEN=" + auth_;
        std::vector<char*> env{e_bind.data(), e_web.data()};
        if (!data_.empty()) env.push_back(e_data.data());
        if (!auth_.empty()) env.push_back(e_auth.data());
        env.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
        char* argv[] = {const_cast<char*>(bin), nullptr};
        int rc = ::posix_spawn(&pid_, bin, &fa, nullptr, argv, env.data());
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) return false;
        auto end = clock_type::now() + 10s;
        while (clock_type::now() < end) {
            if (http(web(), "GET", "/readyz") == 200) return true;
            std::this_thread::sleep_for(20ms);
        }
        return false;
    }
    /// SIGTERM, then waits for the exit.
    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        int st;
        ::waitpid(pid_, &st, 0);
        pid_ = 0;
    }

private:
    static int free_port() {
        int port = 0;
        int fd = support::listen_loopback(1, &port);
        ::close(fd);
        return port;
    }
    std::string data_, auth_;
    int port_ = 0, web_port_ = 0;
    pid_t pid_ = 0;
};

// ---- vectors and errors ---------------------------------------------------------

TEST(SessionVectors, OpenAndRequestsByteForByte) {
    json v = support::load_vectors();
    for (const auto& e : v["session_open"].items) {
        EXPECT_EQ(lc::encode_open(static_cast<std::uint8_t>(e["version"].num), static_cast<std::uint32_t>(e["ttl_ms"].num),
                                  dec(e["resume"]), e["source"].str, e["auth"].str),
                  support::unhex(e["hex"].str))
            << e["name"].str;
    }
    for (const auto& e : v["session_open_invalid"].items) {
        EXPECT_THROW(lc::encode_open(1, 0, dec(e["resume"]), e["source"].str, e["auth"].str), lc::invalid_argument_error)
            << e["name"].str;
        lc::session_options o;
        o.source = e["source"].str;
        o.auth = e["auth"].str;
        EXPECT_THROW(lc::session(support::dead_address(), o), lc::invalid_argument_error) << e["name"].str;
    }
    for (const auto& e : v["session_requests"].items) {
        EXPECT_EQ(lc::encode_request(static_cast<lc::action>(static_cast<int>(e["action"].num)),
                                     static_cast<std::uint32_t>(e["id"].num), dec(e["token"]), e["key"].str),
                  support::unhex(e["hex"].str))
            << e["name"].str;
    }
    for (const auto& e : v["session_invalid"].items) {
        EXPECT_THROW(lc::encode_request(static_cast<lc::action>(static_cast<int>(e["action"].num)), 1, dec(e["token"]),
                                        e["key"].str),
                     lc::invalid_argument_error)
            << e["name"].str;
    }
    for (const auto& e : v["session_open_answers"].items) {
        auto b = support::unhex(e["hex"].str);
        ASSERT_EQ(b.size(), 13u);
        auto a = lc::decode_open_answer(b.data());
        EXPECT_EQ(std::string(1, a.status), e["status"].str);
        EXPECT_EQ(a.ttl_ms, static_cast<std::uint32_t>(e["ttl_ms"].num));
        EXPECT_EQ(a.session, dec(e["session"]));
    }
    for (const auto& e : v["session_answers"].items) {
        auto b = support::unhex(e["hex"].str);
        ASSERT_EQ(b.size(), 13u);
        auto a = lc::decode_answer(b.data());
        EXPECT_EQ(a.id, static_cast<std::uint32_t>(e["id"].num));
        EXPECT_EQ(std::string(1, a.status), e["status"].str);
        EXPECT_EQ(a.token, dec(e["token"]));
    }
    const auto& acts = v["session_actions"];
    EXPECT_EQ(acts["open"].num, static_cast<int>(lc::action::open));
    EXPECT_EQ(acts["cancel"].num, static_cast<int>(lc::action::cancel));
    EXPECT_EQ(acts["ping"].num, static_cast<int>(lc::action::ping));
    EXPECT_EQ(acts["close"].num, static_cast<int>(lc::action::close));
}

TEST(Errors, AreSystemErrorsOfTheLockingcenterCategory) {
    try {
        throw lc::timeout_error("lockingcenter: lock \"k\": timed out");
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code(), lc::errc::timeout);
        EXPECT_EQ(&e.code().category(), &lc::category());
        EXPECT_STREQ(e.code().category().name(), "lockingcenter");
        EXPECT_EQ(e.code().message(), "timed out");
        EXPECT_NE(e.code(), lc::errc::canceled);
    }
    lc::system_error s("lockingcenter: pipe", EMFILE);
    EXPECT_EQ(s.code(), lc::errc::system);
    EXPECT_EQ(s.os_error(), std::errc::too_many_files_open);
    EXPECT_EQ(lc::not_held_error("x").code(), lc::errc::not_held);
    std::error_code ec = lc::errc::session_lost;
    EXPECT_EQ(ec.message(), lc_strerror(LC_ERR_SESSION_LOST));
}

// ---- against the real server ---------------------------------------------------------

class Session : public ::testing::Test {
protected:
    void SetUp() override {
        const char* a = std::getenv("LC_TEST_ADDRESS");
        if (a == nullptr || *a == '\0') GTEST_SKIP() << "LC_TEST_ADDRESS not set";
        address = a;
        const char* w = std::getenv("LC_TEST_WEB_ADDRESS");
        web = w ? w : "";
    }
    lc::session open(const std::string& source, std::chrono::milliseconds ttl = 10s) const {
        lc::session_options o;
        o.source = source;
        o.ttl = ttl;
        return lc::session(address, o);
    }
    std::string address, web;
};

TEST_F(Session, GuardCarriesTheTokenAndTokensGrow) {
    auto s = open("cpp-session", 5s);
    auto t = open("cpp-session-t");
    EXPECT_NE(s.id(), 0u);
    EXPECT_EQ(s.ttl(), 5s);
    EXPECT_FALSE(s.error());
    auto key = key_for("guard");
    std::uint64_t first;
    {
        lc::session_lock held(s, key, 5s);
        first = held.token();
        EXPECT_NE(first, 0u);
        EXPECT_TRUE(held.owns_lock());
        EXPECT_EQ(t.try_lock(key), std::nullopt);
        EXPECT_THROW(t.unlock(key, first), lc::not_held_error);  // not its grant
        if (!web.empty()) {
            std::string body;
            EXPECT_EQ(http(web, "GET", "/api/v1/keys/" + key, &body), 200);
            EXPECT_NE(body.find("\"token\":" + std::to_string(first)), std::string::npos) << body;
            char sid[32];
            std::snprintf(sid, sizeof sid, "\"%016llx\"", static_cast<unsigned long long>(s.id()));
            EXPECT_NE(body.find(std::string("\"session\":") + sid), std::string::npos) << body;
        }
        lc::session_lock moved(std::move(held));
        EXPECT_FALSE(held.owns_lock());
        EXPECT_EQ(moved.token(), first);
    }
    // The guard released it by its token; a stale token releases nothing.
    auto again = t.try_lock(key);
    ASSERT_TRUE(again.has_value());
    EXPECT_GT(*again, first);
    EXPECT_THROW(t.unlock(key, first), lc::not_held_error);
    t.unlock(key, *again);
    std::uint64_t last = *again;
    for (int i = 0; i < 10; i++) {
        auto& who = i % 2 ? s : t;
        std::uint64_t tok = who.lock(key + "-" + std::to_string(i % 3), 5s);
        EXPECT_GT(tok, last);
        last = tok;
        who.unlock(key + "-" + std::to_string(i % 3), 0);  // 0: whatever it holds on the key
    }
    {
        lc::session_lock tried(s, key, std::try_to_lock);
        EXPECT_TRUE(tried);
        lc::session_lock not_won(t, key, std::try_to_lock);
        EXPECT_FALSE(not_won);
    }
    EXPECT_EQ(s.with_lock(key, [](std::uint64_t tok) { return tok != 0; }), true);
    s.close();
    t.close();
    EXPECT_EQ(s.error(), lc::errc::session_closed);
    EXPECT_THROW(s.lock(key), lc::session_closed_error);
}

TEST_F(Session, ManyThreadsOnOneSession) {
    auto s = open("cpp-threads");
    auto key = key_for("threads");
    std::atomic<int> inside{0}, worst{0}, errors{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 6; i++) {
        threads.emplace_back([&, i] {
            for (int j = 0; j < 20; j++) {
                try {
                    lc::session_lock own(s, key + "-own-" + std::to_string(i), 10s);
                    lc::session_lock shared(s, key, 10s);
                    int n = ++inside;
                    if (n > worst) worst = n;
                    --inside;
                    if (shared.token() <= own.token()) ++errors;
                    shared.unlock();
                    own.unlock();
                } catch (const lc::error& e) {
                    ADD_FAILURE() << e.what();
                    ++errors;
                }
            }
        });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(worst, 1);
}

TEST_F(Session, FifoAcrossTwoSessions) {
    if (support::queue_length("x") < 0) GTEST_SKIP() << "LC_TEST_WEB_ADDRESS needed";
    auto a = open("cpp-fifo-a"), b = open("cpp-fifo-b");
    auto key = key_for("fifo");
    std::uint64_t tok = a.lock(key, 5s);
    std::mutex mu;
    std::vector<int> order;
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; i++) {
        threads.emplace_back([&, i] {
            lc::session_lock held(i % 2 ? a : b, key, 15s);
            std::lock_guard<std::mutex> g(mu);
            order.push_back(i);
        });
        EXPECT_TRUE(queue_is(key, i + 1));
    }
    a.unlock(key, tok);
    for (auto& th : threads) th.join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST_F(Session, CancelAndTimeoutWithdrawTheWaiter) {
    if (support::queue_length("x") < 0) GTEST_SKIP() << "LC_TEST_WEB_ADDRESS needed";
    auto a = open("cpp-cancel-a"), b = open("cpp-cancel-b");
    auto key = key_for("cancel");
    std::uint64_t tok = a.lock(key, 5s);
    lc::cancel_token cancel;
    std::thread canceller([&] {
        queue_is(key, 1);
        cancel.cancel();
    });
    EXPECT_THROW(lc::session_lock(b, key, cancel), lc::canceled_error);
    canceller.join();
    EXPECT_TRUE(queue_is(key, 0));
    auto t0 = clock_type::now();
    EXPECT_THROW(b.lock(key, 300ms), lc::timeout_error);
    EXPECT_GE(clock_type::now() - t0, 300ms);
    EXPECT_TRUE(queue_is(key, 0));
    a.unlock(key, tok);
    auto got = b.try_lock(key);  // nobody was handed it behind our back
    ASSERT_TRUE(got.has_value());
    b.unlock(key, *got);
    EXPECT_FALSE(b.error());
}

// Ended from the web API: on_lost is called, error() says session_lost, the
// guard reports it, with_lock throws it, later calls throw it.
TEST_F(Session, LostSessionIsReported) {
    if (web.empty()) GTEST_SKIP() << "LC_TEST_WEB_ADDRESS needed";
    std::mutex mu;
    std::condition_variable cv;
    int told = 0;
    lc::session_options o;
    o.ttl = 10s;
    o.on_lost = [&](const lc::session_lost_error& e) {
        std::lock_guard<std::mutex> g(mu);
        EXPECT_EQ(e.code(), lc::errc::session_lost);
        told++;
        cv.notify_all();
    };
    lc::session s(address, o);
    auto key = key_for("lost");
    lc::session_lock held(s, key, 5s);
    char path[96];
    std::snprintf(path, sizeof path, "/api/v1/sessions/%016llx/end", static_cast<unsigned long long>(s.id()));
    EXPECT_EQ(http(web, "POST", path), 200);
    {
        std::unique_lock<std::mutex> g(mu);
        EXPECT_TRUE(cv.wait_for(g, 5s, [&] { return told > 0; }));
    }
    EXPECT_EQ(s.wait_end(1s), lc::errc::session_lost);
    EXPECT_TRUE(s.lost());
    EXPECT_TRUE(held.lost());
    EXPECT_THROW(held.check(), lc::session_lost_error);
    EXPECT_THROW(held.unlock(), lc::session_lost_error);
    EXPECT_THROW(s.lock(key, 1s), lc::session_lost_error);
    EXPECT_THROW(s.with_lock(key, [](std::uint64_t) {}), lc::session_lost_error);
    auto other = open("cpp-lost-next");
    auto got = other.try_lock(key);  // released by the end
    EXPECT_TRUE(got.has_value());
    EXPECT_THROW(s.close(), lc::session_lost_error);
    std::lock_guard<std::mutex> g(mu);
    EXPECT_EQ(told, 1);
}

// with_lock reports a loss that happened while its function ran.
TEST_F(Session, WithLockReportsALossDuringTheWork) {
    if (web.empty()) GTEST_SKIP() << "LC_TEST_WEB_ADDRESS needed";
    auto s = open("cpp-with-lock");
    auto key = key_for("with-lock");
    EXPECT_THROW(s.with_lock(key,
                             [&](std::uint64_t) {
                                 char path[96];
                                 std::snprintf(path, sizeof path, "/api/v1/sessions/%016llx/end",
                                               static_cast<unsigned long long>(s.id()));
                                 EXPECT_EQ(http(web, "POST", path), 200);
                                 s.wait_end(5s);
                             }),
                 lc::session_lost_error);
}

// A holder killed with SIGKILL: its keys pass on within TTL + 1 s.
TEST_F(Session, SigkilledHoldersKeysPassOn) {
    if (support::queue_length("x") < 0) GTEST_SKIP() << "LC_TEST_WEB_ADDRESS needed";
    constexpr int n = 10;
    auto base = key_for("kill");
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
        ::close(p[0]);
        try {
            lc::session_options o;
            o.ttl = 2s;
            o.source = "cpp-killed";
            lc::session s(address, o);
            for (int i = 0; i < n; i++) s.lock(base + "-" + std::to_string(i), 5s);
            [[maybe_unused]] ssize_t w = ::write(p[1], "r", 1);
            for (;;) ::pause();
        } catch (...) {
            ::_exit(1);
        }
    }
    ::close(p[1]);
    char r = 0;
    ASSERT_EQ(::read(p[0], &r, 1), 1);
    ::close(p[0]);
    auto s = open("cpp-next");
    std::vector<std::thread> threads;
    std::vector<clock_type::time_point> granted(n);
    for (int i = 0; i < n; i++) {
        threads.emplace_back([&, i] {
            lc::session_lock held(s, base + "-" + std::to_string(i), 20s);
            granted[static_cast<std::size_t>(i)] = clock_type::now();
        });
    }
    for (int i = 0; i < n; i++) EXPECT_TRUE(queue_is(base + "-" + std::to_string(i), 1));
    auto t0 = clock_type::now();
    ::kill(pid, SIGKILL);
    int st;
    ::waitpid(pid, &st, 0);
    for (auto& th : threads) th.join();
    auto worst = std::chrono::duration_cast<std::chrono::milliseconds>(
        *std::max_element(granted.begin(), granted.end()) - t0);
    std::fprintf(stderr, "  %d keys passed on %lld ms after SIGKILL at the latest (TTL 2000 ms)\n", n,
                 static_cast<long long>(worst.count()));
    EXPECT_LE(worst, 3000ms);
}

// A restart with DATA_PATH: the session resumes by itself and keeps its hold.
TEST(OwnServer, ResumeAfterRestartKeepsTheHold) {
    if (std::getenv("LC_SERVER_BIN") == nullptr) GTEST_SKIP() << "LC_SERVER_BIN not set";
    char dir[] = "/tmp/lc-cpp-test-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    std::string data = std::string(dir) + "/lock.wal";
    {
        own_server srv(data);
        ASSERT_TRUE(srv.start());
        std::atomic<int> told{0};
        lc::session_options o;
        o.ttl = 15s;
        o.on_lost = [&](const lc::session_lost_error&) { ++told; };
        lc::session s(srv.address(), o);
        lc::session_lock held(s, "held", 5s);
        lc::client v1(srv.address(), "cpp-v1");
        v1.lock("busy", 5s);
        std::uint64_t reissued = 0;  // written by waiter, read after its join
        std::thread waiter([&] {
            try {
                reissued = s.lock("busy", 20s);
            } catch (const lc::error& e) {
                ADD_FAILURE() << "the waiting lock was not reissued: " << e.what();
            }
        });
        auto end = clock_type::now() + 5s;
        std::string body;
        while (clock_type::now() < end &&
               !(http(srv.web(), "GET", "/api/v1/keys/busy", &body) == 200 && body.find("\"queue\":[{") != std::string::npos))
            std::this_thread::sleep_for(20ms);
        srv.stop();
        bool started = srv.start();
        EXPECT_TRUE(started);
        end = clock_type::now() + 10s;
        while (clock_type::now() < end && !s.connected()) std::this_thread::sleep_for(20ms);
        EXPECT_TRUE(s.connected());
        EXPECT_FALSE(s.error());
        EXPECT_EQ(s.try_lock("busy"), std::nullopt);  // the v1 hold was restored
        // The waiting lock was reissued after the resume: it waits behind the
        // restored v1 hold and gets the key when that goes.
        end = clock_type::now() + 5s;
        while (clock_type::now() < end &&
               !(http(srv.web(), "GET", "/api/v1/keys/busy", &body) == 200 && body.find("\"waiters\":1") != std::string::npos))
            std::this_thread::sleep_for(20ms);
        v1.unlock("busy");
        waiter.join();
        EXPECT_GT(reissued, held.token());
        if (reissued) s.unlock("busy", reissued);
        auto other = s.try_lock("other");
        ASSERT_TRUE(other.has_value());
        EXPECT_GT(*other, held.token());
        EXPECT_NO_THROW(held.unlock());  // the same token: the hold survived
        s.close();
        EXPECT_EQ(told, 0);
    }
    ::unlink(data.c_str());
    ::rmdir(dir);
}

// The server gone for good: the session is lost one TTL after its last
// answered request, and told once.
TEST(OwnServer, SessionLostPastItsTtl) {
    if (std::getenv("LC_SERVER_BIN") == nullptr) GTEST_SKIP() << "LC_SERVER_BIN not set";
    own_server srv;
    ASSERT_TRUE(srv.start());
    std::atomic<int> told{0};
    lc::session_options o;
    o.ttl = 1s;
    o.on_lost = [&](const lc::session_lost_error&) { ++told; };
    lc::session s(srv.address(), o);
    lc::session_lock held(s, "k", 5s);
    auto t0 = clock_type::now();
    srv.stop();
    EXPECT_EQ(s.wait_end(5s), lc::errc::session_lost);
    EXPECT_LE(clock_type::now() - t0, 1500ms);
    EXPECT_THROW(held.check(), lc::session_lost_error);
    EXPECT_EQ(told, 1);
}

// AUTH_TOKEN: refused without it (refused_error), served with it.
TEST(OwnServer, AuthToken) {
    if (std::getenv("LC_SERVER_BIN") == nullptr) GTEST_SKIP() << "LC_SERVER_BIN not set";
    own_server srv({}, "s3cret-token");
    ASSERT_TRUE(srv.start());
    EXPECT_THROW(lc::session{srv.address()}, lc::refused_error);
    lc::session_options o;
    o.auth = "s3cret-token";
    lc::session s(srv.address(), o);
    lc::session_lock held(s, "k", 5s);
    EXPECT_NE(held.token(), 0u);
}

}  // namespace
