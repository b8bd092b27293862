// A host collective call's tag on its links (links.hpp's CallTag): made from
// the Call and the algorithm that runs it, set for the call's duration by
// CallScope (each algorithm's run function opens one), and described in the
// links' errors when a message of another call arrives.
#pragma once

#include <cstdint>
#include <string>

#include "coll/algorithms.hpp"
#include "coll/call.hpp"
#include "coll/links.hpp"

namespace prism::coll {

inline CallTag call_tag(const Call& c, Algorithm a) {
  CallTag t;
  t.coll = uint8_t(uint8_t(c.coll) + 1);
  t.algo = uint8_t(a);
  t.root = rooted(c.coll) ? uint16_t(c.root) : 0;
  t.count = c.count;
  return t;
}

// The links carry `c`'s tag while it lives, even when the algorithm throws.
class CallScope {
 public:
  CallScope(Links& l, const Call& c, Algorithm a) : l_(l) { l_.begin_call(call_tag(c, a)); }
  ~CallScope() { l_.end_call(); }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  Links& l_;
};

// "call 3 (reduce by binomial, root 0, 8192 elements)", or "no call (after call 2)".
inline std::string describe(const CallTag& t) {
  using std::to_string;
  if (t.epoch % 2 == 0) return "no collective call (after call " + to_string(t.epoch / 2) + ")";
  const Collective c = Collective(t.coll - 1);
  std::string s = "call " + to_string(t.epoch / 2 + 1) + " (" + name(c) + " by " + name(Algorithm(t.algo));
  if (rooted(c)) s += ", root " + to_string(t.root);
  return s + ", " + to_string(t.count) + " elements)";
}

// The LinkError's text when rank `peer` sent a message of call `got` where this rank's call `now`
// wanted one.
inline std::string other_call_error(int peer, const CallTag& got, const CallTag& now) {
  const std::string who = "rank " + std::to_string(peer);
  const std::string why =
      ": every rank must make the same collective calls in the same order, with the same count, root and algorithm";
  if (call_order(got, now) == CallOrder::LATER)
    return who + " has gone on to " + describe(got) + " while this rank, in " + describe(now) +
           ", waits for a message of it" + why;
  return who + " sent a message of its " + describe(got) + " to this rank's " + describe(now) + why;
}

}  // namespace prism::coll
