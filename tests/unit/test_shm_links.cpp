// The shared-memory Links (lib/coll/shm.hpp), ranks as threads and as
// processes: what links.hpp promises (each pair reliable and in order,
// recv(peer) picks that peer's next message, sendrecv never deadlocks on
// large exchanges, a too-long message and a lost peer are LinkErrors naming
// the peer), through the ring alone and with single copy; that a rank that
// dies is named within the liveness check, not the timeout; that nothing is
// left in /dev/shm; that the host algorithms give the same bits over shared
// memory as over TCP; and lib/group/links_choice.hpp's rules. Message bytes
// come from a hash of (from, to, size), regenerated on the receiving side.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "coll/shm.hpp"
#include "coll/shm/segment.hpp"
#include "coll_util.hpp"
#include "group/links_choice.hpp"
#include "prism/group.hpp"
#include "rendezvous/file_store.hpp"

namespace prism::coll {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A fresh store directory per test, removed with it; `keep` holds the file store open (its
// last client deletes the file) so that the test can read what the ranks wrote.
struct TempStore {
  TempStore() : dir(make_dir()), keep(client()) {}
  ~TempStore() {
    keep.reset();
    std::filesystem::remove_all(dir);
  }
  static std::string make_dir() {
    char tmpl[] = "/tmp/prism_shm_test_XXXXXX";
    return mkdtemp(tmpl);
  }
  std::shared_ptr<rdv::Store> client() const { return rdv::make_file_store(dir + "/store"); }
  std::string dir;
  std::shared_ptr<rdv::Store> keep;
};

ShmOptions quick(bool single_copy = true) {
  ShmOptions o;
  o.connect_timeout = 20s;
  o.recv_timeout = 30s;
  o.single_copy = single_copy;
  return o;
}

// Runs body(rank, links) on a thread per rank of `n` (those in `ranks`, default all) after
// connecting; each rank's first failure in errors[rank].
std::vector<std::string> run_group(int n, const ShmOptions& o,
                                   const std::function<void(int, std::unique_ptr<Links>&)>& body,
                                   std::vector<int> ranks = {}) {
  TempStore store;
  if (ranks.empty())
    for (int r = 0; r < n; ++r) ranks.push_back(r);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Links> t = connect_shm(*store.client(), r, n, o);
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

std::vector<uint8_t> message(int from, int to, size_t size) {
  std::vector<uint8_t> m(size);
  uint64_t x = (uint64_t(from) << 48) ^ (uint64_t(to) << 40) ^ (uint64_t(size) * 0x9E3779B97F4A7C15ull);
  for (size_t i = 0; i < size; ++i) {
    if (i % 8 == 0) x ^= x >> 33, x *= 0xFF51AFD7ED558CCDull, x ^= x >> 29, x += i;
    m[i] = uint8_t(x >> (8 * (i % 8)));
  }
  return m;
}

// Sizes either side of the single-copy threshold (64 KiB) and past the ring (1 MiB).
const size_t kSizes[] = {0, 1, 1000, (64 << 10) - 1, 64 << 10, (1 << 20) + 7, 16 << 20};

std::string shift_exchange(Links& t, const std::vector<size_t>& sizes) {
  const int r = t.rank(), n = t.size();
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    for (size_t size : sizes) {
      const std::vector<uint8_t> out = message(r, to, size);
      std::vector<uint8_t> in(size + 1, 0xAA);
      const size_t got = t.sendrecv(to, out.data(), out.size(), from, in.data(), in.size());
      in.resize(got);
      if (got != size || in != message(from, r, size))
        return "rank " + std::to_string(r) + ": wrong message from rank " + std::to_string(from) + " of " +
               std::to_string(size) + " bytes (got " + std::to_string(got) + ")";
    }
  }
  return "";
}

// What /dev/shm holds of the group whose store is `store`.
std::vector<std::string> segments_left(rdv::Store& store) {
  std::vector<std::string> left;
  if (!store.check("shm/group")) return left;
  const std::string group = store.get_string("shm/group");
  char id[32];
  std::snprintf(id, sizeof id, "prism-%016llx-", std::stoull(group.substr(0, group.find(' '))));
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind(id, 0) == 0) left.push_back(e.path().filename().string());
  return left;
}

class ShmLinksBothWays : public ::testing::TestWithParam<bool> {};  // single copy or the ring alone

// A shift: rank r sends to r + s and receives from r - s at once, for every s and size: every
// ordered pair, in cycles of sends that all wait together, messages many times the ring.
TEST_P(ShmLinksBothWays, ShiftExchangesForEveryGroupSize) {
  for (int n = 1; n <= 5; ++n) {
    SCOPED_TRACE("p = " + std::to_string(n));
    auto errors = run_group(n, quick(GetParam()), [&](int, std::unique_ptr<Links>& t) {
      const std::string e = shift_exchange(*t, std::vector<size_t>(std::begin(kSizes), std::end(kSizes)));
      if (!e.empty()) throw LinkError(e);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
  }
}

// Two ranks each send() 3 x 16 MiB to the other before either receives: each send drains what
// the other sends, so neither waits for the other's recv.
TEST_P(ShmLinksBothWays, CrossedLargeSendsBothComplete) {
  auto errors = run_group(2, quick(GetParam()), [&](int r, std::unique_ptr<Links>& t) {
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

// Every rank sends rank 0 many messages of varied lengths (a few past the ring and the
// single-copy threshold) through a 4 KiB ring; rank 0 takes them peer by peer, last rank first.
TEST_P(ShmLinksBothWays, ManyMessagesKeepTheirOrderPerPeer) {
  const int n = 4, count = 3000;
  ShmOptions o = quick(GetParam());
  o.ring_bytes = 4096;
  auto size_of = [](int from, int i) { return i % 500 == 499 ? size_t(300000 + from) : size_t((i * 7 + from) % 97); };
  auto errors = run_group(n, o, [&](int r, std::unique_ptr<Links>& t) {
    if (r != 0) {
      for (int i = 0; i < count; ++i) {
        std::vector<uint8_t> m = message(r, i, size_of(r, i));
        t->send(0, m.data(), m.size());
      }
      uint8_t done = 0;
      t->recv(0, &done, 1);
      return;
    }
    std::this_thread::sleep_for(200ms);
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

// A message longer than the buffer is refused, naming the sender and both lengths, and is
// consumed: the next one comes through whole. Queued, and arriving while the recv waits.
TEST_P(ShmLinksBothWays, MessageLongerThanCapIsRefused) {
  auto errors = run_group(2, quick(GetParam()), [&](int r, std::unique_ptr<Links>& t) {
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
    std::this_thread::sleep_for(100ms);
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

INSTANTIATE_TEST_SUITE_P(Shm, ShmLinksBothWays, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "SingleCopy" : "RingOnly"; });

// Each rank's segment says its own ring size (shm_ring_bytes follows /dev/shm's room, which
// ranks may see differently): ranks with 4 KiB, 64 KiB and 1 MiB rings exchange every size.
TEST(ShmLinks, RanksWithDifferentRingsExchange) {
  TempStore store;
  const size_t rings[] = {4096, 64 << 10, 1 << 20};
  std::vector<std::string> errors(3);
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r)
    th.emplace_back([&, r] {
      try {
        ShmOptions o = quick(r != 1);
        o.ring_bytes = rings[r];
        auto t = connect_shm(*store.client(), r, 3, o);
        errors[size_t(r)] = shift_exchange(*t, std::vector<size_t>(std::begin(kSizes), std::end(kSizes)));
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

TEST(ShmLinks, DefaultRingsShrinkAsTheGroupGrows) {
  EXPECT_LE(shm_ring_bytes(2), size_t(1) << 20);
  for (int p = 2; p <= 64; ++p) {
    const size_t ring = shm_ring_bytes(p);
    EXPECT_TRUE(ring >= (64 << 10) && (ring & (ring - 1)) == 0) << p << ": " << ring;
    EXPECT_TRUE(ring == (64 << 10) || uint64_t(p) * uint64_t(p) * ring <= (64u << 20)) << p << ": " << ring;
    EXPECT_LE(shm_ring_bytes(p + 1), ring);
  }
  EXPECT_EQ(shm_ring_bytes(64), size_t(64) << 10);
}

// A peer that destroys its links: what it sent before still arrives, then recv throws naming
// it, and so does a send to it.
TEST(ShmLinks, PeerThatClosesIsAnErrorNamingIt) {
  auto errors = run_group(3, quick(), [&](int r, std::unique_ptr<Links>& t) {
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
    try {
      t->send(2, in.data(), in.size());
      ADD_FAILURE() << "a send to a closed peer";
    } catch (const LinkError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2 is gone"), std::string::npos) << e.what();
    }
    const uint8_t x = 1;
    t->send(1, &x, 1);  // rank 1 is still fine
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

TEST(ShmLinks, RecvTimeoutNamesThePeer) {
  ShmOptions o = quick();
  o.recv_timeout = 300ms;
  auto errors = run_group(2, o, [&](int r, std::unique_ptr<Links>& t) {
    uint8_t x;
    if (r == 0) {
      const auto t0 = Clock::now();
      try {
        t->recv(1, &x, 1);
        ADD_FAILURE() << "a message from a silent peer";
      } catch (const LinkError& e) {
        EXPECT_NE(std::string(e.what()).find("no message from rank 1 for 300 ms"), std::string::npos) << e.what();
      }
      EXPECT_GE(Clock::now() - t0, 300ms);
    } else {
      std::this_thread::sleep_for(800ms);  // connected, silent, and still there
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// Ranks 0 and 2 of 3 start, 1 never does: both fail after the connect timeout naming it, and
// leave no segment behind.
TEST(ShmLinks, ConnectTimeoutNamesTheRankThatNeverCameAndCleansUp) {
  ShmOptions o = quick();
  o.connect_timeout = 700ms;
  TempStore store;
  std::vector<std::string> errors(3);
  std::vector<std::thread> th;
  for (int r : {0, 2})
    th.emplace_back([&, r] {
      try {
        connect_shm(*store.client(), r, 3, o);
      } catch (const LinkError& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r : {0, 2}) EXPECT_NE(errors[size_t(r)].find("rank 1 never came"), std::string::npos) << errors[size_t(r)];
  EXPECT_TRUE(segments_left(*store.keep).empty());
}

// Rank 2 creates its segment, publishes itself and dies before the barrier (a forked process
// that _exits, as a crash, leaving its name): ranks 0 and 1 give up naming it, and its name
// goes with theirs.
TEST(ShmLinks, ARankThatDiesDuringSetupLeavesNothingInDevShm) {
  ShmOptions o = quick();
  o.connect_timeout = 1500ms;
  TempStore store;
  const pid_t pid = fork();
  if (pid == 0) {
    auto s = store.client();
    const std::string group = s->get_string("shm/group", 10s);
    char name[64];
    std::snprintf(name, sizeof name, "/prism-%016llx-2", std::stoull(group.substr(0, group.find(' '))));
    shm::Segment seg = shm::Segment::create(name, 3, 2, 4096, "rank 2");
    s->set("shm/2", std::to_string(getpid()));
    _exit(0);  // no destructor: the name stays, as after a crash
  }
  std::vector<std::string> errors(2);
  std::vector<std::thread> th;
  for (int r : {0, 1})
    th.emplace_back([&, r] {
      try {
        connect_shm(*store.client(), r, 3, o);
      } catch (const LinkError& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : th) t.join();
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  for (int r : {0, 1}) EXPECT_NE(errors[size_t(r)].find("rank 2 never came"), std::string::npos) << errors[size_t(r)];
  EXPECT_TRUE(store.keep->check("shm/2"));
  EXPECT_TRUE(segments_left(*store.keep).empty());
}

TEST(ShmLinks, BadArgumentsAreRefused) {
  TempStore store;
  EXPECT_THROW(connect_shm(*store.client(), 2, 2), LinkError);
  EXPECT_THROW(connect_shm(*store.client(), 0, 0), LinkError);
  ShmOptions o = quick();
  o.ring_bytes = 5000;
  EXPECT_THROW(connect_shm(*store.client(), 0, 1, o), LinkError);
  auto t = connect_shm(*store.client(), 0, 1, quick());
  uint8_t x = 0;
  EXPECT_THROW(t->send(0, &x, 1), LinkError);  // no peer 0 but itself
  EXPECT_THROW(t->recv(1, &x, 1), LinkError);
}

// Runs child(rank, links) in a forked process per rank; returns each one's wait status.
std::vector<int> run_processes(int n, const ShmOptions& o, const std::function<int(int, Links&)>& child,
                               TempStore& store) {
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 1;
      try {
        auto t = connect_shm(*store.client(), r, n, o);
        code = child(r, *t);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(code);
    }
    kids.push_back(pid);
  }
  std::vector<int> status;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    status.push_back(st);
  }
  return status;
}

// Ranks as processes: messages both through the ring and read from the sender's memory
// (process_vm_readv); afterwards nothing of the group is left in /dev/shm.
TEST(ShmLinks, ProcessesExchangeAndLeaveNothingInDevShm) {
  for (int n = 1; n <= 5; ++n) {
    SCOPED_TRACE("p = " + std::to_string(n));
    TempStore store;
    const auto status = run_processes(
        n, quick(),
        [](int, Links& t) {
          const std::string e = shift_exchange(t, {0, 1, 1000, 64 << 10, (1 << 20) + 7, 8 << 20});
          if (!e.empty()) std::fprintf(stderr, "%s\n", e.c_str());
          return e.empty() ? 0 : 1;
        },
        store);
    for (int r = 0; r < n; ++r) EXPECT_TRUE(WIFEXITED(status[size_t(r)]) && WEXITSTATUS(status[size_t(r)]) == 0);
    EXPECT_TRUE(segments_left(*store.keep).empty());
  }
}

// Rank 2 sends rank 0 a message, then is killed; rank 1 is blocked sending rank 2 16 MiB. Rank 0
// gets the message, then an error naming rank 2 as gone; rank 1's send fails naming it too;
// both within a second or two, well before the 30 s timeout, and /dev/shm is clean.
TEST(ShmLinks, AKilledPeerIsNamedSoonNotAtTheTimeout) {
  for (bool single : {true, false}) {
    SCOPED_TRACE(single ? "single copy" : "ring only");
    TempStore store;
    const auto status = run_processes(
        3, quick(single),
        [](int r, Links& t) {
          const auto t0 = Clock::now();
          const std::vector<uint8_t> m = message(r, 0, 1000);
          if (r == 2) {
            t.send(0, m.data(), m.size());
            std::this_thread::sleep_for(300ms);  // rank 1 is blocked in its send by now
            raise(SIGKILL);
          }
          std::string error;
          try {
            if (r == 0) {
              std::vector<uint8_t> in(1000);
              if (t.recv(2, in.data(), in.size()) != 1000 || in != message(2, 0, 1000)) return 3;
              t.recv(2, in.data(), in.size());
            } else {
              const std::vector<uint8_t> big = message(1, 2, 16 << 20);
              t.send(2, big.data(), big.size());
            }
          } catch (const LinkError& e) {
            error = e.what();
          }
          std::fprintf(stderr, "rank %d: %s\n", r, error.c_str());
          if (error.find("rank 2 is gone") == std::string::npos || error.find("exited") == std::string::npos) return 4;
          return Clock::now() - t0 < 5s ? 0 : 5;
        },
        store);
    EXPECT_TRUE(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0) << status[0];
    EXPECT_TRUE(WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 0) << status[1];
    EXPECT_TRUE(WIFSIGNALED(status[2]));
    EXPECT_TRUE(segments_left(*store.keep).empty());
  }
}

// ---- The host algorithms over shared memory give TCP's bits (through prism::Group). ----

struct Env {
  Env(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~Env() { unsetenv(name_); }
  const char* name_;
};

// Every rank's allreduce output of algorithm a under `policy` through links `kind`; `shm_used`
// says whether the group made shared-memory links (its store has "shm/group").
std::vector<std::vector<uint8_t>> allreduce_over(const char* kind, int p, Algorithm a, Policy policy,
                                                 const std::vector<std::vector<uint8_t>>& in, size_t count,
                                                 bool* shm_used) {
  Env env("PRISM_LINKS", kind);
  TempStore store;
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(p), std::vector<uint8_t>(count * 4));
  std::vector<std::string> errors(static_cast<size_t>(p));
  std::vector<std::thread> th;
  GroupOptions go;
  go.host_ip = "127.0.0.1";
  go.connect_timeout_ms = 20000;
  go.recv_timeout_ms = 30000;
  go.algorithm = a;
  for (int r = 0; r < p; ++r)
    th.emplace_back([&, r] {
      try {
        Group g = Group::from_store(store.client(), r, p, go);
        CollOptions co;
        co.op.policy = policy;
        g.allreduce(in[size_t(r)].data(), out[size_t(r)].data(), count, Format::FP32, co);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < p; ++r) EXPECT_EQ(errors[size_t(r)], "") << kind << " rank " << r;
  *shm_used = store.keep->check("prism/shm/group");
  return out;
}

TEST(ShmLinks, HostAlgorithmsGiveTheBitsTheyGiveOverTcp) {
  const size_t count = 300001;  // 1.2 MB: RHD's and the ring's blocks go by single copy
  for (int p : {2, 3, 4, 5}) {
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < p; ++r) in.push_back(test::make_input(Format::FP32, count, uint32_t(100 + r), true));
    for (Algorithm a : {Algorithm::BINOMIAL, Algorithm::CHAIN, Algorithm::RHD, Algorithm::RING})
      for (Policy policy : {Policy::FP32_ARRIVAL, Policy::KULISCH_FIXED}) {
        SCOPED_TRACE("p = " + std::to_string(p) + ", algorithm " + std::to_string(int(a)) + ", policy " +
                     std::to_string(int(policy)));
        bool shm = false, tcp_shm = true;
        const auto over_shm = allreduce_over("auto", p, a, policy, in, count, &shm);
        const auto over_tcp = allreduce_over("tcp", p, a, policy, in, count, &tcp_shm);
        EXPECT_TRUE(shm) << "auto chose TCP for ranks of one host";
        EXPECT_FALSE(tcp_shm) << "PRISM_LINKS=tcp made shared-memory links";
        for (int r = 0; r < p; ++r) EXPECT_TRUE(over_shm[size_t(r)] == over_tcp[size_t(r)]) << "rank " << r;
        if (policy == Policy::KULISCH_FIXED) {
          const ReduceOp op{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
          EXPECT_TRUE(over_shm[0] == test::one_accumulator(op, in, count).out);
        }
      }
  }
}

// ---- lib/group/links_choice.hpp's rules. ----

TEST(LinksChoice, EnvironmentNamesTheKind) {
  {
    Env e("PRISM_LINKS", "shm");
    EXPECT_EQ(group::links_kind_from_env(), group::LinksKind::SHM);
  }
  {
    Env e("PRISM_LINKS", "tcp");
    EXPECT_EQ(group::links_kind_from_env(), group::LinksKind::TCP);
  }
  EXPECT_EQ(group::links_kind_from_env(), group::LinksKind::AUTO);
  Env e("PRISM_LINKS", "rdma");
  try {
    group::links_kind_from_env();
    ADD_FAILURE() << "PRISM_LINKS=rdma taken";
  } catch (const std::invalid_argument& x) {
    EXPECT_NE(std::string(x.what()).find("auto, tcp or shm"), std::string::npos) << x.what();
  }
}

// Rank 1 "on another host" (its published identity differs): auto falls back to TCP (rank 0
// then waits for rank 1's TCP address), shm is an error naming rank 1; tcp and shm asked by
// two ranks is an error naming both.
TEST(LinksChoice, AnotherHostMeansTcpAndMixedAsksAreRefused) {
  TcpOptions o;
  o.connect_timeout = 500ms;
  o.local_ip = "127.0.0.1";
  auto attempt = [&](const std::string& rank1, group::LinksKind want) {
    TempStore store;
    auto s = store.client();
    s->set("links/1", rank1);
    try {
      group::connect_links(*s, 0, 2, o, want);
    } catch (const LinkError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string elsewhere = "auto some-other-host/boot/ipc/pid";
  std::string e = attempt(elsewhere, group::LinksKind::AUTO);
  EXPECT_NE(e.find("'tcp/<rank>'"), std::string::npos) << e;
  e = attempt(elsewhere, group::LinksKind::SHM);
  EXPECT_NE(e.find("rank 1 is on another host"), std::string::npos) << e;
  e = attempt("tcp " + group::host_identity(), group::LinksKind::SHM);
  EXPECT_NE(e.find("rank 1 asks for tcp links and rank 0 for shm"), std::string::npos) << e;
}

}  // namespace
}  // namespace prism::coll
