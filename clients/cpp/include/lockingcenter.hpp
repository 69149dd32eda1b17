// lockingcenter.hpp - C++17 client for the Locking-Center lock server.
//
// A header over the C client (liblockingcenter, clients/c): the protocol,
// the session's threads and the v1 calls are the C library's, tested there
// byte for byte and under ASan, UBSan and TSan; this header adds RAII,
// std::chrono, exceptions and std::function. Link lockingcenter::cpp (CMake)
// or `pkg-config lockingcenter-cpp`.
//
// Two ways to talk to the server:
//
// - session (recommended): one TCP connection shared by every thread, whose
//   holds end with it (at close, or one TTL after the program died or lost
//   the server), with a fencing token in every grant. session_lock is its
//   RAII guard and carries the token. A session is thread-safe: any number
//   of threads may call it at once (see lockingcenter.h, "Threading model":
//   one supervisor thread writes, pings and resumes; one reader thread per
//   connection matches answers to calls by id).
// - client (v1): one request per TCP connection. A v1 grant has no owner
//   and stays held after the program exits, until an unlock or a reset.
//   A client is immutable after construction and may be shared by threads.
//
// Both take one address or several ("h1:p1,h2:p2,h3:p3": a cluster's nodes,
// any of which answers; a DNS name with several records counts as several),
// tried in random order. A session rides through a cluster's failover: it
// resumes through any node within its TTL and reissues its waiting locks
// with their ids (lockingcenter.h, "Sessions"). TLS (tls_config) is the C
// library's, over OpenSSL, when it was built with it.
//
// Errors: every exception is a lockingcenter::error, which is a
// std::system_error whose code() is in lockingcenter::category() (values of
// lockingcenter::errc, the C library's lc_err). Compare with
// `e.code() == lockingcenter::errc::timeout`, or catch the subclass.
//
// POSIX only (Linux, macOS, the BSDs).
#ifndef LOCKINGCENTER_HPP
#define LOCKINGCENTER_HPP

#include <lockingcenter.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace lockingcenter {

inline constexpr const char* version = LC_VERSION;
/// Default TCP port of the lock protocol.
inline constexpr const char* default_port = LC_DEFAULT_PORT;
/// Longest key, source or auth token in bytes (sizes are signed bytes on the wire).
inline constexpr std::size_t max_name = LC_MAX_NAME;

/// Wire actions (v1 frames use 1..5; sessions also 6..8 and 16 to open).
enum class action : std::uint8_t {
    lock = LC_ACTION_LOCK,
    unlock = LC_ACTION_UNLOCK,
    reset_by_key = LC_ACTION_RESET_BY_KEY,
    reset_by_source = LC_ACTION_RESET_BY_SOURCE,
    try_lock = LC_ACTION_TRYLOCK,
    cancel = LC_ACTION_CANCEL,
    ping = LC_ACTION_PING,
    close = LC_ACTION_CLOSE,
    open = LC_ACTION_OPEN,
};

// ---- errors -----------------------------------------------------------------

/// The error codes of lockingcenter::category(): the C library's lc_err.
enum class errc : int {
    not_won = LC_ERR_NOT_WON,
    reset = LC_ERR_RESET,
    refused = LC_ERR_REFUSED,
    invalid_argument = LC_ERR_INVALID,
    unreachable = LC_ERR_UNREACHABLE,
    timeout = LC_ERR_TIMEOUT,
    canceled = LC_ERR_CANCELED,
    protocol = LC_ERR_PROTOCOL,
    system = LC_ERR_SYSTEM,
    not_held = LC_ERR_NOT_HELD,
    outcome_unknown = LC_ERR_OUTCOME_UNKNOWN,
    disconnected = LC_ERR_DISCONNECTED,
    session_lost = LC_ERR_SESSION_LOST,
    session_closed = LC_ERR_SESSION_CLOSED,
    tls = LC_ERR_TLS,
    unsupported = LC_ERR_UNSUPPORTED,
};

namespace detail {
class category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "lockingcenter"; }
    std::string message(int ev) const override { return lc_strerror(static_cast<lc_err>(ev)); }
};
}  // namespace detail

/// The error category of every lockingcenter::error (name "lockingcenter").
inline const std::error_category& category() noexcept {
    static const detail::category_impl c;
    return c;
}

/// Makes errc usable as a std::error_code (found by argument-dependent lookup).
inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), category()}; }

}  // namespace lockingcenter

namespace std {
template <>
struct is_error_code_enum<lockingcenter::errc> : true_type {};
}  // namespace std

namespace lockingcenter {

/// Base of every exception this library throws: a std::system_error whose
/// code() is in category(). os_error() is the system's errno behind an
/// unreachable_error or system_error (empty otherwise or when unknown).
class error : public std::system_error {
public:
    error(errc code, const std::string& what, int os_errno = 0)
        : std::system_error(make_error_code(code), what),
          os_(os_errno != 0 ? std::error_code(os_errno, std::system_category()) : std::error_code()) {}
    /// The errno behind the error, when the system gave one.
    std::error_code os_error() const noexcept { return os_; }

private:
    std::error_code os_;
};

#define LC_CPP_ERROR(name, base, code)                                    \
    class name : public base {                                            \
    public:                                                               \
        explicit name(const std::string& what, int os_errno = 0)          \
            : base(errc::code, what, os_errno) {}                         \
                                                                          \
    protected:                                                            \
        name(errc c, const std::string& what, int os_errno) : base(c, what, os_errno) {} \
    };

/// The server answered '-' to unlock (the key was not held), try_lock, a
/// reset, or a session open (wrong AUTH_TOKEN, connection limit).
LC_CPP_ERROR(refused_error, error, refused)
/// Refused before anything was sent: key not 1..127 bytes or containing a
/// NUL byte, source or auth over 127 bytes, bad address. A refused_error.
LC_CPP_ERROR(invalid_argument_error, refused_error, invalid_argument)
/// Session unlock: this session does not hold that grant; nothing released.
/// A refused_error.
LC_CPP_ERROR(not_held_error, refused_error, not_held)
/// lock / wait: the key or this source was reset while waiting ('-').
LC_CPP_ERROR(reset_error, error, reset)
/// Resolve or connect failed or timed out, or the connection closed
/// without an answer. os_error() is the errno when known.
LC_CPP_ERROR(unreachable_error, error, unreachable)
/// The timeout passed before the answer; a waiting lock was withdrawn.
LC_CPP_ERROR(timeout_error, error, timeout)
/// The cancel_token was cancelled; a waiting lock was withdrawn.
LC_CPP_ERROR(canceled_error, error, canceled)
/// The server answered something the protocol does not allow.
LC_CPP_ERROR(protocol_error, error, protocol)
/// A local system call failed (threads, pipes, memory). os_error() is errno.
LC_CPP_ERROR(system_error, error, system)
/// An unlock or reset whose answer was lost: it may have taken effect. It is
/// never resent blindly.
LC_CPP_ERROR(outcome_unknown_error, error, outcome_unknown)
/// A session ping or close whose connection dropped before the answer; the
/// session is resuming. (Locks and try_locks are reissued instead.)
LC_CPP_ERROR(disconnected_error, error, disconnected)
/// The session is lost (expired, ended from the web API, or unreachable past
/// its TTL): every hold it had is gone.
LC_CPP_ERROR(session_lost_error, error, session_lost)
/// The session was closed.
LC_CPP_ERROR(session_closed_error, error, session_closed)
/// Session try_lock in the scoped form: someone holds the key.
LC_CPP_ERROR(not_won_error, error, not_won)
/// TLS failed: the server's certificate is not trusted or does not name it,
/// the server refused this client's certificate, or a TLS file did not load.
LC_CPP_ERROR(tls_error, error, tls)
/// This build has no TLS (the C library was built without OpenSSL).
LC_CPP_ERROR(unsupported_error, error, unsupported)
#undef LC_CPP_ERROR

namespace detail {

/// Throws the exception of e (not LC_OK), for what ("lockingcenter: lock \"k\"").
[[noreturn]] inline void raise(lc_err e, const std::string& what, int os_errno = 0) {
    std::string msg = what + ": " + lc_strerror(e);
    if (os_errno != 0 && (e == LC_ERR_UNREACHABLE || e == LC_ERR_SYSTEM)) msg += std::string(" (") + std::strerror(os_errno) + ")";
    int os = (e == LC_ERR_UNREACHABLE || e == LC_ERR_SYSTEM) ? os_errno : 0;
    switch (e) {
    case LC_ERR_NOT_WON: throw not_won_error(msg);
    case LC_ERR_RESET: throw reset_error(msg);
    case LC_ERR_REFUSED: throw refused_error(msg);
    case LC_ERR_INVALID: throw invalid_argument_error(msg);
    case LC_ERR_UNREACHABLE: throw unreachable_error(msg, os);
    case LC_ERR_TIMEOUT: throw timeout_error(msg);
    case LC_ERR_CANCELED: throw canceled_error(msg);
    case LC_ERR_PROTOCOL: throw protocol_error(msg);
    case LC_ERR_SYSTEM: throw system_error(msg, os);
    case LC_ERR_NOT_HELD: throw not_held_error(msg);
    case LC_ERR_OUTCOME_UNKNOWN: throw outcome_unknown_error(msg);
    case LC_ERR_DISCONNECTED: throw disconnected_error(msg);
    case LC_ERR_SESSION_LOST: throw session_lost_error(msg);
    case LC_ERR_SESSION_CLOSED: throw session_closed_error(msg);
    case LC_ERR_TLS: throw tls_error(msg);
    case LC_ERR_UNSUPPORTED: throw unsupported_error(msg);
    case LC_OK: break;
    }
    throw protocol_error(msg);
}

/// Runs a C call and throws its error; errno is read right after the call.
template <class F>
inline void check(const std::string& what, F&& call) {
    errno = 0;
    lc_err e = call();
    int os = errno;
    if (e != LC_OK) raise(e, what, os);
}

/// A key, source or auth as the C library takes it: NUL-terminated, so a
/// NUL byte inside is refused (it could not be sent).
inline std::string c_string(std::string_view s, const char* what) {
    if (s.find('\0') != std::string_view::npos) {
        throw invalid_argument_error(std::string("lockingcenter: ") + what + " contains a NUL byte");
    }
    if (s.size() > max_name) {
        throw invalid_argument_error(std::string("lockingcenter: ") + what + " is " + std::to_string(s.size()) +
                                     " bytes, at most 127 allowed");
    }
    return std::string(s);
}

/// "lockingcenter: ACTION \"KEY\"": how errors name the request.
inline std::string context(const char* act, std::string_view key) {
    std::string ctx = std::string("lockingcenter: ") + act;
    if (!key.empty()) ctx += " \"" + std::string(key) + "\"";
    return ctx;
}

/// A duration as the C library's milliseconds (<= 0: no limit), rounded up.
inline int to_ms(std::chrono::milliseconds d) {
    if (d.count() <= 0) return 0;
    return d.count() > 0x7fffffff ? 0x7fffffff : static_cast<int>(d.count());
}

}  // namespace detail

// ---- cancel token -------------------------------------------------------------

/// Cancels waiting calls from another thread (or a signal handler, through
/// native()). Copies share one state (an lc_cancel: a pipe polled beside the
/// socket). Once cancelled it stays cancelled, and calls given it fail at
/// once with canceled_error, until reset().
class cancel_token {
public:
    /// Opens the pipe; throws system_error when the system has no descriptor left.
    cancel_token() : state_(std::make_shared<state>()) {}

    /// Cancels every call using this token. Thread-safe, never throws.
    void cancel() const noexcept { lc_cancel_trigger(&state_->c); }
    /// true once cancelled, until reset().
    bool cancelled() const noexcept { return lc_cancel_triggered(&state_->c); }
    /// Makes the token usable again. Call it only while no call uses it.
    void reset() const noexcept { lc_cancel_reset(&state_->c); }
    /// The descriptor that becomes readable when cancelled (for poll loops).
    int native_handle() const noexcept { return state_->c.fds[0]; }
    /// The C token, for lc_* calls and lc_cancel_trigger in a signal handler.
    lc_cancel* native() const noexcept { return &state_->c; }

private:
    struct state {
        lc_cancel c;
        state() { detail::check("lockingcenter: cancel token", [&] { return lc_cancel_init(&c); }); }
        ~state() { lc_cancel_destroy(&c); }
        state(const state&) = delete;
        state& operator=(const state&) = delete;
    };
    std::shared_ptr<state> state_;
};

// ---- frames -------------------------------------------------------------------

/// Encodes one v1 request frame. Checks the lengths: key 1..127 bytes (0..127
/// for reset_by_source, which ignores it), source 0..127 bytes. Throws
/// invalid_argument_error. Exposed for tests and tools.
inline std::vector<std::uint8_t> encode(action a, std::string_view key, std::string_view source) {
    auto k = detail::c_string(key, "key"), s = detail::c_string(source, "source");
    std::vector<std::uint8_t> frame(LC_MAX_FRAME);
    std::size_t len = 0;
    detail::check("lockingcenter: encode", [&] {
        return lc_encode(frame.data(), frame.size(), &len, static_cast<int>(a), k.c_str(), s.c_str());
    });
    frame.resize(len);
    return frame;
}

/// Encodes a session open (resume 0: a new session). Throws invalid_argument_error.
inline std::vector<std::uint8_t> encode_open(std::uint8_t open_version, std::uint32_t ttl_ms, std::uint64_t resume,
                                             std::string_view source, std::string_view auth) {
    auto s = detail::c_string(source, "source"), a = detail::c_string(auth, "auth");
    std::vector<std::uint8_t> frame(LC_SESSION_OPEN_MAX);
    std::size_t len = 0;
    detail::check("lockingcenter: encode open", [&] {
        return lc_session_encode_open(frame.data(), frame.size(), &len, open_version, ttl_ms, resume, s.c_str(), a.c_str());
    });
    frame.resize(len);
    return frame;
}

/// Encodes a session request. Throws invalid_argument_error.
inline std::vector<std::uint8_t> encode_request(action a, std::uint32_t id, std::uint64_t token, std::string_view key) {
    auto k = detail::c_string(key, "key");
    std::vector<std::uint8_t> frame(LC_SESSION_REQUEST_MAX);
    std::size_t len = 0;
    detail::check("lockingcenter: encode request", [&] {
        return lc_session_encode_request(frame.data(), frame.size(), &len, static_cast<int>(a), id, token, k.c_str());
    });
    frame.resize(len);
    return frame;
}

/// A decoded 13-byte answer to a session open.
struct open_answer {
    char status;
    std::uint32_t ttl_ms;
    std::uint64_t session;
};
/// A decoded 13-byte answer to a session request.
struct answer {
    std::uint32_t id;
    char status;
    std::uint64_t token;
};

/// Decodes an open's answer (b: 13 bytes).
inline open_answer decode_open_answer(const std::uint8_t* b) {
    std::uint8_t st = 0;
    open_answer a{};
    lc_session_decode_open_answer(b, &st, &a.ttl_ms, &a.session);
    a.status = static_cast<char>(st);
    return a;
}
/// Decodes a request's answer (b: 13 bytes).
inline answer decode_answer(const std::uint8_t* b) {
    std::uint8_t st = 0;
    answer a{};
    lc_session_decode_answer(b, &a.id, &st, &a.token);
    a.status = static_cast<char>(st);
    return a;
}

// ---- TLS ------------------------------------------------------------------------

/// Files and name of a TLS configuration (SPEC §2: the server's TLS_CERT,
/// TLS_KEY and, for mutual TLS, TLS_CLIENT_CA).
struct tls_options {
    /// PEM bundle of the CAs to trust; empty: the system's.
    std::string ca_file;
    /// Client certificate (chain) and key, PEM, for mutual TLS; both or neither.
    std::string cert_file;
    std::string key_file;
    /// The name the server's certificate must carry; empty: the host of each
    /// address (a DNS name, or an IP address among its IP SANs).
    std::string server_name;
};

/// A loaded TLS configuration (the C library's lc_tls: OpenSSL, TLS 1.2 or
/// later). Copies share it; clients and sessions keep a copy, so it lives as
/// long as they do. A default-constructed one means plain TCP.
class tls_config {
public:
    tls_config() = default;
    /// Loads the files. Throws tls_error (a file does not load, the key does
    /// not match), invalid_argument_error, unsupported_error (no TLS in this build).
    explicit tls_config(const tls_options& o) {
        lc_tls_options c;
        lc_tls_options_init(&c);
        c.ca_file = o.ca_file.empty() ? nullptr : o.ca_file.c_str();
        c.cert_file = o.cert_file.empty() ? nullptr : o.cert_file.c_str();
        c.key_file = o.key_file.empty() ? nullptr : o.key_file.c_str();
        c.server_name = o.server_name.empty() ? nullptr : o.server_name.c_str();
        lc_tls* t = nullptr;
        detail::check("lockingcenter: TLS configuration", [&] { return lc_tls_new(&c, &t); });
        t_ = std::shared_ptr<lc_tls>(t, lc_tls_free);
    }
    /// true when this build has TLS (the C library found OpenSSL).
    static bool available() noexcept { return lc_tls_available(); }
    /// true when this is a TLS configuration (not plain TCP).
    explicit operator bool() const noexcept { return t_ != nullptr; }
    /// The C configuration, or nullptr.
    lc_tls* native() const noexcept { return t_.get(); }

private:
    std::shared_ptr<lc_tls> t_;
};

// ---- v1 client ------------------------------------------------------------------

/// Timeouts and TLS of a v1 client.
struct options {
    /// Time allowed for each TCP connect (and TLS handshake) attempt.
    std::chrono::milliseconds connect_timeout{5000};
    /// Time allowed for the answer of unlock, try_lock and the resets, which
    /// never wait in a queue (zero: no limit). 30 s in every Locking-Center client.
    std::chrono::milliseconds io_timeout{30000};
    /// TLS; default: plain TCP.
    tls_config tls;
};

/// v1: one request per TCP connection (lc_lock and friends). Immutable once
/// made; share it between threads freely.
class client {
public:
    /// localhost:22119, no source.
    client() : client("localhost") {}

    /// address: "host:port", "host" (port 22119), "[v6addr]:port", or a
    /// comma-separated list of them (each call tries them in random order).
    /// source: 0..127 bytes of UTF-8 naming this requester; empty lets the
    /// server use the peer IP. Throws invalid_argument_error; connects nowhere.
    explicit client(std::string_view address, std::string source = {}, options opts = {})
        : source_(detail::c_string(source, "source")), opts_(opts) {
        auto a = detail::c_string(address.empty() ? std::string_view("localhost") : address, "address");
        lc_err e = lc_client_init(&c_, a.c_str(), source_.c_str());
        if (e != LC_OK) throw invalid_argument_error("lockingcenter: bad address \"" + a + "\"");
        c_.connect_timeout_ms = detail::to_ms(opts_.connect_timeout);
        c_.io_timeout_ms = detail::to_ms(opts_.io_timeout);
        c_.tls = opts_.tls.native();
    }

    /// The first address's host and port.
    std::string host() const { return c_.host; }
    std::string port() const { return c_.port; }
    /// Every address, "host:port" ("[v6]:port" for IPv6), in the order given.
    std::vector<std::string> addresses() const {
        std::vector<std::string> out;
        for (std::size_t i = 0; i < c_.naddrs; i++) {
            std::string h = c_.addrs[i].host;
            if (h.find(':') != std::string::npos) h = "[" + h + "]";
            out.push_back(h + ":" + c_.addrs[i].port);
        }
        return out;
    }
    const std::string& source() const noexcept { return source_; }
    const options& opts() const noexcept { return opts_; }
    /// The C client, for lc_* calls.
    const lc_client* native() const noexcept { return &c_; }

    /// Waits in FIFO order until the key is granted. Throws reset_error,
    /// timeout_error, canceled_error, unreachable_error, invalid_argument_error.
    void lock(std::string_view key) const { lock_impl(key, {}, nullptr); }
    void lock(std::string_view key, std::chrono::milliseconds timeout) const { lock_impl(key, timeout, nullptr); }
    void lock(std::string_view key, const cancel_token& cancel) const { lock_impl(key, {}, &cancel); }
    void lock(std::string_view key, std::chrono::milliseconds timeout, const cancel_token& cancel) const {
        lock_impl(key, timeout, &cancel);
    }

    /// Takes the key only if it is free now: true when taken, false when held
    /// by someone ('#'). Throws refused_error on '-'.
    bool try_lock(std::string_view key) const {
        auto k = detail::c_string(key, "key");
        bool won = false;
        detail::check(detail::context("try_lock", key), [&] { return lc_trylock(&c_, k.c_str(), &won); });
        return won;
    }

    /// Releases the key. Throws refused_error when it was not held.
    void unlock(std::string_view key) const {
        auto k = detail::c_string(key, "key");
        detail::check(detail::context("unlock", key), [&] { return lc_unlock(&c_, k.c_str()); });
    }

    /// Lock then unlock at once: returns when it was this caller's turn.
    void wait(std::string_view key) const { wait_impl(key, {}, nullptr); }
    void wait(std::string_view key, std::chrono::milliseconds timeout) const { wait_impl(key, timeout, nullptr); }
    void wait(std::string_view key, const cancel_token& cancel) const { wait_impl(key, {}, &cancel); }
    void wait(std::string_view key, std::chrono::milliseconds timeout, const cancel_token& cancel) const {
        wait_impl(key, timeout, &cancel);
    }

    /// Drops the holder of key and fails every waiter of it.
    void reset_key(std::string_view key) const {
        auto k = detail::c_string(key, "key");
        detail::check(detail::context("reset_key", key), [&] { return lc_reset_key(&c_, k.c_str()); });
    }

    /// Fails every waiter of this client's source, releases every key it holds.
    void reset_source() const {
        detail::check(detail::context("reset_source", {}), [&] { return lc_reset_source(&c_, nullptr); });
    }
    /// The same for another source.
    void reset_source(std::string_view source) const {
        auto s = detail::c_string(source, "source");
        detail::check(detail::context("reset_source", source), [&] { return lc_reset_source(&c_, s.c_str()); });
    }

private:
    void lock_impl(std::string_view key, std::chrono::milliseconds timeout, const cancel_token* cancel) const {
        auto k = detail::c_string(key, "key");
        detail::check(detail::context("lock", key), [&] {
            return lc_lock(&c_, k.c_str(), detail::to_ms(timeout), cancel ? cancel->native() : nullptr);
        });
    }
    void wait_impl(std::string_view key, std::chrono::milliseconds timeout, const cancel_token* cancel) const {
        auto k = detail::c_string(key, "key");
        detail::check(detail::context("wait", key), [&] {
            return lc_wait(&c_, k.c_str(), detail::to_ms(timeout), cancel ? cancel->native() : nullptr);
        });
    }

    lc_client c_{};
    std::string source_;
    options opts_;
};

/// RAII hold of a key through a v1 client: locks in the constructor,
/// unlocks in the destructor.
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

// ---- session --------------------------------------------------------------------

/// Settings of a session.
struct session_options {
    /// Names this program (0..127 bytes); empty: the server uses the IP.
    std::string source;
    /// The server's AUTH_TOKEN, when it has one.
    std::string auth;
    /// TTL asked for; zero asks for the server's SESSION_TTL (10 s by
    /// default). The server clamps it to 1 s .. 10 min.
    std::chrono::milliseconds ttl{0};
    /// Time allowed for each attempt: a connect, the TLS handshake and the
    /// open's answer, to one address.
    std::chrono::milliseconds connect_timeout{5000};
    /// Time allowed for the answer of try_lock, unlock and the resets
    /// (zero: no limit). Lock waits as long as its own timeout says.
    std::chrono::milliseconds io_timeout{30000};
    /// Called once when the session is lost (every hold is gone), on the
    /// session's own thread: keep it short, do not destroy or close the
    /// session from it. Exceptions it throws are swallowed.
    std::function<void(const session_lost_error&)> on_lost;
    /// TLS; default: plain TCP.
    tls_config tls;
};

/// A session: one connection shared by every thread, answers matched by
/// id, holds that end with it, a fencing token with every grant. Movable,
/// not copyable; the destructor closes it (ignoring errors: call close() to
/// see them). Thread-safe, except that no call may run while the session is
/// moved from, closed or destroyed.
class session {
public:
    /// Opens a session on address ("host:port", or a comma-separated list:
    /// any that answers; empty: localhost:22119). Throws
    /// invalid_argument_error, unreachable_error, refused_error (wrong
    /// AUTH_TOKEN, connection limit, no session support), tls_error, system_error.
    explicit session(std::string_view address = {}, session_options opts = {})
        : cb_(std::make_unique<callback>()), tls_(opts.tls) {
        auto a = detail::c_string(address, "address");
        auto src = detail::c_string(opts.source, "source"), auth = detail::c_string(opts.auth, "auth");
        cb_->fn = std::move(opts.on_lost);
        lc_session_options o;
        lc_session_options_init(&o);
        o.address = a.empty() ? nullptr : a.c_str();
        o.source = src.c_str();
        o.auth = auth.empty() ? nullptr : auth.c_str();
        o.ttl_ms = opts.ttl.count() <= 0 ? 0u
                   : opts.ttl.count() > 0xffffffffLL ? 0xffffffffu
                                                     : static_cast<std::uint32_t>(opts.ttl.count());
        o.connect_timeout_ms = detail::to_ms(opts.connect_timeout);
        o.io_timeout_ms = detail::to_ms(opts.io_timeout);
        o.on_lost = &session::lost_trampoline;
        o.on_lost_arg = cb_.get();
        o.tls = tls_.native();
        detail::check("lockingcenter: open session at " + (a.empty() ? std::string("localhost:22119") : a),
                      [&] { return lc_session_open(&o, &s_); });
    }

    session(session&& o) noexcept
        : s_(std::exchange(o.s_, nullptr)), cb_(std::move(o.cb_)), tls_(std::move(o.tls_)) {}
    session& operator=(session&& o) noexcept {
        if (this != &o) {
            lc_session_close(s_, 0);
            s_ = std::exchange(o.s_, nullptr);
            cb_ = std::move(o.cb_);
            tls_ = std::move(o.tls_);
        }
        return *this;
    }
    session(const session&) = delete;
    session& operator=(const session&) = delete;
    ~session() { lc_session_close(s_, 0); }

    /// The session id (the web API shows it as 16 hex digits).
    std::uint64_t id() const noexcept { return lc_session_id(s_); }
    /// The TTL the server granted.
    std::chrono::milliseconds ttl() const noexcept { return std::chrono::milliseconds(lc_session_ttl_ms(s_)); }
    /// Empty while the session lives; errc::session_lost or errc::session_closed after.
    std::error_code error() const noexcept {
        if (s_ == nullptr) return errc::session_closed;
        lc_err e = lc_session_state(s_);
        return e == LC_OK ? std::error_code() : make_error_code(static_cast<errc>(e));
    }
    /// true once the session is lost: every hold it had is gone.
    bool lost() const noexcept { return error() == errc::session_lost; }
    /// false while the session resumes after a dropped connection.
    bool connected() const noexcept { return s_ != nullptr && lc_session_connected(s_); }
    /// Waits until the session has ended or timeout passed (zero: no limit); returns error().
    std::error_code wait_end(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) const {
        if (s_ != nullptr) lc_session_wait_end(s_, detail::to_ms(timeout));
        return error();
    }
    /// The C session, for lc_session_* calls.
    lc_session* native() const noexcept { return s_; }

    /// Waits in FIFO order (this session's other locks included) and returns
    /// the grant's fencing token. Throws reset_error, timeout_error,
    /// canceled_error (the waiter was withdrawn; a grant that crossed the
    /// Cancel was unlocked), session_lost_error, session_closed_error,
    /// invalid_argument_error. A throw means nothing is held. A dropped
    /// connection does not end it: it is reissued after the resume.
    std::uint64_t lock(std::string_view key) { return lock_impl(key, {}, nullptr); }
    std::uint64_t lock(std::string_view key, std::chrono::milliseconds timeout) { return lock_impl(key, timeout, nullptr); }
    std::uint64_t lock(std::string_view key, const cancel_token& cancel) { return lock_impl(key, {}, &cancel); }
    std::uint64_t lock(std::string_view key, std::chrono::milliseconds timeout, const cancel_token& cancel) {
        return lock_impl(key, timeout, &cancel);
    }

    /// Takes the key if nobody holds it (this session included): its token,
    /// or nullopt when held. Throws refused_error on '-', and as lock.
    std::optional<std::uint64_t> try_lock(std::string_view key) {
        auto k = detail::c_string(key, "key");
        std::uint64_t token = 0;
        errno = 0;
        lc_err e = lc_session_trylock(live(), k.c_str(), &token);
        if (e == LC_ERR_NOT_WON) return std::nullopt;
        if (e != LC_OK) detail::raise(e, detail::context("try_lock", key), errno);
        return token;
    }

    /// Releases the grant of key with that token (0: whichever grant this
    /// session holds on key). Throws not_held_error (nothing released, never
    /// another holder's grant), outcome_unknown_error, session_lost_error.
    void unlock(std::string_view key, std::uint64_t token) {
        auto k = detail::c_string(key, "key");
        detail::check(detail::context("unlock", key), [&] { return lc_session_unlock(live(), k.c_str(), token); });
    }

    /// Drops key's holder, whoever it is, and refuses its waiters.
    void reset_key(std::string_view key) {
        auto k = detail::c_string(key, "key");
        detail::check(detail::context("reset_key", key), [&] { return lc_session_reset_key(live(), k.c_str()); });
    }
    /// Refuses every waiter of source and releases every key it holds
    /// (empty: this connection's IP address).
    void reset_source(std::string_view source) {
        auto s = detail::c_string(source, "source");
        detail::check(detail::context("reset_source", source),
                      [&] { return lc_session_reset_source(live(), s.c_str()); });
    }

    /// Runs fn(token) while holding key, then unlocks by that token — also
    /// when fn throws. Returns what fn returns. Throws session_lost_error
    /// when the session was lost while fn ran (the hold ended under it).
    template <class F>
    auto with_lock(std::string_view key, F&& fn) -> decltype(fn(std::uint64_t{}));

    /// Ends the session: the server releases every hold at once; calls still
    /// waiting throw session_closed_error. Throws when the server could not be
    /// told (it then releases the holds one TTL later) or when the session
    /// had been lost. Idempotent; the destructor does it quietly.
    void close(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
        lc_session* s = std::exchange(s_, nullptr);
        if (s == nullptr) return;
        detail::check("lockingcenter: close session", [&] { return lc_session_close(s, detail::to_ms(timeout)); });
    }

private:
    struct callback {
        std::function<void(const session_lost_error&)> fn;
    };
    static void lost_trampoline(lc_session*, lc_err why, void* arg) noexcept {
        auto* cb = static_cast<callback*>(arg);
        if (!cb->fn) return;
        try {
            cb->fn(session_lost_error(std::string("lockingcenter: session: ") + lc_strerror(why)));
        } catch (...) {
        }
    }
    lc_session* live() const {
        if (s_ == nullptr) throw session_closed_error("lockingcenter: session: closed");
        return s_;
    }
    std::uint64_t lock_impl(std::string_view key, std::chrono::milliseconds timeout, const cancel_token* cancel) {
        auto k = detail::c_string(key, "key");
        std::uint64_t token = 0;
        detail::check(detail::context("lock", key), [&] {
            return lc_session_lock(live(), k.c_str(), detail::to_ms(timeout), cancel ? cancel->native() : nullptr,
                                   &token);
        });
        return token;
    }

    lc_session* s_ = nullptr;
    // Heap-held so that the C library's pointer to it survives a move.
    std::unique_ptr<callback> cb_;
    // Kept for the C session's life (it points to it).
    tls_config tls_;
};

/// RAII hold of a key through a session, carrying the grant's fencing token:
///
///   lockingcenter::session_lock held(s, "invoice/42", 5s);
///   write_invoice(held.token());        // the resource checks the token
///   held.check();                       // throws session_lost_error if the hold is gone
///
/// The destructor unlocks by the token and never throws; unlock() reports
/// errors (session_lost_error when the session was lost: the hold had
/// already ended). The session must outlive the guard.
class session_lock {
public:
    session_lock(session& s, std::string key) : s_(&s), key_(std::move(key)) { token_ = s.lock(key_); }
    session_lock(session& s, std::string key, std::chrono::milliseconds timeout) : s_(&s), key_(std::move(key)) {
        token_ = s.lock(key_, timeout);
    }
    session_lock(session& s, std::string key, const cancel_token& cancel) : s_(&s), key_(std::move(key)) {
        token_ = s.lock(key_, cancel);
    }
    session_lock(session& s, std::string key, std::chrono::milliseconds timeout, const cancel_token& cancel)
        : s_(&s), key_(std::move(key)) {
        token_ = s.lock(key_, timeout, cancel);
    }
    /// try_lock: owns_lock() is false when anyone holds the key.
    session_lock(session& s, std::string key, std::try_to_lock_t) : s_(&s), key_(std::move(key)) {
        token_ = s.try_lock(key_).value_or(0);
    }

    session_lock(session_lock&& o) noexcept
        : s_(o.s_), key_(std::move(o.key_)), token_(std::exchange(o.token_, 0)) {}
    session_lock& operator=(session_lock&& o) noexcept {
        if (this != &o) {
            release_quietly();
            s_ = o.s_;
            key_ = std::move(o.key_);
            token_ = std::exchange(o.token_, 0);
        }
        return *this;
    }
    session_lock(const session_lock&) = delete;
    session_lock& operator=(const session_lock&) = delete;
    ~session_lock() { release_quietly(); }

    /// The grant's fencing token (0 when the guard owns nothing).
    std::uint64_t token() const noexcept { return token_; }
    const std::string& key() const noexcept { return key_; }
    bool owns_lock() const noexcept { return token_ != 0; }
    explicit operator bool() const noexcept { return owns_lock(); }
    /// true when the guard owned a hold that ended with its session.
    bool lost() const noexcept { return token_ != 0 && s_->lost(); }
    /// Throws session_lost_error when the hold ended with its session.
    void check() const {
        if (lost()) throw session_lost_error("lockingcenter: \"" + key_ + "\": session lost, the hold is gone");
    }

    /// Unlocks by the token now. Throws what session::unlock throws, and
    /// session_lost_error when the session was lost. Afterwards the guard
    /// owns nothing (also when it threw).
    void unlock() {
        std::uint64_t t = std::exchange(token_, 0);
        if (t == 0) return;
        if (s_->lost()) throw session_lost_error("lockingcenter: \"" + key_ + "\": session lost, the hold was gone");
        s_->unlock(key_, t);
    }

private:
    void release_quietly() noexcept {
        try {
            unlock();
        } catch (...) {
        }
    }

    session* s_;
    std::string key_;
    std::uint64_t token_ = 0;
};

template <class F>
auto session::with_lock(std::string_view key, F&& fn) -> decltype(fn(std::uint64_t{})) {
    session_lock held(*this, std::string(key));
    if constexpr (std::is_void_v<decltype(fn(std::uint64_t{}))>) {
        fn(held.token());
        held.check();
        held.unlock();
    } else {
        auto r = fn(held.token());
        held.check();
        held.unlock();
        return r;
    }
}

}  // namespace lockingcenter

#endif  // LOCKINGCENTER_HPP
