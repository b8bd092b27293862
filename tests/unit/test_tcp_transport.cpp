// The TCP Links (lib/coll/tcp.hpp) on loopback, ranks as threads: what
// transport.hpp promises (each pair reliable and in order, recv(peer) picks
// that peer's next message, sendrecv never deadlocks on large exchanges, a
// too-long message and a lost peer are TransportErrors naming the peer), and
// what the setup promises (a mismatch or a rank that never starts is a clear
// error naming who). Message bytes come from a hash of (from, to, size,
// index), regenerated on the receiving side: never echoed back.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

#include "coll/tcp.hpp"
#include "coll/tcp/connect.hpp"
#include "coll/tcp/listener.hpp"
#include "config/config.hpp"
#include "rendezvous/file_store.hpp"
#include "rendezvous/from_url.hpp"
#include "rendezvous/tcp_store.hpp"

namespace prism::coll {
namespace {

using namespace std::chrono_literals;

uint32_t loopback(int k) { return 0x7F000001u + uint32_t(k); }  // 127.0.0.(k+1)

// n addresses 127.0.0.(k+1) with ports the kernel says are free now.
TcpPeers free_peers(int n, uint32_t job = 7) {
  TcpPeers p;
  p.job = job;
  for (int k = 0; k < n; ++k) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(loopback(k));
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    p.ranks.push_back(TcpAddr{loopback(k), ntohs(a.sin_port)});
    close(fd);
  }
  return p;
}

TcpOptions quick() {
  TcpOptions o;
  o.connect_timeout = 20s;
  o.recv_timeout = 30s;
  return o;
}

// Runs body(rank, transport) on a thread per rank (in `ranks`, default all)
// after connecting; the first failure of each rank is recorded in errors[rank].
std::vector<std::string> run_group(const TcpPeers& peers, const TcpOptions& o,
                                   const std::function<void(int, std::unique_ptr<Links>&)>& body,
                                   std::vector<int> ranks = {}) {
  const int n = int(peers.ranks.size());
  if (ranks.empty())
    for (int r = 0; r < n; ++r) ranks.push_back(r);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Links> t = connect_tcp(peers, r, o);
        EXPECT_EQ(t->rank(), r);
        EXPECT_EQ(t->size(), n);
        body(r, t);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

uint8_t byte_at(int from, int to, size_t size, size_t i) {
  uint64_t x = (uint64_t(from) << 48) ^ (uint64_t(to) << 40) ^ (uint64_t(size) * 0x9E3779B97F4A7C15ull) ^ i;
  x ^= x >> 33, x *= 0xFF51AFD7ED558CCDull, x ^= x >> 29;
  return uint8_t(x);
}
std::vector<uint8_t> message(int from, int to, size_t size) {
  std::vector<uint8_t> m(size);
  // Word-sized runs of the hash keep 16 MiB cheap to make while every byte differs by position.
  for (size_t i = 0; i < size; ++i) m[i] = uint8_t(byte_at(from, to, size, i / 8) + i);
  return m;
}

const size_t kSizes[] = {0, 1, 1 << 20, 16 << 20};

// A round-robin tournament (the circle method): in round k of m (m = n for
// n odd, n - 1 for n even), rank r < m meets (k - r) mod m; the one rank
// that would meet itself meets rank n - 1 when n is even, else sits out
// (its partner is itself). Every pair meets exactly once.
int tournament_partner(int n, int k, int r) {
  const int m = n % 2 ? n : n - 1;
  auto circle = [&](int x) { return ((k - x) % m + m) % m; };
  if (r == m) {  // rank n - 1 of an even n: meets whoever would meet itself
    for (int x = 0; x < m; ++x)
      if (circle(x) == x) return x;
  }
  const int p = circle(r);
  return p == r && m != n ? n - 1 : p;
}

TEST(TcpTransport, EveryPairExchangesAtOnceWithSendrecv) {
  for (int n = 2; n <= 5; ++n) {
    SCOPED_TRACE("p = " + std::to_string(n));
    const int rounds = n % 2 ? n : n - 1;
    std::atomic<int> exchanges{0};
    auto errors = run_group(free_peers(n), quick(), [&](int r, std::unique_ptr<Links>& t) {
      for (int k = 0; k < rounds; ++k) {
        const int partner = tournament_partner(n, k, r);
        if (partner == r) continue;
        for (size_t size : kSizes) {
          const std::vector<uint8_t> out = message(r, partner, size);
          std::vector<uint8_t> in(size + 1, 0xAA);
          const size_t got = t->sendrecv(partner, out.data(), out.size(), partner, in.data(), in.size());
          ASSERT_EQ(got, size) << "rank " << r << " from " << partner;
          in.resize(got);
          ASSERT_TRUE(in == message(partner, r, size))
              << "rank " << r << " from " << partner << ", " << size << " bytes";
          ++exchanges;
        }
      }
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
    EXPECT_EQ(exchanges.load(), n * (n - 1) * int(std::size(kSizes)));
  }
}

// A shift: rank r sends to r + s and receives from r - s, all at once, for
// every s: every ordered pair, in cycles of sends that all wait together.
TEST(TcpTransport, ShiftExchangesInACycleDoNotDeadlock) {
  for (int n = 2; n <= 5; ++n) {
    SCOPED_TRACE("p = " + std::to_string(n));
    auto errors = run_group(free_peers(n), quick(), [&](int r, std::unique_ptr<Links>& t) {
      for (int s = 1; s < n; ++s) {
        const int to = (r + s) % n, from = (r - s + n) % n;
        for (size_t size : kSizes) {
          const std::vector<uint8_t> out = message(r, to, size);
          std::vector<uint8_t> in(size);
          ASSERT_EQ(t->sendrecv(to, out.data(), out.size(), from, in.data(), in.size()), size);
          ASSERT_TRUE(in == message(from, r, size)) << "rank " << r << " from " << from << ", " << size << " bytes";
        }
      }
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
  }
}

// Two ranks each send() 16 MiB to the other before either receives: each
// send drains what the other sends, so neither waits for the other's recv.
TEST(TcpTransport, CrossedLargeSendsBothComplete) {
  auto errors = run_group(free_peers(2), quick(), [&](int r, std::unique_ptr<Links>& t) {
    const int peer = 1 - r;
    for (int i = 0; i < 3; ++i) {
      const std::vector<uint8_t> out = message(r, peer, (16 << 20) + size_t(i));
      t->send(peer, out.data(), out.size());
    }
    for (int i = 0; i < 3; ++i) {
      std::vector<uint8_t> in((16 << 20) + 3);
      in.resize(t->recv(peer, in.data(), in.size()));
      ASSERT_TRUE(in == message(peer, r, (16 << 20) + size_t(i))) << "message " << i;
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// Every rank sends rank 0 many small messages (and a few large ones) of
// varied lengths; rank 0 takes them peer by peer, last rank first: each
// peer's messages come in the order sent, whatever arrived from the others.
TEST(TcpTransport, ManyMessagesKeepTheirOrderPerPeer) {
  const int n = 4, count = 3000;
  auto size_of = [](int from, int i) { return i % 500 == 499 ? size_t(300000 + from) : size_t((i * 7 + from) % 97); };
  auto errors = run_group(free_peers(n), quick(), [&](int r, std::unique_ptr<Links>& t) {
    if (r != 0) {
      for (int i = 0; i < count; ++i) {
        std::vector<uint8_t> m = message(r, i, size_of(r, i));
        t->send(0, m.data(), m.size());
      }
      uint8_t done = 0;
      t->recv(0, &done, 1);  // stay until rank 0 has everything
      return;
    }
    std::this_thread::sleep_for(200ms);  // let the others' messages pile up
    std::vector<uint8_t> in(400000);
    for (int from = n - 1; from >= 1; --from)
      for (int i = 0; i < count; ++i) {
        const size_t got = t->recv(from, in.data(), in.size());
        ASSERT_EQ(got, size_of(from, i)) << "message " << i << " from rank " << from;
        ASSERT_TRUE(std::vector<uint8_t>(in.begin(), in.begin() + std::ptrdiff_t(got)) == message(from, i, got))
            << "message " << i << " from rank " << from;
      }
    const uint8_t done = 1;
    for (int p = 1; p < n; ++p) t->send(p, &done, 1);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

// A message longer than the buffer is refused, naming the sender and both
// lengths, and is consumed: the next message comes through whole. Both when
// it is already queued and when the recv is waiting as it arrives.
TEST(TcpTransport, MessageLongerThanCapIsRefused) {
  auto errors = run_group(free_peers(2), quick(), [&](int r, std::unique_ptr<Links>& t) {
    if (r == 1) {
      const std::vector<uint8_t> a = message(1, 0, 100), b = message(1, 0, 10), c = message(1, 0, 4 << 20),
                                 d = message(1, 0, 20);
      t->send(0, a.data(), a.size());
      t->send(0, b.data(), b.size());
      uint8_t go;
      t->recv(0, &go, 1);
      t->send(0, c.data(), c.size());
      t->send(0, d.data(), d.size());
      t->recv(0, &go, 1);
      return;
    }
    std::this_thread::sleep_for(100ms);  // both queued by now
    std::vector<uint8_t> in(50);
    try {
      t->recv(1, in.data(), 50);
      ADD_FAILURE() << "a 100-byte message fit in 50";
    } catch (const LinkError& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find("100 bytes from rank 1"), std::string::npos) << w;
      EXPECT_NE(w.find("at most 50"), std::string::npos) << w;
    }
    ASSERT_EQ(t->recv(1, in.data(), 50), 10u);
    EXPECT_TRUE(std::vector<uint8_t>(in.begin(), in.begin() + 10) == message(1, 0, 10));
    const uint8_t go = 1;
    t->send(1, &go, 1);
    EXPECT_THROW(t->recv(1, in.data(), 50), LinkError);  // waiting as the 4 MiB one arrives
    ASSERT_EQ(t->recv(1, in.data(), 50), 20u);
    EXPECT_TRUE(std::vector<uint8_t>(in.begin(), in.begin() + 20) == message(1, 0, 20));
    t->send(1, &go, 1);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// A peer that destroys its transport: what it sent before still arrives,
// then recv throws naming it, and so does a send to it (once the kernel
// has noticed).
TEST(TcpTransport, PeerThatClosesIsAnErrorNamingIt) {
  auto errors = run_group(free_peers(3), quick(), [&](int r, std::unique_ptr<Links>& t) {
    if (r == 2) {
      const std::vector<uint8_t> m = message(2, 0, 1000);
      t->send(0, m.data(), m.size());
      t.reset();
      return;
    }
    if (r == 1) {
      uint8_t x;
      t->recv(0, &x, 1);
      return;
    }
    std::vector<uint8_t> in(1000);
    ASSERT_EQ(t->recv(2, in.data(), in.size()), 1000u);
    EXPECT_TRUE(in == message(2, 0, 1000));
    try {
      t->recv(2, in.data(), in.size());
      ADD_FAILURE() << "a message from a closed peer";
    } catch (const LinkError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2 is gone"), std::string::npos) << e.what();
    }
    std::string send_error;
    for (int i = 0; i < 100 && send_error.empty(); ++i) {
      try {
        t->send(2, in.data(), in.size());
      } catch (const LinkError& e) {
        send_error = e.what();
      }
    }
    EXPECT_NE(send_error.find("rank 2 is gone"), std::string::npos) << send_error;
    const uint8_t x = 1;
    t->send(1, &x, 1);  // rank 1 is still fine
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(errors[2], "");
}

// Rank 1 played by hand on a raw socket, from the wire format (tcp.hpp: a
// hello of six little-endian uint32 — magic "PRCT", version 1, job, group
// size, from, to — then messages as a 64-bit little-endian length, the
// sender's 16-byte call tag, all zeros outside collective calls (links.hpp's
// CallTag), and the bytes): a whole message arrives; one cut short by the
// peer closing makes the waiting recv throw naming it.
TEST(TcpTransport, PeerThatClosesMidMessageIsAnError) {
  const TcpPeers peers = free_peers(2);
  std::string error;
  std::vector<uint8_t> first;
  std::thread rank0([&] {
    try {
      auto t = connect_tcp(peers, 0, quick());
      std::vector<uint8_t> in(1 << 20);
      first.assign(in.begin(), in.begin() + std::ptrdiff_t(t->recv(1, in.data(), in.size())));
      t->recv(1, in.data(), in.size());
    } catch (const LinkError& e) {
      error = e.what();
    }
  });
  auto le = [](std::vector<uint8_t>& v, uint64_t x, int bytes) {
    for (int i = 0; i < bytes; ++i) v.push_back(uint8_t(x >> (8 * i)));
  };
  int fd = -1;
  for (int tries = 0; tries < 200; ++tries) {  // until rank 0 listens
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(peers.ranks[0].ip);
    a.sin_port = htons(peers.ranks[0].port);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    close(fd), fd = -1;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> out;
  for (uint32_t v : {0x50524354u, 1u, 7u, 2u, 1u, 0u}) le(out, v, 4);
  le(out, 5, 8);
  out.resize(out.size() + 16, 0);  // the call tag: no call yet
  for (char c : std::string("hello")) out.push_back(uint8_t(c));
  le(out, 100000, 8);
  out.resize(out.size() + 16, 0);
  out.resize(out.size() + 1000, 0x5A);
  ASSERT_EQ(write(fd, out.data(), out.size()), ssize_t(out.size()));
  uint8_t reply[24];
  ASSERT_EQ(recv(fd, reply, sizeof reply, MSG_WAITALL), 24);
  std::vector<uint8_t> expect;
  for (uint32_t v : {0x50524354u, 1u, 7u, 2u, 0u, 1u}) le(expect, v, 4);
  EXPECT_TRUE(std::vector<uint8_t>(reply, reply + 24) == expect);
  std::this_thread::sleep_for(50ms);
  close(fd);
  rank0.join();
  EXPECT_TRUE(first == std::vector<uint8_t>({'h', 'e', 'l', 'l', 'o'}));
  EXPECT_NE(error.find("rank 1 is gone: it closed the connection in the middle of a message"), std::string::npos)
      << error;
}

TEST(TcpTransport, RecvTimeoutNamesThePeer) {
  TcpOptions o = quick();
  o.recv_timeout = 300ms;
  auto errors = run_group(free_peers(2), o, [&](int r, std::unique_ptr<Links>& t) {
    uint8_t x;
    if (r == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_THROW(
          try { t->recv(1, &x, 1); } catch (const LinkError& e) {
            EXPECT_NE(std::string(e.what()).find("no message from rank 1 for 300 ms"), std::string::npos) << e.what();
            throw;
          },
          LinkError);
      EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
    } else {
      std::this_thread::sleep_for(800ms);  // connected, silent, and still there
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// Ranks 0 and 2 of 4 start; 1 and 3 never do: each that started fails after
// the connect timeout, naming both.
TEST(TcpTransport, ConnectTimeoutNamesTheRanksThatNeverStarted) {
  TcpOptions o = quick();
  o.connect_timeout = 700ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto errors = run_group(free_peers(4), o, [](int, std::unique_ptr<Links>&) {}, {0, 2});
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 700ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  for (int r : {0, 2}) {
    const std::string& e = errors[size_t(r)];
    EXPECT_NE(e.find("timed out after 700 ms"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1 (at 127.0.0.2:"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 3 (at 127.0.0.4:"), std::string::npos) << e;
    EXPECT_EQ(e.find("rank " + std::to_string(2 - r) + " ("), std::string::npos) << e;  // the other one did connect
  }
}

// Ranks that start at different times still connect (the later ones are
// retried until they listen).
TEST(TcpTransport, RanksStartingLateStillConnect) {
  const TcpPeers peers = free_peers(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r : {2, 0, 1}) {
    threads.emplace_back([&, r] {
      try {
        auto t = connect_tcp(peers, r, quick());
        const uint8_t x = uint8_t(r);
        uint8_t y[2];
        t->send((r + 1) % 3, &x, 1);
        t->recv((r + 2) % 3, y, 2);
        if (y[0] != (r + 2) % 3) errors[size_t(r)] = "wrong byte";
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
    std::this_thread::sleep_for(300ms);
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

TEST(TcpTransport, HandshakeMismatchIsAClearError) {
  TcpOptions o = quick();
  o.connect_timeout = 3s;
  {  // different jobs
    TcpPeers a = free_peers(2, 7), b = a;
    b.job = 8;
    std::string e0, e1;
    std::thread t0([&] {
      try {
        connect_tcp(a, 0, o);
      } catch (const LinkError& e) {
        e0 = e.what();
      }
    });
    try {
      connect_tcp(b, 1, o);
    } catch (const LinkError& e) {
      e1 = e.what();
    }
    t0.join();
    EXPECT_NE(e0.find("of job 8"), std::string::npos) << e0;
    EXPECT_NE(e0.find("this is job 7"), std::string::npos) << e0;
    EXPECT_NE(e1.find("this is job 8"), std::string::npos) << e1;
  }
  {  // different group sizes
    TcpPeers a = free_peers(3), b = a;
    b.ranks.pop_back();
    std::string e0;
    std::thread t0([&] {
      try {
        connect_tcp(a, 0, o);
      } catch (const LinkError& e) {
        e0 = e.what();
      }
    });
    try {
      connect_tcp(b, 1, o);
    } catch (const LinkError&) {
    }
    t0.join();
    EXPECT_NE(e0.find("in a group of 2, but this is job 7 in a group of 3"), std::string::npos) << e0;
  }
}

// F14: what reaches a rank's listener during the setup and is not a rank
// of this job — a client that writes 24 bytes of garbage (a port scanner's
// probe), one that connects and closes at once, one that says half a hello
// and waits, a PRISM rank of another job — is dropped alone: the setup goes
// on, every rank connects, and the exchanges after it are right. Garbage
// gets no answer (nothing is told to what is not PRISM).
std::string shift_exchange(Links& t);  // below: every pair's exchange, checked

int connect_when_listening(const TcpAddr& to) {
  for (int tries = 0; tries < 500; ++tries) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(to.ip);
    a.sin_port = htons(to.port);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    close(fd);
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

TEST(TcpTransport, StrayConnectionsDuringSetupAreDroppedAlone) {
  const TcpPeers peers = free_peers(3);
  std::vector<std::string> errors(3);
  auto rank = [&](int r) {
    try {
      auto t = connect_tcp(peers, r, quick());
      errors[size_t(r)] = shift_exchange(*t);
    } catch (const std::exception& e) {
      errors[size_t(r)] = e.what();
    }
  };
  // Ranks 0 and 1 listen and wait for rank 2, which starts only after the
  // strays have said what they say: their setup is under way meanwhile.
  std::thread r0(rank, 0), r1(rank, 1);
  std::vector<int> open_strays;
  std::vector<uint8_t> other_job;
  for (uint32_t v : {kHelloMagic, kHelloVersion, 8u, 3u, 2u, 0u}) {
    for (int i = 0; i < 4; ++i) other_job.push_back(uint8_t(v >> (8 * i)));
  }
  const std::string x(24, 'X');
  for (int at : {0, 1}) {
    const TcpAddr& to = peers.ranks[size_t(at)];
    const int garbage = connect_when_listening(to);
    EXPECT_GE(garbage, 0);
    EXPECT_EQ(write(garbage, x.data(), x.size()), 24);
    const int closer = connect_when_listening(to);
    EXPECT_GE(closer, 0);
    close(closer);
    const int half = connect_when_listening(to);  // stays open, 10 bytes of a hello said
    EXPECT_EQ(write(half, x.data(), 10), 10);
    open_strays.push_back(half);
    const int stranger = connect_when_listening(to);  // a PRISM rank of job 8
    other_job[20] = uint8_t(at);                      // to: this rank
    EXPECT_EQ(write(stranger, other_job.data(), other_job.size()), 24);
    open_strays.push_back(stranger);
    // The garbage is dropped unanswered: the rank closes it, saying nothing.
    uint8_t b[24];
    timeval tv{5, 0};
    setsockopt(garbage, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    EXPECT_EQ(recv(garbage, b, sizeof b, 0), 0) << "rank " << at << " answered garbage or kept it open";
    close(garbage);
  }
  std::this_thread::sleep_for(100ms);
  std::thread r2(rank, 2);
  r0.join(), r1.join(), r2.join();
  for (int fd : open_strays) close(fd);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

// What was dropped is counted and, when the setup times out after all,
// named in its error: a job that never connects says what called instead.
TEST(TcpTransport, ATimeoutNamesTheConnectionsDropped) {
  const TcpPeers peers = free_peers(2);
  TcpOptions o = quick();
  o.connect_timeout = 700ms;
  Dropped dropped;
  std::string error;
  std::thread r0([&] {
    try {
      Listener listener(peers.ranks[0], 8, o, "rank 0");
      establish(peers, 0, o, listener, &dropped);
    } catch (const LinkError& e) {
      error = e.what();
    }
  });
  const int garbage = connect_when_listening(peers.ranks[0]);
  EXPECT_EQ(write(garbage, std::string(24, 'X').data(), 24), 24);
  const int closer = connect_when_listening(peers.ranks[0]);
  close(closer);
  r0.join();
  close(garbage);
  EXPECT_EQ(dropped.count, 2u);
  EXPECT_NE(error.find("timed out after 700 ms; never connected: rank 1"), std::string::npos) << error;
  EXPECT_NE(
      error.find("Meanwhile 2 connections not from a rank of this job were dropped: a connection from 127.0.0.1:"),
      std::string::npos)
      << error;
  EXPECT_NE(error.find("is not a PRISM TCP transport of version 1"), std::string::npos) << error;
  EXPECT_NE(error.find("closed before its hello"), std::string::npos) << error;
}

TEST(TcpTransport, BadArgumentsAreRefused) {
  TcpPeers p = free_peers(2);
  EXPECT_THROW(connect_tcp(p, 2, quick()), LinkError);
  p.ranks[1] = p.ranks[0];
  try {
    connect_tcp(p, 0, quick());
    ADD_FAILURE();
  } catch (const LinkError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 0 and 1 share the address"), std::string::npos) << e.what();
  }
  // A peer out of range, or oneself.
  auto errors = run_group(free_peers(2), quick(), [](int r, std::unique_ptr<Links>& t) {
    uint8_t x = 0;
    EXPECT_THROW(t->send(r, &x, 1), LinkError);
    EXPECT_THROW(t->recv(5, &x, 1), LinkError);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// --- Connecting through a rendezvous store (no addresses given): each rank
// listens on a port the kernel picks and publishes it.

// Rank r's shift exchange with every other rank (0 B, 1 B, 1 MiB each);
// "" when every message came back as the sender made it.
std::string shift_exchange(Links& t) {
  const int r = t.rank(), n = t.size();
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    for (size_t size : {size_t(0), size_t(1), size_t(1) << 20}) {
      const std::vector<uint8_t> out = message(r, to, size);
      std::vector<uint8_t> in(size);
      if (t.sendrecv(to, out.data(), out.size(), from, in.data(), in.size()) != size || in != message(from, r, size))
        return "rank " + std::to_string(r) + ": wrong message from rank " + std::to_string(from) + " of " +
               std::to_string(size) + " bytes";
    }
  }
  return "";
}

enum class StoreKind { TCP, FILE };

// A store every rank of a test reaches, and each rank's own client of it.
struct SharedStore {
  explicit SharedStore(StoreKind k) : kind(k) {
    char tmpl[] = "/tmp/prism_tcp_store_XXXXXX";
    dir = mkdtemp(tmpl);
    if (k == StoreKind::TCP) server = rdv::make_tcp_store("127.0.0.1", 0, true, 20s);
  }
  ~SharedStore() {
    server.reset();
    std::system(("rm -rf '" + dir + "'").c_str());
  }
  // A new client (after fork() too); rank 0 of a TCP store in this process
  // may share the server's.
  std::shared_ptr<rdv::Store> client() const {
    if (kind == StoreKind::TCP) return rdv::make_tcp_store("127.0.0.1", server->port(), false, 20s);
    return rdv::make_file_store(dir + "/store");
  }
  StoreKind kind;
  std::string dir;
  std::shared_ptr<rdv::TcpStore> server;
};

const char* store_name(StoreKind k) { return k == StoreKind::TCP ? "TCP store" : "file store"; }

// Ranks as threads, each with its own client of the store, under a prefix
// per group size (one store, many groups).
TEST(TcpThroughStore, ThreadsConnectAndExchangeForEveryGroupSize) {
  for (StoreKind kind : {StoreKind::TCP, StoreKind::FILE}) {
    SharedStore shared(kind);
    for (int n = 1; n <= 5; ++n) {
      SCOPED_TRACE(std::string(store_name(kind)) + ", p = " + std::to_string(n));
      std::vector<std::string> errors(static_cast<size_t>(n));
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          try {
            rdv::PrefixStore store("p" + std::to_string(n), shared.client());
            auto t = connect_tcp(store, r, n, quick());
            if (t->rank() != r || t->size() != n) throw LinkError("wrong rank or size");
            errors[size_t(r)] = shift_exchange(*t);
          } catch (const std::exception& e) {
            errors[size_t(r)] = e.what();
          }
        });
      for (auto& t : threads) t.join();
      for (int r = 0; r < n; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
    }
  }
}

// Ranks as processes (fork), each its own store client; exit status 0 when
// its exchange was right.
TEST(TcpThroughStore, ForkedProcessesConnectAndExchange) {
  for (StoreKind kind : {StoreKind::TCP, StoreKind::FILE}) {
    SharedStore shared(kind);
    for (int n = 1; n <= 5; ++n) {
      SCOPED_TRACE(std::string(store_name(kind)) + ", p = " + std::to_string(n));
      std::vector<pid_t> kids;
      for (int r = 0; r < n; ++r) {
        const pid_t pid = fork();
        if (pid == 0) {
          int code = 1;
          try {
            rdv::PrefixStore store("p" + std::to_string(n), shared.client());
            auto t = connect_tcp(store, r, n, quick());
            const std::string e = shift_exchange(*t);
            if (!e.empty()) std::fprintf(stderr, "%s\n", e.c_str());
            code = e.empty() ? 0 : 2;
          } catch (const std::exception& e) {
            std::fprintf(stderr, "rank %d: %s\n", r, e.what());
          }
          _exit(code);
        }
        kids.push_back(pid);
      }
      for (int r = 0; r < n; ++r) {
        int status = 0;
        ASSERT_EQ(waitpid(kids[size_t(r)], &status, 0), kids[size_t(r)]);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << ": status " << status;
      }
    }
  }
}

// What a rank publishes: its listening address, reachable ("ip:port"), and
// rank 0 the group's identity and size. With the TcpStore itself (not a
// prefix over it), the address is the one that reaches the store's host.
TEST(TcpThroughStore, PublishesIpPortAndTheGroup) {
  SharedStore shared(StoreKind::TCP);
  auto s0 = shared.server;
  auto s1 = shared.client();
  std::string e0, e1;
  std::thread t0([&] {
    try {
      auto t = connect_tcp(*s0, 0, 2, quick());
      e0 = shift_exchange(*t);
    } catch (const std::exception& e) {
      e0 = e.what();
    }
  });
  try {
    auto t = connect_tcp(*s1, 1, 2, quick());
    e1 = shift_exchange(*t);
  } catch (const std::exception& e) {
    e1 = e.what();
  }
  t0.join();
  EXPECT_EQ(e0, "");
  EXPECT_EQ(e1, "");
  for (const char* key : {"tcp/0", "tcp/1"}) {
    const std::string v = s1->get_string(key, 1s);
    EXPECT_EQ(v.rfind("127.0.0.1:", 0), 0u) << key << " = " << v;
  }
  const std::string group = s1->get_string("tcp/group", 1s);
  EXPECT_NE(group.find(" 2"), std::string::npos) << group;
}

// Ranks 0 and 2 of 4 start; 1 and 3 never publish: both fail after the
// connect timeout, naming the missing ranks.
TEST(TcpThroughStore, RanksThatNeverPublishAreNamed) {
  for (StoreKind kind : {StoreKind::TCP, StoreKind::FILE}) {
    SCOPED_TRACE(store_name(kind));
    SharedStore shared(kind);
    TcpOptions o = quick();
    o.connect_timeout = 700ms;
    std::vector<std::string> errors(4);
    std::vector<std::thread> threads;
    for (int r : {0, 2})
      threads.emplace_back([&, r] {
        try {
          auto store = shared.client();
          connect_tcp(*store, r, 4, o);
        } catch (const LinkError& e) {
          errors[size_t(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r : {0, 2}) {
      const std::string& e = errors[size_t(r)];
      EXPECT_NE(e.find("rank " + std::to_string(r) + " of a group of 4: ranks 1, 3 never published their address"),
                std::string::npos)
          << e;
      EXPECT_NE(e.find("within 700 ms"), std::string::npos) << e;
    }
    // Rank 1 alone: rank 0 (the group's id too) never came, named once.
    o.connect_timeout = 300ms;
    try {
      auto store = shared.client();
      rdv::PrefixStore alone("alone", store);
      connect_tcp(alone, 1, 2, o);
      ADD_FAILURE() << "connected without rank 0";
    } catch (const LinkError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 of a group of 2: rank 0 never published its address"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(TcpThroughStore, DifferentGroupSizesAreAClearError) {
  SharedStore shared(StoreKind::FILE);
  TcpOptions o = quick();
  o.connect_timeout = 2s;
  std::string e0, e1;
  std::thread t0([&] {
    try {
      connect_tcp(*shared.client(), 0, 2, o);
    } catch (const LinkError& e) {
      e0 = e.what();
    }
  });
  try {
    connect_tcp(*shared.client(), 1, 3, o);
  } catch (const LinkError& e) {
    e1 = e.what();
  }
  t0.join();
  EXPECT_NE(e1.find("rank 0 started a group of 2, this rank was told 3"), std::string::npos) << e1;
  EXPECT_NE(e0, "");  // rank 0 is left without its peer
}

// Rank 0 played by hand in the store, as if on another host that could only
// tell its loopback address: rank 1 refuses it, naming both hosts.
TEST(TcpThroughStore, ALoopbackAddressFromAnotherHostIsRefused) {
  SharedStore shared(StoreKind::FILE);
  auto store = shared.client();
  store->set("tcp/group", "5 2");
  store->set("tcp/0/host", "elsewhere.example");
  store->set("tcp/0", "127.0.0.1:9");
  try {
    connect_tcp(*store, 1, 2, quick());
    ADD_FAILURE() << "connected to a loopback address of another host";
  } catch (const LinkError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 published the loopback address 127.0.0.1:9 from host "
                                         "elsewhere.example: set PRISM_HOST_IP"),
              std::string::npos)
        << e.what();
  }
}

TEST(TcpThroughStore, LocalAddressFromOptionsOrEnvironment) {
  SharedStore shared(StoreKind::FILE);
  auto keep = shared.client();  // the file lives while it has a user
  {                             // TcpOptions::local_ip: every rank listens (and publishes) there
    TcpOptions o = quick();
    o.local_ip = "127.0.0.3";
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        try {
          rdv::PrefixStore store("given", shared.client());
          auto t = connect_tcp(store, r, 2, o);
          errors[size_t(r)] = shift_exchange(*t);
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(errors[0], "");
    EXPECT_EQ(errors[1], "");
    const std::string v = keep->get_string("given/tcp/1", 1s);
    EXPECT_EQ(v.rfind("127.0.0.3:", 0), 0u) << v;
  }
  const char* old = std::getenv("PRISM_HOST_IP");
  const std::string saved = old ? old : "";
  setenv("PRISM_HOST_IP", "not-an-ip", 1);
  try {
    auto store = shared.client();
    connect_tcp(*store, 0, 1, quick());
    ADD_FAILURE() << "a bad PRISM_HOST_IP was taken";
  } catch (const LinkError& e) {
    EXPECT_NE(std::string(e.what()).find("PRISM_HOST_IP 'not-an-ip' is not an IPv4 address"), std::string::npos)
        << e.what();
  }
  old ? setenv("PRISM_HOST_IP", saved.c_str(), 1) : unsetenv("PRISM_HOST_IP");
  auto store = shared.client();
  EXPECT_THROW(connect_tcp(*store, 2, 2, quick()), LinkError);
  EXPECT_THROW(connect_tcp(*store, 0, 0, quick()), LinkError);
}

const std::string kConfig =
    "switch: {id: 1}\n"
    "jobs:\n"
    "  - id: 7\n"
    "    group: 3\n"
    "    members:\n"
    "      - {rank: 0, mac: \"02:00:00:00:00:00\", ip: 10.0.0.1}\n"
    "      - {rank: 1, mac: \"02:00:00:00:00:01\", ip: 10.0.0.2, udp_port: 30000}\n"
    "      - {rank: 2, mac: \"02:00:00:00:00:02\", ip: 10.0.0.3}\n";

TEST(TcpPeersFromConfig, MembersAddressesAndUdpPortPlusOffset) {
  const SwitchConfig cfg = parse_config(kConfig);
  TcpOptions o;
  TcpPeers p = tcp_peers_from_config(cfg, 7, o);
  EXPECT_EQ(p.job, 7u);
  ASSERT_EQ(p.ranks.size(), 3u);
  EXPECT_EQ(p.ranks[0].ip, 0x0A000001u);
  EXPECT_EQ(p.ranks[0].port, 20562);  // the default udp_port
  EXPECT_EQ(p.ranks[1].ip, 0x0A000002u);
  EXPECT_EQ(p.ranks[1].port, 30000);
  EXPECT_EQ(p.ranks[2].ip, 0x0A000003u);
  o.port_offset = 100;
  p = tcp_peers_from_config(cfg, 0, o);  // 0: the only job
  EXPECT_EQ(p.ranks[0].port, 20662);
  EXPECT_EQ(p.ranks[1].port, 30100);
  o.port_offset = 40000;
  EXPECT_THROW(tcp_peers_from_config(cfg, 7, o), LinkError);
  try {
    tcp_peers_from_config(cfg, 9);
    ADD_FAILURE();
  } catch (const LinkError& e) {
    EXPECT_NE(std::string(e.what()).find("no job 9 (its jobs: 7)"), std::string::npos) << e.what();
  }
}

TEST(TcpPeersFromConfig, RanksBehindAnotherSwitchAreAnError) {
  const SwitchConfig cfg = parse_config(
      "switch: {id: 2, role: leaf, parent: {port: 0, mac: \"02:00:00:00:fe:01\", ip: 10.0.1.1}}\n"
      "jobs:\n"
      "  - id: 7\n"
      "    group: 4\n"
      "    members:\n"
      "      - {rank: 0, mac: \"02:00:00:00:00:00\", ip: 10.0.0.1}\n"
      "      - {rank: 1, mac: \"02:00:00:00:00:01\", ip: 10.0.0.2}\n");
  try {
    tcp_peers_from_config(cfg, 7);
    ADD_FAILURE();
  } catch (const LinkError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 2, 3 are not members at this switch"), std::string::npos) << e.what();
  }
}

// The driver of tests/py/test_tcp_transport.py, which runs this binary in
// each rank's network namespace with PRISM_TCP_CONFIG (the switch's YAML)
// and PRISM_TCP_RANK set; skipped without them. Peers from the config (TCP
// port = udp_port), then a shift exchange with every other rank at each size.
TEST(TcpDriver, ExchangesWithEveryRankOfTheConfig) {
  const char* config = std::getenv("PRISM_TCP_CONFIG");
  const char* rank_s = std::getenv("PRISM_TCP_RANK");
  if (!config || !rank_s) GTEST_SKIP() << "run by tests/py/test_tcp_transport.py";
  const int r = std::atoi(rank_s);
  const TcpPeers peers = tcp_peers_from_config(config, 0);
  auto t = connect_tcp(peers, r, quick());
  const int n = t->size();
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    for (size_t size : kSizes) {
      const std::vector<uint8_t> out = message(r, to, size);
      std::vector<uint8_t> in(size);
      ASSERT_EQ(t->sendrecv(to, out.data(), out.size(), from, in.data(), in.size()), size);
      ASSERT_TRUE(in == message(from, r, size)) << "from rank " << from << ", " << size << " bytes";
    }
  }
  std::printf("TCP-DRIVER OK rank %d of %d\n", r, n);
}

// The same through a rendezvous store from the environment (PRISM_STORE, or
// MASTER_ADDR and MASTER_PORT: rank 0 serves), with PRISM_TCP_STORE_RANK and
// PRISM_TCP_STORE_SIZE set; skipped without them. Each rank finds the
// address it publishes on its own (the one that reaches the store's host).
// In the testbed's namespaces:
//   scripts/testbed.sh --ranks 4 --bridge -- env MASTER_ADDR=10.88.0.1 MASTER_PORT=29500
//     PRISM_TCP_STORE_RANK={rank} PRISM_TCP_STORE_SIZE={ranks} build/tests/unit/test_tcp_transport
//     --gtest_filter=TcpDriver.*
TEST(TcpDriver, ExchangesThroughTheStoreOfTheEnvironment) {
  const char* rank_s = std::getenv("PRISM_TCP_STORE_RANK");
  const char* size_s = std::getenv("PRISM_TCP_STORE_SIZE");
  if (!rank_s || !size_s) GTEST_SKIP() << "run in each rank's namespace with a store in the environment";
  const int r = std::atoi(rank_s), n = std::atoi(size_s);
  auto store = rdv::store_from_env(r, 60s);
  auto t = connect_tcp(*store, r, n, quick());
  ASSERT_EQ(shift_exchange(*t), "");
  std::printf("TCP-STORE-DRIVER OK rank %d of %d at %s\n", r, n, store->get_string("tcp/" + std::to_string(r)).c_str());
  // Rank 0 serves the store: it stays until every rank has said it is done with it.
  if (store->add("done", 1) == n) store->set("all done", "");
  if (r == 0) store->get("all done", 60s);
}

}  // namespace
}  // namespace prism::coll
