#include "proto/packet.hpp"

#include <bit>
#include <cstring>

#include "arith/kernels.hpp"
#include "proto/partial.hpp"
#include "proto/steer.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace prism::wire {
namespace {

inline uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
inline uint32_t be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
inline void put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
inline void put32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24);
  p[1] = uint8_t(v >> 16);
  p[2] = uint8_t(v >> 8);
  p[3] = uint8_t(v);
}

// Two steps always suffice: the first leaves at most 0x1FFFE, the second at most 0xFFFF.
uint16_t fold(uint32_t acc) {
  acc = (acc & 0xFFFF) + (acc >> 16);
  return uint16_t((acc & 0xFFFF) + (acc >> 16));
}
// `acc` plus the big-endian 16-bit words of p[0, len) (RFC 1071), unfolded.
uint32_t sum16(const uint8_t* p, size_t len, uint32_t acc) { return acc + ones_sum(p, len); }

}  // namespace

namespace {

// 32-bit little-endian words of p[0, n) added into 64 bits; *done: bytes taken.
uint64_t sum32_portable(const uint8_t* p, size_t n, size_t* done) {
  uint64_t s0 = 0, s1 = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint32_t a, b;
    std::memcpy(&a, p + i, 4);
    std::memcpy(&b, p + i + 4, 4);
    s0 += a;
    s1 += b;
  }
  *done = i;
  return s0 + s1;
}

#if defined(__x86_64__)
// The same sum, from 16-bit little-endian words (congruent modulo 0xFFFF, which
// is all the fold keeps), 128 bytes a step. vpmaddwd adds word pairs into
// 32-bit lanes as signed numbers, so each word is biased by -0x8000 (xor)
// and the bias is added back at the end. A pair moves a lane by less than
// 2^16, two pairs by less than 2^17: in a block of 2^12 steps each of the
// two accumulators stays within 2^29 and their sum within 2^30, so they are
// added as 32-bit lanes and widened into 64 bits once a block.
__attribute__((target("avx2"))) inline __m256i word_pairs(const uint8_t* p) {
  const __m256i bias = _mm256_set1_epi16(int16_t(0x8000)), one = _mm256_set1_epi16(1);
  return _mm256_madd_epi16(_mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), bias), one);
}
__attribute__((target("avx2"))) uint64_t sum32_avx2(const uint8_t* p, size_t n, size_t* done) {
  int64_t total = 0;
  size_t i = 0;
  while (i + 32 <= n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
    const size_t block_end = std::min(n, i + (size_t(1) << 19));  // 2^12 steps of 128 bytes
    for (; i + 128 <= block_end; i += 128) {
      a0 = _mm256_add_epi32(a0, _mm256_add_epi32(word_pairs(p + i), word_pairs(p + i + 32)));
      a1 = _mm256_add_epi32(a1, _mm256_add_epi32(word_pairs(p + i + 64), word_pairs(p + i + 96)));
    }
    for (; i + 32 <= block_end; i += 32) a0 = _mm256_add_epi32(a0, word_pairs(p + i));  // at most 3 more steps
    const __m256i a = _mm256_add_epi32(a0, a1);
    const __m256i w = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(a)),
                                       _mm256_cvtepi32_epi64(_mm256_extracti128_si256(a, 1)));
    __m128i s = _mm_add_epi64(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    s = _mm_add_epi64(s, _mm_unpackhi_epi64(s, s));
    total += _mm_cvtsi128_si64(s);
  }
  const uint64_t biased = uint64_t(total) + uint64_t(i / 2) * 0x8000;  // i/2 words, each 0x8000 below its value
  size_t rest = 0;
  const uint64_t tail = sum32_portable(p + i, n - i, &rest);
  *done = i + rest;
  return biased + tail;
}
#endif

uint16_t finish_sum(const uint8_t* p, size_t len, size_t i, uint64_t s) {
  if (i + 4 <= len) {
    uint32_t a;
    std::memcpy(&a, p + i, 4);
    s += a;
    i += 4;
  }
  if (i + 2 <= len) {
    uint16_t a;
    std::memcpy(&a, p + i, 2);
    s += a;
    i += 2;
  }
  if (i < len) s += p[i];  // the odd last byte is the high byte of a zero-padded word
  // 64 -> 33 -> 17 -> 16 bits, in fixed steps (no loop to predict).
  s = (s & 0xFFFFFFFF) + (s >> 32);
  s = (s & 0xFFFF) + (s >> 16);
  s = (s & 0xFFFF) + (s >> 16);
  s = (s & 0xFFFF) + (s >> 16);
  return uint16_t(uint16_t(s) << 8 | uint16_t(s) >> 8);
}

// An IPv4 header (`len` a multiple of 4, at most 60) whose checksum is right:
// its words' one's-complement sum is 0xFFFF, in either byte order. Inline, as
// 32-bit words into 64 bits: the general sum's dispatch costs more than a
// 20-byte header does.
inline bool header_sums_to_ones(const uint8_t* p, size_t len) {
  uint64_t s = 0;
  for (size_t i = 0; i < len; i += 4) {
    uint32_t w;
    std::memcpy(&w, p + i, 4);
    s += w;
  }
  s = (s & 0xFFFFFFFF) + (s >> 32);
  s = (s & 0xFFFF) + (s >> 16);
  s = (s & 0xFFFF) + (s >> 16);
  s = (s & 0xFFFF) + (s >> 16);
  return s == 0xFFFF;
}

}  // namespace

// The one's-complement sum does not depend on the order of its words and
// commutes with swapping bytes (RFC 1071 2.B): add 32-bit native words into
// 64 bits (no carry is lost below 2^32 words), fold, swap once.
uint16_t ones_sum_portable(const uint8_t* p, size_t len) {
  static_assert(std::endian::native == std::endian::little, "ones_sum reads little-endian words");
  size_t i = 0;
  const uint64_t s = sum32_portable(p, len, &i);
  return finish_sum(p, len, i, s);
}

uint16_t ones_sum(const uint8_t* p, size_t len) {
#if defined(__x86_64__)
  static const bool avx2 = std::strcmp(best_kernels().name, "avx2") == 0;  // PRISM_KERNELS=portable turns it off
  if (avx2 && len >= 64) {  // below that (IPv4 headers) the vector set-up costs more than it saves
    size_t i = 0;
    const uint64_t s = sum32_avx2(p, len, &i);
    return finish_sum(p, len, i, s);
  }
#endif
  return ones_sum_portable(p, len);
}

uint16_t ipv4_checksum(const uint8_t* ip, size_t len) { return uint16_t(~fold(sum16(ip, len, 0))); }

uint16_t udp_checksum(uint32_t src_ip, uint32_t dst_ip, const uint8_t* udp, size_t udp_len) {
  uint32_t acc = (src_ip >> 16) + (src_ip & 0xFFFF) + (dst_ip >> 16) + (dst_ip & 0xFFFF) + 17 + uint32_t(udp_len);
  const uint16_t c = uint16_t(~fold(sum16(udp, udp_len, acc)));
  return c == 0 ? 0xFFFF : c;
}

void put_header(const Header& h, uint8_t* p) {
  put16(p + off::magic, h.magic);
  p[off::version] = h.version;
  p[off::kind] = uint8_t(h.kind);
  put32(p + off::job, h.job);
  put32(p + off::op, h.op);
  put32(p + off::chunk, h.chunk);
  put16(p + off::sender, h.sender);
  put16(p + off::group, h.group);
  put16(p + off::terms, h.terms);
  put16(p + off::count, h.count);
  p[off::dtype] = uint8_t(h.dtype);
  p[off::out_dtype] = uint8_t(h.out_dtype);
  p[off::policy] = uint8_t(h.policy);
  p[off::encoding] = uint8_t(h.encoding);
  p[off::transport] = uint8_t(h.transport);
  p[off::exceptions] = uint8_t(h.exceptions);
  p[off::flags] = h.flags;
  p[off::status] = h.status;
}

namespace {
// Every field parse() fills, emptied: in place, field by field (a temporary's
// rep-stos and copy cost more than the rest of parse).
inline void clear(Parsed& r) {
  r.src = Endpoint{};
  r.dst = Endpoint{};
  r.vlan = 0;
  r.partial_checksum = false;
  r.h = Header{};
  r.payload = nullptr;
  r.payload_len = 0;
  r.sideband = nullptr;
  r.first_lane = r.chunk_lanes = 0;
}

// The job kinds (sessions and pools: proto/steer.hpp's is_job_kind) have no
// descriptor: a session or a pool is the job's, not an op's. Their codes,
// flags and count are 0; terms, status and body by kind (PROTOCOL.md).
inline Refusal parse_job_kind(const uint8_t* p, const uint8_t* body, size_t blen, Parsed& r) {
  const Header& h = r.h;
  if (p[off::dtype]) return Refusal::BAD_DTYPE;
  if (p[off::out_dtype]) return Refusal::BAD_OUT_DTYPE;
  if (p[off::policy]) return Refusal::BAD_POLICY;
  if (p[off::encoding]) return Refusal::BAD_ENCODING;
  if (p[off::transport]) return Refusal::BAD_TRANSPORT;
  if (p[off::exceptions]) return Refusal::BAD_EXCEPTIONS;
  if (h.flags) return Refusal::BAD_FLAGS;
  if (h.group == 0 && h.kind != Kind::LEAVE) return Refusal::BAD_GROUP;  // LEAVE names no group
  if (h.count != 0) return Refusal::BAD_COUNT;
  bool terms_ok = h.terms == 0;  // JOIN, ALLOC, LEAVE
  uint8_t status_bits = 0;
  size_t body_len = 0;  // the one body length allowed besides none (0: none)
  bool body_required = false;
  switch (h.kind) {
    case Kind::JOINED:  // ranks joined, COMPLETE, and the bitmap of the ranks joined (or no body)
      terms_ok = h.terms <= h.group;
      status_bits = jstatus::COMPLETE;
      body_len = abandoned_bitmap_bytes(h.group);
      break;
    case Kind::ALLOCATED:  // terms: the switch's shard count; slot quota and idle timeout
      terms_ok = h.terms >= 1;
      body_len = kAllocatedBody;
      body_required = true;
      break;
    case Kind::LEFT:
      terms_ok = h.terms <= h.group;
      break;  // ranks still bound
    // No body, or as many bytes (reserved: zeros) as ALLOCATED's body, so
    // that the request is as large as its answer: a pool sends a source it
    // has not bound no more bytes than it sent (docs/SECURITY.md).
    case Kind::ALLOC: body_len = kAllocatedBody; break;
    case Kind::JOIN:
    case Kind::LEAVE: break;
    case Kind::CONTRIB:
    case Kind::PARTIAL:
    case Kind::RESULT:
    case Kind::NACK:
    case Kind::QUERY:
    case Kind::STATUS: return Refusal::BAD_KIND;  // not a job kind: never called for these
  }
  if (!terms_ok) return Refusal::BAD_TERMS;
  if (h.status & ~status_bits) return Refusal::BAD_STATUS;
  if (blen != 0 ? !(body_len && blen == body_len) : body_required) return Refusal::PAYLOAD_LENGTH;
  r.payload = blen ? body : nullptr;
  r.payload_len = blen;
  return Refusal::OK;
}

// The PRISM header and body, from the UDP payload on: shared by parse() (a
// whole frame) and parse_message() (a datagram a socket received).
inline Refusal parse_prism(const uint8_t* p, size_t plen, Parsed& r, bool check_partial) {
  if (plen < kHeaderSize) return Refusal::SHORT_HEADER;
  Header& h = r.h;
  // Every field is read before any is judged, so a refused packet's header
  // can still be echoed (a NACK says which job, op and chunk it refused).
  h.magic = be16(p + off::magic);
  h.version = p[off::version];
  h.kind = Kind(p[off::kind]);
  h.job = be32(p + off::job);
  h.op = be32(p + off::op);
  h.chunk = be32(p + off::chunk);
  h.sender = be16(p + off::sender);
  h.group = be16(p + off::group);
  h.terms = be16(p + off::terms);
  h.count = be16(p + off::count);
  h.dtype = Format(p[off::dtype]);
  h.out_dtype = Format(p[off::out_dtype]);
  h.policy = Policy(p[off::policy]);
  h.encoding = Encoding(p[off::encoding]);
  h.transport = PartialTransport(p[off::transport]);
  h.exceptions = Exceptions(p[off::exceptions]);
  h.flags = p[off::flags];
  h.status = p[off::status];
  if (h.magic != kMagic) return Refusal::BAD_MAGIC;
  if (h.version != kVersion) return Refusal::BAD_VERSION;
  if (p[off::kind] < 1 || p[off::kind] > kKindCount) return Refusal::BAD_KIND;
  const uint8_t* body = p + kHeaderSize;
  const size_t blen = plen - kHeaderSize;

  if (h.kind == Kind::NACK) {
    // A NACK echoes whatever it refused: its descriptor codes are not checked.
    if (h.status < 1 || h.status > kNackReasonCount) return Refusal::BAD_NACK_REASON;
    if (h.flags & ~hflag::ALL) return Refusal::BAD_FLAGS;
    // OP_ABANDONED alone carries something: the contributions that had
    // arrived (terms) and, optionally, the bitmap of members that had not.
    const bool abandoned = h.status == uint8_t(NackReason::OP_ABANDONED);
    if (abandoned ? h.terms > h.group : h.terms != 0) return Refusal::BAD_TERMS;
    if (h.count != 0) return Refusal::BAD_COUNT;
    if (blen != 0 && !(abandoned && blen == abandoned_bitmap_bytes(h.group))) return Refusal::PAYLOAD_LENGTH;
    r.payload = blen ? body : nullptr;
    r.payload_len = blen;
    return Refusal::OK;
  }

  if (is_job_kind(h.kind)) return parse_job_kind(p, body, blen, r);

  const auto dt = format_from_code(p[off::dtype]);
  if (!dt) return Refusal::BAD_DTYPE;
  h.dtype = *dt;
  const auto ot = format_from_code(p[off::out_dtype]);
  if (!ot) return Refusal::BAD_OUT_DTYPE;
  h.out_dtype = *ot;
  const auto pol = policy_from_code(p[off::policy]);
  if (!pol) return Refusal::BAD_POLICY;
  h.policy = *pol;
  if (p[off::encoding] < 1 || p[off::encoding] > kEncodingCount) return Refusal::BAD_ENCODING;
  h.encoding = Encoding(p[off::encoding]);
  const auto tr = transport_from_code(p[off::transport]);
  if (!tr) return Refusal::BAD_TRANSPORT;
  h.transport = *tr;
  const auto ex = exceptions_from_code(p[off::exceptions]);
  if (!ex) return Refusal::BAD_EXCEPTIONS;
  h.exceptions = *ex;
  if (h.flags & ~hflag::ALL) return Refusal::BAD_FLAGS;
  if (h.group == 0) return Refusal::BAD_GROUP;
  const uint8_t status_bits = h.kind == Kind::RESULT ? 7 : h.kind == Kind::STATUS ? qstatus::HELD : 0;
  if (h.status & ~status_bits) return Refusal::BAD_STATUS;
  switch (h.kind) {
    case Kind::CONTRIB:
      if (h.encoding != Encoding::DTYPE) return Refusal::BAD_ENCODING;
      if (h.terms != 1) return Refusal::BAD_TERMS;
      if (h.flags & hflag::SIDEBAND) return Refusal::BAD_FLAGS;  // a contribution has no flags to report
      break;
    case Kind::PARTIAL:
      if (h.encoding == Encoding::DTYPE) return Refusal::BAD_ENCODING;
      if (h.terms == 0 || h.terms > h.group) return Refusal::BAD_TERMS;
      break;
    case Kind::RESULT:
      if (h.encoding != Encoding::OUT_DTYPE) return Refusal::BAD_ENCODING;
      if (h.terms != h.group) return Refusal::BAD_TERMS;
      break;
    case Kind::QUERY:
    case Kind::STATUS: {
      // The CONTRIB's header with no elements: its descriptor (encoding 1),
      // no flags. QUERY: terms 1, no body; STATUS: terms received (<= group),
      // no body or the bitmap of the members lacking.
      const bool query = h.kind == Kind::QUERY;
      if (h.encoding != Encoding::DTYPE) return Refusal::BAD_ENCODING;
      if (query ? h.terms != 1 : h.terms > h.group) return Refusal::BAD_TERMS;
      if (h.flags) return Refusal::BAD_FLAGS;
      if (h.count != 0) return Refusal::BAD_COUNT;
      if (blen != 0 && (query || blen != abandoned_bitmap_bytes(h.group))) return Refusal::PAYLOAD_LENGTH;
      r.payload = blen ? body : nullptr;
      r.payload_len = blen;
      return Refusal::OK;
    }
    case Kind::NACK:
    case Kind::JOIN:
    case Kind::JOINED:
    case Kind::ALLOC:
    case Kind::ALLOCATED:
    case Kind::LEAVE:
    case Kind::LEFT: break;  // returned above
  }
  if (h.count == 0) return Refusal::BAD_COUNT;

  if (h.encoding == Encoding::KULISCH) {
    if (h.flags & hflag::SIDEBAND) return Refusal::BAD_FLAGS;  // lane records carry their own sideband
    if (blen < kFragmentHeader) return Refusal::PAYLOAD_LENGTH;
    r.first_lane = be16(body);
    r.chunk_lanes = be16(body + 2);
    if (r.chunk_lanes == 0 || uint32_t(r.first_lane) + h.count > r.chunk_lanes) return Refusal::BAD_FRAGMENT;
    r.payload = body + kFragmentHeader;
    r.payload_len = blen - kFragmentHeader;
    if (check_partial) {
      size_t at2 = 0;
      for (uint32_t i = 0; i < h.count; ++i) {
        LaneExact l;
        size_t used;
        const PartialError e = decode_kulisch_lane(r.payload + at2, r.payload_len - at2, &l, &used);
        if (e == PartialError::Truncated) return Refusal::PAYLOAD_LENGTH;
        if (e != PartialError::None) return Refusal::BAD_PARTIAL;
        at2 += used;
      }
      if (at2 != r.payload_len) return Refusal::PAYLOAD_LENGTH;
    }
  } else {
    const size_t eb = element_bytes(h);
    const size_t sb = (h.flags & hflag::SIDEBAND) ? h.count : 0;
    if (blen != eb + sb) return Refusal::PAYLOAD_LENGTH;
    r.payload = body;
    r.payload_len = eb;
    r.sideband = sb ? body + eb : nullptr;
    for (size_t i = 0; i < sb; ++i)
      if (r.sideband[i] & ~uint8_t(7)) return Refusal::BAD_SIDEBAND;
    r.chunk_lanes = h.count;
  }
  return Refusal::OK;
}
}  // namespace

Refusal parse(std::span<const uint8_t> frame, PortRange port, Parsed* out, bool check_partial, bool sums_verified,
              bool kernel_link) {
  const uint8_t* f = frame.data();
  const size_t n = frame.size();
  // Fields are filled in as they are validated, so a refused packet still says
  // how far it got (its source, once IPv4 and UDP checked out: for a NACK).
  Parsed& r = *out;
  clear(r);
  if (n < kEthSize + kIpv4MinSize + kUdpSize) return Refusal::SHORT_FRAME;
  std::memcpy(r.dst.mac.data(), f, 6);
  std::memcpy(r.src.mac.data(), f + 6, 6);
  size_t at = 12;
  uint16_t ethertype = be16(f + at);
  if (ethertype == 0x8100) {
    r.vlan = be16(f + at + 2) & 0x0FFF;
    at += kVlanSize;
    ethertype = be16(f + at);
  }
  at += 2;
  if (ethertype != 0x0800) return Refusal::NOT_IPV4;
  if (n < at + kIpv4MinSize + kUdpSize) return Refusal::SHORT_FRAME;
  const uint8_t* ip = f + at;
  const size_t ihl = size_t(ip[0] & 0x0F) * 4;
  if ((ip[0] >> 4) != 4 || ihl < kIpv4MinSize) return Refusal::IP_BAD_HEADER;
  const size_t total = be16(ip + 2);
  if (total < ihl + kUdpSize || at + total > n) return Refusal::IP_BAD_LENGTH;
  if (!sums_verified && !header_sums_to_ones(ip, ihl)) return Refusal::IP_BAD_CHECKSUM;
  if (be16(ip + 6) & 0x3FFF) return Refusal::IP_FRAGMENT;
  if (ip[9] != 17) return Refusal::NOT_UDP;
  r.src.ip = be32(ip + 12);
  r.dst.ip = be32(ip + 16);
  const uint8_t* udp = ip + ihl;
  const size_t udp_len = be16(udp + 4);
  if (udp_len != total - ihl) return Refusal::UDP_BAD_LENGTH;
  const uint32_t pseudo =
      (r.src.ip >> 16) + (r.src.ip & 0xFFFF) + (r.dst.ip >> 16) + (r.dst.ip & 0xFFFF) + 17 + uint32_t(udp_len);
  // 0 is no checksum whatever the device said: some NICs report such a frame L4 GOOD (review F21).
  r.no_checksum = be16(udp + 6) == 0;
  if (!sums_verified && !r.no_checksum && fold(sum16(udp, udp_len, pseudo)) != 0xFFFF) {
    // Left to an offload by a sender on this host: the field is the pseudo-header's folded sum.
    if (!kernel_link || be16(udp + 6) != fold(pseudo)) return Refusal::UDP_BAD_CHECKSUM;
    r.partial_checksum = true;
  }
  r.src.port = be16(udp);
  r.dst.port = be16(udp + 2);
  if (!port.has(r.dst.port)) return Refusal::WRONG_PORT;
  return parse_prism(udp + kUdpSize, udp_len - kUdpSize, r, check_partial);
}

bool truncated(std::span<const uint8_t> frame) {
  const uint8_t* f = frame.data();
  const size_t n = frame.size();
  size_t at = 12;
  if (n < at + 2) return false;
  uint16_t ethertype = be16(f + at);
  if (ethertype == 0x8100 && n >= at + kVlanSize + 2) {
    at += kVlanSize;
    ethertype = be16(f + at);
  }
  at += 2;
  if (ethertype != 0x0800 || n < at + 4 || (f[at] >> 4) != 4) return false;
  return at + be16(f + at + 2) > n;
}

bool clamp_to_frame(std::span<uint8_t> frame) {
  if (!truncated(frame)) return false;
  uint8_t* f = frame.data();
  const size_t n = frame.size();
  const size_t at = be16(f + 12) == 0x8100 ? 12 + kVlanSize + 2 : 14;
  const size_t ihl = size_t(f[at] & 0x0F) * 4;
  if (ihl < kIpv4MinSize || n < at + ihl + kUdpSize || f[at + 9] != 17) return false;
  const size_t total = n - at;
  f[at + 2] = uint8_t(total >> 8), f[at + 3] = uint8_t(total);
  f[at + ihl + 4] = uint8_t((total - ihl) >> 8), f[at + ihl + 5] = uint8_t(total - ihl);
  return true;
}

Header session_header(Kind kind, uint32_t job, uint16_t group) {
  Header h;
  h.kind = kind;
  h.job = job;
  h.group = group;
  h.terms = 0;
  h.count = 0;
  h.dtype = h.out_dtype = Format(0);  // no descriptor: a session is the job's
  h.policy = Policy(0);
  h.encoding = Encoding(0);
  h.transport = PartialTransport(0);
  h.exceptions = Exceptions(0);
  return h;
}

Header alloc_header(uint32_t pool, uint32_t nonce, uint16_t asker, uint16_t group) {
  Header h = session_header(Kind::ALLOC, pool, group);
  h.op = nonce;
  h.sender = asker;
  return h;
}

Header allocated_header(uint32_t job, uint32_t nonce, uint32_t pool, uint16_t switch_id, uint16_t group,
                        uint16_t shards) {
  Header h = session_header(Kind::ALLOCATED, job, group);
  h.op = nonce;
  h.chunk = pool;
  h.sender = switch_id;
  h.terms = shards;
  return h;
}

Header leave_header(uint32_t job, uint32_t nonce, uint16_t rank) {
  Header h = session_header(Kind::LEAVE, job, 0);
  h.op = nonce;
  h.sender = rank;
  return h;
}

Header left_header(uint32_t job, uint32_t nonce, uint16_t rank, uint16_t group, uint16_t still_bound) {
  Header h = session_header(Kind::LEFT, job, group);
  h.op = nonce;
  h.sender = rank;
  h.terms = still_bound;
  return h;
}

Header query_header(const Header& contrib) {
  Header h = contrib;
  h.kind = Kind::QUERY;
  h.terms = 1;
  h.count = 0;
  h.encoding = Encoding::DTYPE;
  h.flags = 0;
  h.status = 0;
  return h;
}

Header status_header(const Header& query, uint16_t switch_id, bool held, uint16_t terms) {
  Header h = query;
  h.kind = Kind::STATUS;
  h.sender = switch_id;
  h.terms = terms;
  h.count = 0;
  h.flags = 0;
  h.status = held ? qstatus::HELD : qstatus::MISSING;
  return h;
}

std::array<uint8_t, kAllocatedBody> allocated_body(const AllocatedBody& b) {
  std::array<uint8_t, kAllocatedBody> out{};
  put32(out.data(), b.slot_quota);
  put32(out.data() + 4, b.idle_timeout_ms);
  return out;
}

std::optional<AllocatedBody> allocated_body(const Parsed& p) {
  if (p.h.kind != Kind::ALLOCATED || p.payload_len != kAllocatedBody) return std::nullopt;
  return AllocatedBody{be32(p.payload), be32(p.payload + 4)};
}

Refusal parse_message(std::span<const uint8_t> message, Parsed* out, bool check_partial) {
  Parsed& r = *out;
  clear(r);
  return parse_prism(message.data(), message.size(), r, check_partial);
}

uint32_t body_sum16(std::span<const uint8_t> body) { return fold(sum16(body.data(), body.size(), 0)); }

SharedPart share(const Header& h, size_t body_len, uint32_t body_sum) {
  SharedPart s;
  put_header(h, s.header);
  s.sum = sum16(s.header, kHeaderSize, body_sum);
  s.body_len = body_len;
  return s;
}

HeaderTemplate header_template(const Endpoint& src, const Endpoint& dst) {
  HeaderTemplate t{};
  uint8_t* buf = t.bytes;
  std::memcpy(buf + frame::eth_dst, dst.mac.data(), 6);
  std::memcpy(buf + frame::eth_src, src.mac.data(), 6);
  put16(buf + frame::ethertype, 0x0800);
  buf[frame::ip_version_ihl] = 0x45;
  put16(buf + frame::ip_flags_fragment, 0x4000);  // DF
  buf[frame::ip_ttl] = 64;
  buf[frame::ip_protocol] = 17;  // UDP
  put32(buf + frame::ip_src, src.ip);
  put32(buf + frame::ip_dst, dst.ip);
  put16(buf + frame::udp_src_port, src.port);
  put16(buf + frame::udp_dst_port, dst.port);
  // Both checksums from the fields' 16-bit words, added as numbers.
  const uint32_t ips = (src.ip >> 16) + (src.ip & 0xFFFF) + (dst.ip >> 16) + (dst.ip & 0xFFFF);
  t.ip_sum = 0x4500 + 0x4000 + 0x4011 + ips;
  t.udp_sum = ips + 17 + src.port + dst.port;
  return t;
}

bool put_headers(uint8_t* buf, const HeaderTemplate& t, const SharedPart& s, uint16_t ip_id) {
  const size_t udp_len = kUdpSize + kHeaderSize + s.body_len;
  const size_t ip_len = kIpv4MinSize + udp_len;
  if (ip_len > 0xFFFF) return false;
  static_assert(sizeof t.bytes == frame::header, "the template is every header before PRISM's");
  std::memcpy(buf, t.bytes, sizeof t.bytes);
  put16(buf + frame::ip_total_length, uint16_t(ip_len));
  put16(buf + frame::ip_id, ip_id);
  put16(buf + frame::ip_checksum, uint16_t(~fold(t.ip_sum + uint32_t(ip_len) + ip_id)));
  put16(buf + frame::udp_length, uint16_t(udp_len));
  // The pseudo-header's and the UDP header's length (twice), then the shared
  // header and body; the checksum field itself is zero in the sum.
  const uint32_t acc = t.udp_sum + 2 * uint32_t(udp_len) + (s.sum & 0xFFFF) + (s.sum >> 16);
  const uint16_t c = uint16_t(~fold(acc));
  put16(buf + frame::udp_checksum, c == 0 ? 0xFFFF : c);
  std::memcpy(buf + frame::header, s.header, kHeaderSize);
  return true;
}

bool put_headers(uint8_t* buf, const Endpoint& src, const Endpoint& dst, const SharedPart& s, uint16_t ip_id) {
  return put_headers(buf, header_template(src, dst), s, ip_id);
}

size_t build_headers(uint8_t* buf, size_t cap, const Endpoint& src, const Endpoint& dst, const Header& h,
                     size_t body_len, uint32_t body_sum, uint16_t ip_id) {
  if (kFrameOverhead > cap) return 0;
  return put_headers(buf, src, dst, share(h, body_len, body_sum), ip_id) ? kFrameOverhead : 0;
}

size_t build(uint8_t* buf, size_t cap, const Endpoint& src, const Endpoint& dst, const Header& h,
             std::span<const uint8_t> body, uint16_t ip_id) {
  if (kFrameOverhead + body.size() > cap) return 0;
  const size_t n = build_headers(buf, cap, src, dst, h, body.size(), body_sum16(body), ip_id);
  if (n == 0) return 0;
  if (!body.empty()) std::memcpy(buf + n, body.data(), body.size());
  return n + body.size();
}

}  // namespace prism::wire
