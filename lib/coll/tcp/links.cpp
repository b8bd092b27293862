#include "coll/tcp/links.hpp"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "coll/call_tag.hpp"
#include "coll/job_links.hpp"
#include "coll/spin.hpp"
#include "coll/tcp/pair.hpp"

namespace prism::coll {
namespace {

using Clock = std::chrono::steady_clock;
using std::to_string;

int ms_until(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  return int(std::chrono::ceil<std::chrono::milliseconds>(t - now).count());
}

class TcpLinks final : public JobLinks<SendJob, RecvJob> {
 public:
  TcpLinks(int rank, uint32_t group, std::vector<Fd> fds, std::chrono::milliseconds timeout)
      : JobLinks(rank),
        group_(group),
        timeout_(timeout),
        spin_(spin_for(int(fds.size()))),
        pairs_(fds.size()),
        stage_(kStage) {
    for (size_t j = 0; j < fds.size(); ++j) pairs_[j].adopt(std::move(fds[j]));
  }
  int size() const override { return int(pairs_.size()); }

 private:
  std::string gone_error(int p) const {
    return "rank " + to_string(rank_) + " of job " + to_string(group_) + ": rank " + to_string(p) +
           " is gone: " + pairs_[size_t(p)].gone();
  }
  bool read(int p, RecvJob* r) { return pairs_[size_t(p)].read(stage_, r && r->peer == p ? r : nullptr, call()); }

  // Moves s and r along until both are done, reading every peer meanwhile.
  void run(SendJob* s, RecvJob* r) override {
    if (s && s->sent == 0) s->stamp(call());
    if (r) pairs_[size_t(r->peer)].attach(*r, call());
    struct Guard {  // a recv that throws leaves no pair writing into its buffer
      TcpLinks* t;
      RecvJob* r;
      ~Guard() {
        if (r) t->pairs_[size_t(r->peer)].detach(*r);
      }
    } guard{this, r};
    const std::string me = "rank " + to_string(rank_) + " of job " + to_string(group_);
    Clock::time_point now = Clock::now(), last_s = now, last_r = now;
    std::vector<pollfd> pf;
    std::vector<int> who;
    for (;;) {
      if (s && !s->done() && pairs_[size_t(s->peer)].write(*s)) last_s = Clock::now();
      if (r && !r->done && read(r->peer, r)) last_r = Clock::now();
      const bool s_wait = s && !s->done(), r_wait = r && !r->done;
      if (!s_wait && !r_wait) break;
      if (s_wait && !pairs_[size_t(s->peer)].open())
        throw LinkError(gone_error(s->peer) + " (sending it a message of " + to_string(s->len) + " bytes)");
      if (r_wait && !pairs_[size_t(r->peer)].open()) throw LinkError(gone_error(r->peer) + " (receiving)");

      pf.clear(), who.clear();
      for (size_t j = 0; j < pairs_.size(); ++j) {
        if (!pairs_[j].open()) continue;
        short ev = pairs_[j].held() ? 0 : POLLIN;  // a peer held back is not read until a recv wants it
        if (s_wait && int(j) == s->peer) ev |= POLLOUT;
        if (ev) pf.push_back({pairs_[j].fd(), ev, 0}), who.push_back(int(j));
      }
      Clock::time_point wake = Clock::time_point::max();
      if (s_wait) wake = std::min(wake, last_s + timeout_);
      if (r_wait) wake = std::min(wake, last_r + timeout_);
      // Before sleeping in poll(), poll without sleeping between sched_yield()s (spin.hpp).
      int ready = poll(pf.data(), pf.size(), 0);
      for (const Clock::time_point spin_end = Clock::now() + spin_; ready == 0 && Clock::now() < spin_end;) {
        sched_yield();
        ready = poll(pf.data(), pf.size(), 0);
      }
      now = Clock::now();
      if (ready == 0) ready = poll(pf.data(), pf.size(), ms_until(wake, now));
      if (ready < 0 && errno != EINTR) throw LinkError(me + ": poll(): " + std::strerror(errno));
      for (size_t i = 0; i < pf.size(); ++i) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (read(who[i], r) && r_wait && who[i] == r->peer) last_r = Clock::now();
      }
      now = Clock::now();
      if (r_wait && !r->done && now - last_r >= timeout_)
        throw LinkError(me + ": no message from rank " + to_string(r->peer) + " for " + to_string(timeout_.count()) +
                        " ms (TcpOptions::recv_timeout): is rank " + to_string(r->peer) +
                        " stuck, or not sending what this rank expects?");
      if (s_wait && now - last_s >= timeout_)
        throw LinkError(me + ": rank " + to_string(s->peer) + " has taken nothing for " + to_string(timeout_.count()) +
                        " ms of a message of " + to_string(s->len) +
                        " bytes sent to it (TcpOptions::recv_timeout): is it stuck?");
    }
    if (r && r->other) throw LinkError(me + ": " + other_call_error(r->peer, r->got, call()));
    if (r && r->refused)
      throw LinkError(me + ": a message of " + to_string(r->refused) + " bytes from rank " + to_string(r->peer) +
                      " where at most " + to_string(r->cap) + " were expected");
  }

  uint32_t group_;
  std::chrono::milliseconds timeout_;
  std::chrono::microseconds spin_;  // spin.hpp
  std::vector<Pair> pairs_;         // [rank] is never open
  std::vector<uint8_t> stage_;
};

}  // namespace

std::unique_ptr<Links> make_tcp_links(int rank, uint32_t group, std::vector<Fd> fds,
                                      std::chrono::milliseconds timeout) {
  return std::make_unique<TcpLinks>(rank, group, std::move(fds), timeout);
}

}  // namespace prism::coll
