// prism-rank: one rank of a PRISM group: any collective by any algorithm
// (prism::Group: through the switch, among the hosts, or auto), of a file or
// of generated data, repeated; prints the time, the algorithm bandwidth,
// retransmissions and a digest of the result, and with --check compares the
// result with the reference model computed from every rank's inputs
// (reproducible from the seed).
//
//   prism-rank --config switch.yaml --rank 3 --size 1MiB --repeat 10 --check
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "coll/algorithms.hpp"
#include "coll/calibrate.hpp"
#include "json.hpp"
#include "output_file.hpp"
#include "prism/group.hpp"
#include "rank_check.hpp"
#include "rendezvous/from_url.hpp"

using namespace prism;

namespace {

using cli::fail;

std::string algo_choices() { return "auto " + choices<Algorithm>(); }

std::string usage() {
  std::string algos;
  for (const coll::AlgorithmInfo& a : coll::algorithms())
    algos += std::string("                          ") + a.name + ": " + a.doc + "\n";
  return "usage: prism-rank --config FILE --rank K [--job J] [options]\n"
         "       prism-rank --store URL --ranks P --rank K [--switch IP:PORT --pool ID] [options]\n"
         "       prism-rank --pool-job JOB --shards S --ranks P --rank K --switch IP:PORT [options]\n"
         "       prism-rank --list-algos [--json]\n"
         "\n"
         "Runs rank K of job J (the config's only job when omitted) of the group that FILE, the PRISM\n"
         "switch's own YAML, describes: the job's member entries give every rank's address. Or rank K of P\n"
         "ranks that find each other through a rendezvous store (no configuration): URL tcp://HOST:PORT\n"
         "(rank 0 serves it) or file:///PATH; with --switch and --pool the group takes a job from the\n"
         "switch's pool (docs/PROTOCOL.md, Job pools). $PRISM_STORE, $PRISM_SWITCH, $PRISM_POOL stand for them.\n"
         "With --pool-job the rank joins a pooled job another process took (its ALLOCATED gave JOB and the\n"
         "switch's shard count S), through the switch alone.\n"
         "\n"
         "What to reduce:\n"
         "  --size BYTES          input bytes per rank (suffixes KiB MiB GiB; default 1MiB), or\n"
         "  --count N             elements per rank\n"
         "  --input FILE          reduce FILE's raw little-endian elements instead of generated data\n"
         "  --seed S              generated data: element i of rank r is a function of (S, r, i) (default 1)\n"
         "  --data D              generated floats: spread (uniform times 2^-8..2^8, the default), gradient\n"
         "                        (normal, sigma 2^-10), wide (magnitudes over 60 binades, both signs)\n"
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
         algo_choices() + " (default switch):\n" + algos +
         "                          auto: the --candidates algorithm (and chain m) with the lowest predicted time\n"
         "                        the host algorithms reduce among the hosts, over TCP, with PRISM's arithmetic\n"
         "                        (KULISCH partials travel losslessly: the same bits)\n"
         "  --segments M          the chain's segments (default: the model's m with --calibration or auto, else 8;\n"
         "                        the default is at least count / 65536: a segment is the chain's memory)\n"
         "  --candidates LIST     what auto chooses among (default: every algorithm; the switch is joined, and\n"
         "                        measured, only when listed)\n"
         "  --calibration FILE    the cost model's parameters (a JSON object, as --calibrate writes): auto uses\n"
         "                        them instead of measuring, and every algorithm's prediction is printed\n"
         "  --calibrate FILE      measure alpha, beta (ping-pong, ranks 0 and 1), gamma (this op's reducers) and,\n"
         "                        with switch in --candidates, the switch's; rank 0 writes FILE; then exit\n"
         "  --list-algos          print the algorithm table (name, doc, collectives, roots) and exit; with\n"
         "                        --json as one JSON object\n"
         "\n"
         "How:\n"
         "  --repeat N            collectives in a row, each timed (default 1)\n"
         "  --warmup N            untimed collectives first (default 0)\n"
         "  --split K             each collective as K ops in flight at once (non-blocking; --algo switch),\n"
         "                        waited last first\n"
         "  --in-place            the input buffer receives the result (allreduce and reduce; same widths only)\n"
         "  --window W            chunks in flight, capped by the job's slot_quota (default: adaptive, from 64,\n"
         "                        growing while no chunk is lost, halved by a loss)\n"
         "  --chunk-elems C       elements per packet (default: the most the path MTU fits)\n"
         "  --timeout-ms T        an op fails when none of its chunks completed for T ms (default 10000)\n"
         "  --join-timeout-ms T   joining fails when not every rank of the job joined within T ms (default 60000)\n"
         "  --no-gso              send every chunk as its own datagram (sendmmsg), not runs of them as UDP GSO\n"
         "  --first-op N          the first op number (default 0): a job restarted under a new one\n"
         "  --linger-ms T         keep the group (and a pooled job) T ms after the last collective, then leave\n"
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
  std::string store, switch_address;  // --store: a group from a rendezvous store (no config)
  uint32_t ranks = 0, pool = 0;
  uint32_t pool_job = 0, shards = 1;  // --pool-job: a pooled job another process took (switch alone)
  ConfigSelect sel;
  Tuning tune;
  app::DataSpec data;
  PartialTransport transport = PartialTransport::KULISCH;
  Algorithm algo = Algorithm::SWITCH;
  uint64_t segments = 0;  // 0: the model's m (with a calibration), else the chain's default
  std::vector<Algorithm> candidates;
  std::string calibration, calibrate_out;
  uint64_t repeat = 1, warmup = 0, split = 1, linger_ms = 0;
  bool in_place = false, check = false, json = false;
};

uint64_t parse_size(const std::string& s) {
  size_t at = 0;
  while (at < s.size() && std::isdigit(uint8_t(s[at]))) ++at;
  if (at == 0) fail("bad --size '" + s + "': give bytes, e.g. 4096, 64KiB, 1MiB, 1GiB");
  const uint64_t n = std::stoull(s.substr(0, at));
  const std::string unit = s.substr(at);
  if (unit == "" || unit == "B") return n;
  if (unit == "KiB" || unit == "K" || unit == "k") return n << 10;
  if (unit == "MiB" || unit == "M") return n << 20;
  if (unit == "GiB" || unit == "G") return n << 30;
  fail("bad --size unit '" + unit + "': use KiB, MiB or GiB");
}

Algorithm parse_algo(const std::string& what, const std::string& v) {
  if (v == "auto") return Algorithm::AUTO;
  if (auto a = from_name<Algorithm>(v)) return *a;
  fail("unknown " + what + " '" + v + "' (" + algo_choices() + ")");
}

void list_algos(bool json) {
  if (json) {
    std::string rows;
    for (const coll::AlgorithmInfo& a : coll::algorithms()) {
      app::JsonObject j;
      j.str("name", a.name).str("doc", a.doc).raw("hosts", a.hosts ? "true" : "false");
      std::string colls;
      for (const Entry<Collective>& c : kCollectives)
        if (coll::runs(a.value, c.value)) colls += std::string(colls.empty() ? "" : ",") + app::json_str(c.name);
      j.raw("collectives", "[" + colls + "]").str("roots", a.roots == coll::Roots::ANY ? "any" : "0");
      rows += (rows.empty() ? "" : ",") + j.text();
    }
    std::printf("{\"algorithms\":[%s]}\n", rows.c_str());
    return;
  }
  for (const coll::AlgorithmInfo& a : coll::algorithms()) {
    std::string colls;
    for (const Entry<Collective>& c : kCollectives)
      if (coll::runs(a.value, c.value)) colls += std::string(colls.empty() ? "" : " ") + c.name;
    std::printf("%-9s %s\n          runs: %s%s\n", a.name, a.doc, colls.c_str(),
                a.roots == coll::Roots::ZERO ? " (root 0 only)" : "");
  }
}

Run parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(usage().c_str(), stdout);
      std::exit(0);
    }
  const cli::Args a(argc, argv, 1, {"--config",      "--rank",
                                    "--job",         "--size",
                                    "--count",       "--input",
                                    "--seed",        "--dtype",
                                    "--out-dtype",   "--policy",
                                    "--transport",   "--exceptions",
                                    "--collective",  "--root",
                                    "--algo",        "--repeat",
                                    "--warmup",      "--split",
                                    "--window",      "--chunk-elems",
                                    "--timeout-ms",  "--join-timeout-ms",
                                    "--first-op",    "--output",
                                    "--segments",    "--candidates",
                                    "--calibration", "--calibrate",
                                    "--store",       "--ranks",
                                    "--switch",      "--pool",
                                    "--pool-job",    "--shards",
                                    "--linger-ms",   "--data"},
                    {"--check", "--json", "--in-place", "--list-algos", "--no-gso"});
  if (!a.positional.empty()) fail("unexpected argument '" + a.positional[0] + "' (see --help)");
  Run r;
  r.json = a.has("--json");
  if (a.has("--list-algos")) {
    list_algos(r.json);
    std::exit(0);
  }
  r.config = a.str("--config");
  r.store = a.str("--store");
  if (r.store.empty() && !a.has("--config") && !a.has("--pool-job"))
    if (const char* e = std::getenv("PRISM_STORE")) r.store = e;
  if (a.has("--pool-job")) {  // the switch alone, in a job a launcher (or another rank) took from the pool
    r.pool_job = uint32_t(a.num("--pool-job", 1, UINT32_MAX, 0));
    r.shards = uint32_t(a.num("--shards", 1, 64, 1));
    r.ranks = uint32_t(a.num("--ranks", 1, 65535, 1));
    r.switch_address = a.str("--switch");
    if (!a.has("--ranks") || r.switch_address.empty())
      fail("--pool-job needs --ranks P and --switch IP:PORT (and --shards S: the switch's, from ALLOCATED)");
    if (!r.config.empty() || a.has("--store") || a.has("--pool"))
      fail("--pool-job joins a job another process took: no --config, --store or --pool with it");
    if (a.has("--algo") && a.str("--algo") != "switch") fail("--pool-job runs through the switch alone: --algo switch");
  } else if (r.config.empty() && r.store.empty())
    fail(
        "missing --config FILE (the switch's YAML, which registers this rank) or --store URL (ranks that find "
        "each other through a rendezvous store)");
  if (!r.config.empty() && !r.store.empty()) fail("give --config or --store, not both");
  if (!r.store.empty()) {
    if (!a.has("--ranks")) fail("--store needs --ranks P: how many ranks the group has");
    r.ranks = uint32_t(a.num("--ranks", 1, 65535, 1));
    r.switch_address = a.str("--switch");
    r.pool = uint32_t(a.num("--pool", 1, UINT32_MAX, 0));
  } else if (r.pool_job == 0 && (a.has("--ranks") || a.has("--switch") || a.has("--pool") || a.has("--shards"))) {
    fail(
        "--ranks, --switch, --pool and --shards go with --store or --pool-job (a config gives the group and the "
        "switch)");
  }
  if (!a.has("--rank")) fail("missing --rank K: which member of the job this process is");
  r.sel.rank = int(a.num("--rank", 0, 65534, 0));
  r.sel.job = uint32_t(a.num("--job", 0, UINT32_MAX, 0));
  app::DataSpec& d = r.data;
  d.dtype = cli::one_of<Format>(a, "--dtype", Format::FP32);
  d.out = cli::one_of<Format>(a, "--out-dtype", is_float(d.dtype) ? Format::FP32 : Format::INT32);
  d.policy = cli::one_of<Policy>(a, "--policy", Policy::KULISCH_FIXED);
  d.exceptions = cli::one_of<Exceptions>(a, "--exceptions", Exceptions::IEEE);
  d.coll = cli::one_of<Collective>(a, "--collective", Collective::ALLREDUCE);
  d.root = uint16_t(a.num("--root", 0, 65534, 0));
  d.seed = a.num("--seed", 0, UINT64_MAX, 1);
  if (a.has("--data")) {
    const std::string v = a.str("--data");
    const auto* it =
        std::find_if(std::begin(app::kDataNames), std::end(app::kDataNames), [&](const char* n) { return v == n; });
    if (it == std::end(app::kDataNames)) fail("--data '" + v + "': expected spread, gradient or wide");
    d.data = app::Data(it - std::begin(app::kDataNames));
    if (a.has("--input")) fail("--data shapes generated data: not with --input");
  }
  r.transport = cli::one_of<PartialTransport>(a, "--transport", PartialTransport::KULISCH);
  r.algo = a.has("--algo") ? parse_algo("--algo", a.str("--algo")) : Algorithm::SWITCH;
  r.segments = a.num("--segments", 1, 1 << 20, 0);
  if (a.has("--segments") && r.algo != Algorithm::CHAIN) fail("--segments is the chain's: give it with --algo chain");
  const bool calibrating = a.has("--calibrate");
  if (r.algo != Algorithm::AUTO && !calibrating && !coll::runs(r.algo, d.coll, d.root))
    fail("--algo " + coll::why_not(r.algo, d.coll, d.root));
  if (a.has("--candidates")) {
    for (const std::string& item : cli::split_list(a.str("--candidates"))) {
      const Algorithm c = parse_algo("--candidates algorithm", item);
      if (c == Algorithm::AUTO) fail("--candidates lists algorithms: auto is not one");
      if (std::find(r.candidates.begin(), r.candidates.end(), c) == r.candidates.end()) r.candidates.push_back(c);
    }
    if (r.candidates.empty()) fail("--candidates is empty: list at least one of " + choices<Algorithm>(","));
    if (r.algo != Algorithm::AUTO && !calibrating)
      fail("--candidates is what --algo auto chooses among: give it with --algo auto (or --calibrate)");
  }
  if (r.algo == Algorithm::AUTO) {  // some candidate must run the collective
    bool any = false;
    for (const coll::AlgorithmInfo& row : coll::algorithms())
      if (r.candidates.empty() || std::find(r.candidates.begin(), r.candidates.end(), row.value) != r.candidates.end())
        any = any || coll::runs(row.value, d.coll, d.root);
    if (!any)
      fail(std::string("no algorithm of --candidates runs ") + name(d.coll) +
           (d.root ? " with --root " + std::to_string(d.root) : std::string()) + " (" + coll::who_runs(d.coll) + ")");
  }
  r.calibration = a.str("--calibration");
  r.calibrate_out = a.str("--calibrate");
  if (a.has("--calibration") && calibrating)
    fail("give --calibration FILE (use a calibration) or --calibrate FILE (make one), not both");
  if (calibrating && r.calibrate_out.empty()) fail("--calibrate needs a FILE to write");
  r.input = a.str("--input");
  r.output = a.str("--output");
  r.repeat = a.num("--repeat", 1, 1000000, 1);
  r.warmup = a.num("--warmup", 0, 1000000, 0);
  r.split = a.num("--split", 1, 4096, 1);
  r.linger_ms = a.num("--linger-ms", 0, 3600000, 0);
  if (r.split != 1 && r.algo != Algorithm::SWITCH)
    fail("--split needs --algo switch (the host algorithms run one op at a time)");
  r.in_place = a.has("--in-place");
  r.check = a.has("--check");
  r.tune.window = uint32_t(a.num("--window", 1, 1 << 20, 0));
  r.tune.chunk_elems = uint32_t(a.num("--chunk-elems", 0, 65535, 0));
  r.tune.timeout_ms = uint32_t(a.num("--timeout-ms", 1, 3600000, r.tune.timeout_ms));
  r.tune.join_timeout_ms = uint32_t(a.num("--join-timeout-ms", 1, 3600000, r.tune.join_timeout_ms));
  r.tune.first_op = uint32_t(a.num("--first-op", 0, UINT32_MAX, 0));
  r.tune.gso = !a.has("--no-gso");
  const uint64_t esz = info(d.dtype).bytes;
  if (a.has("--count") && a.has("--size")) fail("give --size or --count, not both");
  if (!r.input.empty() && (a.has("--count") || a.has("--size"))) fail("--input sets the size: drop --size/--count");
  if (a.has("--count")) {
    d.count = a.num("--count", 0, uint64_t(1) << 34, 0);
  } else if (r.input.empty()) {
    const uint64_t bytes = a.has("--size") ? parse_size(a.str("--size")) : (1u << 20);
    if (bytes % esz)
      fail("--size " + std::to_string(bytes) + " is not a whole number of " + info(d.dtype).name + " elements");
    d.count = bytes / esz;
  }
  if (r.check && !r.input.empty()) fail("--check needs generated data (every rank's input from the seed), not --input");
  if (r.in_place && d.coll != Collective::ALLREDUCE && d.coll != Collective::REDUCE)
    fail("--in-place is for allreduce and reduce");
  if (r.in_place && info(d.dtype).bytes != info(d.out).bytes)
    fail(std::string("--in-place needs formats of the same width (") + info(d.dtype).name + " in, " + info(d.out).name +
         " out)");
  return r;
}

std::vector<uint8_t> read_input(Run& run) {
  std::ifstream in(run.input, std::ios::binary);
  if (!in) fail("cannot read --input " + run.input + ": " + std::strerror(errno));
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t esz = info(run.data.dtype).bytes;
  if (data.size() % esz)
    fail("--input " + run.input + " has " + std::to_string(data.size()) + " bytes, not a whole number of " +
         info(run.data.dtype).name + " elements");
  run.data.count = data.size() / esz;
  return data;
}

std::shared_ptr<rdv::Store> store_of(const Run& run) {
  try {
    return rdv::store_from_url(run.store, run.sel.rank);
  } catch (const rdv::StoreError& e) {
    throw Error(Errc::INVALID_ARGUMENT, std::string("--store ") + run.store + ": " + e.what());
  }
}

GroupOptions group_options(const Run& run);

// The group: from the config, from a store, or (--pool-job) the switch alone in a given pooled job.
Group make_group(const Run& run) {
  if (!run.config.empty()) return Group::from_config(run.config, run.sel, group_options(run));
  if (!run.store.empty()) return Group::from_store(store_of(run), run.sel.rank, int(run.ranks), group_options(run));
  Endpoints e;
  e.job = run.pool_job;
  e.rank = uint16_t(run.sel.rank);
  e.group = uint16_t(run.ranks);
  if (const char* ip = std::getenv("PRISM_HOST_IP")) e.local_ip = ip;
  e.local_port = 0;  // any: the switch binds the address the JOIN comes from
  const size_t colon = run.switch_address.rfind(':');
  if (colon == std::string::npos) fail("--switch " + run.switch_address + ": give IP:PORT, e.g. 10.0.0.254:20562");
  e.switch_ip = run.switch_address.substr(0, colon);
  e.switch_port = uint16_t(std::strtoul(run.switch_address.c_str() + colon + 1, nullptr, 10));
  e.switch_shards = run.shards;
  e.pooled = true;
  GroupOptions o = group_options(run);
  o.algorithm = Algorithm::SWITCH;
  return Group::from_endpoints(run.sel.rank, {}, e, o);
}

// A given calibration is refused before any rank is waited for when it was measured for another op.
void check_calibration(const Run& run) {
  std::ifstream in(run.calibration);
  if (!in) fail("cannot read --calibration " + run.calibration + ": " + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  coll::CalibrationFile f;
  try {
    f = coll::calibration_from_json(text);
  } catch (const std::invalid_argument& e) {
    fail("--calibration " + run.calibration + ": " + e.what() + " (make one with --calibrate FILE)");
  }
  const app::DataSpec& d = run.data;
  const std::string key = coll::op_key({d.dtype, d.out, d.policy, d.exceptions});
  if (!f.op.empty() && f.op != key)
    fail("--calibration " + run.calibration + " was measured for " + f.op + ", this run is " + key +
         ": gamma and w are the op's own; make one for it with --calibrate FILE");
}

GroupOptions group_options(const Run& run) {
  GroupOptions g;
  g.switch_address = run.switch_address;
  g.pool = run.pool;
  g.algorithm = run.calibrate_out.empty() ? run.algo : Algorithm::AUTO;
  g.candidates = run.candidates;
  g.calibration = run.calibration;
  g.tuning = run.tune;
  return g;
}

CollOptions coll_options(const Run& run, Algorithm algo) {
  CollOptions o;
  o.op.out = run.data.out;
  o.op.out_given = true;
  o.op.policy = run.data.policy;
  o.op.transport = run.transport;
  o.op.exceptions = run.data.exceptions;
  o.algorithm = algo;
  o.root = run.data.root;
  o.segments = run.segments;
  return o;
}

// Everything a run measured, for the text and JSON reports.
struct Outcome {
  Prediction chosen{Algorithm::AUTO, 0, -1};  // what runs (auto's choice made once, before the first)
  CollReport ran;                             // the last collective's report
  uint32_t first_op = 0;                      // the switch session's first op number
  std::vector<Prediction> predictions;
  std::string calibration;
  double calibration_seconds = 0;
  std::vector<double> times;
  double cpu_seconds = 0;  // this process's CPU time (user + system) in the timed collectives
  uint64_t overflow = 0, invalid = 0, nan_input = 0;
  app::CheckResult cr;
  uint64_t checked = 0;
  std::vector<uint8_t> result;
  bool keep = false;
};

// This process's CPU time so far, user and system.
double cpu_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// One timed collective: the switch's --split as non-blocking ops, else Group::run.
CollReport one(Group& g, const Run& run, const Outcome& oc, const uint8_t* in, uint8_t* out) {
  const app::DataSpec& d = run.data;
  CollOptions o = coll_options(run, oc.chosen.algorithm);
  o.segments = oc.chosen.segments;
  if (run.split == 1) return g.run(d.coll, in, out, d.count, d.dtype, o);
  Communicator& comm = *g.switch_communicator();
  const size_t ib = info(d.dtype).bytes, ob = info(d.out).bytes;
  const uint64_t per = (d.count + run.split - 1) / run.split;
  std::vector<Request> reqs;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t s = 0; s < run.split; ++s) {
    const uint64_t first = std::min(d.count, s * per), n = std::min(per, d.count - first);
    uint8_t* o_at = out ? out + first * ob : nullptr;
    reqs.push_back(d.coll == Collective::ALLREDUCE ? comm.iallreduce(in + first * ib, o_at, n, d.dtype, o.op)
                                                   : comm.ireduce(in + first * ib, o_at, n, d.dtype, d.root, o.op));
  }
  CollReport rep;
  rep.algorithm = Algorithm::SWITCH;
  for (size_t k = reqs.size(); k-- > 0;) {  // last first: completion in any order
    const OpReport r = comm.wait(reqs[k]);
    rep.overflow += r.overflow, rep.invalid += r.invalid, rep.nan_input += r.nan_input;
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

// What both reports say first: the input bytes and the times' least and median.
struct Times {
  double bytes, tmin, tmed;
};
Times times_of(const Run& run, const Outcome& oc) {
  std::vector<double> sorted = oc.times;
  std::sort(sorted.begin(), sorted.end());
  return {double(run.data.count) * double(info(run.data.dtype).bytes), sorted.front(), sorted[sorted.size() / 2]};
}

void report_text(const Run& run, Group& g, const Outcome& oc) {
  const app::DataSpec& d = run.data;
  const auto [bytes, tmin, tmed] = times_of(run, oc);
  const Algorithm algo = oc.chosen.algorithm;
  Communicator* comm = g.switch_communicator();
  std::printf("rank %d of %d, job %u: %s of %" PRIu64 " %s (%.0f bytes) -> %s, %s, %" PRIu64 " times\n", g.rank(),
              g.size(), comm ? comm->endpoints().job : run.sel.job, name(d.coll), d.count, info(d.dtype).name, bytes,
              info(d.out).name, name(d.policy), run.repeat);
  std::printf("time: min %.6f s, median %.6f s; algorithm bandwidth %.3f Gbit/s (min time)\n", tmin, tmed,
              tmin > 0 ? bytes * 8 / tmin / 1e9 : 0.0);
  if (algo != Algorithm::SWITCH)
    std::printf("algorithm: %s (%s)%s\n", name(algo), doc(algo), run.algo == Algorithm::AUTO ? ", chosen by auto" : "");
  if (algo == Algorithm::CHAIN) std::printf("chain segments: %zu\n", oc.ran.segments);
  if (!oc.calibration.empty()) {
    const coll::CostParams c = coll::calibration_from_json(oc.calibration).params;
    std::printf("model (alpha %.2f us, beta %.3f ns/B, gap %.2f us, gamma %.3f ns/B, w %.2f, o %.2f", c.alpha * 1e6,
                c.beta * 1e9, c.gap * 1e6, c.gamma * 1e9, c.partial_ratio, c.out_ratio);
    if (c.have_switch) std::printf(", switch %.1f us + %.3f ns/B", c.switch_alpha * 1e6, c.switch_beta * 1e9);
    std::printf(")%s: predicted", oc.calibration_seconds > 0 ? ", measured in this run" : "");
    for (const Prediction& p : oc.predictions) std::printf(" %s %.6f s", name(p.algorithm), p.seconds);
    std::printf("\n");
  }
  if (algo == Algorithm::SWITCH) {
    const Stats& st = comm->stats();
    OpOptions o = coll_options(run, algo).op;
    std::printf("chunks %" PRIu64 " (%u elements each, window %u), retransmits %" PRIu64 ", duplicate results %" PRIu64
                ", nacks %" PRIu64 " (no_free_slot retries %" PRIu64 "), rtt min/srtt/max %.0f/%.0f/%.0f us\n",
                st.chunks, comm->chunk_elems(d.dtype, o), comm->window(), st.retransmits, st.duplicate_results,
                st.nacks, st.no_slot_retries, st.rtt_min_us, st.rtt_srtt_us, st.rtt_max_us);
    std::printf("socket: %" PRIu64 " datagrams in %" PRIu64 " send calls (%s%" PRIu64 " UDP GSO messages of %" PRIu64
                " datagrams), %" PRIu64 " received in %" PRIu64 " calls (%" PRIu64 " coalesced by UDP GRO)\n",
                st.packets_sent, st.send_calls, st.gso_refused ? "GSO refused by the kernel, " : "", st.gso_sends,
                st.gso_datagrams, st.packets_received, st.receive_calls, st.gro_datagrams);
  }
  if (oc.overflow || oc.invalid || oc.nan_input)
    std::printf("flags: overflow=%" PRIu64 " invalid=%" PRIu64 " nan_input=%" PRIu64 "\n", oc.overflow, oc.invalid,
                oc.nan_input);
  if (oc.keep) std::printf("digest %016" PRIx64 "\n", app::fnv1a(oc.result.data(), oc.result.size()));
  if (run.check) {
    if (!oc.checked)
      std::printf("check: nothing to compare (this rank receives no result)\n");
    else if (!oc.cr.differ)
      std::printf("check: identical to the reference model (%" PRIu64 " collectives)\n", oc.checked);
    else if (!oc.cr.beyond_bound)
      std::printf("check: %" PRIu64 " elements differ from the exact sum, all within the FP32_ARRIVAL bound\n",
                  oc.cr.differ);
  }
}

void report_json(const Run& run, Group& g, const Outcome& oc) {
  const app::DataSpec& d = run.data;
  const auto [bytes, tmin, tmed] = times_of(run, oc);
  const Algorithm algo = oc.chosen.algorithm;
  Communicator* comm = g.switch_communicator();
  const Stats st = comm ? comm->stats() : Stats{};
  const bool via_switch = algo == Algorithm::SWITCH;
  const OpOptions o = coll_options(run, algo).op;
  app::JsonObject j;
  j.num("rank", g.rank()).num("group", g.size()).num("job", comm ? comm->endpoints().job : run.sel.job);
  j.num("first_op", oc.first_op);
  j.str("collective", name(d.coll)).str("dtype", info(d.dtype).name).str("out_dtype", info(d.out).name);
  j.str("policy", name(d.policy)).num("count", d.count).num("bytes", uint64_t(bytes)).num("repeat", run.repeat);
  j.num("seconds_min", tmin).num("seconds_median", tmed).num("gbit_s", tmin > 0 ? bytes * 8 / tmin / 1e9 : 0);
  j.num("cpu_seconds", oc.cpu_seconds);
  j.str("algo", name(algo)).str("algo_requested", algorithm_name(run.algo));
  j.num("segments", oc.ran.segments);
  j.num("chunk_elems", via_switch ? comm->chunk_elems(d.dtype, o) : 0).num("window", via_switch ? comm->window() : 0);
  if (!oc.calibration.empty()) {
    app::JsonObject pj;
    for (const Prediction& p : oc.predictions) pj.num(name(p.algorithm), p.seconds, "%.6g");
    const coll::CalibrationFile f = coll::calibration_from_json(oc.calibration);
    j.raw("calibration", coll::to_json(f.params)).raw("predictions", pj.text());
    j.num("predicted_seconds", oc.ran.predicted_seconds >= 0 ? oc.ran.predicted_seconds : NAN, "%.6g");
    j.num("calibration_seconds", oc.calibration_seconds);
    const coll::Problem pr{d.coll, g.size(), size_t(d.count), info(d.dtype).bytes, int(d.root)};
    j.num("model_segments", coll::model_segments(pr, f.params));
  }
  size_t nfields = 0;  // the switch communicator's statistics, every field (0 without a switch)
  const StatField* fields = stat_fields(&nfields);
  for (size_t i = 0; i < nfields; ++i)
    if (fields[i].count)
      j.num(fields[i].name, st.*fields[i].count);
    else
      j.num(fields[i].name, st.*fields[i].value);
  j.num("overflow", oc.overflow).num("invalid", oc.invalid).num("nan_input", oc.nan_input);
  char hex[24];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, app::fnv1a(oc.result.data(), oc.result.size()));
  j.str("digest", oc.keep ? hex : "");
  if (run.check)
    j.num("check_differ", oc.cr.differ).num("check_beyond_bound", oc.cr.beyond_bound).str("check_first", oc.cr.first);
  std::printf("%s\n", j.text().c_str());
}

int run_rank(Run run) {
  // The input first: joining the job's session waits for every rank, and a rank still making its
  // input after that would hold the others' first collective up.
  const app::DataSpec& d = run.data;
  std::vector<uint8_t> input = run.input.empty() ? app::generate(d, uint16_t(run.sel.rank)) : read_input(run);
  const bool calibrating = !run.calibrate_out.empty();
  if (!run.calibration.empty()) check_calibration(run);
  Group g = make_group(run);
  Outcome oc;
  if (Communicator* comm = g.switch_communicator()) oc.first_op = comm->next_op();
  const OpOptions op = coll_options(run, run.algo).op;
  if (calibrating || (run.algo == Algorithm::AUTO && run.calibration.empty())) {
    const auto t0 = std::chrono::steady_clock::now();
    g.calibrate(input.data(), d.count, d.dtype, op);
    oc.calibration_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  oc.calibration = g.calibration_json(d.dtype, op);
  if (calibrating) {
    if (g.rank() == 0) {
      const std::string text = oc.calibration + "\n";
      app::OutputFile f(run.calibrate_out);
      f.write(reinterpret_cast<const uint8_t*>(text.data()), text.size());
      f.commit();
      std::printf("%s", text.c_str());
      for (const auto& [bytes, half_rtt] : g.ping_points())
        std::fprintf(stderr, "ping-pong %zu bytes: %.3f us one way\n", bytes, half_rtt * 1e6);
    }
    return 0;
  }
  CollOptions co = coll_options(run, run.algo);
  oc.predictions = g.predictions(d.coll, d.count, d.dtype, co);
  oc.chosen = {run.algo, run.segments, -1};
  if (run.algo == Algorithm::AUTO) oc.chosen = g.choose(d.coll, d.count, d.dtype, co);

  const coll::ResultShape shape = coll::result_shape(app::call_of(d), g.rank(), g.size());
  oc.keep = shape.elems > 0 || d.coll != Collective::REDUCE;
  oc.result.assign(oc.keep && !run.in_place ? shape.elems * shape.esz : 0, 0);
  std::vector<uint8_t> work = run.in_place ? input : std::vector<uint8_t>{};
  const app::Reference ref = run.check && oc.keep
                                 ? app::make_expected(d, oc.chosen.algorithm, uint16_t(g.rank()), uint16_t(g.size()))
                                 : app::Reference{};
  const size_t ib = info(d.dtype).bytes;
  for (uint64_t it = 0; it < run.warmup + run.repeat; ++it) {
    if (run.in_place) std::memcpy(work.data(), input.data(), input.size());
    const uint8_t* in = run.in_place ? work.data() : input.data();
    if (d.coll == Collective::ALLGATHER) in += coll::input_shape(app::call_of(d), g.rank(), g.size()).first * ib;
    uint8_t* out = run.in_place ? work.data() : (oc.keep ? oc.result.data() : nullptr);
    // A reduce's other ranks and a broadcast's root need nobody's data: without a barrier they run
    // ahead into the next collective and time how fast the root drains them, not the collective.
    if (oc.chosen.algorithm != Algorithm::SWITCH && coll::rooted(d.coll)) {
      CollOptions b;
      b.algorithm = Algorithm::BINOMIAL;
      g.barrier(b);  // untimed
    }
    const double cpu0 = cpu_now();
    const CollReport rep = one(g, run, oc, in, out);
    oc.ran = rep;
    if (it >= run.warmup) oc.times.push_back(rep.seconds), oc.cpu_seconds += cpu_now() - cpu0;
    if (it + 1 == run.warmup + run.repeat)
      oc.overflow = rep.overflow, oc.invalid = rep.invalid, oc.nan_input = rep.nan_input;
    if (run.check && oc.keep) {
      const app::CheckResult c = app::check(d, ref, run.in_place ? work : oc.result);
      oc.cr.differ = std::max(oc.cr.differ, c.differ);
      oc.cr.beyond_bound += c.beyond_bound;
      if (oc.cr.first.empty() && !c.first.empty()) oc.cr.first = "collective " + std::to_string(it) + ", " + c.first;
      ++oc.checked;
    }
  }
  if (run.in_place) oc.result = work;
  if (!run.output.empty() && oc.keep) {
    std::string path = run.output;
    for (size_t at; (at = path.find("{rank}")) != std::string::npos;) path.replace(at, 6, std::to_string(g.rank()));
    app::OutputFile f(path);
    f.write(oc.result.data(), oc.result.size());
    f.commit();
  }
  if (run.json)
    report_json(run, g, oc);
  else
    report_text(run, g, oc);
  std::fflush(stdout);
  if (run.linger_ms) std::this_thread::sleep_for(std::chrono::milliseconds(run.linger_ms));
  if (run.check && oc.cr.beyond_bound) {
    std::fprintf(stderr,
                 "prism-rank: check failed: %" PRIu64 " element results over %" PRIu64
                 " collectives differ from the reference model%s; first: %s\n",
                 oc.cr.beyond_bound, oc.checked,
                 d.policy == Policy::FP32_ARRIVAL ? " beyond the FP32_ARRIVAL bound" : "", oc.cr.first.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool("prism-rank", [&]() -> int {
    Run run = parse(argc, argv);
    try {
      return run_rank(run);
    } catch (const prism::Error& e) {
      std::fprintf(stderr, "prism-rank: %s\n", e.what());
      if (e.code() == Errc::INVALID_ARGUMENT && run.algo == Algorithm::AUTO && run.candidates.empty() &&
          std::string(e.what()).find("switch") != std::string::npos)
        std::fprintf(stderr,
                     "prism-rank: the switch is one of auto's default candidates; to choose among the host "
                     "algorithms alone, give --candidates binomial,chain,rhd,ring\n");
      return e.code() == Errc::INVALID_ARGUMENT ? 2 : 1;
    }
  });
}
