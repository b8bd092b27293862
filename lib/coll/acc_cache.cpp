#include "coll/acc_cache.hpp"

namespace prism::coll {
namespace {

bool same(const OpDesc& a, const OpDesc& b) {
  return a.dtype == b.dtype && a.out == b.out && a.policy == b.policy && a.exceptions == b.exceptions &&
         a.group == b.group && a.lanes == b.lanes;
}

size_t size_of(const Accumulator& a) { return a.bytes_per_lane() * a.desc().lanes; }

}  // namespace

// A collective holds a few (p at most for the ring), so a linear search is nothing beside one add().
std::unique_ptr<Accumulator> AccCache::take(const OpDesc& d) {
  for (auto it = spares_.begin(); it != spares_.end(); ++it)
    if (same((*it)->desc(), d)) {
      std::unique_ptr<Accumulator> a = std::move(*it);
      spares_.erase(it);
      bytes_ -= size_of(*a);
      a->reset();
      return a;
    }
  return make_accumulator(d);
}

void AccCache::give_back(std::unique_ptr<Accumulator> a) {
  if (!a) return;
  const size_t b = size_of(*a);
  if (b > kAccCacheBytes) return;  // never kept: freed here
  spares_.push_front(std::move(a));
  bytes_ += b;
  while (bytes_ > kAccCacheBytes) {
    bytes_ -= size_of(*spares_.back());
    spares_.pop_back();
  }
}

}  // namespace prism::coll
