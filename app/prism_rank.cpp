// prism-rank: one rank of a PRISM job: allreduce or reduce through the
// switch (libprism), or any collective among the hosts by one of the seeds'
// algorithms or the one the cost model picks (lib/coll), of a file or of
// generated data, repeated; prints the time, the algorithm bandwidth,
// retransmissions and a digest of the result, and with --check compares the
// result with the reference model computed from every rank's inputs
// (reproducible from the seed).
//
//   prism-rank --config switch.yaml --rank 3 --size 1MiB --repeat 10 --check
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "arith/accumulator.hpp"
#include "cli.hpp"
#include "coll/binomial.hpp"
#include "coll/blocks.hpp"
#include "coll/calibrate.hpp"
#include "coll/chain.hpp"
#include "coll/rhd.hpp"
#include "coll/ring.hpp"
#include "coll/tcp.hpp"
#include "json.hpp"
#include "output_file.hpp"
#include "prism/prism.hpp"
#include "values.hpp"

using namespace prism;

namespace {

using cli::fail;

// In the cost model's order (coll::CollectiveKind).
enum class Collective : uint8_t { ALLREDUCE, REDUCE, BROADCAST, REDUCE_SCATTER, ALLGATHER };
constexpr Entry<Collective> kCollectives[] = {
    {Collective::ALLREDUCE, "allreduce", "every rank receives the sum"},
    {Collective::REDUCE, "reduce", "the root receives the sum"},
    {Collective::BROADCAST, "broadcast", "every rank receives the root's input (host algorithms)"},
    {Collective::REDUCE_SCATTER, "reduce_scatter",
     "rank r receives block r of the sum (blocks in rank order, the first count % p one larger)"},
    {Collective::ALLGATHER, "allgather", "every rank receives block r of rank r's input, for every r"},
};
constexpr std::span<const Entry<Collective>> entries(Collective) { return kCollectives; }

enum class Algo : uint8_t { SWITCH, BINOMIAL, CHAIN, RHD, RING, AUTO };
constexpr Entry<Algo> kAlgos[] = {
    {Algo::SWITCH, "switch", "through the PRISM switch the config describes (libprism)"},
    {Algo::BINOMIAL, "binomial", "hosts only: seed 000's binomial tree"},
    {Algo::CHAIN, "chain", "hosts only: seed 000's pipelined chain in --segments M segments (to and from rank 0)"},
    {Algo::RHD, "rhd", "hosts only: seed 001's recursive halving-doubling, with the fold for p not a power of two"},
    {Algo::RING, "ring", "hosts only: the ring (allreduce, reduce_scatter, allgather)"},
    {Algo::AUTO, "auto",
     "the --candidates algorithm (and chain m) with the lowest predicted time (lib/coll/cost_model.hpp)"},
};
constexpr std::span<const Entry<Algo>> entries(Algo) { return kAlgos; }

std::string usage() {
  return "usage: prism-rank --config FILE --rank K [--job J] [options]\n"
         "\n"
         "Runs rank K of job J (the config's only job when omitted) through the PRISM switch that FILE\n"
         "configures: FILE is the switch's own YAML; the rank's member entry gives its address.\n"
         "\n"
         "What to reduce:\n"
         "  --size BYTES          input bytes per rank (suffixes KiB MiB GiB; default 1MiB), or\n"
         "  --count N             elements per rank\n"
         "  --input FILE          reduce FILE's raw little-endian elements instead of generated data\n"
         "  --seed S              generated data: element i of rank r is a function of (S, r, i) (default 1)\n"
         "  --dtype D             input format (default fp32): " +
         choices<Format>() +
         "\n"
         "  --out-dtype O         result format (default fp32; int32 for integer inputs)\n"
         "  --policy P            " +
         choices<Policy>() +
         " (default kulisch)\n"
         "  --transport T         partials between switches: " +
         choices<PartialTransport>() +
         " (default kulisch)\n"
         "  --exceptions E        " +
         choices<Exceptions>() +
         " (default ieee)\n"
         "  --collective C        " +
         choices<Collective>() +
         " (default allreduce)\n"
         "  --root R              reduce's and broadcast's root rank (default 0)\n"
         "  --algo A              " +
         choices<Algo>() +
         " (default switch): the host algorithms reduce among the hosts, over\n"
         "                        TCP, with PRISM's arithmetic (KULISCH partials travel losslessly: the same bits)\n"
         "  --segments M          the chain's segments (default: the model's m with --calibration or auto, else 8;\n"
         "                        the default is at least count / 65536: a segment is the chain's memory)\n"
         "  --candidates LIST     what auto chooses among (default switch,binomial,chain,rhd,ring; the switch is\n"
         "                        joined, and measured, only when listed)\n"
         "  --calibration FILE    the cost model's parameters (a JSON object, as --calibrate writes): auto uses\n"
         "                        them instead of measuring, and every algorithm's prediction is printed\n"
         "  --calibrate FILE      measure alpha, beta (ping-pong, ranks 0 and 1), gamma (this op's reducers) and,\n"
         "                        with switch in --candidates, the switch's; rank 0 writes FILE; then exit\n"
         "\n"
         "How:\n"
         "  --repeat N            collectives in a row, each timed (default 1)\n"
         "  --warmup N            untimed collectives first (default 0)\n"
         "  --split K             each collective as K ops in flight at once (non-blocking), waited last first\n"
         "  --in-place            the input buffer receives the result (allreduce and reduce; same widths only)\n"
         "  --window W            chunks in flight (default 64; capped by the job's slot_quota)\n"
         "  --chunk-elems C       elements per packet (default: the most the path MTU fits)\n"
         "  --timeout-ms T        an op fails when none of its chunks completed for T ms (default 10000)\n"
         "  --first-op N          the first op number (default 0): a job restarted under a new one\n"
         "\n"
         "Output:\n"
         "  --check               compare every collective's result with the reference model (generated data\n"
         "                        only; the reference is computed once, before the first): KULISCH_FIXED,\n"
         "                        FP32_BINOMIAL and integers bit for bit, FP32_ARRIVAL within its error bound\n"
         "  --output FILE         write the last result's raw elements to FILE ({rank} in FILE: this rank's number;\n"
         "                        reduce_scatter's ranks each hold a different block)\n"
         "  --json                one JSON object on stdout instead of the text lines\n"
         "\n"
         "Prints the time per collective (min, median), the algorithm bandwidth (input bytes / time),\n"
         "chunks, retransmissions, NACKs, the round trip and a digest (FNV-1a 64 of the result bytes).\n"
         "Exit status: 0 done (and checked), 1 a collective failed or the check found a difference\n"
         "(the reason is printed), 2 a usage or configuration error.\n";
}

struct Run {
  std::string config, input, output;
  ConfigSelect sel;
  Tuning tune;
  uint64_t count = 0;
  uint64_t seed = 1;
  Format dtype = Format::FP32, out = Format::FP32;
  Policy policy = Policy::KULISCH_FIXED;
  PartialTransport transport = PartialTransport::KULISCH;
  Exceptions exceptions = Exceptions::IEEE;
  Collective coll = Collective::ALLREDUCE;
  Algo algo = Algo::SWITCH;
  uint64_t segments = 0;  // 0: the model's m (with a calibration), else 8
  std::vector<Algo> candidates;
  bool candidates_given = false;
  std::string calibration, calibrate_out;
  uint16_t root = 0;
  uint64_t repeat = 1, warmup = 0, split = 1;
  bool in_place = false, check = false, json = false;
};

uint64_t parse_size(const std::string& s) {
  size_t at = 0;
  while (at < s.size() && std::isdigit(uint8_t(s[at]))) ++at;
  if (at == 0) fail("bad --size '" + s + "': give bytes, e.g. 4096, 64KiB, 1MiB, 1GiB");
  const uint64_t n = std::stoull(s.substr(0, at));
  const std::string unit = s.substr(at);
  uint64_t mul = 1;
  if (unit == "" || unit == "B")
    mul = 1;
  else if (unit == "KiB" || unit == "K" || unit == "k")
    mul = 1ull << 10;
  else if (unit == "MiB" || unit == "M")
    mul = 1ull << 20;
  else if (unit == "GiB" || unit == "G")
    mul = 1ull << 30;
  else
    fail("bad --size unit '" + unit + "': use KiB, MiB or GiB");
  return n * mul;
}

Run parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(usage().c_str(), stdout);
      std::exit(0);
    }
  const cli::Args a(
      argc, argv, 1,
      {"--config",   "--rank",      "--job",      "--size",       "--count",       "--input",       "--seed",
       "--dtype",    "--out-dtype", "--policy",   "--transport",  "--exceptions",  "--collective",  "--root",
       "--algo",     "--repeat",    "--warmup",   "--split",      "--window",      "--chunk-elems", "--timeout-ms",
       "--first-op", "--output",    "--segments", "--candidates", "--calibration", "--calibrate"},
      {"--check", "--json", "--in-place"});
  if (!a.positional.empty()) fail("unexpected argument '" + a.positional[0] + "' (see --help)");
  Run r;
  r.config = a.str("--config");
  if (r.config.empty()) fail("missing --config FILE: the switch's YAML, which registers this rank");
  if (!a.has("--rank")) fail("missing --rank K: which member of the job this process is");
  r.sel.rank = int(a.num("--rank", 0, 65534, 0));
  r.sel.job = uint32_t(a.num("--job", 0, UINT32_MAX, 0));
  r.dtype = cli::one_of<Format>(a, "--dtype", Format::FP32);
  r.out = cli::one_of<Format>(a, "--out-dtype", is_float(r.dtype) ? Format::FP32 : Format::INT32);
  r.policy = cli::one_of<Policy>(a, "--policy", Policy::KULISCH_FIXED);
  r.transport = cli::one_of<PartialTransport>(a, "--transport", PartialTransport::KULISCH);
  r.exceptions = cli::one_of<Exceptions>(a, "--exceptions", Exceptions::IEEE);
  r.coll = cli::one_of<Collective>(a, "--collective", Collective::ALLREDUCE);
  r.algo = cli::one_of<Algo>(a, "--algo", Algo::SWITCH);
  r.segments = a.num("--segments", 1, 1 << 20, 0);
  if (a.has("--segments") && r.algo != Algo::CHAIN) fail("--segments is the chain's: give it with --algo chain");
  r.root = uint16_t(a.num("--root", 0, 65534, 0));
  if (r.algo != Algo::AUTO && !a.has("--calibrate")) {  // --calibrate runs no collective
    coll::CostParams any;
    any.have_switch = true;
    const coll::Problem pr{coll::CollectiveKind(uint8_t(r.coll)), 2, 1, 4, r.root};
    if (!coll::predict(coll::Algorithm(uint8_t(r.algo)), pr, any)) {
      if (r.algo == Algo::CHAIN && r.root != 0)
        fail(std::string("--algo chain ") + (r.coll == Collective::REDUCE ? "reduces to" : "broadcasts from") +
             " rank 0 only: give --root 0");
      fail(std::string("--algo ") + name(r.algo) + " runs no " + name(r.coll) +
           " (switch: allreduce, reduce; binomial: allreduce, reduce, broadcast; chain: those three; rhd: all five; "
           "ring: allreduce, reduce_scatter, allgather)");
    }
  }
  r.candidates = cli::list_of<Algo>("--candidates algorithm",
                                    a.has("--candidates") ? a.str("--candidates") : "switch,binomial,chain,rhd,ring");
  if (std::find(r.candidates.begin(), r.candidates.end(), Algo::AUTO) != r.candidates.end())
    fail("--candidates lists algorithms: auto is not one");
  if (r.candidates.empty()) fail("--candidates is empty: list at least one of switch,binomial,chain,rhd,ring");
  if (a.has("--candidates") && r.algo != Algo::AUTO && !a.has("--calibrate"))
    fail("--candidates is what --algo auto chooses among: give it with --algo auto (or --calibrate)");
  r.candidates_given = a.has("--candidates");
  if (r.algo == Algo::AUTO) {  // some candidate must run the collective
    coll::CostParams any;
    any.have_switch = true;
    const coll::Problem pr{coll::CollectiveKind(uint8_t(r.coll)), 2, 1, 4, r.root};
    bool runs = false;
    for (Algo c : r.candidates) runs = runs || coll::predict(coll::Algorithm(uint8_t(c)), pr, any).has_value();
    if (!runs)
      fail(std::string("no algorithm of --candidates runs ") + name(r.coll) +
           (r.root ? " with --root " + std::to_string(r.root) : std::string()) +
           " (switch: allreduce, reduce; binomial: allreduce, reduce, broadcast; chain: those three, rank 0 as "
           "root; rhd: all five; ring: allreduce, reduce_scatter, allgather)");
  }
  r.calibration = a.str("--calibration");
  r.calibrate_out = a.str("--calibrate");
  if (a.has("--calibration") && a.has("--calibrate"))
    fail("give --calibration FILE (use a calibration) or --calibrate FILE (make one), not both");
  if (a.has("--calibrate") && r.calibrate_out.empty()) fail("--calibrate needs a FILE to write");
  r.input = a.str("--input");
  r.output = a.str("--output");
  r.seed = a.num("--seed", 0, UINT64_MAX, 1);
  r.repeat = a.num("--repeat", 1, 1000000, 1);
  r.warmup = a.num("--warmup", 0, 1000000, 0);
  r.split = a.num("--split", 1, 4096, 1);
  if (r.split != 1 && r.algo != Algo::SWITCH)
    fail("--split needs --algo switch (the host algorithms run one op at a time)");
  r.in_place = a.has("--in-place");
  r.check = a.has("--check");
  r.json = a.has("--json");
  r.tune.window = uint32_t(a.num("--window", 1, 1 << 20, r.tune.window));
  r.tune.chunk_elems = uint32_t(a.num("--chunk-elems", 0, 65535, 0));
  r.tune.timeout_ms = uint32_t(a.num("--timeout-ms", 1, 3600000, r.tune.timeout_ms));
  r.tune.first_op = uint32_t(a.num("--first-op", 0, UINT32_MAX, 0));
  const uint64_t esz = info(r.dtype).bytes;
  if (a.has("--count") && a.has("--size")) fail("give --size or --count, not both");
  if (!r.input.empty() && (a.has("--count") || a.has("--size"))) fail("--input sets the size: drop --size/--count");
  if (a.has("--count"))
    r.count = a.num("--count", 0, uint64_t(1) << 34, 0);
  else if (r.input.empty()) {
    const uint64_t bytes = a.has("--size") ? parse_size(a.str("--size")) : (1u << 20);
    if (bytes % esz)
      fail("--size " + std::to_string(bytes) + " is not a whole number of " + info(r.dtype).name + " elements");
    r.count = bytes / esz;
  }
  if (r.check && !r.input.empty()) fail("--check needs generated data (every rank's input from the seed), not --input");
  if (r.in_place && r.coll != Collective::ALLREDUCE && r.coll != Collective::REDUCE)
    fail("--in-place is for allreduce and reduce");
  if (r.in_place && info(r.dtype).bytes != info(r.out).bytes)
    fail(std::string("--in-place needs formats of the same width (") + info(r.dtype).name + " in, " + info(r.out).name +
         " out)");
  return r;
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Rank r's generated input: element i is a function of (seed, r, i) only,
// so any process can make every rank's input (--check does). Floats spread
// over 2^-8..2^8 with both signs (sums cancel and round); integers small
// enough that no sum overflows int32.
std::vector<uint8_t> generate(const Run& run, uint16_t rank) {
  const Format f = run.dtype;
  const size_t esz = info(f).bytes;
  std::vector<uint8_t> out(run.count * esz);
  const uint64_t base = mix(run.seed ^ (uint64_t(rank) << 40));
  for (uint64_t i = 0; i < run.count; ++i) {
    const uint64_t h = mix(base + i);
    double v;
    if (f == Format::INT8)
      v = double(int(h % 201) - 100);
    else if (f == Format::INT32)
      v = double(int64_t(h % (1u << 21)) - (1 << 20));
    else
      v = std::ldexp(double(h >> 11) / double(1ull << 53) * 2 - 1, int((h >> 3) % 17) - 8);
    store_bits(f, out.data() + i * esz, app::encode_value(f, v));
  }
  return out;
}

std::vector<uint8_t> read_input(const Run& run, uint64_t* count) {
  std::ifstream in(run.input, std::ios::binary);
  if (!in) fail("cannot read --input " + run.input + ": " + std::strerror(errno));
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t esz = info(run.dtype).bytes;
  if (data.size() % esz)
    fail("--input " + run.input + " has " + std::to_string(data.size()) + " bytes, not a whole number of " +
         info(run.dtype).name + " elements");
  *count = data.size() / esz;
  return data;
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// The reference model: every rank's input reduced by the library's
// accumulators in rank order, block by block; KULISCH_FIXED, FP32_BINOMIAL
// and integers must match bit for bit; FP32_ARRIVAL (whose order at the
// switch is the arrival order) must lie within the recursive-summation
// bound of the exact sum: |r − S| ≤ (γ_{R−1} + u)·Σ|x| (+ the output
// format's rounding).
struct CheckResult {
  uint64_t differ = 0, beyond_bound = 0;
  std::string first;
};

double as_double(Format f, const uint8_t* p) {
  const uint32_t bits = load_bits(f, p);
  if (f == Format::INT8) return double(int8_t(bits));
  if (f == Format::INT32) return double(int32_t(bits));
  return double(to_float(f, bits));
}

// Every rank's input and the reference model's result, made once; each
// collective's result is compared with it.
struct Reference {
  std::vector<std::vector<uint8_t>> ins;
  std::vector<uint8_t> out;  // the reference model's result (the exact sum rounded once for FP32_ARRIVAL)
  bool arrival = false;
  // What this rank's result must be: `expect` (elements of `esz` bytes), the
  // reference's elements from `first` on (reduce_scatter: this rank's block)
  // or, for broadcast and allgather, the inputs' bytes themselves.
  std::vector<uint8_t> expect;
  size_t first = 0, esz = 0;
};

// The elements and the element size of this rank's result of `run.coll`
// (0 when it gets none: a reduce's other ranks).
struct ResultShape {
  size_t elems = 0, esz = 0, first = 0;
};

ResultShape result_shape(const Run& run, uint16_t rank, uint16_t group) {
  const size_t ib = info(run.dtype).bytes, ob = info(run.out).bytes;
  switch (run.coll) {
    case Collective::ALLREDUCE: return {run.count, ob, 0};
    case Collective::REDUCE: return {rank == run.root ? run.count : 0, ob, 0};
    case Collective::BROADCAST:
    case Collective::ALLGATHER: return {run.count, ib, 0};
    case Collective::REDUCE_SCATTER: {
      const size_t lo = coll::coll_block_start(run.count, group, rank);
      return {coll::coll_block_start(run.count, group, rank + 1) - lo, ob, lo};
    }
  }
  return {};
}

// The policy's order is `algo`'s own where it is not the reference's:
// FP32_ARRIVAL always (the switch's arrival order, the host algorithms'
// rounding where they add), FP32_BINOMIAL through the chain, RHD and the ring;
// these are checked against the bound of the exact sum. The binomial tree is
// FP32_BINOMIAL's order over its ranks relabelled (rank - root) mod p.
Reference make_reference(const Run& run, Algo algo, uint16_t group) {
  Reference ref;
  const size_t ib = info(run.dtype).bytes, ob = info(run.out).bytes;
  ref.ins.resize(group);
  for (uint16_t r = 0; r < group; ++r) ref.ins[r] = generate(run, r);
  ref.out.resize(run.count * ob);
  const size_t block = 4096;
  OpDesc d;
  d.dtype = run.dtype;
  d.out = run.out;
  d.exceptions = run.exceptions;
  d.group = group;
  const bool own_order = run.policy == Policy::FP32_ARRIVAL ||
                         (run.policy == Policy::FP32_BINOMIAL && algo != Algo::SWITCH && algo != Algo::BINOMIAL);
  ref.arrival = own_order && is_float(run.dtype);
  const uint16_t root = algo == Algo::BINOMIAL && run.coll == Collective::REDUCE ? run.root : 0;
  d.policy = ref.arrival ? Policy::KULISCH_FIXED : run.policy;
  std::vector<uint8_t> flags(block);
  for (size_t at = 0; at < run.count; at += block) {
    const size_t n = std::min(block, size_t(run.count - at));
    d.lanes = uint32_t(n);
    auto acc = make_accumulator(d);
    for (uint16_t r = 0; r < group; ++r) acc->add(ref.ins[r].data() + at * ib, uint16_t((r + group - root) % group));
    acc->finalize(ref.out.data() + at * ob, flags.data());
  }
  return ref;
}

// The reference for this rank's result of any collective.
Reference make_expected(const Run& run, Algo algo, uint16_t rank, uint16_t group) {
  const ResultShape sh = result_shape(run, rank, group);
  const size_t ib = info(run.dtype).bytes;
  if (run.coll == Collective::BROADCAST || run.coll == Collective::ALLGATHER) {
    Reference ref;
    ref.esz = ib;
    if (run.coll == Collective::BROADCAST) {
      ref.expect = generate(run, run.root);
    } else {
      ref.expect.resize(run.count * ib);
      for (uint16_t r = 0; r < group; ++r) {
        const size_t lo = coll::coll_block_start(run.count, group, r),
                     hi = coll::coll_block_start(run.count, group, r + 1);
        const std::vector<uint8_t> in = generate(run, r);
        std::memcpy(ref.expect.data() + lo * ib, in.data() + lo * ib, (hi - lo) * ib);
      }
    }
    return ref;
  }
  Reference ref = make_reference(run, algo, group);
  ref.esz = sh.esz;
  ref.first = sh.first;
  ref.expect.assign(ref.out.begin() + sh.first * sh.esz, ref.out.begin() + (sh.first + sh.elems) * sh.esz);
  return ref;
}

CheckResult check(const Run& run, const Reference& ref, const std::vector<uint8_t>& result) {
  CheckResult cr;
  const size_t ib = info(run.dtype).bytes, ob = ref.esz;
  const Format of = ob == info(run.out).bytes ? run.out : run.dtype;
  const size_t group = ref.ins.size();
  const double u32 = std::ldexp(1.0, -24), uo = std::ldexp(1.0, -int(info(run.out).mbits) - 1);
  const double gamma = double(group - 1) * u32 / (1 - double(group - 1) * u32);
  for (size_t i = 0; i * ob < ref.expect.size(); ++i) {
    const uint8_t* got = result.data() + i * ob;
    const uint8_t* want = ref.expect.data() + i * ob;
    if (std::memcmp(got, want, ob) == 0) continue;
    ++cr.differ;
    if (ref.arrival) {
      double abs_sum = 0;
      for (size_t r = 0; r < group; ++r)
        abs_sum += std::fabs(as_double(run.dtype, ref.ins[r].data() + (ref.first + i) * ib));
      const double g = as_double(run.out, got), w = as_double(run.out, want);
      const double bound = (gamma + u32) * abs_sum + 2 * uo * abs_sum + std::ldexp(1.0, -149);
      if (std::fabs(g - w) <= bound) continue;
    }
    ++cr.beyond_bound;
    if (cr.first.empty()) {
      char b[160];
      std::snprintf(b, sizeof b, "element %zu: got 0x%0*x, the reference model gives 0x%0*x", ref.first + i,
                    int(ob * 2), load_bits(of, got), int(ob * 2), load_bits(of, want));
      cr.first = b;
    }
  }
  return cr;
}

// prism-rank's algorithms are the cost model's, in the same order, and auto.
static_assert(uint8_t(Algo::SWITCH) == uint8_t(coll::Algorithm::SWITCH) &&
              uint8_t(Algo::RING) == uint8_t(coll::Algorithm::RING) && uint8_t(Algo::AUTO) == 5);
coll::Algorithm model_algo(Algo a) { return coll::Algorithm(uint8_t(a)); }

coll::CollectiveKind model_kind(Collective c) { return coll::CollectiveKind(uint8_t(c)); }
static_assert(uint8_t(Collective::ALLGATHER) == uint8_t(coll::CollectiveKind::ALLGATHER));

bool listed(const std::vector<Algo>& v, Algo a) { return std::find(v.begin(), v.end(), a) != v.end(); }

// What a calibration was measured for: gamma and w belong to one op, the
// host figures to one group. --calibrate writes them beside the parameters.
std::string op_of(const Run& run) {
  return std::string(info(run.dtype).name) + "->" + info(run.out).name + " " + name(run.policy) + " " +
         name(run.exceptions);
}

// The parameters, refused when the file says they were measured for another op.
coll::CostParams read_calibration(const Run& run, int* ranks) {
  const std::string& path = run.calibration;
  std::ifstream in(path);
  if (!in) fail("cannot read --calibration " + path + ": " + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  coll::CostParams c;
  try {
    c = coll::cost_params_from_json(text);
  } catch (const std::invalid_argument& e) {
    fail("--calibration " + path + ": " + e.what() + " (make one with --calibrate FILE)");
  }
  const YAML::Node n = YAML::Load(text);
  if (n["op"] && n["op"].as<std::string>("") != op_of(run))
    fail("--calibration " + path + " was measured for " + n["op"].as<std::string>("?") + ", this run is " + op_of(run) +
         ": gamma and w are the op's own; make one for it with --calibrate FILE");
  *ranks = n["ranks"] ? n["ranks"].as<int>(0) : 0;
  return c;
}

// The switch as auto's candidate: switch_alpha is the least time of a
// one-element collective through it, switch_beta the slope up to a 1 MiB one
// (each the least of three); rank 0's figures go to every rank over `t`.
void calibrate_switch(Communicator& comm, coll::Links& t, const Run& run, const std::vector<uint8_t>& input,
                      const OpOptions& o, coll::CostParams& c) {
  const size_t ib = info(run.dtype).bytes;
  const uint64_t big = std::min<uint64_t>(run.count, std::max<size_t>(1, (1u << 20) / ib));
  if (big == 0) return;  // nothing to send
  std::vector<uint8_t> out(big * info(run.out).bytes);
  const auto least = [&](uint64_t n) {
    double best = 1e300;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      comm.allreduce(input.data(), out.data(), n, run.dtype, o);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double small = least(1), large = least(big);
  double v[2] = {small, big > 1 ? std::max(0.0, (large - small) / double((big - 1) * ib)) : 0.0};
  coll::binomial_broadcast(t, v, sizeof v, 0);
  c.have_switch = true;
  c.switch_alpha = v[0];
  c.switch_beta = v[1];
}

// One collective among the hosts, by algorithm `algo` (the chain in `segments`). `out` holds
// this rank's result (result_shape); broadcast's root keeps its input there.
void host_collective(const Run& run, Algo algo, size_t segments, coll::Links& t, const coll::ReduceOp& op,
                     const uint8_t* in, uint8_t* out, uint8_t* flags) {
  const size_t ib = info(run.dtype).bytes, p = size_t(t.size()), me = size_t(t.rank());
  if (run.coll == Collective::BROADCAST) {
    if (t.rank() == run.root) std::memcpy(out, in, run.count * ib);
    if (algo == Algo::BINOMIAL) return coll::binomial_broadcast(t, out, run.count * ib, run.root);
    if (algo == Algo::CHAIN) return coll::chain_broadcast(t, out, run.count * ib, segments);
    return coll::rhd_broadcast(t, out, run.count * ib, run.root);
  }
  if (run.coll == Collective::ALLGATHER) {
    const uint8_t* mine = in + coll::coll_block_start(run.count, int(p), int(me)) * ib;
    return algo == Algo::RING ? coll::ring_allgather(t, mine, out, run.count, ib)
                              : coll::rhd_allgather(t, mine, out, run.count, ib);
  }
  if (run.coll == Collective::REDUCE_SCATTER)
    return algo == Algo::RING ? coll::ring_reduce_scatter(t, in, run.count, op, out, flags)
                              : coll::rhd_reduce_scatter(t, in, run.count, op, out, flags);
  const bool all = run.coll == Collective::ALLREDUCE;
  switch (algo) {
    case Algo::SWITCH:
    case Algo::AUTO: break;
    case Algo::BINOMIAL:
      return all ? coll::binomial_allreduce(t, in, run.count, op, out, flags)
                 : coll::binomial_reduce(t, in, run.count, op, out, flags, run.root);
    case Algo::CHAIN:
      return all ? coll::chain_allreduce(t, in, run.count, op, out, flags, segments)
                 : coll::chain_reduce(t, in, run.count, op, out, flags, segments);
    case Algo::RHD:
      return all ? coll::rhd_allreduce(t, in, run.count, op, out, flags)
                 : coll::rhd_reduce(t, in, run.count, op, out, flags, run.root);
    case Algo::RING: return coll::ring_allreduce(t, in, run.count, op, out, flags);
  }
}

int run_rank(const Run& run0) {
  Run run = run0;
  // The input first: joining the job's session waits for every rank, and a rank still making its
  // input after that would hold the others' first collective up.
  std::vector<uint8_t> input = run.input.empty() ? generate(run, uint16_t(run.sel.rank)) : read_input(run, &run.count);
  const bool calibrating = !run.calibrate_out.empty();
  // A given calibration first: a bad file is refused before any rank is waited for.
  std::optional<coll::CostParams> params;
  int calibrated_ranks = 0;  // the group the given calibration was measured in (0: not said)
  if (!run.calibration.empty()) params = read_calibration(run, &calibrated_ranks);
  // The switch is a candidate when listed, unless the given calibration has no figures for it.
  const bool switch_candidate = (run.algo == Algo::AUTO || calibrating) && listed(run.candidates, Algo::SWITCH) &&
                                (!params || params->have_switch);
  std::optional<Communicator> comm;  // --algo switch, or the switch as auto's candidate
  std::unique_ptr<coll::Links> tcp;  // the host algorithms (and auto's calibration)
  Endpoints ep;
  if ((run.algo == Algo::SWITCH && !calibrating) || switch_candidate) {
    try {
      comm.emplace(Communicator::from_config(run.config, run.sel, run.tune));
    } catch (const prism::Error& e) {
      if (run.algo == Algo::SWITCH || run.candidates_given) throw;
      std::fprintf(stderr,
                   "prism-rank: %s\nprism-rank: the switch is one of auto's default candidates; to choose among the "
                   "host algorithms alone, give --candidates binomial,chain,rhd,ring\n",
                   e.what());
      return e.code() == Errc::INVALID_ARGUMENT ? 2 : 1;
    }
    ep = comm->endpoints();
  }
  if (run.algo != Algo::SWITCH || calibrating) {
    const coll::TcpPeers peers = coll::tcp_peers_from_config(run.config, run.sel.job);
    if (size_t(run.sel.rank) >= peers.ranks.size())
      fail("--rank " + std::to_string(run.sel.rank) + " is not below the job's group of " +
           std::to_string(peers.ranks.size()));
    tcp = coll::connect_tcp(peers, run.sel.rank);
    ep.job = peers.job;
    ep.rank = uint16_t(run.sel.rank);
    ep.group = uint16_t(peers.ranks.size());
  }
  const uint32_t first_op = comm ? comm->next_op() : 0;  // the session's first op number (joined) or --first-op
  if (calibrated_ranks && calibrated_ranks != ep.group)
    fail("--calibration " + run.calibration + " was measured in a group of " + std::to_string(calibrated_ranks) +
         " ranks, this one has " + std::to_string(ep.group) +
         " (ranks sharing a host change what the model predicts); make one with --calibrate FILE");
  if ((run.coll == Collective::REDUCE || run.coll == Collective::BROADCAST) && run.root >= ep.group)
    fail("--root " + std::to_string(run.root) + " is not a rank of the group of " + std::to_string(ep.group));
  const size_t ib = info(run.dtype).bytes, ob = info(run.out).bytes;
  OpOptions o;
  o.out = run.out;
  o.out_given = true;
  o.policy = run.policy;
  o.transport = run.transport;
  o.exceptions = run.exceptions;
  const coll::ReduceOp op{run.dtype, run.out, run.policy, run.exceptions};

  // The cost model: a given calibration, or one measured now (auto, --calibrate).
  std::vector<coll::PingPoint> ping;
  double calibration_seconds = 0;
  if (!params && (run.algo == Algo::AUTO || calibrating)) {
    const auto t0 = std::chrono::steady_clock::now();
    coll::Calibration cal = coll::calibrate(*tcp, op, input.data(), run.count);
    if (switch_candidate) calibrate_switch(*comm, *tcp, run, input, o, cal.params);
    params = cal.params;
    ping = std::move(cal.ping);
    calibration_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (calibrating) {
    if (ep.rank == 0) {
      app::OutputFile f(run.calibrate_out);
      const std::string text = "{\"op\":" + app::json_str(op_of(run)) + ",\"ranks\":" + std::to_string(ep.group) + "," +
                               coll::to_json(*params).substr(1) + "\n";
      f.write(reinterpret_cast<const uint8_t*>(text.data()), text.size());
      f.commit();
      std::printf("%s", text.c_str());
      for (const coll::PingPoint& pt : ping)
        std::fprintf(stderr, "ping-pong %zu bytes: %.3f us one way\n", pt.bytes, pt.half_rtt * 1e6);
    }
    return 0;
  }
  // The algorithm: --algo, or the model's choice among the candidates.
  Algo algo = run.algo;
  size_t segments = run.segments;
  const coll::Problem problem{model_kind(run.coll), int(ep.group), size_t(run.count), ib, int(run.root)};
  std::vector<coll::Choice> predictions;
  if (params) {
    predictions = coll::candidates(problem, *params, coll::kAllAlgorithms);
    if (algo == Algo::AUTO) {
      std::vector<coll::Algorithm> allowed;
      for (Algo a : run.candidates)
        if (a != Algo::SWITCH || (comm && params->have_switch)) allowed.push_back(model_algo(a));
      try {
        const coll::Choice ch = coll::choose(problem, *params, allowed);
        algo = Algo(uint8_t(ch.algo));
        if (algo == Algo::CHAIN) segments = ch.segments;
      } catch (const std::invalid_argument& e) {
        fail(std::string("--algo auto: ") + e.what() + ": add candidates to --candidates");
      }
    }
  }
  if (algo == Algo::CHAIN && segments == 0)  // the model's m, or 8 (segments of at most kChainMaxSegment)
    segments = params ? coll::model_segments(problem, *params)
                      : std::max<size_t>(8, (run.count + coll::kChainMaxSegment - 1) / coll::kChainMaxSegment);
  const std::optional<double> predicted =
      params ? coll::predict(model_algo(algo), problem, *params, algo == Algo::CHAIN ? segments : 0) : std::nullopt;

  const ResultShape shape = result_shape(run, ep.rank, ep.group);
  const bool keep = shape.elems > 0 || run.coll != Collective::REDUCE;
  std::vector<uint8_t> result(keep && !run.in_place ? shape.elems * shape.esz : 0);
  std::vector<uint8_t> work = run.in_place ? input : std::vector<uint8_t>{};

  const Reference ref = run.check && keep ? make_expected(run, algo, ep.rank, ep.group) : Reference{};
  CheckResult cr;  // over every collective: --check compares each one's result
  uint64_t checked = 0;
  std::vector<double> times;
  uint64_t overflow = 0, invalid = 0, nan_input = 0;
  for (uint64_t it = 0; it < run.warmup + run.repeat; ++it) {
    if (run.in_place) std::memcpy(work.data(), input.data(), input.size());
    const uint8_t* in = run.in_place ? work.data() : input.data();
    uint8_t* out = run.in_place ? work.data() : (keep ? result.data() : nullptr);
    const uint64_t per = (run.count + run.split - 1) / run.split;
    // A reduce's other ranks and a broadcast's root need nobody's data: without a barrier they run
    // ahead into the next collective and time how fast the root drains them, not the collective.
    if (algo != Algo::SWITCH && (run.coll == Collective::REDUCE || run.coll == Collective::BROADCAST)) {
      const coll::ReduceOp count_op{Format::INT32, Format::INT32, Policy::KULISCH_FIXED, Exceptions::IEEE};
      int32_t one = 1, all = 0;
      coll::binomial_allreduce(*tcp, &one, 1, count_op, &all, nullptr);  // untimed
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (algo != Algo::SWITCH) {  // the hosts' algorithms (lib/coll)
      std::vector<uint8_t> flags(keep ? shape.elems : 0);
      host_collective(run, algo, segments, *tcp, op, in, out, keep ? flags.data() : nullptr);
      if (it + 1 == run.warmup + run.repeat)
        for (uint8_t f : flags)
          overflow += (f & flag::OVERFLOW) != 0, invalid += (f & flag::INVALID) != 0,
              nan_input += (f & flag::NAN_INPUT) != 0;
    }
    std::vector<Request> reqs;
    for (uint64_t s = 0; algo == Algo::SWITCH && s < run.split; ++s) {
      const uint64_t first = std::min(run.count, s * per), n = std::min(per, run.count - first);
      uint8_t* o_at = out ? out + first * ob : nullptr;
      reqs.push_back(run.coll == Collective::ALLREDUCE
                         ? comm->iallreduce(in + first * ib, o_at, n, run.dtype, o)
                         : comm->ireduce(in + first * ib, o_at, n, run.dtype, run.root, o));
    }
    for (size_t k = reqs.size(); k-- > 0;) {  // last first: completion in any order
      const OpReport rep = comm->wait(reqs[k]);
      if (it + 1 == run.warmup + run.repeat)
        overflow += rep.overflow, invalid += rep.invalid, nan_input += rep.nan_input;
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (it >= run.warmup) times.push_back(sec);
    if (run.check && keep) {
      const CheckResult c = check(run, ref, run.in_place ? work : result);
      cr.differ = std::max(cr.differ, c.differ);
      cr.beyond_bound += c.beyond_bound;
      if (cr.first.empty() && !c.first.empty()) cr.first = "collective " + std::to_string(it) + ", " + c.first;
      ++checked;
    }
  }
  const std::vector<uint8_t>& res = run.in_place ? work : result;
  const uint64_t digest = keep ? fnv1a(res.data(), res.size()) : 0;
  if (!run.output.empty() && keep) {
    std::string path = run.output;
    for (size_t at; (at = path.find("{rank}")) != std::string::npos;) path.replace(at, 6, std::to_string(ep.rank));
    app::OutputFile f(path);
    f.write(res.data(), res.size());
    f.commit();
  }

  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double tmin = sorted.front(), tmed = sorted[sorted.size() / 2];
  const double bytes = double(run.count) * double(ib);
  const bool via_switch = algo == Algo::SWITCH;
  const Stats st = comm ? comm->stats() : Stats{};
  const uint32_t chunk_elems = via_switch ? comm->chunk_elems(run.dtype, o) : 0;
  const uint32_t window = via_switch ? comm->window() : 0;
  const bool failed_check = run.check && cr.beyond_bound;
  if (run.json) {
    app::JsonObject j;
    j.num("rank", ep.rank).num("group", ep.group).num("job", ep.job).num("first_op", first_op);
    j.num("join_seconds", st.join_seconds);
    j.str("collective", name(run.coll)).str("dtype", info(run.dtype).name).str("out_dtype", info(run.out).name);
    j.str("policy", name(run.policy)).num("count", run.count).num("bytes", uint64_t(bytes)).num("repeat", run.repeat);
    j.num("seconds_min", tmin).num("seconds_median", tmed).num("gbit_s", tmin > 0 ? bytes * 8 / tmin / 1e9 : 0);
    j.str("algo", name(algo)).str("algo_requested", name(run.algo)).num("segments", algo == Algo::CHAIN ? segments : 0);
    j.num("chunk_elems", chunk_elems).num("window", window);
    if (params) {
      app::JsonObject pj;
      for (const coll::Choice& c : predictions) pj.num(coll::name(c.algo), c.seconds, "%.6g");
      j.raw("calibration", coll::to_json(*params)).raw("predictions", pj.text());
      j.num("predicted_seconds", predicted ? *predicted : NAN, "%.6g").num("calibration_seconds", calibration_seconds);
      j.num("model_segments", coll::model_segments(problem, *params));
    }
    j.num("chunks", st.chunks).num("retransmits", st.retransmits).num("results", st.results);
    j.num("duplicate_results", st.duplicate_results).num("nacks", st.nacks).num("no_slot_retries", st.no_slot_retries);
    j.num("stray", st.stray).num("rtt_min_us", st.rtt_min_us).num("rtt_srtt_us", st.rtt_srtt_us);
    j.num("rtt_max_us", st.rtt_max_us).num("overflow", overflow).num("invalid", invalid).num("nan_input", nan_input);
    char hex[24];
    std::snprintf(hex, sizeof hex, "%016" PRIx64, digest);
    j.str("digest", keep ? hex : "");
    if (run.check)
      j.num("check_differ", cr.differ).num("check_beyond_bound", cr.beyond_bound).str("check_first", cr.first);
    std::printf("%s\n", j.text().c_str());
  } else {
    std::printf("rank %u of %u, job %u: %s of %" PRIu64 " %s (%.0f bytes) -> %s, %s, %" PRIu64 " times\n", ep.rank,
                ep.group, ep.job, name(run.coll), run.count, info(run.dtype).name, bytes, info(run.out).name,
                name(run.policy), run.repeat);
    std::printf("time: min %.6f s, median %.6f s; algorithm bandwidth %.3f Gbit/s (min time)\n", tmin, tmed,
                tmin > 0 ? bytes * 8 / tmin / 1e9 : 0.0);
    if (!via_switch)
      std::printf("algorithm: %s (%s)%s\n", name(algo), doc(algo), run.algo == Algo::AUTO ? ", chosen by auto" : "");
    if (algo == Algo::CHAIN) std::printf("chain segments: %zu\n", segments);
    if (params) {
      std::printf("model (alpha %.2f us, beta %.3f ns/B, gamma %.3f ns/B, w %.2f, o %.2f", params->alpha * 1e6,
                  params->beta * 1e9, params->gamma * 1e9, params->partial_ratio, params->out_ratio);
      if (params->have_switch)
        std::printf(", switch %.1f us + %.3f ns/B", params->switch_alpha * 1e6, params->switch_beta * 1e9);
      std::printf(")%s: predicted", calibration_seconds > 0 ? ", measured in this run" : "");
      for (const coll::Choice& c : predictions) std::printf(" %s %.6f s", coll::name(c.algo), c.seconds);
      std::printf("\n");
    }
    if (via_switch)
      std::printf("chunks %" PRIu64 " (%u elements each, window %u), retransmits %" PRIu64
                  ", duplicate results %" PRIu64 ", nacks %" PRIu64 " (no_free_slot retries %" PRIu64
                  "), rtt min/srtt/max %.0f/%.0f/%.0f us\n",
                  st.chunks, chunk_elems, window, st.retransmits, st.duplicate_results, st.nacks, st.no_slot_retries,
                  st.rtt_min_us, st.rtt_srtt_us, st.rtt_max_us);
    if (overflow || invalid || nan_input)
      std::printf("flags: overflow=%" PRIu64 " invalid=%" PRIu64 " nan_input=%" PRIu64 "\n", overflow, invalid,
                  nan_input);
    if (keep) std::printf("digest %016" PRIx64 "\n", digest);
    if (run.check) {
      if (!checked)
        std::printf("check: nothing to compare (this rank receives no result)\n");
      else if (!cr.differ)
        std::printf("check: identical to the reference model (%" PRIu64 " collectives)\n", checked);
      else if (!cr.beyond_bound)
        std::printf("check: %" PRIu64 " elements differ from the exact sum, all within the FP32_ARRIVAL bound\n",
                    cr.differ);
    }
  }
  if (failed_check) {
    std::fprintf(stderr,
                 "prism-rank: check failed: %" PRIu64 " element results over %" PRIu64
                 " collectives differ from the reference model%s; first: %s\n",
                 cr.beyond_bound, checked, run.policy == Policy::FP32_ARRIVAL ? " beyond the FP32_ARRIVAL bound" : "",
                 cr.first.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool("prism-rank", [&]() -> int {
    const Run run = parse(argc, argv);
    try {
      return run_rank(run);
    } catch (const prism::Error& e) {
      std::fprintf(stderr, "prism-rank: %s\n", e.what());
      return e.code() == Errc::INVALID_ARGUMENT ? 2 : 1;
    }
  });
}
