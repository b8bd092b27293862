#include "rx.hpp"

#include <rte_cycles.h>
#include <rte_ethdev.h>

#include "proto/neighbor.hpp"

namespace prism::pipe {

RxStage::RxStage(uint16_t cfg_port, uint16_t dpdk_port, uint16_t queue, const sw::Directory& dir, uint32_t shards,
                 std::unique_ptr<Handoff> next, std::unique_ptr<Emitter> nacks, const RxLink& link)
    : cfg_port_(cfg_port),
      dpdk_port_(dpdk_port),
      queue_(queue),
      dir_(dir),
      shards_(shards),
      ports_(dir.config().udp_port, uint16_t(dir.config().reducer_shards)),
      kernel_link_(link.kernel_link),
      max_frame_(link.max_frame ? link.max_frame : SIZE_MAX),
      next_(std::move(next)),
      nacks_(std::move(nacks)),
      ring_drops_(queue == 0 && link.ring_ifindex ? std::make_unique<RingDrops>(link.ring_ifindex) : nullptr),
      imissed_(queue == 0 && link.imissed),
      ns_per_tsc_(1e9 / double(rte_get_tsc_hz())),
      police_(dir) {}

void RxStage::refuse(rte_mbuf* m, const wire::Parsed& p, const sw::Verdict& v, uint64_t now_tsc) {
  c_.dropped[size_t(*v.drop)].add();
  if (v.pool) v.pool->counters().refused[size_t(*v.drop)].fetch_add(1, std::memory_order_relaxed);
  // A pool message's refusal goes to its source at most once per 100 ms (sw::NackLimiter).
  sw::answer(dir_, v, p, *nacks_, &limit_, uint64_t(double(now_tsc) * ns_per_tsc_));
  rte_pktmbuf_free(m);
}

void RxStage::refuse(rte_mbuf* m, Meta* mt, sw::Drop why, uint64_t now_tsc) {
  mt->v = sw::Verdict{};
  mt->v.drop = why;
  refuse(m, mt->p, mt->v, now_tsc);
}

// Its head is whole, the rest cut or beyond the MTU: parsed as far as it
// goes (a truncated frame's lengths clamped to what it holds), for the
// sender it names. A registered one is told (NACK MALFORMED, echoing the
// first PRISM header), and can stop sending GSO messages this path does not
// segment; the drop is OVERSIZE whatever the parse said (not counted as a
// refusal again).
void RxStage::oversize(rte_mbuf* m, Meta* mt, uint64_t now_tsc) {
  const std::span<uint8_t> f{rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_data_len(m)};
  wire::clamp_to_frame(f);
  const wire::Refusal r = wire::parse(f, ports_, &mt->p, false, true, kernel_link_);
  mt->v = sw::ingress(dir_, r, mt->p, cfg_port_);
  mt->v.drop = sw::Drop::OVERSIZE;
  refuse(m, mt->p, mt->v, now_tsc);
}

bool RxStage::answer_local(rte_mbuf* m) {
  const wire::Endpoint self = dir_.self(cfg_port_);
  switch (wire::answer_local(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_data_len(m), self.mac, self.ip)) {
    case wire::LocalReply::NONE: return false;
    case wire::LocalReply::ARP: c_.arp_replies.add(); break;
    case wire::LocalReply::ICMP_ECHO: c_.echo_replies.add(); break;
  }
  m->ol_flags = 0;  // the reply carries no RX offload flags on its way out
  nacks_->forward(cfg_port_, m);
  return true;
}

bool RxStage::hand_on(uint64_t now_tsc) {
  const unsigned put =
      next_->put(pending_ + pending_at_, pending_shard_ + pending_at_, unsigned(pending_n_ - pending_at_), now_tsc);
  c_.to_reducers.add(put);
  pending_at_ = uint16_t(pending_at_ + put);
  if (pending_at_ < pending_n_) return false;
  pending_n_ = pending_at_ = 0;
  return true;
}

// Cost per packet: parse (~40 ns: headers, checksums over the header, not the
// payload's elements) + ingress (a job lookup and the member's address
// compared) + the handoff (a ring enqueue per run of one shard's packets).
unsigned RxStage::poll(uint64_t now_tsc) {
  nacks_->flush();
  // Backpressure: finish handing on the last burst before taking more.
  if ((pending_n_ && !hand_on(now_tsc)) || !next_->ready()) {
    c_.backpressure.add();
    return 0;
  }
  if (!link_.up(dpdk_port_, now_tsc)) return 0;
  if ((ring_drops_ || imissed_) && now_tsc >= next_drops_tsc_) {  // a system call: ten times a second
    if (ring_drops_) c_.ring_drops.add(ring_drops_->sample());
    rte_eth_stats st;
    if (imissed_ && rte_eth_stats_get(dpdk_port_, &st) == 0 && st.imissed >= imissed_last_) {
      c_.ring_drops.add(st.imissed - imissed_last_);
      imissed_last_ = st.imissed;
    }
    next_drops_tsc_ = now_tsc + rte_get_tsc_hz() / 10;
  }
  rte_mbuf* burst[kBurst];
  const uint16_t n = rte_eth_rx_burst(dpdk_port_, queue_, burst, kBurst);
  if (n == 0) return 0;
  last_rx_.store(now_tsc, std::memory_order_relaxed);
  c_.packets.add(n);
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = burst[i];
    c_.bytes.add(rte_pktmbuf_pkt_len(m));
    Meta* mt = meta(m);
    if (m->nb_segs != 1) {  // jumbo frames need a data room that holds them whole
      c_.multi_segment.add();
      refuse(m, mt, sw::Drop::MALFORMED, now_tsc);
      continue;
    }
    // Larger than the port's MTU: a GSO super-packet the sender's interface did not segment.
    if (rte_pktmbuf_pkt_len(m) > max_frame_) {
      oversize(m, mt, now_tsc);
      continue;
    }
    // A device with RX checksum offload that found both sums good says so: they are not summed again.
    const bool sums_good = (m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD &&
                           (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD;
    if (sums_good) c_.hw_checksums.add();
    const wire::Refusal r = wire::parse({rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m)}, ports_, &mt->p,
                                        true, sums_good, kernel_link_);
    if (mt->p.partial_checksum) c_.partial_checksums.add();
    // Not PRISM's: ARP (not IPv4) and ICMP (not UDP) for the port's own address are answered.
    if ((r == wire::Refusal::NOT_IPV4 || r == wire::Refusal::NOT_UDP) && answer_local(m)) continue;
    if (r != wire::Refusal::OK) c_.refused[size_t(r)].add();
    // Cut short: its IP header says more than the frame holds, as when a receive buffer smaller than the
    // frame kept only its start (net_af_packet's ring frames do so without a flag).
    if (r == wire::Refusal::IP_BAD_LENGTH &&
        wire::truncated({rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m)})) {
      oversize(m, mt, now_tsc);
      continue;
    }
    mt->v = sw::ingress(dir_, r, mt->p, cfg_port_);
    if (!mt->v.admitted()) {
      refuse(m, mt->p, mt->v, now_tsc);
      continue;
    }
    if (mt->v.job && !police_.pass(*mt->v.job, rte_pktmbuf_pkt_len(m), now_tsc)) {
      refuse(m, mt, sw::Drop::OVER_RATE, now_tsc);  // unanswered
      continue;
    }
    mt->in_port = cfg_port_;
    mt->shard = uint16_t(sw::shard_of(mt->p.h, shards_));
    pending_shard_[pending_n_] = mt->shard;
    pending_[pending_n_++] = m;
  }
  if (pending_n_) hand_on(now_tsc);  // what does not fit waits for the next poll
  nacks_->flush();
  return n;
}

}  // namespace prism::pipe
