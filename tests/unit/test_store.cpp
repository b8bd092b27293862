// The rendezvous stores (lib/rendezvous/): what store.hpp promises, for each
// kind, between threads and between forked processes: a value set by one
// client is what another gets (bytes, NULs included); get() waits for a set
// that comes later; add() is atomic (concurrent adders' returns are exactly
// 1..N); a timeout names the key; PrefixStore keeps groups apart. The TCP
// store also: a client that dies or talks nonsense never breaks the server,
// a server that dies is a clear StoreError, a wrong port is named. The URL
// and environment forms, and their errors.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/callback_store.hpp"
#include "rendezvous/file_store.hpp"
#include "rendezvous/from_url.hpp"
#include "rendezvous/tcp_store.hpp"

namespace prism::rdv {
namespace {

using namespace std::chrono_literals;

std::string has(const std::string& text, const std::string& part) {
  return text.find(part) == std::string::npos ? "'" + part + "' not in: " + text : "";
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const StoreError& e) {
    return e.what();
  }
  return "(no StoreError)";
}

// A fresh directory for file stores, removed with what is left in it.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/prism_store_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

// An in-memory store for CallbackStore: a map with a condition variable.
struct Board {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Bytes> m;
  StoreCallbacks callbacks() {
    StoreCallbacks cb;
    cb.set = [this](std::string_view k, std::span<const uint8_t> v) {
      std::lock_guard<std::mutex> l(mu);
      m[std::string(k)].assign(v.begin(), v.end());
      cv.notify_all();
    };
    cb.get = [this](std::string_view k, Millis t) -> std::optional<Bytes> {
      std::unique_lock<std::mutex> l(mu);
      if (!cv.wait_for(l, t, [&] { return m.count(std::string(k)) > 0; })) return std::nullopt;
      return m[std::string(k)];
    };
    cb.add = [this](std::string_view k, int64_t d) {
      std::lock_guard<std::mutex> l(mu);
      Bytes& b = m[std::string(k)];
      const int64_t v = (b.empty() ? 0 : std::stoll(std::string(b.begin(), b.end()))) + d;
      const std::string s = std::to_string(v);
      b.assign(s.begin(), s.end());
      cv.notify_all();
      return v;
    };
    return cb;
  }
};

enum class Kind { TCP, FILE, CALLBACK };
std::string kind_name(const testing::TestParamInfo<Kind>& k) {
  return k.param == Kind::TCP ? "Tcp" : k.param == Kind::FILE ? "File" : "Callback";
}

// One store of a kind, and as many clients of it as a test asks for (each
// a store object of its own, as each rank has).
class Stores {
 public:
  explicit Stores(Kind k) : kind_(k) {
    if (k == Kind::TCP) server_ = make_tcp_store("127.0.0.1", 0, true, 10s);
  }
  std::shared_ptr<Store> client() {
    switch (kind_) {
      case Kind::TCP: return make_tcp_store("127.0.0.1", server_->port(), false, 10s);
      case Kind::FILE: return make_file_store(dir_.file("store"));
      case Kind::CALLBACK: return std::make_shared<CallbackStore>(board_.callbacks());
    }
    return nullptr;
  }
  // A client made after fork() in a child process (TCP and file stores only).
  std::function<std::shared_ptr<Store>()> child_factory() {
    if (kind_ == Kind::TCP) {
      const uint16_t port = server_->port();
      return [port] { return make_tcp_store("127.0.0.1", port, false, 10s); };
    }
    const std::string path = dir_.file("store");
    return [path] { return make_file_store(path); };
  }

 private:
  Kind kind_;
  TempDir dir_;
  Board board_;
  std::shared_ptr<TcpStore> server_;
};

// Runs f in a forked child; its exit status (0: f returned 0). The child
// reports what went wrong on stderr.
pid_t spawn(const std::function<int()>& f) {
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 98;
    try {
      code = f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", int(getpid()), e.what());
      code = 99;
    }
    _exit(code);
  }
  return pid;
}
int wait_exit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class StoreTest : public testing::TestWithParam<Kind> {};
class StoreProcessTest : public testing::TestWithParam<Kind> {};

TEST_P(StoreTest, WhatOneClientSetsAnotherGets) {
  Stores s(GetParam());
  auto a = s.client(), b = s.client();
  const Bytes binary = {0, 1, 2, 0, 255, 0};
  a->set("bin", binary);
  a->set("empty", std::span<const uint8_t>());
  EXPECT_EQ(b->get("bin", 5s), binary);
  EXPECT_EQ(b->get("empty", 5s), Bytes());
  EXPECT_TRUE(b->check("bin"));
  EXPECT_FALSE(b->check("nothing"));
  b->set("bin", "replaced");
  EXPECT_EQ(a->get_string("bin", 5s), "replaced");
  const Bytes big(1 << 20, 0x5A);
  a->set("big", big);
  EXPECT_EQ(b->get("big", 5s), big);
}

TEST_P(StoreTest, GetWaitsForALaterSet) {
  Stores s(GetParam());
  auto a = s.client(), b = s.client();
  std::atomic<bool> asked{false};
  std::string got;
  std::thread waiter([&] {
    asked = true;
    got = b->get_string("late", 20s);
  });
  while (!asked) std::this_thread::yield();
  std::this_thread::sleep_for(100ms);  // most likely waiting by now; correct either way
  EXPECT_FALSE(a->check("late"));
  a->set("late", "here");
  waiter.join();
  EXPECT_EQ(got, "here");
}

// One store object used by several threads at once: a get parked on one key
// holds no other thread up.
TEST_P(StoreTest, OneClientSharedByThreadsDoesNotBlockOnAParkedGet) {
  Stores s(GetParam());
  auto shared = s.client();
  std::string got;
  std::thread waiter([&] { got = shared->get_string("later", 20s); });
  for (int i = 0; i < 20; ++i) shared->set(std::string("k").append(std::to_string(i)), std::to_string(i));
  EXPECT_EQ(shared->get_string("k19", 5s), "19");
  shared->set("later", "done");
  waiter.join();
  EXPECT_EQ(got, "done");
}

TEST_P(StoreTest, AddIsAtomicUnderConcurrentAdders) {
  Stores s(GetParam());
  const int threads = 6, each = 300;
  std::vector<std::shared_ptr<Store>> clients;
  for (int t = 0; t < threads; ++t) clients.push_back(t % 2 ? clients.back() : s.client());  // some shared
  std::vector<std::vector<int64_t>> seen(threads);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) seen[size_t(t)].push_back(clients[size_t(t)]->add("count", 1));
    });
  for (auto& t : ts) t.join();
  std::set<int64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  // Every return distinct and every value 1..N returned once: no two adds saw the same count.
  EXPECT_EQ(all.size(), size_t(threads * each));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), threads * each);
  EXPECT_EQ(clients[0]->add("count", 0), threads * each);
  EXPECT_EQ(clients[0]->get_string("count", 1s), std::to_string(threads * each));  // decimal text
  EXPECT_EQ(clients[0]->add("negative", -5), -5);
}

TEST_P(StoreTest, GetTimeoutNamesTheKey) {
  Stores s(GetParam());
  auto a = s.client();
  const std::string e = error_of([&] { a->get("never/set", 200ms); });
  EXPECT_EQ(has(e, "key 'never/set' not set after 200 ms"), "");
  EXPECT_EQ(has(e, "is the rank that sets it running"), "");
  a->set("after", "fine");  // the store is still usable
  EXPECT_EQ(a->get_string("after", 1s), "fine");
}

TEST_P(StoreTest, PrefixStoresKeepGroupsApart) {
  Stores s(GetParam());
  auto inner = s.client();
  PrefixStore g1("job1", inner), g2("job2", s.client());
  g1.set("tcp/0", "a");
  g2.set("tcp/0", "b");
  EXPECT_EQ(g1.get_string("tcp/0", 1s), "a");
  EXPECT_EQ(g2.get_string("tcp/0", 1s), "b");
  EXPECT_EQ(inner->get_string("job1/tcp/0", 1s), "a");
  g1.set("only1", "x");
  EXPECT_FALSE(g2.check("only1"));
  EXPECT_EQ(has(error_of([&] { g2.get("only1", Millis(100)); }), "key 'job2/only1'"), "");
  EXPECT_EQ(g1.add("n", 2), 2);
  EXPECT_EQ(g2.add("n", 5), 5);
}

TEST_P(StoreTest, AddOnTextIsAnErrorAndTheStoreGoesOn) {
  if (GetParam() == Kind::CALLBACK) GTEST_SKIP() << "the program's add decides";
  Stores s(GetParam());
  auto a = s.client();
  a->set("text", "hello");
  EXPECT_EQ(has(error_of([&] { a->add("text", 1); }), "key 'text' holds a value that is not a decimal integer"), "");
  EXPECT_EQ(a->add("fine", 3), 3);
}

INSTANTIATE_TEST_SUITE_P(Kinds, StoreTest, testing::Values(Kind::TCP, Kind::FILE, Kind::CALLBACK), kind_name);

// Processes: each child publishes its key, adds to a shared count, and
// waits for every other child's key (set later than its own get, for most).
TEST_P(StoreProcessTest, ForkedRanksExchangeAndAddExactly) {
  Stores s(GetParam());
  auto make = s.child_factory();
  auto parent = s.client();
  const int n = 4, adds = 100;
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r)
    kids.push_back(spawn([&, r] {
      auto st = make();
      for (int i = 0; i < adds; ++i) st->add("count", 1);
      st->set("rank/" + std::to_string(r), "value of " + std::to_string(r));
      for (int j = 0; j < n; ++j)
        if (st->get_string("rank/" + std::to_string(j), 20s) != "value of " + std::to_string(j)) return 1;
      st->add("finished", 1);
      st->get("all-done", 20s);  // the parent's word: the store outlives every child's reads
      return 0;
    }));
  for (int j = 0; j < n; ++j)
    EXPECT_EQ(parent->get_string("rank/" + std::to_string(j), 20s), "value of " + std::to_string(j));
  while (parent->add("finished", 0) < n) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(parent->add("count", 0), n * adds);
  parent->set("all-done", "1");
  for (pid_t k : kids) EXPECT_EQ(wait_exit(k), 0);
}

// A child that dies while its get waits (SIGKILL, no goodbye): the others go on.
TEST_P(StoreProcessTest, AClientThatDiesBreaksNothing) {
  Stores s(GetParam());
  auto make = s.child_factory();
  auto a = s.client();
  const pid_t kid = spawn([&] {
    auto st = make();
    st->set("kid/ready", "1");
    st->get("never", 60s);
    return 0;
  });
  a->get("kid/ready", 20s);
  std::this_thread::sleep_for(50ms);
  kill(kid, SIGKILL);
  EXPECT_EQ(wait_exit(kid), 128 + SIGKILL);
  a->set("never", "now it is");  // wakes a waiter that is gone
  auto b = s.client();
  EXPECT_EQ(b->get_string("never", 5s), "now it is");
  EXPECT_EQ(b->add("n", 1), 1);
}

INSTANTIATE_TEST_SUITE_P(Kinds, StoreProcessTest, testing::Values(Kind::TCP, Kind::FILE), kind_name);

// --- The TCP store alone.

int raw_connect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0x7F000001);
  a.sin_port = htons(port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// Whether the server closes fd, having sent at most its greeting.
bool hangs_up(int fd) {
  uint8_t buf[16];
  size_t got = 0;
  for (;;) {
    const ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0) return got <= 8;
    if (r < 0) return false;
    got += size_t(r);
  }
}

// Clients that break the protocol, stop mid-request, or leave with a GET
// parked, each dropped alone: the server answers the others throughout.
TEST(TcpStore, BadOrHalfDoneClientsAreDroppedAlone) {
  auto server = make_tcp_store("127.0.0.1", 0, true, 10s);
  auto good = make_tcp_store("127.0.0.1", server->port(), false, 10s);
  std::vector<int> raws;
  {  // nonsense instead of a greeting: closed
    const int fd = raw_connect(server->port());
    const char junk[] = "GET / HTTP/1.1\r\n\r\n";
    ASSERT_GT(write(fd, junk, sizeof junk), 0);
    EXPECT_TRUE(hangs_up(fd));
    close(fd);
  }
  {  // a greeting, then an unknown command: closed
    const int fd = raw_connect(server->port());
    const uint8_t msg[] = {'P', 'R', 'S', 'T', 1, 0, 0, 0, 77, 0, 0, 0, 0};
    ASSERT_EQ(write(fd, msg, sizeof msg), ssize_t(sizeof msg));
    EXPECT_TRUE(hangs_up(fd));
    close(fd);
  }
  {  // a key longer than the limit: closed
    const int fd = raw_connect(server->port());
    const uint8_t msg[] = {'P', 'R', 'S', 'T', 1, 0, 0, 0, 4, 0xFF, 0xFF, 0xFF, 0x7F};
    ASSERT_EQ(write(fd, msg, sizeof msg), ssize_t(sizeof msg));
    EXPECT_TRUE(hangs_up(fd));
    close(fd);
  }
  {  // half a SET, left open
    const int fd = raw_connect(server->port());
    const uint8_t msg[] = {'P', 'R', 'S', 'T', 1, 0, 0, 0, 1, 3, 0, 0, 0, 'a'};
    ASSERT_EQ(write(fd, msg, sizeof msg), ssize_t(sizeof msg));
    raws.push_back(fd);
  }
  {  // a GET parked, then gone
    const int fd = raw_connect(server->port());
    const uint8_t msg[] = {'P', 'R', 'S', 'T', 1, 0, 0, 0, 2, 1, 0, 0, 0, 'z', 0x60, 0xEA, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ(write(fd, msg, sizeof msg), ssize_t(sizeof msg));
    uint8_t greet[8];
    EXPECT_EQ(recv(fd, greet, 8, MSG_WAITALL), 8);
    close(fd);
  }
  good->set("z", "woken after its waiter left");
  EXPECT_EQ(good->get_string("z", 5s), "woken after its waiter left");
  EXPECT_EQ(good->add("n", 7), 7);
  for (int fd : raws) close(fd);
  EXPECT_TRUE(good->check("n"));
}

// The wire protocol as tcp_store.hpp writes it, spoken by hand: an
// independent check of the format.
TEST(TcpStore, WireFormatAsDocumented) {
  auto server = make_tcp_store("127.0.0.1", 0, true, 10s);
  const int fd = raw_connect(server->port());
  auto le = [](std::vector<uint8_t>& v, uint64_t x, int n) {
    for (int i = 0; i < n; ++i) v.push_back(uint8_t(x >> (8 * i)));
  };
  auto reply = [&](size_t n) {
    std::vector<uint8_t> b(n);
    EXPECT_EQ(recv(fd, b.data(), n, MSG_WAITALL), ssize_t(n));
    return b;
  };
  std::vector<uint8_t> m = {'P', 'R', 'S', 'T'};
  le(m, 1, 4);
  m.push_back(1), le(m, 1, 4), m.push_back('k'), le(m, 2, 4), m.push_back('h'), m.push_back('i');  // SET k = "hi"
  m.push_back(3), le(m, 1, 4), m.push_back('c'), le(m, uint64_t(-3), 8);                           // ADD c -3
  m.push_back(4), le(m, 1, 4), m.push_back('k');                                                   // CHECK k
  m.push_back(2), le(m, 1, 4), m.push_back('k'), le(m, 1000, 8);                                   // GET k
  m.push_back(2), le(m, 1, 4), m.push_back('x'), le(m, 0, 8);                                      // GET x, no wait
  ASSERT_EQ(write(fd, m.data(), m.size()), ssize_t(m.size()));
  EXPECT_EQ(reply(8), std::vector<uint8_t>({'P', 'R', 'S', 'T', 1, 0, 0, 0}));
  EXPECT_EQ(reply(1), std::vector<uint8_t>({0}));                                                  // SET: OK
  EXPECT_EQ(reply(9), std::vector<uint8_t>({0, 0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}));  // ADD: OK, -3
  EXPECT_EQ(reply(2), std::vector<uint8_t>({0, 1}));                                               // CHECK: OK, set
  EXPECT_EQ(reply(7), std::vector<uint8_t>({0, 2, 0, 0, 0, 'h', 'i'}));                            // GET: OK, "hi"
  EXPECT_EQ(reply(1), std::vector<uint8_t>({1}));                                                  // GET: TIMEOUT
  close(fd);
}

// The serving process dies (SIGKILL: no goodbye) while a client's get waits,
// and before its next request: both are StoreErrors that say so.
TEST(TcpStore, ServerDeathIsAClearErrorAtTheClient) {
  int to_parent[2], to_kid[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_kid), 0);
  const pid_t kid = spawn([&] {
    auto st = make_tcp_store("127.0.0.1", 0, true, 10s);
    const uint16_t port = st->port();
    if (write(to_parent[1], &port, sizeof port) != sizeof port) return 1;
    char c;
    if (read(to_kid[0], &c, 1) != 1) return 2;
    raise(SIGKILL);
    return 3;
  });
  uint16_t port = 0;
  ASSERT_EQ(read(to_parent[0], &port, sizeof port), ssize_t(sizeof port));
  auto client = make_tcp_store("127.0.0.1", port, false, 10s);
  client->set("k", "v");
  std::string waiting_error;
  std::thread waiter([&] { waiting_error = error_of([&] { client->get("never", 60s); }); });
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(write(to_kid[1], "x", 1), 1);
  waiter.join();
  EXPECT_EQ(wait_exit(kid), 128 + SIGKILL);
  EXPECT_EQ(has(waiting_error, "TCP store 127.0.0.1:" + std::to_string(port)), "");
  EXPECT_EQ(has(waiting_error, "exited or destroyed its store"), "");
  const std::string next = error_of([&] { client->get("k", 1s); });
  EXPECT_EQ(has(next, "exited or destroyed its store"), "");
  for (int fd : {to_parent[0], to_parent[1], to_kid[0], to_kid[1]}) close(fd);
}

// No server at the port: the client retries for its timeout, then names the
// address and what to check.
TEST(TcpStore, NoServerNamesHostPortAndWhatToCheck) {
  auto probe = make_tcp_store("127.0.0.1", 0, true, 1s);
  const uint16_t port = probe->port();
  probe.reset();  // nobody listens there now
  const std::string e = error_of([&] { make_tcp_store("127.0.0.1", port, false, 300ms); });
  EXPECT_EQ(has(e, "127.0.0.1:" + std::to_string(port)), "");
  EXPECT_EQ(has(e, "after 300 ms"), "");
  EXPECT_EQ(has(e, "MASTER_ADDR"), "");
}

TEST(TcpStore, ClientStartedBeforeTheServerWaitsForIt) {
  auto probe = make_tcp_store("127.0.0.1", 0, true, 1s);
  const uint16_t port = probe->port();
  probe.reset();
  std::shared_ptr<TcpStore> client;
  std::string error;
  std::thread early([&] {
    try {
      client = make_tcp_store("127.0.0.1", port, false, 20s);
    } catch (const StoreError& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(200ms);
  auto server = make_tcp_store("127.0.0.1", port, true, 20s);  // SO_REUSEADDR: the port is free again at once
  early.join();
  ASSERT_EQ(error, "");
  server->set("hello", "world");
  EXPECT_EQ(client->get_string("hello", 5s), "world");
}

TEST(TcpStore, PortInUseAndBadHostAreClearErrors) {
  auto server = make_tcp_store("127.0.0.1", 0, true, 1s);
  const std::string busy = error_of([&] { make_tcp_store("127.0.0.1", server->port(), true, 1s); });
  EXPECT_EQ(has(busy, "cannot serve at port " + std::to_string(server->port())), "");
  EXPECT_EQ(has(busy, "another port"), "");
  EXPECT_EQ(has(error_of([&] { make_tcp_store("no-such-host.invalid", 1234, false, 1s); }),
                "cannot resolve host 'no-such-host.invalid'"),
            "");
  EXPECT_EQ(has(error_of([&] { make_tcp_store("127.0.0.1", 0, false, 1s); }), "port 0 names no server"), "");
  const std::string wrong = error_of([&] {  // something that is not a PRISM store listens there
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7F000001);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd, 4);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    std::thread answer([fd] {
      const int c = accept(fd, nullptr, nullptr);
      char buf[8];
      recv(c, buf, 8, MSG_WAITALL);
      (void)!write(c, "HTTP/1.1", 8);
      close(c);
    });
    try {
      make_tcp_store("127.0.0.1", ntohs(a.sin_port), false, 2s);
    } catch (...) {
      answer.join();
      close(fd);
      throw;
    }
    answer.join();
    close(fd);
  });
  EXPECT_EQ(has(wrong, "not a PRISM TCP store"), "");
}

// Whether a TCP connection to ip (host order):port is accepted.
bool reaches(uint32_t ip, uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  a.sin_port = htons(port);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// Asked to, the server listens at the store's host alone: one served for
// 127.0.0.1 is not reached at 127.0.0.2 (another address of this host: all of
// 127/8 is). By default it listens at every address (torch's TCPStore does).
TEST(TcpStore, ServedAtTheStoreHostAloneWhenAsked) {
  auto only = make_tcp_store("127.0.0.1", 0, true, 2s, Listen::STORE_HOST);
  auto every = make_tcp_store("127.0.0.1", 0, true, 2s);
  EXPECT_TRUE(reaches(0x7F000001, only->port()));
  EXPECT_FALSE(reaches(0x7F000002, only->port()));
  EXPECT_TRUE(reaches(0x7F000002, every->port()));
  only->set("k", "v");
  EXPECT_EQ(make_tcp_store("127.0.0.1", only->port(), false, 2s)->get_string("k", 1s), "v");
  // 192.0.2.1 (TEST-NET-1) is no address of this host.
  const std::string e = error_of([&] { make_tcp_store("192.0.2.1", 0, true, 1s, Listen::STORE_HOST); });
  EXPECT_EQ(has(e, "cannot serve at 192.0.2.1"), "");
}

// A fake store at 127.0.0.1 that greets each connection as PRISM's does and
// answers its first request with `replies[i]` (the i-th connection's), then
// holds it until the client lets go.
class FakeServer {
 public:
  explicit FakeServer(std::vector<std::vector<uint8_t>> replies) : replies_(std::move(replies)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7F000001);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    thread_.join();
    close(fd_);
  }
  uint16_t port = 0;

 private:
  void serve() {
    for (const std::vector<uint8_t>& reply : replies_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 10000) != 1) return;  // no client came (it died first)
      const int c = accept(fd_, nullptr, nullptr);
      uint8_t buf[256];
      if (recv(c, buf, 8, MSG_WAITALL) == 8 && write(c, buf, 8) == 8 && recv(c, buf, sizeof buf, 0) > 0)
        (void)!write(c, reply.data(), reply.size());
      while (recv(c, buf, sizeof buf, 0) > 0) {
      }
      close(c);
    }
  }
  int fd_ = -1;
  std::vector<std::vector<uint8_t>> replies_;
  std::thread thread_;
};

// A reply that declares more than any value the server keeps (kMaxValue): a
// StoreError that says so, at once, without allocating what it declares. The
// client runs in a child whose address space could not hold 4 GiB more.
TEST(TcpStore, AReplyLongerThanAnyValueIsRefusedWithoutAllocatingIt) {
  FakeServer fake({{0, 0xFF, 0xFF, 0xFF, 0xFF}, {2, 0xFF, 0xFF, 0xFF, 0xFF}});  // GET: OK; SET: ERROR
  const uint16_t port = fake.port;
  const pid_t kid = spawn([port] {
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t room = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(1) << 30);
    const rlimit lim{room, room};
    if (setrlimit(RLIMIT_AS, &lim) != 0) return 97;
    auto st = make_tcp_store("127.0.0.1", port, false, 5s);
    const std::string g = error_of([&] { st->get("k", 1s); });
    const std::string s = error_of([&] { st->set("k", "v"); });
    const std::string want = "a reply of 4294967295 bytes (at most " + std::to_string(kMaxValue) + ")";
    for (const std::string& e : {g, s})
      if (!has(e, want).empty() || !has(e, "127.0.0.1:" + std::to_string(port)).empty()) {
        std::fprintf(stderr, "%s\n", has(e, want).c_str());
        return 1;
      }
    return 0;
  });
  EXPECT_EQ(wait_exit(kid), 0);
}

// The server holds at most TcpStoreLimits' keys, bytes and connections; past
// them a request is refused with an error that names the limit, and the store
// goes on for what it holds.
TEST(TcpStore, KeysBytesAndConnectionsPerServerAreCapped) {
  TcpStoreLimits lim;
  lim.keys = 3, lim.bytes = 1000, lim.connections = 3;
  auto server = make_tcp_store("127.0.0.1", 0, true, 2s, Listen::STORE_HOST, lim);  // its own client: one
  server->set("a", "1");
  server->set("b", "2");
  EXPECT_EQ(server->add("c", 1), 1);
  for (const std::string& e : {error_of([&] { server->set("d", "4"); }), error_of([&] { server->add("e", 1); })})
    EXPECT_EQ(has(e, "holds 3 keys (at most 3)"), "");
  server->set("a", "again");  // a key it holds
  EXPECT_EQ(server->add("c", 1), 2);
  const std::string big = error_of([&] { server->set("b", std::string(1000, 'x')); });
  EXPECT_EQ(has(big, "(at most 1000)"), "");
  EXPECT_EQ(server->get_string("b", 1s), "2");
  auto c2 = make_tcp_store("127.0.0.1", server->port(), false, 2s);
  auto c3 = make_tcp_store("127.0.0.1", server->port(), false, 2s);
  EXPECT_EQ(c3->get_string("a", 1s), "again");
  auto c4 = make_tcp_store("127.0.0.1", server->port(), false, 2s);
  const std::string full = error_of([&] { c4->check("a"); });
  EXPECT_EQ(has(full, "3 connections (at most 3)"), "");
  c2.reset();  // one leaves: room for another
  std::this_thread::sleep_for(200ms);
  auto c5 = make_tcp_store("127.0.0.1", server->port(), false, 2s);
  EXPECT_TRUE(c5->check("a"));
}

// --- The file store alone.

TEST(FileStore, TheLastUserDeletesTheFileSoTheNextJobStartsClean) {
  TempDir d;
  const std::string path = d.file("job");
  {
    auto a = make_file_store(path), b = make_file_store(path);
    a->set("tcp/0", "10.0.0.1:5000");
    EXPECT_EQ(b->get_string("tcp/0", 1s), "10.0.0.1:5000");
    a.reset();
    struct stat st {};
    EXPECT_EQ(stat(path.c_str(), &st), 0);  // b still uses it
  }
  struct stat st {};
  EXPECT_NE(stat(path.c_str(), &st), 0);
  auto next = make_file_store(path);
  EXPECT_FALSE(next->check("tcp/0"));
}

TEST(FileStore, UnreachablePathIsAClearError) {
  const std::string e = error_of([] { make_file_store("/nonexistent-dir/for/sure/store"); });
  EXPECT_EQ(has(e, "file store /nonexistent-dir/for/sure/store: cannot open it"), "");
}

// F23: a store file is only trusted when no one else can have written it: a
// link at the path (another user pointing it at a file of ours), a file others
// may write (pre-created with mode 0666 to plant records), or one another user
// owns are refused with what is wrong and what to do, and left as they were.
std::string contents(const std::string& path) {
  std::string s;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char b[256];
    for (size_t n; (n = std::fread(b, 1, sizeof b, f)) > 0;) s.append(b, n);
    std::fclose(f);
  }
  return s;
}

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  ASSERT_EQ(chmod(path.c_str(), mode), 0);  // past the umask
}

TEST(FileStore, ALinkAtThePathIsRefused) {
  TempDir d;
  const std::string victim = d.file("victim"), path = d.file("job");
  write_file(victim, "precious", 0600);
  ASSERT_EQ(symlink(victim.c_str(), path.c_str()), 0);
  const std::string e = error_of([&] { make_file_store(path); });
  EXPECT_EQ(has(e, "file store " + path + ": "), "");
  EXPECT_EQ(has(e, "symbolic link"), "");
  EXPECT_EQ(has(e, "private directory"), "");
  EXPECT_EQ(contents(victim), "precious");
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link is left for its owner to see";
}

TEST(FileStore, AFileOthersCanWriteIsRefused) {
  TempDir d;
  for (const mode_t mode : {mode_t(0666), mode_t(0620), mode_t(0602)}) {
    const std::string path = d.file("job" + std::to_string(mode));
    write_file(path, "", mode);
    const std::string e = error_of([&] { make_file_store(path); });
    EXPECT_EQ(has(e, "file store " + path + ": "), "") << std::oct << mode;
    EXPECT_EQ(has(e, "writable by"), "") << std::oct << mode;
    EXPECT_EQ(has(e, "private directory"), "") << std::oct << mode;
    EXPECT_EQ(contents(path), "") << "nothing written to a refused file";
  }
}

TEST(FileStore, AFileAnotherUserOwnsIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "chown to another user needs root";
  TempDir d;
  const std::string path = d.file("job");
  write_file(path, "", 0600);
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  const std::string e = error_of([&] { make_file_store(path); });
  EXPECT_EQ(has(e, "file store " + path + ": "), "");
  EXPECT_EQ(has(e, "owned by uid 65534"), "");
  EXPECT_EQ(contents(path), "");
}

TEST(FileStore, ANewFileIsPrivateAndAnOwnPrivateFileIsUsed) {
  TempDir d;
  const mode_t old = umask(0);  // the store's own mode, not the umask's
  const std::string path = d.file("job");
  {
    auto s = make_file_store(path);
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
  }
  umask(old);
  const std::string mine = d.file("mine");
  write_file(mine, "", 0640);  // readable by the group, written by us alone: fine
  auto s = make_file_store(mine);
  s->set("k", "v");
  EXPECT_EQ(s->get_string("k", 1s), "v");
}

// --- The callback store alone.

TEST(CallbackStore, MissingFunctionsAndThrowingOnesAreStoreErrors) {
  EXPECT_EQ(has(error_of([] { CallbackStore s({}); }), "no set or get function"), "");
  Board board;
  StoreCallbacks cb = board.callbacks();
  cb.add = nullptr;
  CallbackStore s(cb);
  EXPECT_EQ(has(error_of([&] { s.add("n", 1); }), "gave no add function"), "");
  s.set("k", "v");
  EXPECT_TRUE(s.check("k"));  // through get(key, 0)
  EXPECT_FALSE(s.check("other"));
  StoreCallbacks bad = board.callbacks();
  bad.set = [](std::string_view, std::span<const uint8_t>) { throw std::runtime_error("MPI says no"); };
  CallbackStore t(bad);
  EXPECT_EQ(has(error_of([&] { t.set("key1", "x"); }), "the program's set of key 'key1' failed: MPI says no"), "");
}

// --- URLs and the environment.

TEST(StoreFromUrl, BadUrlsSayWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "no scheme"},
      {"localhost:29500", "no scheme"},
      {"http://host:80", "unknown scheme 'http'"},
      {"tcp://host", "no port"},
      {"tcp://:29500", "no host"},
      {"tcp://host:0", "port '0' is not a number 1..65535"},
      {"tcp://host:99999", "port '99999'"},
      {"tcp://host:12ab", "port '12ab'"},
      {"tcp://host:29500/x", "a path after host:port"},
      {"tcp://[::1]:29500", "IPv6"},
      {"file://relative/path", "not absolute"},
      {"file://", "not absolute"},
      {"file:///tmp/", "names a directory"},
  };
  for (const auto& [url, why] : cases) {
    const std::string e = error_of([&] { store_from_url(url, 1, 1s); });
    EXPECT_EQ(has(e, std::string("store URL '") + url + "'"), "");
    EXPECT_EQ(has(e, why), "") << url;
    EXPECT_EQ(has(e, "tcp://host:port"), "") << url;  // what one looks like
  }
  EXPECT_EQ(has(error_of([] { store_from_url("file:///tmp/x", -1); }), "negative"), "");
}

TEST(StoreFromUrl, TcpRankZeroServesAndFileWorks) {
  auto probe = make_tcp_store("127.0.0.1", 0, true, 1s);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(probe->port());
  probe.reset();
  auto r0 = store_from_url(url, 0, 5s);
  auto r1 = store_from_url(url, 1, 5s);
  r1->set("from1", "a");
  EXPECT_EQ(r0->get_string("from1", 1s), "a");
  EXPECT_EQ(tcp_url_host(url), "127.0.0.1");
  TempDir d;
  auto f0 = store_from_url("file://" + d.file("f"), 0), f1 = store_from_url("file://" + d.file("f"), 1);
  f0->set("k", "v");
  EXPECT_EQ(f1->get_string("k", 1s), "v");
}

struct EnvGuard {  // the test's changes to the environment, undone
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const std::string& k, const char* v) {
    const char* old = std::getenv(k.c_str());
    saved.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
    v ? setenv(k.c_str(), v, 1) : unsetenv(k.c_str());
  }
  ~EnvGuard() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it)
      it->second ? setenv(it->first.c_str(), it->second->c_str(), 1) : unsetenv(it->first.c_str());
  }
};

TEST(StoreFromEnv, PrismStoreThenMasterAddrAndPort) {
  EnvGuard env;
  env.set("PRISM_STORE", nullptr);
  env.set("MASTER_ADDR", nullptr);
  env.set("MASTER_PORT", nullptr);
  EXPECT_EQ(has(error_of([] { store_from_env(0); }), "set PRISM_STORE to"), "");
  env.set("MASTER_ADDR", "127.0.0.1");
  EXPECT_EQ(has(error_of([] { store_from_env(0); }), "MASTER_ADDR but no MASTER_PORT"), "");

  auto probe = make_tcp_store("127.0.0.1", 0, true, 1s);
  const std::string port = std::to_string(probe->port());
  probe.reset();
  env.set("MASTER_PORT", port.c_str());
  EXPECT_EQ(store_url_from_env(), "tcp://127.0.0.1:" + port);
  auto r0 = store_from_env(0, 5s), r1 = store_from_env(1, 5s);
  r0->set("x", "y");
  EXPECT_EQ(r1->get_string("x", 1s), "y");

  TempDir d;
  const std::string url = "file://" + d.file("env");
  env.set("PRISM_STORE", url.c_str());  // before MASTER_*
  EXPECT_EQ(store_url_from_env(), url);
  auto f = store_from_env(3);
  EXPECT_NE(dynamic_cast<FileStore*>(f.get()), nullptr);
}

}  // namespace
}  // namespace prism::rdv
