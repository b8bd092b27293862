#include "switch/pool.hpp"

#include "switch/directory.hpp"

namespace prism::sw {

// The seqlock's read side: the sequence odd (bound) and the same after the
// entry was compared, so the comparison saw one binding, not half of two.
PooledJob::Binding PooledJob::binding(const Job& j, uint16_t r, const wire::Endpoint& src, uint16_t in_port) const {
  if (r >= R()) return Binding::UNBOUND;
  for (;;) {
    const uint32_t s0 = seq[r].load(std::memory_order_acquire);
    if (!(s0 & 1)) return Binding::UNBOUND;
    const Member& m = j.members[r];
    const bool same =
        m.addr.ip == src.ip && m.addr.port == src.port && wire::same_mac(m.addr.mac, src.mac) && m.port == in_port;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq[r].load(std::memory_order_relaxed) == s0) return same ? Binding::THIS_SOURCE : Binding::ANOTHER;
  }
}

Pool::Pool(const PoolConfig& cfg, std::vector<const Job*> jobs) : cfg_(cfg), jobs_(std::move(jobs)) {}

uint32_t Pool::free_ids() const {
  uint32_t n = 0;
  for (const Job* j : jobs_) n += j->pooled->state() == PoolJobState::FREE;
  return n;
}

bool NackLimiter::allow(const wire::Endpoint& src, uint64_t now_ns) {
  const uint64_t key = uint64_t(src.ip) << 16 | src.port;
  Entry& e = table_[uint32_t(key * 0x9E3779B97F4A7C15ull >> (64 - kBits))];
  if (e.key == key && now_ns < e.t + kIntervalNs) return false;
  e.key = key;
  e.t = now_ns;
  return true;
}

}  // namespace prism::sw
