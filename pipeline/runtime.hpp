// The switch, assembled from its configuration: mempool, ports, rings,
// stages, their lcores, telemetry, and the run loop. Setup is a readable
// sequence that wires the graph once (stage.hpp's picture); every DPDK
// resource is owned here and released in the destructor.
#pragma once

#include <rte_log.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "idle.hpp"
#include "inbox.hpp"
#include "reduce.hpp"
#include "rx.hpp"
#include "steer.hpp"
#include "switch/directory.hpp"
#include "tx.hpp"
#include "util/stall_clock.hpp"

namespace prism::pipe {

// PRISM's rte_log type ("prism"; --log-level=prism:debug shows more).
int logtype();
#define PRISM_LOG(level, ...) rte_log(RTE_LOG_##level, ::prism::pipe::logtype(), "PRISM: " __VA_ARGS__)

struct RunOptions {
  uint32_t exit_when_idle_ms = 0;  // stop once inputs are drained and nothing moved for this long
  bool quiet = false;
  // What each reducer shard does with its packets; empty: the switch's
  // (ReducerWork). Benchmarks bring their baselines here.
  std::function<std::unique_ptr<ShardWork>(const WorkContext&)> work;
  // A pool to use instead of creating one (made by make_pool(); the caller
  // frees it after the runtime): benchmarks build many runtimes in a row.
  rte_mempool* pool = nullptr;
  // Every port takes chained mbufs whatever its device advertises (benchmarks
  // whose net_pcap ports only free what they are sent): with `fanout: chain`.
  bool assume_chains = false;
  // Keep the VOQ rings between RX and the shards even where an lcore would
  // run each packet to completion (and, pipelined, the TX rings):
  // benchmarks compare the two.
  bool staged = false;
};

// The switch's mbuf pool: jumbo data rooms, the private area RX fills, LIFO.
rte_mempool* make_pool(const char* name);
// A pool of `n` mbufs each within one page (net_af_xdp's UMEM); `max_frame`:
// the largest frame its buffers take from the kernel.
rte_mempool* make_page_pool(const char* name, unsigned n, size_t* max_frame);

struct SetupError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Runtime {
 public:
  // Call after rte_eal_init(). Throws SetupError naming what failed and what to do.
  Runtime(const SwitchConfig& cfg, const RunOptions& opt);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Runs until request_stop() (SIGINT, SIGTERM, SIGHUP) or, with
  // exit_when_idle_ms, until idle. Prints the summary. Returns 0, or 3 when
  // ops were left incomplete at an idle exit.
  int run();
  static void request_stop() { stop_.store(true); }
  // A graceful stop (SIGTERM): no new ops, the ops in flight finish or, after
  // stop_timeout_ms, are given up (OP_ABANDONED); then run() returns as for
  // request_stop(). Async-signal-safe, as request_stop() is.
  static void request_drain() { drain_.store(true); }

  // What telemetry, the summary and the bench read.
  const std::vector<std::unique_ptr<RxStage>>& rx() const { return rx_; }
  const std::vector<std::unique_ptr<ReduceStage>>& reducers() const { return red_; }
  const std::vector<std::unique_ptr<TxStage>>& tx() const { return tx_; }
  const std::vector<std::unique_ptr<InboxStage>>& inboxes() const { return inbox_; }
  // Each lcore and what it runs: its RX queues, inbox, shards and TX queues.
  struct LcoreView {
    unsigned id;
    std::vector<const RxStage*> rx;
    const InboxStage* inbox = nullptr;
    std::vector<const ReduceStage*> shards;
    const IdleWait* idle = nullptr;     // how much it slept (polling: adaptive)
    const StallClock* clock = nullptr;  // its stalls: time it did not run, left out of its clock
  };
  std::vector<LcoreView> lcores() const;
  // How a port steers each shard to its lcore (shared nothing), and its queues.
  Steering steering(uint16_t cfg_port) const { return port_info_.at(cfg_port).steering; }
  uint16_t rx_queues(uint16_t cfg_port) const { return port_info_.at(cfg_port).rxq; }
  uint16_t tx_queues(uint16_t cfg_port) const { return port_info_.at(cfg_port).txq; }
  const SwitchConfig& config() const { return cfg_; }
  const sw::Directory& directory() const { return dir_; }
  std::vector<std::pair<std::string, unsigned>> ring_fill() const;
  // NACKs sent out of a switch port, by RX and every shard.
  uint64_t nacks(uint16_t cfg_port) const;
  // The DPDK port behind a configured port.
  uint16_t dpdk_port(uint16_t cfg_port) const { return dpdk_port_.at(cfg_port); }
  uint64_t tsc_hz() const { return tsc_hz_; }
  // The switch's clock now, in TSC ticks, as the main lcore's stages see it
  // (the TSC less the stalls it saw): for telemetry's ages.
  uint64_t now_tsc() const;
  // A gap between two of an lcore's clock readings longer than this is a
  // stall, left out of its clock: 50 ms, or 4 adaptive sleeps at their longest.
  uint64_t stall_tsc() const;
  // Each packet goes RX -> reducer -> TX in one call chain on one lcore,
  // without rings (shared nothing, or one lcore pipelined; round_robin).
  bool run_to_completion() const { return run_to_completion_; }

 private:
  struct Lcore {
    unsigned id;
    std::vector<Stage*> stages;
    std::unique_ptr<IdleWait> idle;     // polling: busy or adaptive
    std::unique_ptr<StallClock> clock;  // the time its stages see (util/stall_clock.hpp)
  };
  struct PortInfo {  // what setup learned of a port's device
    bool can_chain = false;
    RxLink link;                     // what RX must know of the device (rx.hpp)
    rte_mempool* rx_pool = nullptr;  // net_af_xdp: its own RX pool (make_page_pool), freed after the port
    uint16_t rxq = 1, txq = 1;       // queues configured (shared nothing: up to one per lcore)
    Steering steering = Steering::NONE;
    std::unique_ptr<rte_spinlock_t[]> tx_locks;  // one per TX queue, when lcores share them
  };
  void start_ports(uint32_t lcores);
  void wire_shared_nothing();
  std::unique_ptr<ShardWork> make_work(uint32_t shard, bool prefetch) const;
  std::vector<unsigned> choose_lcores() const;
  rte_ring* make_ring(const std::string& name, unsigned flags);
  std::unique_ptr<Egress> egress() const;
  std::unique_ptr<Emitter> emitter() const;
  void wire_stages();
  void assign_lcores(const std::vector<unsigned>& ids);
  static int lcore_main(void* arg);
  void loop(Lcore& l, bool main);
  bool idle(uint64_t now_tsc) const;

  const SwitchConfig& cfg_;
  RunOptions opt_;
  sw::Directory dir_;
  rte_mempool* pool_ = nullptr;
  bool own_pool_ = true;
  uint16_t ports_ = 0;               // one more than the highest configured port id
  std::vector<uint16_t> dpdk_port_;  // by config port id
  std::vector<PortInfo> port_info_;  // by config port id
  std::vector<Copies> copies_;       // by config port id
  std::vector<uint16_t> started_;
  std::vector<std::string> probed_;  // devices this runtime created (removed again on destruction)
  std::vector<rte_ring*> rings_;     // every ring, for cleanup and telemetry
  std::vector<std::string> ring_names_;
  std::vector<rte_ring*> tx_ring_;  // by config port id (staged)
  std::vector<std::unique_ptr<TxStage>> tx_;
  std::vector<TxStage*> tx_by_port_;
  std::vector<std::unique_ptr<ReduceStage>> red_;
  std::vector<std::unique_ptr<RxStage>> rx_;
  std::vector<std::unique_ptr<InboxStage>> inbox_;
  std::vector<Lcore> lcores_;
  uint64_t tsc_hz_ = 0, start_tsc_ = 0;
  bool run_to_completion_ = false;
  static std::atomic<bool> stop_, drain_;
  // The graceful stop, driven by the main lcore: 0 running, 1 draining (no new ops), 2 giving up
  // what is left; every shard follows it (ReduceStage::follow).
  std::atomic<int> phase_{0};
  uint64_t drain_start_ = 0, drain_deadline_ = 0, drained_at_ = 0;
  bool had_open_ = false;  // traffic at the signal or chunks open since: linger a second once none is
  void check_drain(uint64_t now_tsc);
};

}  // namespace prism::pipe
