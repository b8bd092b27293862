// libprism's protocol machinery against a fake switch written here from
// docs/PROTOCOL.md, on loopback: R ranks (threads, each its own
// Communicator bound to 127.0.0.(2+r)) and a switch thread that sums int32
// contributions itself (int64 adds: independent of PRISM's arithmetic),
// keeps a contributor bitmap per chunk, retains results for retransmissions,
// and impairs the traffic on purpose: loss both ways, duplication,
// reordering, NACKs of each kind, silence. With S shards it listens on S
// UDP ports, answers from the first, and checks that every CONTRIB and JOIN
// came to the port the steering rule of docs/PROTOCOL.md names (computed
// here, not by PRISM's code). The real switch and real
// arithmetic are tested end to end in tests/py/test_rank.py.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "prism.h"
#include "prism.hpp"

namespace {

constexpr uint32_t kJob = 7;
std::atomic<uint16_t> next_port{31000};

uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
void put16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); }

struct Impair {
  int loss_in = 0, loss_out = 0, dup = 0, reorder = 0;  // percent
  int nack_first = 0;                                   // NACK reason for each chunk's first CONTRIB (0: none)
  int nack_op = -1, nack_reason = 0;                    // NACK every CONTRIB of this op with this reason
  int abandon_op = -1;                                  // answer this op with OP_ABANDONED once R-1 arrived
  bool silent = false;                                  // never answer
  int forge_result_op = -1;  // this op: a RESULT one off in each element, from the switch's address under another
                             // sender id, reaches each rank before the real one
  int forge_nack_op = -1;    // this op: a NACK from the switch's address under another sender id for each chunk
};

// The fake switch: UDP sockets on 127.0.0.1, one per shard at ports
// port .. port + shards - 1 (it answers from the first), members at 127.0.0.(2+r).
class FakeSwitch {
 public:
  FakeSwitch(uint16_t group, Impair im, uint32_t shards = 1)
      : group_(group), im_(im), port_(next_port.fetch_add(uint16_t(shards))), per_shard_(shards) {
    for (uint32_t k = 0; k < shards; ++k) {
      const int fd = socket(AF_INET, SOCK_DGRAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(uint16_t(port_ + k));
      a.sin_addr.s_addr = htonl(0x7F000001);
      const int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("bind fake switch");
      fds_.push_back(fd);
    }
    fd_ = fds_[0];
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeSwitch() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_) close(fd);
  }
  uint16_t port() const { return port_; }
  uint32_t shards() const { return uint32_t(fds_.size()); }
  uint64_t missteered() const { return missteered_; }                      // CONTRIBs and JOINs at another shard's port
  uint64_t arrived_at(uint32_t shard) const { return per_shard_[shard]; }  // datagrams received at a shard's port
  uint64_t duplicates_dropped() const { return dups_; }
  uint64_t contribs() const { return contribs_; }

 private:
  struct Chunk {
    std::vector<int64_t> sum;
    std::set<uint16_t> seen;
    std::vector<uint8_t> result;  // the RESULT datagram once complete
  };

  void send_to(uint16_t rank, const std::vector<uint8_t>& d) {
    if (im_.silent || pct(im_.loss_out)) return;
    const int copies = pct(im_.dup) ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
      if (pct(im_.reorder)) {
        held_.push_back({rank, d});
        continue;
      }
      raw_send(rank, d);
    }
  }
  void raw_send(uint16_t rank, const std::vector<uint8_t>& d) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(rank_port(rank));
    a.sin_addr.s_addr = htonl(0x7F000002 + rank);
    sendto(fd_, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  bool pct(int p) { return p > 0 && int(rng_() % 100) < p; }
  uint16_t rank_port(uint16_t r) const { return uint16_t(port_ + 1000 + r); }

  std::vector<uint8_t> answer(const uint8_t* h, uint8_t kind, uint8_t status, size_t body) {
    std::vector<uint8_t> d(h, h + 32);
    d[3] = kind;
    put16(&d[16], 1);  // switch id
    d[31] = status;
    d[30] &= uint8_t(~1);
    if (kind == 4) {  // NACK: terms 0, count 0
      put16(&d[20], 0);
      put16(&d[22], 0);
    }
    d.resize(32 + body);
    return d;
  }

  // JOIN (kind 5): the session completes when every rank has joined; a rank
  // joining again with another nonce starts a new one. JOINED (kind 6)
  // answers the asking rank: op = its nonce, chunk = the first op number,
  // terms = ranks joined, status bit0 COMPLETE, body = the joined bitmap.
  void on_join(const uint8_t* p) {
    if (im_.silent) return;
    const uint32_t nonce = be32(p + 8);
    const uint16_t rank = be16(p + 16);
    auto it = nonces_.find(rank);
    if (it != nonces_.end() && it->second != nonce) {
      nonces_.clear();
      ++sessions_;
    }
    nonces_[rank] = nonce;
    const bool complete = nonces_.size() == group_;
    std::vector<uint8_t> d(p, p + 32);
    d[3] = 6;
    const uint32_t first = kFirstOp * (sessions_ + 1);
    d[12] = uint8_t(first >> 24), d[13] = uint8_t(first >> 16), d[14] = uint8_t(first >> 8), d[15] = uint8_t(first);
    put16(&d[20], uint16_t(nonces_.size()));
    d[31] = complete ? 1 : 0;
    d.resize(32 + (group_ + 7) / 8);
    for (const auto& [r, n] : nonces_) d[32 + r / 8] |= uint8_t(1u << (r % 8));
    ++joins_;
    raw_send(rank, d);
  }

  // QUERY (kind 11, docs/PROTOCOL.md, Queries): the RESULT again when the
  // chunk is complete; else STATUS (kind 12), status 1 HELD when the
  // asker's contribution is in, 0 MISSING when not, terms = contributions in,
  // body = the bitmap of ranks still lacking.
  void on_query(const uint8_t* p) {
    ++queries_;
    const uint16_t sender = be16(p + 16);
    const auto it = chunks_.find({be32(p + 8), be32(p + 12)});
    if (it != chunks_.end() && !it->second.result.empty()) return send_to(sender, it->second.result);
    const bool held = it != chunks_.end() && it->second.seen.count(sender);
    std::vector<uint8_t> d = answer(p, 12, held ? 1 : 0, it == chunks_.end() ? 0 : (group_ + 7) / 8);
    put16(&d[20], uint16_t(it == chunks_.end() ? 0 : it->second.seen.size()));
    if (it != chunks_.end())
      for (uint16_t r = 0; r < group_; ++r)
        if (!it->second.seen.count(r)) d[32 + r / 8] |= uint8_t(1u << (r % 8));
    send_to(sender, d);
  }

  void on_contrib(const uint8_t* p, size_t n) {
    if (n >= 32 && be16(p) == 0x5052 && p[3] == 5) return on_join(p);
    if (n == 32 && be16(p) == 0x5052 && p[3] == 11) return on_query(p);
    if (n < 32 || be16(p) != 0x5052 || p[3] != 1) return;
    const uint32_t op = be32(p + 8), chunk = be32(p + 12);
    const uint16_t sender = be16(p + 16), count = be16(p + 22);
    if (n != 32 + size_t(count) * 4) return;
    ++contribs_;
    if (int(op) == im_.nack_op) return send_to(sender, answer(p, 4, uint8_t(im_.nack_reason), 0));
    const auto key = std::make_pair(op, chunk);
    if (int(op) == im_.forge_nack_op && !forged_.count({key, sender})) {  // from the switch's address, not its id
      forged_.insert({key, sender});
      std::vector<uint8_t> d = answer(p, 4, 4, 0);  // DESCRIPTOR_MISMATCH
      put16(&d[16], kForger);
      send_to(sender, d);
    }
    if (im_.nack_first && !nacked_.count({key, sender})) {
      nacked_.insert({key, sender});
      return send_to(sender, answer(p, 4, uint8_t(im_.nack_first), 0));
    }
    Chunk& c = chunks_[key];
    if (!c.result.empty()) {  // complete: a retransmission gets the result again
      if (p[30] & 1)
        send_to(sender, c.result);
      else
        ++dups_;
      return;
    }
    if (c.seen.count(sender)) {
      ++dups_;
      return;
    }
    c.seen.insert(sender);
    if (c.sum.empty()) c.sum.assign(count, 0);
    if (c.sum.size() != count) return;
    for (size_t i = 0; i < count; ++i) {
      int32_t v;
      std::memcpy(&v, p + 32 + 4 * i, 4);
      c.sum[i] += v;
    }
    if (int(op) == im_.abandon_op && c.seen.size() == size_t(group_ - 1)) {
      std::vector<uint8_t> d = answer(p, 4, 8, (group_ + 7) / 8);
      put16(&d[20], uint16_t(c.seen.size()));
      for (uint16_t r = 0; r < group_; ++r)
        if (!c.seen.count(r)) d[32 + r / 8] |= uint8_t(1u << (r % 8));
      for (uint16_t r : c.seen) send_to(r, d);
      return;
    }
    if (c.seen.size() < group_) return;
    c.result.assign(p, p + 32 + 4 * size_t(count));
    c.result[3] = 3;
    put16(&c.result[16], 1);
    put16(&c.result[20], group_);
    c.result[27] = 2;
    c.result[30] &= uint8_t(~1);
    for (size_t i = 0; i < count; ++i) {
      const int32_t v = int32_t(c.sum[i]);
      std::memcpy(&c.result[32 + 4 * i], &v, 4);
    }
    if (int(op) == im_.forge_result_op) {  // the same RESULT but one off in each element, first
      std::vector<uint8_t> forged = c.result;
      put16(&forged[16], kForger);
      for (size_t i = 0; i < count; ++i) {
        const int32_t v = int32_t(c.sum[i] + 1);
        std::memcpy(&forged[32 + 4 * i], &v, 4);
      }
      for (uint16_t r = 0; r < group_; ++r) send_to(r, forged);
    }
    for (uint16_t r = 0; r < group_; ++r) send_to(r, c.result);
  }

  // The steering rule (docs/PROTOCOL.md, Steering): a CONTRIB's shard is
  // (job + op + chunk) mod S, summed without wrapping; a JOIN's is job mod S.
  void check_port(const uint8_t* p, size_t n, uint32_t at) {
    ++per_shard_[at];
    if (n < 32 || be16(p) != 0x5052 || (p[3] != 1 && p[3] != 5 && p[3] != 11)) return;
    const uint64_t sum = p[3] == 5 ? uint64_t(be32(p + 4)) : uint64_t(be32(p + 4)) + be32(p + 8) + be32(p + 12);
    if (sum % fds_.size() != at) ++missteered_;
  }

  void loop() {
    std::vector<uint8_t> buf(9216);
    std::vector<pollfd> pf(fds_.size());
    while (!stop_) {
      for (size_t k = 0; k < fds_.size(); ++k) pf[k] = {fds_[k], POLLIN, 0};
      if (poll(pf.data(), nfds_t(pf.size()), 2) > 0) {
        for (bool any = true; any;) {  // every port's datagrams, one from each in turn, until all are empty
          any = false;
          for (size_t k = 0; k < fds_.size(); ++k) {
            const ssize_t n = recv(fds_[k], buf.data(), buf.size(), MSG_DONTWAIT);
            if (n <= 0) continue;
            any = true;
            check_port(buf.data(), size_t(n), uint32_t(k));
            if (pct(im_.loss_in)) continue;
            const int copies = pct(im_.dup) ? 2 : 1;
            for (int i = 0; i < copies; ++i) on_contrib(buf.data(), size_t(n));
          }
        }
      }
      // Held datagrams go out late, in a shuffled order.
      if (!held_.empty() && rng_() % 4 == 0) {
        std::shuffle(held_.begin(), held_.end(), rng_);
        for (auto& [r, d] : held_) raw_send(r, d);
        held_.clear();
      }
    }
  }

  uint16_t group_;
  Impair im_;
  uint16_t port_;
  std::vector<int> fds_;  // one per shard port
  int fd_ = -1;           // the first: where answers come from
  std::vector<std::atomic<uint64_t>> per_shard_;
  std::atomic<uint64_t> missteered_{0};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mt19937 rng_{12345};
  std::map<std::pair<uint32_t, uint32_t>, Chunk> chunks_;
  std::set<std::pair<std::pair<uint32_t, uint32_t>, uint16_t>> nacked_, forged_;
  static constexpr uint16_t kForger = 2;  // the sender id of forged answers (the switch's is 1)
  std::vector<std::pair<uint16_t, std::vector<uint8_t>>> held_;
  std::atomic<uint64_t> dups_{0}, contribs_{0}, joins_{0}, queries_{0};
  std::map<uint16_t, uint32_t> nonces_;
  uint32_t sessions_ = 0;

 public:
  static constexpr uint32_t kFirstOp = 1000;  // the first op number of session k is 1000 * (k + 1)
  uint64_t joins() const { return joins_; }
  uint64_t queries() const { return queries_; }

 public:
  uint32_t job = kJob;  // the job the ranks of endpoints() belong to (the switch echoes any)

  prism::Endpoints endpoints(uint16_t rank) const {
    prism::Endpoints e;
    e.job = job;
    e.rank = rank;
    e.group = group_;
    char ip[32];
    std::snprintf(ip, sizeof ip, "127.0.0.%u", 2 + rank);
    e.local_ip = ip;
    e.local_port = rank_port(rank);
    e.switch_ip = "127.0.0.1";
    e.switch_port = port_;
    e.switch_shards = shards();
    return e;
  }
};

int32_t input(uint16_t rank, size_t i, uint32_t op) {
  return int32_t((i * 2654435761u + rank * 40503u + op) % 200001) - 100000;
}

prism::Tuning fast() {
  prism::Tuning t;
  t.rto_initial_ms = 5;
  t.timeout_ms = 5000;
  t.chunk_elems = 100;
  return t;
}

// R ranks each run `ops` allreduces of `count` int32 (non-blocking, `split`
// ops in flight); every rank checks every element against the sum computed here.
void run_ranks(FakeSwitch& sw, uint16_t R, size_t count, uint32_t ops, uint32_t split, prism::Tuning t,
               std::vector<prism::Stats>* stats = nullptr, int late_rank = -1, int late_ms = 0) {
  std::vector<std::thread> th;
  std::vector<std::string> errors(R);
  std::vector<prism::Stats> st(R);
  for (uint16_t r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      try {
        prism::Communicator c(sw.endpoints(r), t);
        for (uint32_t op = 0; op < ops; op += split) {
          if (r == late_rank) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));  // before each op
          std::vector<std::vector<int32_t>> in(split), out(split);
          std::vector<prism::Request> req;
          for (uint32_t s = 0; s < split; ++s) {
            in[s].resize(count);
            out[s].assign(count, 0x7EADBEEF);
            for (size_t i = 0; i < count; ++i) in[s][i] = input(r, i, op + s);
            prism::OpOptions o;
            req.push_back(c.iallreduce(in[s].data(), out[s].data(), count, prism::Format::INT32, o));
          }
          for (uint32_t s = split; s-- > 0;) {  // completed in reverse order
            c.wait(req[s]);
            for (size_t i = 0; i < count; ++i) {
              int64_t want = 0;
              for (uint16_t k = 0; k < R; ++k) want += input(k, i, op + s);
              if (out[s][i] != int32_t(want)) {
                errors[r] = "op " + std::to_string(op + s) + " element " + std::to_string(i) + ": got " +
                            std::to_string(out[s][i]) + ", want " + std::to_string(want);
                return;
              }
            }
          }
        }
        st[r] = c.stats();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& x : th) x.join();
  for (uint16_t r = 0; r < R; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  if (stats) *stats = st;
}

TEST(Rank, ExactSumsWithoutImpairment) {
  for (uint16_t R : {1, 2, 4, 8}) {
    FakeSwitch sw(R, {});
    std::vector<prism::Stats> st;
    run_ranks(sw, R, 1000, 3, 1, fast(), &st);
    for (const auto& s : st) {
      EXPECT_EQ(s.chunks, 30u);  // 1000 elements in chunks of 100, 3 ops
      EXPECT_EQ(s.results, 30u);
      EXPECT_EQ(s.ops, 3u);
    }
  }
}

TEST(Rank, ALateRankCostsNoRetransmissionTheOthersAskAndWait) {
  // Rank 2 starts every op 60 ms after the others (RTO 5 ms): the others'
  // timers run out many times over, but a QUERY finds the switch holding
  // their contributions (STATUS HELD): nothing is sent twice.
  FakeSwitch sw(3, {});
  std::vector<prism::Stats> st;
  run_ranks(sw, 3, 2000, 3, 1, fast(), &st, 2, 60);
  for (uint16_t r = 0; r < 3; ++r) {
    EXPECT_EQ(st[r].retransmits, 0u) << "rank " << r;
    EXPECT_EQ(st[r].results, 60u) << "rank " << r;
    EXPECT_EQ(st[r].status_missing, 0u) << "rank " << r;
    if (r != 2) EXPECT_GT(st[r].status_held, 0u) << "rank " << r << " asked instead of re-sending";
  }
  EXPECT_EQ(sw.duplicates_dropped(), 0u);
}

TEST(Rank, LossBothWaysDuplicationAndReordering) {
  Impair im;
  im.loss_in = 10;
  im.loss_out = 10;
  im.dup = 10;
  im.reorder = 20;
  FakeSwitch sw(4, im);
  std::vector<prism::Stats> st;
  run_ranks(sw, 4, 5000, 4, 2, fast(), &st);
  uint64_t retx = 0;
  for (const auto& s : st) {
    retx += s.retransmits;
    EXPECT_EQ(s.results, 200u);  // every chunk's RESULT taken once: 5000/100 × 4 ops
  }
  EXPECT_GT(retx, 0u);
  EXPECT_GT(sw.duplicates_dropped(), 0u);
  EXPECT_GT(sw.queries(), 0u);
}

// Every CONTRIB (retransmissions included) and every JOIN goes to the port
// of its shard, which the fake switch checks by the rule; answers come from
// the first port and are taken. A job id near 2^32 shows the sum does not wrap.
TEST(Rank, ChunksAndJoinsGoToTheirShardsPort) {
  Impair im;
  im.loss_in = 10;
  im.loss_out = 10;
  for (uint32_t S : {1u, 2u, 3u, 5u})
    for (uint32_t job : {kJob, 0xFFFFFFF0u}) {
      FakeSwitch sw(3, im, S);
      sw.job = job;
      std::vector<prism::Stats> st;
      run_ranks(sw, 3, 1000, 4, 2, fast(), &st);
      uint64_t retx = 0;
      for (const auto& s : st) {
        EXPECT_EQ(s.results, 40u) << "S=" << S;
        EXPECT_GT(s.joins_sent, 0u);
        retx += s.retransmits;
      }
      EXPECT_GT(retx, 0u);
      EXPECT_EQ(sw.missteered(), 0u) << "S=" << S << " job=" << job;
      for (uint32_t k = 0; k < S; ++k) EXPECT_GT(sw.arrived_at(k), 0u) << "shard " << k << " of " << S;
    }
}

TEST(Rank, ShardCountsOutsideTheSwitchsRangeAreRefused) {
  FakeSwitch sw(1, {});
  prism::Endpoints e = sw.endpoints(0);
  auto msg = [&] {
    try {
      prism::Communicator c(e, fast());
    } catch (const prism::Error& x) {
      EXPECT_EQ(x.code(), prism::Errc::INVALID_ARGUMENT);
      return std::string(x.what());
    }
    return std::string("no error");
  };
  e.switch_shards = 0;
  EXPECT_NE(msg().find("switch_shards 0: give the switch's reducers.shards (1..64)"), std::string::npos);
  e.switch_shards = 65;
  EXPECT_NE(msg().find("switch_shards 65"), std::string::npos);
  e.switch_shards = 2;
  e.switch_port = 65535;
  EXPECT_NE(msg().find("shard ports 65535 + 0..1 run past 65535"), std::string::npos) << msg();
}

TEST(Rank, ManyWindowsInFlight) {
  FakeSwitch sw(2, {});
  prism::Tuning t = fast();
  t.window = 8;
  std::vector<prism::Stats> st;
  run_ranks(sw, 2, 20000, 2, 2, t, &st);  // 200 chunks per op through a window of 8
  EXPECT_EQ(st[0].results, 400u);
}

TEST(Rank, NoFreeSlotIsRetriedNotAnError) {
  Impair im;
  im.nack_first = 6;  // NO_FREE_SLOT for every chunk's first send
  FakeSwitch sw(2, im);
  std::vector<prism::Stats> st;
  run_ranks(sw, 2, 500, 1, 1, fast(), &st);
  EXPECT_EQ(st[0].no_slot_retries, 5u);
  EXPECT_EQ(st[0].nack_by_reason[6], 5u);
}

// F4 (rank side): RESULTs and NACKs carry the switch's id as sender
// (docs/PROTOCOL.md); once a rank has taken a RESULT from its switch, an
// answer from the switch's address naming another sender is not the
// switch's: a wrong RESULT for the right job, op, chunk and descriptor is
// not taken (the real one that follows is), a NACK fails nothing. The
// forgeries come in the second op: the first one's RESULTs named the switch.
TEST(Rank, AResultNamingAnotherSenderIsNotTaken) {
  Impair im;
  im.forge_result_op = int(FakeSwitch::kFirstOp) + 1;
  FakeSwitch sw(2, im);
  std::vector<prism::Stats> st;
  run_ranks(sw, 2, 300, 3, 1, fast(), &st);  // every element checked against the real sum
  for (uint16_t r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].results, 9u) << "rank " << r;  // 3 chunks × 3 ops, each taken once
    // (A real RESULT may also come twice, when a loaded machine lets a retransmission timer fire
    // first: duplicate_results is timing's, not the forgery's.)
    EXPECT_GE(st[r].stray, 3u) << "rank " << r << ": the forged RESULTs count as stray";
  }
}

TEST(Rank, ANackNamingAnotherSenderFailsNothing) {
  Impair im;
  im.forge_nack_op = int(FakeSwitch::kFirstOp) + 1;
  FakeSwitch sw(2, im);
  std::vector<prism::Stats> st;
  run_ranks(sw, 2, 300, 3, 1, fast(), &st);
  for (uint16_t r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].results, 9u) << "rank " << r;
    EXPECT_EQ(st[r].nacks, 0u) << "rank " << r << ": a NACK not from the switch is no NACK";
    EXPECT_GE(st[r].stray, 3u) << "rank " << r;
  }
}

// Runs one rank-0 allreduce (R ranks, the others run too) and returns rank 0's error.
std::string error_of(FakeSwitch& sw, uint16_t R, prism::Tuning t, prism::Errc* code = nullptr, int* reason = nullptr) {
  std::vector<std::thread> th;
  std::vector<std::string> err(R);
  std::vector<prism::Errc> codes(R);
  std::vector<int> reasons(R);
  for (uint16_t r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      try {
        prism::Communicator c(sw.endpoints(r), t);
        std::vector<int32_t> in(300, 1), out(300);
        c.allreduce(in.data(), out.data(), in.size(), prism::Format::INT32);
      } catch (const prism::Error& e) {
        err[r] = e.what();
        codes[r] = e.code();
        reasons[r] = e.nack_reason();
      }
    });
  for (auto& x : th) x.join();
  if (code) *code = codes[0];
  if (reason) *reason = reasons[0];
  return err[0];
}

TEST(Rank, RefusalNamesOpChunkReasonAndWhatToDo) {
  Impair im;
  im.nack_op = int(FakeSwitch::kFirstOp);
  im.nack_reason = 4;  // DESCRIPTOR_MISMATCH
  FakeSwitch sw(2, im);
  prism::Errc code{};
  int reason = 0;
  const std::string e = error_of(sw, 2, fast(), &code, &reason);
  EXPECT_EQ(code, prism::Errc::REFUSED);
  EXPECT_EQ(reason, 4);
  EXPECT_NE(e.find("allreduce op 1000 (job 7, rank 0)"), std::string::npos) << e;
  EXPECT_NE(e.find("chunk "), std::string::npos) << e;
  EXPECT_NE(e.find("descriptor_mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("send every chunk of an op with the same"), std::string::npos) << e;
}

TEST(Rank, AbandonedOpNamesTheMissingRank) {
  Impair im;
  im.abandon_op = int(FakeSwitch::kFirstOp);
  FakeSwitch sw(3, im);
  // Rank 2 never runs: ranks 0 and 1 contribute, the switch abandons naming rank 2.
  // (They do not join: a session without rank 2 would never complete.)
  prism::Tuning t = fast();
  t.join = false;
  t.first_op = FakeSwitch::kFirstOp;
  std::vector<std::thread> th;
  std::vector<std::string> err(2);
  for (uint16_t r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      try {
        prism::Communicator c(sw.endpoints(r), t);
        std::vector<int32_t> in(50, 1), out(50);
        c.allreduce(in.data(), out.data(), in.size(), prism::Format::INT32);
      } catch (const prism::Error& e) {
        err[r] = e.what();
        EXPECT_EQ(e.code(), prism::Errc::ABANDONED);
      }
    });
  for (auto& x : th) x.join();
  for (const auto& e : err) {
    EXPECT_NE(e.find("abandoned"), std::string::npos) << e;
    EXPECT_NE(e.find("2 of 3 contributions arrived; missing rank 2"), std::string::npos) << e;
  }
}

TEST(Rank, SilenceTimesOutNamingTheChunks) {
  Impair im;
  im.silent = true;
  FakeSwitch sw(1, im);
  prism::Tuning t = fast();
  t.timeout_ms = 300;
  t.join = false;  // a switch that never answers would fail the join first (tested below)
  prism::Errc code{};
  const std::string e = error_of(sw, 1, t, &code);
  EXPECT_EQ(code, prism::Errc::TIMEOUT);
  EXPECT_NE(e.find("no RESULT for 3 of 3 chunks (0, 1, 2) in 300 ms"), std::string::npos) << e;
  EXPECT_NE(e.find("never answered"), std::string::npos) << e;
}

TEST(Rank, JoiningGivesTheSessionsFirstOpAndWaitsForEveryRank) {
  FakeSwitch sw(3, {});
  std::vector<std::thread> th;
  std::vector<uint32_t> first(3);
  for (uint16_t r = 0; r < 3; ++r)
    th.emplace_back([&, r] {
      if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a late rank: the others wait
      prism::Communicator c(sw.endpoints(r), fast());
      first[r] = c.next_op();
      std::vector<int32_t> in(10, 1), out(10);
      c.allreduce(in.data(), out.data(), in.size(), prism::Format::INT32);
      EXPECT_EQ(out[0], 3);
    });
  for (auto& x : th) x.join();
  for (uint32_t f : first) EXPECT_EQ(f, FakeSwitch::kFirstOp);
  // A restarted job (new nonces) is a new session: its first op is the switch's next.
  prism::Tuning t = fast();
  th.clear();
  for (uint16_t r = 0; r < 3; ++r)
    th.emplace_back([&, r] { first[r] = prism::Communicator(sw.endpoints(r), t).next_op(); });
  for (auto& x : th) x.join();
  for (uint32_t f : first) EXPECT_EQ(f, 2 * FakeSwitch::kFirstOp);
}

TEST(Rank, AJoinThatNeverCompletesNamesTheMissingRanks) {
  FakeSwitch sw(4, {});
  prism::Tuning t = fast();
  t.join_timeout_ms = 300;
  std::vector<std::thread> th;
  std::vector<std::string> err(2);
  for (uint16_t r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      try {
        prism::Communicator c(sw.endpoints(r), t);
      } catch (const prism::Error& e) {
        err[r] = e.what();
        EXPECT_EQ(e.code(), prism::Errc::TIMEOUT);
      }
    });
  for (auto& x : th) x.join();
  for (const auto& e : err) EXPECT_NE(e.find("2 of 4 joined; missing ranks 2, 3"), std::string::npos) << e;
  FakeSwitch silent(1, Impair{.silent = true});
  try {
    prism::Communicator c(silent.endpoints(0), t);
    ADD_FAILURE() << "joined a switch that never answers";
  } catch (const prism::Error& e) {
    EXPECT_NE(std::string(e.what()).find("never answered JOIN in 300 ms"), std::string::npos) << e.what();
  }
}

TEST(Rank, BadArgumentsAreRefusedBeforeAnythingIsSent) {
  FakeSwitch sw(1, {});
  prism::Communicator c(sw.endpoints(0), fast());
  std::vector<float> a(10), b(10);
  auto msg = [&](auto fn) {
    try {
      fn();
    } catch (const prism::Error& e) {
      EXPECT_EQ(e.code(), prism::Errc::INVALID_ARGUMENT);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  prism::OpOptions f16;
  f16.out = prism::Format::FP16;
  f16.out_given = true;
  EXPECT_NE(msg([&] { c.allreduce(a.data(), a.data() + 1, 8, prism::Format::FP32, f16); }).find("overlap"),
            std::string::npos);
  EXPECT_NE(msg([&] { c.allreduce(a.data(), nullptr, 8, prism::Format::FP32); }).find("output buffer is null"),
            std::string::npos);
  EXPECT_NE(msg([&] { c.reduce(a.data(), b.data(), 8, prism::Format::FP32, 5); }).find("not a rank"),
            std::string::npos);
  prism::OpOptions int_out;
  int_out.out = prism::Format::INT32;
  int_out.out_given = true;
  EXPECT_NE(msg([&] { c.allreduce(a.data(), b.data(), 8, prism::Format::FP32, int_out); }), "no error");
  EXPECT_EQ(c.stats().packets_sent, 0u);
  EXPECT_EQ(c.next_op(), FakeSwitch::kFirstOp);  // nothing consumed an op number
  prism::Endpoints e = sw.endpoints(0);
  e.rank = 1;
  EXPECT_NE(msg([&] { prism::Communicator bad(e); }).find("not below the group size"), std::string::npos);
  e = sw.endpoints(0);
  e.switch_ip = "10.0.0.300";
  EXPECT_NE(msg([&] { prism::Communicator bad(e); }).find("not an IPv4 address"), std::string::npos);
}

TEST(Rank, ReduceGivesTheRootTheSumAndOthersNothingToKeep) {
  FakeSwitch sw(2, {});
  std::vector<std::thread> th;
  std::vector<int32_t> root_out(100, 0);
  for (uint16_t r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      prism::Communicator c(sw.endpoints(r), fast());
      std::vector<int32_t> in(100, int32_t(r + 1));
      c.reduce(in.data(), r == 1 ? root_out.data() : nullptr, in.size(), prism::Format::INT32, 1);
    });
  for (auto& x : th) x.join();
  for (int32_t v : root_out) EXPECT_EQ(v, 3);
}

TEST(Rank, CApiRunsAnAllreduceAndReportsErrors) {
  FakeSwitch sw(1, {});
  const prism::Endpoints ep = sw.endpoints(0);
  prism_endpoints e{};
  e.job = kJob;
  e.rank = 0;
  e.group = 1;
  e.local_ip = ep.local_ip.c_str();
  e.local_port = ep.local_port;
  e.switch_ip = "127.0.0.1";
  e.switch_port = ep.switch_port;
  prism_tuning t{};
  t.chunk_elems = 64;
  prism_comm* c = nullptr;
  ASSERT_EQ(prism_comm_create(&e, &t, &c), PRISM_OK) << prism_last_error();
  std::vector<int32_t> in(200), out(200);
  for (int i = 0; i < 200; ++i) in[size_t(i)] = i - 77;
  prism_op_report rep{};
  ASSERT_EQ(prism_allreduce(c, in.data(), out.data(), in.size(), PRISM_INT32, nullptr, &rep), PRISM_OK)
      << prism_last_error();
  EXPECT_EQ(out, in);  // a group of one: the sum is the input
  EXPECT_EQ(rep.chunks, 4u);
  prism_request* req = nullptr;
  ASSERT_EQ(prism_iallreduce(c, in.data(), out.data(), in.size(), PRISM_INT32, nullptr, &req), PRISM_OK);
  ASSERT_EQ(prism_wait(&req, &rep), PRISM_OK) << prism_last_error();
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(rep.op, FakeSwitch::kFirstOp + 1);
  prism_stats s{};
  ASSERT_EQ(prism_comm_stats(c, &s), PRISM_OK);
  EXPECT_EQ(s.results, 8u);
  // The statistics by name, from the field table: the struct's values, every name once, then none.
  double v = -1;
  ASSERT_EQ(prism_comm_stat(c, "results", &v), PRISM_OK) << prism_last_error();
  EXPECT_EQ(v, 8.0);
  ASSERT_EQ(prism_comm_stat(c, "packets_sent", &v), PRISM_OK);
  EXPECT_EQ(v, double(s.packets_sent));
  EXPECT_EQ(prism_comm_stat(c, "bogus", &v), PRISM_EINVAL);
  EXPECT_NE(std::string(prism_last_error()).find("prism_stat_name"), std::string::npos);
  std::set<std::string> names;
  size_t i = 0;
  for (; prism_stat_name(i); ++i) names.insert(prism_stat_name(i));
  EXPECT_EQ(names.size(), i);
  EXPECT_TRUE(names.count("chunks") && names.count("rtt_srtt_us") && names.count("join_seconds"));
  EXPECT_EQ(prism_allreduce(c, in.data(), nullptr, in.size(), PRISM_INT32, nullptr, nullptr), PRISM_EINVAL);
  EXPECT_NE(std::string(prism_last_error()).find("output buffer is null"), std::string::npos);
  prism_comm_destroy(c);
  EXPECT_EQ(prism_comm_create(nullptr, nullptr, &c), PRISM_EINVAL);
  e.switch_shards = 65;
  EXPECT_EQ(prism_comm_create(&e, &t, &c), PRISM_EINVAL);
  EXPECT_NE(std::string(prism_last_error()).find("switch_shards 65"), std::string::npos) << prism_last_error();
}

TEST(Rank, CApiSteersByTheShardCountGiven) {
  FakeSwitch sw(1, {}, 4);
  const prism::Endpoints ep = sw.endpoints(0);
  prism_endpoints e{};
  e.job = kJob;
  e.group = 1;
  e.local_ip = ep.local_ip.c_str();
  e.local_port = ep.local_port;
  e.switch_ip = "127.0.0.1";
  e.switch_port = ep.switch_port;
  e.switch_shards = 4;
  prism_tuning t{};
  t.chunk_elems = 10;
  prism_comm* c = nullptr;
  ASSERT_EQ(prism_comm_create(&e, &t, &c), PRISM_OK) << prism_last_error();
  std::vector<int32_t> in(80, 5), out(80);
  ASSERT_EQ(prism_allreduce(c, in.data(), out.data(), in.size(), PRISM_INT32, nullptr, nullptr), PRISM_OK)
      << prism_last_error();
  EXPECT_EQ(out, in);
  prism_comm_destroy(c);
  EXPECT_EQ(sw.missteered(), 0u);
  for (uint32_t k = 0; k < 4; ++k) EXPECT_GE(sw.arrived_at(k), 2u) << "shard " << k;  // 8 chunks over 4 shards
}

}  // namespace
