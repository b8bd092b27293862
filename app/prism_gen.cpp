// prism-gen: writes the traffic of a collective scenario as pcap files, with
// the golden results the switch must produce, and decodes captures.
//
//   prism-gen write --config FILE [--config FILE...] --job ID --dtype D --policy P [options]
//   prism-gen dump FILE.pcap [--port N]
//
// See --help and docs/PROTOCOL.md. Addresses come from the switch configs:
// every rank of the job must be a member in exactly one of them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "arith/accumulator.hpp"
#include "cli.hpp"
#include "config/config.hpp"
#include "pcap_io.hpp"
#include "proto/packet.hpp"

using namespace prism;
namespace fs = std::filesystem;

namespace {

const char* kUsage = R"(usage:
  prism-gen write --config FILE [--config FILE...] --job ID --dtype D --policy P [options]
  prism-gen dump FILE.pcap [--port N]

write: the CONTRIBs of every rank of a job for a run of ops, as captures.
  --config FILE        switch config(s) naming the job's members (repeat for a tree)
  --job ID             job id
  --dtype D            fp32 fp16 bf16 e4m3fn e4m3fnuz e5m2 e5m2fnuz int8 int32
  --out-dtype O        result format (default fp32, int32 for integer D)
  --policy P           fp32_arrival kulisch fp32_binomial
  --transport T        rounded kulisch auto (default kulisch)
  --exceptions E       ieee saturate (default ieee)
  --ops N              ops to generate (default 1); --op-base N first op id (default 0)
  --elements N         elements per op (default 1024)
  --chunk C            elements per chunk (default: the most whose CONTRIB and RESULT fit --mtu)
  --mtu BYTES          IP MTU for sizing chunks (default 1500; 9000 for jumbo)
  --values V           gradient full cancel specials (default gradient)
  --seed S             random seed (default 1)
  --order O            arrival order across ranks per chunk: round_robin random reverse (default round_robin)
  --loss P             each CONTRIB lost with probability P; a RETRANSMIT copy follows its op
  --dup P              each CONTRIB duplicated with probability P
  --reorder P          each packet swapped with a random later one with probability P
  --late-retransmit P  after each op, each rank re-sends a chunk with probability P (a lost RESULT)
  --malformed N        N malformed packets from members' addresses
  --foreign N          N packets the switch must drop: unknown sources, foreign jobs, spoofed ranks
  --pcap-dir DIR       one capture per switch port: DIR/sw<id>.port<p>.pcap
  --merged FILE        one capture of everything, in arrival order
  --expected DIR       golden results: op<op>.out, op<op>.flags, inputs rank<r>.op<op>.in, manifest.json
dump: parses every frame with PRISM's parser and prints one JSON object per line.
)";

struct Rank {
  uint16_t rank;
  const SwitchConfig* sw;
  const MemberConfig* member;
};

struct Packet {
  std::vector<uint8_t> frame;
  const SwitchConfig* sw = nullptr;  // the switch whose port receives it
  uint16_t port = 0;
  int rank = -1;  // the contributing rank, -1 for noise
  uint32_t op = 0, chunk = 0;
  bool counts = false;  // a genuine first contribution (not a duplicate, retransmit or noise)
};

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

// A double rounded once into format f (the generator's own values).
uint32_t encode_value(Format f, double v, Exceptions ex = Exceptions::SATURATE) {
  if (!is_float(f)) {
    const double lim = f == Format::INT8 ? 127 : 2147483647.0;
    const double c = std::max(-lim - 1, std::min(lim, std::nearbyint(v)));
    return f == Format::INT8 ? uint32_t(uint8_t(int8_t(c))) : uint32_t(int32_t(c));
  }
  if (v == 0) return zero_bits(f, std::signbit(v));
  int e;
  const double m = std::frexp(std::fabs(v), &e);
  return encode_float(f, v < 0, uint64_t(std::ldexp(m, 53)), e - 53, false, ex).bits;
}

// Values of one op: codes[rank][element].
std::vector<std::vector<uint32_t>> make_values(Format f, const std::string& kind, uint32_t R, uint32_t n,
                                               std::mt19937_64& rng) {
  std::vector<std::vector<uint32_t>> v(R, std::vector<uint32_t>(n));
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
      if (kind == "full") {
        uint32_t bits;
        if (!is_float(f))
          bits = uint32_t(rng());
        else
          do bits = uint32_t(rng()) & ((fi.sign_bit << 1) - 1);
          while (is_special(f, bits));
        v[r][i] = bits;
        continue;
      }
      if (kind == "cancel") {
        // Ranks pair up: r and r^1 send x and -x; odd R leaves one small term.
        std::mt19937_64 pair_rng(uint64_t(r >> 1) * 1000003u + i);
        std::normal_distribution<double> P;
        const double big = mag[i] * 1024 * P(pair_rng);
        x = (r ^ 1) < R ? ((r & 1) ? -big : big) + mag[i] * 1e-3 * N01(rng) : mag[i] * 1e-3 * N01(rng);
      }
      if (kind == "specials" && is_float(f)) {
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
        v[r][i] = encode_value(f, x);
    }
  return v;
}

wire::Endpoint port_endpoint(const SwitchConfig& sw, uint16_t port) {
  const PortConfig* p = sw.port(port);
  if (!p) cli::fail(sw.path + ": port " + std::to_string(port) + " is used by a member but not listed under ports");
  return {p->mac, p->ip, sw.udp_port};
}

int cmd_write(const cli::Args& a) {
  const auto cfg_paths = a.all("--config");
  if (cfg_paths.empty()) cli::fail("missing --config FILE: the switch config that names the job's members");
  std::vector<SwitchConfig> cfgs;
  for (const auto& p : cfg_paths) {
    try {
      cfgs.push_back(load_config(p));
    } catch (const ConfigError& e) {
      cli::fail(e.what());
    }
  }
  if (!a.has("--job")) cli::fail("missing --job ID");
  const uint32_t job_id = uint32_t(a.num("--job", 0, 0xFFFFFFFFu, 0));
  const std::string dts = a.str("--dtype");
  if (dts.empty()) cli::fail("missing --dtype (fp32 fp16 bf16 e4m3fn e4m3fnuz e5m2 e5m2fnuz int8 int32)");
  const auto dt = format_from_name(dts);
  if (!dt) cli::fail("unknown --dtype '" + dts + "' (fp32 fp16 bf16 e4m3fn e4m3fnuz e5m2 e5m2fnuz int8 int32)");
  const std::string ots = a.str("--out-dtype", is_float(*dt) ? "fp32" : "int32");
  const auto ot = format_from_name(ots);
  if (!ot) cli::fail("unknown --out-dtype '" + ots + "'");
  const std::string pols = a.str("--policy");
  if (pols.empty()) cli::fail("missing --policy (fp32_arrival kulisch fp32_binomial)");
  const auto pol = policy_from_name(pols);
  if (!pol) cli::fail("unknown --policy '" + pols + "' (fp32_arrival kulisch fp32_binomial)");
  const std::string trs = a.str("--transport", "kulisch");
  Transport tr;
  if (trs == "rounded")
    tr = Transport::ROUNDED;
  else if (trs == "kulisch")
    tr = Transport::KULISCH;
  else if (trs == "auto")
    tr = Transport::AUTO;
  else
    cli::fail("unknown --transport '" + trs + "' (rounded kulisch auto)");
  const auto ex = exceptions_from_name(a.str("--exceptions", "ieee"));
  if (!ex) cli::fail("unknown --exceptions '" + a.str("--exceptions") + "' (ieee saturate)");
  const std::string values = a.str("--values", "gradient");
  if (values != "gradient" && values != "full" && values != "cancel" && values != "specials")
    cli::fail("unknown --values '" + values + "' (gradient full cancel specials)");
  const std::string order = a.str("--order", "round_robin");
  if (order != "round_robin" && order != "random" && order != "reverse")
    cli::fail("unknown --order '" + order + "' (round_robin random reverse)");
  const uint32_t ops = uint32_t(a.num("--ops", 1, 1u << 20, 1));
  const uint32_t op_base = uint32_t(a.num("--op-base", 0, 0xFFFFFFFFu, 0));
  const uint32_t elements = uint32_t(a.num("--elements", 1, 1u << 24, 1024));
  const uint32_t mtu = uint32_t(a.num("--mtu", 128, 9000, 1500));
  const uint32_t esz = info(*dt).bytes;
  // Size chunks for the larger of CONTRIB and RESULT: a RESULT carries out_dtype
  // elements and may carry a status byte per element (the sideband).
  const uint32_t per_elem = std::max(esz, uint32_t(info(*ot).bytes) + 1);
  const uint32_t max_chunk = std::min<uint32_t>(65535, (mtu - 20 - 8 - uint32_t(wire::kHeaderSize)) / per_elem);
  const uint32_t chunk = uint32_t(a.num("--chunk", 1, 65535, std::min(max_chunk, elements)));
  if (chunk > max_chunk)
    cli::fail("--chunk " + std::to_string(chunk) + " does not fit a " + std::to_string(mtu) + "-byte MTU: at most " +
              std::to_string(max_chunk) + " " + dts + " elements with their RESULT (raise --mtu for jumbo frames)");
  const double loss = a.real("--loss", 0, 1, 0), dup = a.real("--dup", 0, 1, 0), reorder = a.real("--reorder", 0, 1, 0);
  const double late = a.real("--late-retransmit", 0, 1, 0);
  const uint32_t n_malformed = uint32_t(a.num("--malformed", 0, 1u << 20, 0));
  const uint32_t n_foreign = uint32_t(a.num("--foreign", 0, 1u << 20, 0));
  const std::string pcap_dir = a.str("--pcap-dir"), merged = a.str("--merged"), expected = a.str("--expected");
  if (pcap_dir.empty() && merged.empty()) cli::fail("nothing to write: give --pcap-dir DIR and/or --merged FILE");
  std::mt19937_64 rng(a.num("--seed", 0, ~uint64_t(0), 1));

  // The job's ranks, each a member of exactly one switch.
  uint16_t group = 0;
  std::map<uint16_t, Rank> ranks;
  for (const auto& c : cfgs) {
    const JobConfig* j = c.job(job_id);
    if (!j) continue;
    if (group && j->group != group)
      cli::fail(c.path + ": job " + std::to_string(job_id) + " has group " + std::to_string(j->group) +
                " but another config says " + std::to_string(group));
    group = j->group;
    for (const auto& m : j->members) {
      if (ranks.count(m.rank))
        cli::fail(c.path + ": rank " + std::to_string(m.rank) + " of job " + std::to_string(job_id) +
                  " is a member in two configs");
      port_endpoint(c, m.port);
      ranks[m.rank] = Rank{m.rank, &c, &m};
    }
  }
  if (!group) cli::fail("job " + std::to_string(job_id) + " is in none of the configs given");
  if (ranks.size() != group)
    cli::fail("job " + std::to_string(job_id) + " has group " + std::to_string(group) + " but the configs name " +
              std::to_string(ranks.size()) + " member ranks: every rank must be a member somewhere");

  OpDesc desc;
  desc.dtype = *dt;
  desc.out = *ot;
  desc.policy = *pol;
  desc.exceptions = *ex;
  desc.group = group;
  if (auto err = admission_error(desc, kMaxWidth)) cli::fail(*err);

  const uint32_t n_chunks = (elements + chunk - 1) / chunk;
  std::vector<Packet> pkts;
  std::map<std::string, uint64_t> stats;
  std::uniform_real_distribution<double> U;
  uint16_t ip_id = 0;

  auto contrib = [&](const Rank& r, uint32_t op, uint32_t c, const std::vector<uint32_t>& codes, uint8_t flags) {
    wire::Header h;
    h.kind = wire::Kind::CONTRIB;
    h.job = job_id;
    h.op = op;
    h.chunk = c;
    h.sender = r.rank;
    h.group = group;
    h.terms = 1;
    const uint32_t first = c * chunk, cnt = std::min(chunk, elements - first);
    h.count = uint16_t(cnt);
    h.dtype = *dt;
    h.out_dtype = *ot;
    h.policy = *pol;
    h.encoding = wire::Encoding::DTYPE;
    h.transport = tr;
    h.exceptions = *ex;
    h.flags = uint8_t(flags | (c + 1 == n_chunks ? wire::hflag::LAST_CHUNK : 0));
    std::vector<uint8_t> body(size_t(cnt) * esz);
    for (uint32_t i = 0; i < cnt; ++i) store_bits(*dt, body.data() + i * esz, codes[first + i]);
    Packet p;
    p.frame.resize(wire::kMaxFrame);
    const size_t len = wire::build(p.frame.data(), p.frame.size(), r.member->addr, port_endpoint(*r.sw, r.member->port),
                                   h, body, ip_id++);
    p.frame.resize(len);
    p.sw = r.sw;
    p.port = r.member->port;
    p.rank = r.rank;
    p.op = op;
    p.chunk = c;
    return p;
  };

  std::vector<std::vector<std::vector<uint32_t>>> all_values;  // [op][rank][element]
  std::vector<std::vector<std::vector<uint16_t>>> arrival;  // [op][chunk]: ranks in the order their first copy counts
  for (uint32_t o = 0; o < ops; ++o) {
    const uint32_t op = op_base + o;
    all_values.push_back(make_values(*dt, values, group, elements, rng));
    const auto& v = all_values.back();
    arrival.emplace_back(n_chunks);
    std::vector<Packet> retrans;
    for (uint32_t c = 0; c < n_chunks; ++c) {
      std::vector<uint16_t> ord(group);
      for (uint16_t r = 0; r < group; ++r) ord[r] = r;
      if (order == "reverse") std::reverse(ord.begin(), ord.end());
      if (order == "random") std::shuffle(ord.begin(), ord.end(), rng);
      for (uint16_t r : ord) {
        Packet p = contrib(ranks[r], op, c, v[r], 0);
        if (loss > 0 && U(rng) < loss) {  // lost on the way; the rank's timeout re-sends it
          ++stats["lost"];
          Packet rp = contrib(ranks[r], op, c, v[r], wire::hflag::RETRANSMIT);
          rp.counts = true;
          retrans.push_back(std::move(rp));
          continue;
        }
        p.counts = true;
        arrival[o][c].push_back(r);
        const bool twice = dup > 0 && U(rng) < dup;
        pkts.push_back(p);
        ++stats["contrib"];
        if (twice) {
          pkts.push_back(p);
          ++stats["duplicates"];
        }
      }
    }
    for (auto& rp : retrans) {
      arrival[o][rp.chunk].push_back(uint16_t(rp.rank));
      pkts.push_back(std::move(rp));
      ++stats["contrib"];
      ++stats["retransmits"];
    }
    // After the op completes: ranks that lost their RESULT ask again.
    for (uint16_t r = 0; r < group; ++r)
      if (late > 0 && U(rng) < late) {
        const uint32_t c = uint32_t(rng() % n_chunks);
        pkts.push_back(contrib(ranks[r], op, c, v[r], wire::hflag::RETRANSMIT));
        ++stats["late_retransmits"];
      }
  }

  // Noise: malformed packets from members, and packets the switch must not accept.
  const Rank& any = ranks.begin()->second;
  for (uint32_t k = 0; k < n_malformed; ++k) {
    const Rank& r = ranks[uint16_t(rng() % group)];
    Packet p = contrib(r, op_base, 0, all_values[0][r.rank], 0);
    uint8_t* ip = p.frame.data() + wire::kEthSize;
    uint8_t* hdr = ip + wire::kIpv4MinSize + wire::kUdpSize;
    static const char* const kinds[] = {"bad_magic",       "bad_version",      "bad_kind",       "bad_dtype",
                                        "ip_bad_checksum", "udp_bad_checksum", "payload_length", "bad_count"};
    const std::string kind = kinds[k % 8];
    auto fix_udp = [&] {
      hdr[-2] = hdr[-1] = 0;
      const uint16_t len = uint16_t(hdr[-4] << 8 | hdr[-3]);
      const uint16_t cs = wire::udp_checksum(r.member->addr.ip, port_endpoint(*r.sw, r.member->port).ip, hdr - 8, len);
      hdr[-2] = uint8_t(cs >> 8);
      hdr[-1] = uint8_t(cs);
    };
    if (kind == "bad_magic")
      hdr[0] ^= 0xFF, fix_udp();
    else if (kind == "bad_version")
      hdr[2] = 9, fix_udp();
    else if (kind == "bad_kind")
      hdr[3] = 0x77, fix_udp();
    else if (kind == "bad_dtype")
      hdr[24] = 0x42, fix_udp();
    else if (kind == "ip_bad_checksum")
      ip[10] ^= 0x5A;
    else if (kind == "udp_bad_checksum")
      hdr[-1] ^= 0x5A, hdr[-1] = hdr[-1] ? hdr[-1] : 1;
    else if (kind == "payload_length")
      hdr[23] = uint8_t(hdr[23] + 1), fix_udp();  // count one more than the body holds
    else if (kind == "bad_count")
      hdr[22] = hdr[23] = 0, fix_udp();
    p.rank = -1;
    pkts.push_back(std::move(p));
    ++stats["malformed." + kind];
  }
  for (uint32_t k = 0; k < n_foreign; ++k) {
    const Rank& r = ranks[uint16_t(rng() % group)];
    const std::string kind = k % 3 == 0 ? "unknown_source" : k % 3 == 1 ? "foreign_job" : "spoofed_rank";
    Rank fake = r;
    MemberConfig m = *r.member;
    if (kind == "unknown_source") {
      m.addr.ip = 0xC6336401 + k;  // 198.51.100.0/24: documentation addresses, never a member
      m.addr.mac = {0x02, 0xBA, 0xD0, 0x00, uint8_t(k >> 8), uint8_t(k)};
    }
    fake.member = &m;
    if (kind == "spoofed_rank") fake.rank = uint16_t((r.rank + 1) % group);  // r's address, another rank's id
    if (kind == "spoofed_rank" && group == 1) continue;
    Packet p = contrib(fake, op_base, 0, all_values[0][fake.rank], 0);
    if (kind == "foreign_job") {
      uint8_t* hdr = p.frame.data() + wire::kEthSize + wire::kIpv4MinSize + wire::kUdpSize;
      const uint32_t other = job_id ^ 0x80000000u;
      hdr[4] = uint8_t(other >> 24), hdr[5] = uint8_t(other >> 16), hdr[6] = uint8_t(other >> 8),
      hdr[7] = uint8_t(other);
      hdr[-2] = hdr[-1] = 0;
      const uint16_t cs = wire::udp_checksum(m.addr.ip, port_endpoint(*r.sw, r.member->port).ip, hdr - 8,
                                             uint16_t(hdr[-4] << 8 | hdr[-3]));
      hdr[-2] = uint8_t(cs >> 8), hdr[-1] = uint8_t(cs);
    }
    p.rank = -1;
    p.counts = false;
    pkts.push_back(std::move(p));
    ++stats["foreign." + kind];
  }
  (void)any;
  // Noise goes anywhere in the capture; reordering moves genuine packets too.
  const size_t genuine = pkts.size() - (n_malformed + n_foreign);
  for (size_t i = genuine; i < pkts.size(); ++i) {
    const size_t j = rng() % (i + 1);
    std::rotate(pkts.begin() + long(j), pkts.begin() + long(i), pkts.begin() + long(i) + 1);
  }
  if (reorder > 0)
    for (size_t i = 0; i + 1 < pkts.size(); ++i)
      if (U(rng) < reorder) {
        std::swap(pkts[i], pkts[i + 1 + rng() % (pkts.size() - i - 1)]);
        ++stats["reordered"];
      }
  // The order in which each chunk's first copies arrive, whatever kind of copy
  // (original, duplicate, retransmit): FP32_ARRIVAL's order at a single switch.
  for (auto& op_arr : arrival)
    for (auto& c : op_arr) c.clear();
  {
    std::map<std::tuple<uint32_t, uint32_t, int>, bool> seen;
    for (const auto& p : pkts) {
      if (p.rank < 0) continue;
      if (seen[{p.op, p.chunk, p.rank}]) continue;
      seen[{p.op, p.chunk, p.rank}] = true;
      arrival[p.op - op_base][p.chunk].push_back(uint16_t(p.rank));
    }
  }

  // Captures.
  uint64_t usec = 1;
  if (!pcap_dir.empty()) {
    std::error_code ec;
    fs::create_directories(pcap_dir, ec);
    if (ec) cli::fail("cannot create " + pcap_dir + ": " + ec.message());
    std::map<std::pair<uint16_t, uint16_t>, std::unique_ptr<PcapWriter>> w;
    for (const auto& c : cfgs)
      for (const auto& p : c.ports)
        w[{c.id, p.id}] = std::make_unique<PcapWriter>(pcap_dir + "/sw" + std::to_string(c.id) + ".port" +
                                                       std::to_string(p.id) + ".pcap");
    for (const auto& p : pkts) w.at({p.sw->id, p.port})->write(p.frame, usec++);
  }
  if (!merged.empty()) {
    if (const fs::path dir = fs::path(merged).parent_path(); !dir.empty()) {
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) cli::fail("cannot create " + dir.string() + ": " + ec.message());
    }
    PcapWriter m(merged);
    usec = 1;
    for (const auto& p : pkts) m.write(p.frame, usec++);
  }

  // Golden results from the reference model, per chunk in its arrival order.
  if (!expected.empty()) {
    std::error_code ec;
    fs::create_directories(expected, ec);
    if (ec) cli::fail("cannot create " + expected + ": " + ec.message());
    std::ostringstream man;
    man << "{\"job\":" << job_id << ",\"group\":" << group << ",\"dtype\":\"" << dts << "\",\"out_dtype\":\"" << ots
        << "\",\"policy\":\"" << name(*pol) << "\",\"transport\":\"" << trs << "\",\"exceptions\":\"" << name(*ex)
        << "\",\"elements\":" << elements << ",\"chunk\":" << chunk << ",\"chunks\":" << n_chunks << ",\"values\":\""
        << values << "\",\"order\":\"" << order << "\",\"packets\":" << pkts.size() << ",\"stats\":{";
    bool first = true;
    for (const auto& [k, v] : stats) man << (first ? "" : ",") << "\"" << json_escape(k) << "\":" << v, first = false;
    man << "},\"ops\":[";
    const uint32_t osz = info(*ot).bytes;
    for (uint32_t o = 0; o < ops; ++o) {
      const uint32_t op = op_base + o;
      std::vector<uint8_t> out(size_t(elements) * osz), flags(elements);
      for (uint32_t c = 0; c < n_chunks; ++c) {
        const uint32_t first_e = c * chunk, cnt = std::min(chunk, elements - first_e);
        desc.lanes = cnt;
        auto acc = make_accumulator(desc);
        std::vector<uint8_t> buf(size_t(cnt) * esz);
        for (uint16_t r : arrival[o][c]) {
          for (uint32_t i = 0; i < cnt; ++i) store_bits(*dt, buf.data() + i * esz, all_values[o][r][first_e + i]);
          acc->add(buf.data(), r);
        }
        acc->finalize(out.data() + size_t(first_e) * osz, flags.data() + first_e);
      }
      const std::string base = expected + "/op" + std::to_string(op);
      std::ofstream(base + ".out", std::ios::binary).write(reinterpret_cast<const char*>(out.data()), long(out.size()));
      std::ofstream(base + ".flags", std::ios::binary)
          .write(reinterpret_cast<const char*>(flags.data()), long(flags.size()));
      for (uint16_t r = 0; r < group; ++r) {
        std::vector<uint8_t> in(size_t(elements) * esz);
        for (uint32_t i = 0; i < elements; ++i) store_bits(*dt, in.data() + i * esz, all_values[o][r][i]);
        std::ofstream(expected + "/rank" + std::to_string(r) + ".op" + std::to_string(op) + ".in", std::ios::binary)
            .write(reinterpret_cast<const char*>(in.data()), long(in.size()));
      }
      size_t nf[3] = {0, 0, 0};
      for (uint8_t f : flags)
        nf[0] += (f & flag::OVERFLOW) != 0, nf[1] += (f & flag::INVALID) != 0, nf[2] += (f & flag::NAN_INPUT) != 0;
      man << (o ? "," : "") << "{\"op\":" << op << ",\"result\":\"op" << op << ".out\",\"flags\":\"op" << op
          << ".flags\",\"overflow\":" << nf[0] << ",\"invalid\":" << nf[1] << ",\"nan_input\":" << nf[2]
          << ",\"arrival\":[";
      for (uint32_t c = 0; c < n_chunks; ++c) {
        man << (c ? "," : "") << "[";
        for (size_t k = 0; k < arrival[o][c].size(); ++k) man << (k ? "," : "") << arrival[o][c][k];
        man << "]";
      }
      man << "]}";
    }
    man << "]}\n";
    std::ofstream(expected + "/manifest.json") << man.str();
  }
  std::fprintf(stderr, "prism-gen: %zu packets, job %u, %u ranks, %u ops x %u chunks of %u %s\n", pkts.size(), job_id,
               group, ops, n_chunks, chunk, dts.c_str());
  return 0;
}

int cmd_dump(const cli::Args& a) {
  if (a.positional.size() != 1) cli::fail("dump needs one capture: prism-gen dump FILE.pcap");
  const uint16_t port = uint16_t(a.num("--port", 1, 65535, wire::kDefaultPort));
  uint64_t idx = 0;
  try {
    read_pcap(a.positional[0], [&](std::span<const uint8_t> f, uint64_t usec) {
      wire::Parsed p;
      const wire::Refusal r = wire::parse(f, port, &p);
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

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
      std::fputs(kUsage, argc < 2 ? stderr : stdout);
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
    if (cmd == "dump") return cmd_dump(cli::Args(argc, argv, 2, {"--port"}, {}));
    cli::fail("unknown command '" + cmd + "': use write or dump (see --help)");
  } catch (const cli::Error& e) {
    std::fprintf(stderr, "prism-gen: %s\n", e.msg.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism-gen: %s\n", e.what());
    return 2;
  }
}
