// A rank's doorbell (segment.hpp's Header::bell): the one futex word its
// waits sleep on, whatever they wait for (a message from any peer, room in
// a ring to a peer, a single-copy read done). Whoever makes such progress
// rings it; a ring costs one atomic add, and a futex wake only when someone
// sleeps.
//
// No lost wake-ups: a waiter reads the bell before it looks for progress,
// then sleeps only while the bell still holds what it read; a producer
// publishes its progress before it rings (increments) the bell.
#pragma once

#include <chrono>
#include <cstdint>

#include "coll/shm/segment.hpp"

namespace prism::coll::shm {

// Wakes whoever sleeps on h's bell.
void ring(Header* h);

// Sleeps until h's bell differs from `seen`, or `timeout` passes (or a spurious wake).
void sleep_on(Header* h, uint32_t seen, std::chrono::nanoseconds timeout);

}  // namespace prism::coll::shm
