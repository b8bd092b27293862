#include "coll/partial_message.hpp"

#include <string>

#include "proto/packed_lanes.hpp"
#include "proto/partial.hpp"

namespace prism::coll {
namespace {

constexpr uint8_t kLaneRecords = 0;
constexpr uint8_t kPackedLanes = 0x40;

// The element format a partial may travel in when every lane fits it.
Format element_format(const ReduceOp& op) {
  if (is_float(op.dtype) && op.policy != Policy::KULISCH_FIXED) return Format::FP32;
  return op.out;
}

std::string op_text(Format dtype, Format out, uint8_t policy, uint8_t exceptions) {
  const auto p = policy_from_code(policy);
  const auto e = exceptions_from_code(exceptions);
  return std::string(name(dtype)) + "->" + name(out) + " " + (p ? name(*p) : "policy?") + " " + (e ? name(*e) : "?");
}

}  // namespace

OpDesc block_desc(const ReduceOp& op, uint32_t group, uint32_t lanes) {
  OpDesc d;
  d.dtype = op.dtype;
  d.out = op.out;
  d.policy = op.policy;
  d.exceptions = op.exceptions;
  d.group = group;
  d.lanes = lanes;
  if (auto err = admission_error(d, kMaxWidth)) throw std::invalid_argument("reduction refused: " + *err);
  return d;
}

size_t max_partial_bytes(uint32_t lanes) { return kPartialHeader + size_t(lanes) * kMaxLaneBytes; }

size_t encode_partial(const Accumulator& acc, const ReduceOp& op, PartialScratch sc, std::vector<uint8_t>& msg) {
  const uint32_t n = acc.desc().lanes;
  if (msg.size() < max_partial_bytes(n)) msg.resize(max_partial_bytes(n));  // grown once, never zero-filled again
  return encode_partial(acc, op, sc, msg.data());
}

size_t encode_partial(const Accumulator& acc, const ReduceOp& op, PartialScratch sc, uint8_t* h) {
  const uint32_t n = acc.desc().lanes;
  std::vector<LaneExact>& scratch = sc.lanes;
  std::vector<double>& doubles = sc.doubles;
  scratch.resize(n);
  // Cost: the accumulator's state_as(). The common cases (fp32 sums, integer
  // sums, Kulisch fp32/bf16 lanes) test and copy their lanes as elements, or
  // hand them over as doubles for encode_kulisch_lanes_f64(); the rest build
  // every lane's exact state, then its lane record (3 + the digit window's bytes).
  const Format ef = element_format(op);
  doubles.resize(n);
  const double* view = nullptr;
  StateForm form = acc.state_as(ef, h + kPartialHeader, scratch.data(), doubles.data(), &view);
  if (form == StateForm::None)
    throw std::logic_error(std::string("a ") + name(acc.desc().policy) + " accumulator has no lossless state to send");
  h[0] = uint8_t(op.dtype);
  h[1] = uint8_t(op.out);
  h[2] = uint8_t(op.policy);
  h[3] = uint8_t(op.exceptions);
  h[5] = h[6] = h[7] = 0;
  for (int i = 0; i < 4; ++i) h[8 + i] = uint8_t(n >> (8 * i));
  if (form == StateForm::Elements) {
    h[4] = uint8_t(ef);
    return kPartialHeader + size_t(n) * info(ef).bytes;
  }
  if (form == StateForm::Doubles) {
    h[4] = kPackedLanes;
    if (const size_t len = encode_packed_lanes(view ? view : doubles.data(), n, h + kPartialHeader))
      return kPartialHeader + len;
    // A lane of the view holds a special: the lanes' exact states instead.
    acc.state(scratch.data());
  }
  h[4] = kLaneRecords;
  return kPartialHeader + encode_kulisch_lanes(scratch.data(), n, h + kPartialHeader);
}

void merge_partial(Accumulator& acc, const ReduceOp& op, const uint8_t* msg, size_t len, int from, PartialScratch sc) {
  const uint32_t n = acc.desc().lanes;
  std::vector<LaneExact>& scratch = sc.lanes;
  std::vector<double>& doubles = sc.doubles;
  const std::string who = "the partial from rank " + std::to_string(from);
  if (len < kPartialHeader)
    throw CollectiveError(who + " is " + std::to_string(len) + " bytes, shorter than its header");
  const uint32_t got_n = uint32_t(msg[8]) | uint32_t(msg[9]) << 8 | uint32_t(msg[10]) << 16 | uint32_t(msg[11]) << 24;
  if (msg[0] != uint8_t(op.dtype) || msg[1] != uint8_t(op.out) || msg[2] != uint8_t(op.policy) ||
      msg[3] != uint8_t(op.exceptions) || got_n != n) {
    const auto fd = format_from_code(msg[0]), fo = format_from_code(msg[1]);
    throw CollectiveError(who + " is for a different reduction (" +
                          (fd && fo ? op_text(*fd, *fo, msg[2], msg[3]) : std::string("unknown formats")) + ", " +
                          std::to_string(got_n) + " elements) than this rank's (" +
                          op_text(op.dtype, op.out, uint8_t(op.policy), uint8_t(op.exceptions)) + ", " +
                          std::to_string(n) + " elements): every rank must call the collective with the same op");
  }
  scratch.resize(n);
  const uint8_t* p = msg + kPartialHeader;
  const size_t plen = len - kPartialHeader;
  PartialError e;
  if (msg[4] == kPackedLanes) {
    doubles.resize(n);
    double bound;
    if (!decode_packed_lanes(p, plen, n, unit_exp(op.dtype), doubles.data(), best_kernels(), &bound))
      throw CollectiveError(who + " does not decode: malformed packed lanes");
    if (acc.add_exact_doubles(doubles.data(), scratch.data(), bound)) return;
    throw CollectiveError(who + " holds a value this op's accumulator cannot take exactly");
  }
  if (msg[4] == kLaneRecords) {
    // The common Kulisch partial: every lane a double (decode_kulisch_lanes_f64()).
    doubles.resize(n);
    if (decode_kulisch_lanes_f64(p, plen, n, unit_exp(op.dtype), doubles.data())) {
      if (acc.add_exact_doubles(doubles.data(), scratch.data())) return;
      throw CollectiveError(who + " holds a value this op's accumulator cannot take exactly");
    }
    size_t used = 0;
    e = decode_kulisch_lanes(p, plen, n, scratch.data(), &used);
    if (e == PartialError::None && used != plen)
      throw CollectiveError(who + " has " + std::to_string(plen - used) + " bytes after its lane records");
  } else {
    const Format ef = element_format(op);
    if (msg[4] != uint8_t(ef))
      throw CollectiveError(who + " has payload encoding " + std::to_string(msg[4]) + ", expected 0, 64 or " +
                            std::to_string(uint8_t(ef)));
    if (plen != size_t(n) * info(ef).bytes)
      throw CollectiveError(who + " has " + std::to_string(plen) + " payload bytes for " + std::to_string(n) + " " +
                            name(ef) + " elements");
    // The common cases (fp32 into fp32 sums, int32 into int sums, fp32 or
    // bf16 into Kulisch lanes) add the elements directly: add_elements_exact().
    if (acc.add_elements_exact(ef, p, scratch.data(), &e)) return;
  }
  if (e != PartialError::None) throw CollectiveError(who + " does not decode: " + describe(e));
  if (msg[4] == kLaneRecords && acc.add_exact(scratch.data())) return;
  throw CollectiveError(who + " holds a value this op's accumulator cannot take exactly");
}

}  // namespace prism::coll
