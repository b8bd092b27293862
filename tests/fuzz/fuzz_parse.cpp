// libFuzzer target: wire::parse on arbitrary bytes (docs/PROTOCOL.md).
//
// For every input, with check_partial true and false:
//  - parse() must return a known refusal and never read outside the frame
//    (ASan), and the two modes must agree: check_partial only adds the lane
//    record walk of encoding 3 (PAYLOAD_LENGTH / BAD_PARTIAL), nothing else;
//  - an OK result's payload and sideband lie inside the frame and every byte
//    of them is read; lengths match count and encoding;
//  - encoding 3: the fragment decodes into a vector of exactly chunk_lanes
//    lanes (ASan catches a write past it); when parse() walked the records
//    the decode must succeed and re-encoding the lanes gives back the payload
//    bytes exactly (records are canonical);
//  - wire::truncated (the switch's OVERSIZE drop) never reads outside the
//    frame, and a frame it calls truncated never parses OK: parse() refuses
//    it as IP_BAD_LENGTH, or earlier; wire::clamp_to_frame makes it no
//    longer truncated, and its head parses to a known refusal (ASan: no read
//    outside it);
//  - the parsed header and body, rebuilt with wire::build (no VLAN, no IP
//    options, a fresh UDP checksum), parse OK again with identical header
//    fields, endpoints, fragment header, payload and sideband.
// Any violation traps (FUZZ_CHECK names it on stderr first).
#include <cstring>
#include <vector>

#include "fuzz_check.hpp"
#include "proto/fragment.hpp"
#include "proto/packet.hpp"
#include "proto/partial.hpp"
#include "proto/steer.hpp"

namespace {

using namespace prism;  // NOLINT
using wire::Parsed;
using wire::Refusal;

constexpr uint16_t kPort = wire::kDefaultPort;

bool same_header(const wire::Header& a, const wire::Header& b) {
  return a.magic == b.magic && a.version == b.version && a.kind == b.kind && a.job == b.job && a.op == b.op &&
         a.chunk == b.chunk && a.sender == b.sender && a.group == b.group && a.terms == b.terms && a.count == b.count &&
         a.dtype == b.dtype && a.out_dtype == b.out_dtype && a.policy == b.policy && a.encoding == b.encoding &&
         a.transport == b.transport && a.exceptions == b.exceptions && a.flags == b.flags && a.status == b.status;
}

bool same_endpoint(const wire::Endpoint& a, const wire::Endpoint& b) {
  return a.mac == b.mac && a.ip == b.ip && a.port == b.port;
}

bool inside(const uint8_t* p, size_t n, const uint8_t* lo, size_t len) {
  return p >= lo && p <= lo + len && n <= size_t(lo + len - p);
}

// Everything parse() promised about an OK result `p` of `frame`.
void check_ok(const uint8_t* frame, size_t size, const Parsed& p, bool check_partial) {
  const wire::Header& h = p.h;
  (void)wire::name(h.kind);
  FUZZ_CHECK(h.magic == wire::kMagic && h.version == wire::kVersion);
  FUZZ_CHECK(p.dst.port == kPort);
  FUZZ_CHECK((h.flags & ~wire::hflag::ALL) == 0);  // flags bits 3-7 must be 0
  if (h.kind == wire::Kind::NACK) {                // reason 1..12, count 0; terms 0 and no body but for 8
    FUZZ_CHECK(h.status >= 1 && h.status <= wire::kNackReasonCount && h.count == 0 && p.sideband == nullptr);
    if (h.status == uint8_t(wire::NackReason::OP_ABANDONED)) {  // terms <= group, the bitmap or nothing
      FUZZ_CHECK(h.terms <= h.group);
      FUZZ_CHECK(p.payload_len == 0 || p.payload_len == wire::abandoned_bitmap_bytes(h.group));
      FUZZ_CHECK(p.payload_len == 0 || inside(p.payload, p.payload_len, frame, size));
      fuzz::touch(p.payload, p.payload_len);
    } else {
      FUZZ_CHECK(h.terms == 0 && p.payload_len == 0);
    }
    (void)wire::name(wire::NackReason(h.status));
    return;
  }
  if (wire::is_job_kind(h.kind)) {  // sessions and pools: no descriptor, flags or count
    FUZZ_CHECK(uint8_t(h.dtype) == 0 && uint8_t(h.out_dtype) == 0 && uint8_t(h.policy) == 0 &&
               uint8_t(h.encoding) == 0 && uint8_t(h.transport) == 0 && uint8_t(h.exceptions) == 0);
    FUZZ_CHECK(h.flags == 0 && h.count == 0 && (h.group >= 1 || h.kind == wire::Kind::LEAVE) && p.sideband == nullptr);
    if (h.kind == wire::Kind::JOIN || h.kind == wire::Kind::ALLOC || h.kind == wire::Kind::LEAVE) {
      FUZZ_CHECK(h.terms == 0 && h.status == 0 && p.payload_len == 0);
    } else if (h.kind == wire::Kind::ALLOCATED) {  // terms: shards; 8 bytes of quota and idle timeout
      FUZZ_CHECK(h.terms >= 1 && h.status == 0 && p.payload_len == wire::kAllocatedBody);
      FUZZ_CHECK(inside(p.payload, p.payload_len, frame, size) && wire::allocated_body(p));
    } else if (h.kind == wire::Kind::LEFT) {  // terms: the ranks still bound
      FUZZ_CHECK(h.terms <= h.group && h.status == 0 && p.payload_len == 0);
    } else {  // JOINED: terms <= group, COMPLETE or nothing, the bitmap or nothing
      FUZZ_CHECK(h.terms <= h.group && (h.status & ~wire::jstatus::COMPLETE) == 0);
      FUZZ_CHECK(p.payload_len == 0 || p.payload_len == wire::abandoned_bitmap_bytes(h.group));
      FUZZ_CHECK(p.payload_len == 0 || inside(p.payload, p.payload_len, frame, size));
      fuzz::touch(p.payload, p.payload_len);
    }
    return;
  }
  (void)wire::name(h.encoding);
  if (h.kind == wire::Kind::QUERY || h.kind == wire::Kind::STATUS) {  // the CONTRIB's descriptor, no elements
    FUZZ_CHECK(h.encoding == wire::Encoding::DTYPE && h.flags == 0 && h.count == 0 && h.group >= 1 &&
               p.sideband == nullptr);
    if (h.kind == wire::Kind::QUERY) {  // terms 1, status 0, no body
      FUZZ_CHECK(h.terms == 1 && h.status == 0 && p.payload_len == 0);
    } else {  // terms received <= group, HELD or MISSING, the bitmap or nothing
      FUZZ_CHECK(h.terms <= h.group && h.status <= wire::qstatus::HELD);
      FUZZ_CHECK(p.payload_len == 0 || p.payload_len == wire::abandoned_bitmap_bytes(h.group));
      FUZZ_CHECK(p.payload_len == 0 || inside(p.payload, p.payload_len, frame, size));
      fuzz::touch(p.payload, p.payload_len);
    }
    return;
  }
  FUZZ_CHECK(h.count >= 1 && h.group >= 1 && h.terms >= 1 && h.terms <= h.group);
  // PROTOCOL.md's table of kinds: encoding, terms and status.
  switch (h.kind) {
    case wire::Kind::CONTRIB:
      FUZZ_CHECK(h.encoding == wire::Encoding::DTYPE && h.terms == 1 && h.status == 0);
      FUZZ_CHECK(!(h.flags & wire::hflag::SIDEBAND));
      break;
    case wire::Kind::PARTIAL: FUZZ_CHECK(h.encoding != wire::Encoding::DTYPE && h.status == 0); break;
    case wire::Kind::RESULT:
      FUZZ_CHECK(h.encoding == wire::Encoding::OUT_DTYPE && h.terms == h.group && (h.status & ~7) == 0);
      break;
    default: FUZZ_CHECK(false);
  }
  FUZZ_CHECK(p.payload != nullptr && inside(p.payload, p.payload_len, frame, size));
  fuzz::touch(p.payload, p.payload_len);
  if (h.encoding != wire::Encoding::KULISCH) {
    FUZZ_CHECK(p.payload_len == wire::element_bytes(h));
    FUZZ_CHECK(p.chunk_lanes == h.count);
    if (h.flags & wire::hflag::SIDEBAND) {
      FUZZ_CHECK(p.sideband == p.payload + p.payload_len && inside(p.sideband, h.count, frame, size));
      fuzz::touch(p.sideband, h.count);
      for (size_t i = 0; i < h.count; ++i) FUZZ_CHECK((p.sideband[i] & ~7) == 0);  // status bits only
    } else {
      FUZZ_CHECK(p.sideband == nullptr);
    }
    return;
  }
  // Encoding 3: a Kulisch fragment.
  FUZZ_CHECK(h.kind == wire::Kind::PARTIAL && !(h.flags & wire::hflag::SIDEBAND) && p.sideband == nullptr);
  FUZZ_CHECK(p.chunk_lanes >= 1 && uint32_t(p.first_lane) + h.count <= p.chunk_lanes);
  FUZZ_CHECK(p.payload - wire::kFragmentHeader >= frame);
  std::vector<LaneExact> lanes(p.chunk_lanes);
  const PartialError e = wire::decode_fragment(p, lanes.data());
  (void)describe(e);
  if (check_partial) FUZZ_CHECK(e == PartialError::None);
  if (e != PartialError::None) return;
  std::vector<uint8_t> enc(size_t(h.count) * kMaxLaneBytes);
  const size_t n = encode_kulisch_lanes(lanes.data() + p.first_lane, h.count, enc.data());
  if (check_partial) {
    FUZZ_CHECK(n == p.payload_len);  // records are canonical and fill the payload
  } else {
    FUZZ_CHECK(n <= p.payload_len);  // without the walk, trailing bytes are not refused
  }
  FUZZ_CHECK(std::memcmp(enc.data(), p.payload, n) == 0);
}

// Rebuilds `p` with wire::build and parses it again: the same packet must come back.
void check_rebuild(const Parsed& p, bool check_partial) {
  const wire::Header& h = p.h;
  const uint8_t* body = nullptr;
  size_t body_len = 0;
  if (h.kind == wire::Kind::NACK || h.kind == wire::Kind::QUERY || h.kind == wire::Kind::STATUS ||
      wire::is_job_kind(h.kind)) {
    body = p.payload;  // OP_ABANDONED's, STATUS's or JOINED's bitmap, ALLOCATED's body, or nothing
    body_len = p.payload_len;
  } else {
    if (h.encoding == wire::Encoding::KULISCH) {
      body = p.payload - wire::kFragmentHeader;
      body_len = wire::kFragmentHeader + p.payload_len;
    } else {
      body = p.payload;
      body_len = p.payload_len + (p.sideband ? h.count : 0);
    }
  }
  static std::vector<uint8_t> buf(size_t(1) << 17);
  const size_t len = wire::build(buf.data(), buf.size(), p.src, p.dst, h, {body, body_len}, 0x1234);
  FUZZ_CHECK(len == wire::kFrameOverhead + body_len);
  Parsed q;
  const Refusal r = wire::parse({buf.data(), len}, kPort, &q, check_partial);
  if (r != Refusal::OK) std::fprintf(stderr, "rebuilt frame refused: %s\n", wire::name(r));
  FUZZ_CHECK(r == Refusal::OK);
  FUZZ_CHECK(same_header(p.h, q.h));
  FUZZ_CHECK(same_endpoint(p.src, q.src) && same_endpoint(p.dst, q.dst) && q.vlan == 0);
  FUZZ_CHECK(q.payload_len == p.payload_len && q.first_lane == p.first_lane && q.chunk_lanes == p.chunk_lanes);
  FUZZ_CHECK(p.payload_len == 0 || std::memcmp(q.payload, p.payload, p.payload_len) == 0);
  FUZZ_CHECK((q.sideband == nullptr) == (p.sideband == nullptr));
  if (p.sideband) FUZZ_CHECK(std::memcmp(q.sideband, p.sideband, h.count) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Parsed a, b;
  const Refusal ra = wire::parse({data, size}, kPort, &a, true);
  const Refusal rb = wire::parse({data, size}, kPort, &b, false);
  FUZZ_CHECK(size_t(ra) < size_t(Refusal::kCount) && size_t(rb) < size_t(Refusal::kCount));
  FUZZ_CHECK(std::strcmp(wire::name(ra), "?") != 0);
  // The record walk is parse()'s last step: without it the verdict can only turn OK.
  if (rb != Refusal::OK) FUZZ_CHECK(ra == rb);
  if (ra != rb)
    FUZZ_CHECK(rb == Refusal::OK && b.h.encoding == wire::Encoding::KULISCH &&
               (ra == Refusal::PAYLOAD_LENGTH || ra == Refusal::BAD_PARTIAL));
  if (wire::truncated({data, size})) {
    FUZZ_CHECK(ra == Refusal::IP_BAD_LENGTH || ra == Refusal::SHORT_FRAME || ra == Refusal::IP_BAD_HEADER);
    // The switch's reading of an oversize frame's head: clamped, it is no longer truncated, and parses
    // (sums unchecked) to a known refusal without reading outside the frame.
    std::vector<uint8_t> c(data, data + size);
    if (wire::clamp_to_frame(c)) {
      FUZZ_CHECK(!wire::truncated(c));
      Parsed pc;
      FUZZ_CHECK(size_t(wire::parse(c, kPort, &pc, false, true, true)) < size_t(Refusal::kCount));
    }
  }
  if (ra == Refusal::OK) {
    FUZZ_CHECK(same_header(a.h, b.h) && a.payload == b.payload && a.payload_len == b.payload_len &&
               a.sideband == b.sideband && a.first_lane == b.first_lane && a.chunk_lanes == b.chunk_lanes &&
               a.vlan == b.vlan && same_endpoint(a.src, b.src) && same_endpoint(a.dst, b.dst));
    check_ok(data, size, a, true);
    check_rebuild(a, true);
  }
  if (rb == Refusal::OK) {
    check_ok(data, size, b, false);
    check_rebuild(b, false);
  }
  return 0;
}
