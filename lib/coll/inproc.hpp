// A group of ranks as threads of one process: one Links per rank over
// shared queues (unbounded: send never blocks, so sendrecv is a send and a
// recv). An observer, when given, sees every message as it is sent: the
// tests check an algorithm's pattern (who sends to whom, in which step)
// against the seeds' descriptions.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "coll/links.hpp"

namespace prism::coll {

using Observer = std::function<void(const MessageEvent&)>;

// n transports, rank i's at [i]; each used by one thread.
std::vector<std::unique_ptr<Links>> make_inproc_group(int n, Observer observer = nullptr);

}  // namespace prism::coll
