// Job sessions (docs/PROTOCOL.md, "Sessions"): how a job's ranks agree on
// op numbers the switch has never seen, so a restarted job never has its
// fresh contributions taken for late copies of the old ones.
//
// A rank JOINs with a nonce of its own; the root counts the ranks joined and,
// when all R have, answers each with JOINED COMPLETE and the session's first
// op number: one past the highest op number opened at this switch (and at
// the switches below it, whose forwarded JOINs carry theirs), plus a random
// offset below kFirstOpSpread drawn once per session, so that op numbers
// cannot be predicted off the path (review F4). Every rank of the session
// gets the same one: it is fixed when the session completes. A rank that
// joins again with another nonce has restarted: that starts a new session.
// A leaf forwards its members' JOINs to the parent and the parent's JOINEDs
// back. JOIN and JOINED travel to and from one shard per job (the one that
// owns key (job, 0, 0)); the op numbers opened are seen by every shard
// through the Directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "switch/directory.hpp"
#include "switch/sink.hpp"

namespace prism::sw {

class Sessions {
 public:
  // A session's first op lies in [base, base + kFirstOpSpread), base being
  // one past the highest op number the tree remembers (0 when none).
  static constexpr uint32_t kFirstOpSpread = uint32_t(1) << 24;
  // A rank's JOIN counts toward completing a session only while it is
  // repeated: one not heard again for this long before the session completes
  // is dropped from it (a rank that died while the others were joining, or
  // the lone rank of an attempt before). libprism repeats every 500 ms at
  // most; PROTOCOL.md asks for at least every second.
  static constexpr uint64_t kJoinFreshNs = 3'000'000'000;
  // `mtu`: the IP MTU a JOINED must fit (the reducer's, for its PARTIALs and
  // NACKs): a group whose bitmap would not fit is answered without one.
  explicit Sessions(const Directory& dir, size_t mtu = 1500);
  // A JOIN from a member rank, or (at a root) a child forwarding one of its
  // ranks' JOINs. False when it is malformed (nonce 0, rank outside the group).
  bool on_join(const wire::Parsed& p, const Member& from, Sink& out, uint64_t now_ns = 0);
  // A leaf: the parent's JOINED, forwarded to the member rank it answers.
  // False when that rank is not a member here.
  bool on_joined(const wire::Parsed& p, Sink& out);
  // Pooled jobs (switch/pool.hpp): every rank has joined; a rank left (the
  // session is no longer complete); the job was released (no session).
  bool complete(const Job& j) const { return state_[j.index].complete; }
  void forget(const Job& j, uint16_t rank);
  void reset(const Job& j);

 private:
  struct State {
    std::vector<uint32_t> nonce;     // by rank; 0: not joined in this session
    std::vector<int32_t> via_child;  // by rank: the child it joined through (-1: a member here)
    std::vector<uint64_t> heard;     // by rank: when its JOIN last came (the switch's clock)
    uint32_t joined = 0;
    bool complete = false;
    uint32_t first_op = 0;
    uint32_t hint = 0;  // the highest first-fresh op a child reported (valid when hinted)
    bool hinted = false;
    // The JOINED body for the ranks joined as they are now, built at the
    // first answer after a change and shared by every answer until the next:
    // a completion's R JOINEDs cost one bitmap, not R.
    std::shared_ptr<const std::vector<uint8_t>> bitmap;
  };
  void answer(const Job& j, State& st, uint16_t rank, Sink& out);
  const Directory& dir_;
  std::vector<State> state_;  // by Job::index
  size_t max_bitmap_;         // bytes: the largest body a JOINED may carry
};

}  // namespace prism::sw
