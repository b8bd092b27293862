#include "tx.hpp"

#include <rte_ethdev.h>

#include <algorithm>

namespace prism::pipe {

TxStage::TxStage(uint16_t cfg_port, uint16_t dpdk_port, rte_ring* ring, bool linearize, uint16_t queue,
                 rte_spinlock_t* lock)
    : cfg_port_(cfg_port), dpdk_port_(dpdk_port), queue_(queue), lock_(lock), ring_(ring), linearize_(linearize) {}

TxStage::~TxStage() {
  if (pending_at_ < pending_n_) rte_pktmbuf_free_bulk(pending_ + pending_at_, unsigned(pending_n_ - pending_at_));
}

uint16_t TxStage::burst(rte_mbuf** m, uint16_t k) {
  if (linearize_)
    for (uint16_t i = 0; i < k; ++i)
      if (m[i]->nb_segs > 1 && rte_pktmbuf_linearize(m[i]) != 0) c_.retries.add();
  uint32_t len[kBurst];
  for (uint16_t i = 0; i < k; ++i) len[i] = rte_pktmbuf_pkt_len(m[i]);  // before the device may free them
  if (lock_) rte_spinlock_lock(lock_);
  const uint16_t sent = rte_eth_tx_burst(dpdk_port_, queue_, m, k);
  if (lock_) rte_spinlock_unlock(lock_);
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < sent; ++i) bytes += len[i];
  c_.bytes.add(bytes);
  c_.packets.add(sent);
  return sent;
}

unsigned TxStage::send(rte_mbuf** m, unsigned n) {
  // The ring's frames first; none while the link is down.
  if (pending_at_ < pending_n_ || !link_.last()) return 0;
  unsigned done = 0;
  while (done < n) {
    const uint16_t k = uint16_t(std::min<unsigned>(kBurst, n - done));
    const uint16_t sent = burst(m + done, k);
    done += sent;
    if (sent < k) {
      c_.retries.add();
      break;
    }
  }
  return done;
}

unsigned TxStage::poll(uint64_t now_tsc) {
  if (!link_.up(dpdk_port_, now_tsc)) return 0;
  // Several bursts a pass while the ring holds them: taking one burst a pass
  // against RX's one never wins back a pass that found the ring empty, so
  // the ring would stay full, and every frame in it holds a buffer out of
  // the cache (a working set of ring size x data room).
  unsigned total = 0;
  for (unsigned b = 0; b < kTxBurstsPerPoll; ++b) {
    if (pending_at_ == pending_n_) {
      if (!ring_) break;
      pending_n_ = uint16_t(rte_ring_dequeue_burst(ring_, reinterpret_cast<void**>(pending_), kBurst, nullptr));
      pending_at_ = 0;
      if (!pending_n_) break;
    }
    const uint16_t want = uint16_t(pending_n_ - pending_at_);
    const uint16_t sent = burst(pending_ + pending_at_, want);
    total += sent;
    pending_at_ = uint16_t(pending_at_ + sent);
    if (pending_at_ < pending_n_) {  // the device is full: the rest next pass
      c_.retries.add();
      break;
    }
    pending_n_ = pending_at_ = 0;
    if (want < kBurst) break;  // the ring had no more
  }
  return total;
}

}  // namespace prism::pipe
