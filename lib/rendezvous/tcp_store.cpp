#include "rendezvous/tcp_store.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "coll/tcp/socket.hpp"
#include "rendezvous/tcp_store_server.hpp"
#include "rendezvous/tcp_store_wire.hpp"
#include "rendezvous/wait.hpp"

namespace prism::rdv {
namespace {

using Clock = std::chrono::steady_clock;
using coll::Fd;
using namespace wire;

int ms_until(Clock::time_point t) {
  const auto now = Clock::now();
  return t <= now ? 0 : int(std::min<int64_t>(std::chrono::ceil<Millis>(t - now).count(), 1 << 30));
}

// What became of an exchange on a connection: done, or why not.
enum class Io { OK, CLOSED, TIMEOUT, FAILED };

Io wait_for(int fd, short ev, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, ev, 0};
    const int r = poll(&p, 1, ms_until(deadline));
    if (r > 0) return Io::OK;
    if (r == 0) return Io::TIMEOUT;
    if (errno != EINTR) return Io::FAILED;
  }
}

Io send_all(int fd, const uint8_t* p, size_t n, Clock::time_point deadline) {
  while (n) {
    const ssize_t r = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      p += r, n -= size_t(r);
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (const Io w = wait_for(fd, POLLOUT, deadline); w != Io::OK) return w;
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      return errno == EPIPE || errno == ECONNRESET ? Io::CLOSED : Io::FAILED;
    }
  }
  return Io::OK;
}

Io recv_all(int fd, uint8_t* p, size_t n, Clock::time_point deadline) {
  while (n) {
    const ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r, n -= size_t(r);
    } else if (r == 0) {
      return Io::CLOSED;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (const Io w = wait_for(fd, POLLIN, deadline); w != Io::OK) return w;
    } else if (errno != EINTR) {
      return errno == ECONNRESET ? Io::CLOSED : Io::FAILED;
    }
  }
  return Io::OK;
}

std::string quoted(std::string_view key) {
  std::string q(1, '\'');
  q.append(key).push_back('\'');
  return q;
}

void check_key(std::string_view key, size_t value_size = 0) {
  if (key.size() > kMaxKey)
    throw StoreError("TCP store: a key of " + std::to_string(key.size()) + " bytes (at most " +
                     std::to_string(kMaxKey) + "): use shorter keys");
  if (value_size > kMaxValue)
    throw StoreError("TCP store: a value of " + std::to_string(value_size) + " bytes for key " + quoted(key) +
                     " (at most " + std::to_string(kMaxValue) + "): the store is for small values");
}

}  // namespace

TcpStore::TcpStore(const std::string& host, uint16_t port, bool serve, Millis connect_timeout, Listen listen,
                   const TcpStoreLimits& limits)
    : host_(host), port_(port), connect_timeout_(bounded_wait(connect_timeout)) {
  if (!serve && port == 0)
    throw StoreError("TCP store at " + host + ": port 0 names no server: give the port rank 0 serves at");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int e = getaddrinfo(host.c_str(), nullptr, &hints, &res); e != 0 || !res)
    throw StoreError("TCP store: cannot resolve host '" + host + "': " + gai_strerror(e) +
                     " (MASTER_ADDR, or the host of PRISM_STORE's tcp:// URL: an IPv4 address or a name this "
                     "host resolves)");
  std::memcpy(&addr_, res->ai_addr, sizeof addr_);
  freeaddrinfo(res);
  if (serve) {
    in_addr at{};
    at.s_addr = listen == Listen::STORE_HOST ? addr_.sin_addr.s_addr : htonl(INADDR_ANY);
    server_ = std::make_unique<TcpStoreServer>(at, port, limits);
    port_ = server_->port();
  }
  addr_.sin_port = htons(port_);
  idle_.push_back(open(true));
}

TcpStore::~TcpStore() = default;

std::string TcpStore::where() const { return host_ + ":" + std::to_string(port_); }

void TcpStore::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    idle_.clear();
  }
  server_.reset();
}

// A connection, greeted. The first retries until connect_timeout (the
// server may not listen yet); later ones try once, since the server was up.
Fd TcpStore::open(bool first) {
  const Clock::time_point deadline = Clock::now() + connect_timeout_;
  std::string last = "not tried";
  Millis backoff{10};
  for (;;) {
    Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) throw StoreError("TCP store " + where() + ": socket(): " + std::strerror(errno));
    const int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Io io = Io::OK;
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr_), sizeof addr_) != 0) {
      if (errno == EINPROGRESS) {
        io = wait_for(fd.get(), POLLOUT, deadline);
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (io == Io::OK && err != 0) io = Io::FAILED, last = std::strerror(err);
      } else {
        io = Io::FAILED, last = std::strerror(errno);
      }
    }
    if (io == Io::OK && coll::connected_to_itself(fd.get())) io = Io::FAILED, last = "connected to itself";
    if (io == Io::OK) {
      uint8_t hello[sizeof kGreeting];
      const Clock::time_point greet_by = std::max(deadline, Clock::now() + Millis(5000));
      io = send_all(fd.get(), kGreeting, sizeof kGreeting, greet_by);
      if (io == Io::OK) io = recv_all(fd.get(), hello, sizeof hello, greet_by);
      if (io == Io::OK && std::memcmp(hello, kGreeting, sizeof hello) == 0) return fd;
      // A hang-up before the greeting, on the first connection, may be a server going away as this one
      // starts (a store of the same URL made again: its old server closes as the new one comes): retry.
      const bool retry = first && io == Io::FAILED && Clock::now() < deadline;
      if (retry) {
        last = "hung up before its greeting";
        std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
        backoff = std::min(backoff * 2, Millis(500));
        continue;
      }
      throw StoreError("TCP store " + where() + ": something answers there, but not a PRISM TCP store of version 1 (" +
                       (io == Io::OK        ? "a wrong greeting"
                        : io == Io::TIMEOUT ? "no greeting"
                                            : "it hung up") +
                       "): is the port another service's (torch's own TCPStore, say)? Give PRISM's store its "
                       "own port");
    }
    if (io == Io::TIMEOUT) last = "no answer to connecting";
    if (!first)
      throw StoreError("TCP store " + where() + ": cannot connect again (" + last +
                       "): the process serving it (rank 0) has exited or destroyed its store");
    if (Clock::now() >= deadline)
      throw StoreError("TCP store " + where() + ": no server there after " + std::to_string(connect_timeout_.count()) +
                       " ms (last try: " + last +
                       "). Is rank 0, which serves it, running, and do all ranks have the same MASTER_ADDR and "
                       "MASTER_PORT (or PRISM_STORE)? Is the port open between the hosts?");
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, Millis(500));
  }
}

template <class Read>
auto TcpStore::call(const std::vector<uint8_t>& req, std::string_view what, Millis wait, Read read) {
  Fd fd;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_)
      throw StoreError("TCP store " + where() + ", " + std::string(what) +
                       ": this client was closed (TcpStore::close()): the store was done with");
    if (!idle_.empty()) fd = std::move(idle_.back()), idle_.pop_back();
  }
  if (!fd) fd = open(false);
  const Clock::time_point deadline = Clock::now() + wait;
  auto fail = [&](Io io) {
    return StoreError("TCP store " + where() + ", " + std::string(what) + ": " +
                      (io == Io::CLOSED    ? "the server closed the connection: the process serving the store "
                                             "(rank 0) has exited or destroyed its store"
                       : io == Io::TIMEOUT ? "no reply within " + std::to_string(wait.count()) +
                                                 " ms: is the process serving it (rank 0) stuck, or its host gone?"
                                           : std::string(std::strerror(errno))));
  };
  if (const Io io = send_all(fd.get(), req.data(), req.size(), deadline); io != Io::OK) throw fail(io);
  uint8_t status = 0;
  if (const Io io = recv_all(fd.get(), &status, 1, deadline); io != Io::OK) throw fail(io);
  auto recv_exact = [&](uint8_t* p, size_t n) {
    if (const Io io = recv_all(fd.get(), p, n, deadline); io != Io::OK) throw fail(io);
  };
  // A reply's length, checked before what it counts is read: at most any value the server keeps (one
  // that declares more is not PRISM's server, or is broken: nothing is allocated for it).
  auto length = [&](const uint8_t* len) {
    const uint64_t n = wire::get(len, 4);
    if (n > kMaxValue)
      throw StoreError("TCP store " + where() + ", " + std::string(what) + ": a reply of " + std::to_string(n) +
                       " bytes (at most " + std::to_string(kMaxValue) +
                       "): the server breaks the protocol. Is the port another service's?");
    return size_t(n);
  };
  auto recv_length = [&] {
    uint8_t len[4];
    recv_exact(len, 4);
    return length(len);
  };
  // An ERROR: its message; the connection is not used again (the server closes a refused one).
  if (status == uint8_t(Status::ERROR)) {
    uint8_t len[4];
    std::string msg = "the server refused the request, and closed before saying why";
    if (recv_all(fd.get(), len, 4, deadline) == Io::OK) {
      std::string text(length(len), '\0');
      if (recv_all(fd.get(), reinterpret_cast<uint8_t*>(text.data()), text.size(), deadline) == Io::OK)
        msg = std::move(text);
    }
    throw StoreError("TCP store " + where() + ", " + std::string(what) + ": " + msg);
  }
  auto out = read(Status(status), recv_exact, recv_length);
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(fd));
  return out;
}

void TcpStore::set(std::string_view key, std::span<const uint8_t> value) {
  check_key(key, value.size());
  std::vector<uint8_t> req = wire::request(Cmd::SET, key);
  put(req, value.size(), 4);
  req.insert(req.end(), value.begin(), value.end());
  call(req, "setting key " + quoted(key), connect_timeout_, [](Status, auto&, auto&) { return 0; });
}

Bytes TcpStore::get(std::string_view key, Millis timeout) {
  check_key(key);
  std::vector<uint8_t> req = wire::request(Cmd::GET, key);
  const Millis t = bounded_wait(timeout);
  put(req, uint64_t(t.count()), 8);
  const std::string what = "getting key " + quoted(key);
  auto got =
      call(req, what, t + connect_timeout_, [&](Status s, auto& recv_exact, auto& recv_length) -> std::optional<Bytes> {
        if (s == Status::TIMEOUT) return std::nullopt;
        Bytes v(recv_length());
        recv_exact(v.data(), v.size());
        return v;
      });
  if (!got)
    throw StoreError("TCP store " + where() + ": key " + quoted(key) + " not set after " +
                     std::to_string(timeout.count()) +
                     " ms: is the rank that sets it running, with the same store (and prefix)?");
  return std::move(*got);
}

int64_t TcpStore::add(std::string_view key, int64_t delta) {
  check_key(key);
  std::vector<uint8_t> req = wire::request(Cmd::ADD, key);
  put(req, uint64_t(delta), 8);
  return call(req, "adding to key " + quoted(key), connect_timeout_, [](Status, auto& recv_exact, auto&) {
    uint8_t v[8];
    recv_exact(v, 8);
    return int64_t(wire::get(v, 8));
  });
}

bool TcpStore::check(std::string_view key) {
  check_key(key);
  return call(wire::request(Cmd::CHECK, key), "checking key " + quoted(key), connect_timeout_,
              [](Status, auto& recv_exact, auto&) {
                uint8_t v = 0;
                recv_exact(&v, 1);
                return v != 0;
              });
}

std::shared_ptr<TcpStore> make_tcp_store(const std::string& host, uint16_t port, bool serve, Millis connect_timeout,
                                         Listen listen, const TcpStoreLimits& limits) {
  return std::make_shared<TcpStore>(host, port, serve, connect_timeout, listen, limits);
}

}  // namespace prism::rdv
