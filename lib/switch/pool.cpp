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

Pool::Pool(const PoolConfig& cfg, std::vector<const Job*> jobs)
    : cfg_(cfg), jobs_(std::move(jobs)), free_(uint32_t(jobs_.size())) {}

NackLimiter::Entry& NackLimiter::at(uint32_t ip) {
  Entry& e = table_[uint32_t((uint64_t(ip) * 0x9E3779B97F4A7C15ull) >> (64 - kBits))];
  if (!e.used || e.ip != ip) e = Entry{ip, 0, 0, 0, true};
  return e;
}

void NackLimiter::earn(const wire::Endpoint& src, size_t in_bytes) {
  Entry& e = at(src.ip);
  e.credit = uint32_t(std::min<size_t>(kMaxCredit, e.credit + in_bytes));
}

bool NackLimiter::allow(const wire::Endpoint& src, uint64_t now_ns, size_t in_bytes, size_t out_bytes, bool paced) {
  Entry& e = at(src.ip);
  e.credit = uint32_t(std::min<size_t>(kMaxCredit, e.credit + in_bytes));
  if ((paced && now_ns < e.tat) || e.credit < out_bytes) return false;
  if (paced) e.tat = now_ns + kIntervalNs;
  e.credit -= uint32_t(out_bytes);
  return true;
}

bool NackLimiter::take_alloc(const wire::Endpoint& src, uint64_t now_ns) {
  Entry& e = at(src.ip);
  const uint64_t tat = std::max(e.alloc_tat, now_ns);
  if (tat > now_ns + (kAllocBurst - 1) * kAllocIntervalNs) return false;
  e.alloc_tat = tat + kAllocIntervalNs;
  return true;
}

}  // namespace prism::sw
