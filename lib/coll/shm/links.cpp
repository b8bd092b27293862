#include "coll/shm/links.hpp"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "coll/call_tag.hpp"
#include "coll/job_links.hpp"
#include "coll/shm/channel.hpp"
#include "coll/shm/doorbell.hpp"
#include "coll/spin.hpp"
#include "coll/tcp/fd.hpp"

namespace prism::coll::shm {
namespace {

using Clock = std::chrono::steady_clock;
using std::to_string;

constexpr auto kLivenessEvery = std::chrono::milliseconds(100);  // a dead peer is seen within this of a wait
// Before sleeping on the futex, a wait polls its rings between sched_yield()s (spin.hpp).

// A peer's process, watched through a pidfd (readable once it has exited,
// zombie or not); kill(pid, 0) where pidfds are missing.
class Watch {
 public:
  Watch() = default;
  explicit Watch(pid_t pid) : pid_(pid), fd_(int(syscall(SYS_pidfd_open, pid, 0))) {}
  bool exited() const {
    if (fd_) {
      pollfd p{fd_.get(), POLLIN, 0};
      return poll(&p, 1, 0) == 1;
    }
    return kill(pid_, 0) != 0 && errno == ESRCH;
  }

 private:
  pid_t pid_ = 0;
  Fd fd_;
};

class ShmLinks final : public JobLinks<SendJob, RecvJob> {
 public:
  ShmLinks(int rank, uint64_t group, std::vector<Segment> segs, std::chrono::milliseconds timeout)
      : JobLinks(rank), group_(group), timeout_(timeout), segs_(std::move(segs)) {
    const size_t n = segs_.size();
    me_ = segs_[size_t(rank)].header();
    out_.resize(n), in_.resize(n), watch_.resize(n);
    spin_ = spin_for(int(n));
    for (size_t j = 0; j < n; ++j) {
      if (int(j) == rank) continue;
      Header* h = segs_[j].header();
      const Peer peer{h, pid_t(h->pid), h->pid == me_->pid};
      out_[j] = Outbound(segs_[j], rank, peer);
      in_[j] = Inbound(segs_[size_t(rank)], int(j), peer);
      if (!peer.same_process) watch_[j] = std::make_unique<Watch>(peer.pid);
    }
  }
  ~ShmLinks() override {
    me_->closed.store(1, std::memory_order_release);
    for (size_t j = 0; j < segs_.size(); ++j)
      if (int(j) != rank_) ring(segs_[j].header());
  }
  int size() const override { return int(segs_.size()); }

 private:
  std::string me() const { return "rank " + to_string(rank_) + " of shared-memory group " + to_string(group_); }
  std::string gone_error(int p, const std::string& why) const {
    return me() + ": rank " + to_string(p) + " is gone: " + why;
  }
  // Whether peer p can no longer send: it closed or died, and nothing it wrote is left to read.
  bool silent_for_good(int p) {
    Inbound& in = in_[size_t(p)];
    if (!in.lost().empty()) return true;
    const bool closed = in.peer().header->closed.load(std::memory_order_acquire);
    if (!closed && !(watch_[size_t(p)] && dead_[size_t(p)])) return false;
    if (in.pending()) return false;  // the caller reads it on the next turn
    in.lose(in.mid_message() ? "it closed its links in the middle of a message"
            : closed         ? "it closed its links (it exited, or destroyed them)"
                             : "its process " + to_string(in.peer().pid) + " exited (crashed or killed)");
    return true;
  }
  // Marks the peers a wait needs whose processes have exited.
  void look_for_the_dead(SendJob* s, RecvJob* r) {
    for (int p : {s ? s->peer : -1, r ? r->peer : -1}) {
      if (p < 0 || !watch_[size_t(p)] || dead_[size_t(p)]) continue;
      if (watch_[size_t(p)]->exited()) {
        dead_[size_t(p)] = true;
        out_[size_t(p)].lose("its process " + to_string(out_[size_t(p)].peer().pid) + " exited (crashed or killed)");
      }
    }
  }

  // Moves s and r along until both are done, reading every peer meanwhile.
  void run(SendJob* s, RecvJob* r) override {
    if (s && s->hdr_len == 0) s->tag = call();
    if (r) in_[size_t(r->peer)].attach(*r, call());
    struct Guard {  // a recv that throws leaves no ring writing into its buffer; a send, no one reading its
      ShmLinks* t;
      SendJob* s;
      RecvJob* r;
      ~Guard() {
        if (r) t->in_[size_t(r->peer)].detach(*r);
        if (s && !s->done) {
          t->out_[size_t(s->peer)].abandon(*s);
          if (s->sent) t->out_[size_t(s->peer)].lose("a send to it failed part way");
        }
      }
    } guard{this, s, r};
    if (dead_.size() != segs_.size()) dead_.assign(segs_.size(), false);
    Clock::time_point now = Clock::now(), last_s = now, last_r = now, idle_since = now,
                      next_look = now + kLivenessEvery;
    bool idle = false;
    for (;;) {
      const uint32_t seen = me_->bell.load(std::memory_order_acquire);
      bool any = false;
      if (s && !s->done && out_[size_t(s->peer)].write(*s)) any = true, last_s = Clock::time_point::max();
      if (!(s && !s->done) && !(r && !r->done)) break;  // what else came waits for the calls that want it
      for (size_t j = 0; j < in_.size(); ++j) {
        if (int(j) == rank_) continue;
        const bool mine = r && !r->done && r->peer == int(j);
        if (in_[j].read(mine ? r : nullptr, call())) {
          any = true;
          if (mine) last_r = Clock::time_point::max();
        }
      }
      const bool s_wait = s && !s->done, r_wait = r && !r->done;
      if (!s_wait && !r_wait) break;
      if (any) {
        idle = false;
        continue;
      }
      now = Clock::now();
      if (last_s == Clock::time_point::max()) last_s = now;
      if (last_r == Clock::time_point::max()) last_r = now;
      if (!idle) idle = true, idle_since = now;
      if (s_wait && !out_[size_t(s->peer)].lost().empty())
        throw LinkError(gone_error(s->peer, out_[size_t(s->peer)].lost()) + " (sending it a message of " +
                        to_string(s->len) + " bytes)");
      if (r_wait && silent_for_good(r->peer))
        throw LinkError(gone_error(r->peer, in_[size_t(r->peer)].lost()) + " (receiving)");
      if (now - idle_since < spin_) {
        sched_yield();
        continue;
      }
      if (now >= next_look) {
        look_for_the_dead(s, r);
        next_look = now + kLivenessEvery;
        continue;  // once more round before sleeping: what the dead wrote is still there
      }
      if (r_wait && now - last_r >= timeout_)
        throw LinkError(me() + ": no message from rank " + to_string(r->peer) + " for " + to_string(timeout_.count()) +
                        " ms (ShmOptions::recv_timeout): is rank " + to_string(r->peer) +
                        " stuck, or not sending what this rank expects?");
      if (s_wait && now - last_s >= timeout_)
        throw LinkError(me() + ": rank " + to_string(s->peer) + " has taken nothing for " +
                        to_string(timeout_.count()) + " ms of a message of " + to_string(s->len) +
                        " bytes sent to it (ShmOptions::recv_timeout): is it stuck?");
      Clock::time_point wake = next_look;
      if (s_wait) wake = std::min(wake, last_s + timeout_);
      if (r_wait) wake = std::min(wake, last_r + timeout_);
      sleep_on(me_, seen, wake - now);
    }
    if (r && r->other) throw LinkError(me() + ": " + other_call_error(r->peer, r->got, call()));
    if (r && r->refused)
      throw LinkError(me() + ": a message of " + to_string(r->refused) + " bytes from rank " + to_string(r->peer) +
                      " where at most " + to_string(r->cap) + " were expected");
  }

  uint64_t group_;
  std::chrono::milliseconds timeout_;
  std::vector<Segment> segs_;  // [rank] is this rank's own
  Header* me_ = nullptr;
  std::vector<Outbound> out_;  // [rank] unused
  std::vector<Inbound> in_;
  std::vector<std::unique_ptr<Watch>> watch_;  // null for ranks in this process
  std::vector<bool> dead_;
  Clock::duration spin_{};  // kSpin, or kSpinOversubscribed with more ranks than CPUs
};

}  // namespace

std::unique_ptr<Links> make_shm_links(int rank, uint64_t group, std::vector<Segment> segs,
                                      std::chrono::milliseconds timeout) {
  return std::make_unique<ShmLinks>(rank, group, std::move(segs), timeout);
}

}  // namespace prism::coll::shm
