// How a collective splits a vector over its ranks (MPI's reduce-scatter and
// allgather with an uneven split): `count` elements over p ranks, rank r's
// block is [coll_block_start(count, p, r), coll_block_start(count, p, r+1)),
// contiguous and in rank order, the first count % p blocks one element
// larger (so blocks are empty when count < p). RHD's and the ring's internal
// segments follow the same rule.
//
// The reduce-scatters and allgathers (rhd.hpp, ring.hpp) run in rounds so
// that a rank holds one round's accumulators and messages, not the whole
// vector's: round j takes from every rank's block its piece
// [j * piece, (j + 1) * piece) (clipped to the block; the first block is the
// longest, so it sets the number of rounds). A round's pieces, in rank
// order, are the round's vector, the pieces its segments.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace prism::coll {

// Where block r of n elements over p ranks starts; r = p gives n.
inline size_t coll_block_start(size_t n, int p, int r) {
  const size_t q = size_t(p), s = size_t(r);
  return s * (n / q) + std::min(s, n % q);
}

namespace detail {

// The rounds of a collective over blocks: `piece` elements of each block per
// round (at least 1; block_elems / p of them, so a round holds about
// block_elems elements in all).
struct BlockRounds {
  size_t count;
  int p;
  size_t piece;
  BlockRounds(size_t count_, int p_, uint32_t block_elems)
      : count(count_), p(p_), piece(std::max<size_t>(1, block_elems / size_t(p_))) {}
  size_t rounds() const { return (coll_block_start(count, p, 1) + piece - 1) / piece; }
  // Rank u's piece in round j: its first element in the whole vector and its
  // length (0 once u's block is used up).
  size_t first(size_t j, int u) const { return coll_block_start(count, p, u) + std::min(j * piece, len(u)); }
  size_t len(int u) const { return coll_block_start(count, p, u + 1) - coll_block_start(count, p, u); }
  size_t len(size_t j, int u) const { return std::min((j + 1) * piece, len(u)) - std::min(j * piece, len(u)); }
  // Round j's pieces as offsets into the round's vector (p + 1 of them).
  void starts(size_t j, std::vector<size_t>& at) const {
    at.assign(size_t(p) + 1, 0);
    for (int u = 0; u < p; ++u) at[size_t(u) + 1] = at[size_t(u)] + len(j, u);
  }
};

// A range of finalized results as a message: e elements of `esz` bytes at
// `o`, then, when `fl` is not null and some flag among the e is set, their
// e flag bytes (flags are rare: most messages are the results alone).
// Returns the message's bytes: `o` itself when no flag travels (no copy),
// else `msg`'s.
inline std::pair<const uint8_t*, size_t> results_message(const uint8_t* o, const uint8_t* fl, size_t esz, size_t e,
                                                         std::vector<uint8_t>& msg) {
  uint8_t any = 0;
  for (size_t i = 0; fl && i < e; ++i) any |= fl[i];
  if (!any) return {o, e * esz};
  msg.resize(e * (esz + 1));
  std::memcpy(msg.data(), o, e * esz);
  std::memcpy(msg.data() + e * esz, fl, e);
  return {msg.data(), msg.size()};
}

// The reverse; false when `got` bytes are not e elements' results (with or
// without their flags; without them, the flags are 0).
inline bool unpack_results(const uint8_t* msg, size_t got, size_t esz, size_t e, uint8_t* o, uint8_t* fl) {
  const bool with_flags = fl && got == e * (esz + 1);
  if (got != e * esz && !with_flags) return false;
  if (e == 0) return true;
  std::memcpy(o, msg, e * esz);
  if (with_flags)
    std::memcpy(fl, msg + e * esz, e);
  else if (fl)
    std::memset(fl, 0, e);
  return true;
}

}  // namespace detail
}  // namespace prism::coll
