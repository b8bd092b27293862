// The retransmission timeout from measured round trips, as TCP computes it
// (RFC 6298): a smoothed round trip and its variation, RTO = SRTT + 4·RTTVAR
// within [min, max]; only chunks sent once are sampled (Karn's rule), and
// each retry of a chunk doubles its own timeout (exponential backoff).
//
// A chunk's round trip here includes waiting for the other ranks' copies of
// it at the switch, so it varies with the ranks' skew as much as with the
// network: a retransmission sent too early costs one duplicate, which the
// switch drops, and never a wrong result.
#pragma once

#include <algorithm>
#include <cstdint>

namespace prism::rank {

class RttEstimator {
 public:
  RttEstimator(uint64_t initial_ns, uint64_t min_ns, uint64_t max_ns) : rto_(initial_ns), min_(min_ns), max_(max_ns) {}

  void sample(uint64_t rtt_ns) {
    if (!samples_++) {
      srtt_ = double(rtt_ns);
      rttvar_ = double(rtt_ns) / 2;
      lo_ = hi_ = rtt_ns;
    } else {
      const double err = double(rtt_ns) - srtt_;
      rttvar_ += ((err < 0 ? -err : err) - rttvar_) / 4;
      srtt_ += err / 8;
      lo_ = std::min(lo_, rtt_ns);
      hi_ = std::max(hi_, rtt_ns);
    }
    rto_ = std::clamp(uint64_t(srtt_ + 4 * rttvar_), min_, max_);
  }
  // The timeout of a chunk already sent `tries` times.
  uint64_t timeout(uint32_t tries) const {
    const uint32_t shift = tries > 1 ? std::min<uint32_t>(tries - 1, 20) : 0;
    return std::min(rto_ << shift, std::max(max_, rto_));
  }
  uint64_t rto() const { return rto_; }
  // SRTT + 4·RTTVAR without the floor and the ceiling (0 before a sample).
  uint64_t rto_unclamped() const { return uint64_t(srtt_ + 4 * rttvar_); }
  double srtt() const { return srtt_; }
  uint64_t min() const { return lo_; }
  uint64_t max() const { return hi_; }
  uint64_t samples() const { return samples_; }

 private:
  double srtt_ = 0, rttvar_ = 0;
  uint64_t rto_, min_, max_, lo_ = 0, hi_ = 0, samples_ = 0;
};

}  // namespace prism::rank
