#include "coll/tcp/connect.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "coll/tcp/links.hpp"
#include "coll/tcp/socket.hpp"

namespace prism::coll {
namespace {

using Clock = std::chrono::steady_clock;
using std::to_string;

constexpr size_t kHelloSize = 24;  // magic, version, job, size, from, to: uint32 LE each
constexpr std::chrono::milliseconds kRetry{20};

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

struct Hello {
  uint32_t magic = kHelloMagic, version = kHelloVersion, job = 0, size = 0, from = 0, to = 0;
  void write(uint8_t* p) const {
    const uint32_t v[6] = {magic, version, job, size, from, to};
    for (int i = 0; i < 6; ++i) put32(p + 4 * i, v[i]);
  }
  static Hello read(const uint8_t* p) {
    return Hello{get32(p), get32(p + 4), get32(p + 8), get32(p + 12), get32(p + 16), get32(p + 20)};
  }
};

int ms_until(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  return int(std::chrono::ceil<std::chrono::milliseconds>(t - now).count());
}

// One rank's setup: the state of each connection until it has said hello.
class Setup {
 public:
  Setup(const TcpPeers& peers, int rank, const TcpOptions& o, Listener& listener, Dropped& dropped)
      : peers_(peers),
        rank_(rank),
        n_(int(peers.ranks.size())),
        o_(o),
        listener_(listener),
        me_("rank " + to_string(rank) + " of job " + to_string(peers.job)),
        fds_(size_t(n_)),
        out_(size_t(rank)),
        dropped_(dropped),
        debug_(debug_wanted()) {}

  std::vector<Fd> run() {
    const Clock::time_point deadline = Clock::now() + o_.connect_timeout;
    for (;;) {
      Clock::time_point now = Clock::now();
      if (missing() == 0) break;
      if (now >= deadline) throw timed_out();
      Clock::time_point wake = deadline;
      for (int j = 0; j < rank_; ++j) {
        Out& c = out_[size_t(j)];
        if (fds_[size_t(j)] || c.fd) continue;
        if (c.retry_at <= now) start_connect(j, now);
        if (!c.fd) wake = std::min(wake, c.retry_at);
      }

      std::vector<pollfd> pf;
      std::vector<int> who;  // per pollfd: -1 listener, 0..rank-1 out, rank + k: in[k]
      pf.push_back({listener_.fd(), POLLIN, 0}), who.push_back(-1);
      for (int j = 0; j < rank_; ++j)
        if (out_[size_t(j)].fd && !fds_[size_t(j)])
          pf.push_back({out_[size_t(j)].fd.get(), short(out_[size_t(j)].connecting ? POLLOUT : POLLIN), 0}),
              who.push_back(j);
      for (size_t k = 0; k < in_.size(); ++k) pf.push_back({in_[k].fd.get(), POLLIN, 0}), who.push_back(rank_ + int(k));
      if (poll(pf.data(), pf.size(), ms_until(wake, now)) < 0 && errno != EINTR)
        throw LinkError(me_ + ": poll(): " + std::strerror(errno));
      now = Clock::now();

      std::vector<size_t> finished_in;
      for (size_t i = 0; i < pf.size(); ++i) {
        if (!pf[i].revents) continue;
        const int w = who[i];
        if (w == -1) {
          for (Listener::Accepted& a : listener_.accept_all()) in_.push_back(In{std::move(a.fd), a.from, {}, 0});
        } else if (w < rank_) {
          step_out(w, now);
        } else if (step_in(in_[size_t(w - rank_)])) {
          finished_in.push_back(size_t(w - rank_));
        }
      }
      std::sort(finished_in.rbegin(), finished_in.rend());
      for (size_t k : finished_in) in_.erase(in_.begin() + std::ptrdiff_t(k));
    }
    return std::move(fds_);
  }

 private:
  struct Out {  // our connection to a lower rank
    Fd fd;
    bool connecting = false;  // else, with fd open: waiting for its hello
    uint8_t buf[kHelloSize];
    size_t got = 0;
    Clock::time_point retry_at{};
    std::string last_error = "not tried";
  };
  struct In {  // a connection accepted, before its hello
    Fd fd;
    sockaddr_in from;
    uint8_t buf[kHelloSize];
    size_t got = 0;
  };

  int missing() const {
    int m = 0;
    for (int j = 0; j < n_; ++j) m += j != rank_ && !fds_[size_t(j)];
    return m;
  }

  LinkError timed_out() const {
    std::string list;
    for (int j = 0; j < n_; ++j) {
      if (j == rank_ || fds_[size_t(j)]) continue;
      std::string state = "it never called in";
      if (j < rank_) {
        const Out& c = out_[size_t(j)];
        state = !c.fd          ? "last try: " + c.last_error
                : c.connecting ? "no answer to connecting (is the address reachable?)"
                               : "connected, but it sent no hello";
      }
      list += (list.empty() ? "" : ", ") + std::string("rank ") + to_string(j) + " (at " +
              addr_str(peers_.ranks[size_t(j)]) + ": " + state + ")";
    }
    std::string drops;
    if (dropped_.count) {
      drops = " Meanwhile " + to_string(dropped_.count) + " connection" + (dropped_.count > 1 ? "s" : "") +
              " not from a rank of this job " + (dropped_.count > 1 ? "were" : "was") + " dropped: ";
      for (size_t k = 0; k < dropped_.first.size(); ++k) drops += (k ? "; " : "") + dropped_.first[k];
      if (dropped_.count > dropped_.first.size())
        drops += "; and " + to_string(dropped_.count - dropped_.first.size()) + " more";
      drops += ".";
    }
    return LinkError(me_ + ": TCP setup timed out after " + to_string(o_.connect_timeout.count()) +
                     " ms; never connected: " + list + ". Is every rank started, with the same peers?" + drops);
  }

  Hello hello_to(int peer) const {
    Hello h;
    h.job = peers_.job, h.size = uint32_t(n_), h.from = uint32_t(rank_), h.to = uint32_t(peer);
    return h;
  }
  std::string different_peers(const Hello& h, const std::string& whom) const {
    return whom + " says it is rank " + to_string(h.from) + " of job " + to_string(h.job) + " in a group of " +
           to_string(h.size) + ", but this is job " + to_string(peers_.job) + " in a group of " + to_string(n_) +
           ": the ranks were given different peers (job, or number of ranks)";
  }
  // Why a hello is not from a rank of this job at all ("" when it is).
  std::string foreign(const Hello& h, const std::string& whom) const {
    if (h.magic != kHelloMagic || h.version != kHelloVersion)
      return whom + " is not a PRISM TCP transport of version " + to_string(kHelloVersion) +
             " (wrong magic or version in its hello)";
    if (h.job != peers_.job) return different_peers(h, whom);
    return "";
  }
  void check(const Hello& h, const std::string& whom) const {
    if (const std::string f = foreign(h, whom); !f.empty()) throw LinkError(me_ + ": " + f);
    if (h.size != uint32_t(n_)) throw LinkError(me_ + ": " + different_peers(h, whom));
    if (h.to != uint32_t(rank_))
      throw LinkError(me_ + ": " + whom + " (rank " + to_string(h.from) + ") was calling rank " + to_string(h.to) +
                      ": the ranks were given different addresses");
  }

  void start_connect(int j, Clock::time_point now) {
    Out& c = out_[size_t(j)];
    c.fd = tcp_socket(o_, me_);
    c.got = 0;
    const sockaddr_in to = to_sockaddr(peers_.ranks[size_t(j)]);
    if (connect(c.fd.get(), reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0 || errno == EINPROGRESS) {
      c.connecting = true;
      return;
    }
    c.last_error = std::strerror(errno);
    c.fd.reset();
    c.retry_at = now + kRetry;
  }
  void fail_out(int j, const std::string& why, Clock::time_point now) {
    Out& c = out_[size_t(j)];
    c.last_error = why;
    c.fd.reset();
    c.connecting = false;
    c.retry_at = now + kRetry;
  }

  // Our call to rank j < rank moves on: connected (say hello), or its hello came.
  void step_out(int j, Clock::time_point now) {
    Out& c = out_[size_t(j)];
    if (c.connecting) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return fail_out(j, std::strerror(err), now);
      if (connected_to_itself(c.fd.get())) return fail_out(j, "connected to itself", now);
      uint8_t h[kHelloSize];
      hello_to(j).write(h);
      if (send(c.fd.get(), h, sizeof h, MSG_NOSIGNAL) != ssize_t(sizeof h))
        return fail_out(j, std::strerror(errno), now);
      c.connecting = false;
      return;
    }
    const ssize_t r = recv(c.fd.get(), c.buf + c.got, kHelloSize - c.got, 0);
    if (r <= 0) {
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
      return fail_out(j, r == 0 ? "closed before its hello" : std::strerror(errno), now);
    }
    c.got += size_t(r);
    if (c.got < kHelloSize) return;
    const Hello h = Hello::read(c.buf);
    const std::string whom = "rank " + to_string(j) + " at " + addr_str(peers_.ranks[size_t(j)]);
    check(h, whom);
    if (h.from != uint32_t(j))
      throw LinkError(me_ + ": " + whom + " answers as rank " + to_string(h.from) +
                      ": the ranks were given different addresses");
    fds_[size_t(j)] = std::move(c.fd);
  }

  // A call from a higher rank moves on; whether it is finished with: its
  // hello taken, or dropped. What is not a rank of this job (it closes
  // before a hello, its hello is garbage, another job's or version's) is
  // dropped and counted, and the setup goes on: a port scanner or a stray
  // client must not fail the job (a rank that went away calls again). Only a
  // hello of this job that conflicts with this rank's view is an error: the
  // ranks were started wrong.
  bool step_in(In& c) {
    const ssize_t r = recv(c.fd.get(), c.buf + c.got, kHelloSize - c.got, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    const std::string whom = "a connection from " + addr_str(from_sockaddr(c.from));
    if (r <= 0) return drop(whom + (r == 0 ? " closed before its hello" : ": " + std::string(std::strerror(errno))));
    c.got += size_t(r);
    if (c.got < kHelloSize) return false;
    const Hello h = Hello::read(c.buf);
    // A PRISM hello is answered first, so a caller that does not match sees
    // it for itself too; what is not PRISM is told nothing.
    if (h.magic == kHelloMagic) {
      uint8_t reply[kHelloSize];
      hello_to(int(h.from)).write(reply);
      send(c.fd.get(), reply, sizeof reply, MSG_NOSIGNAL);
    }
    if (const std::string f = foreign(h, whom); !f.empty()) return drop(f);
    check(h, whom);
    if (h.from <= uint32_t(rank_) || h.from >= uint32_t(n_))
      throw LinkError(me_ + ": " + whom + " says it is rank " + to_string(h.from) + ", but only ranks " +
                      to_string(rank_ + 1) + ".." + to_string(n_ - 1) + " call rank " + to_string(rank_));
    if (fds_[h.from])
      throw LinkError(me_ + ": rank " + to_string(h.from) + " connected twice (" + whom +
                      "): two processes were started as that rank?");
    fds_[h.from] = std::move(c.fd);
    return true;
  }

  // An inbound connection closed uncounted as a rank: counted, the first
  // few named (for the timeout's message), each on stderr under PRISM_DEBUG.
  bool drop(const std::string& why) {
    ++dropped_.count;
    if (dropped_.first.size() < Dropped::kNamed) dropped_.first.push_back(why);
    if (debug_)
      std::fprintf(stderr, "prism: %s: dropped an inbound connection, the setup goes on: %s\n", me_.c_str(),
                   why.c_str());
    return true;
  }
  static bool debug_wanted() {
    const char* v = std::getenv("PRISM_DEBUG");
    return v && *v && std::strcmp(v, "0") != 0;
  }

  const TcpPeers& peers_;
  const int rank_, n_;
  const TcpOptions& o_;
  Listener& listener_;
  const std::string me_;
  std::vector<Fd> fds_;  // connected and greeted, [j] for rank j
  std::vector<Out> out_;
  std::vector<In> in_;
  Dropped& dropped_;
  const bool debug_;
};

}  // namespace

std::vector<Fd> establish(const TcpPeers& peers, int rank, const TcpOptions& o, Listener& listener, Dropped* dropped) {
  Dropped mine;
  return Setup(peers, rank, o, listener, dropped ? *dropped : mine).run();
}

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
  const std::string me = "rank " + to_string(rank) + " of job " + to_string(peers.job);
  Listener listener(peers.ranks[size_t(rank)], n + 16, o, me);
  return make_tcp_links(rank, peers.job, establish(peers, rank, o, listener), o.recv_timeout);
}

}  // namespace prism::coll
