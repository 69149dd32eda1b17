// Tests of the C++ client: vectors ($LC_VECTORS), a fake server, and
// conformance against the real server at $LC_TEST_ADDRESS (skipped without).
#include "lockingcenter.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "support.hpp"

namespace lc = lockingcenter;
using namespace std::chrono_literals;
using support::json;

namespace {

std::string run_id() {
    static const std::string id = std::to_string(::getpid()) + "-" +
                                  std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
    return id;
}

std::string unique_key(const std::string& name) { return "cpp-test-" + run_id() + "-" + name; }

// Calls the client method for action with key.
void call_action(const lc::client& c, int action, const std::string& key) {
    switch (action) {
    case 1: c.lock(key, 1s); break;
    case 2: c.unlock(key); break;
    case 3: c.reset_key(key); break;
    case 4: c.reset_source(); break;
    case 5: (void)c.try_lock(key); break;
    default: FAIL() << "unknown action " << action;
    }
}

// ---- vectors ------------------------------------------------------------------

TEST(Vectors, FramesEncodeByteForByte) {
    json v = support::load_vectors();
    const auto& frames = v["frames"].items;
    ASSERT_FALSE(frames.empty());
    for (const auto& f : frames) {
        auto got = lc::encode(static_cast<lc::action>(static_cast<int>(f["action"].num)), f["key"].str, f["source"].str);
        EXPECT_EQ(got, support::unhex(f["hex"].str)) << f["name"].str;
    }
}

TEST(Vectors, InvalidRefusedBeforeConnecting) {
    json v = support::load_vectors();
    const auto& invalid = v["invalid"].items;
    ASSERT_FALSE(invalid.empty());
    for (const auto& f : invalid) {
        int action = static_cast<int>(f["action"].num);
        EXPECT_THROW(lc::encode(static_cast<lc::action>(action), f["key"].str, f["source"].str),
                     lc::invalid_argument_error)
            << f["name"].str;
        // Against an address nothing listens on: the validation error, not unreachable.
        EXPECT_THROW(
            {
                lc::client c(support::dead_address(), f["source"].str);
                call_action(c, action, f["key"].str);
            },
            lc::invalid_argument_error)
            << f["name"].str;
    }
}

TEST(Vectors, AnswersMapForEveryAction) {
    json v = support::load_vectors();
    const auto& answers = v["answers"].items;
    ASSERT_EQ(answers.size(), 3u);
    for (const auto& a : answers) {
        char b = static_cast<char>(support::unhex(a["hex"].str).at(0));
        ASSERT_EQ(std::string(1, b), a["char"].str);
        for (int action = 1; action <= 5; action++) {
            support::fake_server f(b);
            lc::client c(f.address(), "svc-a");
            SCOPED_TRACE(std::string("answer ") + b + " action " + std::to_string(action));
            if (action == 5) {
                if (b == '-') EXPECT_THROW((void)c.try_lock("abc"), lc::refused_error);
                else EXPECT_EQ(c.try_lock("abc"), b == '+');
            } else if (b == '+') {
                EXPECT_NO_THROW(call_action(c, action, "abc"));
            } else if (b == '#') {
                EXPECT_THROW(call_action(c, action, "abc"), lc::protocol_error);
            } else if (action == 1) {
                EXPECT_THROW(call_action(c, action, "abc"), lc::reset_error);
            } else {
                EXPECT_THROW(call_action(c, action, "abc"), lc::refused_error);
            }
            f.join();
            EXPECT_EQ(f.got, lc::encode(static_cast<lc::action>(action), action == 4 ? "" : "abc",
                                        action == 3 ? "" : "svc-a"));
        }
    }
}

// ---- offline behaviour --------------------------------------------------------------

TEST(Client, ParsesAddresses) {
    lc::client a("db.example:1234", "me");
    EXPECT_EQ(a.host(), "db.example");
    EXPECT_EQ(a.port(), "1234");
    EXPECT_EQ(a.source(), "me");
    lc::client b("host-only");
    EXPECT_EQ(b.port(), "22119");
    lc::client d;
    EXPECT_EQ(d.host(), "localhost");
    lc::client e("[::1]:99");
    EXPECT_EQ(e.host(), "::1");
    EXPECT_EQ(e.port(), "99");
    lc::client f("::1");
    EXPECT_EQ(f.host(), "::1");
    for (const char* bad : {"h:0", "h:65536", "h:x", ":80", "[::1", "[::1]x"})
        EXPECT_THROW(lc::client{bad}, lc::invalid_argument_error) << bad;
    EXPECT_THROW(lc::client("h", std::string(128, 's')), lc::invalid_argument_error);
}

TEST(Client, ErrorsShareOneBase) {
    static_assert(std::is_base_of_v<lc::error, lc::refused_error>);
    static_assert(std::is_base_of_v<lc::refused_error, lc::invalid_argument_error>);
    static_assert(std::is_base_of_v<lc::error, lc::reset_error>);
    static_assert(std::is_base_of_v<lc::error, lc::unreachable_error>);
    static_assert(std::is_base_of_v<lc::error, lc::timeout_error>);
    static_assert(std::is_base_of_v<lc::error, lc::canceled_error>);
    static_assert(std::is_base_of_v<lc::error, lc::protocol_error>);
    static_assert(std::is_base_of_v<lc::error, lc::system_error>);
    static_assert(std::is_base_of_v<std::system_error, lc::error>);
    static_assert(std::is_base_of_v<std::system_error, lc::system_error>);
    static_assert(std::is_base_of_v<lc::refused_error, lc::not_held_error>);
    static_assert(std::is_base_of_v<lc::error, lc::session_lost_error>);
    static_assert(!std::is_copy_constructible_v<lc::scoped_lock>);
    static_assert(std::is_nothrow_move_constructible_v<lc::scoped_lock>);
    SUCCEED();
}

TEST(Client, OverlongKeyRefusedBeforeConnecting) {
    lc::client c(support::dead_address());
    std::string key(128, 'k');
    EXPECT_THROW(c.lock(key), lc::invalid_argument_error);
    EXPECT_THROW(c.wait(key), lc::invalid_argument_error);
    EXPECT_THROW(c.unlock(key), lc::invalid_argument_error);
    EXPECT_THROW(lc::scoped_lock(c, key), lc::invalid_argument_error);
    EXPECT_THROW(c.reset_source(std::string(128, 's')), lc::invalid_argument_error);
    // The same client with a valid key connects and finds nobody.
    key.pop_back();
    try {
        c.unlock(key);
        FAIL() << "no exception";
    } catch (const lc::unreachable_error& e) {
        EXPECT_EQ(e.code(), lc::errc::unreachable);
        EXPECT_EQ(e.os_error(), std::errc::connection_refused);
    }
}

TEST(Client, ConnectTimeout) {
    // A listener that never accepts, its backlog filled: further SYNs are
    // dropped (Linux) and the connect hangs until the connect timeout.
    int port = 0;
    int lfd = support::listen_loopback(0, &port);
    std::vector<int> fill;
    for (int i = 0; i < 4; i++) {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
        fill.push_back(fd);
    }
    std::this_thread::sleep_for(50ms);
    std::string addr = "127.0.0.1:" + std::to_string(port);
    lc::options o;
    o.connect_timeout = 200ms;
    lc::client c(addr, "", o);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(c.lock("k"), lc::unreachable_error);
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(took, 150ms);
    EXPECT_LT(took, 3s);
    // The call's own timeout, when shorter, wins and says timeout.
    lc::client slow(addr);
    EXPECT_THROW(slow.lock("k", 200ms), lc::timeout_error);
    for (int fd : fill) ::close(fd);
    ::close(lfd);
}

TEST(FakeServer, ClosedWithoutAnswerIsUnreachable) {
    support::fake_server f(-1);
    lc::client c(f.address());
    EXPECT_THROW(c.lock("k", 2s), lc::unreachable_error);
}

TEST(FakeServer, TimeoutClosesTheSocket) {
    support::fake_server f(-2);
    lc::client c(f.address());
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(c.lock("k", 150ms), lc::timeout_error);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
    f.join();
    EXPECT_TRUE(f.saw_eof);
    EXPECT_FALSE(f.extra_connection());
    EXPECT_EQ(f.got.size(), 4u);
}

// A server that never closes after the hang-up: the timed-out lock reads on
// for the grace (give_up_grace, 2 s) and no longer, then throws the timeout.
// The fake closes 5 s after the EOF at the latest.
TEST(FakeServer, GiveUpWaitsAtMostTheGrace) {
    support::fake_server f(-4);
    lc::client c(f.address());
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(c.lock("k", 150ms), lc::timeout_error);
    auto took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(took_ms, 150 + 1900) << "the grace was not waited for";
    EXPECT_LT(took_ms, 3500) << "the grace was overstayed";
    f.join();
    EXPECT_TRUE(f.saw_eof);
    EXPECT_FALSE(f.extra_connection());
    EXPECT_EQ(f.got.size(), 4u);
}

// Cancels tok from another thread once the fake has the whole frame: the
// call is then waiting for its answer. Join the thread returned.
std::thread cancel_once_sent(support::fake_server& f, lc::cancel_token tok) {
    return std::thread([tok, &f] {
        f.await_frame();
        tok.cancel();
    });
}

TEST(FakeServer, CancelFromAnotherThreadClosesTheSocket) {
    support::fake_server f(-2);
    lc::client c(f.address());
    lc::cancel_token tok;
    EXPECT_FALSE(tok.cancelled());
    std::thread t = cancel_once_sent(f, tok);
    EXPECT_THROW(lc::scoped_lock(c, "k", tok), lc::canceled_error);
    t.join();
    f.join();
    EXPECT_TRUE(f.saw_eof);
    EXPECT_FALSE(f.extra_connection());
    EXPECT_TRUE(tok.cancelled());
    // A cancelled token fails at once, without connecting.
    lc::client dead(support::dead_address());
    EXPECT_THROW(dead.lock("k", tok), lc::canceled_error);
    tok.reset();
    EXPECT_FALSE(tok.cancelled());
    EXPECT_THROW(dead.lock("k", tok), lc::unreachable_error);
}

// A lock gives up (timeout or token) while the server's '+' is on its way:
// the client hangs up, the fake notices the EOF and 150 ms later the grant
// arrives. The call must succeed (the caller holds the key) rather than
// drop a key the server handed over, and connect nowhere else.
TEST(FakeServer, LateGrantOnTimeoutIsReturned) {
    support::fake_server f(-3);
    lc::client c(f.address());
    EXPECT_NO_THROW(c.lock("k", 150ms));
    f.join();
    EXPECT_TRUE(f.saw_eof);
    EXPECT_TRUE(f.sent_grant);
    EXPECT_FALSE(f.extra_connection());
}

TEST(FakeServer, LateGrantOnCancelIsReturned) {
    support::fake_server f(-3);
    lc::client c(f.address());
    lc::cancel_token tok;
    std::thread t = cancel_once_sent(f, tok);
    EXPECT_NO_THROW(c.lock("k", tok));
    t.join();
    f.join();
    EXPECT_TRUE(f.saw_eof);
    EXPECT_TRUE(f.sent_grant);
    EXPECT_FALSE(f.extra_connection());
}

// ---- conformance against the real server ------------------------------------------

class Server : public ::testing::Test {
protected:
    void SetUp() override {
        const char* a = std::getenv("LC_TEST_ADDRESS");
        if (a == nullptr || *a == '\0') GTEST_SKIP() << "LC_TEST_ADDRESS not set";
        address = a;
    }
    lc::client make(const std::string& source = "cpp-suite") const { return lc::client(address, source); }
    std::string address;
};

TEST_F(Server, LockUnlock) {
    auto c = make();
    auto key = unique_key("lock-unlock");
    c.lock(key, 5s);
    c.unlock(key);
    EXPECT_THROW(c.unlock(key), lc::refused_error);  // not held any more
    c.wait(key, 5s);
    c.reset_key(key);
}

TEST_F(Server, TryLockOnHeldKey) {
    auto a = make("cpp-suite-a"), b = make("cpp-suite-b");
    auto key = unique_key("trylock");
    EXPECT_TRUE(a.try_lock(key));
    EXPECT_FALSE(b.try_lock(key));
    {
        lc::scoped_lock held(b, key, std::try_to_lock);
        EXPECT_FALSE(held.owns_lock());
    }
    a.unlock(key);
    {
        lc::scoped_lock held(b, key, std::try_to_lock);
        EXPECT_TRUE(held);
        EXPECT_FALSE(a.try_lock(key));
    }
    EXPECT_TRUE(a.try_lock(key));  // the guard released it
    a.unlock(key);
}

TEST_F(Server, ScopedLockReleasesAndMoves) {
    auto c = make();
    auto key = unique_key("scoped");
    {
        lc::scoped_lock held(c, key, 5s);
        EXPECT_TRUE(held.owns_lock());
        lc::scoped_lock moved(std::move(held));
        EXPECT_FALSE(held.owns_lock());
        EXPECT_TRUE(moved.owns_lock());
        EXPECT_FALSE(c.try_lock(key));
    }
    EXPECT_TRUE(c.try_lock(key));
    {
        // Explicit unlock reports the error the destructor would swallow.
        lc::scoped_lock held(c, key + "-2", 5s);
        c.reset_key(key + "-2");
        EXPECT_THROW(held.unlock(), lc::refused_error);
        EXPECT_FALSE(held.owns_lock());
    }
    c.unlock(key);
}

TEST_F(Server, FifoOrder) {
    auto c = make("cpp-suite-fifo");
    auto key = unique_key("fifo");
    c.lock(key, 5s);
    std::mutex mu;
    std::vector<int> order;
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; i++) {
        threads.emplace_back([&, i] {
            lc::scoped_lock held(c, key, 10s);
            {
                std::lock_guard<std::mutex> g(mu);
                order.push_back(i);
            }
            std::this_thread::sleep_for(20ms);
        });
        support::let_queue(key, i + 1);
    }
    c.unlock(key);
    for (auto& t : threads) t.join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

// Holder holds key; a waiter gives up; the web API shows the queue empty
// again, and after the unlock the key is free (nobody got it behind our back).
void check_withdrawn(const lc::client& c, const std::string& key) {
    int q = -1;
    auto end = std::chrono::steady_clock::now() + 5s;
    while ((q = support::queue_length(key)) != 0 && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(20ms);
    EXPECT_EQ(q, 0) << "queue of " << key << " did not become empty (-1: web API unreachable)";
    c.unlock(key);
    EXPECT_TRUE(c.try_lock(key));
    c.unlock(key);
}

TEST_F(Server, TimeoutWithdrawsWaiter) {
    auto c = make("cpp-suite-withdraw");
    auto key = unique_key("timeout");
    c.lock(key, 5s);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(c.lock(key, 300ms), lc::timeout_error);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
    check_withdrawn(c, key);
}

TEST_F(Server, CancelWithdrawsWaiter) {
    auto c = make("cpp-suite-withdraw");
    auto key = unique_key("cancel");
    c.lock(key, 5s);
    lc::cancel_token tok;
    bool canceled = false;
    std::thread waiter([&] {
        try {
            c.lock(key, tok);
        } catch (const lc::canceled_error&) {
            canceled = true;
        }
    });
    support::let_queue(key, 1);
    tok.cancel();
    waiter.join();
    EXPECT_TRUE(canceled);
    check_withdrawn(c, key);
}

TEST_F(Server, ResetWhileWaiting) {
    auto a = make("cpp-suite-holder");
    std::string src = "cpp-suite-waiter-" + run_id();
    auto b = make(src);

    auto key = unique_key("reset-key");
    a.lock(key, 5s);
    std::thread w1([&] { EXPECT_THROW(b.lock(key, 10s), lc::reset_error); });
    support::let_queue(key, 1);
    a.reset_key(key);
    w1.join();
    EXPECT_THROW(a.unlock(key), lc::refused_error);  // the reset dropped the holder

    auto key2 = unique_key("reset-source");
    a.lock(key2, 5s);
    std::thread w2([&] { EXPECT_THROW(b.lock(key2, 10s), lc::reset_error); });
    support::let_queue(key2, 1);
    a.reset_source(src);
    w2.join();
    a.unlock(key2);  // the holder kept its key

    auto key3 = unique_key("reset-own");
    b.lock(key3, 5s);
    b.reset_source();  // its own source
    EXPECT_THROW(b.unlock(key3), lc::refused_error);
}

TEST_F(Server, WaitReturnsOnItsTurn) {
    auto c = make("cpp-suite-wait");
    auto key = unique_key("wait");
    c.lock(key, 5s);
    std::thread w([&] { EXPECT_NO_THROW(c.wait(key, 10s)); });
    support::let_queue(key, 1);
    c.unlock(key);
    w.join();
    EXPECT_TRUE(c.try_lock(key));  // the wait released it
    c.unlock(key);
}

TEST_F(Server, Utf8KeyAndSource) {
    auto c = make("h\xc3\xb4te-\xce\xb2");
    auto key = unique_key("\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87");
    lc::scoped_lock held(c, key, 5s);
    EXPECT_TRUE(held.owns_lock());
    EXPECT_NO_THROW(held.unlock());  // the destructor would swallow a refused unlock
}

}  // namespace
