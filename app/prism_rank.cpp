// prism-rank: one rank of a PRISM job, through libprism. Allreduce (or
// reduce) of a file or of generated data, repeated; prints the time, the
// algorithm bandwidth, retransmissions and a digest of the result, and with
// --check compares the result with the reference model computed from every
// rank's inputs (reproducible from the seed).
//
//   prism-rank --config switch.yaml --rank 3 --size 1MiB --repeat 10 --check
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
#include "coll/chain.hpp"
#include "coll/rhd.hpp"
#include "coll/ring.hpp"
#include "coll/tcp.hpp"
#include "json.hpp"
#include "output_file.hpp"
#include "rank/prism.hpp"
#include "values.hpp"

using namespace prism;

namespace {

using cli::fail;

enum class Collective : uint8_t { ALLREDUCE, REDUCE };
constexpr Entry<Collective> kCollectives[] = {
    {Collective::ALLREDUCE, "allreduce", "every rank receives the sum"},
    {Collective::REDUCE, "reduce", "the root receives the sum"},
};
constexpr std::span<const Entry<Collective>> entries(Collective) { return kCollectives; }

enum class Algo : uint8_t { SWITCH, BINOMIAL, CHAIN, RHD, RING };
constexpr Entry<Algo> kAlgos[] = {
    {Algo::SWITCH, "switch", "through the PRISM switch the config describes (libprism)"},
    {Algo::BINOMIAL, "binomial", "hosts only: seed 000's binomial tree"},
    {Algo::CHAIN, "chain", "hosts only: seed 000's pipelined chain in --segments M segments (reduce to rank 0)"},
    {Algo::RHD, "rhd", "hosts only: seed 001's recursive halving-doubling, with the fold for p not a power of two"},
    {Algo::RING, "ring", "hosts only: ring allreduce (reduce-scatter, allgather)"},
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
         choices<Transport>() +
         " (default kulisch)\n"
         "  --exceptions E        " +
         choices<Exceptions>() +
         " (default ieee)\n"
         "  --collective C        " +
         choices<Collective>() +
         " (default allreduce)\n"
         "  --root R              reduce's root rank (default 0)\n"
         "  --algo A              " +
         choices<Algo>() +
         " (default switch): binomial reduces among the hosts, over TCP,\n"
         "                        with PRISM's arithmetic (KULISCH partials travel losslessly: the same bits)\n"
         "\n"
         "How:\n"
         "  --repeat N            collectives in a row, each timed (default 1)\n"
         "  --warmup N            untimed collectives first (default 0)\n"
         "  --split K             each collective as K ops in flight at once (non-blocking), waited last first\n"
         "  --in-place            the input buffer receives the result (same widths only)\n"
         "  --window W            chunks in flight (default 64; capped by the job's slot_quota)\n"
         "  --chunk-elems C       elements per packet (default: the most the path MTU fits)\n"
         "  --timeout-ms T        an op fails when none of its chunks completed for T ms (default 10000)\n"
         "  --first-op N          the first op number (default 0): a job restarted under a new one\n"
         "\n"
         "Output:\n"
         "  --check               compare every collective's result with the reference model (generated data\n"
         "                        only; the reference is computed once, before the first): KULISCH_FIXED,\n"
         "                        FP32_BINOMIAL and integers bit for bit, FP32_ARRIVAL within its error bound\n"
         "  --output FILE         write the last result's raw elements to FILE\n"
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
  Transport transport = Transport::KULISCH;
  Exceptions exceptions = Exceptions::IEEE;
  Collective coll = Collective::ALLREDUCE;
  Algo algo = Algo::SWITCH;
  uint64_t segments = 8;
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
      {"--config",    "--rank",   "--job",       "--size",        "--count",      "--input",    "--seed",  "--dtype",
       "--out-dtype", "--policy", "--transport", "--exceptions",  "--collective", "--root",     "--algo",  "--repeat",
       "--warmup",    "--split",  "--window",    "--chunk-elems", "--timeout-ms", "--first-op", "--output"},
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
  r.transport = cli::one_of<Transport>(a, "--transport", Transport::KULISCH);
  r.exceptions = cli::one_of<Exceptions>(a, "--exceptions", Exceptions::IEEE);
  r.coll = cli::one_of<Collective>(a, "--collective", Collective::ALLREDUCE);
  r.algo = cli::one_of<Algo>(a, "--algo", Algo::SWITCH);
  r.segments = a.num("--segments", 1, 1 << 20, 8);
  if (a.has("--segments") && r.algo != Algo::CHAIN) fail("--segments is the chain's: give it with --algo chain");
  if (r.coll == Collective::REDUCE && r.algo == Algo::RING) fail("--algo ring is an allreduce: no reduce");
  if (r.coll == Collective::REDUCE && r.algo == Algo::CHAIN && r.root != 0)
    fail("--algo chain reduces to rank 0: give --root 0");
  r.root = uint16_t(a.num("--root", 0, 65534, 0));
  r.input = a.str("--input");
  r.output = a.str("--output");
  r.seed = a.num("--seed", 0, UINT64_MAX, 1);
  r.repeat = a.num("--repeat", 1, 1000000, 1);
  r.warmup = a.num("--warmup", 0, 1000000, 0);
  r.split = a.num("--split", 1, 4096, 1);
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
};

Reference make_reference(const Run& run, uint16_t group) {
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
  ref.arrival = run.policy == Policy::FP32_ARRIVAL && is_float(run.dtype);
  d.policy = ref.arrival ? Policy::KULISCH_FIXED : run.policy;
  std::vector<uint8_t> flags(block);
  for (size_t at = 0; at < run.count; at += block) {
    const size_t n = std::min(block, size_t(run.count - at));
    d.lanes = uint32_t(n);
    auto acc = make_accumulator(d);
    for (uint16_t r = 0; r < group; ++r) acc->add(ref.ins[r].data() + at * ib, r);
    acc->finalize(ref.out.data() + at * ob, flags.data());
  }
  return ref;
}

CheckResult check(const Run& run, const Reference& ref, const std::vector<uint8_t>& result) {
  CheckResult cr;
  const size_t ib = info(run.dtype).bytes, ob = info(run.out).bytes;
  const size_t group = ref.ins.size();
  const double u32 = std::ldexp(1.0, -24), uo = std::ldexp(1.0, -int(info(run.out).mbits) - 1);
  const double gamma = double(group - 1) * u32 / (1 - double(group - 1) * u32);
  for (size_t i = 0; i < run.count; ++i) {
    const uint8_t* got = result.data() + i * ob;
    const uint8_t* want = ref.out.data() + i * ob;
    if (std::memcmp(got, want, ob) == 0) continue;
    ++cr.differ;
    if (ref.arrival) {
      double abs_sum = 0;
      for (size_t r = 0; r < group; ++r) abs_sum += std::fabs(as_double(run.dtype, ref.ins[r].data() + i * ib));
      const double g = as_double(run.out, got), w = as_double(run.out, want);
      const double bound = (gamma + u32) * abs_sum + 2 * uo * abs_sum + std::ldexp(1.0, -149);
      if (std::fabs(g - w) <= bound) continue;
    }
    ++cr.beyond_bound;
    if (cr.first.empty()) {
      char b[160];
      std::snprintf(b, sizeof b, "element %zu: got 0x%0*x, the reference model gives 0x%0*x", i, int(ob * 2),
                    load_bits(run.out, got), int(ob * 2), load_bits(run.out, want));
      cr.first = b;
    }
  }
  return cr;
}

// One collective among the hosts, by the algorithm --algo names.
void host_collective(const Run& run, coll::Transport& t, const coll::ReduceOp& op, const uint8_t* in, uint8_t* out,
                     uint8_t* flags) {
  const bool all = run.coll == Collective::ALLREDUCE;
  switch (run.algo) {
    case Algo::SWITCH: break;
    case Algo::BINOMIAL:
      return all ? coll::binomial_allreduce(t, in, run.count, op, out, flags)
                 : coll::binomial_reduce(t, in, run.count, op, out, flags, run.root);
    case Algo::CHAIN:
      return all ? coll::chain_allreduce(t, in, run.count, op, out, flags, run.segments)
                 : coll::chain_reduce(t, in, run.count, op, out, flags, run.segments);
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
  std::optional<Communicator> comm;      // --algo switch
  std::unique_ptr<coll::Transport> tcp;  // --algo binomial
  Endpoints ep;
  if (run.algo == Algo::SWITCH) {
    comm.emplace(Communicator::from_config(run.config, run.sel, run.tune));
    ep = comm->endpoints();
  } else {
    if (run.split != 1) fail("--split needs --algo switch (the host algorithms run one op at a time)");
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
  if (run.coll == Collective::REDUCE && run.root >= ep.group)
    fail("--root " + std::to_string(run.root) + " is not a rank of the group of " + std::to_string(ep.group));
  const size_t ib = info(run.dtype).bytes, ob = info(run.out).bytes;
  const bool keep = run.coll == Collective::ALLREDUCE || run.root == ep.rank;
  std::vector<uint8_t> result(keep && !run.in_place ? run.count * ob : 0);
  std::vector<uint8_t> work = run.in_place ? input : std::vector<uint8_t>{};
  OpOptions o;
  o.out = Dtype(uint8_t(run.out));
  o.out_given = true;
  o.policy = Reduction(uint8_t(run.policy));
  o.transport = PartialTransport(uint8_t(run.transport));
  o.overflow = OverflowMode(uint8_t(run.exceptions));

  const Reference ref = run.check && keep ? make_reference(run, ep.group) : Reference{};
  CheckResult cr;  // over every collective: --check compares each one's result
  uint64_t checked = 0;
  std::vector<double> times;
  uint64_t overflow = 0, invalid = 0, nan_input = 0;
  for (uint64_t it = 0; it < run.warmup + run.repeat; ++it) {
    if (run.in_place) std::memcpy(work.data(), input.data(), input.size());
    const uint8_t* in = run.in_place ? work.data() : input.data();
    uint8_t* out = run.in_place ? work.data() : (keep ? result.data() : nullptr);
    const uint64_t per = (run.count + run.split - 1) / run.split;
    const auto t0 = std::chrono::steady_clock::now();
    if (tcp) {  // the hosts' algorithms (lib/coll)
      const coll::ReduceOp op{run.dtype, run.out, run.policy, run.exceptions};
      std::vector<uint8_t> flags(keep ? run.count : 0);
      host_collective(run, *tcp, op, in, out, keep ? flags.data() : nullptr);
      if (it + 1 == run.warmup + run.repeat)
        for (uint8_t f : flags)
          overflow += (f & flag::OVERFLOW) != 0, invalid += (f & flag::INVALID) != 0,
              nan_input += (f & flag::NAN_INPUT) != 0;
    }
    std::vector<Request> reqs;
    for (uint64_t s = 0; comm && s < run.split; ++s) {
      const uint64_t first = std::min(run.count, s * per), n = std::min(per, run.count - first);
      uint8_t* o_at = out ? out + first * ob : nullptr;
      reqs.push_back(run.coll == Collective::ALLREDUCE
                         ? comm->iallreduce(in + first * ib, o_at, n, Dtype(uint8_t(run.dtype)), o)
                         : comm->ireduce(in + first * ib, o_at, n, Dtype(uint8_t(run.dtype)), run.root, o));
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
    app::OutputFile f(run.output);
    f.write(res.data(), res.size());
    f.commit();
  }

  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double tmin = sorted.front(), tmed = sorted[sorted.size() / 2];
  const double bytes = double(run.count) * double(ib);
  const Stats st = comm ? comm->stats() : Stats{};
  const uint32_t chunk_elems = comm ? comm->chunk_elems(Dtype(uint8_t(run.dtype)), o) : 0;
  const uint32_t window = comm ? comm->window() : 0;
  const bool failed_check = run.check && cr.beyond_bound;
  if (run.json) {
    app::JsonObject j;
    j.num("rank", ep.rank).num("group", ep.group).num("job", ep.job).num("first_op", first_op);
    j.num("join_seconds", st.join_seconds);
    j.str("collective", name(run.coll)).str("dtype", info(run.dtype).name).str("out_dtype", info(run.out).name);
    j.str("policy", name(run.policy)).num("count", run.count).num("bytes", uint64_t(bytes)).num("repeat", run.repeat);
    j.num("seconds_min", tmin).num("seconds_median", tmed).num("gbit_s", tmin > 0 ? bytes * 8 / tmin / 1e9 : 0);
    j.str("algo", name(run.algo)).num("chunk_elems", chunk_elems).num("window", window);
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
    if (!comm) std::printf("algorithm: %s (%s)\n", name(run.algo), doc(run.algo));
    if (comm)
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
      if (!cr.differ)
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
