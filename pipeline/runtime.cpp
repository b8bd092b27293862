#include "runtime.hpp"

#include <net/if.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <unistd.h>

#include <algorithm>

#include "kernel_link.hpp"
#include "telemetry.hpp"

namespace prism::pipe {

std::atomic<bool> Runtime::stop_{false};
std::atomic<bool> Runtime::drain_{false};

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

Runtime* g_rt = nullptr;  // for lcore_main

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

// net_af_xdp's pool: its UMEM is the pool's memory, one chunk per mbuf, and a
// chunk may not exceed a page without hugepages; so the data room is what is
// left of a page once the mempool's header, the mbuf and its private area are
// in (about 3.3 KB: frames of an MTU up to about 3300 bytes). `n`: the mbufs.
rte_mempool* make_page_pool(const char* name, unsigned n, size_t* max_frame) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_t room = page - sizeof(rte_mbuf) - kPrivSize;
  while (room > RTE_PKTMBUF_HEADROOM + 1024 &&
         rte_mempool_calc_obj_size(uint32_t(sizeof(rte_mbuf) + kPrivSize + room), 0, nullptr) > page)
    room -= RTE_CACHE_LINE_SIZE;
  rte_mempool* p =
      rte_pktmbuf_pool_create_by_ops(name, n, 256, kPrivSize, uint16_t(room), int(rte_socket_id()), "stack");
  if (!p) p = rte_pktmbuf_pool_create(name, n, 256, kPrivSize, uint16_t(room), int(rte_socket_id()));
  // The kernel puts a frame behind XDP's own headroom (256 bytes) in the data room.
  if (p && max_frame) *max_frame = room - RTE_PKTMBUF_HEADROOM - 256;
  return p;
}

Runtime::Runtime(const SwitchConfig& cfg, const RunOptions& opt) : cfg_(cfg), opt_(opt), dir_(cfg) {
  tsc_hz_ = rte_get_tsc_hz();
  stop_.store(false);
  drain_.store(false);
  if (cfg.ports.empty()) throw SetupError(cfg.path + ": no ports configured: list the switch's ports under ports:");
  const std::vector<unsigned> lcores = choose_lcores();  // before anything is made: a bad list costs nothing

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
  // 2. The layout. Each packet runs to completion on one lcore unless an
  // arbiter must vary the order (random, reverse: it needs the VOQs) or a
  // benchmark asks for the rings; pipelined, only when one lcore runs all.
  const bool shared_nothing = cfg.layout == Layout::SHARED_NOTHING;
  const bool in_order = !opt.staged && cfg.arbiter == ArbiterMode::ROUND_ROBIN;
  run_to_completion_ = in_order && (shared_nothing || lcores.size() == 1);
  // 3. Ports, started (shared nothing: a queue pair per lcore where the device has them, and steered).
  start_ports(shared_nothing ? uint32_t(lcores.size()) : 1);
  // 4. Stages, from the ports' end back to RX, each made with what it hands on to; 5. their lcores.
  if (shared_nothing) {
    for (unsigned id : lcores) lcores_.push_back({id, {}, nullptr, nullptr});
    wire_shared_nothing();
  } else {
    wire_stages();
    assign_lcores(lcores);
  }
  for (Lcore& l : lcores_) {
    l.idle = std::make_unique<IdleWait>(cfg.polling, cfg.polling_sleep_max_us);
    l.clock = std::make_unique<StallClock>(stall_tsc());
  }
  for (auto& r : red_) r->follow(&phase_);
  PRISM_LOG(INFO, "polling: %s%s\n", name(cfg.polling),
            cfg.polling == Polling::ADAPTIVE
                ? (" (an idle lcore sleeps up to " + std::to_string(cfg.polling_sleep_max_us) + " us)").c_str()
                : "");
  g_rt = this;
  register_telemetry(this);
}

Runtime::~Runtime() {
  register_telemetry(nullptr);
  g_rt = nullptr;
  for (const auto& p : cfg_.ports)
    if (dpdk_port_[p.id] != UINT16_MAX) unsteer_port(dpdk_port_[p.id], port_info_[p.id].steering);
  for (uint16_t pid : started_) {
    rte_eth_dev_stop(pid);
    rte_eth_dev_close(pid);
  }
  for (const std::string& name : probed_) rte_eal_hotplug_remove("vdev", name.c_str());
  rx_.clear();
  inbox_.clear();
  red_.clear();
  tx_.clear();
  for (rte_ring* r : rings_) {
    void* m;
    while (rte_ring_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    rte_ring_free(r);
  }
  if (pool_ && own_pool_) rte_mempool_free(pool_);
  for (const auto& pi : port_info_)  // after every stage and ring gave back its buffers
    if (pi.rx_pool) rte_mempool_free(pi.rx_pool);
}

// The configured lcores, each one the EAL was given (all of the EAL's by
// default); the main lcore runs RX and TX, so it is always among them.
std::vector<unsigned> Runtime::choose_lcores() const {
  std::vector<unsigned> ids;
  for (unsigned lc : cfg_.lcores)
    if (!rte_lcore_is_enabled(lc))
      throw SetupError(cfg_.path + ": lcores: lcore " + std::to_string(lc) + " is not one the EAL was given (" +
                       std::to_string(rte_lcore_count()) + " enabled): give the EAL every listed lcore (e.g. -l 0-" +
                       std::to_string(*std::max_element(cfg_.lcores.begin(), cfg_.lcores.end())) +
                       ") or drop it from lcores:");
  unsigned lc;
  RTE_LCORE_FOREACH(lc) {
    if (cfg_.lcores.empty() || std::find(cfg_.lcores.begin(), cfg_.lcores.end(), lc) != cfg_.lcores.end())
      ids.push_back(lc);
  }
  if (std::find(ids.begin(), ids.end(), rte_get_main_lcore()) == ids.end())
    ids.insert(ids.begin(), rte_get_main_lcore());
  return ids;
}

// Probes configured devices, then an RX and a TX queue each per lcore (as
// many as the device has, at least one) and steers each shard's UDP port to
// its lcore's queue; learns whether each device sends chained mbufs and how a
// fan-out's copies to it are made.
void Runtime::start_ports(uint32_t lcores) {
  for (const auto& p : cfg_.ports) ports_ = std::max<uint16_t>(ports_, uint16_t(p.id + 1));
  dpdk_port_.assign(ports_, UINT16_MAX);
  port_info_.clear();
  port_info_.resize(ports_);
  copies_.assign(ports_, Copies::WHOLE);
  for (const auto& p : cfg_.ports) {
    uint16_t pid = p.id;
    if (!p.device.empty()) {
      const std::string name = port_name(p.device);
      if (rte_eth_dev_get_port_by_name(name.c_str(), &pid) != 0) {
        std::string why, why_q;
        const std::string device = af_xdp_devargs(af_packet_devargs(p.device, &why), lcores, &why_q);
        if (!why.empty()) PRISM_LOG(INFO, "port %u: %s\n", p.id, why.c_str());
        if (!why_q.empty()) PRISM_LOG(INFO, "port %u: %s\n", p.id, why_q.c_str());
        if (rte_dev_probe(device.c_str()) != 0 || rte_eth_dev_get_port_by_name(name.c_str(), &pid) != 0)
          throw SetupError(cfg_.path + ": port " + std::to_string(p.id) + ": cannot create device '" + p.device +
                           "' (check the vdev name and its arguments)");
        probed_.push_back(name);
      }
    } else if (!rte_eth_dev_is_valid_port(p.id)) {
      throw SetupError(cfg_.path + ": port " + std::to_string(p.id) + " has no device and DPDK has no port " +
                       std::to_string(p.id) + " (" + std::to_string(rte_eth_dev_count_avail()) +
                       " found): give device: or an EAL --vdev/-a option");
    }
    dpdk_port_[p.id] = pid;
    rte_eth_conf conf{};
    rte_eth_dev_info info{};
    rte_eth_dev_info_get(pid, &info);
    const bool chains = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
    if (chains) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
    // Where the device verifies checksums on RX, RX takes its word for the good ones (see RxStage::poll).
    conf.rxmode.offloads |= info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
    PortInfo& pi = port_info_[p.id];
    pi.rxq = uint16_t(std::clamp<uint32_t>(info.max_rx_queues, 1, lcores));
    pi.txq = uint16_t(std::clamp<uint32_t>(info.max_tx_queues, 1, lcores));
    const std::string driver = info.driver_name ? info.driver_name : "";
    // Several queues: RSS on the UDP destination port alone where the device can (steer.hpp), the
    // fallback when it takes no rte_flow rule. (net_tap steers by its program, not by RSS.)
    const uint64_t dst_only = RTE_ETH_RSS_NONFRAG_IPV4_UDP | RTE_ETH_RSS_L4_DST_ONLY;
    const bool rss =
        pi.rxq > 1 && driver != "net_tap" && info.reta_size > 0 && (info.flow_type_rss_offloads & dst_only) == dst_only;
    if (rss) {
      conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
      conf.rx_adv_conf.rss_conf.rss_key = const_cast<uint8_t*>(kRssKey);
      conf.rx_adv_conf.rss_conf.rss_key_len = sizeof kRssKey;
      conf.rx_adv_conf.rss_conf.rss_hf = dst_only;
    }
    // net_af_xdp: a pool of its own whose buffers fit a page (make_page_pool), the UMEM of its queues.
    rte_mempool* rx_pool = pool_;
    if (driver == "net_af_xdp") {
      const unsigned mtu = iface_mtu(info.if_index);
      size_t max_frame = 0;
      // Each queue's fill ring takes 2048 buffers at setup; 2048 more are for frames in flight.
      pi.rx_pool = make_page_pool(("prism_xdp_p" + std::to_string(p.id)).c_str(), 2048u * pi.rxq + 2047, &max_frame);
      if (!pi.rx_pool)
        throw SetupError("port " + std::to_string(p.id) + ": cannot create its net_af_xdp buffer pool: " +
                         rte_strerror(rte_errno) + " (give the EAL more memory, e.g. -m 1024)");
      if (mtu && wire::max_frame(mtu) - wire::kVlanSize > max_frame)
        throw SetupError(cfg_.path + ": port " + std::to_string(p.id) + ": its interface has MTU " +
                         std::to_string(mtu) + ", but net_af_xdp takes frames of at most " + std::to_string(max_frame) +
                         " bytes (a buffer is a page, XDP without multi-buffer): " + "lower the interface's MTU to " +
                         std::to_string(max_frame - wire::kEthSize) +
                         " or less, or use net_af_packet (docs/REAL_INTERFACES.md)");
      rx_pool = pi.rx_pool;
    }
    int rc = rte_eth_dev_configure(pid, pi.rxq, pi.txq, &conf);
    for (uint16_t q = 0; rc == 0 && q < pi.rxq; ++q)
      rc = rte_eth_rx_queue_setup(pid, q, kRxDesc, rte_eth_dev_socket_id(pid), nullptr, rx_pool);
    for (uint16_t q = 0; rc == 0 && q < pi.txq; ++q)
      rc = rte_eth_tx_queue_setup(pid, q, kTxDesc, rte_eth_dev_socket_id(pid), nullptr);
    if (rc == 0) rte_eth_dev_set_mtu(pid, 9000);  // jumbo where the device can; virtual devices may refuse
    if (rc == 0) rc = rte_eth_dev_start(pid);
    if (rc != 0)
      throw SetupError("port " + std::to_string(p.id) + ": cannot configure and start it: " + rte_strerror(-rc));
    started_.push_back(pid);
    rte_eth_promiscuous_enable(pid);
    PRISM_LOG(INFO, "port %u: DPDK port %u (%s) started; RX checksum offload %s\n", p.id, pid,
              info.driver_name ? info.driver_name : "?",
              (conf.rxmode.offloads & RTE_ETH_RX_OFFLOAD_UDP_CKSUM) ? "on" : "off (checksums verified in software)");
    const bool can_chain = chains || opt_.assume_chains;
    pi.can_chain = can_chain;
    pi.link.kernel_link = driver == "net_af_packet" || driver == "net_af_xdp" || driver == "net_tap";
    if (driver == "net_af_packet") pi.link.ring_ifindex = info.if_index;
    pi.link.imissed = driver == "net_af_xdp";  // XDP_STATISTICS: frames its rings had no room for
    // A Linux interface takes no frame above its MTU unless a sender's GSO left one unsegmented: refused
    // (OVERSIZE). Other devices are bounded by the data room alone (multi_segment).
    if (pi.link.kernel_link)
      if (const unsigned mtu = iface_mtu(info.if_index)) pi.link.max_frame = wire::max_frame(mtu);
    if (lcores > 1) {
      char ifname[IF_NAMESIZE] = {};
      if (info.if_index) if_indextoname(info.if_index, ifname);
      std::string why;
      pi.steering = steer_port(pid, driver, ifname, {cfg_.udp_port, cfg_.reducer_shards, lcores, pi.rxq}, rss,
                               info.reta_size, &why);
      PRISM_LOG(INFO, "port %u: %u RX and %u TX queues for %u lcores; steering: %s%s%s\n", p.id, pi.rxq, pi.txq, lcores,
                name(pi.steering), why.empty() ? "" : " (", why.empty() ? "" : (why + "fell back)").c_str());
    }
    switch (cfg_.fanout) {
      case Fanout::COPY: break;
      case Fanout::CHAIN:
        if (can_chain)
          copies_[p.id] = Copies::CHAINED;
        else
          PRISM_LOG(WARNING, "port %u: fanout: chain, but the device cannot send chained mbufs: RESULTs are copied\n",
                    p.id);
        break;
    }
  }
}

rte_ring* Runtime::make_ring(const std::string& name, unsigned flags) {
  rte_ring* r = rte_ring_create(name.c_str(), cfg_.ring_size, int(rte_socket_id()), flags);
  if (!r) throw SetupError("cannot create ring " + name + ": " + rte_strerror(rte_errno));
  rings_.push_back(r);
  ring_names_.push_back(name);
  return r;
}

std::unique_ptr<Egress> Runtime::egress() const {
  if (run_to_completion_) return std::make_unique<DirectEgress>(tx_by_port_);
  return std::make_unique<RingEgress>(tx_ring_);
}

std::unique_ptr<Emitter> Runtime::emitter() const {
  return std::make_unique<Emitter>(egress(), pool_, copies_, ports_);
}

// Pipelined. TX first, then the shards that send to it, then RX that feeds
// them: each stage is made with everything it hands on to, and never told again.
void Runtime::wire_stages() {
  const uint32_t shards = cfg_.reducer_shards;
  // TX: a ring per port when stages run apart (RX's NACKs and every shard feed it).
  tx_ring_.assign(ports_, nullptr);
  tx_by_port_.assign(ports_, nullptr);
  for (const auto& p : cfg_.ports) {
    if (!run_to_completion_) tx_ring_[p.id] = make_ring("tx_p" + std::to_string(p.id), RING_F_SC_DEQ);
    tx_.push_back(std::make_unique<TxStage>(p.id, dpdk_port_[p.id], tx_ring_[p.id], !port_info_[p.id].can_chain));
    tx_by_port_[p.id] = tx_.back().get();
  }
  // VOQs: one ring per (input port, shard) when stages run apart.
  std::vector<std::vector<rte_ring*>> voq(cfg_.ports.size());  // [port index][shard]
  if (!run_to_completion_)
    for (size_t i = 0; i < cfg_.ports.size(); ++i)
      for (uint32_t s = 0; s < shards; ++s)
        voq[i].push_back(make_ring("voq_p" + std::to_string(cfg_.ports[i].id) + "_s" + std::to_string(s),
                                   RING_F_SP_ENQ | RING_F_SC_DEQ));
  // Reducer shards.
  for (uint32_t s = 0; s < shards; ++s) {
    std::unique_ptr<ShardWork> work = make_work(s, !run_to_completion_);
    std::vector<VoqInput> in;
    if (!run_to_completion_)
      for (size_t i = 0; i < voq.size(); ++i) in.push_back({voq[i][s], cfg_.ports[i].id});
    red_.push_back(std::make_unique<ReduceStage>(s, std::move(work), emitter(), std::move(in), cfg_.arbiter,
                                                 cfg_.arbiter_seed, tsc_hz_, ports_));
  }
  // RX, handing on through the VOQs or straight into the shards.
  std::vector<ReduceStage*> direct;
  for (auto& r : red_) direct.push_back(r.get());
  for (size_t i = 0; i < cfg_.ports.size(); ++i) {
    const uint16_t id = cfg_.ports[i].id;
    std::unique_ptr<Handoff> next;
    if (run_to_completion_)
      next = std::make_unique<DirectHandoff>(direct, id);
    else
      next = std::make_unique<VoqHandoff>(voq[i]);
    rx_.push_back(std::make_unique<RxStage>(id, dpdk_port_[id], 0, dir_, shards, std::move(next), emitter(),
                                            port_info_[id].link));
  }
  if (run_to_completion_)
    PRISM_LOG(INFO, "one lcore runs every stage: packets run to completion (RX -> reducer -> TX, no rings)\n");
}

std::unique_ptr<ShardWork> Runtime::make_work(uint32_t shard, bool prefetch) const {
  // A RESULT must fit the smallest MTU among the ports: a Linux interface's own,
  // 9000 for a device without one (the mbufs hold a jumbo frame whole).
  size_t result_mtu = 9000;
  for (const PortInfo& pi : port_info_)
    if (pi.link.max_frame) result_mtu = std::min(result_mtu, pi.link.max_frame - wire::max_frame(0));
  const WorkContext ctx{shard, dir_, cfg_.slots_per_shard, prefetch, result_mtu};
  return opt_.work ? opt_.work(ctx) : std::make_unique<ReducerWork>(ctx);
}

// Shared nothing: lcore w owns shards s with s mod W = w and polls queue w of
// every port (where the device has it); it runs RX, its inbox, its shards
// and its own TX queue of every port, each packet to completion. Packets of
// another lcore's shard (a device that did not steer them) go to that
// lcore's inbox ring: the only ring between lcores on the data path.
void Runtime::wire_shared_nothing() {
  const uint32_t lcores = uint32_t(lcores_.size()), shards = cfg_.reducer_shards;
  if (shards < lcores)
    PRISM_LOG(WARNING, "%u lcores but %u reducer shards: %u lcores own no shard (set reducers.shards: %u or more)\n",
              lcores, shards, lcores - shards, lcores);
  std::vector<uint16_t> owner(shards);
  for (uint32_t s = 0; s < shards; ++s) owner[s] = uint16_t(s % lcores);
  std::vector<rte_ring*> inbox(lcores, nullptr);
  if (lcores > 1)
    for (uint32_t w = 0; w < lcores; ++w)
      inbox[w] = make_ring("inbox_l" + std::to_string(lcores_[w].id), RING_F_SC_DEQ);
  for (const auto& p : cfg_.ports) {  // TX queues shared by several lcores need a lock each
    PortInfo& pi = port_info_[p.id];
    if (pi.txq < lcores) {
      pi.tx_locks = std::make_unique<rte_spinlock_t[]>(pi.txq);
      for (uint16_t q = 0; q < pi.txq; ++q) rte_spinlock_init(&pi.tx_locks[q]);
    }
  }
  for (uint32_t w = 0; w < lcores; ++w) {
    Lcore& l = lcores_[w];
    // TX: this lcore's queue of each port.
    std::vector<TxStage*> tx(ports_, nullptr);
    std::vector<Stage*> tx_stages;
    for (const auto& p : cfg_.ports) {
      PortInfo& pi = port_info_[p.id];
      const uint16_t q = uint16_t(w % pi.txq);
      tx_.push_back(std::make_unique<TxStage>(p.id, dpdk_port_[p.id], nullptr, !pi.can_chain, q,
                                              pi.tx_locks ? &pi.tx_locks[q] : nullptr));
      tx[p.id] = tx_.back().get();
      tx_stages.push_back(tx[p.id]);
    }
    auto emitter = [&] {
      return std::make_unique<Emitter>(std::make_unique<DirectEgress>(tx), pool_, copies_, ports_);
    };
    // Its shards, with VOQs [port][shard] on this lcore when an arbiter orders them.
    std::vector<ReduceStage*> mine(shards, nullptr);
    std::vector<std::vector<rte_ring*>> voq(cfg_.ports.size(), std::vector<rte_ring*>(shards, nullptr));
    std::vector<Stage*> shard_stages;
    for (uint32_t s = w; s < shards; s += lcores) {
      std::vector<VoqInput> in;
      if (!run_to_completion_)
        for (size_t i = 0; i < cfg_.ports.size(); ++i) {
          voq[i][s] = make_ring("voq_p" + std::to_string(cfg_.ports[i].id) + "_s" + std::to_string(s),
                                RING_F_SP_ENQ | RING_F_SC_DEQ);
          in.push_back({voq[i][s], cfg_.ports[i].id});
        }
      red_.push_back(std::make_unique<ReduceStage>(s, make_work(s, false), emitter(), std::move(in), cfg_.arbiter,
                                                   cfg_.arbiter_seed, tsc_hz_, ports_));
      mine[s] = red_.back().get();
      shard_stages.push_back(mine[s]);
    }
    auto local = [&](size_t i) -> std::unique_ptr<Handoff> {
      if (run_to_completion_) return std::make_unique<DirectHandoff>(mine, cfg_.ports[i].id);
      return std::make_unique<VoqHandoff>(voq[i]);
    };
    // RX: queue w of each port that has it.
    for (size_t i = 0; i < cfg_.ports.size(); ++i) {
      const uint16_t id = cfg_.ports[i].id;
      const PortInfo& pi = port_info_[id];
      if (w >= pi.rxq) continue;
      std::unique_ptr<Handoff> next = local(i);
      if (lcores > 1) next = std::make_unique<RouteHandoff>(std::move(next), owner, uint16_t(w), inbox);
      rx_.push_back(std::make_unique<RxStage>(id, dpdk_port_[id], uint16_t(w), dir_, shards, std::move(next), emitter(),
                                              pi.link));
      l.stages.push_back(rx_.back().get());
    }
    // Its inbox.
    if (lcores > 1) {
      std::vector<std::unique_ptr<Handoff>> by_port(ports_);
      for (size_t i = 0; i < cfg_.ports.size(); ++i) by_port[cfg_.ports[i].id] = local(i);
      inbox_.push_back(std::make_unique<InboxStage>(l.id, inbox[w], std::move(by_port)));
      l.stages.push_back(inbox_.back().get());
    }
    l.stages.insert(l.stages.end(), shard_stages.begin(), shard_stages.end());
    l.stages.insert(l.stages.end(), tx_stages.begin(), tx_stages.end());
  }
  PRISM_LOG(INFO, "shared nothing: %u lcores, %u shards, %s\n", lcores, shards,
            run_to_completion_ ? "each packet run to completion on its lcore"
                               : "each lcore's shards served from their VOQs by the arbiter");
}

std::vector<Runtime::LcoreView> Runtime::lcores() const {
  std::vector<LcoreView> v;
  for (const Lcore& l : lcores_) {
    LcoreView lv{l.id, {}, nullptr, {}, l.idle.get(), l.clock.get()};
    for (Stage* s : l.stages) {
      if (auto* r = dynamic_cast<const RxStage*>(s)) lv.rx.push_back(r);
      if (auto* b = dynamic_cast<const InboxStage*>(s)) lv.inbox = b;
      if (auto* r = dynamic_cast<const ReduceStage*>(s)) lv.shards.push_back(r);
    }
    v.push_back(std::move(lv));
  }
  return v;
}

// Pipelined: RX and TX on the main lcore, reducers spread over the others;
// one lcore runs them all when it is the only one.
void Runtime::assign_lcores(const std::vector<unsigned>& ids) {
  for (unsigned id : ids) lcores_.push_back({id, {}, nullptr, nullptr});
  for (auto& s : rx_) lcores_[0].stages.push_back(s.get());
  if (lcores_.size() == 1)
    for (auto& s : red_) lcores_[0].stages.push_back(s.get());
  else
    for (size_t i = 0; i < red_.size(); ++i) lcores_[1 + i % (lcores_.size() - 1)].stages.push_back(red_[i].get());
  for (auto& s : tx_) lcores_[0].stages.push_back(s.get());
}

std::vector<std::pair<std::string, unsigned>> Runtime::ring_fill() const {
  std::vector<std::pair<std::string, unsigned>> v;
  for (size_t i = 0; i < rings_.size(); ++i) v.emplace_back(ring_names_[i], rte_ring_count(rings_[i]));
  return v;
}

uint64_t Runtime::nacks(uint16_t cfg_port) const {
  uint64_t n = 0;
  for (const auto& r : rx_) n += r->emitter().nacks(cfg_port);
  for (const auto& r : red_) n += r->emitter().nacks(cfg_port);
  return n;
}

int Runtime::lcore_main(void* arg) {
  auto* l = static_cast<Lcore*>(arg);
  g_rt->loop(*l, false);
  return 0;
}

// The graceful stop (PROTOCOL.md, "The switch stops"), every 10 ms on the
// main lcore: tell the shards to take no new op, wait until none has had a
// chunk open for a second (meanwhile they answer retransmissions of the
// last RESULTs and refuse the next ops, so that the ranks hear why) or
// stop_timeout_ms has passed, then have them give up what is left
// (OP_ABANDONED to its contributors), and stop once each has.
void Runtime::check_drain(uint64_t now) {
  const auto open_chunks = [&] {
    size_t n = 0;
    for (const auto& r : red_) n += r->snapshot().slots_in_use;
    return n;
  };
  const auto all_seen = [&](int phase) {
    for (const auto& r : red_)
      if (r->seen() < phase) return false;
    return true;
  };
  const double ms = double(now - drain_start_) * 1e3 / double(tsc_hz_);
  switch (phase_.load(std::memory_order_relaxed)) {
    case 0:
      drain_start_ = now;
      drain_deadline_ = now + uint64_t(cfg_.stop_timeout_ms) * (tsc_hz_ / 1000);
      for (const auto& r : rx_)  // traffic in the last 100 ms: ranks are mid-job, linger for their next ops
        if (int64_t(now - r->last_rx_tsc()) < int64_t(tsc_hz_ / 10)) had_open_ = true;
      PRISM_LOG(NOTICE,
                "stopping: no new ops, JOINs or ALLOCs; the ops in flight have %u ms (stop_timeout_ms) "
                "to finish (a second signal stops at once)\n",
                cfg_.stop_timeout_ms);
      phase_.store(cfg_.stop_timeout_ms ? 1 : 2, std::memory_order_release);
      return;
    case 1:
      if (!all_seen(1)) return;
      if (open_chunks() != 0) {
        drained_at_ = 0;
        had_open_ = true;
      } else if (!drained_at_) {
        drained_at_ = now;
        if (had_open_) PRISM_LOG(NOTICE, "stopping: every op in flight finished, %.0f ms after the signal\n", ms);
      }
      // A second's linger only where ranks were busy (traffic just before the signal, or chunks
      // open since): an idle switch stops at once.
      if (drained_at_ && (!had_open_ || now >= drained_at_ + tsc_hz_ || now >= drain_deadline_)) {
        stop_.store(true);
      } else if (now >= drain_deadline_) {
        PRISM_LOG(WARNING,
                  "stopping: stop_timeout_ms (%u) passed with %zu chunks open: giving them up (NACK "
                  "OP_ABANDONED to their contributors)\n",
                  cfg_.stop_timeout_ms, open_chunks());
        phase_.store(2, std::memory_order_release);
      }
      return;
    default:
      if (all_seen(2) || now >= drain_deadline_ + tsc_hz_ / 10) stop_.store(true);
  }
}

uint64_t Runtime::stall_tsc() const {
  const uint64_t us = std::max<uint64_t>(50000, 4ull * cfg_.polling_sleep_max_us);
  return tsc_hz_ / 1000000 * us;
}

uint64_t Runtime::now_tsc() const { return lcores_.at(0).clock->view(rte_rdtsc()); }

// Every stage of the lcore sees its StallClock, not the TSC: time in which
// the lcore did not run (SIGSTOP, a paused VM) does not count against ops.
void Runtime::loop(Lcore& l, bool main) {
  uint64_t next_check = 0, stalls = 0, skipped = 0;
  StallClock& clock = *l.clock;
  l.idle->start();
  while (!stop_.load(std::memory_order_relaxed)) {
    uint64_t now = clock.at(rte_rdtsc());
    unsigned pass = 0;
    for (Stage* s : l.stages) {  // each stage's busy time: one TSC read per stage and pass
      const unsigned moved = s->poll(now);
      const uint64_t t = clock.at(rte_rdtsc());
      if (moved) s->busy_tsc.add(t - now);
      pass += moved;
      now = t;
    }
    if (clock.stalls() != stalls) [[unlikely]] {
      stalls = clock.stalls();
      PRISM_LOG(WARNING,
                "lcore %u did not run for %.3f s (stopped, paused or starved): time it did not run does not count "
                "against ops (%llu stalls, %.3f s in all)\n",
                l.id, double(clock.skipped() - skipped) / double(tsc_hz_), (unsigned long long)stalls,
                double(clock.skipped()) / double(tsc_hz_));
      skipped = clock.skipped();
    }
    l.idle->after_pass(pass);  // adaptive: a pass that moved nothing may sleep (idle.hpp)
    if (main && now >= next_check) {
      next_check = now + tsc_hz_ / 100;  // every 10 ms
      if (opt_.exit_when_idle_ms && idle(now)) stop_.store(true);
      if (drain_.load(std::memory_order_relaxed)) [[unlikely]]
        check_drain(now);
    }
  }
}

bool Runtime::idle(uint64_t now) const {
  uint64_t last = start_tsc_;
  for (const auto& r : rx_) last = std::max(last, r->last_rx_tsc());
  if (now < last || now - last < uint64_t(opt_.exit_when_idle_ms) * tsc_hz_ / 1000) return false;
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
  start_tsc_ = lcores_[0].clock->at(rte_rdtsc());
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
  for (const auto& r : red_)
    if (const sw::Reducer* red = r->work().reducer()) {
      incomplete += red->open_slots().size();
      for (const auto& [job, js] : red->job_stats()) incomplete += js.timed_out;
    }
  if (!opt_.quiet) print_summary(*this, opt_.exit_when_idle_ms != 0);
  return opt_.exit_when_idle_ms && incomplete ? 3 : 0;
}

}  // namespace prism::pipe
