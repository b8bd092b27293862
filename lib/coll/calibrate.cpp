#include "coll/calibrate.hpp"

#include <sched.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>
#include <type_traits>

#include "arith/accumulator.hpp"
#include "coll/binomial.hpp"
#include "coll/rhd.hpp"

namespace prism::coll {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// This host, as a number every process on it shares (the kernel's boot id,
// the same in every network namespace), and the cores this process may use.
struct Host {
  uint64_t id = 0;
  uint64_t cores = 1;
};

Host this_host() {
  Host h;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string text;
  std::getline(f, text);
  h.id = 0xcbf29ce484222325ull;
  for (char ch : text) h.id = (h.id ^ uint8_t(ch)) * 0x100000001b3ull;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) h.cores = uint64_t(std::max(1, CPU_COUNT(&set)));
  return h;
}

// Every rank's host on rank 0: the most ranks on one host and its cores.
void gather_hosts(Links& t, double* ranks_per_host, double* host_cores) {
  Host mine = this_host();
  if (t.rank() != 0) {
    t.send(0, &mine, sizeof mine);
    return;
  }
  std::map<uint64_t, std::pair<int, uint64_t>> hosts;  // id -> ranks, least cores
  hosts[mine.id] = {1, mine.cores};
  for (int r = 1; r < t.size(); ++r) {
    Host h;
    if (t.recv(r, &h, sizeof h) != sizeof h) throw LinkError("calibration: a host record of another size");
    auto [it, fresh] = hosts.try_emplace(h.id, 0, h.cores);
    it->second.first += 1;
    it->second.second = std::min(it->second.second, h.cores);
  }
  for (const auto& [id, v] : hosts)
    if (v.first > *ranks_per_host) *ranks_per_host = v.first, *host_cores = double(v.second);
}

// Ranks 0 and 1: the median half round trip of `bytes`-byte messages, on
// rank 0 (0 on rank 1).
double ping_pong(Links& t, size_t bytes, int trips, std::vector<uint8_t>& buf) {
  const int me = t.rank(), peer = me ^ 1;
  std::vector<double> half;
  for (int i = 0; i < trips; ++i) {
    if (me % 2 == 0) {
      const auto t0 = Clock::now();
      t.send(peer, buf.data(), bytes);
      if (t.recv(peer, buf.data(), buf.size()) != bytes)
        throw LinkError("calibration: a ping-pong reply of another size");
      half.push_back(since(t0) / 2);
    } else {
      if (t.recv(peer, buf.data(), buf.size()) != bytes) throw LinkError("calibration: a ping of another size");
      t.send(peer, buf.data(), bytes);
    }
  }
  return median(half);
}

// A token of 8 bytes passed around every rank (0 -> 1 -> ... -> p-1 -> 0),
// `laps` times: on rank 0, the median lap over p, the latency of one message
// as a collective's ranks see it (each waiting, idle, for its peer; on a VM a
// vCPU that has halted takes tens of microseconds to wake, one that has just
// gone idle a few, and a ping-pong alone catches mostly the second).
double token_ring(Links& t, int laps) {
  const int me = t.rank(), p = t.size(), next = (me + 1) % p, prev = (me + p - 1) % p;
  uint64_t token = 0;
  std::vector<double> lap;
  for (int i = 0; i < laps; ++i) {
    const auto t0 = Clock::now();
    if (me == 0) t.send(next, &token, sizeof token);
    if (t.recv(prev, &token, sizeof token) != sizeof token) throw LinkError("calibration: a token of another size");
    if (me != 0) t.send(next, &token, sizeof token);
    lap.push_back(since(t0));
  }
  return me == 0 ? median(lap) / p : 0;
}

// Ranks 0 and 1: `count` messages of `bytes` one way, then 8 bytes back;
// on rank 0, the median over `trips` of the time per message (0 on rank 1).
double stream(Links& t, size_t bytes, int count, int trips, std::vector<uint8_t>& buf) {
  const int me = t.rank(), peer = me ^ 1;
  std::vector<double> per;
  for (int i = 0; i < trips; ++i) {
    if (me == 0) {
      const auto t0 = Clock::now();
      for (int k = 0; k < count; ++k) t.send(peer, buf.data(), bytes);
      if (t.recv(peer, buf.data(), buf.size()) != 8) throw LinkError("calibration: a stream's reply of another size");
      per.push_back(since(t0) / count);
    } else {
      for (int k = 0; k < count; ++k)
        if (t.recv(peer, buf.data(), buf.size()) != bytes) throw LinkError("calibration: a stream of another size");
      t.send(peer, buf.data(), 8);
    }
  }
  return median(per);
}

// beta and the gap (and the points) from ranks 0 and 1 (the others wait); rank 0's points.
std::vector<PingPoint> measure_link(Links& t, const CalibrateOptions& o, double* alpha, double* beta, double* gap) {
  static constexpr size_t kSizes[] = {8, 64 << 10, 256 << 10, 1 << 20, 4 << 20};
  std::vector<uint8_t> buf(kSizes[std::size(kSizes) - 1], 0x5a);
  std::vector<PingPoint> pts;
  ping_pong(t, 8, 2, buf);  // warm the connection up
  for (size_t s : kSizes) {
    // alpha's median from more round trips (cheap): a wake-up's latency varies most
    const int trips = s >= (4u << 20) ? std::max(2, o.round_trips / 4) : s <= 8 ? 4 * o.round_trips : o.round_trips;
    pts.push_back({s, ping_pong(t, s, trips, buf)});
  }
  *alpha = pts.front().half_rtt;  // replaced by the token ring's figure (calibrate)
  // Least squares of half_rtt = a + s * beta over the large messages.
  double sx = 0, sy = 0, sxx = 0, sxy = 0, k = 0;
  for (const PingPoint& p : pts)
    if (p.bytes >= (64u << 10)) {
      const double x = double(p.bytes), y = p.half_rtt;
      sx += x, sy += y, sxx += x * x, sxy += x * y, k += 1;
    }
  const double den = k * sxx - sx * sx;
  *beta = den > 0 ? std::max(0.0, (k * sxy - sx * sy) / den) : 0;
  // The gap: a stream of the binomial tree's blocks (kBinomialBlock fp32
  // elements), less their bytes and the one round trip it ends with.
  constexpr size_t kBlockBytes = size_t(kBinomialBlock) * 4;
  constexpr int kStream = 64;
  const double per = stream(t, kBlockBytes, kStream, std::max(2, o.round_trips / 2), buf);
  *gap = std::max(0.0, per - 2 * pts.front().half_rtt / kStream - double(kBlockBytes) * *beta);
  return pts;
}

}  // namespace

// The median seconds per input byte of encoding a partial of n lanes and
// merging it (see calibrate.hpp); *ratio gets the partial's bytes per input
// byte, and *merge_share the merge's part of the time. The partial holds
// x + y, or with `own` x alone (one rank's input).
double reduce_cost(const ReduceOp& node, int p, const uint8_t* x, size_t n, int runs, double* ratio,
                   double* merge_share, bool own = false) {
  const size_t ib = info(node.dtype).bytes;
  const OpDesc d = block_desc(node, uint32_t(std::max(p, 2)), uint32_t(n));
  std::vector<uint8_t> y(n * ib);
  std::memcpy(y.data(), x + ib, (n - 1) * ib);
  std::memcpy(y.data() + (n - 1) * ib, x, ib);
  auto mine = make_accumulator(d), theirs = make_accumulator(d);
  theirs->add(x, 0);
  if (!own) theirs->add(y.data(), 1);
  std::vector<LaneExact> scratch;
  std::vector<double> doubles;  // kept across the runs, as a group's buffer cache keeps them
  std::vector<uint8_t> msg;
  std::vector<double> took, merging;
  size_t len = 0;
  for (int i = 0; i < std::max(1, runs); ++i) {
    mine->reset();
    mine->add(x, 0);
    const auto t0 = Clock::now();
    len = encode_partial(*theirs, node, PartialScratch{scratch, doubles}, msg);
    const auto t1 = Clock::now();
    merge_partial(*mine, node, msg.data(), len, 1, PartialScratch{scratch, doubles});
    took.push_back(since(t0));
    merging.push_back(since(t1));
  }
  *ratio = double(len) / double(n * ib);
  const double all = median(took);
  *merge_share = all > 0 ? std::min(1.0, median(merging) / all) : 1;
  return all / double(n * ib);
}

// The median seconds per input byte of emptying an accumulator of n lanes,
// adding x and rounding the result.
double local_cost(const ReduceOp& node, int p, const uint8_t* x, size_t n, int runs) {
  const size_t ib = info(node.dtype).bytes;
  auto acc = make_accumulator(block_desc(node, uint32_t(std::max(p, 2)), uint32_t(n)));
  std::vector<uint8_t> out(n * info(node.out).bytes), flags(n);
  std::vector<double> took;
  for (int i = 0; i < std::max(1, runs); ++i) {
    const auto t0 = Clock::now();
    acc->reset();
    acc->add(x, 0);
    acc->finalize(out.data(), flags.data());
    took.push_back(since(t0));
  }
  return median(took) / double(n * ib);
}

CostParams measure_reduce(const ReduceOp& op, int p, const void* sample, size_t count, int runs) {
  CostParams c;
  c.out_ratio = double(info(op.out).bytes) / double(info(op.dtype).bytes);  // status bytes travel only when set
  if (count < 2) return c;
  // FP32_BINOMIAL runs as FP32_ARRIVAL at each node of a host algorithm.
  ReduceOp node = op;
  if (node.policy == Policy::FP32_BINOMIAL) node.policy = Policy::FP32_ARRIVAL;
  const auto* x = static_cast<const uint8_t*>(sample);
  double ratio_small = 1, share_large = 1;
  c.gamma = reduce_cost(node, p, x, std::min(count, kGammaSmallLanes), runs * 4, &ratio_small, &c.merge_share);
  c.gamma_large = count > kGammaSmallLanes
                      ? reduce_cost(node, p, x, std::min(count, kGammaLargeLanes), runs, &c.partial_ratio, &share_large)
                      : c.gamma;
  if (count <= kGammaSmallLanes) c.partial_ratio = ratio_small;
  c.gamma_single = reduce_cost(node, p, x, std::min(count, kGammaSmallLanes), runs * 4, &c.partial_ratio_single,
                               &c.merge_share_single, true);
  c.local = local_cost(node, p, x, std::min(count, kGammaSmallLanes), runs * 4);
  c.local_large = count > kGammaSmallLanes ? local_cost(node, p, x, std::min(count, kGammaLargeLanes), runs) : c.local;
  return c;
}

Calibration calibrate(Links& t, const ReduceOp& op, const void* sample, size_t count, const CalibrateOptions& o) {
  Calibration cal;
  CostParams& c = cal.params;
  if (t.size() < 2) {
    c = measure_reduce(op, t.size(), sample, count, o.reduce_runs);
    c.host_cores = double(this_host().cores);
    return cal;
  }
  // Each figure measured alone, the other ranks waiting, as the model's
  // critical paths assume; the work bound accounts for sharing the cores.
  gather_hosts(t, &c.ranks_per_host, &c.host_cores);
  double alpha = 0, beta = 0, gap = 0;
  if (t.rank() < 2) cal.ping = measure_link(t, o, &alpha, &beta, &gap);
  alpha = token_ring(t, 4 * o.round_trips);
  if (t.rank() == 0) {
    const double rph = c.ranks_per_host, cores = c.host_cores;
    c = measure_reduce(op, t.size(), sample, count, o.reduce_runs);
    c.alpha = alpha, c.beta = beta, c.gap = gap, c.ranks_per_host = rph, c.host_cores = cores;
  }
  cal.ping.resize(t.rank() == 0 ? cal.ping.size() : 0);
  static_assert(std::is_trivially_copyable_v<CostParams>);
  binomial_broadcast(t, &c, sizeof c, 0);  // rank 0's figures, every field
  return cal;
}

std::string to_json(const CostParams& c) {
  char b[1024];
  std::snprintf(b, sizeof b,
                "{\"alpha\":%.9g,\"beta\":%.9g,\"gap\":%.9g,"
                "\"local\":%.9g,\"local_large\":%.9g,\"gamma\":%.9g,\"gamma_large\":%.9g,"
                "\"gamma_single\":%.9g,"
                "\"partial_ratio\":%.9g,\"partial_ratio_single\":%.9g,"
                "\"out_ratio\":%.9g,\"ranks_per_host\":%.9g,\"host_cores\":%.9g,\"merge_share\":%.9g,"
                "\"merge_share_single\":%.9g,"
                "\"have_switch\":%s,\"switch_alpha\":%.9g,\"switch_beta\":%.9g}",
                c.alpha, c.beta, c.gap, c.local, c.local_large < 0 ? c.local : c.local_large, c.gamma,
                c.gamma_large < 0 ? c.gamma : c.gamma_large, c.gamma_single < 0 ? c.gamma : c.gamma_single,
                c.partial_ratio, c.partial_ratio_single < 0 ? c.partial_ratio : c.partial_ratio_single, c.out_ratio,
                c.ranks_per_host, c.host_cores, c.merge_share, c.merge_share_single, c.have_switch ? "true" : "false",
                c.switch_alpha, c.switch_beta);
  return b;
}

CostParams cost_params_from_json(const std::string& text) {
  YAML::Node n;
  try {
    n = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(std::string("not a calibration (JSON object): ") + e.what());
  }
  if (!n.IsMap()) throw std::invalid_argument("not a calibration: expected a JSON object of alpha, beta, gamma, ...");
  const auto num = [&](const char* key, bool required) -> double {
    if (!n[key]) {
      if (required) throw std::invalid_argument(std::string("calibration has no \"") + key + "\"");
      return 0;
    }
    double v;
    try {
      v = n[key].as<double>();
    } catch (const YAML::Exception&) {
      throw std::invalid_argument(std::string("calibration's \"") + key + "\" is not a number");
    }
    if (!(v >= 0) || v > 1e6) throw std::invalid_argument(std::string("calibration's \"") + key + "\" is out of range");
    return v;
  };
  CostParams c;
  c.alpha = num("alpha", true);
  c.beta = num("beta", true);
  c.gamma = num("gamma", true);
  c.gamma_large = n["gamma_large"] ? num("gamma_large", false) : c.gamma;
  c.gamma_single = n["gamma_single"] ? num("gamma_single", false) : c.gamma;
  c.partial_ratio = num("partial_ratio", true);
  c.partial_ratio_single = n["partial_ratio_single"] ? num("partial_ratio_single", false) : c.partial_ratio;
  c.local = num("local", false);
  c.gap = num("gap", false);  // absent in a file from before it was measured: 0
  c.merge_share = n["merge_share"] ? std::min(1.0, num("merge_share", false)) : 1;
  c.merge_share_single = n["merge_share_single"] ? std::min(1.0, num("merge_share_single", false)) : 1;
  c.local_large = n["local_large"] ? num("local_large", false) : c.local;
  c.ranks_per_host = n["ranks_per_host"] ? std::max(1.0, num("ranks_per_host", false)) : 1;
  c.host_cores = n["host_cores"] ? std::max(1.0, num("host_cores", false)) : 1;
  c.out_ratio = num("out_ratio", true);
  c.have_switch = n["have_switch"] && n["have_switch"].as<bool>(false);
  c.switch_alpha = num("switch_alpha", false);
  c.switch_beta = num("switch_beta", false);
  return c;
}

std::string op_key(const ReduceOp& op) {
  return std::string(info(op.dtype).name) + "->" + info(op.out).name + " " + name(op.policy) + " " +
         name(op.exceptions);
}

std::string calibration_json(const CalibrationFile& f) {
  std::string op;
  for (char ch : f.op) {  // op_key()s are plain ASCII; escape what JSON needs anyway
    if (ch == '"' || ch == '\\') op += '\\';
    op += ch;
  }
  return "{\"op\":\"" + op + "\",\"ranks\":" + std::to_string(f.ranks) + "," + to_json(f.params).substr(1);
}

CalibrationFile calibration_from_json(const std::string& text) {
  CalibrationFile f;
  f.params = cost_params_from_json(text);
  try {
    const YAML::Node n = YAML::Load(text);
    if (n["op"]) f.op = n["op"].as<std::string>();
    if (n["ranks"]) f.ranks = n["ranks"].as<int>();
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(std::string("'op' or 'ranks' is not readable: ") + e.what());
  }
  return f;
}

CostParams read_calibration(const std::string& path, const ReduceOp& op, int ranks) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read calibration " + path + ": " + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CalibrationFile f;
  try {
    f = calibration_from_json(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("calibration " + path + ": " + e.what() + " (make one with prism-rank --calibrate)");
  }
  if (!f.op.empty() && f.op != op_key(op))
    throw std::invalid_argument("calibration " + path + " was measured for " + f.op + ", this op is " + op_key(op) +
                                ": gamma and w are the op's own; make one for it with prism-rank --calibrate FILE");
  if (f.ranks && f.ranks != ranks)
    throw std::invalid_argument("calibration " + path + " was measured in a group of " + std::to_string(f.ranks) +
                                " ranks, this one has " + std::to_string(ranks) +
                                " (ranks sharing a host change what the model predicts); make one with "
                                "prism-rank --calibrate FILE");
  return f.params;
}

}  // namespace prism::coll
