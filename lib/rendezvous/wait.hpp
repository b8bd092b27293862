// How long a store waits: a timeout as given, cut to [0, kLongestWait] so
// that now + timeout never overflows the clock (Millis::max() means "for
// ever", which 30 days is, for a rendezvous).
#pragma once

#include <algorithm>

#include "rendezvous/store.hpp"

namespace prism::rdv {

inline constexpr Millis kLongestWait{int64_t(30) * 24 * 3600 * 1000};

inline Millis bounded_wait(Millis t) { return std::clamp(t, Millis(0), kLongestWait); }

}  // namespace prism::rdv
