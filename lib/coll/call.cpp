#include "coll/call.hpp"

#include <stdexcept>
#include <string>

#include "coll/blocks.hpp"

namespace prism::coll {
namespace {

size_t bytes_of(Format f) { return format_from_code(uint8_t(f)) ? info(f).bytes : 0; }

std::string what(const Call& c) { return std::string(name(c.coll)) + ": "; }

}  // namespace

ResultShape result_shape(const Call& c, int rank, int p) {
  const size_t ib = bytes_of(c.op.dtype), ob = bytes_of(c.op.out);
  switch (c.coll) {
    case Collective::ALLREDUCE: return {c.count, ob, 0};
    case Collective::REDUCE: return {rank == c.root ? c.count : 0, ob, 0};
    case Collective::BROADCAST:
    case Collective::ALLGATHER: return {c.count, ib, 0};
    case Collective::REDUCE_SCATTER: {
      const size_t lo = coll_block_start(c.count, p, rank);
      return {coll_block_start(c.count, p, rank + 1) - lo, ob, lo};
    }
    case Collective::BARRIER: return {};
  }
  return {};
}

ResultShape input_shape(const Call& c, int rank, int p) {
  const size_t ib = bytes_of(c.op.dtype);
  switch (c.coll) {
    case Collective::ALLREDUCE:
    case Collective::REDUCE:
    case Collective::REDUCE_SCATTER: return {c.count, ib, 0};
    case Collective::BROADCAST: return {rank == c.root ? c.count : 0, ib, 0};
    case Collective::ALLGATHER: {
      const size_t lo = coll_block_start(c.count, p, rank);
      return {coll_block_start(c.count, p, rank + 1) - lo, ib, lo};
    }
    case Collective::BARRIER: return {};
  }
  return {};
}

void check_call(const Call& c, int rank, int p) {
  if (!entry(c.coll))
    throw std::invalid_argument("collective code " + std::to_string(unsigned(c.coll)) + " is not one");
  if (p < 1 || rank < 0 || rank >= p)
    throw std::invalid_argument(what(c) + "rank " + std::to_string(rank) + " is not in a group of " +
                                std::to_string(p));
  if (c.coll == Collective::BARRIER) return;
  if (!format_from_code(uint8_t(c.op.dtype)))
    throw std::invalid_argument(what(c) + "format code " + std::to_string(unsigned(c.op.dtype)) + " is not a format (" +
                                choices<Format>() + ")");
  if (reduces(c.coll)) {
    if (!format_from_code(uint8_t(c.op.out)))
      throw std::invalid_argument(what(c) + "output format code " + std::to_string(unsigned(c.op.out)) +
                                  " is not a format (" + choices<Format>() + ")");
    block_desc(c.op, uint32_t(p), 1);  // admission: throws with admission_error()'s message
  }
  if (rooted(c.coll) && (c.root < 0 || c.root >= p))
    throw std::invalid_argument(what(c) + "root " + std::to_string(c.root) + " is not a rank of a group of " +
                                std::to_string(p) + " (0.." + std::to_string(p - 1) + ")");
  if (input_shape(c, rank, p).elems && !c.in)
    throw std::invalid_argument(what(c) + "rank " + std::to_string(rank) + " needs an input buffer");
  if (result_shape(c, rank, p).elems && !c.out)
    throw std::invalid_argument(what(c) + "rank " + std::to_string(rank) +
                                (c.coll == Collective::REDUCE ? " (the root)" : "") + " needs an output buffer");
}

}  // namespace prism::coll
