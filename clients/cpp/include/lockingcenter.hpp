// lockingcenter.hpp - header-only C++17 client for the Locking-Center lock server.
//
// Wire protocol (one request per TCP connection):
//
//   request : [action:1][keySize:1][key:keySize][sourceSize:1][source:sourceSize]
//   answer  : one byte, '+' success, '-' failure, '#' try-lock not won
//
// Every call connects, writes the whole frame in one write, reads exactly one
// byte and closes the socket. Giving up on a waiting lock (timeout or
// cancel_token) shuts down the socket's write side, so the server withdraws
// the waiter, and reads on for up to 2 s: a grant that crossed the hang-up
// makes the call succeed (the key is then held) instead of being lost.
//
// Thread safety: a client holds only its address, source and timeouts and
// never changes after construction; every call opens its own socket, so one
// client may be used by many threads at once. A cancel_token may be cancelled
// from any thread. A scoped_lock is an ordinary object: one owner at a time.
//
// POSIX only (Linux, macOS, the BSDs). No dependency beyond the standard
// library and the system's socket API.
#ifndef LOCKINGCENTER_HPP
#define LOCKINGCENTER_HPP

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lockingcenter {

inline constexpr const char* version = "0.1.0";
/// Default TCP port of the lock protocol.
inline constexpr const char* default_port = "22119";
/// Longest key or source in bytes (sizes are signed bytes on the wire).
inline constexpr std::size_t max_name = 127;

/// Wire actions.
enum class action : std::uint8_t {
    lock = 1,
    unlock = 2,
    reset_by_key = 3,
    reset_by_source = 4,
    try_lock = 5,
};

// ---- errors ---------------------------------------------------------------

/// Base of every exception this library throws.
class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// The server answered '-' to unlock (the key was not held), try_lock or a reset.
class refused_error : public error {
public:
    using error::error;
};

/// Refused before anything was sent or any connection opened: key not
/// 1..127 bytes, source over 127 bytes, bad address. A kind of refused_error.
class invalid_argument_error : public refused_error {
public:
    using refused_error::refused_error;
};

/// lock / wait: the key or this client's source was reset while waiting ('-').
class reset_error : public error {
public:
    using error::error;
};

/// Name resolution or connect failed or timed out, the connection broke, or
/// it was closed without an answer. code() is the errno value when known.
class unreachable_error : public error {
public:
    unreachable_error(const std::string& what, int code) : error(what), code_(code) {}
    int code() const noexcept { return code_; }

private:
    int code_;
};

/// The timeout passed before the answer; a waiting lock was withdrawn.
class timeout_error : public error {
public:
    using error::error;
};

/// The cancel_token was cancelled; a waiting lock was withdrawn.
class canceled_error : public error {
public:
    using error::error;
};

/// The server answered a byte other than '+', '-' or '#'.
class protocol_error : public error {
public:
    using error::error;
};

/// A local system call failed (socket, pipe, poll). code() is errno.
class system_error : public error {
public:
    system_error(const std::string& what, int code) : error(what), code_(code) {}
    int code() const noexcept { return code_; }

private:
    int code_;
};

namespace detail {

inline std::string errno_text(int code) { return std::strerror(code); }

inline bool set_nonblock_cloexec(int fd) {
    int fl = ::fcntl(fd, F_GETFL);
    if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return false;
    int fdfl = ::fcntl(fd, F_GETFD);
    return fdfl >= 0 && ::fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) >= 0;
}

/// Owns one file descriptor.
class fd_guard {
public:
    explicit fd_guard(int fd = -1) noexcept : fd_(fd) {}
    fd_guard(fd_guard&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    fd_guard& operator=(fd_guard&& o) noexcept {
        if (this != &o) {
            reset();
            fd_ = std::exchange(o.fd_, -1);
        }
        return *this;
    }
    fd_guard(const fd_guard&) = delete;
    fd_guard& operator=(const fd_guard&) = delete;
    ~fd_guard() { reset(); }
    int get() const noexcept { return fd_; }
    void reset() noexcept {
        if (fd_ >= 0) {
            int saved = errno;
            ::close(fd_);
            errno = saved;
            fd_ = -1;
        }
    }

private:
    int fd_;
};

}  // namespace detail

// ---- cancel token -----------------------------------------------------------

/// Cancels waiting calls from another thread. Copies share one state (a pipe
/// polled beside the socket). Once cancelled it stays cancelled, and calls
/// given it fail at once with canceled_error, until reset().
class cancel_token {
public:
    /// Opens the pipe; throws system_error when the system has no descriptor left.
    cancel_token() : state_(std::make_shared<state>()) {}

    /// Cancels every call using this token. Thread-safe, never throws.
    void cancel() const noexcept {
        int saved = errno;
        // A full pipe (EAGAIN) means it is already cancelled.
        [[maybe_unused]] ssize_t n = ::write(state_->write_fd.get(), "x", 1);
        errno = saved;
    }

    /// true once cancelled, until reset().
    bool cancelled() const noexcept {
        pollfd p{state_->read_fd.get(), POLLIN, 0};
        return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
    }

    /// Makes the token usable again. Call it only while no call uses it.
    void reset() const noexcept {
        char buf[64];
        while (::read(state_->read_fd.get(), buf, sizeof buf) > 0) {
        }
    }

    /// The descriptor that becomes readable when cancelled (for poll loops).
    int native_handle() const noexcept { return state_->read_fd.get(); }

private:
    struct state {
        detail::fd_guard read_fd, write_fd;
        state() {
            int fds[2];
            if (::pipe(fds) != 0) throw system_error("lockingcenter: pipe: " + detail::errno_text(errno), errno);
            read_fd = detail::fd_guard(fds[0]);
            write_fd = detail::fd_guard(fds[1]);
            if (!detail::set_nonblock_cloexec(fds[0]) || !detail::set_nonblock_cloexec(fds[1])) {
                throw system_error("lockingcenter: fcntl: " + detail::errno_text(errno), errno);
            }
        }
    };
    std::shared_ptr<state> state_;
};

// ---- frame ------------------------------------------------------------------

/// Encodes one request frame. Checks the lengths: key 1..127 bytes (0..127
/// for reset_by_source, which ignores it), source 0..127 bytes. Throws
/// invalid_argument_error. Exposed for tests and tools.
inline std::vector<std::uint8_t> encode(action a, std::string_view key, std::string_view source) {
    auto n = static_cast<int>(a);
    if (n < 1 || n > 5) throw invalid_argument_error("lockingcenter: unknown action " + std::to_string(n));
    if (key.size() > max_name) {
        throw invalid_argument_error("lockingcenter: key is " + std::to_string(key.size()) +
                                     " bytes, at most 127 allowed");
    }
    if (key.empty() && a != action::reset_by_source) throw invalid_argument_error("lockingcenter: empty key");
    if (source.size() > max_name) {
        throw invalid_argument_error("lockingcenter: source is " + std::to_string(source.size()) +
                                     " bytes, at most 127 allowed");
    }
    std::vector<std::uint8_t> frame;
    frame.reserve(3 + key.size() + source.size());
    frame.push_back(static_cast<std::uint8_t>(a));
    frame.push_back(static_cast<std::uint8_t>(key.size()));
    frame.insert(frame.end(), key.begin(), key.end());
    frame.push_back(static_cast<std::uint8_t>(source.size()));
    frame.insert(frame.end(), source.begin(), source.end());
    return frame;
}

// ---- client -----------------------------------------------------------------

/// Timeouts of a client.
struct options {
    /// Time allowed for the TCP connect.
    std::chrono::milliseconds connect_timeout{5000};
    /// Time allowed for the answer of unlock, try_lock and the resets, which
    /// never wait in a queue (zero: no limit).
    std::chrono::milliseconds io_timeout{10000};
};

class client {
public:
    using clock = std::chrono::steady_clock;

    /// localhost:22119, no source.
    client() : client("localhost") {}

    /// address: "host:port", "host" (port 22119) or "[v6addr]:port".
    /// source: 0..127 bytes of UTF-8 naming this requester; empty lets the
    /// server use the peer IP. Throws invalid_argument_error; connects nowhere.
    explicit client(std::string_view address, std::string source = {}, options opts = {})
        : source_(std::move(source)), opts_(opts) {
        if (source_.size() > max_name) {
            throw invalid_argument_error("lockingcenter: source is " + std::to_string(source_.size()) +
                                         " bytes, at most 127 allowed");
        }
        parse_address(address);
    }

    const std::string& host() const noexcept { return host_; }
    const std::string& port() const noexcept { return port_; }
    const std::string& source() const noexcept { return source_; }
    const options& opts() const noexcept { return opts_; }

    /// Waits in FIFO order until the key is granted. Throws reset_error,
    /// timeout_error, canceled_error, unreachable_error, invalid_argument_error.
    void lock(std::string_view key) const { lock_impl(key, std::nullopt, nullptr); }
    void lock(std::string_view key, std::chrono::milliseconds timeout) const { lock_impl(key, timeout, nullptr); }
    void lock(std::string_view key, const cancel_token& cancel) const { lock_impl(key, std::nullopt, &cancel); }
    void lock(std::string_view key, std::chrono::milliseconds timeout, const cancel_token& cancel) const {
        lock_impl(key, timeout, &cancel);
    }

    /// Takes the key only if it is free now: true when taken, false when held
    /// by someone ('#'). Throws refused_error on '-'.
    bool try_lock(std::string_view key) const {
        switch (request(action::try_lock, key, source_, io_timeout(), nullptr)) {
        case '+': return true;
        case '#': return false;
        case '-': throw refused_error(context(action::try_lock, key) + ": refused");
        default: throw unexpected(action::try_lock);
        }
    }

    /// Releases the key. Throws refused_error when it was not held.
    void unlock(std::string_view key) const { simple(action::unlock, key, source_); }

    /// Lock then unlock at once: returns when it was this caller's turn.
    void wait(std::string_view key) const { wait_impl(key, std::nullopt, nullptr); }
    void wait(std::string_view key, std::chrono::milliseconds timeout) const { wait_impl(key, timeout, nullptr); }
    void wait(std::string_view key, const cancel_token& cancel) const { wait_impl(key, std::nullopt, &cancel); }
    void wait(std::string_view key, std::chrono::milliseconds timeout, const cancel_token& cancel) const {
        wait_impl(key, timeout, &cancel);
    }

    /// Drops the holder of key and fails every waiter of it.
    void reset_key(std::string_view key) const { simple(action::reset_by_key, key, {}); }

    /// Fails every waiter of this client's source, releases every key it holds.
    void reset_source() const { simple(action::reset_by_source, {}, source_); }
    /// The same for another source.
    void reset_source(std::string_view source) const { simple(action::reset_by_source, {}, source); }

private:
    using opt_ms = std::optional<std::chrono::milliseconds>;

    // How long give_up reads on after hanging up, for a grant on its way.
    static constexpr auto give_up_grace = std::chrono::seconds(2);

    std::string host_, port_, source_;
    options opts_;

    opt_ms io_timeout() const {
        return opts_.io_timeout.count() > 0 ? opt_ms(opts_.io_timeout) : std::nullopt;
    }

    void parse_address(std::string_view a) {
        if (a.empty()) a = "localhost";
        std::string_view host = a, port = default_port;
        if (a.front() == '[') {
            auto close = a.find(']');
            if (close == std::string_view::npos) bad_address(a);
            host = a.substr(1, close - 1);
            auto rest = a.substr(close + 1);
            if (!rest.empty()) {
                if (rest.front() != ':') bad_address(a);
                port = rest.substr(1);
            }
        } else {
            auto colon = a.find(':');
            if (colon != std::string_view::npos && a.find(':', colon + 1) == std::string_view::npos) {
                host = a.substr(0, colon);
                port = a.substr(colon + 1);
            }
        }
        if (host.empty() || host.size() > 255 || port.empty() || port.size() > 5) bad_address(a);
        unsigned long p = 0;
        for (char ch : port) {
            if (ch < '0' || ch > '9') bad_address(a);
            p = p * 10 + static_cast<unsigned long>(ch - '0');
        }
        if (p < 1 || p > 65535) bad_address(a);
        host_ = std::string(host);
        port_ = std::string(port);
    }

    [[noreturn]] static void bad_address(std::string_view a) {
        throw invalid_argument_error("lockingcenter: bad address \"" + std::string(a) + "\"");
    }

    void lock_impl(std::string_view key, opt_ms timeout, const cancel_token* cancel) const {
        switch (request(action::lock, key, source_, timeout, cancel)) {
        case '+': return;
        case '-': throw reset_error(context(action::lock, key) + ": reset while waiting");
        default: throw unexpected(action::lock);
        }
    }

    void wait_impl(std::string_view key, opt_ms timeout, const cancel_token* cancel) const {
        lock_impl(key, timeout, cancel);
        try {
            unlock(key);
        } catch (const refused_error&) {
            // Someone reset the key after our turn came: the turn still came.
        }
    }

    void simple(action a, std::string_view key, std::string_view source) const {
        switch (request(a, key, source, io_timeout(), nullptr)) {
        case '+': return;
        case '-': throw refused_error(context(a, key) + ": refused");
        default: throw unexpected(a);
        }
    }

    // Waits until fd has events. Returns 0 when ready, 1 on deadline, 2 when cancelled.
    static int wait_fd(int fd, short events, std::optional<clock::time_point> deadline, const cancel_token* cancel) {
        for (;;) {
            int wait_ms = -1;
            if (deadline) {
                auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - clock::now()).count();
                if (left <= 0) return 1;
                wait_ms = left > INT_MAX ? INT_MAX : static_cast<int>(left);
            }
            pollfd p[2] = {{fd, events, 0}, {-1, POLLIN, 0}};
            nfds_t n = 1;
            if (cancel != nullptr) {
                p[1].fd = cancel->native_handle();
                n = 2;
            }
            int r = ::poll(p, n, wait_ms);
            if (r < 0) {
                if (errno == EINTR) continue;
                throw system_error("lockingcenter: poll: " + detail::errno_text(errno), errno);
            }
            if (r == 0) continue;  // the loop re-checks the deadline
            if (p[0].revents != 0) return 0;
            if (n == 2 && p[1].revents != 0) return 2;
        }
    }

    std::string where() const { return host_.find(':') != std::string::npos ? "[" + host_ + "]:" + port_ : host_ + ":" + port_; }

    // Reads the one-byte answer: waits for fd to be readable (before
    // deadline, unless cancel fires), then receives a byte, retrying on
    // EINTR/EAGAIN. Returns 0 with answer set; wait_fd's 1 (deadline) or 2
    // (cancelled); -1 at EOF; -2 on a read error (errno set by recv).
    static int read_answer(int fd, std::optional<clock::time_point> deadline, const cancel_token* cancel,
                           char& answer) {
        for (;;) {
            int w = wait_fd(fd, POLLIN, deadline, cancel);
            if (w != 0) return w;
            ssize_t n = ::recv(fd, &answer, 1, 0);
            if (n == 1) return 0;
            if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
            return n == 0 ? -1 : -2;
        }
    }

    // Hangs up on a request whose frame was sent. Closing outright would
    // discard a '+' the server sent just before it noticed the hang-up,
    // leaving the key held by nobody. So: shut down the write side (the
    // server reads EOF, withdraws the waiter and closes), then read until
    // that close, for at most give_up_grace. Returns an answer that arrived
    // meanwhile; nothing when the grace ran out or at EOF or an error (the
    // server withdrew the waiter).
    static std::optional<char> give_up(int fd) {
        ::shutdown(fd, SHUT_WR);
        char answer = 0;
        // No cancel token here: it stays cancelled.
        if (read_answer(fd, clock::now() + give_up_grace, nullptr, answer) == 0) return answer;
        return std::nullopt;
    }

    static protocol_error unexpected(action a) {
        return protocol_error(std::string("lockingcenter: ") + action_name(a) + ": unexpected answer");
    }

    [[noreturn]] static void gave_up(int why, const std::string& ctx) {
        if (why == 2) throw canceled_error(ctx + ": canceled");
        throw timeout_error(ctx + ": timed out");
    }

    // "lockingcenter: ACTION \"KEY\"" (no key for reset_source): how errors name the request.
    static std::string context(action a, std::string_view key) {
        std::string ctx = std::string("lockingcenter: ") + action_name(a);
        if (!key.empty()) ctx += " \"" + std::string(key) + "\"";
        return ctx;
    }

    static const char* action_name(action a) {
        switch (a) {
        case action::lock: return "lock";
        case action::unlock: return "unlock";
        case action::reset_by_key: return "reset_key";
        case action::reset_by_source: return "reset_source";
        case action::try_lock: return "try_lock";
        }
        return "request";
    }

    detail::fd_guard dial(std::optional<clock::time_point> deadline, const cancel_token* cancel,
                          const std::string& ctx) const {
        std::optional<clock::time_point> cdeadline;
        if (opts_.connect_timeout.count() > 0) cdeadline = clock::now() + opts_.connect_timeout;
        bool call_first = deadline && (!cdeadline || *deadline < *cdeadline);
        if (call_first) cdeadline = deadline;

        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        int gai = ::getaddrinfo(host_.c_str(), port_.c_str(), &hints, &res);
        if (gai != 0) {
            throw unreachable_error(ctx + ": resolve " + host_ + ": " + ::gai_strerror(gai), EHOSTUNREACH);
        }
        std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(res, ::freeaddrinfo);
        int last = ECONNREFUSED;
        for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
            detail::fd_guard fd(::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol));
            if (fd.get() < 0 || !detail::set_nonblock_cloexec(fd.get())) {
                last = errno;
                continue;
            }
#ifdef SO_NOSIGPIPE
            int one = 1;
            ::setsockopt(fd.get(), SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
            if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) return fd;
            if (errno != EINPROGRESS && errno != EINTR) {
                last = errno;
                continue;
            }
            int w = wait_fd(fd.get(), POLLOUT, cdeadline, cancel);
            if (w == 2) gave_up(w, ctx);
            if (w == 1) {
                if (call_first) gave_up(w, ctx);
                throw unreachable_error(ctx + ": connect " + where() + ": timed out", ETIMEDOUT);
            }
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) soerr = errno;
            if (soerr == 0) return fd;
            last = soerr;
        }
        throw unreachable_error(ctx + ": connect " + where() + ": " + detail::errno_text(last), last);
    }

    // One request: connect, write the frame in one write, read one byte, close.
    char request(action a, std::string_view key, std::string_view source, opt_ms timeout,
                 const cancel_token* cancel) const {
        auto frame = encode(a, key, source);  // validates before connecting
        std::string ctx = context(a, key);
        if (cancel != nullptr && cancel->cancelled()) gave_up(2, ctx);
        std::optional<clock::time_point> deadline;
        if (timeout && timeout->count() > 0) deadline = clock::now() + *timeout;
        detail::fd_guard fd = dial(deadline, cancel, ctx);

#ifdef MSG_NOSIGNAL
        constexpr int send_flags = MSG_NOSIGNAL;
#else
        constexpr int send_flags = 0;
#endif
        std::size_t off = 0;
        while (off < frame.size()) {
            ssize_t n = ::send(fd.get(), frame.data() + off, frame.size() - off, send_flags);
            if (n > 0) {
                off += static_cast<std::size_t>(n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                int w = wait_fd(fd.get(), POLLOUT, deadline, cancel);
                if (w != 0) gave_up(w, ctx);
                continue;
            }
            int code = errno;
            throw unreachable_error(ctx + ": send to " + where() + ": " + detail::errno_text(code), code);
        }

        char answer = 0;
        int r = read_answer(fd.get(), deadline, cancel, answer);
        if (r == 0) return answer;
        if (r > 0) {
            // Giving up: a granted key must not be reported as not granted.
            if (auto late = give_up(fd.get())) return *late;
            gave_up(r, ctx);
        }
        int code = r == -1 ? ECONNRESET : errno;
        throw unreachable_error(ctx + ": " + where() +
                                    (r == -1 ? std::string(": connection closed without an answer")
                                             : ": " + detail::errno_text(code)),
                                code);
    }
};

// ---- scoped lock ------------------------------------------------------------

/// RAII hold of a key: locks in the constructor, unlocks in the destructor.
///
///   lockingcenter::scoped_lock held(client, "deploy/prod");             // waits
///   lockingcenter::scoped_lock held(client, "k", std::chrono::seconds(5));
///   lockingcenter::scoped_lock held(client, "k", std::try_to_lock);     // check held.owns_lock()
///
/// The destructor never throws: an unlock that fails there is ignored (the
/// key is then held until a reset). Call unlock() to see that error.
/// The guard keeps its own copy of the client.
class scoped_lock {
public:
    scoped_lock(const client& c, std::string key) : client_(c), key_(std::move(key)) {
        client_.lock(key_);
        owns_ = true;
    }
    scoped_lock(const client& c, std::string key, std::chrono::milliseconds timeout)
        : client_(c), key_(std::move(key)) {
        client_.lock(key_, timeout);
        owns_ = true;
    }
    scoped_lock(const client& c, std::string key, const cancel_token& cancel) : client_(c), key_(std::move(key)) {
        client_.lock(key_, cancel);
        owns_ = true;
    }
    scoped_lock(const client& c, std::string key, std::chrono::milliseconds timeout, const cancel_token& cancel)
        : client_(c), key_(std::move(key)) {
        client_.lock(key_, timeout, cancel);
        owns_ = true;
    }
    /// try_lock: owns_lock() is false when the key is held by someone else.
    scoped_lock(const client& c, std::string key, std::try_to_lock_t) : client_(c), key_(std::move(key)) {
        owns_ = client_.try_lock(key_);
    }

    scoped_lock(scoped_lock&& o) noexcept
        : client_(std::move(o.client_)), key_(std::move(o.key_)), owns_(std::exchange(o.owns_, false)) {}
    scoped_lock& operator=(scoped_lock&& o) noexcept {
        if (this != &o) {
            release_quietly();
            client_ = std::move(o.client_);
            key_ = std::move(o.key_);
            owns_ = std::exchange(o.owns_, false);
        }
        return *this;
    }
    scoped_lock(const scoped_lock&) = delete;
    scoped_lock& operator=(const scoped_lock&) = delete;

    ~scoped_lock() { release_quietly(); }

    bool owns_lock() const noexcept { return owns_; }
    explicit operator bool() const noexcept { return owns_; }
    const std::string& key() const noexcept { return key_; }

    /// Unlocks now; throws what client::unlock throws. Afterwards the guard
    /// owns nothing (also when it threw).
    void unlock() {
        if (!owns_) return;
        owns_ = false;
        client_.unlock(key_);
    }

private:
    void release_quietly() noexcept {
        try {
            unlock();
        } catch (...) {
        }
    }

    client client_;
    std::string key_;
    bool owns_ = false;
};

}  // namespace lockingcenter

#endif  // LOCKINGCENTER_HPP
