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
#include "json.hpp"
#include "kernels_option.hpp"

using namespace prism;
using namespace prism::bench;

namespace prism::bench {
int run_pipeline(int argc, char** argv);  // bench_pipeline.cpp
}

namespace {

constexpr int kSanityFailure = 3;

using cli::fail;

const char* kUsage =
    "usage: prism-bench SUBCOMMAND [options]   (prism-bench SUBCOMMAND --help for its options)\n"
    "subcommands:\n"
    "  reducers   ns per element-contribution of each policy x input format (lib/arith hot path)\n"
    "  pipeline   the switch pipeline at full speed from memory, against forward-only and dpdk-testpmd\n";

// "fp32 14, fp16 10, ...": each format's default --spread (bench_data.hpp's windows).
std::string default_spreads() {
  std::string s;
  for (const auto& e : entries(Format{})) {
    const Window w = magnitude_window(e.value);
    s += (s.empty() ? "" : ", ") + std::string(e.name) + " " + std::to_string(int(w.hi - w.lo));
  }
  return s;
}

std::string reducers_usage() {
  return "usage: prism-bench reducers [options]\n"
         "  Times one op = R contributions via Accumulator::add + finalize() + reset(), per policy x dtype,\n"
         "  interleaved in one run; reports the best of --repeat repetitions. xarrival = best / best of\n"
         "  fp32_arrival on the same dtype; med = median of the per-repetition ratios (its stability).\n"
         "options:\n"
         "  --elements N         elements per packet (lanes), 1..65535 (default 256)\n"
         "  --ranks R            contributions per op, 1..65535 (default 64)\n"
         "  --repeat K           timed repetitions per case; the best is reported (default 5)\n"
         "  --min-time S         seconds per repetition, at least (default 0.1)\n"
         "  --kernels K          " +
         std::string(app::kKernelChoices) +
         " (default auto: avx2 when the CPU has it,\n"
         "                       unless PRISM_KERNELS=portable)\n"
         "  --policy LIST        comma-separated: " +
         choices<Policy>() +
         ", or all (default all);\n"
         "                       fp32_arrival is always measured as the baseline of the ratios\n"
         "  --dtype LIST         comma-separated: " +
         choices<Format>() +
         ",\n"
         "                       or all (default all)\n"
         "  --seed N             seed of the generated gradient-like data (default 1)\n"
         "  --spread B           binades spanned by the per-element magnitudes (default per format:\n"
         "                       " +
         default_spreads() +
         ")\n"
         "  --breakdown          also time reset + R x add alone (interleaved) and report the add's\n"
         "                       ns per element-contribution and finalize's ns per lane (the difference)\n"
         "  --json               one JSON object per line instead of the table\n"
         "  -h, --help           this text\n";
}

// ---------------------------------------------------------------------------
// Command line.

struct ReducerArgs {
  uint32_t elements = 256;
  uint32_t ranks = 64;
  uint32_t repeat = 5;
  double min_time = 0.1;
  const Kernels* kernels = nullptr;
  std::vector<Policy> policies;  // what is reported (fp32_arrival is measured anyway)
  std::vector<Format> dtypes;
  uint64_t seed = 1;
  double spread = -1;  // < 0: the format's default window
  bool json = false;
  bool breakdown = false;
};

ReducerArgs parse_reducers(int argc, char** argv) {
  for (int i = 0; i < argc; ++i)
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(reducers_usage().c_str(), stdout);
      std::exit(0);
    }
  const cli::Args c(
      argc, argv, 0,
      {"--elements", "--ranks", "--repeat", "--min-time", "--kernels", "--policy", "--dtype", "--seed", "--spread"},
      {"--json", "--breakdown"});
  if (!c.positional.empty())
    fail("unexpected argument '" + c.positional[0] + "' for reducers (see prism-bench reducers --help)");
  ReducerArgs a;
  a.elements = uint32_t(c.num("--elements", 1, 65535, a.elements));
  a.ranks = uint32_t(c.num("--ranks", 1, 65535, a.ranks));
  a.repeat = uint32_t(c.num("--repeat", 1, 1000, a.repeat));
  a.seed = c.num("--seed", 0, UINT64_MAX, a.seed);
  a.spread = c.real("--spread", 0, 40, a.spread);
  a.min_time = c.real("--min-time", 0, 60, a.min_time);
  if (!(a.min_time > 0)) fail("bad --min-time '" + c.str("--min-time") + "': give seconds, more than 0 and at most 60");
  a.kernels = &app::kernels_named(c.str("--kernels", "auto"));
  a.policies = cli::list_of<Policy>("policy", c.str("--policy", "all"));
  a.dtypes = cli::list_of<Format>("dtype", c.str("--dtype", "all"));
  a.json = c.has("--json");
  a.breakdown = c.has("--breakdown");
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

// ---------------------------------------------------------------------------
// The run, in named steps: prepare (data, sanity checks and accumulators,
// before any timing), calibrate, measure, then rows, targets and the report.

struct Plan {
  std::vector<Format> dtypes;
  std::vector<std::vector<uint8_t>> packets;  // per dtype
  std::vector<OrderCheck> checks;             // per dtype
  std::vector<Case> cases;                    // grouped by dtype, fp32_arrival in every group
};

OpDesc bench_desc(Policy p, Format f, const ReducerArgs& a) {
  OpDesc d;
  d.dtype = f;
  d.out = is_float(f) ? Format::FP32 : Format::INT32;
  d.policy = p;
  d.group = a.ranks;
  d.lanes = a.elements;
  return d;
}

Plan prepare(const ReducerArgs& a) {
  auto wanted = [&](Policy p) { return std::find(a.policies.begin(), a.policies.end(), p) != a.policies.end(); };
  // Every case the run will time is admitted now, before any data is made: a
  // shape the accumulators refuse fails here, with the reason, not mid-run.
  for (Format f : a.dtypes)
    for (const auto& e : entries(Policy{}))
      if (wanted(e.value) || e.value == Policy::FP32_ARRIVAL)
        if (auto err = admission_error(bench_desc(e.value, f, a), kMaxWidth))
          fail("--ranks " + std::to_string(a.ranks) + " with --elements " + std::to_string(a.elements) + ": " + *err);
  Plan pl;
  pl.dtypes = a.dtypes;
  pl.packets.resize(a.dtypes.size());
  pl.checks.resize(a.dtypes.size());
  pl.cases.reserve(a.dtypes.size() * count<Policy>());
  for (size_t di = 0; di < a.dtypes.size(); ++di) {
    const Format f = a.dtypes[di];
    pl.packets[di] = make_packets(f, a.ranks, a.elements, a.seed, a.spread);
    pl.checks[di] = check_order(f, a.ranks, a.elements, pl.packets[di], *a.kernels);
    for (const auto& e : entries(Policy{})) {
      const Policy p = e.value;
      if (!wanted(p) && p != Policy::FP32_ARRIVAL) continue;
      Case c;
      c.policy = p;
      c.dtype = f;
      c.report = wanted(p);
      c.packets = &pl.packets[di];
      const OpDesc d = bench_desc(p, f, a);
      c.acc = make_accumulator(d, *a.kernels);
      c.out.assign(size_t(a.elements) * info(d.out).bytes, 0);
      c.flags.assign(a.elements, 0);
      c.kernels = a.kernels->name;
      pl.cases.push_back(std::move(c));
    }
  }
  return pl;
}

// A repetition of a case is kSlices slices of min_time / kSlices, taken in
// turn with the other policies of the same format (so drift within a
// repetition touches every policy of a format alike); every case gets a
// repetition before any gets its next.
constexpr int kSlices = 8;

size_t packet_bytes(const Case& c, const ReducerArgs& a) { return size_t(a.elements) * info(c.dtype).bytes; }

// Warm-up and calibration: about 4 clock reads per slice.
void calibrate(std::vector<Case>& cases, const ReducerArgs& a) {
  const double slice = a.min_time / kSlices;
  for (auto& c : cases) {
    const size_t pb = packet_bytes(c, a);
    one_op(c, a.ranks, pb);
    c.batch = 1;
    const double ns = timed(c, a.ranks, pb, std::min(a.min_time, 0.05)).ns_per_op();
    c.batch = std::max<uint64_t>(1, uint64_t(slice * 1e9 / 4 / ns));
    timed(c, a.ranks, pb, a.min_time);
  }
}

void measure(std::vector<Case>& cases, const ReducerArgs& a) {
  const double slice = a.min_time / kSlices;
  for (uint32_t rep = 0; rep < a.repeat; ++rep) {
    for (size_t g = 0; g < cases.size();) {
      size_t end = g;
      while (end < cases.size() && cases[end].dtype == cases[g].dtype) ++end;
      std::vector<Span> full(end - g), adds(end - g);
      for (int sl = 0; sl < kSlices; ++sl)
        for (size_t j = g; j < end; ++j) {
          const size_t pb = packet_bytes(cases[j], a);
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
}

std::vector<Row> make_rows(const std::vector<Case>& cases, const ReducerArgs& a) {
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
  return rows;
}

struct Verdict {
  int targets = 0, pass = 0;
  std::string misses;  // " policy/dtype 3.20x>3.0x; ..."
};

Verdict judge(const std::vector<Row>& rows) {
  Verdict v;
  for (const auto& r : rows) {
    if (r.st > 0) {
      ++v.targets;
      if (r.speed_pass)
        ++v.pass;
      else {
        char b[96];
        std::snprintf(b, sizeof b, " %s/%s %.2fx>%.1fx;", name(r.c->policy), name(r.c->dtype), r.ratio, r.st);
        v.misses += b;
      }
    }
    if (r.mt > 0) {
      ++v.targets;
      if (r.mem_pass)
        ++v.pass;
      else
        v.misses += std::string(" ") + name(r.c->policy) + "/" + name(r.c->dtype) + " " +
                    std::to_string(r.bytes_per_lane) + "B>" + std::to_string(r.mt) + "B;";
    }
  }
  if (!v.misses.empty()) v.misses.pop_back();
  return v;
}

void print_json(const std::vector<Row>& rows, const Verdict& v, const ReducerArgs& a, const std::string& cpu) {
  for (const auto& r : rows) {
    const Case& c = *r.c;
    app::JsonObject o;
    o.str("bench", "reducers").str("policy", name(c.policy)).str("dtype", name(c.dtype));
    o.num("ranks", a.ranks).num("elements", a.elements);
    o.num("ns_per_elem", r.ns_per_elem).num("ns_per_elem_median", r.ns_per_elem_median);
    o.num("gelem_s", r.gelem_s).num("gbps", r.gbps);
    if (r.ratio >= 0)
      o.num("ratio_vs_arrival", r.ratio, "%.4g").num("ratio_median", r.ratio_median, "%.4g");
    else
      o.null("ratio_vs_arrival").null("ratio_median");
    if (a.breakdown) o.num("add_ns_per_elem", r.add_ns_per_elem).num("finalize_ns_per_lane", r.finalize_ns_per_lane);
    o.num("bytes_per_lane", r.bytes_per_lane).num("lcores_100g", r.lcores_100g).str("kernels", c.kernels);
    o.num("repeat", a.repeat).num("min_time_s", a.min_time, "%g");
    if (r.st > 0)
      o.num("speed_target", r.st, "%g").boolean("speed_pass", r.speed_pass);
    else
      o.null("speed_target").null("speed_pass");
    if (r.mt > 0)
      o.num("mem_target", r.mt).boolean("mem_pass", r.mem_pass);
    else
      o.null("mem_target").null("mem_pass");
    std::printf("%s\n", o.text().c_str());
  }
  app::JsonObject s;
  s.str("bench", "reducers").boolean("summary", true).str("kernels", a.kernels->name).str("cpu", cpu);
  s.num("targets", v.targets).num("pass", v.pass).num("miss", v.targets - v.pass).str("kulisch_order_check", "pass");
  std::printf("%s\n", s.text().c_str());
}

void print_table(const Plan& pl, const std::vector<Row>& rows, const Verdict& v, const ReducerArgs& a,
                 const std::string& cpu) {
  const Kernels* k = a.kernels;
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
  for (size_t di = 0; di < pl.dtypes.size(); ++di) {
    if (!is_float(pl.dtypes[di])) continue;
    const OrderCheck& oc = pl.checks[di];
    std::printf("# %-8s fp32_arrival fwd vs rev: %3u of %u lanes differ; input exponent span %d fields",
                name(pl.dtypes[di]), oc.arrival_lanes_differ, a.elements, oc.span);
    if (oc.wide)
      std::printf(" (exact fast-lane window %d: held for %u of %u contributions); checked-add misses %llu of %llu",
                  oc.budget, oc.window_holds, a.ranks, (unsigned long long)oc.kulisch_slow,
                  (unsigned long long)oc.kulisch_total);
    std::printf("\n");
  }
  std::printf("summary: %d of %d targets pass", v.pass, v.targets);
  if (!v.misses.empty()) std::printf("; MISS:%s", v.misses.c_str());
  std::printf(" (kernels %s, R=%u, %u elements)\n", k->name, a.ranks, a.elements);
}

int run_reducers(int argc, char** argv) {
  const ReducerArgs a = parse_reducers(argc, argv);
  Plan pl = prepare(a);
  calibrate(pl.cases, a);
  measure(pl.cases, a);
  const std::vector<Row> rows = make_rows(pl.cases, a);
  const Verdict v = judge(rows);
  const std::string cpu = cpu_model();
  if (a.json)
    print_json(rows, v, a, cpu);
  else
    print_table(pl, rows, v, a, cpu);
  uint64_t sink = 0;
  for (const auto& c : pl.cases) sink += c.sink;
  return sink == 0xFFFFFFFFFFFFFFFFull ? 1 : 0;  // keeps the results observable
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
  return cli::run_tool("prism-bench", [&] { return run(argc, argv); });
}
