// prism-gen: writes the traffic of a collective scenario as pcap files, with
// the golden results the switch must produce, and decodes captures.
//
//   prism-gen write --config FILE [--config FILE...] --job ID --dtype D --policy P [options]
//   prism-gen dump FILE.pcap [--port N]
//
// See --help and docs/PROTOCOL.md. Addresses come from the switch configs:
// every rank of the job must be a member in exactly one of them. Each frame
// goes to its shard's UDP port at that switch (udp_port + (job + op + chunk)
// mod reducers.shards: PROTOCOL.md, Steering), so a replay is steered as a
// client's traffic is.
//
// `write` is a sequence of named steps: parse_request, find_job, then the
// traffic (add_contributions, add_malformed, add_foreign, mix,
// record_arrival), then the outputs (write_captures, write_expected), which
// appear together or not at all (app::OutputSet).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <span>
#include <tuple>

#include "arith/accumulator.hpp"
#include "cli.hpp"
#include "config/config.hpp"
#include "json.hpp"
#include "output_file.hpp"
#include "pcap_io.hpp"
#include "proto/packet.hpp"
#include "proto/steer.hpp"
#include "util/closed_set.hpp"
#include "values.hpp"

using namespace prism;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------
// The scenario's own closed sets: how values are drawn and the order in which
// each chunk's contributions leave the ranks.

enum class Values : uint8_t { GRADIENT = 1, FULL, CANCEL, SPECIALS };
inline constexpr Entry<Values> kValues[] = {
    {Values::GRADIENT, "gradient", "per element a magnitude spread over the format's binades, times N(0,1)"},
    {Values::FULL, "full", "every finite code of the format, uniformly"},
    {Values::CANCEL, "cancel", "ranks in pairs send x and -x, plus a small term: sums that cancel"},
    {Values::SPECIALS, "specials", "gradient values with NaNs, infinities, -0 and subnormals mixed in"},
};
constexpr std::span<const Entry<Values>> entries(Values) { return kValues; }

enum class Order : uint8_t { ROUND_ROBIN = 1, RANDOM, REVERSE };
inline constexpr Entry<Order> kOrders[] = {
    {Order::ROUND_ROBIN, "round_robin", "rank 0, 1, ..., R-1"},
    {Order::RANDOM, "random", "a fresh shuffle per chunk"},
    {Order::REVERSE, "reverse", "rank R-1, ..., 0"},
};
constexpr std::span<const Entry<Order>> entries(Order) { return kOrders; }

std::string usage() {
  return R"(usage:
  prism-gen write --config FILE [--config FILE...] --job ID --dtype D --policy P [options]
  prism-gen dump FILE.pcap [--port N] [--shards S]

write: the CONTRIBs of every rank of a job for a run of ops, as captures. Each goes to the UDP
  port of its shard at the rank's switch: udp_port + (job + op + chunk) mod reducers.shards.
  --config FILE        switch config(s) naming the job's members (repeat for a tree)
  --job ID             job id
  --dtype D            )" +
         choices<Format>() + R"(
  --out-dtype O        result format (default fp32, int32 for integer D)
  --policy P           )" +
         choices<Policy>() + R"(
  --transport T        )" +
         choices<PartialTransport>() + R"( (default kulisch)
  --exceptions E       )" +
         choices<Exceptions>() + R"( (default ieee)
  --ops N              ops to generate (default 1); --op-base N first op id (default 0)
  --elements N         elements per op (default 1024)
  --chunk C            elements per chunk (default: the most whose CONTRIB and RESULT fit --mtu)
  --mtu BYTES          IP MTU for sizing chunks (default 1500; 9000 for jumbo)
  --values V           )" +
         choices<Values>() + R"( (default gradient)
  --seed S             random seed (default 1)
  --order O            arrival order across ranks per chunk: )" +
         choices<Order>() + R"( (default round_robin)
  --loss P             each CONTRIB lost with probability P; a RETRANSMIT copy follows its op
  --dup P              each CONTRIB duplicated with probability P
  --reorder P          each packet swapped with a random later one with probability P
  --late-retransmit P  after each op, each rank re-sends a chunk with probability P (a lost RESULT)
  --malformed N        N malformed packets from members' addresses
  --foreign N          N packets the switch must drop: unknown sources, foreign jobs, spoofed ranks
  --pcap-dir DIR       one capture per switch port: DIR/sw<id>.port<p>.pcap
  --merged FILE        one capture of everything, in arrival order (FILE's directory must exist)
  --expected DIR       golden results: op<op>.out, op<op>.flags, inputs rank<r>.op<op>.in, manifest.json
  A DIR is made if missing (its parent must exist), and removed again if the run fails.
  Outputs appear together or not at all: each is written beside its place and renamed there
  when every one is complete. A symlink's target gets the data; a device or FIFO is written through.
dump: parses every frame with PRISM's parser and prints one JSON object per line.
  --port N             the switch's udp_port (default 20562)
  --shards S           its reducers.shards: frames to ports N .. N+S-1 are PRISM's (default 1)
)";
}

// ---------------------------------------------------------------------------
// The request: what the command line asks for, checked.

struct Request {
  std::vector<SwitchConfig> configs;
  uint32_t job = 0;
  Format dtype = Format::FP32, out = Format::FP32;
  Policy policy = Policy::KULISCH_FIXED;
  PartialTransport transport = PartialTransport::KULISCH;
  Exceptions exceptions = Exceptions::IEEE;
  Values values = Values::GRADIENT;
  Order order = Order::ROUND_ROBIN;
  uint32_t ops = 1, op_base = 0, elements = 1024, mtu = 1500, chunk = 0;
  double loss = 0, dup = 0, reorder = 0, late = 0;
  uint32_t malformed = 0, foreign = 0;
  uint64_t seed = 1;
  std::string pcap_dir, merged, expected;

  uint32_t chunks() const { return (elements + chunk - 1) / chunk; }
  uint32_t first(uint32_t c) const { return c * chunk; }
  uint32_t count(uint32_t c) const { return std::min(chunk, elements - c * chunk); }
};

// The largest chunk whose CONTRIB and RESULT fit an IP MTU: a RESULT carries
// out-format elements and may carry a status byte per element (the sideband).
uint32_t max_chunk(Format dtype, Format out, uint32_t mtu) {
  const uint32_t per_elem = std::max(uint32_t(info(dtype).bytes), uint32_t(info(out).bytes) + 1);
  return std::min<uint32_t>(65535,
                            (mtu - uint32_t(wire::kIpv4MinSize + wire::kUdpSize + wire::kHeaderSize)) / per_elem);
}

Request parse_request(const cli::Args& a) {
  Request q;
  const auto cfg_paths = a.all("--config");
  if (cfg_paths.empty()) cli::fail("missing --config FILE: the switch config that names the job's members");
  for (const auto& p : cfg_paths) {
    try {
      q.configs.push_back(load_config(p));
    } catch (const ConfigError& e) {
      cli::fail(e.what());
    }
  }
  if (!a.has("--job")) cli::fail("missing --job ID");
  q.job = uint32_t(a.num("--job", 0, 0xFFFFFFFFu, 0));
  q.dtype = cli::one_of<Format>(a, "--dtype");
  q.out = cli::one_of<Format>(a, "--out-dtype", is_float(q.dtype) ? Format::FP32 : Format::INT32);
  q.policy = cli::one_of<Policy>(a, "--policy");
  q.transport = cli::one_of<PartialTransport>(a, "--transport", PartialTransport::KULISCH);
  q.exceptions = cli::one_of<Exceptions>(a, "--exceptions", Exceptions::IEEE);
  q.values = cli::one_of<Values>(a, "--values", Values::GRADIENT);
  q.order = cli::one_of<Order>(a, "--order", Order::ROUND_ROBIN);
  q.ops = uint32_t(a.num("--ops", 1, 1u << 20, 1));
  q.op_base = uint32_t(a.num("--op-base", 0, 0xFFFFFFFFu, 0));
  q.elements = uint32_t(a.num("--elements", 1, 1u << 24, 1024));
  q.mtu = uint32_t(a.num("--mtu", 128, 9000, 1500));
  const uint32_t most = max_chunk(q.dtype, q.out, q.mtu);
  q.chunk = uint32_t(a.num("--chunk", 1, 65535, std::min(most, q.elements)));
  if (q.chunk > most)
    cli::fail("--chunk " + std::to_string(q.chunk) + " does not fit a " + std::to_string(q.mtu) +
              "-byte MTU: at most " + std::to_string(most) + " " + name(q.dtype) +
              " elements with their RESULT (raise --mtu for jumbo frames)");
  q.loss = a.real("--loss", 0, 1, 0);
  q.dup = a.real("--dup", 0, 1, 0);
  q.reorder = a.real("--reorder", 0, 1, 0);
  q.late = a.real("--late-retransmit", 0, 1, 0);
  q.malformed = uint32_t(a.num("--malformed", 0, 1u << 20, 0));
  q.foreign = uint32_t(a.num("--foreign", 0, 1u << 20, 0));
  q.pcap_dir = a.str("--pcap-dir");
  q.merged = a.str("--merged");
  q.expected = a.str("--expected");
  if (q.pcap_dir.empty() && q.merged.empty()) cli::fail("nothing to write: give --pcap-dir DIR and/or --merged FILE");
  q.seed = a.num("--seed", 0, ~uint64_t(0), 1);
  return q;
}

// ---------------------------------------------------------------------------
// The job: its ranks, each a member of exactly one of the switches.

struct Rank {
  uint16_t rank;
  const SwitchConfig* sw;
  const MemberConfig* member;
};

struct Job {
  uint16_t group = 0;
  std::map<uint16_t, Rank> ranks;
  OpDesc desc;  // the op every CONTRIB describes (lanes: set per chunk)
};

wire::Endpoint port_endpoint(const SwitchConfig& sw, uint16_t port) {
  const PortConfig* p = sw.port(port);
  if (!p) cli::fail(sw.path + ": port " + std::to_string(port) + " is used by a member but not listed under ports");
  return {p->mac, p->ip, sw.udp_port};
}

Job find_job(const Request& q) {
  Job j;
  const std::string job = "job " + std::to_string(q.job);
  for (const auto& c : q.configs) {
    const JobConfig* jc = c.job(q.job);
    if (!jc) continue;
    if (j.group && jc->group != j.group)
      cli::fail(c.path + ": " + job + " has group " + std::to_string(jc->group) + " but another config says " +
                std::to_string(j.group));
    j.group = jc->group;
    for (const auto& m : jc->members) {
      if (j.ranks.count(m.rank))
        cli::fail(c.path + ": rank " + std::to_string(m.rank) + " of " + job + " is a member in two configs");
      port_endpoint(c, m.port);
      j.ranks[m.rank] = Rank{m.rank, &c, &m};
    }
  }
  if (!j.group) cli::fail(job + " is in none of the configs given");
  if (j.ranks.size() != j.group)
    cli::fail(job + " has group " + std::to_string(j.group) + " but the configs name " +
              std::to_string(j.ranks.size()) + " member ranks: every rank must be a member somewhere");
  j.desc.dtype = q.dtype;
  j.desc.out = q.out;
  j.desc.policy = q.policy;
  j.desc.exceptions = q.exceptions;
  j.desc.group = j.group;
  if (auto err = admission_error(j.desc, kMaxWidth)) cli::fail(*err);
  return j;
}

// ---------------------------------------------------------------------------
// Values of one op: codes[rank][element].

using Codes = std::vector<uint32_t>;

std::vector<Codes> make_values(Format f, Values kind, uint32_t R, uint32_t n, std::mt19937_64& rng) {
  std::vector<Codes> v(R, Codes(n));
  std::normal_distribution<double> N01;
  std::uniform_real_distribution<double> U;
  const FormatInfo& fi = info(f);
  std::vector<double> mag(n);
  // Gradient-like: one magnitude per element, spread over binades the format holds.
  const double lo = is_float(f) ? std::max(-20.0, double(fi.emin) + 2) : 0,
               hi = is_float(f) ? std::min(5.0, double(fi.emax) - 8) : 4;
  for (auto& m : mag) m = std::ldexp(1.0, int(std::floor(lo + (hi - lo) * U(rng))));
  for (uint32_t r = 0; r < R; ++r)
    for (uint32_t i = 0; i < n; ++i) {
      double x = mag[i] * N01(rng);
      if (kind == Values::FULL) {
        uint32_t bits;
        if (!is_float(f))
          bits = uint32_t(rng());
        else
          do bits = uint32_t(rng()) & ((fi.sign_bit << 1) - 1);
          while (is_special(f, bits));
        v[r][i] = bits;
        continue;
      }
      if (kind == Values::CANCEL) {
        // Ranks pair up: r and r^1 send x and -x; odd R leaves one small term.
        std::mt19937_64 pair_rng(uint64_t(r >> 1) * 1000003u + i);
        std::normal_distribution<double> P;
        const double big = mag[i] * 1024 * P(pair_rng);
        x = (r ^ 1) < R ? ((r & 1) ? -big : big) + mag[i] * 1e-3 * N01(rng) : mag[i] * 1e-3 * N01(rng);
      }
      if (kind == Values::SPECIALS && is_float(f)) {
        const double u = U(rng);
        if (u < 0.01)
          x = NAN;
        else if (u < 0.02)
          x = INFINITY;
        else if (u < 0.03)
          x = -INFINITY;
        else if (u < 0.05)
          x = -0.0;
        else if (u < 0.07)
          x = std::ldexp(N01(rng), fi.emin - 2);  // subnormal
      }
      if (!is_float(f)) x = f == Format::INT8 ? N01(rng) * 20 : N01(rng) * 1e6;
      if (std::isnan(x))
        v[r][i] = fi.canonical_nan;
      else if (std::isinf(x))
        v[r][i] = fi.has_inf ? fi.inf | (x < 0 ? fi.sign_bit : 0) : fi.canonical_nan;
      else
        v[r][i] = app::encode_value(f, x);
    }
  return v;
}

// ---------------------------------------------------------------------------
// Frames: every one built by the wire layer (wire::build writes the header,
// lengths and checksums); a malformed one is a built frame with one field off.

struct Packet {
  std::vector<uint8_t> frame;
  const SwitchConfig* sw = nullptr;  // the switch whose port receives it
  uint16_t port = 0;
  int rank = -1;  // the contributing rank, -1 for noise
  uint32_t op = 0, chunk = 0;
};

class FrameMaker {
 public:
  FrameMaker(const Request& q, const Job& j) : q_(q), j_(j) {}

  // Rank r's CONTRIB of chunk c of `op`, from its codes of the whole op, to
  // the port of its shard (by its header as written); `edit` may change the
  // header before it is written (malformed, foreign).
  Packet contrib(const Rank& r, uint32_t op, uint32_t c, const Codes& codes, uint8_t flags,
                 const std::function<void(wire::Header&)>& edit = {}) {
    wire::Header h;
    h.kind = wire::Kind::CONTRIB;
    h.job = q_.job;
    h.op = op;
    h.chunk = c;
    h.sender = r.rank;
    h.group = j_.group;
    h.terms = 1;
    h.count = uint16_t(q_.count(c));
    h.dtype = q_.dtype;
    h.out_dtype = q_.out;
    h.policy = q_.policy;
    h.encoding = wire::Encoding::DTYPE;
    h.transport = q_.transport;
    h.exceptions = q_.exceptions;
    h.flags = uint8_t(flags | (c + 1 == q_.chunks() ? wire::hflag::LAST_CHUNK : 0));
    if (edit) edit(h);
    const auto body = app::element_bytes(q_.dtype, std::span(codes).subspan(q_.first(c), q_.count(c)));
    wire::Endpoint to = port_endpoint(*r.sw, r.member->port);
    to.port = wire::shard_port(to.port, wire::shard_of(h, r.sw->reducer_shards));
    Packet p;
    p.frame.resize(wire::kMaxFrame);
    p.frame.resize(wire::build(p.frame.data(), p.frame.size(), r.member->addr, to, h, body, ip_id_++));
    p.sw = r.sw;
    p.port = r.member->port;
    p.rank = r.rank;
    p.op = op;
    p.chunk = c;
    return p;
  }

 private:
  const Request& q_;
  const Job& j_;
  uint16_t ip_id_ = 0;
};

// ---------------------------------------------------------------------------
// Traffic: the contributions with their faults, then the noise, in the order
// the switch receives them.

struct Traffic {
  std::vector<std::vector<Codes>> values;  // [op][rank][element]
  std::vector<Packet> packets;
  size_t noise = 0;  // the last `noise` packets, until mix() places them
  std::map<std::string, uint64_t> stats;
  // [op][chunk]: ranks in the order their first copy arrives (record_arrival()).
  std::vector<std::vector<std::vector<uint16_t>>> arrival;
};

// Every op's values and CONTRIBs, chunk by chunk in the ranks' order, with
// losses (re-sent after the op), duplicates and late retransmits.
void add_contributions(const Request& q, const Job& j, FrameMaker& fm, std::mt19937_64& rng, Traffic& t) {
  std::uniform_real_distribution<double> U;
  const uint16_t R = j.group;
  for (uint32_t o = 0; o < q.ops; ++o) {
    const uint32_t op = q.op_base + o;
    t.values.push_back(make_values(q.dtype, q.values, R, q.elements, rng));
    const auto& v = t.values.back();
    std::vector<Packet> resent;
    for (uint32_t c = 0; c < q.chunks(); ++c) {
      std::vector<uint16_t> ord(R);
      for (uint16_t r = 0; r < R; ++r) ord[r] = r;
      if (q.order == Order::REVERSE) std::reverse(ord.begin(), ord.end());
      if (q.order == Order::RANDOM) std::shuffle(ord.begin(), ord.end(), rng);
      for (uint16_t r : ord) {
        const Rank& rank = j.ranks.at(r);
        Packet p = fm.contrib(rank, op, c, v[r], 0);
        if (q.loss > 0 && U(rng) < q.loss) {  // lost on the way; the rank's timeout re-sends it
          ++t.stats["lost"];
          resent.push_back(fm.contrib(rank, op, c, v[r], wire::hflag::RETRANSMIT));
          continue;
        }
        const bool twice = q.dup > 0 && U(rng) < q.dup;
        t.packets.push_back(std::move(p));
        ++t.stats["contrib"];
        if (twice) {
          t.packets.push_back(t.packets.back());
          ++t.stats["duplicates"];
        }
      }
    }
    for (auto& p : resent) {
      t.packets.push_back(std::move(p));
      ++t.stats["contrib"];
      ++t.stats["retransmits"];
    }
    // After the op completes: ranks that lost their RESULT ask again.
    for (uint16_t r = 0; r < R; ++r)
      if (q.late > 0 && U(rng) < q.late) {
        const uint32_t c = uint32_t(rng() % q.chunks());
        t.packets.push_back(fm.contrib(j.ranks.at(r), op, c, v[r], wire::hflag::RETRANSMIT));
        ++t.stats["late_retransmits"];
      }
  }
}

void add_noise(Packet p, const std::string& stat, Traffic& t) {
  p.rank = -1;
  t.packets.push_back(std::move(p));
  ++t.noise;
  ++t.stats[stat];
}

// Malformed packets from members' addresses: one header field off (the frame
// otherwise whole, its checksums right), or a checksum off.
void add_malformed(const Request& q, const Job& j, FrameMaker& fm, std::mt19937_64& rng, Traffic& t) {
  static const char* const kinds[] = {"bad_magic",       "bad_version",      "bad_kind",       "bad_dtype",
                                      "ip_bad_checksum", "udp_bad_checksum", "payload_length", "bad_count"};
  for (uint32_t k = 0; k < q.malformed; ++k) {
    const Rank& r = j.ranks.at(uint16_t(rng() % j.group));
    const std::string kind = kinds[k % 8];
    Packet p = fm.contrib(r, q.op_base, 0, t.values[0][r.rank], 0, [&](wire::Header& h) {
      if (kind == "bad_magic") h.magic ^= 0xFF00;
      if (kind == "bad_version") h.version = 9;
      if (kind == "bad_kind") h.kind = wire::Kind(0x77);
      if (kind == "bad_dtype") h.dtype = Format(0x42);
      if (kind == "payload_length") h.count = uint16_t(h.count + 1);  // one more than the body holds
      if (kind == "bad_count") h.count = 0;
    });
    if (kind == "ip_bad_checksum") p.frame[wire::frame::ip_checksum] ^= 0x5A;
    if (kind == "udp_bad_checksum") {
      uint8_t& b = p.frame[wire::frame::udp_checksum + 1];
      b ^= 0x5A;
      b = b ? b : 1;  // never 0 0: that would say "no checksum"
    }
    add_noise(std::move(p), "malformed." + kind, t);
  }
}

// Well-formed packets the switch must drop: from an unknown source, of a
// foreign job, and from a member's address claiming another rank.
void add_foreign(const Request& q, const Job& j, FrameMaker& fm, std::mt19937_64& rng, Traffic& t) {
  for (uint32_t k = 0; k < q.foreign; ++k) {
    const Rank& r = j.ranks.at(uint16_t(rng() % j.group));
    const std::string kind = k % 3 == 0 ? "unknown_source" : k % 3 == 1 ? "foreign_job" : "spoofed_rank";
    if (kind == "spoofed_rank" && j.group == 1) continue;
    Rank fake = r;
    MemberConfig m = *r.member;
    if (kind == "unknown_source") {
      m.addr.ip = 0xC6336401 + k;  // 198.51.100.0/24: documentation addresses, never a member
      m.addr.mac = {0x02, 0xBA, 0xD0, 0x00, uint8_t(k >> 8), uint8_t(k)};
    }
    fake.member = &m;
    if (kind == "spoofed_rank") fake.rank = uint16_t((r.rank + 1) % j.group);  // r's address, another rank's id
    add_noise(fm.contrib(fake, q.op_base, 0, t.values[0][fake.rank], 0,
                         [&](wire::Header& h) {
                           if (kind == "foreign_job") h.job = q.job ^ 0x80000000u;
                         }),
              "foreign." + kind, t);
  }
}

// Noise goes anywhere in the capture; reordering moves genuine packets too.
void mix(const Request& q, std::mt19937_64& rng, Traffic& t) {
  auto& pk = t.packets;
  for (size_t i = pk.size() - t.noise; i < pk.size(); ++i) {
    const size_t j = rng() % (i + 1);
    std::rotate(pk.begin() + long(j), pk.begin() + long(i), pk.begin() + long(i) + 1);
  }
  t.noise = 0;
  std::uniform_real_distribution<double> U;
  if (q.reorder > 0)
    for (size_t i = 0; i + 1 < pk.size(); ++i)
      if (U(rng) < q.reorder) {
        std::swap(pk[i], pk[i + 1 + rng() % (pk.size() - i - 1)]);
        ++t.stats["reordered"];
      }
}

// The order in which each chunk's first copies arrive, whatever kind of copy
// (original, duplicate, retransmit): FP32_ARRIVAL's order at a single switch.
void record_arrival(const Request& q, Traffic& t) {
  t.arrival.assign(q.ops, std::vector<std::vector<uint16_t>>(q.chunks()));
  std::set<std::tuple<uint32_t, uint32_t, int>> seen;
  for (const auto& p : t.packets)
    if (p.rank >= 0 && seen.insert({p.op, p.chunk, p.rank}).second)
      t.arrival[p.op - q.op_base][p.chunk].push_back(uint16_t(p.rank));
}

// ---------------------------------------------------------------------------
// Golden results from the reference model, per chunk in its arrival order.

struct OpResult {
  std::vector<uint8_t> out, flags;
};

std::vector<OpResult> expected_results(const Request& q, const Job& j, const Traffic& t) {
  std::vector<OpResult> res(q.ops);
  const uint32_t osz = info(q.out).bytes;
  for (uint32_t o = 0; o < q.ops; ++o) {
    res[o].out.resize(size_t(q.elements) * osz);
    res[o].flags.resize(q.elements);
    for (uint32_t c = 0; c < q.chunks(); ++c) {
      OpDesc d = j.desc;
      d.lanes = q.count(c);
      auto acc = make_accumulator(d);
      for (uint16_t r : t.arrival[o][c])
        acc->add(app::element_bytes(q.dtype, std::span(t.values[o][r]).subspan(q.first(c), q.count(c))).data(), r);
      acc->finalize(res[o].out.data() + size_t(q.first(c)) * osz, res[o].flags.data() + q.first(c));
    }
  }
  return res;
}

std::string manifest(const Request& q, const Job& j, const Traffic& t, const std::vector<OpResult>& res) {
  app::JsonObject stats;
  for (const auto& [k, v] : t.stats) stats.num(k, v);
  std::vector<std::string> ops;
  for (uint32_t o = 0; o < q.ops; ++o) {
    const uint32_t op = q.op_base + o;
    size_t nf[3] = {0, 0, 0};
    for (uint8_t f : res[o].flags)
      nf[0] += (f & flag::OVERFLOW) != 0, nf[1] += (f & flag::INVALID) != 0, nf[2] += (f & flag::NAN_INPUT) != 0;
    ops.push_back(app::JsonObject()
                      .num("op", op)
                      .str("result", "op" + std::to_string(op) + ".out")
                      .str("flags", "op" + std::to_string(op) + ".flags")
                      .num("overflow", nf[0])
                      .num("invalid", nf[1])
                      .num("nan_input", nf[2])
                      .raw("arrival", app::json_array(t.arrival[o],
                                                      [](const std::vector<uint16_t>& c) {
                                                        return app::json_array(
                                                            c, [](uint16_t r) { return std::to_string(r); });
                                                      }))
                      .text());
  }
  return app::JsonObject()
             .num("job", q.job)
             .num("group", j.group)
             .str("dtype", name(q.dtype))
             .str("out_dtype", name(q.out))
             .str("policy", name(q.policy))
             .str("transport", name(q.transport))
             .str("exceptions", name(q.exceptions))
             .num("elements", q.elements)
             .num("chunk", q.chunk)
             .num("chunks", q.chunks())
             .str("values", name(q.values))
             .str("order", name(q.order))
             .num("packets", t.packets.size())
             .raw("stats", stats.text())
             .raw("ops", app::json_array(ops, [](const std::string& s) { return s; }))
             .text() +
         "\n";
}

// ---------------------------------------------------------------------------
// Outputs: all written beside their places, renamed there together.

// The directories the outputs go in, made (or refused) before any work: a
// DIR option's directory itself, in a parent that exists (nothing is made
// anywhere else); --merged FILE's must exist.
void prepare_outputs(const Request& q, app::OutputSet& out) {
  if (!q.pcap_dir.empty()) out.make_dir(q.pcap_dir, "--pcap-dir", false);
  if (!q.expected.empty()) out.make_dir(q.expected, "--expected", false);
  if (!q.merged.empty()) app::check_writable(q.merged, "--merged");
}

void write_capture(app::OutputSet& out, const std::string& path, const std::vector<const Packet*>& pkts) {
  app::OutputFile& f = out.open(path);
  PcapStream pcap(f);
  uint64_t usec = 1;
  for (const Packet* p : pkts) pcap.write(p->frame, usec++);
}

void write_captures(const Request& q, const Traffic& t, app::OutputSet& out) {
  if (!q.pcap_dir.empty()) {
    std::map<std::pair<uint16_t, uint16_t>, std::vector<const Packet*>> by_port;
    for (const auto& c : q.configs)
      for (const auto& p : c.ports) by_port[{c.id, p.id}];
    for (const auto& p : t.packets) by_port.at({p.sw->id, p.port}).push_back(&p);
    for (const auto& [port, pkts] : by_port)
      write_capture(
          out, q.pcap_dir + "/sw" + std::to_string(port.first) + ".port" + std::to_string(port.second) + ".pcap", pkts);
  }
  if (!q.merged.empty()) {
    std::vector<const Packet*> all;
    for (const auto& p : t.packets) all.push_back(&p);
    write_capture(out, q.merged, all);
  }
}

void write_expected(const Request& q, const Job& j, const Traffic& t, app::OutputSet& out) {
  const std::vector<OpResult> res = expected_results(q, j, t);
  for (uint32_t o = 0; o < q.ops; ++o) {
    const std::string base = q.expected + "/op" + std::to_string(q.op_base + o);
    out.open(base + ".out").write(res[o].out.data(), res[o].out.size());
    out.open(base + ".flags").write(res[o].flags.data(), res[o].flags.size());
    for (uint16_t r = 0; r < j.group; ++r) {
      const auto in = app::element_bytes(q.dtype, t.values[o][r]);
      out.open(q.expected + "/rank" + std::to_string(r) + ".op" + std::to_string(q.op_base + o) + ".in")
          .write(in.data(), in.size());
    }
  }
  out.open(q.expected + "/manifest.json").write(manifest(q, j, t, res));
}

int cmd_write(const cli::Args& a) {
  const Request q = parse_request(a);
  const Job job = find_job(q);
  app::OutputSet out;
  prepare_outputs(q, out);

  std::mt19937_64 rng(q.seed);
  FrameMaker frames(q, job);
  Traffic t;
  add_contributions(q, job, frames, rng, t);
  add_malformed(q, job, frames, rng, t);
  add_foreign(q, job, frames, rng, t);
  mix(q, rng, t);
  record_arrival(q, t);

  write_captures(q, t, out);
  if (!q.expected.empty()) write_expected(q, job, t, out);
  out.commit();
  std::fprintf(stderr, "prism-gen: %zu packets, job %u, %u ranks, %u ops x %u chunks of %u %s\n", t.packets.size(),
               q.job, job.group, q.ops, q.chunks(), q.chunk, name(q.dtype));
  return 0;
}

int cmd_dump(const cli::Args& a) {
  if (a.positional.size() != 1) cli::fail("dump needs one capture: prism-gen dump FILE.pcap");
  const uint16_t port = uint16_t(a.num("--port", 1, 65535, wire::kDefaultPort));
  const uint16_t shards = uint16_t(a.num("--shards", 1, 64, 1));
  if (uint32_t(port) + shards - 1 > 65535)
    cli::fail("--port " + std::to_string(port) + " --shards " + std::to_string(shards) + ": the ports run past 65535");
  uint64_t idx = 0;
  try {
    read_pcap(a.positional[0], [&](std::span<const uint8_t> f, uint64_t usec) {
      wire::Parsed p;
      const wire::Refusal r = wire::parse(f, wire::PortRange(port, shards), &p);
      std::printf("{\"index\":%llu,\"usec\":%llu,\"len\":%zu,\"refusal\":\"%s\"", (unsigned long long)idx++,
                  (unsigned long long)usec, f.size(), wire::name(r));
      if (r == wire::Refusal::OK) {
        const wire::Header& h = p.h;
        std::printf(
            ",\"src_mac\":\"%s\",\"dst_mac\":\"%s\",\"src_ip\":\"%s\",\"dst_ip\":\"%s\",\"src_port\":%u,"
            "\"dst_port\":%u,\"vlan\":%u,\"kind\":%u,\"job\":%u,\"op\":%u,\"chunk\":%u,\"sender\":%u,"
            "\"group\":%u,\"terms\":%u,\"count\":%u,\"dtype\":%u,\"out_dtype\":%u,\"policy\":%u,"
            "\"encoding\":%u,\"transport\":%u,\"exceptions\":%u,\"flags\":%u,\"status\":%u,"
            "\"first_lane\":%u,\"chunk_lanes\":%u,\"payload\":\"",
            format_mac(p.src.mac).c_str(), format_mac(p.dst.mac).c_str(), format_ipv4(p.src.ip).c_str(),
            format_ipv4(p.dst.ip).c_str(), p.src.port, p.dst.port, p.vlan, unsigned(h.kind), h.job, h.op, h.chunk,
            h.sender, h.group, h.terms, h.count, unsigned(h.dtype), unsigned(h.out_dtype), unsigned(h.policy),
            unsigned(h.encoding), unsigned(h.transport), unsigned(h.exceptions), h.flags, h.status, p.first_lane,
            p.chunk_lanes);
        for (size_t i = 0; i < p.payload_len; ++i) std::printf("%02x", p.payload[i]);
        std::printf("\",\"sideband\":\"");
        for (size_t i = 0; p.sideband && i < h.count; ++i) std::printf("%02x", p.sideband[i]);
        std::printf("\"");
      }
      std::printf("}\n");
    });
  } catch (const std::runtime_error& e) {
    cli::fail(e.what());
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(usage().c_str(), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "write") {
    const cli::Args a(argc, argv, 2,
                      {"--config",          "--job",       "--dtype",   "--out-dtype", "--policy", "--transport",
                       "--exceptions",      "--ops",       "--op-base", "--elements",  "--chunk",  "--mtu",
                       "--values",          "--seed",      "--order",   "--loss",      "--dup",    "--reorder",
                       "--late-retransmit", "--malformed", "--foreign", "--pcap-dir",  "--merged", "--expected"},
                      {});
    if (!a.positional.empty()) cli::fail("unexpected argument '" + a.positional[0] + "' (see --help)");
    return cmd_write(a);
  }
  if (cmd == "dump") return cmd_dump(cli::Args(argc, argv, 2, {"--port", "--shards"}, {}));
  cli::fail("unknown command '" + cmd + "': use write or dump (see --help)");
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool("prism-gen", [&] { return run(argc, argv); });
}
