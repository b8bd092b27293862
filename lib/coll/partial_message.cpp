#include "coll/partial_message.hpp"

#include <algorithm>
#include <string>

#include "proto/packed_lanes.hpp"
#include "proto/partial.hpp"

namespace prism::coll {
namespace {

constexpr uint8_t kLaneRecords = 0;
constexpr uint8_t kPackedLanes = 0x40;
constexpr uint8_t kPackedPairs = 0x41;

uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

// Pairs (see partial_message.hpp): the his packed, then a bitmap of the lanes
// with a low part and those low parts packed, `compact` holding n doubles of
// scratch. 0 when a hi is a NaN (a special: no packed form).
size_t encode_pairs(const double* hi, const double* lo, uint32_t n, double* compact, uint8_t* out) {
  const size_t hlen = encode_packed_lanes(hi, n, out + 4);
  if (!hlen) return 0;
  store_u32(out, uint32_t(hlen));
  uint8_t* bits = out + 4 + hlen;
  const uint32_t nbytes = (n + 7) / 8;
  uint32_t m = 0;
  for (uint32_t b = 0; b < nbytes; ++b) {
    uint8_t byte = 0;
    for (uint32_t j = 0; j < 8 && b * 8 + j < n; ++j) {
      const double v = lo[b * 8 + j];
      compact[m] = v;
      const bool nz = v != 0;
      m += nz;
      byte |= uint8_t(nz) << j;
    }
    bits[b] = byte;
  }
  return 4 + hlen + nbytes + encode_packed_lanes(compact, m, bits + nbytes);
}

// The low section of a pairs payload [p, p + len): its count of low parts,
// its bitmap (*bits) and packed lows (*packed, *plen); false when malformed.
bool pairs_low_section(const uint8_t* p, size_t len, uint32_t n, const uint8_t** bits, uint32_t* m,
                       const uint8_t** packed, size_t* plen) {
  if (len < 4) return false;
  const uint32_t hlen = load_u32(p);
  const uint32_t nbytes = (n + 7) / 8;
  if (hlen > len - 4 || len - 4 - hlen < nbytes) return false;
  *bits = p + 4 + hlen;
  uint32_t count = 0;
  for (uint32_t b = 0; b < nbytes; ++b) count += uint32_t(__builtin_popcount((*bits)[b]));
  if (n % 8 && ((*bits)[nbytes - 1] >> (n % 8))) return false;  // bits past the last lane
  *m = count;
  *packed = *bits + nbytes;
  *plen = len - 4 - hlen - nbytes;
  return true;
}

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

// Lane records take at most kMaxLaneBytes a lane; packed lanes at most 8
// bytes a lane plus headers, pairs twice that plus a bit: the slack covers
// short blocks and the packed encoder's 16 bytes of room.
size_t max_partial_bytes(uint32_t lanes) { return kPartialHeader + size_t(lanes) * kMaxLaneBytes + 64; }

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
  const double* low = nullptr;
  StateForm form = acc.state_as(ef, h + kPartialHeader, scratch.data(), doubles.data(), &view, &low);
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
  if (form == StateForm::Pairs) {
    h[4] = kPackedPairs;
    if (const size_t len = encode_pairs(view, low, n, doubles.data(), h + kPartialHeader)) return kPartialHeader + len;
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
  if (msg[4] == kPackedPairs) {
    // Everything is decoded and checked before the accumulator changes: the
    // his into doubles[0, n), the los into doubles[n, n + m).
    const uint8_t *bits, *packed;
    uint32_t m;
    size_t lplen;
    const int unit = unit_exp(op.dtype);
    double lbound, hbound;
    if (!pairs_low_section(p, plen, n, &bits, &m, &packed, &lplen))
      throw CollectiveError(who + " does not decode: malformed packed pairs");
    doubles.resize(size_t(n) + m + 1);
    double* low = doubles.data() + n;
    if (!decode_packed_lanes(packed, lplen, m, unit, low, best_kernels(), &lbound) ||
        !decode_packed_lanes(p + 4, load_u32(p), n, unit, doubles.data(), best_kernels(), &hbound))
      throw CollectiveError(who + " does not decode: malformed packed pairs");
    bool zero = false;
    for (uint32_t j = 0; j < m; ++j) zero |= low[j] == 0;
    if (zero) throw CollectiveError(who + " does not decode: a zero low part in packed pairs");
    if (!acc.add_exact_doubles(doubles.data(), scratch.data(), hbound))
      throw CollectiveError(who + " holds a value this op's accumulator cannot take exactly");
    // The los spread to their lanes: -0 where a lane has none (-0 + x == x
    // for every x, -0 too). low[m] is readable: the loop reads one ahead.
    low[m] = -0.0;
    uint32_t j = 0;
    for (uint32_t b = 0; b < (n + 7) / 8; ++b) {
      const uint8_t byte = bits[b];
      double* o = doubles.data() + size_t(b) * 8;
      const uint32_t lanes = std::min<uint32_t>(8, n - b * 8);
      for (uint32_t k = 0; k < lanes; ++k) {
        const uint32_t on = byte >> k & 1;
        o[k] = on ? low[j] : -0.0;
        j += on;
      }
    }
    if (acc.add_exact_doubles(doubles.data(), scratch.data(), lbound)) return;
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
      throw CollectiveError(who + " has payload encoding " + std::to_string(msg[4]) + ", expected 0, 64, 65 or " +
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
