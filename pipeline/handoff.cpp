#include "handoff.hpp"

namespace prism::pipe {

unsigned VoqHandoff::put(rte_mbuf** burst, const uint16_t* shard, unsigned n, uint64_t) {
  unsigned at = 0;
  while (at < n) {
    unsigned end = at + 1;
    while (end < n && shard[end] == shard[at]) ++end;
    const unsigned put =
        rte_ring_enqueue_burst(voq_[shard[at]], reinterpret_cast<void**>(burst + at), end - at, nullptr);
    at += put;
    if (at < end) break;  // the ring is full
  }
  return at;
}

bool DirectHandoff::ready() {
  for (ReduceStage* r : shards_)
    if (r && !r->ready()) return false;
  return true;
}

unsigned DirectHandoff::put(rte_mbuf** burst, const uint16_t* shard, unsigned n, uint64_t now_tsc) {
  for (unsigned at = 0; at < n;) {
    unsigned end = at + 1;
    while (end < n && shard[end] == shard[at]) ++end;
    shards_[shard[at]]->take(port_, burst + at, end - at, now_tsc);
    at = end;
  }
  return n;
}

// One operation per run of packets for the same owner, in order: a run that
// does not fit ends the hand-on (RX keeps the rest, and the order).
unsigned RouteHandoff::put(rte_mbuf** burst, const uint16_t* shard, unsigned n, uint64_t now_tsc) {
  unsigned at = 0;
  while (at < n) {
    const uint16_t to = owner_[shard[at]];
    unsigned end = at + 1;
    while (end < n && owner_[shard[end]] == to) ++end;
    unsigned put;
    if (to == self_) {
      put = local_->put(burst + at, shard + at, end - at, now_tsc);
      c_.local.add(put);
    } else {
      put = rte_ring_enqueue_burst(inbox_[to], reinterpret_cast<void**>(burst + at), end - at, nullptr);
      c_.dispatched.add(put);
      if (put < end - at) c_.inbox_full.add();
    }
    at += put;
    if (at < end) break;
  }
  return at;
}

}  // namespace prism::pipe
