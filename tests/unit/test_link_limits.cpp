// What a peer's stream can make a rank hold (review F17), over TCP and
// shared memory: a message that arrives before any recv asks for it is kept
// only up to a size and a per-peer byte budget; past them the links stop
// reading that peer until a recv wants its next message (backpressure), so
// - a length prefix of 2^39 bytes and nothing else allocates nothing: the
//   rank goes on with its other peers, and a recv from that peer is a
//   LinkError naming the length, not a bad_alloc;
// - a peer that streams far more than the budget while the rank waits for
//   someone else leaves the rank's memory near the budget, and every one of
//   its messages still arrives, in order, once the rank receives them.
// Rank 0's links are real (make_tcp_links over socketpairs, make_shm_links
// over segments made here); the test plays ranks 1 and 2 with the links' own
// framing (tcp SendJob headers, shm Outbound), except for the hostile prefix,
// written as bytes. Each case runs in a forked child with its address space
// bounded (RLIMIT_AS 4 GiB), so that the allocation it must not make fails
// there instead of reaching for the machine's memory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "coll/shm/channel.hpp"
#include "coll/shm/doorbell.hpp"
#include "coll/shm/links.hpp"
#include "coll/shm/segment.hpp"
#include "coll/tcp/links.hpp"
#include "coll/tcp/pair.hpp"

namespace prism::coll {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kHuge = uint64_t(1) << 39;  // the review's 00 00 00 00 80 00 00 00
constexpr size_t kStreamed = 384 << 20;        // what the streaming peer sends, in 1 MiB messages
constexpr size_t kPiece = 1 << 20;
constexpr long kMaxRssKiB = 200 << 10;  // what the rank may hold meanwhile (the budget is 64 MiB a peer)

// Runs body() in a child with RLIMIT_AS bounded; returns what it returned, or what it threw.
// Under AddressSanitizer, which reserves terabytes of address space for its
// shadow, the bound is left out: its allocator refuses (and reports) an
// allocation of 2^39 bytes by itself.
std::string in_child(const std::function<std::string()>& body) {
  int pfd[2];
  if (pipe(pfd) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(pfd[0]);
#if !defined(__SANITIZE_ADDRESS__)
    const rlimit lim{rlim_t(4) << 30, rlim_t(4) << 30};
    setrlimit(RLIMIT_AS, &lim);
#endif
    std::string out;
    try {
      out = body();
    } catch (const std::bad_alloc& e) {
      out = std::string("bad_alloc: ") + e.what();
    } catch (const std::exception& e) {
      out = std::string("exception: ") + e.what();
    }
    for (size_t done = 0; done < out.size();) {
      const ssize_t w = write(pfd[1], out.data() + done, out.size() - done);
      if (w <= 0) break;
      done += size_t(w);
    }
    _exit(0);
  }
  close(pfd[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = read(pfd[0], buf, sizeof buf)) > 0;) got.append(buf, size_t(n));
  close(pfd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return got + " (the child died: signal " + std::to_string(WTERMSIG(status)) + ")";
  return got;
}

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// The hostile prefix: a length of 2^39, then 16 zero bytes (the rest of a header, where the
// framing has one; else the first bytes of the body), and nothing more.
std::vector<uint8_t> huge_prefix() {
  std::vector<uint8_t> p(24, 0);
  for (int i = 0; i < 8; ++i) p[size_t(i)] = uint8_t(kHuge >> (8 * i));
  return p;
}

// A 1 MiB message whose first 8 bytes are its index; the rest a pattern of it.
std::vector<uint8_t> piece(uint64_t i) {
  std::vector<uint8_t> m(kPiece, uint8_t(i * 31 + 7));
  std::memcpy(m.data(), &i, sizeof i);
  return m;
}
std::string check_pieces(Links& links, int from) {
  std::vector<uint8_t> in(kPiece);
  for (uint64_t i = 0; i < kStreamed / kPiece; ++i) {
    const size_t got = links.recv(from, in.data(), in.size());
    if (got != kPiece || in != piece(i)) return "message " + std::to_string(i) + " arrived wrong";
  }
  return "";
}

// ---- TCP: rank 0's links over socketpairs; the test holds the other ends.

struct TcpRank0 {
  std::unique_ptr<Links> links;
  int peer[3] = {-1, -1, -1};  // the test's ends, [1] and [2]
  TcpRank0() {
    std::vector<Fd> fds(3);
    for (int j = 1; j < 3; ++j) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw std::runtime_error("socketpair");
      fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
      fds[size_t(j)] = Fd(sv[0]);
      peer[j] = sv[1];
    }
    links = make_tcp_links(0, 7, std::move(fds), 10s);
  }
  ~TcpRank0() {
    links.reset();
    for (int j = 1; j < 3; ++j) close(peer[j]);
  }
  void write_all(int j, const void* p, size_t n) const {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t done = 0; done < n;) {
      const ssize_t w = ::write(peer[j], b + done, n - done);
      if (w <= 0) throw std::runtime_error("write to rank 0 failed");
      done += size_t(w);
    }
  }
  // One message from rank j, framed as the links frame it.
  void send_as(int j, const std::vector<uint8_t>& m) const {
    SendJob s(0, m.data(), m.size());
    write_all(j, s.hdr, sizeof s.hdr);
    write_all(j, m.data(), m.size());
  }
};

TEST(LinkLimits, TcpHugeLengthPrefixAllocatesNothing) {
  const std::string out = in_child([] {
    TcpRank0 t;
    const std::vector<uint8_t> prefix = huge_prefix();
    t.write_all(1, prefix.data(), prefix.size());
    std::thread later([&] {
      std::this_thread::sleep_for(200ms);  // rank 0 is waiting on rank 2 (and reading rank 1) meanwhile
      t.send_as(2, {'h', 'e', 'l', 'l', 'o'});
    });
    std::vector<uint8_t> in(64);
    size_t got = 0;
    try {
      got = t.links->recv(2, in.data(), in.size());
    } catch (...) {
      later.join();
      throw;
    }
    later.join();
    if (got != 5 || std::memcmp(in.data(), "hello", 5) != 0) return std::string("rank 2's message arrived wrong");
    in.resize(1 << 20);
    try {
      t.links->recv(1, in.data(), in.size());
      return std::string("a recv of at most 1 MiB took the 2^39-byte message");
    } catch (const LinkError& e) {
      return std::string("LinkError: ") + e.what();
    }
  });
  EXPECT_EQ(out.rfind("LinkError: ", 0), 0u) << out;
  EXPECT_NE(out.find(std::to_string(kHuge) + " bytes from rank 1"), std::string::npos) << out;
}

TEST(LinkLimits, TcpStreamPastTheBudgetIsHeldBackAndArrivesWhole) {
  const std::string out = in_child([] {
    TcpRank0 t;
    std::thread streamer([&] {
      for (uint64_t i = 0; i < kStreamed / kPiece; ++i) t.send_as(1, piece(i));
    });
    std::thread later([&] {
      std::this_thread::sleep_for(1500ms);
      t.send_as(2, {'g', 'o'});
    });
    std::vector<uint8_t> in(16);
    std::string err;
    try {
      if (t.links->recv(2, in.data(), in.size()) != 2) err = "rank 2's message arrived wrong";
    } catch (const std::exception& e) {
      err = e.what();
    }
    later.join();
    const long rss = max_rss_kib();
    if (err.empty()) err = check_pieces(*t.links, 1);
    if (!err.empty()) {
      streamer.detach();  // it may be blocked for good: the child exits with it
      return err;
    }
    streamer.join();
    if (rss > kMaxRssKiB)
      return "rank 0 held " + std::to_string(rss >> 10) + " MiB while rank 1 streamed and it waited for rank 2";
    return std::string("ok");
  });
  EXPECT_EQ(out, "ok");
}

// ---- Shared memory: rank 0's links over segments made here; the test writes into rank 0's
// rings as ranks 1 and 2 (an Outbound each, through a second mapping of rank 0's segment).

struct ShmRank0 {
  std::string names[3];
  shm::Segment view;  // rank 0's segment, as the peers see it
  std::unique_ptr<Links> links;
  ShmRank0() {
    std::vector<shm::Segment> segs;
    for (int j = 0; j < 3; ++j) {
      names[j] = "/prism-test-limits-" + std::to_string(getpid()) + "-" + std::to_string(j);
      segs.push_back(shm::Segment::create(names[j], 3, j, j == 0 ? 1 << 20 : 64 << 10, "test"));
    }
    view = shm::Segment::open(names[0], "test");
    for (auto& s : segs) s.unlink();
    links = shm::make_shm_links(0, 99, std::move(segs), 10s);
  }
  shm::Outbound from(int j) const { return shm::Outbound(view, j, shm::Peer{view.header(), getpid(), true}); }
  static void send_as(shm::Outbound& o, const std::vector<uint8_t>& m) {
    shm::SendJob s(0, m.data(), m.size());
    while (!s.done) {
      if (!o.lost().empty()) throw std::runtime_error(o.lost());
      if (!o.write(s)) sched_yield();
    }
  }
  // Raw bytes into rank 0's ring from rank j (the hostile peer), assuming they fit.
  void raw(int j, const std::vector<uint8_t>& b) const {
    shm::RingHeader* h = view.ring_header(j);
    uint8_t* ring = view.ring(j);
    const uint64_t mask = view.header()->ring_bytes - 1;
    uint64_t head = h->head.load();
    for (uint8_t c : b) ring[head++ & mask] = c;
    h->head.store(head, std::memory_order_release);
    shm::ring(view.header());
  }
};

TEST(LinkLimits, ShmHugeLengthPrefixAllocatesNothing) {
  const std::string out = in_child([] {
    ShmRank0 t;
    t.raw(1, huge_prefix());
    std::thread later([&] {
      std::this_thread::sleep_for(200ms);
      shm::Outbound o = t.from(2);
      ShmRank0::send_as(o, {'h', 'e', 'l', 'l', 'o'});
    });
    std::vector<uint8_t> in(64);
    size_t got = 0;
    try {
      got = t.links->recv(2, in.data(), in.size());
    } catch (...) {
      later.join();
      throw;
    }
    later.join();
    if (got != 5 || std::memcmp(in.data(), "hello", 5) != 0) return std::string("rank 2's message arrived wrong");
    in.resize(1 << 20);
    try {
      t.links->recv(1, in.data(), in.size());
      return std::string("a recv of at most 1 MiB took the 2^39-byte message");
    } catch (const LinkError& e) {
      return std::string("LinkError: ") + e.what();
    }
  });
  EXPECT_EQ(out.rfind("LinkError: ", 0), 0u) << out;
  EXPECT_NE(out.find(std::to_string(kHuge) + " bytes from rank 1"), std::string::npos) << out;
}

TEST(LinkLimits, ShmStreamPastTheBudgetIsHeldBackAndArrivesWhole) {
  const std::string out = in_child([] {
    ShmRank0 t;
    std::thread streamer([&] {
      shm::Outbound o = t.from(1);
      for (uint64_t i = 0; i < kStreamed / kPiece; ++i) ShmRank0::send_as(o, piece(i));
    });
    std::thread later([&] {
      std::this_thread::sleep_for(1500ms);
      shm::Outbound o = t.from(2);
      ShmRank0::send_as(o, {'g', 'o'});
    });
    std::vector<uint8_t> in(16);
    std::string err;
    try {
      if (t.links->recv(2, in.data(), in.size()) != 2) err = "rank 2's message arrived wrong";
    } catch (const std::exception& e) {
      err = e.what();
    }
    later.join();
    const long rss = max_rss_kib();
    if (err.empty()) err = check_pieces(*t.links, 1);
    if (!err.empty()) {
      streamer.detach();  // it may be blocked for good: the child exits with it
      return err;
    }
    streamer.join();
    if (rss > kMaxRssKiB)
      return "rank 0 held " + std::to_string(rss >> 10) + " MiB while rank 1 streamed and it waited for rank 2";
    return std::string("ok");
  });
  EXPECT_EQ(out, "ok");
}

}  // namespace
}  // namespace prism::coll
