#include "runtime.hpp"

#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_telemetry.h>

#include <algorithm>
#include <cstdio>
#include <map>

namespace prism::pipe {

std::atomic<bool> Runtime::stop_{false};

int logtype() {
  static const int t = [] {
    const int r = rte_log_register_type_and_pick_level("prism", RTE_LOG_INFO);
    return r < 0 ? int(RTE_LOGTYPE_USER1) : r;
  }();
  return t;
}

namespace {

constexpr unsigned kMbufs = 16383;
constexpr uint16_t kDataRoom = RTE_PKTMBUF_HEADROOM + 9216;  // a whole jumbo frame in one segment
constexpr uint16_t kRxDesc = 1024, kTxDesc = 1024;

Runtime* g_rt = nullptr;  // for the telemetry callbacks

std::string port_name(const std::string& device) { return device.substr(0, device.find(',')); }

}  // namespace

rte_mempool* make_pool(const char* name) {
  // A LIFO pool ("stack") hands out the buffer freed last, still in cache: RX
  // allocates on one lcore what reducers free on another, and a FIFO ring
  // would cycle through every buffer of the pool, each one cold.
  rte_mempool* p =
      rte_pktmbuf_pool_create_by_ops(name, kMbufs, 256, kPrivSize, kDataRoom, int(rte_socket_id()), "stack");
  if (!p) p = rte_pktmbuf_pool_create(name, kMbufs, 256, kPrivSize, kDataRoom, int(rte_socket_id()));
  return p;
}

Runtime::Runtime(const SwitchConfig& cfg, const RunOptions& opt) : cfg_(cfg), opt_(opt), dir_(cfg) {
  tsc_hz_ = rte_get_tsc_hz();
  stop_.store(false);
  if (cfg.ports.empty()) throw SetupError(cfg.path + ": no ports configured: list the switch's ports under ports:");

  // 1. Buffers: one pool; the private area carries what RX parsed.
  if (opt.pool) {
    pool_ = opt.pool;
    own_pool_ = false;
  } else {
    pool_ = make_pool("prism_pool");
  }
  if (!pool_)
    throw SetupError(std::string("cannot create the mbuf pool: ") + rte_strerror(rte_errno) +
                     " (give the EAL more memory, e.g. -m 1024)");

  // 2. Ports: probe configured devices, then one RX and one TX queue each.
  uint16_t max_cfg_port = 0;
  for (const auto& p : cfg.ports) max_cfg_port = std::max(max_cfg_port, p.id);
  dpdk_port_.assign(size_t(max_cfg_port) + 1, UINT16_MAX);
  for (const auto& p : cfg.ports) {
    uint16_t pid = p.id;
    if (!p.device.empty()) {
      const std::string name = port_name(p.device);
      if (rte_eth_dev_get_port_by_name(name.c_str(), &pid) != 0) {
        if (rte_dev_probe(p.device.c_str()) != 0 || rte_eth_dev_get_port_by_name(name.c_str(), &pid) != 0)
          throw SetupError(cfg.path + ": port " + std::to_string(p.id) + ": cannot create device '" + p.device +
                           "' (check the vdev name and its arguments)");
        probed_.push_back(name);
      }
    } else if (!rte_eth_dev_is_valid_port(p.id)) {
      throw SetupError(cfg.path + ": port " + std::to_string(p.id) + " has no device and DPDK has no port " +
                       std::to_string(p.id) + " (" + std::to_string(rte_eth_dev_count_avail()) +
                       " found): give device: or an EAL --vdev/-a option");
    }
    dpdk_port_[p.id] = pid;
    rte_eth_conf conf{};
    rte_eth_dev_info info{};
    rte_eth_dev_info_get(pid, &info);
    if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
    // Where the device verifies checksums on RX, RX takes its word for the good ones (see RxStage::poll).
    conf.rxmode.offloads |= info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
    int rc = rte_eth_dev_configure(pid, 1, 1, &conf);
    if (rc == 0) rc = rte_eth_rx_queue_setup(pid, 0, kRxDesc, rte_eth_dev_socket_id(pid), nullptr, pool_);
    if (rc == 0) rc = rte_eth_tx_queue_setup(pid, 0, kTxDesc, rte_eth_dev_socket_id(pid), nullptr);
    if (rc == 0) rte_eth_dev_set_mtu(pid, 9000);  // jumbo where the device can; virtual devices may refuse
    if (rc == 0) rc = rte_eth_dev_start(pid);
    if (rc != 0)
      throw SetupError("port " + std::to_string(p.id) + ": cannot configure and start it: " + rte_strerror(-rc));
    started_.push_back(pid);
    rte_eth_promiscuous_enable(pid);
    PRISM_LOG(INFO, "port %u: DPDK port %u (%s) started; RX checksum offload %s\n", p.id, pid,
              info.driver_name ? info.driver_name : "?",
              (conf.rxmode.offloads & RTE_ETH_RX_OFFLOAD_UDP_CKSUM) ? "on" : "off (checksums verified in software)");
  }

  // 3. Rings: a VOQ per (input port, shard), a TX ring per port (RX NACKs and every shard feed it).
  const uint32_t shards = cfg.reducer_shards;
  auto make_ring = [&](const std::string& name, unsigned flags) {
    rte_ring* r = rte_ring_create(name.c_str(), cfg.ring_size, int(rte_socket_id()), flags);
    if (!r) throw SetupError("cannot create ring " + name + ": " + rte_strerror(rte_errno));
    rings_.push_back(r);
    ring_names_.push_back(name);
    return r;
  };
  std::vector<rte_ring*> tx_ring(size_t(max_cfg_port) + 1, nullptr);
  for (const auto& p : cfg.ports) tx_ring[p.id] = make_ring("tx_p" + std::to_string(p.id), RING_F_SC_DEQ);
  std::vector<std::vector<rte_ring*>> voq(cfg.ports.size());  // [port index][shard]
  for (size_t i = 0; i < cfg.ports.size(); ++i)
    for (uint32_t s = 0; s < shards; ++s)
      voq[i].push_back(make_ring("voq_p" + std::to_string(cfg.ports[i].id) + "_s" + std::to_string(s),
                                 RING_F_SP_ENQ | RING_F_SC_DEQ));

  // 4. Stages.
  for (size_t i = 0; i < cfg.ports.size(); ++i) {
    const uint16_t id = cfg.ports[i].id;
    rx_.push_back(std::make_unique<RxStage>(id, dpdk_port_[id], dir_, voq[i], tx_ring[id], pool_));
  }
  const Arbiter mode = cfg.arbiter == ArbiterMode::RANDOM    ? Arbiter::RANDOM
                       : cfg.arbiter == ArbiterMode::REVERSE ? Arbiter::REVERSE
                                                             : Arbiter::ROUND_ROBIN;
  // By config port: how a fan-out's copies are made (fanout:, as the device allows); the device sends chains.
  std::vector<Copies> copies(size_t(max_cfg_port) + 1, Copies::WHOLE);
  std::vector<bool> can_chain(size_t(max_cfg_port) + 1, false);
  for (const auto& p : cfg.ports) {
    rte_eth_dev_info info{};
    rte_eth_dev_info_get(dpdk_port_[p.id], &info);
    const bool can = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) || opt.assume_chains;
    can_chain[p.id] = can;
    if (cfg.fanout == Fanout::CHAIN && can) copies[p.id] = Copies::CHAINED;
    if (cfg.fanout == Fanout::EGRESS) copies[p.id] = Copies::AT_EGRESS;
    if (cfg.fanout == Fanout::CHAIN && !can)
      PRISM_LOG(WARNING, "port %u: fanout: chain, but the device cannot send chained mbufs: RESULTs are copied\n",
                p.id);
  }
  for (uint32_t s = 0; s < shards; ++s) {
    std::vector<rte_ring*> in;
    std::vector<uint16_t> in_ports;
    for (size_t i = 0; i < voq.size(); ++i) {
      in.push_back(voq[i][s]);
      in_ports.push_back(cfg.ports[i].id);
    }
    red_.push_back(std::make_unique<ReduceStage>(s, dir_, in, in_ports, tx_ring, copies, pool_, mode, cfg.arbiter_seed,
                                                 cfg.slots_per_shard, tsc_hz_, opt.baseline));
  }
  for (const auto& p : cfg.ports)
    tx_.push_back(std::make_unique<TxStage>(p.id, dpdk_port_[p.id], tx_ring[p.id], !can_chain[p.id],
                                            copies[p.id] == Copies::AT_EGRESS, pool_));

  // 5. Lcores: the configured ones the EAL enabled (all of them by default); stages dealt out in turn.
  std::vector<unsigned> ids;
  unsigned lc;
  RTE_LCORE_FOREACH(lc) {
    if (cfg.lcores.empty() || std::find(cfg.lcores.begin(), cfg.lcores.end(), lc) != cfg.lcores.end())
      ids.push_back(lc);
  }
  if (std::find(ids.begin(), ids.end(), rte_get_main_lcore()) == ids.end())
    ids.insert(ids.begin(), rte_get_main_lcore());
  for (unsigned id : ids) lcores_.push_back({id, {}});
  std::vector<Stage*> all;
  for (auto& s : rx_) all.push_back(s.get());
  for (auto& s : red_) all.push_back(s.get());
  for (auto& s : tx_) all.push_back(s.get());
  // Spread reducers first over the workers (the heavy stages), RX/TX on the main lcore.
  if (lcores_.size() == 1) {
    lcores_[0].stages = all;
    for (auto& r : red_) r->same_lcore_as_rx(true);
    // Run to completion: the rings between stages on one lcore only cost
    // (two enqueues and two dequeues a packet). The arbiter's order is then
    // the order RX polls its ports, round robin; the random and reverse
    // orders, which exist to vary arrival order on purpose, keep the VOQs.
    // The rings stay for NACKs from RX and for frames TX could not take.
    if (!opt.staged && mode == Arbiter::ROUND_ROBIN) {
      run_to_completion_ = true;
      std::vector<ReduceStage*> shards;
      for (auto& r : red_) shards.push_back(r.get());
      for (size_t i = 0; i < rx_.size(); ++i) rx_[i]->run_to_completion(shards, uint32_t(i));
      std::vector<TxStage*> tx_by_port(size_t(max_cfg_port) + 1, nullptr);
      for (auto& t : tx_) tx_by_port[t->port()] = t.get();
      for (auto& r : red_) r->emitter().send_direct(tx_by_port);
      PRISM_LOG(INFO, "one lcore runs every stage: packets run to completion (RX -> reducer -> TX, no rings)\n");
    }
  } else {
    for (auto& s : rx_) lcores_[0].stages.push_back(s.get());
    for (auto& s : tx_) lcores_[0].stages.push_back(s.get());
    for (size_t i = 0; i < red_.size(); ++i) lcores_[1 + i % (lcores_.size() - 1)].stages.push_back(red_[i].get());
  }
  g_rt = this;
  register_telemetry();
}

Runtime::~Runtime() {
  g_rt = nullptr;
  for (uint16_t pid : started_) {
    rte_eth_dev_stop(pid);
    rte_eth_dev_close(pid);
  }
  for (const std::string& name : probed_) rte_eal_hotplug_remove("vdev", name.c_str());
  rx_.clear();
  red_.clear();
  tx_.clear();
  for (rte_ring* r : rings_) {
    void* m;
    while (rte_ring_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    rte_ring_free(r);
  }
  if (pool_ && own_pool_) rte_mempool_free(pool_);
}

std::vector<std::pair<std::string, unsigned>> Runtime::ring_fill() const {
  std::vector<std::pair<std::string, unsigned>> v;
  for (size_t i = 0; i < rings_.size(); ++i) v.emplace_back(ring_names_[i], rte_ring_count(rings_[i]));
  return v;
}

int Runtime::lcore_main(void* arg) {
  auto* l = static_cast<Lcore*>(arg);
  g_rt->loop(*l, false);
  return 0;
}

std::vector<Runtime::LcoreStages> Runtime::lcore_map() const {
  std::vector<LcoreStages> v;
  for (const auto& l : lcores_) v.push_back({l.id, {l.stages.begin(), l.stages.end()}});
  return v;
}

void Runtime::loop(Lcore& l, bool main) {
  uint64_t next_check = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    uint64_t now = rte_rdtsc();
    for (Stage* s : l.stages) {  // each stage's busy time: one TSC read per stage and pass
      const unsigned moved = s->poll(now);
      const uint64_t t = rte_rdtsc();
      if (moved) s->busy_tsc.add(t - now);
      now = t;
    }
    if (main && now >= next_check) {
      next_check = now + tsc_hz_ / 100;  // every 10 ms
      if (opt_.exit_when_idle_ms && idle(now)) stop_.store(true);
    }
  }
}

bool Runtime::idle(uint64_t now) const {
  uint64_t last = start_tsc_;
  for (const auto& r : rx_) last = std::max(last, r->last_rx_tsc());
  if (now - last < uint64_t(opt_.exit_when_idle_ms) * tsc_hz_ / 1000) return false;
  for (const auto& r : rings_)
    if (!rte_ring_empty(r)) return false;
  for (const auto& s : rx_)
    if (!s->drained()) return false;
  for (const auto& s : red_)
    if (!s->drained()) return false;
  for (const auto& s : tx_)
    if (!s->drained()) return false;
  return true;
}

int Runtime::run() {
  start_tsc_ = rte_get_tsc_cycles();
  for (size_t i = 1; i < lcores_.size(); ++i) {
    if (lcores_[i].stages.empty()) continue;
    rte_eal_remote_launch(&Runtime::lcore_main, &lcores_[i], lcores_[i].id);
  }
  for (const auto& l : lcores_) PRISM_LOG(DEBUG, "lcore %u runs %zu stages\n", l.id, l.stages.size());
  loop(lcores_[0], true);
  rte_eal_mp_wait_lcore();
  PRISM_LOG(INFO, "stopping: %s\n", opt_.exit_when_idle_ms ? "idle, or a signal" : "signal");
  // Let the ports send what is queued.
  for (int k = 0; k < 100; ++k) {
    bool busy = false;
    for (auto& s : tx_) busy |= s->poll(rte_get_tsc_cycles()) != 0 || !s->drained();
    if (!busy) break;
    rte_delay_us_block(1000);
  }
  size_t incomplete = 0;
  for (const auto& r : red_) {
    incomplete += r->reducer().open_slots().size();
    for (const auto& [job, js] : r->reducer().job_stats()) incomplete += js.timed_out;
  }
  summary(opt_.exit_when_idle_ms != 0);
  return opt_.exit_when_idle_ms && incomplete ? 3 : 0;
}

void Runtime::summary(bool report_incomplete) {
  if (opt_.quiet) return;
  std::printf("prism-switch %u summary\n", cfg_.id);
  for (const auto& r : rx_) {
    const auto& c = r->counters();
    std::printf("  port %u rx: %llu packets, %llu bytes, %llu to reducers, %llu NACKs\n", r->port(),
                (unsigned long long)c.packets.get(), (unsigned long long)c.bytes.get(),
                (unsigned long long)c.enqueued.get(), (unsigned long long)c.nacks.get());
    if (c.hw_checksums.get())
      std::printf("    checksums verified by the device %llu\n", (unsigned long long)c.hw_checksums.get());
    for (size_t i = 1; i < size_t(wire::Refusal::kCount); ++i)
      if (c.refused[i].get())
        std::printf("    refused %-20s %llu\n", wire::name(wire::Refusal(i)), (unsigned long long)c.refused[i].get());
    for (size_t i = 0; i < size_t(sw::Drop::kCount); ++i)
      if (c.dropped[i].get())
        std::printf("    dropped %-20s %llu\n", sw::name(sw::Drop(i)), (unsigned long long)c.dropped[i].get());
  }
  for (const auto& t : tx_) {
    std::printf("  port %u tx: %llu packets, %llu bytes\n", t->port(), (unsigned long long)t->counters().packets.get(),
                (unsigned long long)t->counters().bytes.get());
    if (t->counters().copies.get() || t->counters().alloc_failures.get())  // fanout: egress
      std::printf("    copies made at egress %llu, lost for want of a buffer %llu\n",
                  (unsigned long long)t->counters().copies.get(),
                  (unsigned long long)t->counters().alloc_failures.get());
  }
  for (const auto& rs : red_) {
    const sw::ReducerStats& s = rs->reducer().stats();
    std::printf(
        "  shard %u: %llu packets (%llu contribs, %llu partials), %llu results sent, %llu partials sent, "
        "%llu resent, %llu NACKs, %llu element-contributions\n",
        rs->shard(), (unsigned long long)s.packets, (unsigned long long)s.contribs, (unsigned long long)s.partials,
        (unsigned long long)s.results_sent, (unsigned long long)s.partials_sent, (unsigned long long)s.resent,
        (unsigned long long)s.nacks_sent, (unsigned long long)s.elements);
    for (size_t i = 0; i < size_t(sw::Drop::kCount); ++i)
      if (s.drops[i]) std::printf("    dropped %-20s %llu\n", sw::name(sw::Drop(i)), (unsigned long long)s.drops[i]);
    for (const auto& [job, js] : rs->reducer().job_stats())
      std::printf("    job %u: %llu ops opened, %llu completed, %llu expired, %llu timed out, %llu refused for slots\n",
                  job, (unsigned long long)js.opened, (unsigned long long)js.completed, (unsigned long long)js.expired,
                  (unsigned long long)js.timed_out, (unsigned long long)js.quota_refused);
    if (report_incomplete)
      for (const auto& [job, js] : rs->reducer().job_stats())
        if (js.timed_out)
          std::printf("  INCOMPLETE job %u: %llu ops abandoned after op_timeout_ms\n", job,
                      (unsigned long long)js.timed_out);
    if (report_incomplete)
      for (const auto& o : rs->reducer().open_slots())
        std::printf("  INCOMPLETE job %u op %u chunk %u: %u of %u contributions\n", o.key.job, o.key.op, o.key.chunk,
                    o.terms, o.group);
  }
  std::fflush(stdout);
}

// --- telemetry ---------------------------------------------------------------

namespace {

int tel_ports(const char*, const char*, rte_tel_data* d) {
  if (!g_rt) return -1;
  rte_tel_data_start_dict(d);
  for (const auto& r : g_rt->rx()) {
    const std::string k = "port" + std::to_string(r->port());
    rte_tel_data_add_dict_u64(d, (k + "_rx_packets").c_str(), r->counters().packets.get());
    rte_tel_data_add_dict_u64(d, (k + "_rx_bytes").c_str(), r->counters().bytes.get());
    rte_tel_data_add_dict_u64(d, (k + "_rx_backpressure").c_str(), r->counters().polls_skipped.get());
    rte_tel_data_add_dict_u64(d, (k + "_nacks").c_str(), r->counters().nacks.get());
    rte_tel_data_add_dict_u64(d, (k + "_rx_hw_checksums").c_str(), r->counters().hw_checksums.get());
  }
  for (const auto& t : g_rt->tx()) {
    const std::string k = "port" + std::to_string(t->port());
    rte_tel_data_add_dict_u64(d, (k + "_tx_packets").c_str(), t->counters().packets.get());
    rte_tel_data_add_dict_u64(d, (k + "_tx_bytes").c_str(), t->counters().bytes.get());
    rte_tel_data_add_dict_u64(d, (k + "_tx_copies").c_str(), t->counters().copies.get());
    rte_tel_data_add_dict_u64(d, (k + "_tx_alloc_failures").c_str(), t->counters().alloc_failures.get());
  }
  return 0;
}

int tel_rings(const char*, const char*, rte_tel_data* d) {
  if (!g_rt) return -1;
  rte_tel_data_start_dict(d);
  for (const auto& [name, n] : g_rt->ring_fill()) rte_tel_data_add_dict_u64(d, name.c_str(), n);
  return 0;
}

int tel_drops(const char*, const char*, rte_tel_data* d) {
  if (!g_rt) return -1;
  rte_tel_data_start_dict(d);
  uint64_t refused[size_t(wire::Refusal::kCount)] = {}, dropped[size_t(sw::Drop::kCount)] = {};
  for (const auto& r : g_rt->rx()) {
    for (size_t i = 0; i < size_t(wire::Refusal::kCount); ++i) refused[i] += r->counters().refused[i].get();
    for (size_t i = 0; i < size_t(sw::Drop::kCount); ++i) dropped[i] += r->counters().dropped[i].get();
  }
  for (const auto& rs : g_rt->reducers()) {
    const sw::ReducerStats s = rs->snapshot();
    for (size_t i = 0; i < size_t(sw::Drop::kCount); ++i) dropped[i] += s.drops[i];
  }
  for (size_t i = 1; i < size_t(wire::Refusal::kCount); ++i)
    rte_tel_data_add_dict_u64(d, (std::string("refused_") + wire::name(wire::Refusal(i))).c_str(), refused[i]);
  for (size_t i = 0; i < size_t(sw::Drop::kCount); ++i) rte_tel_data_add_dict_u64(d, sw::name(sw::Drop(i)), dropped[i]);
  return 0;
}

int tel_reducers(const char*, const char*, rte_tel_data* d) {
  if (!g_rt) return -1;
  rte_tel_data_start_dict(d);
  for (const auto& rs : g_rt->reducers()) {
    const sw::ReducerStats s = rs->snapshot();
    const std::string k = "shard" + std::to_string(rs->shard()) + "_";
    rte_tel_data_add_dict_u64(d, (k + "packets").c_str(), s.packets);
    rte_tel_data_add_dict_u64(d, (k + "contribs").c_str(), s.contribs);
    rte_tel_data_add_dict_u64(d, (k + "partials").c_str(), s.partials);
    rte_tel_data_add_dict_u64(d, (k + "results_sent").c_str(), s.results_sent);
    rte_tel_data_add_dict_u64(d, (k + "partials_sent").c_str(), s.partials_sent);
    rte_tel_data_add_dict_u64(d, (k + "resent").c_str(), s.resent);
    rte_tel_data_add_dict_u64(d, (k + "nacks_sent").c_str(), s.nacks_sent);
    rte_tel_data_add_dict_u64(d, (k + "elements").c_str(), s.elements);
    rte_tel_data_add_dict_u64(d, (k + "slots_in_use").c_str(), s.slots_in_use);
    rte_tel_data_add_dict_u64(d, (k + "slots_high").c_str(), s.slots_high);
    rte_tel_data_add_dict_u64(d, (k + "dequeued").c_str(), rs->counters().dequeued.get());
    rte_tel_data_add_dict_u64(d, (k + "backpressured").c_str(), rs->counters().backpressured.get());
  }
  return 0;
}

int tel_jobs(const char*, const char*, rte_tel_data* d) {
  if (!g_rt) return -1;
  rte_tel_data_start_dict(d);
  std::map<uint32_t, sw::JobStats> sum;
  for (const auto& rs : g_rt->reducers()) {
    std::vector<std::pair<uint32_t, sw::JobStats>> jobs;
    rs->snapshot(&jobs);
    for (const auto& [id, js] : jobs) {
      sw::JobStats& t = sum[id];
      t.opened += js.opened;
      t.completed += js.completed;
      t.expired += js.expired;
      t.timed_out += js.timed_out;
      t.quota_refused += js.quota_refused;
      t.in_flight += js.in_flight;
    }
  }
  for (const auto& [id, t] : sum) {
    const std::string k = "job" + std::to_string(id) + "_";
    rte_tel_data_add_dict_u64(d, (k + "ops_opened").c_str(), t.opened);
    rte_tel_data_add_dict_u64(d, (k + "ops_completed").c_str(), t.completed);
    rte_tel_data_add_dict_u64(d, (k + "ops_expired").c_str(), t.expired);
    rte_tel_data_add_dict_u64(d, (k + "ops_timed_out").c_str(), t.timed_out);
    rte_tel_data_add_dict_u64(d, (k + "slot_refusals").c_str(), t.quota_refused);
    rte_tel_data_add_dict_u64(d, (k + "in_flight").c_str(), t.in_flight);
  }
  return 0;
}

int tel_slots(const char*, const char*, rte_tel_data* d) {
  if (!g_rt) return -1;
  rte_tel_data_start_dict(d);
  for (const auto& rs : g_rt->reducers()) {
    const sw::ReducerStats s = rs->snapshot();
    const std::string k = "shard" + std::to_string(rs->shard()) + "_";
    rte_tel_data_add_dict_u64(d, (k + "capacity").c_str(), g_rt->config().slots_per_shard);
    rte_tel_data_add_dict_u64(d, (k + "in_use").c_str(), s.slots_in_use);
    rte_tel_data_add_dict_u64(d, (k + "high_water").c_str(), s.slots_high);
  }
  return 0;
}

int tel_arbiter(const char*, const char*, rte_tel_data* d) {
  if (!g_rt) return -1;
  rte_tel_data_start_dict(d);
  for (const auto& rs : g_rt->reducers()) {
    const std::string k = "shard" + std::to_string(rs->shard()) + "_";
    rte_tel_data_add_dict_string(d, (k + "mode").c_str(), rs->mode_name());
    for (uint32_t i = 0; i < rs->inputs(); ++i)
      rte_tel_data_add_dict_u64(d, (k + "served_port" + std::to_string(g_rt->config().ports[i].id)).c_str(),
                                rs->served(i));
  }
  return 0;
}

}  // namespace

void Runtime::register_telemetry() {
  static bool done = false;
  if (done) return;
  done = true;
  rte_telemetry_register_cmd("/prism/ports", tel_ports, "PRISM per-port RX/TX packets, bytes, backpressure, NACKs");
  rte_telemetry_register_cmd("/prism/rings", tel_rings, "PRISM VOQ and TX ring fill levels");
  rte_telemetry_register_cmd("/prism/drops", tel_drops, "PRISM drops by reason (parser refusals and switch drops)");
  rte_telemetry_register_cmd("/prism/reducers", tel_reducers, "PRISM reducer shards: packets, results, slots");
  rte_telemetry_register_cmd("/prism/jobs", tel_jobs, "PRISM per job: ops opened, completed, expired, in flight");
  rte_telemetry_register_cmd("/prism/slots", tel_slots, "PRISM slot tables: capacity, in use, high water");
  rte_telemetry_register_cmd("/prism/arbiter", tel_arbiter, "PRISM arbiter: mode and packets served per input ring");
}

}  // namespace prism::pipe
