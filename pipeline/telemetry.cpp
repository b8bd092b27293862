#include "telemetry.hpp"

#include <rte_cycles.h>
#include <rte_telemetry.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "config/config.hpp"
#include "runtime.hpp"

namespace prism::pipe {
namespace {

std::atomic<const Runtime*> g_rt{nullptr};

template <class S>
uint64_t value(const S& block, const CounterField<S>& f) {
  return (block.*f.field).get();
}
template <class S>
uint64_t value(const S& block, const sw::StatField<S>& f) {
  return block.*f.field;
}
// One table's counters under `prefix`: into a telemetry dict, or "name value" pairs for the summary.
template <class S, class Table>
void dict_add(rte_tel_data* d, const std::string& prefix, const S& block, const Table& table) {
  for (const auto& f : table) rte_tel_data_add_dict_u64(d, (prefix + f.name).c_str(), value(block, f));
}
template <class S, class Table>
std::string pairs(const S& block, const Table& table) {
  std::string out;
  for (const auto& f : table)
    out += (out.empty() ? "" : ", ") + std::string(f.name) + " " + std::to_string(value(block, f));
  return out;
}
// The same over several blocks (a port's RX or TX queues, one stage each), summed.
template <class S, class Table>
std::vector<std::pair<const char*, uint64_t>> sums(const std::vector<const S*>& blocks, const Table& table) {
  std::vector<std::pair<const char*, uint64_t>> v;
  for (const auto& f : table) {
    uint64_t n = 0;
    for (const S* b : blocks) n += value(*b, f);
    v.emplace_back(f.name, n);
  }
  return v;
}
std::string pairs(const std::vector<std::pair<const char*, uint64_t>>& v) {
  std::string out;
  for (const auto& [k, n] : v) out += (out.empty() ? "" : ", ") + std::string(k) + " " + std::to_string(n);
  return out;
}
std::vector<const RxCounters*> rx_of(const Runtime& rt, uint16_t port) {
  std::vector<const RxCounters*> v;
  for (const auto& r : rt.rx())
    if (r->port() == port) v.push_back(&r->counters());
  return v;
}
std::vector<const TxCounters*> tx_of(const Runtime& rt, uint16_t port) {
  std::vector<const TxCounters*> v;
  for (const auto& t : rt.tx())
    if (t->port() == port) v.push_back(&t->counters());
  return v;
}
std::string shard_list(const Runtime::LcoreView& l) {
  std::string s;
  for (const ReduceStage* r : l.shards) {
    if (!s.empty()) s += ',';
    s += std::to_string(r->shard());
  }
  return s.empty() ? "none" : s;
}

std::map<uint32_t, sw::JobStats> job_totals(const Runtime& rt) {
  std::map<uint32_t, sw::JobStats> sum;
  for (const auto& rs : rt.reducers()) {
    std::vector<std::pair<uint32_t, sw::JobStats>> jobs;
    rs->snapshot(&jobs);
    for (const auto& [id, js] : jobs)
      for (const auto& f : sw::kJobStats) sum[id].*f.field += js.*f.field;
  }
  return sum;
}

template <class F>
int with_runtime(rte_tel_data* d, F fill) {
  const Runtime* rt = g_rt.load();
  if (!rt) return -1;
  rte_tel_data_start_dict(d);
  fill(*rt);
  return 0;
}

int tel_ports(const char*, const char*, rte_tel_data* d) {
  return with_runtime(d, [&](const Runtime& rt) {
    for (const auto& p : rt.config().ports) {  // each port's queues summed
      const std::string k = "port" + std::to_string(p.id) + "_";
      for (const auto& [name, n] : sums(rx_of(rt, p.id), kRxCounters))
        rte_tel_data_add_dict_u64(d, (k + "rx_" + name).c_str(), n);
      rte_tel_data_add_dict_u64(d, (k + "nacks").c_str(), rt.nacks(p.id));
      for (const auto& [name, n] : sums(tx_of(rt, p.id), kTxCounters))
        rte_tel_data_add_dict_u64(d, (k + "tx_" + name).c_str(), n);
    }
  });
}

// Each lcore: the shards it owns, what its RX queues received and where it
// went (its own shards, or other lcores' inboxes), and its inbox; each
// port's queues and steering.
int tel_lcores(const char*, const char*, rte_tel_data* d) {
  return with_runtime(d, [&](const Runtime& rt) {
    rte_tel_data_add_dict_string(d, "layout", name(rt.config().layout));
    rte_tel_data_add_dict_string(d, "polling", name(rt.config().polling));
    rte_tel_data_add_dict_u64(d, "polling_sleep_max_us", rt.config().polling_sleep_max_us);
    for (const auto& p : rt.config().ports) {
      const std::string k = "port" + std::to_string(p.id) + "_";
      rte_tel_data_add_dict_string(d, (k + "steering").c_str(), name(rt.steering(p.id)));
      rte_tel_data_add_dict_u64(d, (k + "rx_queues").c_str(), rt.rx_queues(p.id));
      rte_tel_data_add_dict_u64(d, (k + "tx_queues").c_str(), rt.tx_queues(p.id));
    }
    for (const Runtime::LcoreView& l : rt.lcores()) {
      const std::string k = "lcore" + std::to_string(l.id) + "_";
      rte_tel_data_add_dict_string(d, (k + "shards").c_str(), shard_list(l).c_str());
      uint64_t rx = 0;
      std::vector<const RouteCounters*> routes;
      for (const RxStage* r : l.rx) {
        rx += r->counters().packets.get();
        if (r->route()) routes.push_back(r->route());
        rte_tel_data_add_dict_u64(
            d, (k + "port" + std::to_string(r->port()) + "_q" + std::to_string(r->queue()) + "_rx_packets").c_str(),
            r->counters().packets.get());
      }
      rte_tel_data_add_dict_u64(d, (k + "rx_packets").c_str(), rx);
      for (const auto& [name, n] : sums(routes, kRouteCounters)) rte_tel_data_add_dict_u64(d, (k + name).c_str(), n);
      if (l.inbox) dict_add(d, k + "inbox_", l.inbox->counters(), kInboxCounters);
      if (l.idle) dict_add(d, k, l.idle->counters(), kIdleCounters);
      if (l.clock) {
        rte_tel_data_add_dict_u64(d, (k + "stalls").c_str(), l.clock->stalls());
        rte_tel_data_add_dict_u64(d, (k + "stalled_ms").c_str(), l.clock->skipped() * 1000 / rt.tsc_hz());
      }
      for (const ReduceStage* r : l.shards)
        rte_tel_data_add_dict_u64(d, (k + "shard" + std::to_string(r->shard()) + "_packets").c_str(),
                                  r->counters().dequeued.get());
    }
  });
}

int tel_rings(const char*, const char*, rte_tel_data* d) {
  return with_runtime(d, [&](const Runtime& rt) {
    for (const auto& [name, n] : rt.ring_fill()) rte_tel_data_add_dict_u64(d, name.c_str(), n);
  });
}

int tel_drops(const char*, const char*, rte_tel_data* d) {
  return with_runtime(d, [&](const Runtime& rt) {
    uint64_t refused[size_t(wire::Refusal::kCount)] = {}, dropped[size_t(sw::Drop::kCount)] = {};
    for (const auto& r : rt.rx()) {
      for (size_t i = 0; i < size_t(wire::Refusal::kCount); ++i) refused[i] += r->counters().refused[i].get();
      for (size_t i = 0; i < size_t(sw::Drop::kCount); ++i) dropped[i] += r->counters().dropped[i].get();
    }
    for (const auto& rs : rt.reducers()) {
      const sw::ReducerStats s = rs->snapshot();
      for (size_t i = 0; i < size_t(sw::Drop::kCount); ++i) dropped[i] += s.drops[i];
    }
    for (size_t i = 1; i < size_t(wire::Refusal::kCount); ++i)
      rte_tel_data_add_dict_u64(d, (std::string("refused_") + wire::name(wire::Refusal(i))).c_str(), refused[i]);
    for (const auto& e : sw::kDrops) rte_tel_data_add_dict_u64(d, e.name, dropped[size_t(e.value)]);
  });
}

int tel_reducers(const char*, const char*, rte_tel_data* d) {
  return with_runtime(d, [&](const Runtime& rt) {
    for (const auto& rs : rt.reducers()) {
      const std::string k = "shard" + std::to_string(rs->shard()) + "_";
      dict_add(d, k, rs->snapshot(), sw::kReducerStats);
      dict_add(d, k, rs->counters(), kReduceCounters);
      dict_add(d, k, rs->emitter().counters(), kEmitCounters);
    }
  });
}

int tel_jobs(const char*, const char*, rte_tel_data* d) {
  return with_runtime(d, [&](const Runtime& rt) {
    for (const auto& [id, t] : job_totals(rt)) dict_add(d, "job" + std::to_string(id) + "_chunks_", t, sw::kJobStats);
  });
}

// Job pools: the switch's clock as the shards read it (their now_ns), for idle times.
uint64_t now_ns(const Runtime& rt) { return uint64_t(double(rt.now_tsc()) * (1e9 / double(rt.tsc_hz()))); }

// A pool's ids and counters, as "name value" pairs: telemetry and the summary.
std::vector<std::pair<std::string, uint64_t>> pool_fields(const sw::Pool& p) {
  const auto& c = p.counters();
  std::vector<std::pair<std::string, uint64_t>> v = {
      {"first", p.cfg().first},          {"count", p.cfg().count},
      {"max_group", p.cfg().max_group},  {"free", p.free_ids()},
      {"allocated", c.allocated.load()}, {"released", c.released.load()},
      {"reclaimed", c.reclaimed.load()}, {"nacks_limited", c.nacks_limited.load()},
  };
  constexpr sw::Drop kPoolReasons[] = {sw::Drop::POOL_FULL, sw::Drop::GROUP_TOO_LARGE, sw::Drop::OUT_OF_POOL,
                                       sw::Drop::RANK_TAKEN};
  for (const sw::Drop d : kPoolReasons)  // always shown
    v.emplace_back(std::string("refused_") + name(d), c.refused[size_t(d)].load());
  for (const auto& e : sw::kDrops)  // the other reasons a pool message was refused for, when any was
    if (const uint64_t n = c.refused[size_t(e.value)].load();
        n && std::find(std::begin(kPoolReasons), std::end(kPoolReasons), e.value) == std::end(kPoolReasons))
      v.emplace_back(std::string("refused_") + e.name, n);
  return v;
}

// rank -> "MAC IP:UDP port N", for each bound rank of a pooled job.
std::string binding_text(const sw::Member& m) {
  return format_mac(m.addr.mac) + " " + format_ipv4(m.addr.ip) + ":" + std::to_string(m.addr.port) + " port " +
         std::to_string(m.port);
}

// "/prism/pools" lists every pool and every pooled job not free (what fits
// the telemetry reply: 256 entries, 16 KiB); "/prism/pools,JOB" that one job.
int tel_pools(const char*, const char* params, rte_tel_data* d) {
  const bool one = params && *params;
  const uint32_t only = one ? uint32_t(std::strtoul(params, nullptr, 10)) : 0;
  return with_runtime(d, [&](const Runtime& rt) {
    const uint64_t now = now_ns(rt);
    for (const auto& pool : rt.directory().pools()) {
      if (one && !pool->cfg().has(only)) continue;
      rte_tel_data* pd = rte_tel_data_alloc();
      rte_tel_data_start_dict(pd);
      for (const auto& [k, n] : pool_fields(*pool)) rte_tel_data_add_dict_u64(pd, k.c_str(), n);
      rte_tel_data_add_dict_container(d, ("pool" + std::to_string(pool->id())).c_str(), pd, 0);
      for (const sw::Job* j : pool->jobs()) {
        const sw::PooledJob& pj = *j->pooled;
        const sw::PoolJobState st = pj.state();
        if (st == sw::PoolJobState::FREE || (one && j->cfg->id != only)) continue;
        rte_tel_data* jd = rte_tel_data_alloc();
        rte_tel_data_start_dict(jd);
        rte_tel_data_add_dict_string(jd, "state", name(st));
        rte_tel_data_add_dict_u64(jd, "pool", pool->id());
        rte_tel_data_add_dict_u64(jd, "group", pj.R());
        rte_tel_data_add_dict_u64(jd, "bound", pj.bound.load());
        const uint64_t heard = pj.heard_ns.load();
        rte_tel_data_add_dict_u64(jd, "idle_ms", now > heard ? (now - heard) / 1000000 : 0);
        for (uint16_t r = 0; r < pj.R(); ++r)
          if (pj.is_bound(r))
            rte_tel_data_add_dict_string(jd, ("rank" + std::to_string(r)).c_str(), binding_text(j->members[r]).c_str());
        rte_tel_data_add_dict_container(d, ("job" + std::to_string(j->cfg->id)).c_str(), jd, 0);
      }
    }
  });
}

int tel_slots(const char*, const char*, rte_tel_data* d) {
  return with_runtime(d, [&](const Runtime& rt) {
    for (const auto& rs : rt.reducers()) {
      const sw::ReducerStats s = rs->snapshot();
      const std::string k = "shard" + std::to_string(rs->shard()) + "_";
      rte_tel_data_add_dict_u64(d, (k + "capacity").c_str(), rt.config().slots_per_shard);
      rte_tel_data_add_dict_u64(d, (k + "in_use").c_str(), s.slots_in_use);
      rte_tel_data_add_dict_u64(d, (k + "high_water").c_str(), s.slots_high);
    }
  });
}

int tel_arbiter(const char*, const char*, rte_tel_data* d) {
  return with_runtime(d, [&](const Runtime& rt) {
    for (const auto& rs : rt.reducers()) {
      const std::string k = "shard" + std::to_string(rs->shard()) + "_";
      rte_tel_data_add_dict_string(d, (k + "mode").c_str(), name(rs->arbiter()));
      for (const auto& p : rt.config().ports)
        rte_tel_data_add_dict_u64(d, (k + "served_port" + std::to_string(p.id)).c_str(), rs->served(p.id));
    }
  });
}

}  // namespace

void register_telemetry(const Runtime* rt) {
  g_rt.store(rt);
  static bool done = false;
  if (done || !rt) return;
  done = true;
  rte_telemetry_register_cmd("/prism/ports", tel_ports, "PRISM per port: RX and TX counters, NACKs sent");
  rte_telemetry_register_cmd(
      "/prism/lcores", tel_lcores,
      "PRISM lcores: shards, RX queues, packets steered or dispatched, inboxes, polling and sleeps");
  rte_telemetry_register_cmd("/prism/rings", tel_rings, "PRISM VOQ, inbox and TX ring fill levels");
  rte_telemetry_register_cmd("/prism/drops", tel_drops, "PRISM drops by reason (parser refusals and switch drops)");
  rte_telemetry_register_cmd("/prism/reducers", tel_reducers, "PRISM reducer shards: packets, results, slots");
  rte_telemetry_register_cmd("/prism/jobs", tel_jobs, "PRISM per job, in op chunks: opened, completed, in flight");
  rte_telemetry_register_cmd("/prism/slots", tel_slots, "PRISM slot tables: capacity, in use, high water");
  rte_telemetry_register_cmd("/prism/arbiter", tel_arbiter, "PRISM arbiter: mode and packets served per input port");
  // (A help text is at most 127 characters, or the command is not registered.)
  rte_telemetry_register_cmd("/prism/pools", tel_pools,
                             "PRISM job pools: counters, refusals, jobs not free with their state and members "
                             "(param: a job id)");
}

// Each pool's counters, and its jobs not free.
void print_pools(const Runtime& rt) {
  const uint64_t now = now_ns(rt);
  for (const auto& pool : rt.directory().pools()) {
    std::string line;
    for (const auto& [k, n] : pool_fields(*pool)) line += (line.empty() ? "" : ", ") + k + " " + std::to_string(n);
    std::printf("  pool %u: %s\n", pool->id(), line.c_str());
    for (const sw::Job* j : pool->jobs()) {
      const sw::PooledJob& pj = *j->pooled;
      if (pj.state() == sw::PoolJobState::FREE) continue;
      const uint64_t heard = pj.heard_ns.load();
      std::printf("    pooled job %u %s: group %u, bound %u, idle_ms %llu\n", j->cfg->id, name(pj.state()), pj.R(),
                  pj.bound.load(), (unsigned long long)(now > heard ? (now - heard) / 1000000 : 0));
    }
  }
}

void print_summary(const Runtime& rt, bool report_incomplete) {
  std::printf("prism-switch %u summary\n", rt.config().id);
  const auto reasons = [](const char* what, const Counter* c, size_t n, auto name_of, size_t from) {
    for (size_t i = from; i < n; ++i)
      if (c[i].get()) std::printf("    %s %-20s %llu\n", what, name_of(i), (unsigned long long)c[i].get());
  };
  for (const auto& p : rt.config().ports) {
    std::printf("  port %u rx: %s\n", p.id, pairs(sums(rx_of(rt, p.id), kRxCounters)).c_str());
    Counter refused[size_t(wire::Refusal::kCount)], dropped[size_t(sw::Drop::kCount)];
    for (const RxCounters* c : rx_of(rt, p.id)) {
      for (size_t i = 0; i < size_t(wire::Refusal::kCount); ++i) refused[i].add(c->refused[i].get());
      for (size_t i = 0; i < size_t(sw::Drop::kCount); ++i) dropped[i].add(c->dropped[i].get());
    }
    reasons(
        "refused", refused, size_t(wire::Refusal::kCount), [](size_t i) { return wire::name(wire::Refusal(i)); }, 1);
    reasons(
        "dropped", dropped, size_t(sw::Drop::kCount), [](size_t i) { return name(sw::Drop(i)); }, 0);
    if (const uint64_t n = dropped[size_t(sw::Drop::OVERSIZE)].get())
      std::printf(
          "  port %u: %llu frames larger than the port's MTU (a GSO super-packet that was not segmented: turn "
          "off tx-udp-segmentation on the sender's interface, docs/REAL_INTERFACES.md)\n",
          p.id, (unsigned long long)n);
  }
  for (const auto& p : rt.config().ports)
    std::printf("  port %u tx: %s, nacks %llu\n", p.id, pairs(sums(tx_of(rt, p.id), kTxCounters)).c_str(),
                (unsigned long long)rt.nacks(p.id));
  if (rt.lcores().size() > 1)
    for (const Runtime::LcoreView& l : rt.lcores()) {
      std::vector<const RouteCounters*> routes;
      uint64_t rx = 0;
      for (const RxStage* r : l.rx) {
        rx += r->counters().packets.get();
        if (r->route()) routes.push_back(r->route());
      }
      std::string inbox;
      if (l.inbox)
        for (const auto& f : kInboxCounters)
          inbox += ", inbox_" + std::string(f.name) + " " + std::to_string(value(l.inbox->counters(), f));
      std::printf("  lcore %u (shards %s): rx %llu, %s%s\n", l.id, shard_list(l).c_str(), (unsigned long long)rx,
                  pairs(sums(routes, kRouteCounters)).c_str(), inbox.c_str());
    }
  for (const Runtime::LcoreView& l : rt.lcores())
    if (l.clock && l.clock->stalls())
      std::printf("  lcore %u stalls: %llu, %.3f s not counted against ops (the longest %.3f s)\n", l.id,
                  (unsigned long long)l.clock->stalls(), double(l.clock->skipped()) / double(rt.tsc_hz()),
                  double(l.clock->longest()) / double(rt.tsc_hz()));
  if (rt.config().polling == Polling::ADAPTIVE)
    for (const Runtime::LcoreView& l : rt.lcores())
      if (l.idle)
        std::printf("  lcore %u polling adaptive: %s\n", l.id, pairs(l.idle->counters(), kIdleCounters).c_str());
  for (const auto& rs : rt.reducers()) {
    const sw::Reducer* red = rs->work().reducer();
    const sw::ReducerStats s = red ? red->stats() : sw::ReducerStats{};
    std::printf("  shard %u: %s, %s, %s\n", rs->shard(), pairs(s, sw::kReducerStats).c_str(),
                pairs(rs->counters(), kReduceCounters).c_str(), pairs(rs->emitter().counters(), kEmitCounters).c_str());
    for (const auto& e : sw::kDrops)
      if (s.drops[size_t(e.value)])
        std::printf("    dropped %-20s %llu\n", e.name, (unsigned long long)s.drops[size_t(e.value)]);
    if (!red) continue;
    for (const auto& [job, js] : red->job_stats()) {
      if (js.opened == 0 && rt.directory().pool_of(job)) continue;  // a pooled id this shard never saw an op of
      std::printf("    job %u chunks: %s\n", job, pairs(js, sw::kJobStats).c_str());
      if (report_incomplete && js.timed_out)
        std::printf("  INCOMPLETE job %u: %llu op chunks abandoned after op_timeout_ms\n", job,
                    (unsigned long long)js.timed_out);
    }
    if (report_incomplete)
      for (const auto& o : red->open_slots())
        std::printf("  INCOMPLETE job %u op %u chunk %u: %u of %u contributions\n", o.key.job, o.key.op, o.key.chunk,
                    o.terms, o.group);
  }
  print_pools(rt);
  std::fflush(stdout);
}

}  // namespace prism::pipe
