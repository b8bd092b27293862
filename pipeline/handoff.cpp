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
    if (!r->ready()) return false;
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

}  // namespace prism::pipe
