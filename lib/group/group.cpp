// prism::Group (prism/group.hpp): the links, the switch, the calibration and
// the dispatch of every collective through lib/coll's algorithm table.
#include "prism/group.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>

#include "arith/op.hpp"
#include "coll/algorithms.hpp"
#include "coll/calibrate.hpp"
#include "coll/chain.hpp"
#include "coll/tcp.hpp"
#include "config/config.hpp"
#include "group/links_choice.hpp"
#include "group/switch_path.hpp"
#include "rank/pool.hpp"
#include "rendezvous/store.hpp"

namespace prism {

namespace {

// What lib/ throws, as the public Error: bad arguments, a failed link or a
// group whose ranks disagree.
template <class F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw Error(Errc::INVALID_ARGUMENT, e.what());
  } catch (const coll::LinkError& e) {
    throw Error(Errc::LINK, e.what());
  } catch (const coll::CollectiveError& e) {
    throw Error(Errc::LINK, e.what());
  }
}

coll::ReduceOp reduce_op(Format dtype, const OpOptions& o) {
  const Format out =
      o.out_given ? o.out : (format_from_code(uint8_t(dtype)) && is_float(dtype) ? Format::FP32 : Format::INT32);
  return {dtype, out, o.policy, o.exceptions};
}

// A deterministic sample for a calibration made without one (a broadcast's
// ranks other than the root): values over a few binades of both signs, so
// sums cancel and round as a gradient's do.
std::vector<uint8_t> synthetic_sample(Format f, size_t count) {
  const size_t esz = info(f).bytes;
  std::vector<uint8_t> out(count * esz);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < count; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const double v = is_float(f) ? std::ldexp(double(x >> 11) / double(1ull << 53) * 2 - 1, int(x % 9) - 4)
                                 : double(int(x % 201) - 100);
    store_bits(f, out.data() + i * esz, encode_double(f, v));
  }
  return out;
}

// A group made for the switch alone (its algorithm, no auto) needs no links between its ranks: they
// may not even reach each other (ranks behind a switch in separate networks).
bool wants_links(const GroupOptions& o) { return o.algorithm != Algorithm::SWITCH; }

bool wants_switch(const GroupOptions& o) {
  if (o.algorithm == Algorithm::SWITCH) return true;
  if (o.algorithm != Algorithm::AUTO) return false;
  return o.candidates.empty() ||
         std::find(o.candidates.begin(), o.candidates.end(), Algorithm::SWITCH) != o.candidates.end();
}

coll::TcpOptions tcp_options(const GroupOptions& o) {
  coll::TcpOptions t;
  t.connect_timeout = std::chrono::milliseconds(o.connect_timeout_ms);
  t.recv_timeout = std::chrono::milliseconds(o.recv_timeout_ms);
  t.port_offset = o.tcp_port_offset;
  return t;
}

}  // namespace

struct Group::Impl {
  GroupOptions opts;
  std::shared_ptr<rdv::Store> store;  // from_store's, kept for the group's life (rank 0 may serve it)
  std::unique_ptr<coll::Links> links;
  std::optional<Communicator> comm;
  std::optional<group::SwitchPath> via_switch;
  coll::Context ctx;
  std::optional<coll::CalibrationFile> file;           // GroupOptions::calibration, read at creation
  std::map<std::string, coll::CostParams> calibrated;  // by op_key(): measured or taken from the file
  std::vector<uint8_t> flags;                          // a call's status bytes when the caller gives none
  std::vector<coll::PingPoint> ping;                   // the last calibration's (rank 0's)

  explicit Impl(const GroupOptions& o) : opts(o) {}

  void finish() {
    if (comm) {
      via_switch.emplace(*comm);
      ctx.via_switch = &*via_switch;
      if (links && comm->endpoints().group != links->size())
        throw Error(Errc::INVALID_ARGUMENT, "the switch's job has " + std::to_string(comm->endpoints().group) +
                                                " ranks but the group has " + std::to_string(links->size()));
    }
    ctx.links = links.get();
    ctx.rank = links ? links->rank() : comm->endpoints().rank;
    ctx.size = links ? links->size() : comm->endpoints().group;
    if (!opts.calibration.empty()) {
      std::ifstream in(opts.calibration);
      if (!in) throw Error(Errc::INVALID_ARGUMENT, "cannot read calibration " + opts.calibration);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      file = guarded([&] { return coll::calibration_from_json(text); });
      if (file->ranks && file->ranks != ctx.size)
        throw Error(Errc::INVALID_ARGUMENT, "calibration " + opts.calibration + " was measured in a group of " +
                                                std::to_string(file->ranks) + " ranks, this one has " +
                                                std::to_string(ctx.size) +
                                                " (ranks sharing a host change what the model predicts); make one "
                                                "with prism-rank --calibrate FILE");
    }
  }

  bool available(Algorithm a) const {
    const coll::AlgorithmInfo* row = coll::algorithm_info(a);
    return row && (row->hosts ? links != nullptr : comm.has_value());
  }

  std::vector<Algorithm> candidates() const {
    std::vector<Algorithm> out;
    for (const coll::AlgorithmInfo& row : coll::algorithms())
      if (available(row.value) && (opts.candidates.empty() || std::find(opts.candidates.begin(), opts.candidates.end(),
                                                                        row.value) != opts.candidates.end()))
        out.push_back(row.value);
    return out;
  }

  // The parameters for `op`: measured before, or the file's (when it is for this op).
  const coll::CostParams* params(const coll::ReduceOp& op) {
    const std::string key = coll::op_key(op);
    if (auto it = calibrated.find(key); it != calibrated.end()) return &it->second;
    if (file && (file->op.empty() || file->op == key)) return &calibrated.emplace(key, file->params).first->second;
    return nullptr;
  }

  void calibrate(const coll::ReduceOp& op, const void* sample, size_t count) {
    if (!links)
      throw Error(Errc::INVALID_ARGUMENT,
                  "auto needs the model's calibration, measured over links between the ranks; this group was made "
                  "for the switch alone (GroupOptions::algorithm = SWITCH): give another algorithm or auto");
    std::vector<uint8_t> own;
    if (!sample || count == 0) {  // rank 0's sample is the one used; it may have none (a broadcast's non-root)
      count = std::max<size_t>(count, coll::kGammaLargeLanes);
      own = synthetic_sample(op.dtype, count);
      sample = own.data();
    }
    coll::Calibration cal = guarded([&] { return coll::calibrate(*links, op, sample, count); });
    ping = std::move(cal.ping);
    coll::CostParams& c = cal.params;
    const std::vector<Algorithm> can = candidates();
    if (comm && std::find(can.begin(), can.end(), Algorithm::SWITCH) != can.end())
      guarded([&] { group::calibrate_switch(*comm, *links, op, c); });
    calibrated[coll::op_key(op)] = c;
  }

  coll::Problem problem(const coll::Call& c) const {
    const size_t esz = c.coll == Collective::BARRIER ? 0 : info(c.op.dtype).bytes;
    return {c.coll, ctx.size, c.count, esz, c.root};
  }
};

Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Group::Group(Group&&) noexcept = default;
Group& Group::operator=(Group&&) noexcept = default;
Group::~Group() = default;

Group Group::from_config(const std::string& yaml_path, ConfigSelect sel, const GroupOptions& o) {
  auto impl = std::make_unique<Impl>(o);
  // The switch first: joining its session waits for every rank, so the host links find every rank up.
  if (wants_switch(o)) impl->comm.emplace(Communicator::from_config(yaml_path, sel, o.tuning));
  if (wants_links(o))
    guarded([&] {
      const coll::TcpOptions to = tcp_options(o);
      const coll::TcpPeers peers = coll::tcp_peers_from_config(yaml_path, sel.job, to);
      if (sel.rank < 0 || size_t(sel.rank) >= peers.ranks.size())
        throw std::invalid_argument("rank " + std::to_string(sel.rank) + " is not below the job's group of " +
                                    std::to_string(peers.ranks.size()));
      impl->links = coll::connect_tcp(peers, sel.rank, to);
    });
  impl->finish();
  return Group(std::move(impl));
}

Group Group::from_endpoints(int rank, const std::vector<std::string>& hosts,
                            const std::optional<Endpoints>& switch_endpoints, const GroupOptions& o) {
  auto impl = std::make_unique<Impl>(o);
  if (switch_endpoints && wants_switch(o)) impl->comm.emplace(*switch_endpoints, o.tuning);
  if (hosts.empty() && impl->comm && !wants_links(o)) {  // the switch alone
    impl->finish();
    return Group(std::move(impl));
  }
  guarded([&] {
    coll::TcpPeers peers;
    peers.job = switch_endpoints ? switch_endpoints->job : 0;
    for (const std::string& h : hosts) {
      const size_t colon = h.rfind(':');
      const auto ip = colon == std::string::npos ? std::nullopt : parse_ipv4(h.substr(0, colon));
      const int port = ip ? std::atoi(h.c_str() + colon + 1) : 0;
      if (!ip || port <= 0 || port > 65535)
        throw std::invalid_argument("host address '" + h + "' is not ip:port (e.g. 10.0.0.5:29500)");
      peers.ranks.push_back({*ip, uint16_t(port)});
    }
    if (rank < 0 || size_t(rank) >= peers.ranks.size())
      throw std::invalid_argument("rank " + std::to_string(rank) + " is not below the group of " +
                                  std::to_string(peers.ranks.size()) + " addresses");
    impl->links = coll::connect_tcp(peers, rank, tcp_options(o));
  });
  impl->finish();
  return Group(std::move(impl));
}

namespace {

// GroupOptions' switch and pool, or the environment's ($PRISM_SWITCH, $PRISM_POOL).
struct PoolChoice {
  std::string ip;
  uint16_t port = 0;
  uint32_t pool = 0;
};
std::optional<PoolChoice> pool_choice(const GroupOptions& o) {
  std::string addr = o.switch_address;
  if (addr.empty())
    if (const char* e = std::getenv("PRISM_SWITCH")) addr = e;
  uint32_t pool = o.pool;
  if (!pool)
    if (const char* e = std::getenv("PRISM_POOL")) pool = uint32_t(std::strtoul(e, nullptr, 10));
  if (addr.empty() && !pool) return std::nullopt;
  const size_t colon = addr.rfind(':');
  const auto ip = colon == std::string::npos ? std::nullopt : parse_ipv4(addr.substr(0, colon));
  const long port = ip ? std::strtol(addr.c_str() + colon + 1, nullptr, 10) : 0;
  if (!ip || port <= 0 || port > 65535)
    throw Error(Errc::INVALID_ARGUMENT, "the switch address '" + addr +
                                            "' is not ip:port (GroupOptions::switch_address or $PRISM_SWITCH, e.g. "
                                            "10.0.0.1:20562)");
  if (!pool)
    throw Error(Errc::INVALID_ARGUMENT, "a switch (" + addr +
                                            ") but no pool to take the job from: give GroupOptions::pool or "
                                            "$PRISM_POOL (the pool's first job id in the switch's config)");
  return PoolChoice{addr.substr(0, colon), uint16_t(port), pool};
}

// Rank 0 takes a job from the pool and publishes it (or why it could not) under "pool"; the others read it.
rank::PooledJob shared_pooled_job(rdv::Store& store, int rank, int size, const PoolChoice& pc, const GroupOptions& o) {
  if (rank == 0) {
    try {
      const rank::PooledJob j =
          rank::alloc_pooled_job(o.host_ip, pc.ip, pc.port, pc.pool, uint16_t(size), o.tuning.join_timeout_ms);
      store.set("pool", std::to_string(j.job) + " " + std::to_string(j.shards) + " " + std::to_string(j.slot_quota) +
                            " " + std::to_string(j.idle_timeout_ms));
      return j;
    } catch (const Error& e) {
      store.set("pool", std::string("error ") + e.what());  // the others fail now, with rank 0's reason
      throw;
    }
  }
  const std::string v = store.get_string("pool", std::chrono::milliseconds(o.tuning.join_timeout_ms));
  if (v.rfind("error ", 0) == 0)
    throw Error(Errc::REFUSED, "rank 0 could not take a job from the pool: " + v.substr(6));
  rank::PooledJob j;
  unsigned long job = 0, shards = 1, quota = 0, idle = 0;
  if (std::sscanf(v.c_str(), "%lu %lu %lu %lu", &job, &shards, &quota, &idle) != 4)
    throw Error(Errc::LINK, "the store's 'pool' value '" + v + "' is not rank 0's job: another program's key?");
  j.job = uint32_t(job), j.shards = uint16_t(shards), j.slot_quota = uint32_t(quota),
  j.idle_timeout_ms = uint32_t(idle);
  return j;
}

}  // namespace

Group Group::from_store(std::shared_ptr<rdv::Store> store, int rank, int size, const GroupOptions& o) {
  if (!store) throw Error(Errc::INVALID_ARGUMENT, "from_store: no store given (store_from_env() makes one)");
  if (size < 1 || size > 65535 || rank < 0 || rank >= size)
    throw Error(Errc::INVALID_ARGUMENT, "rank " + std::to_string(rank) + " of a group of " + std::to_string(size) +
                                            ": give 0 <= rank < size <= 65535");
  auto impl = std::make_unique<Impl>(o);
  impl->store = store;
  // Groups that share one store keep their keys apart under their name.
  auto mine = std::make_shared<rdv::PrefixStore>(o.name.empty() ? "prism" : "prism/" + o.name, store);
  const auto store_guarded = [&](auto f) {
    guarded([&] {
      try {
        f();
      } catch (const rdv::StoreError& e) {
        throw coll::LinkError(std::string("the rendezvous store: ") + e.what());
      }
    });
  };
  if (const std::optional<PoolChoice> pc = pool_choice(o); pc && wants_switch(o))
    store_guarded([&] {
      const rank::PooledJob j = shared_pooled_job(*mine, rank, size, *pc, o);
      Endpoints e;
      e.job = j.job;
      e.rank = uint16_t(rank);
      e.group = uint16_t(size);
      e.local_ip = o.host_ip;
      e.local_port = 0;  // any: the switch binds the address the JOIN comes from
      e.switch_ip = pc->ip;
      e.switch_port = pc->port;
      e.slot_quota = j.slot_quota;
      e.switch_shards = j.shards;
      e.pooled = true;
      impl->comm.emplace(e, o.tuning);
    });
  if (wants_links(o) || !impl->comm)
    store_guarded([&] {
      coll::TcpOptions to = tcp_options(o);
      to.local_ip = o.host_ip;
      impl->links = group::connect_links(*mine, rank, size, to, group::links_kind_from_env());
    });
  impl->finish();
  return Group(std::move(impl));
}

int Group::rank() const { return impl_->ctx.rank; }
int Group::size() const { return impl_->ctx.size; }
bool Group::has_switch() const { return impl_->comm.has_value(); }
Communicator* Group::switch_communicator() { return impl_->comm ? &*impl_->comm : nullptr; }

std::vector<Prediction> Group::predictions(Collective c, size_t count, Format dtype, const CollOptions& o) {
  coll::Call call{c, nullptr, nullptr, nullptr, count, reduce_op(dtype, o.op), o.root, 0};
  std::vector<Prediction> out;
  const coll::CostParams* p = impl_->params(call.op);
  if (!p) return out;
  const std::vector<Algorithm> can = impl_->candidates();
  for (const coll::Choice& ch : guarded([&] { return coll::candidates(impl_->problem(call), *p, can); }))
    out.push_back({ch.algo, ch.segments, ch.seconds});
  return out;
}

Prediction Group::choose(Collective c, size_t count, Format dtype, const CollOptions& o) {
  const coll::ReduceOp op = reduce_op(dtype, o.op);
  if (!impl_->params(op)) impl_->calibrate(op, nullptr, count);
  const coll::Call call{c, nullptr, nullptr, nullptr, count, op, o.root, 0};
  const std::vector<Algorithm> can = impl_->candidates();
  const coll::Choice ch = guarded([&] {
    try {
      return coll::choose(impl_->problem(call), *impl_->params(op), can);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("auto: ") + e.what() + ": add candidates that run it");
    }
  });
  return {ch.algo, ch.segments, ch.seconds};
}

void Group::calibrate(const void* sample, size_t count, Format dtype, const OpOptions& op) {
  impl_->calibrate(reduce_op(dtype, op), sample, count);
}

std::string Group::calibration_json(Format dtype, const OpOptions& op) const {
  const coll::ReduceOp rop = reduce_op(dtype, op);
  const coll::CostParams* p = impl_->params(rop);
  return p ? coll::calibration_json({coll::op_key(rop), size(), *p}) : std::string();
}

std::vector<std::pair<size_t, double>> Group::ping_points() const {
  std::vector<std::pair<size_t, double>> out;
  for (const coll::PingPoint& p : impl_->ping) out.emplace_back(p.bytes, p.half_rtt);
  return out;
}

CollReport Group::run(Collective c, const void* in, void* out, size_t count, Format dtype, const CollOptions& o,
                      uint8_t* flags) {
  Impl& m = *impl_;
  coll::Call call{c, in, out, flags, count, reduce_op(dtype, o.op), o.root, o.segments};
  CollReport rep;
  rep.algorithm = o.algorithm.value_or(m.opts.algorithm);
  if (rep.algorithm == Algorithm::AUTO) {
    const coll::ReduceOp& op = call.op;
    // The sample is this rank's input as far as it goes (an allgather's is its block; a broadcast's
    // other ranks have none: a synthetic one then).
    if (!m.params(op)) m.calibrate(op, in, coll::input_shape(call, rank(), size()).elems);
    const coll::Choice ch = guarded([&] {
      try {
        return coll::choose(m.problem(call), *m.params(op), m.candidates());
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("auto: ") + e.what() + ": add candidates that run it");
      }
    });
    rep.algorithm = ch.algo;
    if (!call.segments) call.segments = ch.segments;
  } else if (!m.available(rep.algorithm)) {
    throw Error(Errc::INVALID_ARGUMENT,
                std::string(algorithm_name(rep.algorithm)) +
                    ": this group has no switch: make it from a config, from endpoints with the "
                    "switch's, or from a store with GroupOptions::switch_address and pool "
                    "($PRISM_SWITCH, $PRISM_POOL), with the switch as its algorithm or a "
                    "candidate");
  }
  if (const coll::CostParams* p = m.params(call.op)) {
    if (rep.algorithm == Algorithm::CHAIN && !call.segments) call.segments = coll::model_segments(m.problem(call), *p);
    if (auto t = guarded([&] { return coll::predict(rep.algorithm, m.problem(call), *p, call.segments); }))
      rep.predicted_seconds = *t;
  }
  if (rep.algorithm == Algorithm::CHAIN && !call.segments) call.segments = coll::chain_default_segments(count);
  rep.segments = rep.algorithm == Algorithm::CHAIN ? call.segments : 0;
  const bool via_switch = rep.algorithm == Algorithm::SWITCH;
  const size_t elems = coll::result_shape(call, rank(), size()).elems;
  if (!flags && coll::reduces(c) && !via_switch) {
    m.flags.assign(elems, 0);
    call.flags = m.flags.data();
  }
  if (via_switch) m.via_switch->set_transport(o.op.transport);
  const auto t0 = std::chrono::steady_clock::now();
  guarded([&] { coll::run(rep.algorithm, m.ctx, call); });
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (via_switch) {
    const OpReport& r = m.via_switch->last();
    rep.overflow = r.overflow, rep.invalid = r.invalid, rep.nan_input = r.nan_input;
  } else if (call.flags) {
    uint8_t any = 0;  // one OR pass first (vectorised): flags are rare, counting them is three passes
    for (size_t i = 0; i < elems; ++i) any |= call.flags[i];
    for (size_t i = 0; any && i < elems; ++i) {
      rep.overflow += (call.flags[i] & flag::OVERFLOW) != 0;
      rep.invalid += (call.flags[i] & flag::INVALID) != 0;
      rep.nan_input += (call.flags[i] & flag::NAN_INPUT) != 0;
    }
  }
  return rep;
}

CollReport Group::allreduce(const void* in, void* out, size_t count, Format dtype, const CollOptions& o) {
  return run(Collective::ALLREDUCE, in, out, count, dtype, o);
}
CollReport Group::reduce(const void* in, void* out, size_t count, Format dtype, const CollOptions& o) {
  return run(Collective::REDUCE, in, out, count, dtype, o);
}
CollReport Group::broadcast(const void* in, void* out, size_t count, Format dtype, const CollOptions& o) {
  return run(Collective::BROADCAST, in, out, count, dtype, o);
}
CollReport Group::reduce_scatter(const void* in, void* out, size_t count, Format dtype, const CollOptions& o) {
  return run(Collective::REDUCE_SCATTER, in, out, count, dtype, o);
}
CollReport Group::allgather(const void* in, void* out, size_t count, Format dtype, const CollOptions& o) {
  return run(Collective::ALLGATHER, in, out, count, dtype, o);
}
CollReport Group::barrier(const CollOptions& o) {
  return run(Collective::BARRIER, nullptr, nullptr, 0, Format::INT32, o);
}

const char* algorithm_name(Algorithm a) { return a == Algorithm::AUTO ? "auto" : name(a); }
const char* collective_name(Collective c) { return name(c); }

}  // namespace prism
