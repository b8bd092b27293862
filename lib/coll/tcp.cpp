#include "coll/tcp.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

namespace prism::coll {
namespace {

using Clock = std::chrono::steady_clock;
using std::to_string;

constexpr uint32_t kMagic = 0x50524354;  // "PRCT"
constexpr uint32_t kVersion = 1;
constexpr size_t kHelloSize = 24;                    // magic, version, job, size, from, to: uint32 LE each
constexpr uint64_t kMaxMessage = uint64_t(1) << 40;  // a longer length prefix means a corrupt stream
constexpr size_t kStage = 64 << 10;                  // read size when messages are small (several per read)
constexpr size_t kPumpBudget = 8 << 20;              // bytes read from one peer before looking at the others

std::string addr_str(const TcpAddr& a) { return format_ipv4(a.ip) + ":" + to_string(a.port); }

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

struct Hello {
  uint32_t magic = kMagic, version = kVersion, job = 0, size = 0, from = 0, to = 0;
  void write(uint8_t* p) const {
    const uint32_t v[6] = {magic, version, job, size, from, to};
    for (int i = 0; i < 6; ++i) put32(p + 4 * i, v[i]);
  }
  static Hello read(const uint8_t* p) {
    return Hello{get32(p), get32(p + 4), get32(p + 8), get32(p + 12), get32(p + 16), get32(p + 20)};
  }
};

sockaddr_in to_sockaddr(const TcpAddr& a) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(a.ip);
  s.sin_port = htons(a.port);
  return s;
}

// A non-blocking TCP socket with Nagle off. Buffers: SO_*BUFFORCE when
// privileged; otherwise the kernel's autotuning is left alone, since a plain
// SO_*BUF is capped at net.core.*mem_max (some 200 KiB) and switches
// autotuning off, which would make the buffers smaller, not larger.
int tcp_socket(const TcpOptions& o, const std::string& who) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw LinkError(who + ": socket(): " + std::strerror(errno));
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (o.socket_buffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &o.socket_buffer, sizeof o.socket_buffer);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &o.socket_buffer, sizeof o.socket_buffer);
  }
  return fd;
}

int ms_until(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  return int(std::chrono::ceil<std::chrono::milliseconds>(t - now).count());
}

// Rank `rank`'s connection to every other rank: fds[j], -1 at [rank].
std::vector<int> establish(const TcpPeers& peers, int rank, const TcpOptions& o) {
  const int n = int(peers.ranks.size());
  const std::string me = "rank " + to_string(rank) + " of job " + to_string(peers.job);
  std::vector<int> fds(size_t(n), -1);
  struct Out {  // our connection to a lower rank
    int fd = -1;
    bool connecting = false;  // else, with fd >= 0: waiting for its hello
    uint8_t buf[kHelloSize];
    size_t got = 0;
    Clock::time_point retry_at{};
    std::string last_error = "not tried";
  };
  struct In {  // a connection accepted, before its hello
    int fd;
    sockaddr_in from;
    uint8_t buf[kHelloSize];
    size_t got = 0;
  };
  std::vector<Out> out(static_cast<size_t>(rank));
  std::vector<In> in;
  int listener = -1;
  auto cleanup = [&] {
    for (auto& c : out)
      if (c.fd >= 0) close(c.fd);
    for (auto& c : in) close(c.fd);
    if (listener >= 0) close(listener);
    for (int& fd : fds)
      if (fd >= 0) close(fd), fd = -1;
  };
  try {
    const TcpAddr self = peers.ranks[size_t(rank)];
    listener = tcp_socket(o, me);
    const int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const sockaddr_in sa = to_sockaddr(self);
    if (bind(listener, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 || listen(listener, n + 16) != 0)
      throw LinkError(me + ": cannot listen at " + addr_str(self) + ": " + std::strerror(errno) +
                      " (is this host's address right, and the port free?)");

    auto hello_to = [&](int peer) {
      Hello h;
      h.job = peers.job, h.size = uint32_t(n), h.from = uint32_t(rank), h.to = uint32_t(peer);
      return h;
    };
    auto check = [&](const Hello& h, const std::string& whom) {
      if (h.magic != kMagic || h.version != kVersion)
        throw LinkError(me + ": " + whom + " is not a PRISM TCP transport of version " + to_string(kVersion) +
                        " (wrong magic or version in its hello)");
      if (h.job != peers.job || h.size != uint32_t(n))
        throw LinkError(me + ": " + whom + " says it is rank " + to_string(h.from) + " of job " + to_string(h.job) +
                        " in a group of " + to_string(h.size) + ", but this is job " + to_string(peers.job) +
                        " in a group of " + to_string(n) +
                        ": the ranks were given different peers (job, or number of ranks)");
      if (h.to != uint32_t(rank))
        throw LinkError(me + ": " + whom + " (rank " + to_string(h.from) + ") was calling rank " + to_string(h.to) +
                        ": the ranks were given different addresses");
    };
    auto start_connect = [&](int j, Clock::time_point now) {
      Out& c = out[size_t(j)];
      c.fd = tcp_socket(o, me);
      c.got = 0;
      const sockaddr_in to = to_sockaddr(peers.ranks[size_t(j)]);
      if (connect(c.fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0 || errno == EINPROGRESS) {
        c.connecting = true;
        return;
      }
      c.last_error = std::strerror(errno);
      close(c.fd), c.fd = -1;
      c.retry_at = now + std::chrono::milliseconds(20);
    };
    auto fail_out = [&](int j, const std::string& why, Clock::time_point now) {
      Out& c = out[size_t(j)];
      c.last_error = why;
      close(c.fd), c.fd = -1;
      c.connecting = false;
      c.retry_at = now + std::chrono::milliseconds(20);
    };

    const Clock::time_point deadline = Clock::now() + o.connect_timeout;
    for (;;) {
      Clock::time_point now = Clock::now();
      int missing = 0;
      for (int j = 0; j < n; ++j) missing += j != rank && fds[size_t(j)] < 0;
      if (missing == 0) break;
      if (now >= deadline) {
        std::string list;
        for (int j = 0; j < n; ++j) {
          if (j == rank || fds[size_t(j)] >= 0) continue;
          std::string state = "it never called in";
          if (j < rank) {
            const Out& c = out[size_t(j)];
            state = c.fd < 0       ? "last try: " + c.last_error
                    : c.connecting ? "no answer to connecting (is the address reachable?)"
                                   : "connected, but it sent no hello";
          }
          list += (list.empty() ? "" : ", ") + std::string("rank ") + to_string(j) + " (at " +
                  addr_str(peers.ranks[size_t(j)]) + ": " + state + ")";
        }
        throw LinkError(me + ": TCP setup timed out after " + to_string(o.connect_timeout.count()) +
                        " ms; never connected: " + list + ". Is every rank started, with the same peers?");
      }
      Clock::time_point wake = deadline;
      for (int j = 0; j < rank; ++j) {
        Out& c = out[size_t(j)];
        if (fds[size_t(j)] >= 0 || c.fd >= 0) continue;
        if (c.retry_at <= now) start_connect(j, now);
        if (c.fd < 0) wake = std::min(wake, c.retry_at);
      }

      std::vector<pollfd> pf;
      std::vector<int> who;  // per pollfd: -1 listener, 0..rank-1 out, rank + k: in[k]
      pf.push_back({listener, POLLIN, 0}), who.push_back(-1);
      for (int j = 0; j < rank; ++j)
        if (out[size_t(j)].fd >= 0 && fds[size_t(j)] < 0)
          pf.push_back({out[size_t(j)].fd, short(out[size_t(j)].connecting ? POLLOUT : POLLIN), 0}), who.push_back(j);
      for (size_t k = 0; k < in.size(); ++k) pf.push_back({in[k].fd, POLLIN, 0}), who.push_back(rank + int(k));
      if (poll(pf.data(), pf.size(), ms_until(wake, now)) < 0 && errno != EINTR)
        throw LinkError(me + ": poll(): " + std::strerror(errno));
      now = Clock::now();

      std::vector<size_t> finished_in;
      for (size_t i = 0; i < pf.size(); ++i) {
        if (!pf[i].revents) continue;
        const int w = who[i];
        if (w == -1) {
          for (;;) {
            In c{};
            socklen_t len = sizeof c.from;
            c.fd = accept4(listener, reinterpret_cast<sockaddr*>(&c.from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (c.fd < 0) break;
            const int on = 1;
            setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
            in.push_back(c);
          }
        } else if (w < rank) {
          Out& c = out[size_t(w)];
          if (c.connecting) {
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err != 0) {
              fail_out(w, std::strerror(err), now);
              continue;
            }
            // On loopback a connect to a port nobody listens at can meet itself.
            sockaddr_in a{}, b{};
            socklen_t la = sizeof a, lb = sizeof b;
            getsockname(c.fd, reinterpret_cast<sockaddr*>(&a), &la);
            getpeername(c.fd, reinterpret_cast<sockaddr*>(&b), &lb);
            if (a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port) {
              fail_out(w, "connected to itself", now);
              continue;
            }
            uint8_t h[kHelloSize];
            hello_to(w).write(h);
            if (send(c.fd, h, sizeof h, MSG_NOSIGNAL) != ssize_t(sizeof h)) {
              fail_out(w, std::strerror(errno), now);
              continue;
            }
            c.connecting = false;
          } else {
            const ssize_t r = recv(c.fd, c.buf + c.got, kHelloSize - c.got, 0);
            if (r <= 0) {
              if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
              fail_out(w, r == 0 ? "closed before its hello" : std::strerror(errno), now);
              continue;
            }
            c.got += size_t(r);
            if (c.got < kHelloSize) continue;
            const Hello h = Hello::read(c.buf);
            const std::string whom = "rank " + to_string(w) + " at " + addr_str(peers.ranks[size_t(w)]);
            check(h, whom);
            if (h.from != uint32_t(w))
              throw LinkError(me + ": " + whom + " answers as rank " + to_string(h.from) +
                              ": the ranks were given different addresses");
            fds[size_t(w)] = c.fd, c.fd = -1;
          }
        } else {
          In& c = in[size_t(w - rank)];
          const ssize_t r = recv(c.fd, c.buf + c.got, kHelloSize - c.got, 0);
          if (r <= 0) {
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            finished_in.push_back(size_t(w - rank));  // gone before its hello: it will call again
            continue;
          }
          c.got += size_t(r);
          if (c.got < kHelloSize) continue;
          const Hello h = Hello::read(c.buf);
          // Answer first, so the caller sees a mismatch for itself too.
          uint8_t reply[kHelloSize];
          hello_to(int(h.from)).write(reply);
          send(c.fd, reply, sizeof reply, MSG_NOSIGNAL);
          const std::string whom = "a connection from " + format_ipv4(ntohl(c.from.sin_addr.s_addr)) + ":" +
                                   to_string(ntohs(c.from.sin_port));
          check(h, whom);
          if (h.from <= uint32_t(rank) || h.from >= uint32_t(n))
            throw LinkError(me + ": " + whom + " says it is rank " + to_string(h.from) + ", but only ranks " +
                            to_string(rank + 1) + ".." + to_string(n - 1) + " call rank " + to_string(rank));
          if (fds[h.from] >= 0)
            throw LinkError(me + ": rank " + to_string(h.from) + " connected twice (" + whom +
                            "): two processes were started as that rank?");
          fds[h.from] = c.fd, c.fd = -1;
          finished_in.push_back(size_t(w - rank));
        }
      }
      std::sort(finished_in.rbegin(), finished_in.rend());
      for (size_t k : finished_in) {
        if (in[k].fd >= 0) close(in[k].fd);
        in.erase(in.begin() + std::ptrdiff_t(k));
      }
    }
    for (auto& c : in) close(c.fd);
    in.clear();
    close(listener), listener = -1;
    return fds;
  } catch (...) {
    cleanup();
    throw;
  }
}

class Tcp final : public Links {
 public:
  Tcp(int rank, uint32_t job, std::vector<int> fds, std::chrono::milliseconds timeout)
      : rank_(rank), job_(job), timeout_(timeout), peers_(fds.size()), stage_(kStage) {
    for (size_t j = 0; j < fds.size(); ++j) peers_[j].fd = fds[j];
  }
  ~Tcp() override {
    for (auto& p : peers_)
      if (p.fd >= 0) shutdown(p.fd, SHUT_WR), close(p.fd);
  }
  int rank() const override { return rank_; }
  int size() const override { return int(peers_.size()); }

  void send(int peer, const void* data, size_t len) override {
    check(peer);
    SendJob s(peer, data, len);
    run(&s, nullptr);
  }
  size_t recv(int peer, void* data, size_t cap) override {
    check(peer);
    RecvJob r{peer, static_cast<uint8_t*>(data), cap};
    run(nullptr, &r);
    return r.len;
  }
  size_t sendrecv(int to, const void* sdata, size_t slen, int from, void* rdata, size_t rcap) override {
    check(to), check(from);
    SendJob s(to, sdata, slen);
    RecvJob r{from, static_cast<uint8_t*>(rdata), rcap};
    run(&s, &r);
    return r.len;
  }

 private:
  struct SendJob {
    SendJob(int p, const void* d, size_t n) : peer(p), data(static_cast<const uint8_t*>(d)), len(n) {
      for (int i = 0; i < 8; ++i) hdr[i] = uint8_t(uint64_t(n) >> (8 * i));
    }
    int peer;
    uint8_t hdr[8];
    const uint8_t* data;
    size_t len;
    size_t sent = 0;  // of 8 + len
    bool done() const { return sent == 8 + len; }
  };
  struct RecvJob {
    int peer;
    uint8_t* data;
    size_t cap;
    size_t len = 0;
    bool done = false;
    uint64_t refused = 0;  // the length of a message longer than cap
  };
  enum class Sink { OWNED, USER, DISCARD };
  struct Peer {
    int fd = -1;
    std::string gone;  // why the connection is gone
    uint8_t hdr[8];
    size_t hdr_got = 0;
    bool in_body = false;
    uint64_t len = 0, got = 0;
    Sink sink = Sink::OWNED;
    uint8_t* dst = nullptr;
    std::vector<uint8_t> owned;
    std::deque<std::vector<uint8_t>> done;  // whole messages not yet received
  };

  void check(int peer) const {
    if (peer < 0 || peer >= size() || peer == rank_)
      throw LinkError("rank " + to_string(rank_) + ": no peer " + to_string(peer) + " in a group of " +
                      to_string(size()));
  }
  std::string gone_error(int p) const {
    return "rank " + to_string(rank_) + " of job " + to_string(job_) + ": rank " + to_string(p) +
           " is gone: " + peers_[size_t(p)].gone;
  }
  void lost(int p, std::string why) {
    Peer& q = peers_[size_t(p)];
    if (q.fd >= 0) close(q.fd), q.fd = -1;
    q.gone = std::move(why);
  }

  void start_body(int p) {
    Peer& q = peers_[size_t(p)];
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= uint64_t(q.hdr[i]) << (8 * i);
    q.hdr_got = 0;
    if (len > kMaxMessage) {
      lost(p, "its stream is corrupt (a message of " + to_string(len) + " bytes)");
      return;
    }
    q.in_body = true, q.len = len, q.got = 0;
    if (active_ && active_->peer == p && !active_->done) {
      if (len > active_->cap) {
        active_->refused = len, active_->done = true;
        q.sink = Sink::DISCARD, q.dst = nullptr;
      } else {
        q.sink = Sink::USER, q.dst = active_->data;
      }
    } else {
      q.owned.resize(len);
      q.sink = Sink::OWNED, q.dst = q.owned.data();
    }
    if (len == 0) finish_body(p);
  }
  void finish_body(int p) {
    Peer& q = peers_[size_t(p)];
    q.in_body = false;
    if (q.sink == Sink::USER) {
      active_->len = q.len, active_->done = true;
    } else if (q.sink == Sink::OWNED) {
      q.done.push_back(std::move(q.owned));
      q.owned = {};
    }
    q.dst = nullptr;
  }
  void consume(int p, const uint8_t* src, size_t n) {
    Peer& q = peers_[size_t(p)];
    while (n && q.fd >= 0) {
      if (!q.in_body) {
        const size_t k = std::min(8 - q.hdr_got, n);
        std::memcpy(q.hdr + q.hdr_got, src, k);
        q.hdr_got += k, src += k, n -= k;
        if (q.hdr_got == 8) start_body(p);
        continue;
      }
      const size_t k = size_t(std::min<uint64_t>(q.len - q.got, n));
      if (q.sink != Sink::DISCARD) std::memcpy(q.dst + q.got, src, k);
      q.got += k, src += k, n -= k;
      if (q.got == q.len) finish_body(p);
    }
  }
  // Reads what peer p has sent, up to kPumpBudget; whether anything came.
  bool pump(int p) {
    Peer& q = peers_[size_t(p)];
    size_t total = 0;
    while (q.fd >= 0 && total < kPumpBudget) {
      ssize_t r;
      if (q.in_body && q.sink != Sink::DISCARD && q.len - q.got >= kStage) {  // large: straight into place
        r = ::recv(q.fd, q.dst + q.got, size_t(q.len - q.got), 0);
        if (r > 0) {
          q.got += uint64_t(r);
          if (q.got == q.len) finish_body(p);
        }
      } else {
        r = ::recv(q.fd, stage_.data(), stage_.size(), 0);
        if (r > 0) consume(p, stage_.data(), size_t(r));
      }
      if (r > 0) {
        total += size_t(r);
      } else if (r == 0) {
        lost(p, q.in_body || q.hdr_got ? "it closed the connection in the middle of a message"
                                       : "it closed the connection (it exited, or destroyed its transport)");
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        break;
      } else if (errno != EINTR) {
        lost(p, std::strerror(errno));
      }
    }
    return total > 0;
  }
  bool push(SendJob& s) {
    Peer& q = peers_[size_t(s.peer)];
    bool progress = false;
    while (!s.done() && q.fd >= 0) {
      iovec iov[2];
      int k = 0;
      if (s.sent < 8) iov[k++] = {s.hdr + s.sent, 8 - s.sent};
      const size_t body = s.sent < 8 ? 0 : s.sent - 8;
      if (body < s.len) iov[k++] = {const_cast<uint8_t*>(s.data) + body, s.len - body};
      msghdr m{};
      m.msg_iov = iov, m.msg_iovlen = size_t(k);
      const ssize_t r = sendmsg(q.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r >= 0) {
        s.sent += size_t(r), progress = true;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        break;
      } else if (errno != EINTR) {
        lost(s.peer, errno == EPIPE ? "it closed the connection (it exited, or destroyed its transport)"
                                    : std::strerror(errno));
      }
    }
    return progress;
  }

  // Receives r's message straight into its buffer when it has not fully
  // arrived yet; takes a whole one from the queue when it has.
  void attach(RecvJob& r) {
    Peer& q = peers_[size_t(r.peer)];
    if (!q.done.empty()) {
      std::vector<uint8_t> m = std::move(q.done.front());
      q.done.pop_front();
      r.done = true;
      if (m.size() > r.cap) {
        r.refused = m.size();
      } else {
        if (!m.empty()) std::memcpy(r.data, m.data(), m.size());
        r.len = m.size();
      }
    } else if (q.in_body && q.sink == Sink::OWNED) {
      if (q.len > r.cap) {
        r.refused = q.len, r.done = true;
        q.sink = Sink::DISCARD, q.owned = {}, q.dst = nullptr;
      } else {
        std::memcpy(r.data, q.owned.data(), size_t(q.got));
        q.owned = {};
        q.sink = Sink::USER, q.dst = r.data;
      }
    }
  }
  // After a recv that threw: a message half received into the caller's
  // buffer goes on into one of our own.
  void detach(RecvJob& r) {
    Peer& q = peers_[size_t(r.peer)];
    if (q.in_body && q.sink == Sink::USER) {
      q.owned.resize(q.len);
      std::memcpy(q.owned.data(), r.data, size_t(q.got));
      q.sink = Sink::OWNED, q.dst = q.owned.data();
    }
  }

  void run(SendJob* s, RecvJob* r) {
    if (r) {
      attach(*r);
      active_ = r;
    }
    struct Guard {
      Tcp* t;
      RecvJob* r;
      ~Guard() {
        if (r) t->detach(*r), t->active_ = nullptr;
      }
    } guard{this, r};
    const std::string me = "rank " + to_string(rank_) + " of job " + to_string(job_);
    Clock::time_point now = Clock::now(), last_s = now, last_r = now;
    std::vector<pollfd> pf;
    std::vector<int> who;
    for (;;) {
      if (s && !s->done() && push(*s)) last_s = Clock::now();
      if (r && !r->done && pump(r->peer)) last_r = Clock::now();
      const bool s_wait = s && !s->done(), r_wait = r && !r->done;
      if (!s_wait && !r_wait) break;
      if (s_wait && peers_[size_t(s->peer)].fd < 0)
        throw LinkError(gone_error(s->peer) + " (sending it a message of " + to_string(s->len) + " bytes)");
      if (r_wait && peers_[size_t(r->peer)].fd < 0) throw LinkError(gone_error(r->peer) + " (receiving)");

      pf.clear(), who.clear();
      for (size_t j = 0; j < peers_.size(); ++j) {
        if (peers_[j].fd < 0) continue;
        short ev = POLLIN;
        if (s_wait && int(j) == s->peer) ev |= POLLOUT;
        pf.push_back({peers_[j].fd, ev, 0}), who.push_back(int(j));
      }
      Clock::time_point wake = Clock::time_point::max();
      if (s_wait) wake = std::min(wake, last_s + timeout_);
      if (r_wait) wake = std::min(wake, last_r + timeout_);
      now = Clock::now();
      if (poll(pf.data(), pf.size(), ms_until(wake, now)) < 0 && errno != EINTR)
        throw LinkError(me + ": poll(): " + std::strerror(errno));
      for (size_t i = 0; i < pf.size(); ++i) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (pump(who[i]) && r_wait && who[i] == r->peer) last_r = Clock::now();
      }
      now = Clock::now();
      if (r_wait && !r->done && now - last_r >= timeout_)
        throw LinkError(me + ": no message from rank " + to_string(r->peer) + " for " + to_string(timeout_.count()) +
                        " ms (TcpOptions::recv_timeout): is rank " + to_string(r->peer) +
                        " stuck, or not sending what this rank expects?");
      if (s_wait && now - last_s >= timeout_)
        throw LinkError(me + ": rank " + to_string(s->peer) + " has taken nothing for " + to_string(timeout_.count()) +
                        " ms of a message of " + to_string(s->len) +
                        " bytes sent to it (TcpOptions::recv_timeout): is it stuck?");
    }
    if (r && r->refused)
      throw LinkError(me + ": a message of " + to_string(r->refused) + " bytes from rank " + to_string(r->peer) +
                      " where at most " + to_string(r->cap) + " were expected");
  }

  int rank_;
  uint32_t job_;
  std::chrono::milliseconds timeout_;
  std::vector<Peer> peers_;
  std::vector<uint8_t> stage_;
  RecvJob* active_ = nullptr;  // the recv now waiting, if any
};

}  // namespace

std::unique_ptr<Links> connect_tcp(const TcpPeers& peers, int rank, const TcpOptions& o) {
  const int n = int(peers.ranks.size());
  if (n < 1 || rank < 0 || rank >= n)
    throw LinkError("connect_tcp: rank " + to_string(rank) + " is not in a group of " + to_string(n) + " addresses");
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < j; ++k)
      if (peers.ranks[size_t(j)].ip == peers.ranks[size_t(k)].ip &&
          peers.ranks[size_t(j)].port == peers.ranks[size_t(k)].port)
        throw LinkError("connect_tcp: ranks " + to_string(k) + " and " + to_string(j) + " share the address " +
                        addr_str(peers.ranks[size_t(j)]) + ": give each rank its own TCP port or IP");
  return std::make_unique<Tcp>(rank, peers.job, establish(peers, rank, o), o.recv_timeout);
}

TcpPeers tcp_peers_from_config(const SwitchConfig& cfg, uint32_t job_id, const TcpOptions& o) {
  const std::string where = cfg.path.empty() ? "the switch config" : cfg.path;
  const JobConfig* job = job_id == 0 && cfg.jobs.size() == 1 ? &cfg.jobs[0] : cfg.job(job_id);
  if (!job) {
    std::string ids;
    for (const auto& j : cfg.jobs) ids.append(ids.empty() ? "" : ", ").append(to_string(j.id));
    throw LinkError(where + ": no job " + to_string(job_id) + " (its jobs: " + (ids.empty() ? "none" : ids) +
                    "): give the id of the job whose ranks connect");
  }
  TcpPeers out;
  out.job = job->id;
  out.ranks.resize(job->group);
  std::vector<bool> seen(job->group);
  for (const MemberConfig& m : job->members) {
    if (m.rank >= job->group) continue;  // the config reader refuses these
    const long port = long(m.addr.port) + o.port_offset;
    if (port < 1 || port > 65535)
      throw LinkError(where + ": job " + to_string(job->id) + " rank " + to_string(m.rank) + ": udp_port " +
                      to_string(m.addr.port) + " + port_offset " + to_string(o.port_offset) +
                      " is not a TCP port (1..65535)");
    out.ranks[m.rank] = TcpAddr{m.addr.ip, uint16_t(port)};
    seen[m.rank] = true;
  }
  std::string missing;
  for (size_t r = 0; r < seen.size(); ++r)
    if (!seen[r]) missing.append(missing.empty() ? "" : ", ").append(to_string(r));
  if (!missing.empty())
    throw LinkError(where + ": job " + to_string(job->id) + " (group " + to_string(job->group) + "): ranks " + missing +
                    " are not members at this switch (behind a child switch?); the TCP transport needs every "
                    "rank's address: give it a config that lists all of them as members");
  return out;
}

TcpPeers tcp_peers_from_config(const std::string& yaml_path, uint32_t job, const TcpOptions& o) {
  try {
    return tcp_peers_from_config(load_config(yaml_path), job, o);
  } catch (const ConfigError& e) {
    throw LinkError(e.what());
  }
}

}  // namespace prism::coll
