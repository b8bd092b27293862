#include "proto/fragment.hpp"

namespace prism::wire {

std::vector<Fragment> kulisch_fragments(const LaneExact* lanes, uint32_t n, size_t max_body) {
  std::vector<Fragment> out;
  uint32_t i = 0;
  while (i < n) {
    Fragment f;
    f.first = uint16_t(i);
    f.body.resize(kFragmentHeader);
    f.body[0] = uint8_t(i >> 8);
    f.body[1] = uint8_t(i);
    f.body[2] = uint8_t(n >> 8);
    f.body[3] = uint8_t(n);
    while (i < n && f.count < 0xFFFF) {
      const size_t sz = kulisch_lane_size(lanes[i]);
      if (f.body.size() + sz > max_body && f.count > 0) break;
      const size_t at = f.body.size();
      f.body.resize(at + sz);
      encode_kulisch_lane(lanes[i], f.body.data() + at);
      ++f.count;
      ++i;
    }
    out.push_back(std::move(f));
  }
  return out;
}

PartialError decode_fragment(const Parsed& p, LaneExact* lanes) {
  size_t used;
  return decode_kulisch_lanes(p.payload, p.payload_len, p.h.count, lanes + p.first_lane, &used);
}

}  // namespace prism::wire
