// A stateful libFuzzer target of the switch's whole receive path: frames
// with clock advances go through parse -> ingress -> Reducer::on_packet (pools,
// sessions, slots, the result log) and Reducer::tick, at two switches at once:
// a root with declared jobs, two pools and a child, and a leaf below it. What
// they send each other waits in a queue the input delivers, drops or leaves.
//
// The input is a sequence of actions (switch_input.hpp): a frame from a table
// of sources (registered members, pool hosts, the child, the parent,
// strangers, a broadcast MAC, a spoof) with header fields from small ranges
// so that ops collide; a clock advance; a tick; a delivery; raw bytes; and a
// few macros (an honest allreduce, a pool job brought up or down).
//
// Beside the switches runs a model of what they may do (docs/FUZZING.md,
// fuzz_switch), checked after every frame and tick; a broken invariant
// prints "FUZZ_CHECK failed: <what>" and traps, so libFuzzer keeps the input:
// - a contribution reaches an accumulator (the shard's `elements` grows)
//   only from the address registered (or bound, for a pooled rank) for its
//   rank, at most once per rank and chunk and tenancy of a pooled id, and
//   only while the chunk is open;
// - a RESULT leaves only for a chunk the model saw complete (every one of
//   the job's contributions, or at a leaf its PARTIAL sent and the
//   parent's RESULT arrived from the parent, on the parent's port), and its
//   elements are the exact sum of the first admitted contribution of each
//   rank (payloads are small integers unique per rank); a re-sent RESULT is
//   the very bytes of one this tenancy completed;
// - nothing goes to an address that is not a registered member, child or
//   parent, or a pooled rank bound to it, except refusals, LEFTs and repeated
//   ALLOCATEDs to pool sources, at most one per source per 100 ms per
//   limiter (RX's and each shard's: 1 + S); a RESULT, STATUS or JOINED only to
//   a member (or child) of its own job, of the current tenancy;
// - when traffic stops (the clock far past op_timeout_ms, retention_ms and
//   idle_timeout_ms), no slot is in use, nothing is retained and every pool
//   id is free.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "config/config.hpp"
#include "fuzz_check.hpp"
#include "proto/steer.hpp"
#include "switch/reducer.hpp"
#include "switch_input.hpp"

using namespace prism;  // NOLINT
using namespace prism::sw;

namespace {

// The root: job 7 (3 ranks, on ports 0 and 1), job 8 (2 ranks, a quota,
// checksums optional, two formats), job 9 (2 ranks here and the leaf as child
// 2 with ranks 2 and 3), pool A (3 ids, max_group 4) and pool B (2 ids,
// max_group 128), three shards.
const char* kRootYaml = R"(
switch: {id: 1, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:ff:01", ip: 10.0.1.254}
  - {id: 2, mac: "02:00:00:00:ff:02", ip: 10.9.0.1}
jobs:
  - id: 7
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:02", ip: 10.0.0.2}
      - {rank: 2, port: 1, mac: "02:00:00:00:01:01", ip: 10.0.1.1}
  - id: 8
    slot_quota: 2
    udp_checksum: optional
    formats: [fp32, int32]
    policies: [kulisch, fp32_arrival]
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:03", ip: 10.0.0.3}
      - {rank: 1, port: 1, mac: "02:00:00:00:01:02", ip: 10.0.1.2, udp_port: 30000}
  - id: 9
    group: 4
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:04", ip: 10.0.0.4}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:05", ip: 10.0.0.5}
    children:
      - {id: 2, port: 2, mac: "02:00:00:00:fe:01", ip: 10.9.0.2, ranks: 2}
pools:
  - jobs: {first: 100, count: 3}
    max_group: 4
    ranges: [10.0.0.64/26]
    ports: [0]
    slot_quota: 4
    idle_timeout_ms: 500
  - jobs: {first: 200, count: 2}
    max_group: 128
    ranges: [10.0.1.64/26]
    ports: [1]
    idle_timeout_ms: 700
reducers: {shards: 3}
retention_ms: 200
retention_mib: 1
op_timeout_ms: 300
peer_timeout_ms: 600
)";

// The leaf: job 9's ranks 2 and 3, its parent the root's port 2, two shards.
const char* kLeafYaml = R"(
switch: {id: 2, role: leaf, parent: {port: 1, mac: "02:00:00:00:ff:02", ip: 10.9.0.1, shards: 3}}
ports:
  - {id: 0, mac: "02:00:00:00:fe:00", ip: 10.2.0.254}
  - {id: 1, mac: "02:00:00:00:fe:01", ip: 10.9.0.2}
jobs:
  - id: 9
    group: 4
    members:
      - {rank: 2, port: 0, mac: "02:00:00:00:02:01", ip: 10.2.0.1}
      - {rank: 3, port: 0, mac: "02:00:00:00:02:02", ip: 10.2.0.2}
reducers: {shards: 2}
retention_ms: 200
retention_mib: 1
op_timeout_ms: 300
peer_timeout_ms: 600
partial_retry_ms: 50
)";

constexpr uint32_t kSlots = 16;  // per shard: small, so that NO_FREE_SLOT is reached
// Per shard, a small result log (32 records) and 64 tombstones: the oldest are forgotten, and
// setting a switch up for each input is cheap (the config's 1 MiB log took half the time).
constexpr Reducer::LogSize kLog{16 << 10, 64};
constexpr uint64_t kMs = 1000000;
constexpr size_t kMaxSteps = 600;  // actions per input
constexpr size_t kMaxQueue = 256;  // frames in flight between the switches
constexpr int kRoot = 0, kLeaf = 1;

const SwitchConfig& config(int which) {
  static const SwitchConfig root = parse_config(kRootYaml, "fuzz_switch-root"),
                            leaf = parse_config(kLeafYaml, "fuzz_switch-leaf");
  return which == kRoot ? root : leaf;
}

// A violated invariant: says what and traps (libFuzzer saves the input).
[[noreturn]] void violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "FUZZ_CHECK failed: fuzz_switch invariant: %s (%s)\n", what, detail.c_str());
  __builtin_trap();
}
#define SW_CHECK(cond, what, detail)     \
  do {                                   \
    if (!(cond)) violated(what, detail); \
  } while (0)

// FUZZ_SWITCH_TRACE=1: every frame in and out on stderr (for replaying an input).
bool trace() {
  static const bool on = std::getenv("FUZZ_SWITCH_TRACE") != nullptr;
  return on;
}

std::string ip_str(uint32_t ip) { return format_ipv4(ip); }
std::string ep_str(const wire::Endpoint& e, uint16_t port) {
  return format_mac(e.mac) + "/" + ip_str(e.ip) + ":" + std::to_string(e.port) + " on port " + std::to_string(port);
}
bool same_ep(const wire::Endpoint& a, const wire::Endpoint& b) {
  return a.ip == b.ip && a.port == b.port && wire::same_mac(a.mac, b.mac);
}

struct Capture : Sink {
  std::vector<Out> outs;
  void send(Out&& o) override { outs.push_back(std::move(o)); }
};

struct Source {
  int sw;
  wire::Endpoint ep;
  uint16_t port;
};

wire::Endpoint ep(std::initializer_list<uint8_t> mac, uint32_t ip, uint16_t port = 20562) {
  wire::Endpoint e;
  std::copy(mac.begin(), mac.end(), e.mac.begin());
  e.ip = ip;
  e.port = port;
  return e;
}
constexpr uint32_t ip4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return uint32_t(a) << 24 | uint32_t(b) << 16 | uint32_t(c) << 8 | d;
}

// The source table (switch_input.hpp, Src).
Source source(uint8_t sel) {
  using namespace fuzz::sw;  // NOLINT
  if (sel >= POOL_B) {
    const uint8_t k = uint8_t(sel - POOL_B);
    return {kRoot, ep({2, 0, 0, 0, 0x0b, k}, ip4(10, 0, 1, uint8_t(65 + k % 8)), uint16_t(20562 + k / 8)), 1};
  }
  if (sel >= POOL_A) {
    const uint8_t k = uint8_t(sel - POOL_A);
    return {kRoot, ep({2, 0, 0, 0, 0x0a, k}, ip4(10, 0, 0, uint8_t(65 + k % 4)), uint16_t(20562 + k / 4)), 0};
  }
  switch (sel) {
    case J7R0: return {kRoot, ep({2, 0, 0, 0, 0, 1}, ip4(10, 0, 0, 1)), 0};
    case J7R1: return {kRoot, ep({2, 0, 0, 0, 0, 2}, ip4(10, 0, 0, 2)), 0};
    case J7R2: return {kRoot, ep({2, 0, 0, 0, 1, 1}, ip4(10, 0, 1, 1)), 1};
    case J8R0: return {kRoot, ep({2, 0, 0, 0, 0, 3}, ip4(10, 0, 0, 3)), 0};
    case J8R1: return {kRoot, ep({2, 0, 0, 0, 1, 2}, ip4(10, 0, 1, 2), 30000), 1};
    case J9R0: return {kRoot, ep({2, 0, 0, 0, 0, 4}, ip4(10, 0, 0, 4)), 0};
    case J9R1: return {kRoot, ep({2, 0, 0, 0, 0, 5}, ip4(10, 0, 0, 5)), 0};
    case CHILD: return {kRoot, ep({2, 0, 0, 0, 0xfe, 1}, ip4(10, 9, 0, 2)), 2};
    case STRANGER: return {kRoot, ep({2, 0, 0, 0, 0xee, 1}, ip4(192, 0, 2, 1)), 0};
    case BCAST: return {kRoot, ep({0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ip4(10, 0, 0, 99)), 0};
    case SPOOF: return {kRoot, ep({2, 0, 0, 0, 0xee, 2}, ip4(10, 0, 0, 1)), 0};
    case LEAF_R2: return {kLeaf, ep({2, 0, 0, 0, 2, 1}, ip4(10, 2, 0, 1)), 0};
    case LEAF_R3: return {kLeaf, ep({2, 0, 0, 0, 2, 2}, ip4(10, 2, 0, 2)), 0};
    case PARENT: return {kLeaf, ep({2, 0, 0, 0, 0xff, 2}, ip4(10, 9, 0, 1)), 1};
    case LEAF_STRANGER: return {kLeaf, ep({2, 0, 0, 0, 0xee, 3}, ip4(192, 0, 2, 2)), 0};
    default:
      return {kRoot, ep({2, 0, 0, 0, 0xee, 4}, ip4(10, 0, 0, 70)), 1};  // pool A's range, a port it does not list
  }
}

// Reads the input; a missing byte is 0.
struct Reader {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint8_t u8() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  std::span<const uint8_t> bytes(size_t k) {
    k = std::min(k, n);
    std::span<const uint8_t> s(p, k);
    p += k;
    n -= k;
    return s;
  }
};

// The model's view of one op chunk at one switch, for one tenancy of its job.
struct Chunk {
  enum State : uint8_t { OPEN, WAIT_PARENT, DONE, ABANDONED };
  State st = OPEN;
  uint32_t expected = 0, terms = 0;
  uint16_t lanes = 0;
  std::set<uint32_t> got;  // contributors: a rank, or 0x10000 | a child id
  std::vector<int64_t> sum;
  bool tainted = false;  // a contribution whose value the model cannot sum exactly
  uint64_t step = 0;     // when st last changed
  std::vector<uint8_t> result;
};
using Key = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>;  // job, op, chunk, tenancy
using Key3 = std::tuple<uint32_t, uint32_t, uint32_t>;

// What a PARTIAL in flight carries, as the leaf's model knows it.
struct Value {
  std::vector<int64_t> v;
  bool tainted = true;
};

struct InFlight {
  int to;
  uint16_t in_port;
  std::vector<uint8_t> frame;
  Value value;
};

struct Binding {
  uint32_t job;
  uint16_t rank;
  wire::Endpoint ep;
  uint16_t port;
};

struct Switch {
  int which;
  const SwitchConfig& cfg;
  Directory dir;
  std::vector<std::unique_ptr<Reducer>> red;
  NackLimiter limit;  // RX's (one per lcore)
  Capture cap;
  uint32_t shards;
  explicit Switch(int w) : which(w), cfg(config(w)), dir(cfg), shards(std::max<uint32_t>(1, cfg.reducer_shards)) {
    for (uint32_t s = 0; s < shards; ++s) red.push_back(std::make_unique<Reducer>(dir, kSlots, 1500, s, 9000, kLog));
  }
  uint64_t elements() const {
    uint64_t n = 0;
    for (const auto& r : red) n += r->stats().elements;
    return n;
  }
};

class World {
 public:
  World() : sw_{std::make_unique<Switch>(kRoot), std::make_unique<Switch>(kLeaf)} {
    for (const auto& pool : sw_[kRoot]->dir.pools())
      for (const Job* j : pool->jobs()) pool_state_[j->cfg->id] = PoolJobState::FREE;
  }
  void run(Reader& in);
  void quiesce();

 private:
  Switch& S(int w) { return *sw_[w]; }
  uint32_t tenancy(uint32_t job) const {
    const auto it = tenancy_.find(job);
    return it == tenancy_.end() ? 0 : it->second;
  }
  const Job* job(int w, uint32_t id) { return S(w).dir.job(id); }
  uint16_t natural_group(int w, uint32_t id) {
    const Job* j = job(w, id);
    if (!j) return 1;
    return std::max<uint16_t>(1, j->group());
  }
  uint16_t natural_sender(uint8_t sel, int w, uint32_t id);
  uint32_t job_of(uint8_t b) const { return b >= 0xF0 ? b : fuzz::sw::kJobs[b % fuzz::sw::kJobCount]; }
  static uint32_t op_of(uint8_t b) { return b >= 0xF8 ? 0xFFFFFFF8u + (b & 7) : b % 8; }
  static uint32_t chunk_of(uint8_t b) { return b >= 0xF0 ? b : b % 3; }
  static uint16_t count_of(uint8_t b) { return b >= 0xF0 ? uint16_t(100 + (b & 15) * 20) : uint16_t(1 + b % 4); }
  Source pick(uint8_t sel, uint8_t port_byte) {
    Source s = source(sel);
    if (port_byte >= 0xE0) s.port = uint16_t(port_byte % (S(s.sw).cfg.ports.size() + 1));
    return s;
  }
  std::vector<uint8_t> frame(const Source& s, const wire::Header& h, std::span<const uint8_t> body, uint8_t misc);
  std::vector<uint8_t> raw_frame(const Source& s, std::span<const uint8_t> msg, uint8_t misc);
  static std::vector<uint8_t> payload(const wire::Header& h, Format f, uint8_t variant);

  // One frame into switch w, on port in_port, then every check.
  void feed(int w, std::span<const uint8_t> frame, uint16_t in_port, const Value* carried = nullptr,
            bool from_queue = false);
  void tick_all();
  void stop_all(bool give_up);  // Reducer::drain, or abandon_all, at every shard of both switches
  void deliver(size_t i);
  void deliver_all();

  // Observations around a step.
  void refresh_bindings(std::vector<Binding>& out) const;
  void observe_pools();
  void admitted(int w, const wire::Parsed& p, uint16_t in_port, uint64_t delta, const Value* carried, bool from_queue);
  void check_outs(int w, const wire::Parsed* query);
  bool registered(int w, const wire::Endpoint& e, uint16_t port, std::optional<uint32_t> of_job) const;
  bool bound(uint32_t job, const wire::Endpoint& e, uint16_t port, bool any_job) const;
  bool member_of(int w, uint32_t job, const wire::Endpoint& e, uint16_t port) const {
    return registered(w, e, port, job) || (w == kRoot && bound(job, e, port, false));
  }
  void limited_reply(int w, const Out& o);
  Chunk& chunk_for(int w, uint32_t job, uint32_t op, uint32_t chunk, uint16_t lanes);

  // Actions.
  void contrib(const Source& s, uint32_t job, uint32_t op, uint32_t chunk, uint16_t sender, uint16_t group,
               uint16_t count, uint8_t desc, uint8_t flags, uint8_t variant, uint8_t misc);
  void allreduce(Reader& in);
  void pool_up(Reader& in);
  void pool_down(Reader& in);

  std::unique_ptr<Switch> sw_[2];
  uint64_t now_ = 1000 * kMs;
  uint64_t step_ = 0;
  std::map<Key, Chunk> chunks_[2];
  std::map<Key3, std::vector<std::vector<uint8_t>>>
      parent_results_;           // leaf: RESULT bodies from the parent, on its port
  std::set<Key3> child_forged_;  // root: a PARTIAL claiming the child's address came from outside the queue
  std::map<uint32_t, uint32_t> tenancy_;
  std::map<uint32_t, PoolJobState> pool_state_;
  std::set<uint32_t> fresh_alloc_;  // pooled jobs an ALLOC took in this step
  // Bindings around the step: after_ is always the pools' bindings now (only
  // the root's frames and ticks change them), before_ a copy taken as a step starts.
  std::vector<Binding> before_, after_;
  std::map<std::tuple<int, uint32_t, uint16_t>, std::deque<uint64_t>> replies_;  // to unregistered sources
  std::deque<InFlight> queue_;
  std::optional<uint32_t> last_allocated_;
  std::optional<Value> last_partial_value_;
  std::vector<uint8_t> scratch_ = std::vector<uint8_t>(wire::kMaxFrame + 64);  // frames are built here
};

uint16_t World::natural_sender(uint8_t sel, int w, uint32_t id) {
  using namespace fuzz::sw;  // NOLINT
  switch (sel) {
    case J7R0:
    case J8R0:
    case J9R0: return 0;
    case J7R1:
    case J8R1:
    case J9R1: return 1;
    case J7R2:
    case LEAF_R2:
    case CHILD: return 2;
    case LEAF_R3: return 3;
    case PARENT: return 1;
    default: break;
  }
  const Job* j = job(w, id);
  if (sel >= POOL_A && j && j->pooled) {
    const Source s = source(sel);
    for (uint16_t r = 0; r < j->group(); ++r)
      if (j->pooled->is_bound(r) && same_ep(j->members[r].addr, s.ep)) return r;
    return uint16_t((sel - POOL_A) % std::max<uint16_t>(1, j->group()));
  }
  return 0;
}

// Elements of format f, small integers unique per (sender, variant, element):
// (sender + 1) * 256 + variant + e, exact in fp32 and int32 (the model sums
// what it reads back from the admitted frame, not these).
std::vector<uint8_t> World::payload(const wire::Header& h, Format f, uint8_t variant) {
  const size_t w = uint8_t(f) >= 1 && uint8_t(f) <= 9 ? info(f).bytes : 1;
  std::vector<uint8_t> b(size_t(h.count) * w);
  for (uint16_t e = 0; e < h.count; ++e) {
    const int32_t v = (int32_t(h.sender) + 1) * 256 + variant + e;
    uint8_t* at = b.data() + size_t(e) * w;
    if (f == Format::FP32) {
      const float x = float(v);
      std::memcpy(at, &x, 4);
    } else if (f == Format::INT32) {
      std::memcpy(at, &v, 4);
    } else if (w == 2) {
      const float x = float(v);
      uint32_t u;
      std::memcpy(&u, &x, 4);
      const uint16_t top = uint16_t(u >> 16);  // bf16 of it (fp16: some value)
      std::memcpy(at, &top, 2);
    } else {
      for (size_t k = 0; k < w; ++k) at[k] = uint8_t(variant + e + k);
    }
  }
  return b;
}

// A frame from s to its switch's port, steered to the header's shard port
// (misc bit 1: to udp_port itself); misc bit 0: no UDP checksum.
std::vector<uint8_t> World::frame(const Source& s, const wire::Header& h, std::span<const uint8_t> body, uint8_t misc) {
  Switch& sw = S(s.sw);
  wire::Endpoint dst = sw.dir.self(s.port);
  dst.port = (misc & 2) ? sw.cfg.udp_port : wire::shard_port(sw.cfg.udp_port, wire::shard_of(h, sw.shards));
  const size_t n = wire::build(scratch_.data(), scratch_.size(), s.ep, dst, h, body, uint16_t(step_));
  std::vector<uint8_t> f(scratch_.begin(), scratch_.begin() + long(n));
  if (n && (misc & 1)) f[wire::frame::udp_checksum] = f[wire::frame::udp_checksum + 1] = 0;
  return f;
}

// Ethernet / IPv4 / UDP around raw PRISM bytes, byte by byte (PROTOCOL.md, Framing).
std::vector<uint8_t> World::raw_frame(const Source& s, std::span<const uint8_t> msg, uint8_t misc) {
  Switch& sw = S(s.sw);
  wire::Endpoint dst = sw.dir.self(s.port);
  dst.port = uint16_t(sw.cfg.udp_port + (misc >> 4) % sw.shards);
  const size_t ip_len = 20 + 8 + msg.size();
  std::vector<uint8_t> f(14 + ip_len);
  std::memcpy(f.data(), dst.mac.data(), 6);
  std::memcpy(f.data() + 6, s.ep.mac.data(), 6);
  f[12] = 0x08;
  uint8_t* ip = f.data() + 14;
  const auto put16 = [](uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); };
  const auto put32 = [](uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (24 - 8 * i));
  };
  ip[0] = 0x45;
  put16(ip + 2, uint16_t(ip_len));
  ip[6] = 0x40;  // DF
  ip[8] = 64;
  ip[9] = 17;
  put32(ip + 12, s.ep.ip);
  put32(ip + 16, dst.ip);
  put16(ip + 10, wire::ipv4_checksum(ip, 20));
  uint8_t* udp = ip + 20;
  put16(udp, s.ep.port);
  put16(udp + 2, dst.port);
  put16(udp + 4, uint16_t(8 + msg.size()));
  std::memcpy(udp + 8, msg.data(), msg.size());
  if (!(misc & 1)) put16(udp + 6, wire::udp_checksum(s.ep.ip, dst.ip, udp, 8 + msg.size()));
  return f;
}

void World::refresh_bindings(std::vector<Binding>& v) const {
  v.clear();
  for (const auto& pool : sw_[kRoot]->dir.pools())
    for (const Job* j : pool->jobs()) {
      // `bound` counts the bound ranks: the search stops at the last (pool B's jobs have 128 ranks).
      uint32_t left = j->pooled->bound.load(std::memory_order_relaxed);
      for (uint16_t r = 0; r < j->group() && left; ++r)
        if (j->pooled->is_bound(r)) {
          v.push_back({j->cfg->id, r, j->members[r].addr, j->members[r].port});
          --left;
        }
    }
}

// A pooled id that became FREE starts a new tenancy; one that left FREE was
// taken by an ALLOC in this step.
void World::observe_pools() {
  for (const auto& pool : S(kRoot).dir.pools())
    for (const Job* j : pool->jobs()) {
      const uint32_t id = j->cfg->id;
      const PoolJobState now = j->pooled->state();
      PoolJobState& was = pool_state_[id];
      if (was != PoolJobState::FREE && now == PoolJobState::FREE) ++tenancy_[id];
      if (was == PoolJobState::FREE && now != PoolJobState::FREE) fresh_alloc_.insert(id);
      was = now;
    }
}

bool World::bound(uint32_t job, const wire::Endpoint& e, uint16_t port, bool any_job) const {
  for (const auto* v : {&before_, &after_})
    for (const Binding& b : *v)
      if ((any_job || b.job == job) && b.port == port && same_ep(b.ep, e)) return true;
  return false;
}

// A member or child of a declared job (of `of_job`, or of any), or the parent.
bool World::registered(int w, const wire::Endpoint& e, uint16_t port, std::optional<uint32_t> of_job) const {
  const SwitchConfig& c = sw_[w]->cfg;
  for (const JobConfig& j : c.jobs) {
    if (of_job && j.id != *of_job) continue;
    for (const MemberConfig& m : j.members)
      if (m.port == port && same_ep(m.addr, e)) return true;
    for (const ChildConfig& ch : j.children)
      if (ch.port == port && same_ep(ch.addr, e)) return true;
  }
  if (c.parent && c.parent->port == port && c.parent->addr.ip == e.ip && wire::same_mac(c.parent->addr.mac, e.mac) &&
      uint16_t(e.port - c.parent->addr.port) < c.parent->shards)
    return true;
  return false;
}

Chunk& World::chunk_for(int w, uint32_t job_id, uint32_t op, uint32_t chunk, uint16_t lanes) {
  const Key k{job_id, op, chunk, tenancy(job_id)};
  auto it = chunks_[w].find(k);
  if (it != chunks_[w].end()) return it->second;
  Chunk& c = chunks_[w][k];
  const Job* j = job(w, job_id);
  FUZZ_CHECK(j);
  uint32_t expected = uint32_t(j->local_members().size());
  for (const Member& ch : j->children) expected += ch.terms;
  c.expected = expected;
  c.lanes = lanes;
  c.sum.assign(lanes, 0);
  c.step = step_;
  return c;
}

// The value of a CONTRIB's elements, when they are small integers the model sums exactly.
Value contrib_value(const wire::Parsed& p) {
  Value v;
  v.v.resize(p.h.count);
  v.tainted = false;
  for (uint16_t e = 0; e < p.h.count; ++e) {
    int64_t x = 0;
    if (p.h.dtype == Format::FP32) {
      float f;
      std::memcpy(&f, p.payload + 4 * size_t(e), 4);
      if (!(f >= -65536.0f && f <= 65536.0f) || f != std::trunc(f)) return Value{};
      x = int64_t(f);
    } else if (p.h.dtype == Format::INT32) {
      int32_t i;
      std::memcpy(&i, p.payload + 4 * size_t(e), 4);
      x = i;
    } else {
      return Value{};
    }
    if (x > 65536 || x < -65536) return Value{};
    v.v[e] = x;
  }
  return v;
}

// The shard's `elements` grew while it took this frame: a contribution went
// into an accumulator. Who sent it, and may it count?
void World::admitted(int w, const wire::Parsed& p, uint16_t in_port, uint64_t delta, const Value* carried,
                     bool from_queue) {
  const auto at = [&] {
    return (w == kRoot ? "root" : "leaf") + std::string(" job ") + std::to_string(p.h.job) + " op " +
           std::to_string(p.h.op) + " chunk " + std::to_string(p.h.chunk) + " sender " + std::to_string(p.h.sender) +
           " from " + ep_str(p.src, in_port);
  };
  SW_CHECK(p.h.kind == wire::Kind::CONTRIB || p.h.kind == wire::Kind::PARTIAL,
           "only a CONTRIB or PARTIAL reaches an accumulator", at());
  const Job* j = job(w, p.h.job);
  SW_CHECK(j, "a contribution to an unknown job was summed", at());
  uint32_t who;
  uint32_t terms;
  uint16_t lanes;
  Value v;
  if (p.h.kind == wire::Kind::CONTRIB) {
    bool legit = false;
    if (j->pooled) {
      for (const Binding& b : before_)
        legit |= b.job == p.h.job && b.rank == p.h.sender && b.port == in_port && same_ep(b.ep, p.src);
    } else if (const MemberConfig* m = j->cfg->member(p.h.sender)) {
      legit = m->port == in_port && same_ep(m->addr, p.src);
    }
    SW_CHECK(legit, "a CONTRIB from an address not registered (or bound) for its rank reached an accumulator", at());
    who = p.h.sender;
    terms = 1;
    lanes = p.h.count;
    SW_CHECK(delta == lanes, "a CONTRIB added another number of elements than it carries", at());
    v = contrib_value(p);
  } else {
    const ChildConfig* c = nullptr;
    for (const ChildConfig& ch : j->cfg->children)
      if (ch.id == p.h.sender && ch.port == in_port && same_ep(ch.addr, p.src)) c = &ch;
    SW_CHECK(c, "a PARTIAL from an address not registered for its child id reached an accumulator", at());
    who = 0x10000u | c->id;
    terms = c->ranks;
    lanes = p.chunk_lanes;
    SW_CHECK(delta == uint64_t(lanes) * terms, "a PARTIAL added another number of elements than it folds", at());
    const Key3 k3{p.h.job, p.h.op, p.h.chunk};
    if (from_queue && carried && !child_forged_.count(k3)) v = *carried;
  }
  Chunk& c = chunk_for(w, p.h.job, p.h.op, p.h.chunk, lanes);
  SW_CHECK(c.st == Chunk::OPEN, "a contribution was counted for a chunk that had completed or was abandoned", at());
  SW_CHECK(!c.got.count(who), "a contribution was counted twice", at());
  SW_CHECK(c.lanes == lanes, "a contribution of another element count joined the chunk", at());
  c.got.insert(who);
  c.terms += terms;
  SW_CHECK(c.terms <= c.expected, "a chunk took more contributions than its job has", at());
  if (v.tainted || v.v.size() != lanes) {
    c.tainted = true;
  } else {
    for (uint16_t e = 0; e < lanes; ++e) c.sum[e] += v.v[e];
  }
}

// A reply to a source that is no registered or bound address: counted, at
// most one per source per 100 ms per limiter (RX's, and each shard's).
void World::limited_reply(int w, const Out& o) {
  auto& q = replies_[{w, o.dst.ip, o.dst.port}];
  q.push_back(now_);
  while (!q.empty() && q.front() + 100 * kMs <= now_) q.pop_front();
  SW_CHECK(q.size() <= 1 + S(w).shards, "more refusals to one unregistered source in 100 ms than its limiters allow",
           std::string(wire::name(o.h.kind)) + " to " + ep_str(o.dst, o.port) + ", " + std::to_string(q.size()) +
               " within 100 ms");
}

void World::check_outs(int w, const wire::Parsed* query) {
  Switch& sw = S(w);
  std::vector<Out> outs = std::move(sw.cap.outs);
  sw.cap.outs.clear();
  for (const Out& o : outs) {
    const auto& h = o.h;
    if (trace())
      std::fprintf(stderr, "[%llu]   %s -> %s job %u op %u chunk %u terms %u status %u flags %u to %s\n",
                   static_cast<unsigned long long>(step_), w == kRoot ? "root" : "leaf", wire::name(h.kind), h.job,
                   h.op, h.chunk, h.terms, h.status, h.flags, ep_str(o.dst, o.port).c_str());
    const auto what = [&] {
      return std::string(w == kRoot ? "root" : "leaf") + " sent " + wire::name(h.kind) + " job " +
             std::to_string(h.job) + " op " + std::to_string(h.op) + " chunk " + std::to_string(h.chunk) + " to " +
             ep_str(o.dst, o.port);
    };
    const bool to_parent =
        w == kLeaf && registered(w, o.dst, o.port, std::nullopt) && o.dst.ip == sw.cfg.parent->addr.ip;
    const bool to_child = w == kRoot && o.port == 2 && o.dst.ip == ip4(10, 9, 0, 2);
    std::vector<uint8_t> body = o.body ? *o.body : std::vector<uint8_t>();
    switch (h.kind) {
      case wire::Kind::RESULT: {
        SW_CHECK(member_of(w, h.job, o.dst, o.port), "a RESULT went to an address that is no member of its job",
                 what());
        const Key k{h.job, h.op, h.chunk, tenancy(h.job)};
        auto it = chunks_[w].find(k);
        Chunk* c = it == chunks_[w].end() ? nullptr : &it->second;
        if (h.flags & wire::hflag::RETRANSMIT) {
          SW_CHECK(c && c->st == Chunk::DONE,
                   "a RESULT was re-sent for a chunk this job (this tenancy of a pooled id) never completed", what());
          SW_CHECK(body == c->result, "a re-sent RESULT is not the bytes first sent", what());
          break;
        }
        if (c && c->st == Chunk::DONE && c->step == step_) {
          SW_CHECK(body == c->result, "one RESULT went out with two bodies", what());
          break;
        }
        SW_CHECK(c, "a RESULT for a chunk nobody of this tenancy contributed to", what());
        if (w == kRoot) {
          SW_CHECK(c->st == Chunk::OPEN && c->terms == c->expected, "a RESULT for a chunk that did not complete",
                   what() + ", " + std::to_string(c->terms) + " of " + std::to_string(c->expected) + " terms");
          SW_CHECK(h.count == c->lanes && h.terms == h.group, "a RESULT's count or terms disagree with its chunk",
                   what());
          if (!c->tainted && (h.out_dtype == Format::FP32 || h.out_dtype == Format::INT32)) {
            SW_CHECK(body.size() == size_t(c->lanes) * 4 && h.status == 0,
                     "a RESULT of small integers has another length or a status", what());
            for (uint16_t e = 0; e < c->lanes; ++e) {
              int64_t got;
              if (h.out_dtype == Format::FP32) {
                float f;
                std::memcpy(&f, body.data() + 4 * size_t(e), 4);
                got = f >= -1e15f && f <= 1e15f && f == std::trunc(f) ? int64_t(f) : INT64_MIN;
              } else {
                int32_t i;
                std::memcpy(&i, body.data() + 4 * size_t(e), 4);
                got = i;
              }
              SW_CHECK(got == c->sum[e], "a RESULT is not the exact sum of the first contribution of each rank",
                       what() + ", element " + std::to_string(e) + ": " + std::to_string(got) + " instead of " +
                           std::to_string(c->sum[e]));
            }
          }
        } else {
          SW_CHECK(c->st == Chunk::WAIT_PARENT, "a leaf forwarded a RESULT for a chunk it had not sent up", what());
          const auto pr = parent_results_.find({h.job, h.op, h.chunk});
          const bool from_parent =
              pr != parent_results_.end() && std::find(pr->second.begin(), pr->second.end(), body) != pr->second.end();
          SW_CHECK(from_parent, "a leaf forwarded a RESULT its parent never sent it (on the parent's port)", what());
        }
        c->st = Chunk::DONE;
        c->step = step_;
        c->result = body;
        break;
      }
      case wire::Kind::PARTIAL: {
        SW_CHECK(to_parent, "a PARTIAL went elsewhere than the parent", what());
        auto it = chunks_[w].find(Key{h.job, h.op, h.chunk, 0});
        SW_CHECK(it != chunks_[w].end(), "a PARTIAL for a chunk nobody contributed to", what());
        Chunk& c = it->second;
        SW_CHECK(c.terms == c.expected && h.terms == c.terms, "a PARTIAL for a chunk that did not complete", what());
        if (h.flags & wire::hflag::RETRANSMIT) {
          SW_CHECK(c.st == Chunk::WAIT_PARENT, "a PARTIAL re-sent for a chunk not waiting for its parent", what());
        } else if (c.st == Chunk::OPEN) {
          c.st = Chunk::WAIT_PARENT;
          c.step = step_;
        } else {
          SW_CHECK(c.st == Chunk::WAIT_PARENT && c.step == step_, "a chunk sent its PARTIAL twice", what());
        }
        Value v;
        v.tainted = c.tainted;
        v.v = c.sum;
        last_partial_value_ = v;
        break;
      }
      case wire::Kind::STATUS:
        SW_CHECK(member_of(w, h.job, o.dst, o.port), "a STATUS went to an address that is no member of its job",
                 what());
        if (h.status == wire::qstatus::HELD) {
          SW_CHECK(query, "a STATUS HELD without a QUERY", what());
          const auto it = chunks_[w].find(Key{h.job, h.op, h.chunk, tenancy(h.job)});
          SW_CHECK(it != chunks_[w].end() && it->second.got.count(query->h.sender),
                   "a STATUS HELD for a contribution this rank (of this tenancy) never made", what());
        }
        break;
      case wire::Kind::JOINED:
        SW_CHECK(member_of(w, h.job, o.dst, o.port), "a JOINED went to an address that is no member of its job",
                 what());
        break;
      case wire::Kind::JOIN: SW_CHECK(to_parent, "a JOIN was sent elsewhere than the parent", what()); break;
      case wire::Kind::NACK:
      case wire::Kind::LEFT:
      case wire::Kind::ALLOCATED:
        if (h.kind == wire::Kind::ALLOCATED) last_allocated_ = h.job;
        if (h.kind == wire::Kind::NACK && h.status == uint8_t(wire::NackReason::OP_ABANDONED) && !query && o.body) {
          auto it = chunks_[w].find(Key{h.job, h.op, h.chunk, tenancy(h.job)});
          if (it != chunks_[w].end() && it->second.st == Chunk::OPEN) it->second.st = Chunk::ABANDONED;
        }
        if (registered(w, o.dst, o.port, std::nullopt) || (w == kRoot && bound(0, o.dst, o.port, true))) break;
        if (h.kind == wire::Kind::ALLOCATED && fresh_alloc_.count(h.job)) break;  // the first answer to an ALLOC
        limited_reply(w, o);
        break;
      case wire::Kind::CONTRIB:
      case wire::Kind::ALLOC:
      case wire::Kind::LEAVE:
      case wire::Kind::QUERY: violated("the switch sent a kind only ranks send", what());
    }
    // What goes between the two switches waits in the queue.
    if (to_parent || to_child) {
      InFlight f;
      f.to = w == kRoot ? kLeaf : kRoot;
      f.in_port = w == kRoot ? S(kLeaf).cfg.parent->port : 2;
      const size_t n = wire::build(scratch_.data(), scratch_.size(), o.src, o.dst, h, body, uint16_t(step_));
      f.frame.assign(scratch_.begin(), scratch_.begin() + long(n));
      if (h.kind == wire::Kind::PARTIAL && last_partial_value_) f.value = *last_partial_value_;
      if (!f.frame.empty()) queue_.push_back(std::move(f));
      if (queue_.size() > kMaxQueue) queue_.pop_front();
    }
  }
  last_partial_value_.reset();
}

void World::feed(int w, std::span<const uint8_t> frame, uint16_t in_port, const Value* carried, bool from_queue) {
  if (frame.empty()) return;
  Switch& sw = S(w);
  ++step_;
  fresh_alloc_.clear();
  before_ = after_;
  const uint64_t elements = sw.elements();
  wire::Parsed p;
  const wire::Refusal r = wire::parse(frame, wire::PortRange(sw.cfg.udp_port, uint16_t(sw.shards)), &p);
  // What the model learns from the frame itself: a parent's RESULT on the
  // parent's port; a PARTIAL claiming the child's address from outside.
  if (r == wire::Refusal::OK) {
    const Key3 k3{p.h.job, p.h.op, p.h.chunk};
    if (w == kLeaf && p.h.kind == wire::Kind::RESULT && in_port == sw.cfg.parent->port &&
        p.src.ip == sw.cfg.parent->addr.ip && p.src.port == sw.cfg.parent->addr.port &&
        wire::same_mac(p.src.mac, sw.cfg.parent->addr.mac)) {
      std::vector<uint8_t> b(p.payload, p.payload + p.payload_len);
      if (p.sideband) b.insert(b.end(), p.sideband, p.sideband + p.h.count);
      parent_results_[k3].push_back(std::move(b));
    }
    if (w == kRoot && p.h.kind == wire::Kind::PARTIAL && !from_queue) child_forged_.insert(k3);
  }
  const Verdict v = ingress(sw.dir, r, p, in_port);
  if (trace())
    std::fprintf(stderr, "[%llu] %s <- %s job %u op %u chunk %u sender %u group %u from %s: %s%s\n",
                 static_cast<unsigned long long>(step_), w == kRoot ? "root" : "leaf",
                 r == wire::Refusal::OK ? wire::name(p.h.kind) : "?", p.h.job, p.h.op, p.h.chunk, p.h.sender, p.h.group,
                 ep_str(p.src, in_port).c_str(), wire::name(r),
                 v.drop ? (std::string(", refused ") + name(*v.drop)).c_str() : "");
  if (v.admitted()) {
    // Exactly one counter per packet: accepted, or dropped for one reason (the summary's identity
    // packets = accepted + dropped, and dropped = the sum of the reasons).
    Reducer& red = *sw.red[wire::shard_of(p.h, sw.shards)];
    const ReducerStats s0 = red.stats();
    red.on_packet(p, v, now_, sw.cap);
    const ReducerStats s1 = red.stats();
    uint64_t reasons = 0;
    for (size_t i = 0; i < size_t(Drop::kCount); ++i) reasons += s1.drops[i] - s0.drops[i];
    SW_CHECK(s1.packets - s0.packets == 1 && (s1.accepted - s0.accepted) + (s1.dropped - s0.dropped) == 1 &&
                 reasons == s1.dropped - s0.dropped,
             "a packet not counted exactly once (accepted, or dropped for one reason)",
             "accepted +" + std::to_string(s1.accepted - s0.accepted) + ", dropped +" +
                 std::to_string(s1.dropped - s0.dropped) + ", reasons +" + std::to_string(reasons));
  } else {
    answer(sw.dir, v, p, sw.cap, &sw.limit, now_);
  }
  if (w == kRoot) {
    observe_pools();
    refresh_bindings(after_);
  }
  const uint64_t delta = sw.elements() - elements;
  if (delta) {
    SW_CHECK(r == wire::Refusal::OK && v.admitted(), "a refused frame reached an accumulator",
             std::string(wire::name(r)));
    admitted(w, p, in_port, delta, carried, from_queue);
  }
  check_outs(w, r == wire::Refusal::OK && p.h.kind == wire::Kind::QUERY ? &p : nullptr);
}

void World::tick_all() {
  for (int w : {kRoot, kLeaf}) {
    Switch& sw = S(w);
    ++step_;
    fresh_alloc_.clear();
    before_ = after_;
    const uint64_t elements = sw.elements();
    for (auto& red : sw.red) red->tick(now_, sw.cap);
    if (w == kRoot) {
      observe_pools();
      refresh_bindings(after_);
    }
    SW_CHECK(sw.elements() == elements, "a tick reached an accumulator", "");
    check_outs(w, nullptr);
  }
}

void World::stop_all(bool give_up) {
  for (int w : {kRoot, kLeaf}) {
    Switch& sw = S(w);
    ++step_;
    fresh_alloc_.clear();
    before_ = after_;
    const uint64_t elements = sw.elements();
    for (auto& red : sw.red) {
      if (give_up)
        red->abandon_all(sw.cap);
      else
        red->drain();
    }
    if (w == kRoot) {
      observe_pools();
      refresh_bindings(after_);
    }
    SW_CHECK(sw.elements() == elements, "a stop reached an accumulator", "");
    check_outs(w, nullptr);
  }
}

void World::deliver(size_t i) {
  if (queue_.empty()) return;
  i %= queue_.size();
  InFlight f = std::move(queue_[i]);
  queue_.erase(queue_.begin() + long(i));
  feed(f.to, f.frame, f.in_port, &f.value, true);
}

void World::deliver_all() {
  for (size_t n = 0; !queue_.empty() && n < 4 * kMaxQueue; ++n) deliver(0);
}

void World::contrib(const Source& s, uint32_t job_id, uint32_t op, uint32_t chunk, uint16_t sender, uint16_t group,
                    uint16_t count, uint8_t desc, uint8_t flags, uint8_t variant, uint8_t misc) {
  const fuzz::sw::Desc& d = fuzz::sw::kDescs[desc % fuzz::sw::kDescCount];
  wire::Header h;
  h.kind = wire::Kind::CONTRIB;
  h.job = job_id;
  h.op = op;
  h.chunk = chunk;
  h.sender = sender;
  h.group = group;
  h.terms = 1;
  h.count = count;
  h.dtype = Format(d.dtype);
  h.out_dtype = Format(d.out);
  h.policy = Policy(d.policy);
  h.encoding = wire::Encoding::DTYPE;
  h.transport = PartialTransport(d.transport);
  h.exceptions = (desc & 0x80) ? Exceptions::SATURATE : Exceptions::IEEE;
  h.flags = flags & 7;
  const std::vector<uint8_t> body = payload(h, h.dtype, variant);
  feed(s.sw, frame(s, h, body, misc), s.port);
}

// Every member of a job contributes to (op, chunk) from its address (a
// pooled job: every bound rank), but the one `skip` names; then what the
// switches send each other is delivered.
void World::allreduce(Reader& in) {
  using namespace fuzz::sw;  // NOLINT
  const uint32_t job_id = job_of(in.u8());
  const uint32_t op = op_of(in.u8()), chunk = chunk_of(in.u8());
  const uint16_t count = count_of(in.u8());
  const uint8_t desc = in.u8(), variant = in.u8(), skip = in.u8();
  std::vector<std::pair<Source, uint16_t>> senders;
  switch (job_id) {
    case 7: senders = {{source(J7R0), 0}, {source(J7R1), 1}, {source(J7R2), 2}}; break;
    case 8: senders = {{source(J8R0), 0}, {source(J8R1), 1}}; break;
    case 9: senders = {{source(J9R0), 0}, {source(J9R1), 1}, {source(LEAF_R2), 2}, {source(LEAF_R3), 3}}; break;
    default:
      if (const Job* j = job(kRoot, job_id); j && j->pooled)
        for (uint16_t r = 0; r < j->group(); ++r)
          if (j->pooled->is_bound(r)) senders.push_back({Source{kRoot, j->members[r].addr, j->members[r].port}, r});
  }
  if (skip & 0x80) std::reverse(senders.begin(), senders.end());
  // skip & 0x7F: 0, every member sends; k, member (k - 1) mod n does not.
  const size_t skipped = (skip & 0x7F) && !senders.empty() ? ((skip & 0x7F) - 1u) % senders.size() : senders.size();
  const uint16_t group = natural_group(kRoot, job_id);
  for (size_t i = 0; i < senders.size(); ++i)
    if (i != skipped)
      contrib(senders[i].first, job_id, op, chunk, senders[i].second, group, count, desc, wire::hflag::LAST_CHUNK,
              variant, 0);
  deliver_all();
}

// ALLOC from a pool host, then a JOIN of every rank from host + rank.
void World::pool_up(Reader& in) {
  using namespace fuzz::sw;  // NOLINT
  const uint8_t pool = in.u8(), nonce = in.u8(), g = in.u8(), host = in.u8();
  const bool b = pool & 1;
  static constexpr uint16_t kBGroups[] = {1, 2, 3, 9, 65, 100, 128};
  const uint16_t R = b ? kBGroups[g % 7] : uint16_t(1 + g % 4);
  const auto host_of = [&](uint16_t r) {
    return b ? source(uint8_t(POOL_B + (host + r) % 160)) : source(uint8_t(POOL_A + (host + r) % 32));
  };
  last_allocated_.reset();
  const Source asker = host_of(0);
  const uint32_t n = 0x10000u + uint32_t(nonce) * 131 + 1;
  feed(asker.sw, frame(asker, wire::alloc_header(b ? 200 : 100, n, 0, R), {}, 0), asker.port);
  if (!last_allocated_) return;
  const uint32_t job_id = *last_allocated_;
  for (uint16_t r = 0; r < R; ++r) {
    const Source s = host_of(r);
    wire::Header h = wire::session_header(wire::Kind::JOIN, job_id, R);
    h.op = 0x200000u + uint32_t(nonce) * 256 + r;
    h.sender = r;
    feed(s.sw, frame(s, h, {}, 0), s.port);
  }
}

// Every bound rank of a pooled job LEAVEs, with its JOIN's nonce.
void World::pool_down(Reader& in) {
  const uint32_t job_id = job_of(in.u8());
  const Job* j = job(kRoot, job_id);
  if (!j || !j->pooled) return;
  for (uint16_t r = 0; r < j->group(); ++r) {
    if (!j->pooled->is_bound(r)) continue;
    const Source s{kRoot, j->members[r].addr, j->members[r].port};
    feed(kRoot, frame(s, wire::leave_header(job_id, j->pooled->join_nonce[r], r), {}, 0), s.port);
  }
}

void World::run(Reader& in) {
  using namespace fuzz::sw;  // NOLINT
  for (size_t steps = 0; !in.empty() && steps < kMaxSteps; ++steps) {
    switch (in.u8() % kActs) {
      case CONTRIB: {
        const uint8_t sel = in.u8();
        const Source s = pick(sel, in.u8());
        const uint32_t job_id = job_of(in.u8());
        const uint32_t op = op_of(in.u8()), chunk = chunk_of(in.u8());
        const uint8_t sb = in.u8(), gb = in.u8(), cb = in.u8(), desc = in.u8(), flags = in.u8(), variant = in.u8(),
                      misc = in.u8();
        const uint16_t sender = sb >= 0xC0 ? uint16_t((sb - 0xC0) * 3 % 131) : natural_sender(sel, s.sw, job_id);
        const uint16_t group = gb >= 0xE0 ? uint16_t(gb - 0xE0) : natural_group(s.sw, job_id);
        contrib(s, job_id, op, chunk, sender, group, count_of(cb), desc, flags, variant, misc);
        break;
      }
      case QUERY: {
        const uint8_t sel = in.u8();
        const Source s = pick(sel, in.u8());
        const uint32_t job_id = job_of(in.u8());
        const uint32_t op = op_of(in.u8()), chunk = chunk_of(in.u8());
        const uint8_t sb = in.u8(), gb = in.u8(), desc = in.u8(), misc = in.u8();
        const fuzz::sw::Desc& d = kDescs[desc % kDescCount];
        wire::Header c;
        c.job = job_id;
        c.op = op;
        c.chunk = chunk;
        c.sender = sb >= 0xC0 ? uint16_t((sb - 0xC0) * 3 % 131) : natural_sender(sel, s.sw, job_id);
        c.group = gb >= 0xE0 ? uint16_t(gb - 0xE0) : natural_group(s.sw, job_id);
        c.dtype = Format(d.dtype);
        c.out_dtype = Format(d.out);
        c.policy = Policy(d.policy);
        c.transport = PartialTransport(d.transport);
        c.exceptions = (desc & 0x80) ? Exceptions::SATURATE : Exceptions::IEEE;
        wire::Header q = wire::query_header(c);
        if (misc & 4) q.count = 1;  // malformed
        feed(s.sw, frame(s, q, {}, misc), s.port);
        break;
      }
      case JOIN: {
        const uint8_t sel = in.u8();
        const Source s = pick(sel, in.u8());
        const uint32_t job_id = job_of(in.u8());
        const uint8_t sb = in.u8(), gb = in.u8(), nb = in.u8();
        wire::Header h = wire::session_header(wire::Kind::JOIN, job_id,
                                              gb >= 0xE0 ? uint16_t(gb - 0xE0) : natural_group(s.sw, job_id));
        h.sender = sb >= 0xC0 ? uint16_t((sb - 0xC0) * 3 % 131) : natural_sender(sel, s.sw, job_id);
        h.op = nb ? 0x100u + nb % 16 : 0;
        feed(s.sw, frame(s, h, {}, 0), s.port);
        break;
      }
      case ALLOC: {
        const uint8_t sel = in.u8();
        const Source s = pick(sel, in.u8());
        const uint8_t pb = in.u8(), nb = in.u8(), gb = in.u8();
        const uint32_t pool = pb % 4 == 0 ? 100 : pb % 4 == 1 ? 200 : pb % 4 == 2 ? 7 : 101;
        const uint16_t group = pool == 200 ? uint16_t(gb % 130) : uint16_t(gb % 6);
        feed(s.sw, frame(s, wire::alloc_header(pool, nb ? 0x300u + nb % 16 : 0, 0, group), {}, 0), s.port);
        break;
      }
      case LEAVE: {
        const uint8_t sel = in.u8();
        const Source s = pick(sel, in.u8());
        const uint32_t job_id = job_of(in.u8());
        const uint8_t sb = in.u8(), nb = in.u8();
        const uint16_t sender = sb >= 0xC0 ? uint16_t((sb - 0xC0) * 3 % 131) : natural_sender(sel, s.sw, job_id);
        uint32_t nonce = nb ? 0x100u + nb % 16 : 0;
        // nb 0xFF: the rank's own JOIN nonce, as an honest LEAVE has.
        if (const Job* j = job(kRoot, job_id); nb == 0xFF && j && j->pooled && sender < j->group())
          nonce = j->pooled->join_nonce[sender];
        feed(s.sw, frame(s, wire::leave_header(job_id, nonce, sender), {}, 0), s.port);
        break;
      }
      case INJECT: {
        const uint8_t sel = in.u8();
        const Source s = pick(sel, in.u8());
        const uint8_t kb = in.u8();
        const uint32_t job_id = job_of(in.u8());
        const uint32_t op = op_of(in.u8()), chunk = chunk_of(in.u8());
        const uint8_t sb = in.u8(), gb = in.u8(), cb = in.u8(), desc = in.u8(), flags = in.u8(), variant = in.u8();
        const fuzz::sw::Desc& d = kDescs[desc % kDescCount];
        const uint16_t group = gb >= 0xE0 ? uint16_t(gb - 0xE0) : uint16_t(4);
        wire::Header h;
        h.job = job_id;
        h.op = op;
        h.chunk = chunk;
        h.sender = sb >= 0xC0 ? uint16_t((sb - 0xC0) * 3 % 131) : natural_sender(sel, s.sw, job_id);
        h.group = group;
        h.count = count_of(cb);
        h.dtype = Format(d.dtype);
        h.out_dtype = Format(d.out);
        h.policy = Policy(d.policy);
        h.transport = PartialTransport(d.transport);
        h.exceptions = (desc & 0x80) ? Exceptions::SATURATE : Exceptions::IEEE;
        h.encoding = wire::Encoding::OUT_DTYPE;
        std::vector<uint8_t> body;
        switch (kb % 3) {
          case 0:  // a rounded PARTIAL (terms: the child's ranks)
            h.kind = wire::Kind::PARTIAL;
            h.terms = (flags & 0x80) ? uint16_t(1 + variant % 4) : uint16_t(2);
            h.flags = flags & 3;
            body = payload(h, h.out_dtype, variant);
            break;
          case 1:  // a RESULT
            h.kind = wire::Kind::RESULT;
            h.terms = group;
            h.flags = flags & 7;
            body = payload(h, h.out_dtype, variant);
            if (h.flags & wire::hflag::SIDEBAND) body.insert(body.end(), h.count, 0);
            if (h.flags & wire::hflag::SIDEBAND) h.status = 0;
            break;
          default:  // a JOINED (COMPLETE when flags bit 0)
            h = wire::session_header(wire::Kind::JOINED, job_id, group);
            h.op = 0x100u + variant % 16;
            h.sender = sb >= 0xC0 ? uint16_t((sb - 0xC0) * 3 % 131) : uint16_t(2 + (variant & 1));
            h.status = flags & 1;
            h.terms = h.status ? group : uint16_t(std::min<int>(group, variant % 4));
            h.chunk = h.status ? op : 0;
        }
        feed(s.sw, frame(s, h, body, 0), s.port);
        break;
      }
      case ADVANCE: {
        const uint8_t dt = in.u8();
        if (dt >= 254) {  // a graceful stop of both switches: no new ops (254), then give up what is open (255)
          stop_all(dt == 255);
          break;
        }
        now_ += (dt < 128 ? uint64_t(dt) : uint64_t(dt - 128) * 10) * kMs;
        tick_all();
        break;
      }
      case TICK: tick_all(); break;
      case DELIVER: deliver(in.u8()); break;
      case DROP:
        if (!queue_.empty()) queue_.erase(queue_.begin() + long(in.u8() % queue_.size()));
        break;
      case DELIVER_ALL: deliver_all(); break;
      case RAW_MSG: {
        const uint8_t sel = in.u8();
        const Source s = pick(sel, in.u8());
        const size_t len = (size_t(in.u8()) << 8 | in.u8()) % kRawMax;
        const uint8_t misc = in.u8();
        const auto msg = in.bytes(len);
        feed(s.sw, raw_frame(s, msg, misc), s.port);
        break;
      }
      case RAW_FRAME: {
        const int w = in.u8() & 1;
        const uint16_t port = uint16_t(in.u8() % 3);
        const size_t len = (size_t(in.u8()) << 8 | in.u8()) % kRawMax;
        const auto f = in.bytes(len);
        feed(w, f, port);
        break;
      }
      case ALLREDUCE: allreduce(in); break;
      case POOL_UP: pool_up(in); break;
      case POOL_DOWN: pool_down(in); break;
    }
  }
}

// Traffic stops: the clock goes far past op_timeout_ms, peer_timeout_ms, retention_ms and
// every idle_timeout_ms, every shard ticks (a few times: the released jobs'
// slots are swept 100 ms after the release), and nothing may be left.
void World::quiesce() {
  for (const uint64_t dt : {3000, 300, 300, 300}) {
    now_ += dt * kMs;
    tick_all();
  }
  for (int w : {kRoot, kLeaf})
    for (const auto& red : S(w).red) {
      const ReducerStats& st = red->stats();
      SW_CHECK(st.slots_in_use == 0, "a slot is still in use when traffic has stopped",
               std::to_string(st.slots_in_use) + " at the " + (w == kRoot ? "root" : "leaf"));
      SW_CHECK(st.results_retained == 0, "a result is still retained when traffic has stopped",
               std::to_string(st.results_retained) + " at the " + (w == kRoot ? "root" : "leaf"));
    }
  for (const auto& pool : S(kRoot).dir.pools())
    SW_CHECK(pool->free_ids() == pool->cfg().count, "a pool id is still taken when traffic has stopped",
             "pool " + std::to_string(pool->id()));
}

}  // namespace

// Each input builds two switches (five reducer shards, each preallocating a
// result log and its key tables: about 20 MiB). Under ASan a block that large
// is mapped at malloc and unmapped at free, so every input paid for 5000
// fresh pages (page faults and zeroing: 25 ms of system time). Blocks of
// 256 KiB and more are kept here instead and handed out again for the same
// size: the next input's tables reuse the pages. Everything else goes to
// malloc and free as before (ASan checks them; a kept block is not
// re-poisoned, and new/delete mismatches are no longer reported).
namespace {
constexpr size_t kBigBlock = 256 << 10;
struct BigBlock {
  void* p;
  size_t n;
  bool used;
};
BigBlock g_big[128];
size_t g_bigs = 0;

void* fuzz_alloc(size_t n, size_t align) {
  if (n >= kBigBlock)
    for (size_t i = 0; i < g_bigs; ++i)
      if (!g_big[i].used && g_big[i].n == n && reinterpret_cast<uintptr_t>(g_big[i].p) % align == 0) {
        g_big[i].used = true;
        return g_big[i].p;
      }
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n ? n : 1);
  } else if (posix_memalign(&p, align, n ? n : 1) != 0) {
    p = nullptr;
  }
  if (p && n >= kBigBlock && g_bigs < std::size(g_big)) g_big[g_bigs++] = {p, n, true};
  return p;
}
void fuzz_free(void* p) {
  if (!p) return;
  for (size_t i = 0; i < g_bigs; ++i)
    if (g_big[i].p == p) {
      g_big[i].used = false;
      return;
    }
  std::free(p);
}
void* fuzz_new(size_t n, size_t align = alignof(std::max_align_t)) {
  if (void* p = fuzz_alloc(n, align)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) { return fuzz_new(n); }
void* operator new[](size_t n) { return fuzz_new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return fuzz_alloc(n, alignof(std::max_align_t)); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return fuzz_alloc(n, alignof(std::max_align_t)); }
void* operator new(size_t n, std::align_val_t a) { return fuzz_new(n, size_t(a)); }
void* operator new[](size_t n, std::align_val_t a) { return fuzz_new(n, size_t(a)); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return fuzz_alloc(n, size_t(a)); }
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return fuzz_alloc(n, size_t(a)); }
void operator delete(void* p) noexcept { fuzz_free(p); }
void operator delete[](void* p) noexcept { fuzz_free(p); }
void operator delete(void* p, size_t) noexcept { fuzz_free(p); }
void operator delete[](void* p, size_t) noexcept { fuzz_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { fuzz_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { fuzz_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { fuzz_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { fuzz_free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { fuzz_free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { fuzz_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { fuzz_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { fuzz_free(p); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto world = std::make_unique<World>();
  Reader in{data, size};
  world->run(in);
  world->quiesce();
  return 0;
}
