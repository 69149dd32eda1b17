// support.hpp - test helpers: a tiny JSON reader for the vectors, a fake
// one-connection server, and a GET of the web API's queue (tests only).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace support {

// ---- JSON -------------------------------------------------------------------

struct json {
    enum kind_t { null, boolean, number, string, array, object } kind = null;
    double num = 0;
    std::string str;
    std::vector<json> items;
    std::vector<std::pair<std::string, json>> members;

    const json& operator[](const std::string& name) const {
        for (const auto& m : members)
            if (m.first == name) return m.second;
        throw std::runtime_error("json: no member " + name);
    }
};

class json_parser {
public:
    explicit json_parser(const std::string& text) : s_(text) {}

    json parse() {
        json v = value(0);
        ws();
        if (i_ != s_.size()) fail();
        return v;
    }

private:
    const std::string& s_;
    std::size_t i_ = 0;

    [[noreturn]] void fail() const { throw std::runtime_error("json: syntax error at " + std::to_string(i_)); }
    void ws() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) i_++;
    }
    char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
    void expect(char c) {
        if (peek() != c) fail();
        i_++;
    }
    unsigned hex4() {
        if (i_ + 4 > s_.size()) fail();
        unsigned v = static_cast<unsigned>(std::stoul(s_.substr(i_, 4), nullptr, 16));
        i_ += 4;
        return v;
    }
    static void utf8(std::string& o, unsigned cp) {
        if (cp < 0x80) {
            o += static_cast<char>(cp);
        } else if (cp < 0x800) {
            o += static_cast<char>(0xC0 | (cp >> 6));
            o += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            o += static_cast<char>(0xE0 | (cp >> 12));
            o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            o += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            o += static_cast<char>(0xF0 | (cp >> 18));
            o += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            o += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }
    std::string string() {
        expect('"');
        std::string o;
        for (;;) {
            if (i_ >= s_.size()) fail();
            char c = s_[i_++];
            if (c == '"') return o;
            if (c != '\\') {
                o += c;
                continue;
            }
            char e = s_.at(i_++);
            switch (e) {
            case '"': case '\\': case '/': o += e; break;
            case 'b': o += '\b'; break;
            case 'f': o += '\f'; break;
            case 'n': o += '\n'; break;
            case 'r': o += '\r'; break;
            case 't': o += '\t'; break;
            case 'u': {
                unsigned cp = hex4();
                if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(i_, 2, "\\u") == 0) {
                    i_ += 2;
                    unsigned lo = hex4();
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                utf8(o, cp);
                break;
            }
            default: fail();
            }
        }
    }
    json value(int depth) {
        if (depth > 64) fail();
        ws();
        json v;
        char c = peek();
        if (c == '{') {
            v.kind = json::object;
            i_++;
            ws();
            if (peek() == '}') { i_++; return v; }
            for (;;) {
                ws();
                std::string name = string();
                ws();
                expect(':');
                v.members.emplace_back(std::move(name), value(depth + 1));
                ws();
                if (peek() == ',') { i_++; continue; }
                expect('}');
                return v;
            }
        }
        if (c == '[') {
            v.kind = json::array;
            i_++;
            ws();
            if (peek() == ']') { i_++; return v; }
            for (;;) {
                v.items.push_back(value(depth + 1));
                ws();
                if (peek() == ',') { i_++; continue; }
                expect(']');
                return v;
            }
        }
        if (c == '"') {
            v.kind = json::string;
            v.str = string();
            return v;
        }
        for (auto [word, kind, num] : {std::tuple{"true", json::boolean, 1.0}, std::tuple{"false", json::boolean, 0.0},
                                       std::tuple{"null", json::null, 0.0}}) {
            if (s_.compare(i_, std::strlen(word), word) == 0) {
                i_ += std::strlen(word);
                v.kind = kind;
                v.num = num;
                return v;
            }
        }
        const char* start = s_.c_str() + i_;
        char* end = nullptr;
        v.kind = json::number;
        v.num = std::strtod(start, &end);
        if (end == start) fail();
        i_ += static_cast<std::size_t>(end - start);
        return v;
    }
};

inline json load_vectors() {
    const char* path = std::getenv("LC_VECTORS");
    if (path == nullptr || *path == '\0') path = std::getenv("LC_VECTORS_DEFAULT");
    if (path == nullptr || *path == '\0') path = "../../wire/testdata/vectors.json";
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(std::string("cannot read vectors file ") + path);
    std::stringstream ss;
    ss << in.rdbuf();
    return json_parser(ss.str()).parse();
}

inline std::vector<std::uint8_t> unhex(const std::string& hex) {
    std::vector<std::uint8_t> out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
        out.push_back(static_cast<std::uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
    return out;
}

// ---- sockets ----------------------------------------------------------------

inline int listen_loopback(int backlog, int* port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd, backlog);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &al);
    *port = ntohs(a.sin_port);
    return fd;
}

/// "127.0.0.1:PORT" where nothing listens.
inline std::string dead_address() {
    int port = 0;
    int fd = listen_loopback(1, &port);
    ::close(fd);
    return "127.0.0.1:" + std::to_string(port);
}

/// Accepts one connection, reads one frame, then answers a byte, closes
/// without answering (answer = -1), holds until the client hangs up
/// (answer = -2, sets saw_eof), or holds until the client hangs up and
/// answers '+' 150 ms later (answer = -3, a grant that crossed the hang-up;
/// sets saw_eof and sent_grant), or holds until the client hangs up and then
/// keeps the connection open, sending nothing, until join() (answer = -4, a
/// server that never closes after the hang-up; at most 5 s after the EOF;
/// sets saw_eof).
class fake_server {
public:
    explicit fake_server(int answer) : answer_(answer) {
        lfd_ = listen_loopback(4, &port_);
        thread_ = std::thread([this] { run(); });
    }
    ~fake_server() {
        join();
        ::close(lfd_);
    }
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
    /// Ends the connection (answer = -4 closes it now) and waits for it.
    void join() {
        stop_ = true;
        if (thread_.joinable()) thread_.join();
    }
    /// After join(): true when a second connection (e.g. an unlock) is
    /// waiting to be accepted. Calls are synchronous, so once the call has
    /// returned any such connection is already queued.
    bool extra_connection() const {
        pollfd p{lfd_, POLLIN, 0};
        return ::poll(&p, 1, 0) > 0;
    }
    /// Blocks until the whole frame has arrived (at most 10 s), so a test
    /// can give up exactly when the request is waiting for its answer.
    void await_frame() const {
        for (int i = 0; i < 10000 && !got_frame; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<std::uint8_t> got;
    std::atomic<bool> got_frame{false};
    std::atomic<bool> saw_eof{false};
    std::atomic<bool> sent_grant{false};

private:
    void run() {
        int fd = ::accept(lfd_, nullptr, nullptr);
        if (fd < 0) return;
        std::uint8_t buf[512];
        for (;;) {
            if (got.size() >= 3) {
                std::size_t k = got[1];
                if (got.size() >= 3 + k && got.size() >= 3 + k + got[2 + k]) {
                    got_frame = true;
                    break;
                }
            }
            ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) break;
            got.insert(got.end(), buf, buf + n);
        }
        if (answer_ >= 0) {
            char b = static_cast<char>(answer_);
            ::send(fd, &b, 1, 0);
        } else if (answer_ == -2 || answer_ == -3 || answer_ == -4) {
            pollfd p{fd, POLLIN, 0};
            char b;
            if (::poll(&p, 1, 5000) > 0 && ::recv(fd, &b, 1, 0) == 0) saw_eof = true;
            if (saw_eof && answer_ == -3) {
                std::this_thread::sleep_for(std::chrono::milliseconds(150));
                b = '+';
                sent_grant = ::send(fd, &b, 1, MSG_NOSIGNAL) == 1;
            }
            if (saw_eof && answer_ == -4) {
                auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
                while (!stop_ && std::chrono::steady_clock::now() < end)
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
        }
        ::close(fd);
    }
    int answer_;
    std::atomic<bool> stop_{false};
    int lfd_ = -1, port_ = 0;
    std::thread thread_;
};

/// Waiters in the web API's queue for key: 0 when not held (404), -1 when
/// the API cannot be asked.
inline int queue_length(const std::string& key) {
    const char* web = std::getenv("LC_TEST_WEB_ADDRESS");
    if (web == nullptr || *web == '\0') return -1;
    std::string addr(web);
    auto colon = addr.rfind(':');
    std::string host = addr.substr(0, colon);
    if (host == "localhost") host = "127.0.0.1";
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(addr.substr(colon + 1))));
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 ||
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    std::string req = "GET /api/v1/keys/" + key + " HTTP/1.0\r\nHost: " + addr + "\r\n\r\n";
    ::send(fd, req.data(), req.size(), 0);
    std::string resp;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    int status = 0;
    if (std::sscanf(resp.c_str(), "HTTP/%*s %d", &status) != 1) return -1;
    if (status == 404) return resp.find("application/json") != std::string::npos ? 0 : -1;
    if (status != 200) return -1;
    auto body = resp.find("\r\n\r\n");
    if (body == std::string::npos) return -1;
    try {
        json v = json_parser(resp.substr(body + 4)).parse();
        return static_cast<int>(v["queue"].items.size());
    } catch (const std::exception&) {
        return -1;
    }
}

/// Lets a background waiter reach the queue: seen in the web API, or a
/// pause when the API is not there.
inline void let_queue(const std::string& key, int want) {
    using namespace std::chrono;
    if (queue_length(key) < 0) {
        std::this_thread::sleep_for(milliseconds(300));
        return;
    }
    auto end = steady_clock::now() + seconds(3);
    while (queue_length(key) != want && steady_clock::now() < end) std::this_thread::sleep_for(milliseconds(20));
}

}  // namespace support
