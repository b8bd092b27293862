// prism-bench pipeline: what the switch's real pipeline sustains per core,
// against forwarding the same packets, in one run.
//
// Each measurement builds a switch (pipe::Runtime: the same stages, rings and
// lcore loop as prism-switch) whose ports are net_pcap devices in infinite_rx
// mode: the pre-built contributions are read from a capture once, at setup,
// and replayed from memory for as long as the measurement lasts (each RX
// copies the frame into a fresh mbuf, as a NIC's DMA would write it). What
// the switch sends is counted and freed (net_pcap's TX drop). An RX callback
// gives each replayed round of ops fresh op ids (the switch would take a
// repeated id for a retransmission); a TX callback counts RESULTs and checks
// them against the reference computed here before any figure is reported.
//
// Baselines, on the same devices and the same captures:
//   forward  the same pipeline with the reducers replaced by a forwarder:
//            parse + admit + VOQ ring + TX ring + TX, no slot, no arithmetic
//   ideal    forward plus the data work any reducer must do for a
//            contribution: its elements added into an accumulator that stays
//            in L1, and a result body written (the bench's IdealWork, app/bench_baselines.hpp). A
//            ceiling for every policy: what no reducer design can beat on
//            these packets, lcores and devices
//   testpmd  dpdk-testpmd in io forwarding mode, one forwarding lcore
//
// Output: a table, JSON (--json) and a gnuplot PNG (--plot). Targets are
// reported, never enforced: timings on a shared machine drift, so compare
// the ratios measured in one run.
#include <poll.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "arith/accumulator.hpp"
#include "bench_baselines.hpp"
#include "bench_data.hpp"
#include "cli.hpp"
#include "config/config.hpp"
#include "output_file.hpp"
#include "pcap_io.hpp"
#include "proto/packet.hpp"
#include "proto/steer.hpp"
#include "runtime.hpp"
#include "switch/directory.hpp"

namespace prism::bench {
namespace {

using cli::fail;

std::string pipeline_usage();  // below, from the tables of modes and formats
const char* kPipelineUsage =
    "usage: prism-bench pipeline [options]\n"
    "Drives the switch pipeline (RX, parse, admit, VOQ rings, arbiter, reducers, TX) at full speed\n"
    "from contributions replayed from memory, and measures it against forward-only and dpdk-testpmd\n"
    "io forwarding on the same devices and packets. Every run's RESULTs are checked against the\n"
    "reference before a figure is reported.\n"
    "\n"
    "  --policies LIST  @POLICIES@ (default forward,fp32_arrival,kulisch)\n"
    "                   ideal: forward-only plus only the data work any reducer must do (the elements\n"
    "                   added into an accumulator that stays in L1, a result body written); a ceiling\n"
    "                   for every policy, float formats only\n"
    "  --dtypes LIST    @DTYPES@ (default fp32)\n"
    "  --payloads LIST  bytes of elements per contribution, 64..8192 (default 1024)\n"
    "  --ranks LIST     R, contributions per op, 2..1024 (default 8)\n"
    "  --lcores LIST    lcores running the switch (default 1,2): shared nothing, each owns a shard\n"
    "                   and polls its own RX queue of every port (the captures are steered: queue q\n"
    "                   holds lcore q's shards' contributions, addressed by the steering rule)\n"
    "  --layouts LIST   shared_nothing, pipelined (RX and TX on the main lcore, N-1 reducer lcores,\n"
    "                   through rings: the earlier layout) (default shared_nothing; both in the sweep)\n"
    "                   Without any of the five lists, the standard sweep runs: fp32 at 256..8192 B\n"
    "                   and R = 8, 64, and fp16, bf16, e4m3fn at 1 KiB, on 1 and 2 lcores, both layouts.\n"
    "  --ports N        switch ports the ranks are spread over (default 2)\n"
    "  --fanout MODE    how a RESULT goes to its R ranks: copy (a whole frame each, made by the\n"
    "                   reducer; the default), chain (a header mbuf each, chained to one shared\n"
    "                   payload; the bench's ports only free what they are sent, so they take\n"
    "                   chains)\n"
    "  --no-udp-checksum  contributions carry UDP checksum 0 and the job accepts that (udp_checksum:\n"
    "                   optional): the switch sums nothing of them (compare with and without)\n"
    "  --staged         keep the rings between stages with lcores=1 (by default one lcore runs each\n"
    "                   packet to completion, RX -> reducer -> TX, as prism-switch does)\n"
    "  --time S         measured seconds per run (default 1.0); --warmup S before it (default 0.3)\n"
    "  --repeat N       runs per case, interleaved; the median is reported (default 3)\n"
    "  --testpmd PATH   dpdk-testpmd to compare with (default: dpdk-testpmd on PATH)\n"
    "  --no-testpmd     skip the testpmd baseline\n"
    "  --no-forward     skip the forward-only baseline (one policy alone, e.g. under a profiler)\n"
    "  --sampled-checks check one RESULT in 256 from the start, not every RESULT of the first round\n"
    "                   (under a profiler, where the full check would take most of the run)\n"
    "  --json FILE      one JSON object per measurement (an array)\n"
    "  --plot FILE.png  Gbit/s against lcores per policy and layout, 1 KiB fp32, R = 8 (needs gnuplot)\n"
    "  --work-dir DIR   where the captures are written (default a fresh folder in /tmp, removed after)\n"
    "  --eal ARGS       extra EAL arguments (default: --no-huge -m 1024 --no-pci)\n"
    "  --quick          a smoke test: 2 payloads, 2 formats, short windows (figures not meaningful)\n"
    "  --inject-fault   self-test of the checks: one contribution per round has its signs flipped, so\n"
    "                   every policy's RESULT check must fail (exit 3)\n"
    "Exit status: 0 when every RESULT checked out and nothing was dropped; 3 when a check failed;\n"
    "2 for a usage error.\n";

constexpr int kCheckFailed = 3;
constexpr uint32_t kJob = 7;
// Fields the RX and TX callbacks read and patch in the frames the bench built (no VLAN tag).
constexpr size_t kOpOffset = wire::frame::at(wire::off::op);
constexpr size_t kUdpSumOffset = wire::frame::udp_checksum;
constexpr size_t kKindOffset = wire::frame::at(wire::off::kind);

// --- what is measured ---------------------------------------------------------

// What one measurement runs: a baseline, one of the switch's policies (named
// as the policy is), or testpmd. The first five are what --policies selects.
enum class Mode : uint8_t { FORWARD, IDEAL, ARRIVAL, KULISCH, BINOMIAL, TESTPMD, TESTPMD_CSUM, kCount };
inline constexpr Entry<Mode> kModes[] = {
    {Mode::FORWARD, "forward", "parse, admit and send each contribution back out: no slot, no arithmetic"},
    {Mode::IDEAL, "ideal", "forward-only plus only the data work any reducer must do"},
    {Mode::ARRIVAL, entry(Policy::FP32_ARRIVAL)->name, entry(Policy::FP32_ARRIVAL)->doc},
    {Mode::KULISCH, entry(Policy::KULISCH_FIXED)->name, entry(Policy::KULISCH_FIXED)->doc},
    {Mode::BINOMIAL, entry(Policy::FP32_BINOMIAL)->name, entry(Policy::FP32_BINOMIAL)->doc},
    {Mode::TESTPMD, "testpmd", "dpdk-testpmd io forwarding"},
    {Mode::TESTPMD_CSUM, "testpmd_csum", "dpdk-testpmd csum forwarding (checksums recomputed in software)"},
};
static_assert(std::size(kModes) == size_t(Mode::kCount), "every Mode has a row in kModes");
constexpr std::span<const Entry<Mode>> entries(Mode) { return kModes; }
constexpr std::span<const Entry<Mode>> kSelectable(kModes, 5);  // --policies
bool is_testpmd(Mode m) { return m >= Mode::TESTPMD; }
const char* mode_name(Mode m) { return name(m); }
Policy policy_of(Mode m) {
  return m == Mode::KULISCH    ? Policy::KULISCH_FIXED
         : m == Mode::BINOMIAL ? Policy::FP32_BINOMIAL
                               : Policy::FP32_ARRIVAL;
}

std::string pipeline_usage() {
  std::string u = kPipelineUsage, policies;
  for (const auto& m : kSelectable) policies += (policies.empty() ? "" : " ") + std::string(m.name);
  auto put = [&](const std::string& key, const std::string& v) { u.replace(u.find(key), key.size(), v); };
  put("@POLICIES@", policies);
  put("@DTYPES@", choices<Format>());
  return u;
}

// The packets a case runs on: forward, the policies and testpmd on the same
// (dtype, payload, ranks) share them but for the header's policy byte.
struct Shape {
  Format dtype;
  uint32_t payload, ranks, lcores;
  bool pipelined = false;  // the layout: shared nothing (each lcore RX -> reduce -> TX), or RX/TX apart from reducers
  bool operator<(const Shape& o) const {
    return std::tie(dtype, payload, ranks, lcores, pipelined) <
           std::tie(o.dtype, o.payload, o.ranks, o.lcores, o.pipelined);
  }
  // RX queues per port: one per lcore, shared nothing (the captures are steered: queue q holds
  // the contributions of lcore q's shards, as a NIC's rte_flow rules would deliver them).
  uint32_t queues() const { return pipelined ? 1 : lcores; }
  const char* layout() const { return pipelined ? "pipelined" : "shared_nothing"; }
};

struct Case {
  Mode mode;
  Shape s;
  std::string section;
};

struct Args {
  std::vector<Case> cases;
  uint32_t ports = 2, repeat = 3;
  double time_s = 1.0, warmup_s = 0.3;
  std::string testpmd, json, plot, work_dir, eal;
  bool use_testpmd = true, quick = false, inject_fault = false, sampled_checks = false, staged = false;
  bool no_udp_checksum = false;         // contributions sent with UDP checksum 0, to a job with udp_checksum: optional
  std::string fanout = "copy";          // --fanout: copy or chain
  std::vector<bool> layouts = {false};  // --layouts: Shape::pipelined values
  uint32_t max_lcores = 1;
};

template <class T, class F>
std::vector<T> parse_list(const cli::Args& a, const std::string& key, F conv, std::vector<T> def) {
  if (!a.has(key)) return def;
  std::vector<T> v;
  std::stringstream ss(a.str(key));
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    v.push_back(conv(item));
  }
  if (v.empty()) fail(key + " needs at least one value");
  return v;
}

uint32_t to_uint(const std::string& key, const std::string& s, uint32_t lo, uint32_t hi) {
  char* end = nullptr;
  const unsigned long v = std::strtoul(s.c_str(), &end, 10);
  if (s.empty() || *end || s[0] == '-' || v < lo || v > hi)
    fail("bad " + key + " value '" + s + "': give a whole number in " + std::to_string(lo) + ".." + std::to_string(hi));
  return uint32_t(v);
}

Args parse_args(int argc, char** argv) {
  const cli::Args a(argc, argv, 0,
                    {"--policies", "--dtypes", "--payloads", "--ranks", "--lcores", "--ports", "--time", "--warmup",
                     "--repeat", "--testpmd", "--json", "--plot", "--work-dir", "--eal", "--fanout", "--layouts"},
                    {"--no-testpmd", "--no-forward", "--sampled-checks", "--quick", "--inject-fault", "--staged",
                     "--no-udp-checksum", "--help", "-h"});
  if (a.has("--help") || a.has("-h")) {
    std::fputs(pipeline_usage().c_str(), stdout);
    std::exit(0);
  }
  if (!a.positional.empty()) fail("unexpected argument '" + a.positional[0] + "' (see prism-bench pipeline --help)");
  Args r;
  r.quick = a.has("--quick");
  r.inject_fault = a.has("--inject-fault");
  r.ports = uint32_t(a.num("--ports", 1, 16, 2));
  r.repeat = uint32_t(a.num("--repeat", 1, 50, r.quick ? 1 : 3));
  r.time_s = a.real("--time", 0.01, 60, r.quick ? 0.15 : 1.0);
  r.warmup_s = a.real("--warmup", 0, 60, r.quick ? 0.05 : 0.3);
  r.json = a.str("--json");
  // Before the run, not after it: a path that cannot be written fails now.
  if (!r.json.empty()) app::check_writable(r.json, "--json");
  r.plot = a.str("--plot");
  r.work_dir = a.str("--work-dir");
  r.eal = a.str("--eal");
  r.use_testpmd = !a.has("--no-testpmd");
  r.fanout = a.str("--fanout", "copy");
  if (!from_name<Fanout>(r.fanout)) fail("--fanout '" + r.fanout + "': use " + choices<Fanout>(" or "));
  r.staged = a.has("--staged");
  r.no_udp_checksum = a.has("--no-udp-checksum");
  const bool pair_forward = !a.has("--no-forward");
  r.sampled_checks = a.has("--sampled-checks");
  r.testpmd = a.str("--testpmd", "dpdk-testpmd");
  if (!r.plot.empty() && r.plot.size() < 5) fail("--plot wants a file name ending in .png");
  if (!r.plot.empty() && r.plot.substr(r.plot.size() - 4) != ".png")
    fail("--plot '" + r.plot + "': give a file name ending in .png");
  if (!r.plot.empty()) app::check_writable(r.plot, "--plot");

  auto mode = [](const std::string& s) {
    std::string names;
    for (const auto& m : kSelectable) {
      if (s == m.name) return m.value;
      names += (names.empty() ? "" : " ") + std::string(m.name);
    }
    fail("unknown policy '" + s + "': use one of " + names);
  };
  auto dtype = [](const std::string& s) {
    auto f = from_name<Format>(s);
    if (!f) fail("unknown dtype '" + s + "': use one of " + choices<Format>());
    return *f;
  };
  auto payload = [](const std::string& s) { return to_uint("--payloads", s, 64, 8192); };
  auto ranks = [](const std::string& s) { return to_uint("--ranks", s, 2, 1024); };  // a reduction of one is no op
  auto lcores = [](const std::string& s) { return to_uint("--lcores", s, 1, 64); };

  auto layout = [](const std::string& s) {
    const auto l = from_name<Layout>(s);
    if (!l) fail("unknown layout '" + s + "': use " + choices<Layout>(" or "));
    return *l == Layout::PIPELINED;
  };
  r.layouts = parse_list<bool>(a, "--layouts", layout, {false});
  const bool custom =
      a.has("--policies") || a.has("--dtypes") || a.has("--payloads") || a.has("--ranks") || a.has("--lcores");
  const auto modes = parse_list<Mode>(a, "--policies", mode, {Mode::FORWARD, Mode::ARRIVAL, Mode::KULISCH});
  auto add = [&](const std::string& section, std::vector<Mode> ms, std::vector<Format> ds, std::vector<uint32_t> ps,
                 std::vector<uint32_t> rs, std::vector<uint32_t> ls) {
    // Lcores, layouts and policies innermost: the runs that a ratio pairs (a
    // policy and its baselines, one lcore and two) follow each other within
    // seconds, so the machine's drift between them stays small. One lcore
    // is one layout (it runs everything): measured once, as shared nothing.
    for (Format d : ds)
      for (uint32_t p : ps)
        for (uint32_t rk : rs)
          for (uint32_t l : ls)
            for (bool pl : r.layouts) {
              if (pl && l == 1 && std::find(r.layouts.begin(), r.layouts.end(), false) != r.layouts.end()) continue;
              for (Mode m : ms) {
                if (m != Mode::FORWARD && !is_float(d) && m != Mode::KULISCH) continue;  // integers: exact sums only
                r.cases.push_back({m, {d, p, rk, l, pl && l > 1}, section});
              }
            }
  };
  const uint32_t cpus = std::max(1u, std::thread::hardware_concurrency());
  const std::vector<uint32_t> one_two = cpus >= 2 ? std::vector<uint32_t>{1, 2} : std::vector<uint32_t>{1};
  if (custom) {
    add("custom", modes, parse_list<Format>(a, "--dtypes", dtype, {Format::FP32}),
        parse_list<uint32_t>(a, "--payloads", payload, {1024}), parse_list<uint32_t>(a, "--ranks", ranks, {8}),
        parse_list<uint32_t>(a, "--lcores", lcores, one_two));
  } else if (r.quick) {
    add("quick", modes, {Format::FP32, Format::FP16}, {256, 1024}, {8}, one_two);
  } else {
    // The standard sweep: the one-lcore cost against the ideal, and what a second lcore adds, per
    // payload and R (fp32), and per format; the pipelined layout beside shared nothing (--layouts).
    if (!a.has("--layouts")) r.layouts = {false, true};
    add("payload", {Mode::FORWARD, Mode::IDEAL, Mode::ARRIVAL, Mode::KULISCH}, {Format::FP32}, {256, 1024, 4096, 8192},
        {8, 64}, one_two);
    add("format", {Mode::FORWARD, Mode::IDEAL, Mode::ARRIVAL, Mode::KULISCH},
        {Format::FP16, Format::BF16, Format::E4M3FN}, {1024}, {8}, one_two);
  }
  // Every policy case is paired with forward-only on its shape (unless --no-forward).
  std::vector<Case> all;
  for (const Case& c : r.cases) {
    const bool have = std::any_of(
        all.begin(), all.end(), [&](const Case& x) { return x.mode == Mode::FORWARD && !(x.s < c.s) && !(c.s < x.s); });
    if (!have && (pair_forward || c.mode == Mode::FORWARD)) all.push_back({Mode::FORWARD, c.s, c.section});
    if (c.mode != Mode::FORWARD) all.push_back(c);
  }
  r.cases = all;
  for (const Case& c : r.cases) r.max_lcores = std::max(r.max_lcores, c.s.lcores);
  if (r.max_lcores > cpus)
    fail("--lcores " + std::to_string(r.max_lcores) + ": this machine has " + std::to_string(cpus) +
         " CPUs; polling lcores must not share one");
  return r;
}

// --- the packets and the reference ------------------------------------------

uint32_t elements_of(const Shape& s) { return std::max<uint32_t>(1, s.payload / info(s.dtype).bytes); }
Format out_of(Format d) { return d == Format::INT8 ? Format::INT32 : d; }

// Ops per replayed round: enough that the captures hold about 2048 frames.
// A multiple of the queues, so that a replayed round's fresh op ids (op + round * ops) keep each
// op's shard, and so its queue.
uint32_t ops_of(const Shape& s) {
  const uint32_t q = s.queues();
  return (std::clamp<uint32_t>(2048 / s.ranks, 4, 256) + q - 1) / q * q;
}

uint32_t rank_ip(uint32_t r) { return (10u << 24) | (1u << 16) | (r + 1); }
wire::Mac rank_mac(uint32_t r) { return {0x02, 0, 0, 0x01, uint8_t((r + 1) >> 8), uint8_t(r + 1)}; }

// The switch's configuration for one run, as a value: port p's queue q replays
// `pcap[p * queues + q]`. Shared nothing: a shard per lcore; pipelined: per reducer lcore.
SwitchConfig bench_config(const Shape& s, uint32_t ports, const std::vector<std::string>& pcap, uint32_t run,
                          Fanout fanout, bool no_udp_checksum) {
  SwitchConfig c;
  c.path = "prism-bench";
  c.id = 1;
  c.role = Role::ROOT;
  for (uint32_t p = 0; p < ports; ++p) {
    PortConfig pc;
    pc.id = uint16_t(p);
    pc.device = "net_pcap_b" + std::to_string(run) + "_" + std::to_string(p);
    for (uint32_t q = 0; q < s.queues(); ++q) pc.device += ",rx_pcap=" + pcap[p * s.queues() + q];
    pc.device += ",infinite_rx=1";
    pc.mac = {0x02, 0, 0, 0, 0xff, uint8_t(p)};
    pc.ip = (10u << 24) | (p << 8) | 254;
    c.ports.push_back(pc);
  }
  JobConfig j;
  j.id = kJob;
  j.group = uint16_t(s.ranks);
  j.udp_checksum_optional = no_udp_checksum;
  for (uint32_t r = 0; r < s.ranks; ++r) {
    MemberConfig m;
    m.rank = uint16_t(r);
    m.port = uint16_t(r % ports);
    m.addr = {rank_mac(r), rank_ip(r), wire::kDefaultPort};
    j.members.push_back(m);
  }
  c.jobs.push_back(j);
  // The switch's default retention (retention_ms 1000, retention_mib 64): a completed op's slot is
  // free at once and its RESULT goes to the result log, so millions of ops a second find free slots
  // (slots_high, reported, stays near the ops in flight) while the log lets its oldest results go
  // for room.
  c.ring_size = 1024;
  c.layout = s.pipelined ? Layout::PIPELINED : Layout::SHARED_NOTHING;
  c.reducer_shards = s.pipelined ? std::max<uint32_t>(1, s.lcores - 1) : s.lcores;
  c.slots_per_shard = 4096;
  c.fanout = fanout;
  for (uint32_t l = 0; l < s.lcores; ++l) c.lcores.push_back(l);
  return c;
}

// What a RESULT must carry for one op.
struct Expected {
  std::vector<uint8_t> out;      // the elements (exact policies)
  std::vector<uint8_t> flags;    // per element; empty when no element has one
  std::vector<double> sum, tol;  // FP32_ARRIVAL: the exact sum and the order-independent error bound
};

struct Workload {
  Shape s;
  Mode mode;  // the policy in the headers (forward, ideal and testpmd run on FP32_ARRIVAL's packets)
  uint32_t elements = 0, ops = 0, ports = 0, frame_bytes = 0;
  std::vector<std::string> pcap;    // by port * queues + queue
  std::vector<uint32_t> per_round;  // frames per replayed round, per port and queue (as pcap)
  std::vector<Expected> expect;     // per op of a round
};

// Error bound of a recursive FP32 sum of R terms (Higham, Thm 4.4), plus
// the final rounding into a narrower output format.
double arrival_tol(Format out, uint32_t ranks, double abs_sum, double sum) {
  const FormatInfo& fi = info(out);
  double t = double(ranks) * std::ldexp(abs_sum, -24) * 1.01 + std::ldexp(abs_sum, -50);
  if (out != Format::FP32) t += std::ldexp(std::fabs(sum) + t, -fi.mbits) + std::ldexp(1.0, fi.emin - fi.mbits);
  return t;
}

Workload build_workload(const Shape& s, Mode mode, uint32_t ports, const std::string& dir, uint32_t id,
                        bool no_udp_checksum) {
  Workload w;
  w.s = s;
  w.mode = mode;
  w.ports = ports;
  w.elements = elements_of(s);
  w.ops = ops_of(s);
  const Format out = out_of(s.dtype);
  const uint32_t esz = info(s.dtype).bytes;
  const uint32_t queues = s.queues();
  for (uint32_t p = 0; p < ports; ++p)
    for (uint32_t q = 0; q < queues; ++q)
      w.pcap.push_back(dir + "/w" + std::to_string(id) + ".port" + std::to_string(p) + ".q" + std::to_string(q) +
                       ".pcap");
  const SwitchConfig cfg = bench_config(s, ports, w.pcap, 0, Fanout::COPY, no_udp_checksum);
  const sw::Directory dir_(cfg);
  std::vector<std::unique_ptr<PcapWriter>> pw;
  for (const std::string& f : w.pcap) pw.push_back(std::make_unique<PcapWriter>(f));
  w.per_round.assign(w.pcap.size(), 0);
  OpDesc d;
  d.dtype = s.dtype;
  d.out = out;
  d.policy = policy_of(mode);
  d.group = s.ranks;
  d.lanes = w.elements;
  auto acc = make_accumulator(d);
  std::vector<uint8_t> frame(wire::kFrameOverhead + size_t(w.elements) * esz);
  uint64_t usec = 0;
  for (uint32_t op = 0; op < w.ops; ++op) {
    const std::vector<uint8_t> vals = make_packets(s.dtype, s.ranks, w.elements, 1000 + op, -1);
    Expected e;
    acc->reset();
    if (mode == Mode::ARRIVAL) {
      e.sum.assign(w.elements, 0);
      e.tol.assign(w.elements, 0);
      std::vector<double> abs(w.elements, 0);
      for (uint32_t r = 0; r < s.ranks; ++r)
        for (uint32_t i = 0; i < w.elements; ++i) {
          const double v = to_float(s.dtype, load_bits(s.dtype, vals.data() + (size_t(r) * w.elements + i) * esz));
          e.sum[i] += v;
          abs[i] += std::fabs(v);
        }
      for (uint32_t i = 0; i < w.elements; ++i) e.tol[i] = arrival_tol(out, s.ranks, abs[i], e.sum[i]);
    } else {
      for (uint32_t r = 0; r < s.ranks; ++r) acc->add(vals.data() + size_t(r) * w.elements * esz, r);
      e.out.resize(size_t(w.elements) * info(out).bytes);
      e.flags.resize(w.elements);
      acc->finalize(e.out.data(), e.flags.data());
      if (std::all_of(e.flags.begin(), e.flags.end(), [](uint8_t f) { return f == 0; })) e.flags.clear();
    }
    w.expect.push_back(std::move(e));
    for (uint32_t r = 0; r < s.ranks; ++r) {
      const uint32_t port = r % ports;
      wire::Header h;
      h.kind = wire::Kind::CONTRIB;
      h.job = kJob;
      h.op = op;
      h.chunk = 0;
      h.sender = uint16_t(r);
      h.group = uint16_t(s.ranks);
      h.terms = 1;
      h.count = uint16_t(w.elements);
      h.dtype = s.dtype;
      h.out_dtype = out;
      h.policy = policy_of(mode);
      h.flags = wire::hflag::LAST_CHUNK;
      const std::span<const uint8_t> body(vals.data() + size_t(r) * w.elements * esz, size_t(w.elements) * esz);
      // Addressed by the steering rule, and put on the queue its shard's lcore polls.
      const uint32_t shard = wire::shard_of(h, cfg.reducer_shards);
      wire::Endpoint to = dir_.self(uint16_t(port));
      to.port = wire::shard_port(cfg.udp_port, shard);
      const size_t n = wire::build(frame.data(), frame.size(), cfg.jobs[0].members[r].addr, to, h, body);
      if (!n) throw std::logic_error("internal: a contribution did not fit its frame");
      if (no_udp_checksum) frame[wire::frame::udp_checksum] = frame[wire::frame::udp_checksum + 1] = 0;
      const uint32_t at = port * queues + shard % queues;
      pw[at]->write({frame.data(), n}, usec++);
      ++w.per_round[at];
      w.frame_bytes = uint32_t(n);
    }
  }
  return w;
}

// --- the callbacks on the switch's ports ------------------------------------

// Gives each replayed round of a port's capture fresh op ids: op + round * ops.
// With `fault` (--inject-fault, a self-test of the checks) the first frame
// of every round has every element's sign flipped, checksum fixed: its op's
// RESULT is then wrong and the verifier must say so.
// Cache-line aligned, as Verifier: each is written per packet by the lcore of its queue, and the
// next one in the vector by another lcore.
struct alignas(RTE_CACHE_LINE_SIZE) Rewriter {
  uint64_t round = 0;     // replayed rounds completed on this port
  uint32_t in_round = 0;  // frames seen in the current round (no division per frame)
  uint32_t per_round = 1, ops = 1, esz = 4;
  bool fault = false;
};

void flip_signs(uint8_t* f, size_t len, uint32_t esz) {
  using namespace wire::frame;
  for (size_t at = body + esz - 1; at < len; at += esz) f[at] ^= 0x80;
  f[udp_checksum] = f[udp_checksum + 1] = 0;
  auto be32 = [&](size_t at) {
    return uint32_t(f[at]) << 24 | uint32_t(f[at + 1]) << 16 | uint32_t(f[at + 2]) << 8 | f[at + 3];
  };
  const uint16_t c = wire::udp_checksum(be32(ip_src), be32(ip_dst), f + udp, len - udp);
  f[udp_checksum] = uint8_t(c >> 8);
  f[udp_checksum + 1] = uint8_t(c);
}

inline uint16_t ld16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
inline void st16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}

uint16_t rx_rewrite(uint16_t, uint16_t, rte_mbuf** pkts, uint16_t n, uint16_t, void* arg) {
  auto* rw = static_cast<Rewriter*>(arg);
  for (uint16_t i = 0; i < n; ++i) {
    const uint64_t round = rw->round;
    const bool first_of_round = rw->in_round == 0;
    if (++rw->in_round == rw->per_round) {
      rw->in_round = 0;
      ++rw->round;
    }
    if (rte_pktmbuf_data_len(pkts[i]) < wire::kFrameOverhead) continue;
    uint8_t* f = rte_pktmbuf_mtod(pkts[i], uint8_t*);
    if (rw->fault && first_of_round) flip_signs(f, rte_pktmbuf_data_len(pkts[i]), rw->esz);
    if (!round) continue;
    const uint16_t o_hi = ld16(f + kOpOffset), o_lo = ld16(f + kOpOffset + 2);
    const uint32_t op = (uint32_t(o_hi) << 16 | o_lo) + uint32_t(round * rw->ops);
    const uint16_t n_hi = uint16_t(op >> 16), n_lo = uint16_t(op);
    st16(f + kOpOffset, n_hi);
    st16(f + kOpOffset + 2, n_lo);
    const uint16_t hc = ld16(f + kUdpSumOffset);
    if (hc) {  // RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')
      uint32_t sum = uint16_t(~hc) + uint16_t(~o_hi) + uint16_t(~o_lo) + n_hi + n_lo;
      while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
      const uint16_t c = uint16_t(~sum);
      st16(f + kUdpSumOffset, c ? c : 0xFFFF);
    }
  }
  return n;
}

// Counts what the switch sends; checks RESULTs against the reference: every
// frame of the first round, then one frame in 256 (the check costs TX time).
struct alignas(RTE_CACHE_LINE_SIZE) Verifier {
  const Workload* w = nullptr;
  wire::PortRange udp_port{wire::kDefaultPort, 64};  // forwarded contributions keep their shard's port
  bool forward = false;                              // forward-only or ideal: the contributions come back out
  bool ideal = false;                                // ideal: with the elements (and so the UDP checksum) overwritten
  uint64_t frames = 0, results = 0, checked = 0, bad = 0, full_until = 0;
  uint64_t rewritten = 0;  // ideal: frames whose elements no longer match their UDP checksum
  std::string first_bad;
  std::vector<uint8_t> scratch;
  // The output format's values by code, for the 8- and 16-bit formats that
  // to_float() decodes field by field (fp32 and bf16 are bit moves): the
  // checks run on the TX lcore inside the measured window, and must not cost
  // FP32_ARRIVAL's narrow formats more than KULISCH_FIXED's memcmp.
  std::vector<float> decoded;
  double limit = 0;

  void prepare() {
    const Format out = out_of(w->s.dtype);
    limit = double(to_float(out, info(out).max_finite));
    decoded.clear();
    if (w->mode == Mode::ARRIVAL && is_float(out) && info(out).bytes <= 2 && out != Format::BF16) {
      decoded.resize(size_t(1) << (8 * info(out).bytes));
      for (uint32_t b = 0; b < decoded.size(); ++b) decoded[b] = to_float(out, b);
    }
  }
  double value(Format out, const uint8_t* p) const {
    const uint32_t b = load_bits(out, p);
    return double(decoded.empty() ? to_float(out, b) : decoded[b]);
  }

  void mismatch(const std::string& what) {
    ++bad;
    if (first_bad.empty()) first_bad = what;
  }
  void check(const rte_mbuf* m) {
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    scratch.resize(len);
    const auto* f = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, len, scratch.data()));
    wire::Parsed p;
    const wire::Refusal r = wire::parse({f, len}, udp_port, &p, true, ideal);
    ++checked;
    if (r != wire::Refusal::OK)
      return mismatch(std::string("a frame the switch sent does not parse: ") + wire::name(r));
    // The ideal reducer wrote a body over the elements: the checksum, left as
    // it was, then fails (but for one body in 65536 or so, counted as not rewritten).
    if (wire::Parsed q; ideal && wire::parse({f, len}, udp_port, &q) == wire::Refusal::UDP_BAD_CHECKSUM) ++rewritten;
    if (forward && p.h.kind == wire::Kind::CONTRIB && p.h.count == w->elements) return;  // the contribution, back out
    if (forward) return mismatch("op " + std::to_string(p.h.op) + ": not the contribution it forwards");
    const Workload& wl = *w;
    const uint32_t op = p.h.op % wl.ops;
    const Expected& e = wl.expect[op];
    const Format out = out_of(wl.s.dtype);
    const size_t osz = info(out).bytes;
    if (p.h.kind != wire::Kind::RESULT || p.h.count != wl.elements || p.payload_len != wl.elements * osz)
      return mismatch("op " + std::to_string(p.h.op) + ": not a whole RESULT");
    if (wl.mode != Mode::ARRIVAL) {
      if (std::memcmp(p.payload, e.out.data(), e.out.size()) != 0)
        return mismatch("op " + std::to_string(p.h.op) + ": RESULT differs from the exact reference");
      const bool side = p.h.flags & wire::hflag::SIDEBAND;
      if (side != !e.flags.empty() || (side && std::memcmp(p.sideband, e.flags.data(), e.flags.size()) != 0))
        return mismatch("op " + std::to_string(p.h.op) + ": RESULT flags differ from the reference");
      return;
    }
    for (uint32_t i = 0; i < wl.elements; ++i) {
      if (std::fabs(e.sum[i]) + e.tol[i] >= limit) continue;  // may overflow in some order: not checkable here
      const double v = value(out, p.payload + i * osz);
      if (!(std::fabs(v - e.sum[i]) <= e.tol[i]))
        return mismatch("op " + std::to_string(p.h.op) + " element " + std::to_string(i) + ": " + std::to_string(v) +
                        " is farther than the FP32 error bound from the exact sum " + std::to_string(e.sum[i]));
    }
  }
};

// Only a sampled frame is read: the frames the reducer built are in its
// lcore's cache, and a NIC would not make the TX lcore read them either.
uint16_t tx_verify(uint16_t, uint16_t, rte_mbuf** pkts, uint16_t n, void* arg) {
  auto* v = static_cast<Verifier*>(arg);
  for (uint16_t i = 0; i < n; ++i) {
    const rte_mbuf* m = pkts[i];
    ++v->frames;
    if (v->frames > v->full_until && (v->frames & 255) != 0) continue;
    if (rte_pktmbuf_data_len(m) <= kKindOffset) continue;
    if (v->forward) {
      v->check(m);
      continue;
    }
    if (rte_pktmbuf_mtod(m, const uint8_t*)[kKindOffset] != uint8_t(wire::Kind::RESULT)) continue;
    ++v->results;
    v->check(m);
  }
  return n;
}

// --- one measurement ---------------------------------------------------------

struct Snap {
  uint64_t tsc = 0, rx = 0, tx = 0, drops = 0, elements = 0, ops = 0;
  std::vector<uint64_t> busy;  // per stage: rx..., reducers..., tx...
};

Snap take(const pipe::Runtime& rt) {
  Snap s;
  s.tsc = rte_rdtsc();
  for (const auto& r : rt.rx()) {
    const auto& c = r->counters();
    s.rx += c.packets.get();
    for (size_t i = 1; i < size_t(wire::Refusal::kCount); ++i) s.drops += c.refused[i].get();
    for (size_t i = 0; i < size_t(sw::Drop::kCount); ++i) s.drops += c.dropped[i].get();
    s.busy.push_back(r->busy_tsc.get());
  }
  for (const auto& r : rt.reducers()) {
    std::vector<std::pair<uint32_t, sw::JobStats>> jobs;
    const sw::ReducerStats st = r->snapshot(&jobs);
    for (uint64_t d : st.drops) s.drops += d;
    s.drops += r->emitter().counters().alloc_failures.get();
    s.elements += st.elements;
    for (const auto& [id, js] : jobs) s.ops += js.completed;
    s.busy.push_back(r->busy_tsc.get());
  }
  for (const auto& t : rt.tx()) {
    s.tx += t->counters().packets.get();
    s.busy.push_back(t->busy_tsc.get());
  }
  return s;
}

struct Result {
  Case c;
  double mpps = 0, gbps = 0, ns_per_elem = 0;
  double rx_share = 0, reduce_share = 0, tx_share = 0;  // of one lcore's time
  double main_ns_pkt = 0, reduce_ns_pkt = 0;            // busy lcore-ns per contribution
  uint64_t packets = 0, drops = 0, results = 0, checked = 0, bad = 0, slots_high = 0;
  uint64_t rx_backpressure = 0, reduce_backpressure = 0;
  size_t slot_bytes = 0;
  uint32_t frame_bytes = 0, elements = 0;
  std::string error;
};

Result run_prism(const Case& c, const Workload& w, const Args& a, uint32_t run, rte_mempool* pool) {
  Result res;
  res.c = c;
  res.frame_bytes = w.frame_bytes;
  res.elements = w.elements;
  const SwitchConfig cfg = bench_config(c.s, w.ports, w.pcap, run, *from_name<Fanout>(a.fanout), a.no_udp_checksum);
  pipe::RunOptions opt;
  opt.assume_chains = a.fanout == "chain";
  opt.staged = a.staged;
  opt.quiet = true;
  if (c.mode == Mode::FORWARD) opt.work = [](const pipe::WorkContext&) { return std::make_unique<ForwardWork>(); };
  if (c.mode == Mode::IDEAL)
    opt.work = [](const pipe::WorkContext& ctx) { return std::make_unique<IdealWork>(ctx.prefetch); };
  opt.pool = pool;
  pipe::Runtime rt(cfg, opt);
  // A rewriter per RX queue and a verifier per TX queue: each is called by the one lcore that polls it.
  const uint32_t queues = c.s.queues();
  std::vector<Rewriter> rw(w.pcap.size());
  const bool forward = c.mode == Mode::FORWARD || c.mode == Mode::IDEAL, ideal = c.mode == Mode::IDEAL;
  size_t txqs = 0;
  for (uint32_t p = 0; p < w.ports; ++p) txqs += rt.tx_queues(uint16_t(p));
  std::vector<Verifier> vs(txqs);
  for (Verifier& v : vs) {
    v.w = &w;
    v.forward = forward;
    v.ideal = ideal;
    // The first round's frames (R RESULTs per op) are all checked; forward-only's are its input, unchanged.
    v.full_until = a.sampled_checks || forward ? 0 : uint64_t(w.ops) * c.s.ranks / txqs;
    v.prepare();
  }
  // Callbacks outlive a port's close: they are removed below, before rw and vs go.
  struct Cb {
    uint16_t pid, queue;
    bool rx;
    const rte_eth_rxtx_callback* cb;
  };
  std::vector<Cb> cbs;
  auto remove_callbacks = [&] {
    for (const Cb& k : cbs)
      if (k.rx)
        rte_eth_remove_rx_callback(k.pid, k.queue, k.cb);
      else
        rte_eth_remove_tx_callback(k.pid, k.queue, k.cb);
    cbs.clear();
  };
  for (uint32_t p = 0; p < w.ports; ++p)  // before any callback is installed
    if (rt.rx_queues(uint16_t(p)) != queues)
      throw std::runtime_error("port " + std::to_string(p) + " has " + std::to_string(rt.rx_queues(uint16_t(p))) +
                               " RX queues, not the " + std::to_string(queues) + " captures it was given");
  size_t vi = 0;
  for (uint32_t p = 0; p < w.ports; ++p) {
    const uint16_t pid = rt.dpdk_port(uint16_t(p));
    for (uint32_t q = 0; q < queues; ++q) {
      Rewriter& r = rw[p * queues + q];
      r.per_round = w.per_round[p * queues + q];
      r.ops = w.ops;
      r.esz = info(c.s.dtype).bytes;
      r.fault = a.inject_fault && p == 0 && q == 0;
      cbs.push_back({pid, uint16_t(q), true, rte_eth_add_rx_callback(pid, uint16_t(q), rx_rewrite, &r)});
    }
    for (uint16_t q = 0; q < rt.tx_queues(uint16_t(p)); ++q)
      cbs.push_back({pid, q, false, rte_eth_add_tx_callback(pid, q, tx_verify, &vs[vi++])});
  }
  if (std::any_of(cbs.begin(), cbs.end(), [](const Cb& k) { return !k.cb; })) {
    remove_callbacks();
    throw std::runtime_error(
        "cannot install the bench's RX/TX callbacks (DPDK built without RTE_ETHDEV_RXTX_CALLBACKS?)");
  }
  Snap s0, s1;
  std::thread ctl([&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(a.warmup_s));
    s0 = take(rt);
    std::this_thread::sleep_for(std::chrono::duration<double>(a.time_s));
    s1 = take(rt);
    pipe::Runtime::request_stop();
  });
  rt.run();
  ctl.join();
  remove_callbacks();
  // Which stage held the others back: RX polls skipped because a VOQ ring was
  // full (the reducers are the limit), reducer polls skipped because a TX ring was.
  for (const auto& r : rt.rx()) res.rx_backpressure += r->counters().backpressure.get();
  for (const auto& r : rt.reducers()) res.reduce_backpressure += r->counters().backpressured.get();
  const double secs = double(s1.tsc - s0.tsc) / double(rt.tsc_hz());
  res.packets = s1.rx - s0.rx;
  res.drops = s1.drops;  // over the whole run, warm-up included
  const double pps = double(res.packets) / secs;
  res.mpps = pps / 1e6;
  res.gbps = pps * double(w.elements * info(c.s.dtype).bytes) * 8 / 1e9;
  res.ns_per_elem = pps > 0 ? 1e9 / (pps * w.elements) : 0;
  const double dt = double(s1.tsc - s0.tsc);
  const size_t nrx = rt.rx().size(), nred = rt.reducers().size();
  double rx_b = 0, red_b = 0, tx_b = 0;
  for (size_t i = 0; i < s1.busy.size(); ++i) {
    const double b = double(s1.busy[i] - s0.busy[i]);
    (i < nrx ? rx_b : i < nrx + nred ? red_b : tx_b) += b;
  }
  // Shares are of one lcore's time; with several reducer lcores theirs is the mean.
  res.rx_share = rx_b / dt;
  res.reduce_share = red_b / dt / double(nred);
  res.tx_share = tx_b / dt;
  const double ns_per_tsc = 1e9 / double(rt.tsc_hz());
  if (res.packets) {
    res.main_ns_pkt = (rx_b + tx_b) * ns_per_tsc / double(res.packets);
    res.reduce_ns_pkt = red_b * ns_per_tsc / double(res.packets);
  }
  uint64_t rewritten = 0;  // every TX queue's verifier, summed
  std::string first_bad;
  for (const Verifier& x : vs) {
    res.results += x.results;
    res.checked += x.checked;
    res.bad += x.bad;
    rewritten += x.rewritten;
    if (first_bad.empty()) first_bad = x.first_bad;
  }
  for (const auto& r : rt.reducers()) {
    res.slots_high = std::max<uint64_t>(res.slots_high, r->snapshot().slots_high);
    if (const sw::Reducer* red = r->work().reducer())
      res.slot_bytes = std::max(res.slot_bytes, red->bytes_per_slot_estimate());
  }
  if (res.bad)
    res.error = first_bad;
  else if (!forward && res.results == 0)
    res.error = "no RESULT was sent";
  else if (res.checked == 0)
    res.error = "nothing was checked";
  else if (ideal && rewritten * 2 < res.checked)
    res.error = "the ideal reducer sent " + std::to_string(res.checked - rewritten) + " of " +
                std::to_string(res.checked) + " checked frames with their elements as they came";
  return res;
}

// dpdk-testpmd, io forwarding, one forwarding lcore, on the same captures.
Result run_testpmd(const Case& c, const Workload& w, const Args& a) {
  Result res;
  res.c = c;
  res.frame_bytes = w.frame_bytes;
  res.elements = w.elements;
  // testpmd, interactive, driven through its stdin: the measured window
  // starts only once its prompt shows that forwarding has started (setting
  // up its pool can take seconds on a loaded machine).
  std::vector<std::string> argv_s = {a.testpmd,
                                     "-l",
                                     "0,1",
                                     "--no-huge",
                                     "-m",
                                     "1024",
                                     "--no-pci",
                                     "--file-prefix",
                                     "prism-bench-tp-" + std::to_string(getpid()),
                                     "--log-level=lib.eal:error",
                                     "--log-level=pmd.net.pcap:error"};
  for (uint32_t p = 0; p < w.ports; ++p) {
    argv_s.push_back("--vdev");
    argv_s.push_back("net_pcap" + std::to_string(p) + ",rx_pcap=" + w.pcap[p] + ",infinite_rx=1");
  }
  // csum: each packet's IPv4 and UDP checksums recomputed in software (net_pcap has no offload).
  for (const char* x :
       {"--", "-i", "--auto-start", c.mode == Mode::TESTPMD_CSUM ? "--forward-mode=csum" : "--forward-mode=io",
        "--port-topology=loop", "--nb-cores=1", "--mbuf-size=9344", "--total-num-mbufs=16384"})
    argv_s.push_back(x);
  int in_fd[2], out_fd[2];
  if (::pipe(in_fd) != 0 || ::pipe(out_fd) != 0) {
    res.error = std::string("pipe: ") + std::strerror(errno);
    return res;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in_fd[0], 0);
    dup2(out_fd[1], 1);
    dup2(out_fd[1], 2);
    close(in_fd[1]);
    close(out_fd[0]);
    std::vector<char*> av;
    for (auto& x : argv_s) av.push_back(x.data());
    av.push_back(nullptr);
    execvp(av[0], av.data());
    _exit(127);
  }
  close(in_fd[0]);
  close(out_fd[1]);
  std::string out;
  // Reads until `what` shows up after offset `from` (or EOF, or the time is up).
  auto read_until = [&](const std::string& what, double seconds, size_t from = 0) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    char buf[4096];
    while (out.find(what, from) == std::string::npos) {
      const auto left = std::chrono::duration<double>(end - std::chrono::steady_clock::now()).count();
      if (left <= 0) return false;
      pollfd pf{out_fd[0], POLLIN, 0};
      if (poll(&pf, 1, int(left * 1000) + 1) <= 0) continue;
      const ssize_t n = read(out_fd[0], buf, sizeof buf);
      if (n <= 0) return false;
      out.append(buf, size_t(n));
    }
    return true;
  };
  auto say = [&](const char* line) { return write(in_fd[1], line, std::strlen(line)) > 0; };
  bool ok = pid > 0 && read_until("testpmd> ", 120);
  if (ok) {
    std::this_thread::sleep_for(std::chrono::duration<double>(a.warmup_s + 0.2));
    // The first show starts testpmd's rate window, the second closes it.
    size_t mark = out.size();
    ok = say("show port stats all\n") && read_until("testpmd> ", 30, mark);
    std::this_thread::sleep_for(std::chrono::duration<double>(a.time_s));
    mark = out.size();
    ok = ok && say("show port stats all\n") && read_until("testpmd> ", 30, mark);
  }
  say("quit\n");
  close(in_fd[1]);
  read_until("\x01never", 30, out.size());  // to EOF
  close(out_fd[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::vector<double> pps;
  for (size_t at = 0; (at = out.find("Rx-pps:", at)) != std::string::npos; at += 7)
    pps.push_back(std::strtod(out.c_str() + at + 7, nullptr));
  std::error_code ec;
  std::filesystem::remove_all("/var/run/dpdk/prism-bench-tp-" + std::to_string(getpid()), ec);
  double total = 0;
  if (pps.size() >= 2 * w.ports)
    for (size_t i = pps.size() - w.ports; i < pps.size(); ++i) total += pps[i];
  if (!ok || total <= 0) {
    const std::string tail = out.size() > 400 ? out.substr(out.size() - 400) : out;
    res.error = "testpmd gave no rate (exit status " + std::to_string(rc) + "): " + tail;
    return res;
  }
  res.packets = uint64_t(total * a.time_s);
  res.mpps = total / 1e6;
  res.gbps = total * double(w.elements * info(c.s.dtype).bytes) * 8 / 1e9;
  res.ns_per_elem = total > 0 ? 1e9 / (total * w.elements) : 0;
  return res;
}

// --- reporting -----------------------------------------------------------------

// Lcores for a line rate from the measured busy time per contribution, at
// `gbit` on the wire (frame + FCS, preamble, gap). Shared nothing: every
// lcore does all of it, L = ceil(pps * (main_ns + reduce_ns)); pipelined:
// RX/TX and reducers on lcores of their own, ceil(pps * main_ns) + ceil(pps * reduce_ns).
uint32_t lcores_for(const Result& r, double gbit) {
  if (r.packets == 0 || is_testpmd(r.c.mode)) return 0;
  const double pps = gbit * 1e9 / (double(r.frame_bytes + 24) * 8);
  if (!r.c.s.pipelined) return uint32_t(std::ceil(pps * (r.main_ns_pkt + r.reduce_ns_pkt) * 1e-9));
  return uint32_t(std::ceil(pps * r.main_ns_pkt * 1e-9)) +
         (r.reduce_ns_pkt > 0 ? uint32_t(std::ceil(pps * r.reduce_ns_pkt * 1e-9)) : 0);
}

struct Row {
  Result r;                                      // the median run (by Mpps)
  double fwd = 0, tp = 0;                        // Mpps of the paired baselines (medians); 0: none
  double vs_fwd = 0, vs_tp = 0, vs_arrival = 0;  // medians of the per-round ratios
  double ideal = 0, vs_ideal = 0;                // the ideal reducer's Mpps, and this over it (policies)
  double tp_csum = 0, vs_tp_csum = 0;            // testpmd's csum engine, and forward-only over it
  double vs_one = 0;                             // lcores > 1: over the same policy on one lcore
  // The lowest and highest per-round ratio: how far one round's verdict can
  // move on this machine (a median near its line is not a firm pass or miss).
  std::pair<double, double> fwd_range{0, 0}, tp_range{0, 0}, arrival_range{0, 0}, ideal_range{0, 0},
      tp_csum_range{0, 0}, one_range{0, 0};
};

std::string run_dir_default() {
  char tmpl[] = "/tmp/prism-bench-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error(std::string("cannot create a folder in /tmp: ") + std::strerror(errno));
  return tmpl;
}

bool testpmd_available(const std::string& path) {
  if (path.find('/') != std::string::npos) return access(path.c_str(), X_OK) == 0;
  return std::system(("command -v " + path + " >/dev/null 2>&1").c_str()) == 0;
}

void write_plot(const std::vector<Row>& rows, const std::string& png, const std::string& dir) {
  // Gbit/s against lcores, 1 KiB fp32, R=8: one series per mode and layout
  // (one lcore is both layouts' first point: it runs everything either way).
  std::map<std::string, std::vector<std::pair<uint32_t, double>>> series;
  for (const Row& row : rows) {
    const Shape& s = row.r.c.s;
    if (s.dtype != Format::FP32 || s.ranks != 8 || s.payload != 1024 || !row.r.error.empty() ||
        is_testpmd(row.r.c.mode))
      continue;
    for (bool pl : {false, true})
      if (s.pipelined == pl || (s.lcores == 1 && pl))
        series[std::string(mode_name(row.r.c.mode)) + (pl ? " pipelined" : " shared nothing")].emplace_back(s.lcores,
                                                                                                            row.r.gbps);
  }
  for (auto it = series.begin(); it != series.end();)  // a layout measured on one lcore only is no line
    it = it->second.size() < 2 && it->first.find("pipelined") != std::string::npos ? series.erase(it) : std::next(it);
  if (series.empty()) {
    std::printf("plot: no 1 KiB fp32 R=8 rows to plot; %s not written\n", png.c_str());
    return;
  }
  const std::string dat = dir + "/pipeline.dat", gp = dir + "/pipeline.gp";
  std::ofstream d(dat);
  std::vector<std::string> names;
  for (auto& [name, pts] : series) {
    std::sort(pts.begin(), pts.end());
    d << "# " << name << "\n";
    for (auto [x, y] : pts) d << x << " " << y << "\n";
    d << "\n\n";
    names.push_back(name);
  }
  d.close();
  std::ofstream g(gp);
  g << "set terminal pngcairo size 900,560 noenhanced\nset output '" << png << "'\n"
    << "set title 'prism-bench pipeline: 1 KiB fp32 contributions, R = 8, CPU " << cpu_model() << "'\n"
    << "set xlabel 'lcores'\nset ylabel 'Gbit/s of contribution payload'\n"
    << "set xtics 1\nset key left top\nset grid\nplot ";
  for (size_t i = 0; i < names.size(); ++i)
    g << (i ? ", " : "") << "'" << dat << "' index " << i << " with linespoints lw 2 "
      << (names[i].find("pipelined") != std::string::npos ? "dt 2 " : "") << "title '" << names[i] << "'";
  g << "\n";
  g.close();
  const int rc = std::system(("gnuplot '" + gp + "' 2>&1").c_str());
  if (rc != 0) {
    // pngcairo may be missing (gnuplot-nox has png via libgd): try the plain png terminal.
    std::ifstream in(gp);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string t = ss.str();
    t.replace(t.find("pngcairo"), 8, "png");
    std::ofstream(gp) << t;
    if (std::system(("gnuplot '" + gp + "' 2>&1").c_str()) != 0) {
      std::printf("plot: gnuplot failed; install gnuplot-nox (the data is in %s)\n", dat.c_str());
      return;
    }
  }
  std::printf("plot: %s\n", png.c_str());
}

}  // namespace

// --- the run, in steps -------------------------------------------------------

// The EAL for every measurement: lcores 0..max-1; no hugepages unless --eal
// says otherwise. Returns its --file-prefix.
std::string start_eal(const Args& a) {
  const std::string prefix = "prism-bench-" + std::to_string(getpid());
  std::vector<std::string> eal = {"prism-bench",
                                  "--file-prefix",
                                  prefix,
                                  "-l",
                                  a.max_lcores == 1 ? "0" : "0-" + std::to_string(a.max_lcores - 1),
                                  "--log-level=lib.eal:error",
                                  "--log-level=pmd.net.pcap:error",
                                  "--log-level=prism:warning"};
  std::stringstream ss(a.eal.empty() ? "--no-huge -m 1024 --no-pci" : a.eal);
  for (std::string t; ss >> t;) eal.push_back(t);
  std::vector<char*> eargv;
  for (auto& e : eal) eargv.push_back(e.data());
  if (rte_eal_init(int(eargv.size()), eargv.data()) < 0)
    fail(std::string("EAL init failed: ") + rte_strerror(rte_errno) + " (check --eal)");
  return prefix;
}

// The captures: one workload per (shape, policy in the header), built on
// first use (forward-only, ideal and testpmd replay FP32_ARRIVAL's packets;
// the packets do not depend on the lcores).
class Workloads {
 public:
  Workloads(const Args& a, std::string dir) : a_(a), dir_(std::move(dir)) {}
  const Workload& operator()(const Case& c) {
    const Mode hm = c.mode == Mode::FORWARD || c.mode == Mode::IDEAL || is_testpmd(c.mode) ? Mode::ARRIVAL : c.mode;
    const Shape key = c.s;  // the captures depend on the queues and the shards (the lcores, the layout)
    auto it = loads_.find({key, hm});
    if (it == loads_.end())
      it = loads_.emplace(std::make_pair(key, hm), build_workload(c.s, hm, a_.ports, dir_, next_++, a_.no_udp_checksum))
               .first;
    return it->second;
  }

 private:
  const Args& a_;
  std::string dir_;
  std::map<std::pair<Shape, Mode>, Workload> loads_;
  uint32_t next_ = 0;
};

// The same packets (dtype, payload, R), and (lc) the same lcores in the same layout.
bool same_shape(const Shape& x, const Shape& y, bool lc) {
  return x.dtype == y.dtype && x.payload == y.payload && x.ranks == y.ranks &&
         (!lc || (x.lcores == y.lcores && x.pipelined == y.pipelined));
}

// testpmd runs once per packet shape (its layout does not change with
// --lcores), in io mode; on the headline shape also in csum mode, the
// reference for a forwarder that sums every packet in software.
std::vector<Case> testpmd_cases(const Args& a) {
  std::vector<Case> tp;
  for (const Case& c : a.cases) {
    if (c.mode != Mode::FORWARD) continue;
    if (std::any_of(tp.begin(), tp.end(), [&](const Case& x) { return same_shape(x.s, c.s, false); })) continue;
    Shape one = c.s;  // one forwarding lcore: one capture per port
    one.lcores = 1;
    one.pipelined = false;
    tp.push_back({Mode::TESTPMD, one, c.section});
    if (c.s.dtype == Format::FP32 && c.s.payload == 1024 && c.s.ranks == 8)
      tp.push_back({Mode::TESTPMD_CSUM, one, c.section});
  }
  return tp;
}

// Every run of every case, by case: a.repeat rounds, the cases in order in
// each. testpmd's runs for a shape go right before the first forward-only
// run of that shape in each round, next to the runs their ratios pair them with.
struct Runs {
  std::vector<std::vector<Result>> prism, testpmd;
  const std::vector<Result>& of(size_t row, size_t cases) const {
    return row < cases ? prism[row] : testpmd[row - cases];
  }
};
Runs measure(const Args& a, const std::vector<Case>& tp_cases, Workloads& loads, rte_mempool* pool) {
  Runs runs{std::vector<std::vector<Result>>(a.cases.size()), std::vector<std::vector<Result>>(tp_cases.size())};
  uint32_t run_id = 0;
  for (uint32_t rep = 0; rep < a.repeat; ++rep) {
    for (size_t i = 0; i < a.cases.size(); ++i) {
      const Case& c = a.cases[i];
      for (size_t t = 0; t < tp_cases.size() && c.mode == Mode::FORWARD; ++t)
        if (same_shape(tp_cases[t].s, c.s, false) && runs.testpmd[t].size() == rep)
          runs.testpmd[t].push_back(run_testpmd(tp_cases[t], loads(tp_cases[t]), a));
      Result r;
      try {
        r = run_prism(c, loads(c), a, run_id++, pool);
      } catch (const std::exception& e) {
        r.c = c;
        r.error = e.what();
      }
      runs.prism[i].push_back(r);
    }
    std::printf("  round %u of %u done\n", rep + 1, a.repeat);
    std::fflush(stdout);
  }
  return runs;
}

// The run reported for a case is the one with the median Mpps.
Result median_run(const std::vector<Result>& v) {
  std::vector<Result> ok;
  for (const auto& r : v)
    if (r.error.empty()) ok.push_back(r);
  if (ok.empty()) return v.front();
  std::sort(ok.begin(), ok.end(), [](const Result& x, const Result& y) { return x.mpps < y.mpps; });
  return ok[ok.size() / 2];
}

// A ratio is the median of the ratios of runs taken in the same round (the
// machine's drift is shared by both); their range goes into *range.
double paired(const std::vector<Result>& x, const std::vector<Result>& y, std::pair<double, double>* range) {
  std::vector<double> q;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    if (x[i].error.empty() && y[i].error.empty() && x[i].mpps > 0 && y[i].mpps > 0) q.push_back(x[i].mpps / y[i].mpps);
  if (q.empty()) return 0.0;
  std::sort(q.begin(), q.end());
  *range = {q.front(), q.back()};
  return q.size() % 2 ? q[q.size() / 2] : (q[q.size() / 2 - 1] + q[q.size() / 2]) / 2;
}

// One row per case (its median run, with every round's drops, mismatches
// and checks summed, and the first error), then one per testpmd case.
std::vector<Row> rows_of(const Args& a, const std::vector<Case>& tp_cases, const Runs& runs) {
  std::vector<Row> rows;
  for (size_t i = 0; i < a.cases.size(); ++i) {
    Row row;
    row.r = median_run(runs.prism[i]);
    uint64_t drops = 0, bad = 0, checked = 0;
    std::string err;
    for (const auto& r : runs.prism[i]) {
      drops += r.drops;
      bad += r.bad;
      checked += r.checked;
      if (err.empty() && !r.error.empty()) err = r.error;
    }
    row.r.drops = drops;
    row.r.bad = bad;
    row.r.checked = checked;
    if (!err.empty()) row.r.error = err;
    rows.push_back(row);
  }
  for (size_t i = 0; i < tp_cases.size(); ++i) rows.push_back(Row{median_run(runs.testpmd[i])});
  return rows;
}

// Each row's baselines: forward-only and the ideal on the same lcores,
// testpmd (io and csum) on the same packets, FP32_ARRIVAL for the other policies.
void pair_baselines(std::vector<Row>& rows, const Runs& runs, size_t cases) {
  auto ratio = [&](size_t k, size_t j, std::pair<double, double>* range) {
    return paired(runs.of(k, cases), runs.of(j, cases), range);
  };
  for (size_t k = 0; k < rows.size(); ++k) {
    Row& row = rows[k];
    if (row.r.c.mode == Mode::TESTPMD) continue;
    for (size_t j = 0; j < rows.size(); ++j) {
      const Row& o = rows[j];
      const bool ok = o.r.error.empty();
      if (row.r.c.mode == Mode::TESTPMD_CSUM) {  // csum over io: the one ratio of a testpmd row
        if (o.r.c.mode == Mode::TESTPMD && same_shape(o.r.c.s, row.r.c.s, false) && ok) {
          row.tp = o.r.mpps;
          row.vs_tp = ratio(k, j, &row.tp_range);
        }
        continue;
      }
      if (o.r.c.mode == Mode::FORWARD && same_shape(o.r.c.s, row.r.c.s, true) && ok) {
        row.fwd = o.r.mpps;
        row.vs_fwd = ratio(k, j, &row.fwd_range);
      }
      if (o.r.c.mode == Mode::TESTPMD && same_shape(o.r.c.s, row.r.c.s, false) && ok) {
        row.tp = o.r.mpps;
        row.vs_tp = ratio(k, j, &row.tp_range);
      }
      if (o.r.c.mode == Mode::TESTPMD_CSUM && same_shape(o.r.c.s, row.r.c.s, false) && ok) {
        row.tp_csum = o.r.mpps;
        row.vs_tp_csum = ratio(k, j, &row.tp_csum_range);
      }
      if (row.r.c.mode >= Mode::ARRIVAL && o.r.c.mode == Mode::IDEAL && same_shape(o.r.c.s, row.r.c.s, true) && ok) {
        row.ideal = o.r.mpps;
        row.vs_ideal = ratio(k, j, &row.ideal_range);
      }
      if ((row.r.c.mode == Mode::KULISCH || row.r.c.mode == Mode::BINOMIAL) && o.r.c.mode == Mode::ARRIVAL &&
          same_shape(o.r.c.s, row.r.c.s, true) && o.r.mpps > 0)
        row.vs_arrival = ratio(k, j, &row.arrival_range);
      if (row.r.c.s.lcores > 1 && o.r.c.mode == row.r.c.mode && o.r.c.s.lcores == 1 &&
          same_shape(o.r.c.s, row.r.c.s, false) && ok)
        row.vs_one = ratio(k, j, &row.one_range);
    }
  }
}

void print_table(const std::vector<Row>& rows) {
  std::printf("\n%-14s %-7s %6s %5s %3s | %7s %8s %8s | %6s %6s %6s | %5s %5s %5s | %7s %7s | %5s %5s | %7s %6s %s\n",
              "policy", "dtype", "bytes", "R", "lc", "Mpps", "Gbit/s", "ns/elem", "/fwd", "/tpmd", "/arr", "rx%",
              "red%", "tx%", "main ns", "red ns", "L100", "L400", "slot B", "drops", "checked");
  std::string last_section;
  for (const Row& row : rows) {
    const Result& r = row.r;
    if (r.c.section != last_section && !is_testpmd(r.c.mode)) {
      std::printf("-- %s\n", r.c.section.c_str());
      last_section = r.c.section;
    }
    if (is_testpmd(r.c.mode) && last_section != "testpmd") {
      std::printf("-- testpmd, 1 forwarding lcore: io forwarding (csum: checksums recomputed in software)\n");
      last_section = "testpmd";
    }
    auto ratio = [](double x) {
      static char b[4][16];
      static int k = 0;
      char* o = b[k++ % 4];
      if (x > 0)
        std::snprintf(o, 16, "%.2f", x);
      else
        std::snprintf(o, 16, "-");
      return o;
    };
    if (!r.error.empty() && r.packets == 0) {
      std::printf("%-14s %-7s %6u %5u %3u | FAILED: %s\n", mode_name(r.c.mode), name(r.c.s.dtype), r.c.s.payload,
                  r.c.s.ranks, r.c.s.lcores, r.error.c_str());
      continue;
    }
    const bool pm = is_testpmd(r.c.mode);
    std::printf(
        "%-14s %-7s %6u %5u %3s | %7.3f %8.2f %8.3f | %6s %6s %6s | %5.1f %5.1f %5.1f | %7.1f %7.1f | %5u %5u | %7zu "
        "%6llu %llu%s\n",
        mode_name(r.c.mode), name(r.c.s.dtype), r.c.s.payload, r.c.s.ranks,
        pm ? "1f" : (std::to_string(r.c.s.lcores) + (r.c.s.pipelined ? "p" : "")).c_str(), r.mpps, r.gbps,
        r.ns_per_elem, ratio(row.vs_fwd), ratio(row.vs_tp), ratio(row.vs_arrival), 100 * r.rx_share,
        100 * r.reduce_share, 100 * r.tx_share, r.main_ns_pkt, r.reduce_ns_pkt, lcores_for(r, 100), lcores_for(r, 400),
        r.slot_bytes, (unsigned long long)r.drops, (unsigned long long)r.checked,
        r.error.empty() ? "" : ("  CHECK FAILED: " + r.error).c_str());
  }
  std::printf(
      "Mpps: contributions received per second (testpmd: packets forwarded). Gbit/s: of contribution payload.\n"
      "lc: lcores, shared nothing (each runs its shards to completion on its own queues); 2p: pipelined (RX and\n"
      "TX on one lcore, the reducers on the other).\n"
      "ns/elem: wall ns per element-contribution. /fwd, /tpmd: Mpps over forward-only (same lcores) and testpmd\n"
      "(same packets); /arr: over FP32_ARRIVAL. rx%%, red%%, tx%%: share of an lcore's time busy in each stage.\n"
      "main ns, red ns: busy lcore-ns per contribution in RX+TX and in the reducers. L100, L400: lcores that\n"
      "100 and 400 Gbit/s on the wire would need at those costs. slot B: memory per in-flight slot.\n");
}

// The targets (issue 19), with their verdicts; returns (targets, passed).
// One lcore: FP32_ARRIVAL near the ideal reducer, KULISCH near FP32_ARRIVAL.
// Shared nothing: two lcores near twice one. The baselines beside them.
std::pair<int, int> print_targets(const std::vector<Row>& rows) {
  int n_t = 0, n_pass = 0;
  auto find = [&](Mode m, Format d, uint32_t payload, uint32_t ranks, uint32_t lc, bool pipelined) -> const Row* {
    for (const Row& row : rows)
      if (row.r.c.mode == m && row.r.c.s.dtype == d && row.r.c.s.payload == payload && row.r.c.s.ranks == ranks &&
          row.r.c.s.lcores == lc && row.r.c.s.pipelined == pipelined && row.r.error.empty())
        return &row;
    return nullptr;
  };
  // The verdict is the median's; the rounds' range says whether it is firm
  // ("every round" on one side of the line) or could go either way.
  auto target = [&](const std::string& what, double ratio, std::pair<double, double> range, double goal) {
    if (ratio <= 0) return;
    ++n_t;
    const bool ok = ratio >= goal;
    n_pass += ok;
    const char* firm = range.first >= goal   ? "every round passed"
                       : range.second < goal ? "every round missed"
                                             : "rounds split";
    std::printf("target %-52s %5.2f (>= %.2f) %s  rounds %.2f-%.2f, %s\n", what.c_str(), ratio, goal,
                ok ? "PASS" : "MISS", range.first, range.second, firm);
  };
  std::printf("\n");
  if (const Row* r = find(Mode::ARRIVAL, Format::FP32, 1024, 8, 1, false))
    target("fp32_arrival / ideal, 1 lcore (1 KiB fp32, R=8)", r->vs_ideal, r->ideal_range, 0.8);
  for (Format f : {Format::FP32, Format::FP16, Format::BF16, Format::E4M3FN, Format::E5M2})
    if (const Row* r = find(Mode::KULISCH, f, 1024, 8, 1, false))
      target(std::string("kulisch / fp32_arrival, 1 lcore, ") + name(f), r->vs_arrival, r->arrival_range,
             f == Format::FP32 ? 0.9 : 1.0);
  // What a second lcore adds, shared nothing, at 1 KiB and above: a target; every other scaling is printed.
  auto scaling_target = [](const Row& row) {
    const Shape& s = row.r.c.s;
    return s.lcores == 2 && !s.pipelined && s.payload >= 1024 &&
           (row.r.c.mode == Mode::ARRIVAL || row.r.c.mode == Mode::KULISCH);
  };
  for (const Row& row : rows) {
    const Shape& s = row.r.c.s;
    if (!scaling_target(row) || !row.r.error.empty()) continue;
    char what[96];
    std::snprintf(what, sizeof what, "%s 2 lcores / 1 (%s, %u B, R=%u)", mode_name(row.r.c.mode), name(s.dtype),
                  s.payload, s.ranks);
    target(what, row.vs_one, row.one_range, 1.8);
  }
  // Not targets: the pipelined layout, the baselines, small payloads and other lcore counts.
  for (const Row& row : rows) {
    const Shape& s = row.r.c.s;
    if (s.lcores < 2 || row.vs_one <= 0 || scaling_target(row)) continue;
    std::printf("  %-58s %5.2f  rounds %.2f-%.2f\n",
                (std::string(mode_name(row.r.c.mode)) + " " + std::to_string(s.lcores) + " lcores " + s.layout() +
                 " / 1 (" + name(s.dtype) + ", " + std::to_string(s.payload) + " B, R=" + std::to_string(s.ranks) + ")")
                    .c_str(),
                row.vs_one, row.one_range.first, row.one_range.second);
  }
  if (const Row* r = find(Mode::IDEAL, Format::FP32, 1024, 8, 1, false); r && r->vs_fwd > 0)
    std::printf("  ceiling, 1 lcore: ideal / forward %.2f (rounds %.2f-%.2f)\n", r->vs_fwd, r->fwd_range.first,
                r->fwd_range.second);
  if (const Row* r = find(Mode::FORWARD, Format::FP32, 1024, 8, 1, false); r && r->vs_tp > 0)
    std::printf("  baseline, 1 lcore: forward / testpmd io %.2f (rounds %.2f-%.2f), / testpmd csum %.2f\n", r->vs_tp,
                r->tp_range.first, r->tp_range.second, r->vs_tp_csum);
  // Lcores a line rate needs, from each layout's measured busy time per contribution.
  bool head = false;
  for (const Row& row : rows) {
    const Shape& s = row.r.c.s;
    if (s.dtype != Format::FP32 || s.ranks != 8 || !row.r.error.empty() || is_testpmd(row.r.c.mode)) continue;
    if (row.r.c.mode != Mode::ARRIVAL && row.r.c.mode != Mode::KULISCH) continue;
    if (!head) {
      std::printf(
          "\nlcores for a line rate of fp32 contributions (R=8), from the busy ns per contribution measured:\n"
          "  %-14s %6s %-15s %3s %9s %6s %6s\n",
          "policy", "bytes", "layout", "lc", "ns/contr", "L100", "L400");
      head = true;
    }
    std::printf("  %-14s %6u %-15s %3u %9.1f %6u %6u\n", mode_name(row.r.c.mode), s.payload, s.layout(), s.lcores,
                row.r.main_ns_pkt + row.r.reduce_ns_pkt, lcores_for(row.r, 100), lcores_for(row.r, 400));
  }
  return {n_t, n_pass};
}

void write_json(const std::vector<Row>& rows, const Args& a) {
  std::ofstream j(a.json);
  if (!j) fail("cannot write --json " + a.json);
  j << "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const Result& r = row.r;
    j << "  {\"policy\": \"" << mode_name(r.c.mode) << "\", \"dtype\": \"" << name(r.c.s.dtype)
      << "\", \"payload_bytes\": " << r.c.s.payload << ", \"elements\": " << r.elements
      << ", \"frame_bytes\": " << r.frame_bytes << ", \"ranks\": " << r.c.s.ranks
      << ", \"lcores\": " << (is_testpmd(r.c.mode) ? 1 : r.c.s.lcores) << ", \"layout\": \""
      << (is_testpmd(r.c.mode) ? "testpmd" : r.c.s.layout()) << "\", \"udp_checksum\": \""
      << (a.no_udp_checksum ? "none" : "sum") << "\", \"ports\": " << a.ports
      << ", \"section\": " << json_str(r.c.section)
      << ", \"fanout\": " << (r.c.mode < Mode::ARRIVAL || is_testpmd(r.c.mode) ? "null" : json_str(a.fanout))
      << ", \"mpps\": " << r.mpps << ", \"gbps\": " << r.gbps << ", \"ns_per_elem\": " << r.ns_per_elem
      << ", \"stage_share\": {\"rx\": " << r.rx_share << ", \"reduce\": " << r.reduce_share
      << ", \"tx\": " << r.tx_share << "}, \"main_ns_per_packet\": " << r.main_ns_pkt
      << ", \"reduce_ns_per_packet\": " << r.reduce_ns_pkt << ", \"lcores_100g\": " << lcores_for(r, 100)
      << ", \"lcores_400g\": " << lcores_for(r, 400) << ", \"slot_bytes\": " << r.slot_bytes
      << ", \"slots_high\": " << r.slots_high << ", \"rx_backpressure_polls\": " << r.rx_backpressure
      << ", \"reduce_backpressure_polls\": " << r.reduce_backpressure << ", \"drops\": " << r.drops
      << ", \"results_checked\": " << r.checked << ", \"mismatches\": " << r.bad << ", \"repeat\": " << a.repeat
      << ", \"seconds\": " << a.time_s << ", \"baseline\": {\"forward_mpps\": " << row.fwd
      << ", \"testpmd_mpps\": " << row.tp << ", \"vs_forward\": " << row.vs_fwd << ", \"vs_testpmd\": " << row.vs_tp
      << ", \"vs_fp32_arrival\": " << row.vs_arrival << ", \"ideal_mpps\": " << row.ideal
      << ", \"vs_ideal\": " << row.vs_ideal << ", \"vs_one_lcore\": " << row.vs_one << ", \"vs_one_lcore_range\": ["
      << row.one_range.first << ", " << row.one_range.second << "], \"vs_ideal_range\": [" << row.ideal_range.first
      << ", " << row.ideal_range.second << "], \"testpmd_csum_mpps\": " << row.tp_csum
      << ", \"vs_testpmd_csum\": " << row.vs_tp_csum << ", \"vs_testpmd_csum_range\": [" << row.tp_csum_range.first
      << ", " << row.tp_csum_range.second << "], \"vs_forward_range\": [" << row.fwd_range.first << ", "
      << row.fwd_range.second << "], \"vs_testpmd_range\": [" << row.tp_range.first << ", " << row.tp_range.second
      << "], \"vs_fp32_arrival_range\": [" << row.arrival_range.first << ", " << row.arrival_range.second
      << "]}, \"error\": " << (r.error.empty() ? "null" : json_str(r.error)) << "}" << (i + 1 < rows.size() ? "," : "")
      << "\n";
  }
  j << "]\n";
  std::printf("json: %s\n", a.json.c_str());
}

int run_pipeline(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  const bool own_dir = a.work_dir.empty();
  const std::string dir = own_dir ? run_dir_default() : a.work_dir;
  if (!own_dir) std::filesystem::create_directories(dir);
  const bool tp = a.use_testpmd && testpmd_available(a.testpmd);
  if (a.use_testpmd && !tp)
    std::printf("note: %s not found: no testpmd baseline (install Debian's dpdk package, or --testpmd PATH)\n",
                a.testpmd.c_str());
  const std::string prefix = start_eal(a);
  std::printf(
      "prism-bench pipeline: %zu cases x %u runs, %.2f s each after %.2f s warm-up; %u ports; RESULT fan-out by %s; "
      "CPU %s\n",
      a.cases.size(), a.repeat, a.time_s, a.warmup_s, a.ports, a.fanout == "chain" ? "chained mbufs" : "copies",
      cpu_model().c_str());
  std::fflush(stdout);
  const std::vector<Case> tp_cases = tp ? testpmd_cases(a) : std::vector<Case>{};
  // One pool for every run (creating 150 MB of buffers per run would cost seconds).
  rte_mempool* pool = pipe::make_pool("prism_bench_pool");
  if (!pool) fail(std::string("cannot create the mbuf pool: ") + rte_strerror(rte_errno) + " (give --eal more memory)");
  uint64_t drops = 0, bad = 0, failed = 0;
  {
    Workloads loads(a, dir);
    const Runs runs = measure(a, tp_cases, loads, pool);
    std::vector<Row> rows = rows_of(a, tp_cases, runs);
    pair_baselines(rows, runs, a.cases.size());
    print_table(rows);
    const auto [n_t, n_pass] = print_targets(rows);
    for (const Row& row : rows) {
      drops += row.r.drops;
      bad += row.r.bad;
      failed += !row.r.error.empty();
    }
    std::printf("summary: %d of %d targets pass; %llu drops; %llu RESULT mismatches; %llu failed measurements\n",
                n_t ? n_pass : 0, n_t, (unsigned long long)drops, (unsigned long long)bad, (unsigned long long)failed);
    if (!a.json.empty()) write_json(rows, a);
    if (!a.plot.empty()) write_plot(rows, a.plot, dir);
  }
  rte_mempool_free(pool);
  rte_eal_cleanup();
  std::error_code ec;
  std::filesystem::remove_all("/var/run/dpdk/" + prefix, ec);
  if (own_dir) std::filesystem::remove_all(dir, ec);
  return bad || failed || drops ? kCheckFailed : 0;
}

}  // namespace prism::bench
