#include "rendezvous/tcp_store_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include "rendezvous/store.hpp"
#include "rendezvous/tcp_store.hpp"
#include "rendezvous/tcp_store_wire.hpp"
#include "rendezvous/wait.hpp"

namespace prism::rdv {
namespace {

using Clock = std::chrono::steady_clock;
using coll::Fd;
using namespace wire;

struct Client {
  Fd fd;
  bool greeted = false;
  std::vector<uint8_t> in;   // bytes received, not yet a whole request
  std::vector<uint8_t> out;  // reply bytes not yet sent
  bool parked = false;       // a GET waits for `key`
  std::string key;
  Clock::time_point deadline;  // a parked GET's, or a refused connection's
  std::string refusal;         // past the connections: its first request's ERROR, then it is closed
  bool closing = false;        // closed once `out` is sent
};

// The size of the whole request at `b` (`n` bytes here; 0: not all here
// yet), or nullopt when it breaks the protocol.
std::optional<size_t> request_size(const uint8_t* b, size_t n) {
  if (n == 0) return 0;
  if (b[0] < uint8_t(Cmd::SET) || b[0] > uint8_t(Cmd::CHECK)) return std::nullopt;
  if (n < 5) return 0;
  const uint64_t klen = get(b + 1, 4);
  if (klen > kMaxKey) return std::nullopt;
  const size_t head = 5 + size_t(klen);
  switch (Cmd(b[0])) {
    case Cmd::SET: {
      if (n < head + 4) return 0;
      const uint64_t vlen = get(b + head, 4);
      if (vlen > kMaxValue) return std::nullopt;
      return n < head + 4 + vlen ? 0 : head + 4 + size_t(vlen);
    }
    case Cmd::GET:
    case Cmd::ADD: return n < head + 8 ? 0 : head + 8;
    case Cmd::CHECK: return n < head ? 0 : head;
  }
  return std::nullopt;
}

constexpr size_t kOutLimit = size_t(kMaxValue) + (1 << 20);  // replies queued for one client
// Connections past the limit held at once to say why (each at most kRefusedFor): more are closed unanswered.
constexpr size_t kMaxRefused = 16;
constexpr auto kRefusedFor = std::chrono::seconds(2);

// TcpStoreLimits::connections, 0 resolved: half the descriptors this process may open (the rest
// are its own: the rank's links live in this process too).
size_t connection_limit(size_t asked) {
  if (asked) return asked;
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return size_t(1) << 16;
  return std::max<size_t>(16, size_t(r.rlim_cur) / 2);
}

class Loop {
 public:
  Loop(int listener, int wake, const TcpStoreLimits& limits)
      : listener_(listener), wake_(wake), limits_(limits), max_connections_(connection_limit(limits.connections)) {}

  void run() {
    std::vector<pollfd> pf;
    std::vector<Client*> who;
    for (;;) {
      pf.clear(), who.clear();
      pf.push_back({wake_, POLLIN, 0}), who.push_back(nullptr);
      const Clock::time_point now = Clock::now();
      if (now >= accept_paused_until_) pf.push_back({listener_, POLLIN, 0}), who.push_back(nullptr);
      Clock::time_point wake = now + std::chrono::hours(24);
      if (now < accept_paused_until_) wake = std::min(wake, accept_paused_until_);
      for (Client& c : clients_) {
        // A client that does not read its replies is not read from either, until it does.
        const short in = c.out.size() < kOutLimit ? POLLIN : 0;
        pf.push_back({c.fd.get(), short(in | (c.out.empty() ? 0 : POLLOUT)), 0}), who.push_back(&c);
        if (c.parked || !c.refusal.empty()) wake = std::min(wake, c.deadline);
      }
      const int ms = int(std::chrono::ceil<std::chrono::milliseconds>(wake - now).count());
      if (poll(pf.data(), pf.size(), std::max(ms, 0)) < 0 && errno != EINTR) return;
      if (pf[0].revents) return;  // the owner is going
      for (size_t i = 1; i < pf.size(); ++i) {
        if (!pf[i].revents) continue;
        if (!who[i]) {
          accept_all();
        } else {
          Client& c = *who[i];
          if (!c.fd) continue;  // dropped meanwhile (woken, then broke the protocol)
          if (pf[i].revents & POLLOUT) flush(c);
          if (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) receive(c);
        }
      }
      expire(Clock::now());
      clients_.remove_if([](const Client& c) { return !c.fd; });
    }
  }

 private:
  void accept_all() {
    for (;;) {
      Fd fd(accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) {
        // Out of descriptors: wait a little rather than spin on a listener that stays readable.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
        return;
      }
      std::string refusal;
      if (connected_ >= max_connections_) {
        if (refused_ >= kMaxRefused) continue;  // closed unanswered: a flood
        refusal = "the store has " + std::to_string(connected_) + " connections (at most " +
                  std::to_string(max_connections_) +
                  "): is a client opening connections in a loop, or is the group larger than its rank 0 can serve? "
                  "(TcpStoreLimits::connections; by default half this process's descriptor limit, ulimit -n)";
      }
      ++(refusal.empty() ? connected_ : refused_);
      clients_.push_back(Client{});
      Client& c = clients_.back();
      c.fd = std::move(fd);
      c.refusal = std::move(refusal);
      c.deadline = Clock::now() + kRefusedFor;
    }
  }

  void drop(Client& c) {
    if (!c.fd) return;
    c.fd.reset();
    c.parked = false;
    --(c.refusal.empty() ? connected_ : refused_);
  }

  void flush(Client& c) {
    size_t sent = 0;
    while (c.fd && sent < c.out.size()) {
      const ssize_t r = send(c.fd.get(), c.out.data() + sent, c.out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r > 0) {
        sent += size_t(r);
      } else if (r < 0 && errno == EINTR) {
        continue;
      } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        return drop(c);
      }
    }
    c.out.erase(c.out.begin(), c.out.begin() + std::ptrdiff_t(sent));
    // Only once its whole request was read: closing with bytes unread would reset the connection,
    // and the client might lose the reply.
    if (c.closing && c.out.empty()) drop(c);
  }

  void receive(Client& c) {
    uint8_t buf[64 << 10];
    for (;;) {
      const ssize_t r = recv(c.fd.get(), buf, sizeof buf, 0);
      if (r > 0) {
        c.in.insert(c.in.end(), buf, buf + r);
        // A parked client sends nothing more (one request at a time): one that floods is dropped.
        if (c.parked && c.in.size() > size_t(kMaxKey) + kMaxValue + 64) return drop(c);
        if (size_t(r) < sizeof buf) break;
      } else if (r < 0 && errno == EINTR) {
        continue;
      } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        return drop(c);  // gone (its parked GET, if any, with it)
      }
    }
    serve(c);
  }

  // Answers c's whole requests, in order, until one parks.
  void serve(Client& c) {
    if (!c.greeted) {
      if (c.in.size() < sizeof kGreeting) return;
      if (std::memcmp(c.in.data(), kGreeting, sizeof kGreeting) != 0) return drop(c);
      c.greeted = true;
      c.out.insert(c.out.end(), kGreeting, kGreeting + sizeof kGreeting);
      c.in.erase(c.in.begin(), c.in.begin() + sizeof kGreeting);
    }
    size_t off = 0;
    while (c.fd && !c.parked && !c.closing) {
      const std::optional<size_t> n = request_size(c.in.data() + off, c.in.size() - off);
      if (!n) return drop(c);
      if (*n == 0) {
        // A connection past the limit is not buffered a big SET for: closed without a word.
        if (!c.refusal.empty() && c.in.size() - off > size_t(kMaxKey) + 64) return drop(c);
        break;
      }
      if (!c.refusal.empty()) {  // a connection past the limit: says why, then closes
        off += *n;
        error_reply(c, c.refusal);
        c.closing = true;
        break;
      }
      const std::vector<uint8_t> req(c.in.begin() + std::ptrdiff_t(off), c.in.begin() + std::ptrdiff_t(off + *n));
      off += *n;
      handle(c, req.data(), req.size());
    }
    c.in.erase(c.in.begin(), c.in.begin() + std::ptrdiff_t(off));
    if (c.fd && !c.out.empty()) flush(c);
  }

  void handle(Client& c, const uint8_t* p, size_t n) {
    const Cmd cmd = Cmd(p[0]);
    const size_t klen = size_t(get(p + 1, 4));
    std::string key(reinterpret_cast<const char*>(p + 5), klen);
    const uint8_t* arg = p + 5 + klen;
    switch (cmd) {
      case Cmd::SET:
        if (const std::string full = room_for(key, n - (5 + klen + 4)); !full.empty()) return error_reply(c, full);
        hold(key, Bytes(arg + 4, p + n));
        c.out.push_back(uint8_t(Status::OK));
        woken(key);
        return;
      case Cmd::GET: {
        const auto it = data_.find(key);
        if (it != data_.end()) return value_reply(c, it->second);
        const uint64_t ms = get(arg, 8);
        c.parked = true, c.key = std::move(key);
        c.deadline = Clock::now() + std::chrono::milliseconds(std::min(ms, uint64_t(kLongestWait.count())));
        return;
      }
      case Cmd::ADD: {
        const int64_t delta = int64_t(get(arg, 8));
        int64_t v = 0;
        const auto it = data_.find(key);
        if (it != data_.end()) {
          const char* b = reinterpret_cast<const char*>(it->second.data());
          const auto r = std::from_chars(b, b + it->second.size(), v);
          if (r.ec != std::errc() || r.ptr != b + it->second.size())
            return error_reply(c, "key '" + key + "' holds a value that is not a decimal integer: add() only works " +
                                      "on keys that only add() sets");
        }
        if (__builtin_add_overflow(v, delta, &v))
          return error_reply(c, "adding " + std::to_string(delta) + " to key '" + key + "' overflows 64 bits");
        const std::string s = std::to_string(v);
        if (const std::string full = room_for(key, s.size()); !full.empty()) return error_reply(c, full);
        hold(key, Bytes(s.begin(), s.end()));
        c.out.push_back(uint8_t(Status::OK));
        put(c.out, uint64_t(v), 8);
        woken(key);
        return;
      }
      case Cmd::CHECK:
        c.out.push_back(uint8_t(Status::OK));
        c.out.push_back(data_.count(key) ? 1 : 0);
        return;
    }
  }

  // Why `key` may not hold a value of `size` bytes (the limits), or "".
  std::string room_for(const std::string& key, size_t size) const {
    const auto it = data_.find(key);
    if (it == data_.end() && data_.size() >= limits_.keys)
      return "the store holds " + std::to_string(data_.size()) + " keys (at most " + std::to_string(limits_.keys) +
             "): key '" + key +
             "' is one more. A group's rendezvous needs a few per rank: is a client setting keys in a loop? "
             "(TcpStoreLimits::keys)";
    const size_t now = bytes_ - (it == data_.end() ? 0 : key.size() + it->second.size());
    if (now + key.size() + size > limits_.bytes)
      return "key '" + key + "' with its value of " + std::to_string(size) + " bytes would make the store hold " +
             std::to_string(now + key.size() + size) + " bytes of keys and values (at most " +
             std::to_string(limits_.bytes) + "): the store is for a rendezvous, not data (TcpStoreLimits::bytes)";
    return {};
  }
  void hold(const std::string& key, Bytes v) {
    const auto [it, added] = data_.try_emplace(key);
    bytes_ += v.size() + (added ? key.size() : 0);
    bytes_ -= it->second.size();
    it->second = std::move(v);
  }

  void value_reply(Client& c, const Bytes& v) {
    c.out.push_back(uint8_t(Status::OK));
    put(c.out, v.size(), 4);
    c.out.insert(c.out.end(), v.begin(), v.end());
  }
  void error_reply(Client& c, const std::string& why) {
    c.out.push_back(uint8_t(Status::ERROR));
    put(c.out, why.size(), 4);
    put(c.out, why);
  }

  // `key` was just set: its parked GETs are answered, and their clients'
  // further requests served.
  void woken(const std::string& key) {
    const Bytes& v = data_[key];
    for (Client& w : clients_) {
      if (!w.fd || !w.parked || w.key != key) continue;
      w.parked = false;
      value_reply(w, v);
      pending_.push_back(&w);
    }
    if (serving_woken_) return;  // serve() below would recurse through another SET
    serving_woken_ = true;
    while (!pending_.empty()) {
      Client* w = pending_.front();
      pending_.erase(pending_.begin());
      serve(*w);
    }
    serving_woken_ = false;
  }

  void expire(Clock::time_point now) {
    for (Client& c : clients_) {
      if (c.fd && !c.refusal.empty() && c.deadline <= now) drop(c);  // said why, or never asked
      if (!c.fd || !c.parked || c.deadline > now) continue;
      c.parked = false;
      c.out.push_back(uint8_t(Status::TIMEOUT));
      serve(c);
    }
  }

  int listener_, wake_;
  TcpStoreLimits limits_;
  size_t max_connections_;
  size_t connected_ = 0, refused_ = 0;  // clients served, and those past the limit told why
  size_t bytes_ = 0;                    // data_'s keys and values
  Clock::time_point accept_paused_until_{};
  std::list<Client> clients_;  // a list: pointers to clients stay valid while others come and go
  std::unordered_map<std::string, Bytes> data_;
  std::vector<Client*> pending_;
  bool serving_woken_ = false;
};

}  // namespace

TcpStoreServer::TcpStoreServer(in_addr ip, uint16_t port, const TcpStoreLimits& limits) : limits_(limits) {
  listener_.reset(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener_) throw StoreError(std::string("TCP store: socket(): ") + std::strerror(errno));
  const int one = 1;
  setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr = ip;
  a.sin_port = htons(port);
  if (bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listener_.get(), 1024) != 0) {
    const int e = errno;
    char at[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &ip, at, sizeof at);
    throw StoreError("TCP store: cannot serve at " + (ip.s_addr == htonl(INADDR_ANY) ? "" : std::string(at) + " ") +
                     "port " + std::to_string(port) + ": " + std::strerror(e) +
                     (e == EADDRNOTAVAIL
                          ? " (the store's host is no address of this host: give rank 0's own, as PRISM_MPI_HOST "
                            "or MASTER_ADDR)"
                          : " (another job's store there? give this job another port: MASTER_PORT or PRISM_STORE)"));
  }
  socklen_t len = sizeof a;
  getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  wake_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) throw StoreError(std::string("TCP store: eventfd(): ") + std::strerror(errno));
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const uint64_t one = 1;
  if (write(wake_.get(), &one, sizeof one) < 0) {
    // An eventfd write fails only when its counter is full: it is readable then, which is all we need.
  }
  thread_.join();
}

void TcpStoreServer::serve() {
  try {
    Loop(listener_.get(), wake_.get(), limits_).run();
  } catch (const std::exception&) {
    // Out of memory: the store ends (its clients see their connections close) rather than the process.
  }
}

}  // namespace prism::rdv
