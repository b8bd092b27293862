// prism-bench: PRISM's benchmark programs. They print tables (or JSON, one
// object per line) and never pass or fail a build: targets are reported, not
// enforced.
//
//   prism-bench reducers [--elements N] [--ranks R] [--repeat K] [--min-time S]
//                        [--kernels auto|portable|avx2] [--policy LIST] [--dtype LIST]
//                        [--seed N] [--spread B] [--breakdown] [--json]
//
// `reducers` measures the reducers' hot path alone: one op is R contributions
// (pre-built packets of N elements) through Accumulator::add, one finalize()
// and the reset() that readies the slot for the next op. Every policy × format
// is measured in one run, interleaved, best of K repetitions of at least S
// seconds each, and reported as ns per element-contribution, Gbit/s of
// contribution payload, the ratio to FP32_ARRIVAL on the same format, and the
// lcores 100 Gbit/s of contributions would need. Timings on a shared machine
// drift: compare the ratios within one run, not absolute figures across runs.
//
// Further subcommands (`pipeline`: the DPDK stages against forward-only and
// testpmd) plug into kSubcommands below.
//
// Errors print one line and exit 2. A failed sanity check (KULISCH_FIXED not
// bit-identical under reversed order) prints FATAL and exits 3.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "arith/accumulator.hpp"
#include "bench_data.hpp"
#include "cli.hpp"

using namespace prism;
using namespace prism::bench;

namespace prism::bench {
int run_pipeline(int argc, char** argv);  // bench_pipeline.cpp
}

namespace {

constexpr int kUsageError = 2;
constexpr int kSanityFailure = 3;

struct Fail {
  std::string msg;
};
[[noreturn]] void fail(const std::string& msg) { throw Fail{msg}; }

const char* kUsage =
    "usage: prism-bench SUBCOMMAND [options]   (prism-bench SUBCOMMAND --help for its options)\n"
    "subcommands:\n"
    "  reducers   ns per element-contribution of each policy x input format (lib/arith hot path)\n"
    "  pipeline   the switch pipeline at full speed from memory, against forward-only and dpdk-testpmd\n";

const char* kReducersUsage =
    "usage: prism-bench reducers [options]\n"
    "  Times one op = R contributions via Accumulator::add + finalize() + reset(), per policy x dtype,\n"
    "  interleaved in one run; reports the best of --repeat repetitions. xarrival = best / best of\n"
    "  fp32_arrival on the same dtype; med = median of the per-repetition ratios (its stability).\n"
    "options:\n"
    "  --elements N         elements per packet (lanes), 1..65535 (default 256)\n"
    "  --ranks R            contributions per op, 1..65535 (default 64)\n"
    "  --repeat K           timed repetitions per case; the best is reported (default 5)\n"
    "  --min-time S         seconds per repetition, at least (default 0.1)\n"
    "  --kernels K          auto | portable | avx2 (default auto: avx2 when the CPU has it,\n"
    "                       unless PRISM_KERNELS=portable)\n"
    "  --policy LIST        comma-separated: fp32_arrival kulisch fp32_binomial, or all (default all);\n"
    "                       fp32_arrival is always measured as the baseline of the ratios\n"
    "  --dtype LIST         comma-separated: fp32 fp16 bf16 e4m3fn e4m3fnuz e5m2 e5m2fnuz int8 int32,\n"
    "                       or all (default all)\n"
    "  --seed N             seed of the generated gradient-like data (default 1)\n"
    "  --spread B           binades spanned by the per-element magnitudes (default per format:\n"
    "                       fp32/bf16 14, fp16 10, e4m3* 8, e5m2* 12, int8 3, int32 14)\n"
    "  --breakdown          also time reset + R x add alone (interleaved) and report the add's\n"
    "                       ns per element-contribution and finalize's ns per lane (the difference)\n"
    "  --json               one JSON object per line instead of the table\n"
    "  -h, --help           this text\n";

const Policy kPolicies[] = {Policy::FP32_ARRIVAL, Policy::KULISCH_FIXED, Policy::FP32_BINOMIAL};
const Format kFormats[] = {Format::FP32, Format::FP16,     Format::BF16, Format::E4M3FN, Format::E4M3FNUZ,
                           Format::E5M2, Format::E5M2FNUZ, Format::INT8, Format::INT32};

// ---------------------------------------------------------------------------
// Command line.

struct ReducerArgs {
  uint32_t elements = 256;
  uint32_t ranks = 64;
  uint32_t repeat = 5;
  double min_time = 0.1;
  std::string kernels = "auto";
  std::vector<Policy> policies;  // empty: all
  std::vector<Format> dtypes;    // empty: all
  uint64_t seed = 1;
  double spread = -1;  // < 0: the format's default window
  bool json = false;
  bool breakdown = false;
};

uint64_t parse_uint(const std::string& key, const std::string& v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || v[0] == '-' || !end || *end || errno || x < lo || x > hi)
    fail("bad " + key + " '" + v + "': give a whole number " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = v.find(',', start);
    out.push_back(v.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

ReducerArgs parse_reducers(int argc, char** argv) {
  ReducerArgs a;
  for (int i = 0; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      std::fputs(kReducersUsage, stdout);
      std::exit(0);
    }
    if (s == "--json") {
      a.json = true;
      continue;
    }
    if (s == "--breakdown") {
      a.breakdown = true;
      continue;
    }
    std::string key = s, val;
    bool has_val = false;
    if (auto eq = s.find('='); s.rfind("--", 0) == 0 && eq != std::string::npos) {
      key = s.substr(0, eq);
      val = s.substr(eq + 1);
      has_val = true;
    }
    const bool known = key == "--elements" || key == "--ranks" || key == "--repeat" || key == "--min-time" ||
                       key == "--kernels" || key == "--policy" || key == "--dtype" || key == "--seed" ||
                       key == "--spread";
    if (!known) fail("unknown option '" + s + "' for reducers (see prism-bench reducers --help)");
    if (!has_val) {
      if (i + 1 >= argc) fail("option " + key + " needs a value (see prism-bench reducers --help)");
      val = argv[++i];
    }
    if (key == "--elements") {
      a.elements = uint32_t(parse_uint(key, val, 1, 65535));
    } else if (key == "--ranks") {
      a.ranks = uint32_t(parse_uint(key, val, 1, 65535));
    } else if (key == "--repeat") {
      a.repeat = uint32_t(parse_uint(key, val, 1, 1000));
    } else if (key == "--seed") {
      a.seed = parse_uint(key, val, 0, UINT64_MAX);
    } else if (key == "--spread") {
      char* end = nullptr;
      const double b = std::strtod(val.c_str(), &end);
      if (val.empty() || !end || *end || !(b >= 0) || b > 40) fail("bad --spread '" + val + "': give binades, 0..40");
      a.spread = b;
    } else if (key == "--min-time") {
      char* end = nullptr;
      const double t = std::strtod(val.c_str(), &end);
      if (val.empty() || !end || *end || !(t > 0) || t > 60)
        fail("bad --min-time '" + val + "': give seconds, more than 0 and at most 60");
      a.min_time = t;
    } else if (key == "--kernels") {
      if (val != "auto" && val != "portable" && val != "avx2")
        fail("unknown --kernels '" + val + "': use auto, portable or avx2");
      a.kernels = val;
    } else if (key == "--policy") {
      a.policies.clear();
      for (const auto& p : split_list(val)) {
        if (p == "all") {
          a.policies.clear();
          break;
        }
        const auto pol = policy_from_name(p);
        if (!pol) fail("unknown policy '" + p + "': use fp32_arrival, kulisch, fp32_binomial or all");
        if (std::find(a.policies.begin(), a.policies.end(), *pol) == a.policies.end()) a.policies.push_back(*pol);
      }
    } else if (key == "--dtype") {
      a.dtypes.clear();
      for (const auto& d : split_list(val)) {
        if (d == "all") {
          a.dtypes.clear();
          break;
        }
        const auto f = format_from_name(d);
        if (!f) fail("unknown dtype '" + d + "': use fp32 fp16 bf16 e4m3fn e4m3fnuz e5m2 e5m2fnuz int8 int32 or all");
        if (std::find(a.dtypes.begin(), a.dtypes.end(), *f) == a.dtypes.end()) a.dtypes.push_back(*f);
      }
    }
  }
  return a;
}

// ---------------------------------------------------------------------------
// Timing.

using Clock = std::chrono::steady_clock;

struct Case {
  Policy policy;
  Format dtype;
  bool report;  // selected by --policy (fp32_arrival may be here only as the baseline)
  const std::vector<uint8_t>* packets;
  std::unique_ptr<Accumulator> acc;
  std::vector<uint8_t> out, flags;
  const char* kernels;
  uint64_t batch = 1;                 // ops between clock reads, calibrated in the warm-up
  std::vector<double> ns_per_op;      // one per repetition
  std::vector<double> add_ns_per_op;  // --breakdown: reset + R x add, no finalize
  uint64_t sink = 0;
};

// One op: what a reducer does for one (job, op, chunk) slot. Without
// `finish` it stops before finalize() (the --breakdown measurement).
inline void one_op(Case& c, uint32_t ranks, size_t packet_bytes, bool finish = true) {
  Accumulator& a = *c.acc;
  a.reset();
  const uint8_t* p = c.packets->data();
  for (uint32_t r = 0; r < ranks; ++r) a.add(p + r * packet_bytes, r);
  if (finish) a.finalize(c.out.data(), c.flags.data());
}

struct Span {
  double secs = 0;
  uint64_t ops = 0;
  Span& operator+=(const Span& o) {
    secs += o.secs;
    ops += o.ops;
    return *this;
  }
  double ns_per_op() const { return secs * 1e9 / double(ops); }
};

// Runs batches of ops until at least min_time has passed.
Span timed(Case& c, uint32_t ranks, size_t packet_bytes, double min_time, bool finish = true) {
  const auto t0 = Clock::now();
  Span s;
  do {
    for (uint64_t k = 0; k < c.batch; ++k) one_op(c, ranks, packet_bytes, finish);
    s.ops += c.batch;
    s.secs = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (s.secs < min_time);
  c.sink += c.out[0] ^ c.flags[0];
  return s;
}

// ---------------------------------------------------------------------------
// Sanity: KULISCH_FIXED must give the same bits whatever the order.

struct OrderCheck {
  uint32_t arrival_lanes_differ = 0;  // FP32_ARRIVAL forward vs reverse (information only)
  int span = -1;                      // exponent fields spanned by the op's non-zero inputs
  int budget = 0;                     // fields a window may span with R-term double sums exact
  uint32_t window_holds = 0;          // contributions (arrival order) before span > budget
  uint64_t kulisch_slow = 0;          // contributions that miss the checked double add
  uint64_t kulisch_total = 0;
  bool wide = false;  // kulisch takes the double + bank accumulator (> 8 B/lane)
};

std::string hex_bits(Format f, const uint8_t* p) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%0*X", int(info(f).bytes) * 2, load_bits(f, p));
  return b;
}

[[noreturn]] void sanity_fail(const std::string& msg) {
  std::fprintf(stderr, "prism-bench: FATAL: sanity check failed: %s\n", msg.c_str());
  std::fprintf(stderr, "prism-bench: FATAL: KULISCH_FIXED is not order-independent here; no timings taken\n");
  std::exit(kSanityFailure);
}

OrderCheck check_order(Format f, uint32_t ranks, uint32_t elements, const std::vector<uint8_t>& pk, const Kernels& k) {
  const size_t pb = size_t(elements) * info(f).bytes;
  OpDesc d;
  d.dtype = f;
  d.out = is_float(f) ? Format::FP32 : Format::INT32;
  d.group = ranks;
  d.lanes = elements;
  const size_t ob = size_t(elements) * info(d.out).bytes;
  OrderCheck oc;

  auto run = [&](Policy p, const Kernels& kk, bool reverse, std::vector<uint8_t>& out, std::vector<uint8_t>& fl,
                 std::vector<LaneExact>* st) {
    OpDesc dd = d;
    dd.policy = p;
    auto a = make_accumulator(dd, kk);
    for (uint32_t i = 0; i < ranks; ++i) {
      const uint32_t r = reverse ? ranks - 1 - i : i;
      a->add(pk.data() + r * pb, r);
    }
    out.assign(ob, 0);
    fl.assign(elements, 0);
    a->finalize(out.data(), fl.data());
    if (st) {
      st->assign(elements, LaneExact{});
      if (!a->state(st->data())) sanity_fail(std::string("kulisch on ") + name(f) + ": state() refused");
    }
  };

  std::vector<uint8_t> o1, f1, o2, f2, o3, f3;
  std::vector<LaneExact> s1, s2;
  run(Policy::KULISCH_FIXED, k, false, o1, f1, &s1);
  run(Policy::KULISCH_FIXED, k, true, o2, f2, &s2);
  const Format of = d.out;
  const uint32_t osz = info(of).bytes;
  for (uint32_t i = 0; i < elements; ++i) {
    if (std::memcmp(&o1[i * osz], &o2[i * osz], osz) != 0 || f1[i] != f2[i])
      sanity_fail(std::string("kulisch on ") + name(f) + ", lane " + std::to_string(i) + ": forward order gives " +
                  hex_bits(of, &o1[i * osz]) + " flags " + std::to_string(f1[i]) + ", reverse order gives " +
                  hex_bits(of, &o2[i * osz]) + " flags " + std::to_string(f2[i]));
    if (s1[i].side != s2[i].side || !(s1[i].value == s2[i].value))
      sanity_fail(std::string("kulisch on ") + name(f) + ", lane " + std::to_string(i) +
                  ": exact state differs between forward and reverse order");
  }
  // The kernels under test must agree with the portable ones, bit for bit.
  if (&k != &portable_kernels()) {
    run(Policy::KULISCH_FIXED, portable_kernels(), false, o3, f3, nullptr);
    if (o3 != o1 || f3 != f1)
      sanity_fail(std::string("kulisch on ") + name(f) + ": " + k.name + " and portable kernels disagree");
  }
  // Information: how much the order matters to FP32_ARRIVAL on this data.
  run(Policy::FP32_ARRIVAL, k, false, o1, f1, nullptr);
  run(Policy::FP32_ARRIVAL, k, true, o2, f2, nullptr);
  for (uint32_t i = 0; i < elements; ++i) oc.arrival_lanes_differ += std::memcmp(&o1[i * osz], &o2[i * osz], osz) != 0;

  // Information about the data: the exponent fields its non-zero inputs span
  // over the whole op, against the span in which R-term sums stay exact in a
  // double (53 - p - ceil(log2 R)); subnormals count as field 1.
  if (is_float(f)) {
    const FormatInfo& fi = info(f);
    const uint32_t emask = (1u << fi.ebits) - 1, magmask = fi.sign_bit - 1;
    uint32_t lo = ~0u, hi = 0;
    // The wide accumulator's fast lane: a float for formats of <= 11 bits (bf16, fp16), else a double.
    oc.budget = (fi.p <= 11 ? 24 : 53) - fi.p - ceil_log2(ranks);
    bool held = true;
    for (uint32_t r = 0; r < ranks; ++r) {
      for (uint32_t i = 0; i < elements; ++i) {
        const uint32_t x = load_bits(f, pk.data() + r * pb + i * fi.bytes) & magmask;
        if (x == 0) continue;
        const uint32_t ex = std::max((x >> fi.mbits) & emask, 1u);
        lo = std::min(lo, ex);
        hi = std::max(hi, ex);
      }
      if (held && lo <= hi && int(hi) - int(lo) > oc.budget) held = false;
      if (held) ++oc.window_holds;
    }
    oc.span = lo <= hi ? int(hi) - int(lo) : 0;
  }
  // Information: how often the checked double add misses (the wide
  // accumulator then pays a TwoSum and a bank add). A missed lane still takes
  // the rounded sum in its double, as in the accumulator.
  {
    OpDesc dk = d;
    dk.policy = Policy::KULISCH_FIXED;
    oc.wide = is_float(f) && make_accumulator(dk, k)->bytes_per_lane() > 8;
  }
  if (oc.wide && info(f).p <= 11) {
    std::vector<float> acc(elements, -0.0f);
    std::vector<uint32_t> left(elements);
    for (uint32_t r = 0; r < ranks; ++r) {
      const uint8_t* e = pk.data() + r * pb;
      const uint32_t n = k.add_f32_checked(f, acc.data(), e, elements, left.data());
      for (uint32_t j = 0; j < n; ++j) acc[left[j]] += to_float(f, load_bits(f, e + left[j] * info(f).bytes));
      oc.kulisch_slow += n;
    }
    oc.kulisch_total = uint64_t(ranks) * elements;
  } else if (oc.wide) {
    std::vector<double> acc(elements, -0.0);
    std::vector<uint32_t> left(elements);
    for (uint32_t r = 0; r < ranks; ++r) {
      const uint8_t* e = pk.data() + r * pb;
      const uint32_t n = k.add_f64_checked(f, acc.data(), e, elements, left.data());
      for (uint32_t j = 0; j < n; ++j) acc[left[j]] += double(to_float(f, load_bits(f, e + left[j] * info(f).bytes)));
      oc.kulisch_slow += n;
    }
    oc.kulisch_total = uint64_t(ranks) * elements;
  }
  return oc;
}

// ---------------------------------------------------------------------------
// Targets (BRIEF.md, "Arithmetic" and the task that set them).

bool is_fp8(Format f) { return is_float(f) && info(f).bytes == 1; }

// KULISCH_FIXED's time as a multiple of FP32_ARRIVAL's on the same format; 0: none.
double speed_target(Policy p, Format f) {
  if (p != Policy::KULISCH_FIXED) return 0;
  if (f == Format::FP32) return 3.0;
  if (f == Format::FP16 || f == Format::BF16 || is_fp8(f)) return 1.5;
  return 0;
}
// KULISCH_FIXED's bytes of state per lane; 0: none (bf16 has no stated memory target).
size_t memory_target(Policy p, Format f) {
  if (p != Policy::KULISCH_FIXED) return 0;
  if (f == Format::FP32) return 64;
  if (f == Format::FP16 || is_fp8(f)) return 8;
  return 0;
}

struct Row {
  const Case* c;
  double ns_per_elem, ns_per_elem_median, gelem_s, gbps, ratio;  // ratio < 0: no baseline
  double ratio_median;                                           // of the per-repetition ratios
  double add_ns_per_elem, finalize_ns_per_lane;                  // --breakdown
  size_t bytes_per_lane;
  uint64_t lcores_100g;
  double st;  // speed target (0: none)
  size_t mt;  // memory target (0: none)
  bool speed_pass, mem_pass;
};

int run_reducers(int argc, char** argv) {
  const ReducerArgs a = parse_reducers(argc, argv);

  const Kernels* k = nullptr;
  if (a.kernels == "auto") {
    k = &best_kernels();
  } else if (a.kernels == "portable") {
    k = &portable_kernels();
  } else {
    k = avx2_kernels();
    if (!k) fail("--kernels avx2: this CPU lacks AVX2/FMA/F16C; use portable or auto");
  }

  std::vector<Format> dtypes = a.dtypes;
  if (dtypes.empty()) dtypes.assign(std::begin(kFormats), std::end(kFormats));
  std::vector<Policy> want = a.policies;
  if (want.empty()) want.assign(std::begin(kPolicies), std::end(kPolicies));
  auto wanted = [&](Policy p) { return std::find(want.begin(), want.end(), p) != want.end(); };

  // Data, sanity checks and accumulators, all before any timing.
  std::vector<std::vector<uint8_t>> packets(dtypes.size());
  std::vector<OrderCheck> checks(dtypes.size());
  std::vector<Case> cases;
  cases.reserve(dtypes.size() * 3);
  for (size_t di = 0; di < dtypes.size(); ++di) {
    const Format f = dtypes[di];
    packets[di] = make_packets(f, a.ranks, a.elements, a.seed, a.spread);
    checks[di] = check_order(f, a.ranks, a.elements, packets[di], *k);
    for (Policy p : kPolicies) {
      if (!wanted(p) && p != Policy::FP32_ARRIVAL) continue;
      Case c;
      c.policy = p;
      c.dtype = f;
      c.report = wanted(p);
      c.packets = &packets[di];
      OpDesc d;
      d.dtype = f;
      d.out = is_float(f) ? Format::FP32 : Format::INT32;
      d.policy = p;
      d.group = a.ranks;
      d.lanes = a.elements;
      c.acc = make_accumulator(d, *k);
      c.out.assign(size_t(a.elements) * info(d.out).bytes, 0);
      c.flags.assign(a.elements, 0);
      c.kernels = k->name;
      cases.push_back(std::move(c));
    }
  }

  // A repetition of a case is kSlices slices of min_time / kSlices, taken in
  // turn with the other policies of the same format (so drift within a
  // repetition touches every policy of a format alike); every case gets a
  // repetition before any gets its next.
  constexpr int kSlices = 8;
  const double slice = a.min_time / kSlices;
  // Warm-up and calibration: about 4 clock reads per slice.
  for (auto& c : cases) {
    const size_t pb = size_t(a.elements) * info(c.dtype).bytes;
    one_op(c, a.ranks, pb);
    c.batch = 1;
    const double ns = timed(c, a.ranks, pb, std::min(a.min_time, 0.05)).ns_per_op();
    c.batch = std::max<uint64_t>(1, uint64_t(slice * 1e9 / 4 / ns));
    timed(c, a.ranks, pb, a.min_time);
  }
  for (uint32_t rep = 0; rep < a.repeat; ++rep) {
    for (size_t g = 0; g < cases.size();) {
      size_t end = g;
      while (end < cases.size() && cases[end].dtype == cases[g].dtype) ++end;
      std::vector<Span> full(end - g), adds(end - g);
      for (int sl = 0; sl < kSlices; ++sl)
        for (size_t j = g; j < end; ++j) {
          const size_t pb = size_t(a.elements) * info(cases[j].dtype).bytes;
          full[j - g] += timed(cases[j], a.ranks, pb, slice);
          if (a.breakdown) adds[j - g] += timed(cases[j], a.ranks, pb, slice, false);
        }
      for (size_t j = g; j < end; ++j) {
        cases[j].ns_per_op.push_back(full[j - g].ns_per_op());
        if (a.breakdown) cases[j].add_ns_per_op.push_back(adds[j - g].ns_per_op());
      }
      g = end;
    }
  }

  // Results.
  const double contribs = double(a.ranks) * a.elements;
  std::vector<Row> rows;
  for (const auto& c : cases) {
    if (!c.report) continue;
    Row r{};
    r.c = &c;
    std::vector<double> v = c.ns_per_op;
    std::sort(v.begin(), v.end());
    r.ns_per_elem = v.front() / contribs;
    r.ns_per_elem_median = v[v.size() / 2] / contribs;
    r.gelem_s = 1.0 / r.ns_per_elem;
    r.gbps = 8.0 * info(c.dtype).bytes / r.ns_per_elem;
    r.lcores_100g = uint64_t(std::ceil(100e9 / (r.gbps * 1e9) - 1e-9));
    r.ratio = r.ratio_median = -1;
    for (const auto& b : cases)
      if (b.dtype == c.dtype && b.policy == Policy::FP32_ARRIVAL) {
        r.ratio = *std::min_element(c.ns_per_op.begin(), c.ns_per_op.end()) /
                  *std::min_element(b.ns_per_op.begin(), b.ns_per_op.end());
        std::vector<double> pr;
        for (size_t i = 0; i < c.ns_per_op.size(); ++i) pr.push_back(c.ns_per_op[i] / b.ns_per_op[i]);
        std::sort(pr.begin(), pr.end());
        r.ratio_median = pr[pr.size() / 2];
      }
    if (a.breakdown) {
      const double add_best = *std::min_element(c.add_ns_per_op.begin(), c.add_ns_per_op.end());
      r.add_ns_per_elem = add_best / contribs;
      r.finalize_ns_per_lane = (v.front() - add_best) / a.elements;
    }
    r.bytes_per_lane = c.acc->bytes_per_lane();
    r.st = speed_target(c.policy, c.dtype);
    r.mt = memory_target(c.policy, c.dtype);
    r.speed_pass = r.st > 0 && r.ratio >= 0 && r.ratio <= r.st;
    r.mem_pass = r.mt > 0 && r.bytes_per_lane <= r.mt;
    rows.push_back(r);
  }
  int n_targets = 0, n_pass = 0;
  std::string misses;
  for (const auto& r : rows) {
    if (r.st > 0) {
      ++n_targets;
      if (r.speed_pass)
        ++n_pass;
      else {
        char b[96];
        std::snprintf(b, sizeof b, " %s/%s %.2fx>%.1fx;", name(r.c->policy), name(r.c->dtype), r.ratio, r.st);
        misses += b;
      }
    }
    if (r.mt > 0) {
      ++n_targets;
      if (r.mem_pass)
        ++n_pass;
      else
        misses += std::string(" ") + name(r.c->policy) + "/" + name(r.c->dtype) + " " +
                  std::to_string(r.bytes_per_lane) + "B>" + std::to_string(r.mt) + "B;";
    }
  }
  if (!misses.empty()) misses.pop_back();
  uint64_t sink = 0;
  for (const auto& c : cases) sink += c.sink;
  const std::string cpu = cpu_model();

  if (a.json) {
    for (const auto& r : rows) {
      const Case& c = *r.c;
      std::printf(
          "{\"bench\":\"reducers\",\"policy\":\"%s\",\"dtype\":\"%s\",\"ranks\":%u,\"elements\":%u,"
          "\"ns_per_elem\":%.6g,\"ns_per_elem_median\":%.6g,\"gelem_s\":%.6g,\"gbps\":%.6g,",
          name(c.policy), name(c.dtype), a.ranks, a.elements, r.ns_per_elem, r.ns_per_elem_median, r.gelem_s, r.gbps);
      if (r.ratio >= 0)
        std::printf("\"ratio_vs_arrival\":%.4g,\"ratio_median\":%.4g,", r.ratio, r.ratio_median);
      else
        std::printf("\"ratio_vs_arrival\":null,\"ratio_median\":null,");
      if (a.breakdown)
        std::printf("\"add_ns_per_elem\":%.6g,\"finalize_ns_per_lane\":%.6g,", r.add_ns_per_elem,
                    r.finalize_ns_per_lane);
      std::printf("\"bytes_per_lane\":%zu,\"lcores_100g\":%llu,\"kernels\":\"%s\",\"repeat\":%u,\"min_time_s\":%g,",
                  r.bytes_per_lane, (unsigned long long)r.lcores_100g, c.kernels, a.repeat, a.min_time);
      if (r.st > 0)
        std::printf("\"speed_target\":%g,\"speed_pass\":%s,", r.st, r.speed_pass ? "true" : "false");
      else
        std::printf("\"speed_target\":null,\"speed_pass\":null,");
      if (r.mt > 0)
        std::printf("\"mem_target\":%zu,\"mem_pass\":%s}\n", r.mt, r.mem_pass ? "true" : "false");
      else
        std::printf("\"mem_target\":null,\"mem_pass\":null}\n");
    }
    std::printf(
        "{\"bench\":\"reducers\",\"summary\":true,\"kernels\":\"%s\",\"cpu\":%s,\"targets\":%d,\"pass\":%d,"
        "\"miss\":%d,\"kulisch_order_check\":\"pass\"}\n",
        k->name, json_str(cpu).c_str(), n_targets, n_pass, n_targets - n_pass);
    return sink == 0xFFFFFFFFFFFFFFFFull ? 1 : 0;  // keeps the results observable
  }

  std::printf("# prism-bench reducers: R=%u ranks, %u elements per packet, best of %u x >=%gs, kernels %s\n", a.ranks,
              a.elements, a.repeat, a.min_time, k->name);
  std::printf("# cpu: %s; one op = reset + %u x add + finalize (output fp32, int32 for integer inputs)\n", cpu.c_str(),
              a.ranks);
  std::printf(
      "# ns/elem = op time / (R x elements); Gbit/s = contribution payload; lc@100G = ceil(100 / Gbit/s);\n"
      "# xarrival = best / best of fp32_arrival on the dtype; med = median of per-repetition ratios\n");
  if (a.breakdown)
    std::printf(
        "# --breakdown: add ns/elem = (reset + R x add) / (R x elements); fin ns/lane = (op - that) / "
        "elements\n");
  std::printf("%-13s %-8s %5s %5s %9s %8s %8s %8s %5s %6s %7s %-8s ", "policy", "dtype", "ranks", "elems", "ns/elem",
              "Gelem/s", "Gbit/s", "xarrival", "med", "B/lane", "lc@100G", "kernels");
  if (a.breakdown) std::printf("%9s %9s ", "add/elem", "fin/lane");
  std::printf("targets\n");
  for (const auto& r : rows) {
    const Case& c = *r.c;
    char ratio[16], med[16], tgt[96] = "";
    if (r.ratio >= 0) {
      std::snprintf(ratio, sizeof ratio, "%.2f", r.ratio);
      std::snprintf(med, sizeof med, "%.2f", r.ratio_median);
    } else {
      std::snprintf(ratio, sizeof ratio, "-");
      std::snprintf(med, sizeof med, "-");
    }
    int n = 0;
    if (r.st > 0) n += std::snprintf(tgt + n, sizeof tgt - n, "speed<=%.1fx %s", r.st, r.speed_pass ? "PASS" : "MISS");
    if (r.mt > 0)
      std::snprintf(tgt + n, sizeof tgt - n, "%smem<=%zuB %s", n ? ", " : "", r.mt, r.mem_pass ? "PASS" : "MISS");
    if (r.st == 0 && r.mt == 0) std::snprintf(tgt, sizeof tgt, "-");
    std::printf("%-13s %-8s %5u %5u %9.4f %8.3f %8.1f %8s %5s %6zu %7llu %-8s ", name(c.policy), name(c.dtype), a.ranks,
                a.elements, r.ns_per_elem, r.gelem_s, r.gbps, ratio, med, r.bytes_per_lane,
                (unsigned long long)r.lcores_100g, c.kernels);
    if (a.breakdown) std::printf("%9.4f %9.2f ", r.add_ns_per_elem, r.finalize_ns_per_lane);
    std::printf("%s\n", tgt);
  }
  std::printf("# sanity: kulisch forward == reverse order, bit for bit, on every dtype");
  if (k != &portable_kernels()) std::printf("; %s kernels == portable kernels", k->name);
  std::printf("\n");
  for (size_t di = 0; di < dtypes.size(); ++di) {
    if (!is_float(dtypes[di])) continue;
    const OrderCheck& oc = checks[di];
    std::printf("# %-8s fp32_arrival fwd vs rev: %3u of %u lanes differ; input exponent span %d fields",
                name(dtypes[di]), oc.arrival_lanes_differ, a.elements, oc.span);
    if (oc.wide)
      std::printf(" (exact fast-lane window %d: held for %u of %u contributions); checked-add misses %llu of %llu",
                  oc.budget, oc.window_holds, a.ranks, (unsigned long long)oc.kulisch_slow,
                  (unsigned long long)oc.kulisch_total);
    std::printf("\n");
  }
  std::printf("summary: %d of %d targets pass", n_pass, n_targets);
  if (!misses.empty()) std::printf("; MISS:%s", misses.c_str());
  std::printf(" (kernels %s, R=%u, %u elements)\n", k->name, a.ranks, a.elements);
  return sink == 0xFFFFFFFFFFFFFFFFull ? 1 : 0;
}

struct Subcommand {
  const char* name;
  int (*run)(int argc, char** argv);  // argv: the subcommand's own arguments
};
const Subcommand kSubcommands[] = {
    {"reducers", run_reducers},
    {"pipeline", prism::bench::run_pipeline},
};

int run(int argc, char** argv) {
  if (argc < 2) fail("missing subcommand: use reducers or pipeline (see --help)");
  const std::string sub = argv[1];
  if (sub == "-h" || sub == "--help" || sub == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  for (const auto& s : kSubcommands)
    if (sub == s.name) return s.run(argc - 2, argv + 2);
  if (!sub.empty() && sub[0] == '-') fail("unknown option '" + sub + "': give a subcommand first (see --help)");
  fail("unknown subcommand '" + sub + "': use reducers or pipeline (see --help)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Fail& e) {
    std::fprintf(stderr, "prism-bench: %s\n", e.msg.c_str());
    return kUsageError;
  } catch (const cli::Error& e) {
    std::fprintf(stderr, "prism-bench: %s\n", e.msg.c_str());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism-bench: %s\n", e.what());
    return kUsageError;
  }
}
