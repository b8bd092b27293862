// RX + ingress for one port: polls the device, parses each frame
// (wire::parse), asks the one ingress decision (sw::ingress) what becomes of
// it, counts and NACKs what is refused (through its own Emitter), and hands
// the admitted on (Handoff) to the shard that owns their (job, op, chunk).
// It also answers ARP and ICMP echo for the port's own address
// (wire::answer_local), in the request's buffer, out of the same port.
//
// Backpressure: a burst the handoff could not take whole stays here and RX
// polls its port no more until it is gone, so a full ring never drops
// silently.
#pragma once

#include <memory>

#include "emit.hpp"
#include "handoff.hpp"
#include "kernel_link.hpp"
#include "police.hpp"
#include "stage.hpp"

namespace prism::pipe {

struct RxCounters {
  Counter packets, bytes, to_reducers, backpressure, multi_segment, hw_checksums, partial_checksums, arp_replies,
      echo_replies, ring_drops;
  Counter refused[size_t(wire::Refusal::kCount)];  // by the parser's reason (named by its table)
  Counter dropped[size_t(sw::Drop::kCount)];       // by the switch's reason (sw::kDrops)
};
inline constexpr CounterField<RxCounters> kRxCounters[] = {
    {"packets", "frames received", &RxCounters::packets},
    {"bytes", "bytes of those frames", &RxCounters::bytes},
    {"to_reducers", "admitted packets handed to the reducer shards", &RxCounters::to_reducers},
    {"backpressure", "polls skipped while the reducers could not take more", &RxCounters::backpressure},
    {"multi_segment", "frames refused for arriving in several segments", &RxCounters::multi_segment},
    {"hw_checksums", "frames whose checksums the device verified", &RxCounters::hw_checksums},
    {"partial_checksums", "UDP checksums a sender on this host left to offload (kernel links): not verified",
     &RxCounters::partial_checksums},
    {"arp_replies", "ARP requests for the port's address, answered", &RxCounters::arp_replies},
    {"echo_replies", "ICMP echo requests to the port's address, answered", &RxCounters::echo_replies},
    {"ring_drops",
     "frames the kernel dropped because the port's net_af_packet or net_af_xdp ring was full (senders outran the "
     "switch)",
     &RxCounters::ring_drops},
};

// What RX must know of its port's device, learnt when the port started.
struct RxLink {
  // A Linux interface (net_af_packet, net_af_xdp, net_tap), whose local
  // senders may leave UDP checksums to offload (wire::parse).
  bool kernel_link = false;
  // net_af_packet: its interface, whose ring drops are counted (0: none).
  unsigned ring_ifindex = 0;
  // The device counts the frames it had no room for itself (imissed:
  // net_af_xdp's XDP_STATISTICS): ring_drops samples it.
  bool imissed = false;
  // The largest frame the port takes (wire::max_frame of its interface's
  // MTU); a larger one is dropped as OVERSIZE. 0: the data room's limit only.
  size_t max_frame = 0;
};

class RxStage final : public Stage {
 public:
  // `nacks`: where this port's NACKs and ARP and echo replies are made and sent.
  // `link`: what the port's device is (RxLink); its drops are sampled by the
  // stage of queue 0 only.
  // `queue`: the device's RX queue this stage polls (one stage per queue, each on its lcore).
  RxStage(uint16_t cfg_port, uint16_t dpdk_port, uint16_t queue, const sw::Directory& dir, uint32_t shards,
          std::unique_ptr<Handoff> next, std::unique_ptr<Emitter> nacks, const RxLink& link);
  const char* kind() const override { return "rx"; }
  unsigned poll(uint64_t now_tsc) override;
  bool drained() const override { return pending_n_ == 0 && nacks_->drained(); }
  const RxCounters& counters() const { return c_; }
  const Emitter& emitter() const { return *nacks_; }
  uint64_t last_rx_tsc() const { return last_rx_.load(std::memory_order_relaxed); }
  uint16_t port() const { return cfg_port_; }
  uint16_t queue() const { return queue_; }
  // Where its packets went, when lcores share the work (null otherwise).
  const RouteCounters* route() const { return next_->route(); }

 private:
  void refuse(rte_mbuf* m, const wire::Parsed& p, const sw::Verdict& v, uint64_t now_tsc);
  void refuse(rte_mbuf* m, Meta* mt, sw::Drop why, uint64_t now_tsc);  // before parsing: no NACK
  void oversize(rte_mbuf* m, Meta* mt, uint64_t now_tsc);              // OVERSIZE, NACKed to a registered sender
  // ARP or ICMP echo for this port's address: answered (true), or not for us.
  bool answer_local(rte_mbuf* m);
  bool hand_on(uint64_t now_tsc);  // false while some of the burst is still here
  uint16_t cfg_port_, dpdk_port_, queue_;
  const sw::Directory& dir_;
  uint32_t shards_;
  wire::PortRange ports_;  // the switch's UDP ports, one per shard
  bool kernel_link_;
  size_t max_frame_;
  std::unique_ptr<Handoff> next_;
  std::unique_ptr<Emitter> nacks_;
  rte_mbuf* pending_[kBurst];  // admitted, not yet handed on
  uint16_t pending_shard_[kBurst];
  uint16_t pending_n_ = 0, pending_at_ = 0;
  RxCounters c_;
  std::atomic<uint64_t> last_rx_{0};
  LinkWatch link_;
  std::unique_ptr<RingDrops> ring_drops_;
  bool imissed_;  // sample the device's imissed into ring_drops
  uint64_t imissed_last_ = 0;
  uint64_t next_drops_tsc_ = 0;
  double ns_per_tsc_;
  sw::NackLimiter limit_;  // NACKs to pool messages' sources (sw::answer)
  Policer police_;         // the jobs' rates (police.hpp)
};

}  // namespace prism::pipe
