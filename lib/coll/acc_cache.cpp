#include "coll/acc_cache.hpp"

#include <list>

namespace prism::coll::acc_cache {
namespace {

bool same(const OpDesc& a, const OpDesc& b) {
  return a.dtype == b.dtype && a.out == b.out && a.policy == b.policy && a.exceptions == b.exceptions &&
         a.group == b.group && a.lanes == b.lanes;
}

size_t size_of(const Accumulator& a) { return a.bytes_per_lane() * a.desc().lanes; }

// Most recently given back first. A collective holds a few (p at most for
// the ring), so a linear search is nothing beside one add().
struct Spares {
  std::list<std::unique_ptr<Accumulator>> l;
  size_t bytes = 0;
};

Spares& mine() {
  thread_local Spares s;
  return s;
}

}  // namespace

std::unique_ptr<Accumulator> take(const OpDesc& d) {
  Spares& s = mine();
  for (auto it = s.l.begin(); it != s.l.end(); ++it)
    if (same((*it)->desc(), d)) {
      std::unique_ptr<Accumulator> a = std::move(*it);
      s.l.erase(it);
      s.bytes -= size_of(*a);
      a->reset();
      return a;
    }
  return make_accumulator(d);
}

void give_back(std::unique_ptr<Accumulator> a) {
  if (!a) return;
  const size_t b = size_of(*a);
  if (b > kAccCacheBytes) return;  // never kept: freed here
  Spares& s = mine();
  s.l.push_front(std::move(a));
  s.bytes += b;
  while (s.bytes > kAccCacheBytes) {
    s.bytes -= size_of(*s.l.back());
    s.l.pop_back();
  }
}

size_t count() { return mine().l.size(); }
size_t bytes() { return mine().bytes; }
void clear() {
  mine().l.clear();
  mine().bytes = 0;
}

}  // namespace prism::coll::acc_cache
