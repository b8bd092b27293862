// libFuzzer target: the host collectives' partial messages
// (lib/coll/partial_message.hpp: a 12-byte header, then elements, packed
// lanes 0x40, packed pairs 0x41 or lane records 0) on arbitrary bytes.
//
// Input: byte 0 picks the reduction (below) and the lane count comes from
// byte 1; the rest is the payload, after a header written here for that op,
// whose encoding byte is input byte 2. Then:
//  - merge_partial into an empty accumulator must either take it or throw
//    CollectiveError (never crash, hang or throw anything else);
//  - when a merge throws, the accumulator may be left changed only for a
//    value it refused (not for bytes that do not decode);
//  - when it takes it: the state re-encodes (encode_partial) into a message
//    that merges into a second empty accumulator to the same state, and that
//    message re-encodes to the same bytes (one canonical form per state);
//    merging the original again doubles every finite value; finalize() does
//    not crash.
#include <cstring>
#include <memory>
#include <vector>

#include "arith/accumulator.hpp"
#include "coll/partial_message.hpp"
#include "fuzz_check.hpp"

namespace {

using namespace prism;  // NOLINT

bool same_state(const Accumulator& a, const Accumulator& b, uint32_t n) {
  std::vector<LaneExact> x(n), y(n);
  a.state(x.data());
  b.state(y.data());
  for (uint32_t i = 0; i < n; ++i)
    if (x[i].side != y[i].side || !(x[i].value == y[i].value)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  // Byte 0: bits 0..1 the input format (fp32, bf16, int32, fp16), bit 2 the
  // output bf16 (floats) instead of the input's, bit 3 FP32_ARRIVAL instead
  // of KULISCH_FIXED, bit 4 SATURATE. Byte 1: 1..64 lanes (0: 300, two
  // sub-blocks of packed lanes).
  const uint8_t sel = data[0];
  const Format dts[4] = {Format::FP32, Format::BF16, Format::INT32, Format::FP16};
  coll::ReduceOp op;
  op.dtype = dts[sel & 3];
  op.out = is_float(op.dtype) ? ((sel & 4) ? Format::BF16 : op.dtype) : Format::INT32;
  op.policy = (sel & 8) ? Policy::FP32_ARRIVAL : Policy::KULISCH_FIXED;
  op.exceptions = (sel & 16) ? Exceptions::SATURATE : Exceptions::IEEE;
  const uint32_t n = data[1] % 65 ? data[1] % 65 : 300;
  OpDesc d;
  try {
    d = coll::block_desc(op, 8, n);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  // The message: this op's header with the input's encoding byte, then the
  // payload, in a buffer of exactly its size (ASan sees any read past it).
  std::vector<uint8_t> msg(coll::kPartialHeader + size - 3);
  msg[0] = uint8_t(op.dtype);
  msg[1] = uint8_t(op.out);
  msg[2] = uint8_t(op.policy);
  msg[3] = uint8_t(op.exceptions);
  msg[4] = data[2];
  for (int i = 0; i < 4; ++i) msg[8 + i] = uint8_t(n >> (8 * i));
  std::memcpy(msg.data() + coll::kPartialHeader, data + 3, size - 3);

  std::vector<LaneExact> lanes;
  std::vector<double> doubles;
  const coll::PartialScratch sc{lanes, doubles};
  auto acc = make_accumulator(d);
  try {
    coll::merge_partial(*acc, op, msg.data(), msg.size(), 1, sc);
  } catch (const coll::CollectiveError&) {
    std::vector<uint8_t> out(size_t(n) * 4);
    acc->finalize(out.data(), nullptr);  // whatever it holds, it rounds
    return 0;
  }

  // Taken: one canonical re-encoding, and it merges back to the same state.
  std::vector<uint8_t> again, twice;
  const size_t len = coll::encode_partial(*acc, op, sc, again);
  auto back = make_accumulator(d);
  coll::merge_partial(*back, op, again.data(), len, 2, sc);
  FUZZ_CHECK(same_state(*acc, *back, n));
  const size_t len2 = coll::encode_partial(*back, op, sc, twice);
  FUZZ_CHECK(len2 == len && std::memcmp(again.data(), twice.data(), len) == 0);

  // The original again: every finite lane doubles (when the op still takes it).
  std::vector<LaneExact> one(n), two(n);
  acc->state(one.data());
  try {
    coll::merge_partial(*acc, op, msg.data(), msg.size(), 1, sc);
    if (op.policy == Policy::KULISCH_FIXED) {
      acc->state(two.data());
      for (uint32_t i = 0; i < n; ++i) {
        if (one[i].side & (side::NAN_INPUT | side::POS_INF | side::NEG_INF)) continue;
        Wide w = one[i].value;
        w.add(one[i].value);
        FUZZ_CHECK(two[i].value == w);
      }
    }
  } catch (const coll::CollectiveError&) {
    FUZZ_CHECK(op.policy == Policy::KULISCH_FIXED);  // only a value out of range, twice over
  }
  std::vector<uint8_t> out(size_t(n) * 4), flags(n);
  acc->finalize(out.data(), flags.data());
  return 0;
}
