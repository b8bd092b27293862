#include "inbox.hpp"

namespace prism::pipe {

InboxStage::~InboxStage() {
  if (at_ < n_) rte_pktmbuf_free_bulk(burst_ + at_, unsigned(n_ - at_));
}

// One hand-on per run of packets from the same switch port.
bool InboxStage::hand_on(uint64_t now_tsc) {
  while (at_ < n_) {
    const uint16_t port = meta(burst_[at_])->in_port;
    unsigned end = at_ + 1u;
    while (end < n_ && meta(burst_[end])->in_port == port) ++end;
    const unsigned put = local_[port]->put(burst_ + at_, shard_ + at_, end - at_, now_tsc);
    at_ = uint16_t(at_ + put);
    if (at_ < end) return false;
  }
  n_ = at_ = 0;
  return true;
}

unsigned InboxStage::poll(uint64_t now_tsc) {
  if (at_ < n_ && !hand_on(now_tsc)) {
    c_.backpressure.add();
    return 0;
  }
  for (const auto& h : local_)
    if (h && !h->ready()) {
      c_.backpressure.add();
      return 0;
    }
  n_ = uint16_t(rte_ring_dequeue_burst(ring_, reinterpret_cast<void**>(burst_), kBurst, nullptr));
  if (!n_) return 0;
  for (uint16_t i = 0; i < n_; ++i) shard_[i] = meta(burst_[i])->shard;
  c_.packets.add(n_);
  const unsigned n = n_;
  hand_on(now_tsc);
  return n;
}

}  // namespace prism::pipe
