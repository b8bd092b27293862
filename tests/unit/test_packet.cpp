// PRISM frames: build() and parse() against the layout of docs/PROTOCOL.md,
// Internet checksums against an RFC 1071 implementation written here, parse()
// on truncated and mutated frames (it must never read outside the span: run
// under ASan to see it), and Kulisch partial fragments at their worst case
// (fp32 at 65535 ranks) and from real accumulators merged with add_exact.
//
// Independent references in this file: the header bytes and lane records are
// written from PROTOCOL.md's tables, the checksums from RFC 1071, and big lane
// values are assembled byte by byte (not with the library's Wide arithmetic).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "arith/accumulator.hpp"
#include "proto/fragment.hpp"
#include "proto/packet.hpp"
#include "proto/partial.hpp"
#include "proto/steer.hpp"
#include "wire_bytes.hpp"

namespace {

using namespace prism;        // NOLINT
using namespace prism::wire;  // NOLINT
using Bytes = std::vector<uint8_t>;

// ------------------------------------------------------------ references
// RFC 1071: the one's complement of the one's complement sum of 16-bit words
// (an odd byte is padded with a zero byte on the right).
uint16_t rfc1071(const uint8_t* p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; i += 2) s += (uint64_t(p[i]) << 8) | (i + 1 < n ? p[i + 1] : 0);
  while (s > 0xFFFF) s = (s & 0xFFFF) + (s >> 16);
  return uint16_t(~s);
}
uint16_t rfc1071(const Bytes& b) { return rfc1071(b.data(), b.size()); }

// UDP checksum (RFC 768): over the pseudo header and the datagram; a computed 0 is sent as 0xFFFF.
uint16_t ref_udp(uint32_t src, uint32_t dst, const uint8_t* udp, size_t len) {
  Bytes b = {uint8_t(src >> 24),
             uint8_t(src >> 16),
             uint8_t(src >> 8),
             uint8_t(src),
             uint8_t(dst >> 24),
             uint8_t(dst >> 16),
             uint8_t(dst >> 8),
             uint8_t(dst),
             0,
             17,
             uint8_t(len >> 8),
             uint8_t(len)};
  b.insert(b.end(), udp, udp + len);
  const uint16_t c = rfc1071(b);
  return c == 0 ? 0xFFFF : c;
}

uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
uint32_t rd32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
void wr16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); }

// The 32 header bytes as PROTOCOL.md's table lays them out (big-endian).
Bytes doc_header(const Header& h) {
  Bytes b;
  auto u8 = [&](unsigned v) { b.push_back(uint8_t(v)); };
  auto u16 = [&](unsigned v) { u8(v >> 8), u8(v); };
  auto u32 = [&](uint32_t v) { u16(v >> 16), u16(v & 0xFFFF); };
  u16(h.magic), u8(h.version), u8(unsigned(h.kind)), u32(h.job), u32(h.op), u32(h.chunk), u16(h.sender);
  u16(h.group), u16(h.terms), u16(h.count), u8(unsigned(h.dtype)), u8(unsigned(h.out_dtype));
  u8(unsigned(h.policy)), u8(unsigned(h.encoding)), u8(unsigned(h.transport)), u8(unsigned(h.exceptions));
  u8(h.flags), u8(h.status);
  return b;
}

// A lane value as sign + little-endian magnitude bytes (at most 47 bytes).
struct Val {
  bool neg = false;
  Bytes mag;  // little-endian, no zero byte on top
  bool zero() const { return mag.empty(); }
};

Val trim(Val v) {
  while (!v.mag.empty() && v.mag.back() == 0) v.mag.pop_back();
  if (v.mag.empty()) v.neg = false;
  return v;
}

// Two's complement over Wide's 384 bits, assembled byte by byte.
Wide wide_of(const Val& v) {
  uint8_t bytes[48] = {};
  std::copy(v.mag.begin(), v.mag.end(), bytes);
  if (v.neg) {  // negate: invert and add one
    unsigned carry = 1;
    for (uint8_t& b : bytes) {
      const unsigned x = unsigned(uint8_t(~b)) + carry;
      b = uint8_t(x);
      carry = x >> 8;
    }
  }
  Wide w;
  for (int i = 0; i < 48; ++i) w.limb[i / 8] |= uint64_t(bytes[i]) << (8 * (i % 8));
  return w;
}

// A lane record as PROTOCOL.md lays it out: sideband | sign << 7, n, offset, magnitude bytes.
Bytes doc_record(uint8_t side, const Val& v) {
  if (v.zero()) return {side, 0, 0};
  size_t lo = 0;
  while (v.mag[lo] == 0) ++lo;
  Bytes r = {uint8_t(side | (v.neg ? 0x80 : 0)), uint8_t(v.mag.size() - lo), uint8_t(lo)};
  r.insert(r.end(), v.mag.begin() + long(lo), v.mag.end());
  return r;
}

// Multiplies a little-endian magnitude by a small factor, adds a small value.
Bytes mul_add(Bytes m, uint32_t mul, uint32_t add) {
  uint64_t carry = add;
  for (uint8_t& b : m) {
    const uint64_t x = uint64_t(b) * mul + carry;
    b = uint8_t(x);
    carry = x >> 8;
  }
  while (carry) m.push_back(uint8_t(carry)), carry >>= 8;
  return m;
}
Bytes shl_bytes(Bytes m, int bits) {  // m << bits
  Bytes r(size_t(bits / 8), 0);
  const int s = bits % 8;
  unsigned carry = 0;
  for (uint8_t b : m) {
    r.push_back(uint8_t((b << s) | carry));
    carry = s ? b >> (8 - s) : 0;
  }
  if (carry) r.push_back(uint8_t(carry));
  return r;
}
Bytes sub_bytes(Bytes a, const Bytes& b) {  // a - b, a >= b
  int borrow = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    int x = int(a[i]) - (i < b.size() ? b[i] : 0) - borrow;
    borrow = x < 0;
    a[i] = uint8_t(x + (borrow ? 256 : 0));
  }
  return a;
}

// ------------------------------------------------------------ random frames
struct Built {
  Endpoint src, dst;
  Header h;
  Bytes body, payload, sideband;
  uint16_t first_lane = 0, chunk_lanes = 0;
  uint16_t ip_id = 0;
  Bytes frame;
};

Endpoint rand_ep(std::mt19937_64& rng) {
  Endpoint e;
  for (auto& b : e.mac) b = uint8_t(rng());
  e.ip = uint32_t(rng());
  e.port = uint16_t(rng());
  return e;
}

Format rand_format(std::mt19937_64& rng) { return Format(1 + rng() % 9); }

// A random valid lane (side, value): specials, zero, small, huge.
std::pair<uint8_t, Val> rand_lane(std::mt19937_64& rng) {
  const int r = int(rng() % 10);
  static const uint8_t specials[] = {side::NAN_INPUT,     side::POS_INF,
                                     side::NEG_INF,       side::POS_INF | side::NEG_INF,
                                     side::NEG_ZERO_ONLY, side::NAN_INPUT | side::NEG_INF};
  if (r == 0) return {specials[rng() % 6], {}};
  if (r == 1) return {uint8_t(rng() % 2 ? 0 : side::INVALID), {}};
  Val v;
  v.neg = rng() % 2;
  const size_t n = r < 5 ? 1 + rng() % 8 : 1 + rng() % 46;
  v.mag.resize(n);
  for (auto& b : v.mag) b = uint8_t(rng());
  v.mag.back() |= 1;
  if (r == 9) v.mag = shl_bytes(v.mag, int(rng() % ((47 - n) * 8 + 1)));  // trailing zero bytes: offset > 0
  return {uint8_t(r == 8 ? side::OVERFLOW : 0), trim(v)};
}

Built random_built(std::mt19937_64& rng, Kind kind, Encoding enc, bool sideband) {
  Built b;
  b.src = rand_ep(rng);
  b.dst = rand_ep(rng);
  b.ip_id = uint16_t(rng());
  Header& h = b.h;
  h.kind = kind;
  h.job = uint32_t(rng());
  h.op = uint32_t(rng());
  h.chunk = uint32_t(rng());
  h.sender = uint16_t(rng());
  h.group = uint16_t(1 + rng() % 65535);
  h.dtype = rand_format(rng);
  h.out_dtype = rand_format(rng);
  h.policy = Policy(1 + rng() % 3);
  h.encoding = enc;
  h.transport = PartialTransport(1 + rng() % 3);
  h.exceptions = Exceptions(1 + rng() % 2);
  h.flags = uint8_t(rng() % 4);  // RETRANSMIT, LAST_CHUNK
  h.status = 0;
  switch (kind) {
    case Kind::CONTRIB: h.terms = 1; break;
    case Kind::PARTIAL: h.terms = uint16_t(1 + rng() % h.group); break;
    case Kind::RESULT: h.terms = h.group, h.status = uint8_t(rng() % 8); break;
    case Kind::NACK: h.terms = 0, h.status = uint8_t(1 + rng() % 12); break;
    case Kind::JOIN: h.terms = 0; break;
    case Kind::JOINED: h.terms = uint16_t(rng() % (uint32_t(h.group) + 1)), h.status = uint8_t(rng() % 2); break;
    case Kind::ALLOC: h.terms = 0; break;
    case Kind::ALLOCATED: h.terms = uint16_t(1 + rng() % 64); break;  // the switch's shard count
    case Kind::LEAVE: h.terms = 0, h.group = 0; break;                // LEAVE names no group
    case Kind::LEFT: h.terms = uint16_t(rng() % (uint32_t(h.group) + 1)); break;
    case Kind::QUERY: h.terms = 1; break;
    case Kind::STATUS: h.terms = uint16_t(rng() % (uint32_t(h.group) + 1)), h.status = uint8_t(rng() % 2); break;
  }
  if (kind == Kind::JOIN || kind == Kind::JOINED || kind == Kind::ALLOC || kind == Kind::ALLOCATED ||
      kind == Kind::LEAVE || kind == Kind::LEFT) {
    // No descriptor (codes 0), no flags, no count; JOINED may carry the bitmap of the ranks joined.
    h.count = 0;
    h.flags = 0;
    h.dtype = h.out_dtype = Format(0);
    h.policy = Policy(0);
    h.encoding = Encoding(0);
    h.transport = PartialTransport(0);
    h.exceptions = Exceptions(0);
    if (kind == Kind::JOINED && rng() % 2) {
      b.payload.resize((size_t(h.group) + 7) / 8);
      for (auto& x : b.payload) x = uint8_t(rng());
      b.body = b.payload;
    }
    if (kind == Kind::ALLOCATED) {  // slot_quota, idle_timeout_ms: 8 bytes, always
      b.payload.resize(8);
      for (auto& x : b.payload) x = uint8_t(rng());
      b.body = b.payload;
    }
    return b;
  }
  if (kind == Kind::QUERY || kind == Kind::STATUS) {
    // The CONTRIB's descriptor, no elements, no flags; a STATUS may carry the bitmap of the members lacking.
    h.count = 0;
    h.flags = 0;
    if (kind == Kind::STATUS && rng() % 2) {
      b.payload.resize((size_t(h.group) + 7) / 8);
      for (auto& x : b.payload) x = uint8_t(rng());
      b.body = b.payload;
    }
    return b;
  }
  if (kind == Kind::NACK) {
    h.count = 0;
    // OP_ABANDONED: the contributions that arrived, and (or not) a bitmap of ceil(group / 8) bytes.
    if (h.status == uint8_t(NackReason::OP_ABANDONED)) {
      h.terms = uint16_t(rng() % (uint32_t(h.group) + 1));
      if (rng() % 2) {
        b.payload.resize((size_t(h.group) + 7) / 8);
        for (auto& x : b.payload) x = uint8_t(rng());
        b.body = b.payload;
      }
    }
    // A NACK echoes whatever it refused: codes are not checked.
    h.dtype = Format(uint8_t(rng()));
    h.out_dtype = Format(uint8_t(rng()));
    h.policy = Policy(uint8_t(rng()));
    h.encoding = Encoding(uint8_t(rng()));
    h.transport = PartialTransport(uint8_t(rng()));
    h.exceptions = Exceptions(uint8_t(rng()));
    return b;
  }
  if (enc == Encoding::KULISCH) {
    h.count = uint16_t(1 + rng() % 30);
    b.first_lane = uint16_t(rng() % (65536 - h.count));
    b.chunk_lanes = uint16_t(b.first_lane + h.count + (rng() % 2 ? 0 : rng() % (65536 - b.first_lane - h.count)));
    for (int i = 0; i < h.count; ++i) {
      auto [s, v] = rand_lane(rng);
      const Bytes r = doc_record(s, v);
      b.payload.insert(b.payload.end(), r.begin(), r.end());
    }
    b.body = {uint8_t(b.first_lane >> 8), uint8_t(b.first_lane), uint8_t(b.chunk_lanes >> 8), uint8_t(b.chunk_lanes)};
    b.body.insert(b.body.end(), b.payload.begin(), b.payload.end());
    return b;
  }
  const size_t esz = info(enc == Encoding::DTYPE ? h.dtype : h.out_dtype).bytes;
  const size_t max = (1500 - 60) / (esz + (sideband ? 1 : 0));
  h.count = uint16_t(rng() % 4 ? 1 + rng() % max : max);
  b.chunk_lanes = h.count;
  b.payload.resize(h.count * esz);
  for (auto& x : b.payload) x = uint8_t(rng());
  b.body = b.payload;
  if (sideband) {
    h.flags |= hflag::SIDEBAND;
    b.sideband.resize(h.count);
    for (auto& x : b.sideband) x = uint8_t(rng() % 8);
    b.body.insert(b.body.end(), b.sideband.begin(), b.sideband.end());
  }
  return b;
}

void do_build(Built& b) {
  b.frame.assign(kMaxFrame + 64, 0xEE);
  const size_t n = build(b.frame.data(), b.frame.size(), b.src, b.dst, b.h, b.body, b.ip_id);
  ASSERT_GT(n, 0u);
  b.frame.resize(n);
}

struct Combo {
  Kind kind;
  Encoding enc;
  bool sideband;
};
// Every kind with the encodings PROTOCOL.md allows it, with and without SIDEBAND (RESULT and encoding-2
// PARTIAL only).
const Combo kCombos[] = {{Kind::CONTRIB, Encoding::DTYPE, false},    {Kind::PARTIAL, Encoding::OUT_DTYPE, false},
                         {Kind::PARTIAL, Encoding::OUT_DTYPE, true}, {Kind::PARTIAL, Encoding::KULISCH, false},
                         {Kind::RESULT, Encoding::OUT_DTYPE, false}, {Kind::RESULT, Encoding::OUT_DTYPE, true},
                         {Kind::NACK, Encoding::DTYPE, false},       {Kind::JOIN, Encoding::DTYPE, false},
                         {Kind::JOINED, Encoding::DTYPE, false},     {Kind::ALLOC, Encoding::DTYPE, false},
                         {Kind::ALLOCATED, Encoding::DTYPE, false},  {Kind::LEAVE, Encoding::DTYPE, false},
                         {Kind::LEFT, Encoding::DTYPE, false},       {Kind::QUERY, Encoding::DTYPE, false},
                         {Kind::STATUS, Encoding::DTYPE, false}};

void expect_same_header(const Header& a, const Header& b) {
  EXPECT_EQ(a.magic, b.magic);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.job, b.job);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.chunk, b.chunk);
  EXPECT_EQ(a.sender, b.sender);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.terms, b.terms);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(unsigned(a.dtype), unsigned(b.dtype));
  EXPECT_EQ(unsigned(a.out_dtype), unsigned(b.out_dtype));
  EXPECT_EQ(unsigned(a.policy), unsigned(b.policy));
  EXPECT_EQ(unsigned(a.encoding), unsigned(b.encoding));
  EXPECT_EQ(unsigned(a.transport), unsigned(b.transport));
  EXPECT_EQ(unsigned(a.exceptions), unsigned(b.exceptions));
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.status, b.status);
}

void expect_parsed(const Built& b, const Parsed& p, const Bytes& frame, uint16_t vlan = 0) {
  expect_same_header(b.h, p.h);
  EXPECT_EQ(p.src.mac, b.src.mac);
  EXPECT_EQ(p.dst.mac, b.dst.mac);
  EXPECT_EQ(p.src.ip, b.src.ip);
  EXPECT_EQ(p.dst.ip, b.dst.ip);
  EXPECT_EQ(p.src.port, b.src.port);
  EXPECT_EQ(p.dst.port, b.dst.port);
  EXPECT_EQ(p.vlan, vlan);
  ASSERT_EQ(p.payload_len, b.payload.size());
  if (!b.payload.empty()) {
    ASSERT_GE(p.payload, frame.data());
    ASSERT_LE(p.payload + p.payload_len, frame.data() + frame.size());
    EXPECT_EQ(0, std::memcmp(p.payload, b.payload.data(), b.payload.size()));
  }
  if (b.sideband.empty()) {
    EXPECT_EQ(p.sideband, nullptr);
  } else {
    ASSERT_NE(p.sideband, nullptr);
    ASSERT_LE(p.sideband + b.sideband.size(), frame.data() + frame.size());
    EXPECT_EQ(0, std::memcmp(p.sideband, b.sideband.data(), b.sideband.size()));
  }
  if (b.h.kind != Kind::NACK) {
    EXPECT_EQ(p.first_lane, b.first_lane);
    EXPECT_EQ(p.chunk_lanes, b.chunk_lanes);
  }
}

// Inserts an 802.1Q tag after the MAC addresses.
Bytes tagged(const Bytes& f, uint16_t tci) {
  Bytes t(f.begin(), f.begin() + 12);
  t.push_back(0x81), t.push_back(0x00), t.push_back(uint8_t(tci >> 8)), t.push_back(uint8_t(tci));
  t.insert(t.end(), f.begin() + 12, f.end());
  return t;
}

// ------------------------------------------------------------ round trips
TEST(Packet, BuildParseRoundTripsEveryField) {
  std::mt19937_64 rng(1);
  for (int it = 0; it < 400; ++it)
    for (const Combo& c : kCombos) {
      Built b = random_built(rng, c.kind, c.enc, c.sideband);
      do_build(b);
      const Bytes& f = b.frame;
      SCOPED_TRACE(testing::Message() << "iteration " << it << " kind " << int(c.kind) << " enc " << int(c.enc));
      // The bytes, from PROTOCOL.md's layout.
      ASSERT_EQ(f.size(), 14 + 20 + 8 + 32 + b.body.size());
      EXPECT_EQ(0, std::memcmp(f.data(), b.dst.mac.data(), 6));
      EXPECT_EQ(0, std::memcmp(f.data() + 6, b.src.mac.data(), 6));
      EXPECT_EQ(rd16(&f[12]), 0x0800);
      EXPECT_EQ(f[14], 0x45);
      EXPECT_EQ(rd16(&f[16]), f.size() - 14);
      EXPECT_EQ(rd16(&f[18]), b.ip_id);
      EXPECT_EQ(rd16(&f[20]), 0x4000) << "DF, no fragment";
      EXPECT_EQ(f[22], 64) << "TTL";
      EXPECT_EQ(f[23], 17);
      EXPECT_EQ(rd32(&f[26]), b.src.ip);
      EXPECT_EQ(rd32(&f[30]), b.dst.ip);
      EXPECT_EQ(rfc1071(&f[14], 20), 0) << "IPv4 header checksum";
      EXPECT_EQ(rd16(&f[34]), b.src.port);
      EXPECT_EQ(rd16(&f[36]), b.dst.port);
      EXPECT_EQ(rd16(&f[38]), f.size() - 34);
      Bytes udp(f.begin() + 34, f.end());
      const uint16_t sent = rd16(&udp[6]);
      udp[6] = udp[7] = 0;
      EXPECT_EQ(sent, ref_udp(b.src.ip, b.dst.ip, udp.data(), udp.size())) << "UDP checksum";
      EXPECT_EQ(Bytes(f.begin() + 42, f.begin() + 74), doc_header(b.h));
      EXPECT_EQ(Bytes(f.begin() + 74, f.end()), b.body);
      // And back.
      Parsed p;
      ASSERT_EQ(parse(f, b.dst.port, &p), Refusal::OK) << name(parse(f, b.dst.port, &p));
      expect_parsed(b, p, f);
      // The same frame with a VLAN tag (priority bits are not part of the id).
      const uint16_t tci = uint16_t(rng() & 0xEFFF);
      const Bytes t = tagged(f, tci);
      Parsed q;
      ASSERT_EQ(parse(t, b.dst.port, &q), Refusal::OK);
      expect_parsed(b, q, t, tci & 0x0FFF);
      // Another port refuses it.
      EXPECT_EQ(parse(f, uint16_t(b.dst.port + 1), &q), Refusal::WRONG_PORT);
      if (testing::Test::HasFailure()) return;
    }
}

TEST(Packet, BuildRefusesWhatDoesNotFit) {
  Built b;
  b.h.count = 4;
  b.body.assign(16, 1);
  Bytes buf(200);
  EXPECT_EQ(build(buf.data(), 14 + 20 + 8 + 32 + 15, b.src, b.dst, b.h, b.body), 0u);
  EXPECT_EQ(build(buf.data(), 14 + 20 + 8 + 32 + 16, b.src, b.dst, b.h, b.body), 90u);
}

// ------------------------------------------------------------ checksums
TEST(Checksum, MatchesRfc1071) {
  std::mt19937_64 rng(2);
  for (int it = 0; it < 5000; ++it) {
    const size_t n = it < 200 ? size_t(it) : size_t(rng() % 9100);
    Bytes d(n);
    const int style = int(rng() % 3);
    for (auto& x : d) x = style == 0 ? uint8_t(rng()) : style == 1 ? 0xFF : uint8_t(rng() % 2 ? 0xFF : 0);
    const uint32_t s = uint32_t(rng()), t = uint32_t(rng());
    if (n >= 20 && n % 4 == 0 && n <= 60) {
      ASSERT_EQ(ipv4_checksum(d.data(), n), rfc1071(d)) << n;
    }
    ASSERT_EQ(udp_checksum(s, t, d.data(), n), ref_udp(s, t, d.data(), n)) << "length " << n;
  }
  // The classic example from RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
  const Bytes ex = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(rfc1071(ex), uint16_t(~0xddf2));
  EXPECT_EQ(ipv4_checksum(ex.data(), ex.size()), uint16_t(~0xddf2));
  // A real IPv4 header (PROTOCOL.md's worked example) sums to zero with its checksum.
  const Bytes ip = {0x45, 0x00, 0x00, 0x4c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11,
                    0x25, 0xa2, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0xfe};
  EXPECT_EQ(ipv4_checksum(ip.data(), ip.size()), 0);
  Bytes z = ip;
  z[10] = z[11] = 0;
  EXPECT_EQ(ipv4_checksum(z.data(), z.size()), 0x25a2);
}

// The word-at-a-time sum gives RFC 1071's byte-pair sum at every alignment and
// length (frames sit at any offset in a buffer).
TEST(Checksum, OnesSumAtEveryAlignment) {
  std::mt19937_64 rng(3);
  Bytes buf(9300);
  for (auto& x : buf) x = uint8_t(rng());
  for (size_t off = 0; off < 8; ++off)
    for (size_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 1024, 1031, 4099, 9216}) {
      const Bytes d(buf.begin() + long(off), buf.begin() + long(off + n));
      ASSERT_EQ(uint16_t(~ones_sum(buf.data() + off, n)), rfc1071(d)) << "offset " << off << " length " << n;
      ASSERT_EQ(uint16_t(~ones_sum_portable(buf.data() + off, n)), rfc1071(d)) << "offset " << off << " length " << n;
    }
  // All-ones words: the 64-bit sum must fold its carries back in.
  const Bytes ones(9000, 0xFF);
  EXPECT_EQ(ones_sum(ones.data(), ones.size()), 0xFFFF);
  EXPECT_EQ(ones_sum_portable(ones.data(), ones.size()), 0xFFFF);
  // Longer than the AVX2 path's 512 KiB blocks (its 32-bit lanes are widened between them).
  Bytes big(5u << 20);
  for (auto& x : big) x = uint8_t(rng());
  for (size_t n : {size_t(2u << 20), big.size() - 3})
    EXPECT_EQ(uint16_t(~ones_sum(big.data(), n)), rfc1071(Bytes(big.begin(), big.begin() + long(n)))) << n;
  // The lanes' extremes: every word the largest, then every word the smallest (each biased to -0x8000).
  const Bytes all_ones(5u << 20, 0xFF);
  EXPECT_EQ(ones_sum(all_ones.data(), all_ones.size()), 0xFFFF);
  const Bytes all_zeros(5u << 20, 0x00);
  EXPECT_EQ(ones_sum(all_zeros.data(), all_zeros.size()), 0);
}

// A CONTRIB of two fp32 elements from 10.0.0.1 to 10.0.0.254, both on PRISM's port (not yet built).
Built two_fp32(Bytes body) {
  Built b;
  b.src.ip = 0x0A000001;
  b.dst.ip = 0x0A0000FE;
  b.src.port = b.dst.port = kDefaultPort;
  b.h.count = 2;
  b.body = std::move(body);
  return b;
}

// A datagram whose checksum computes to 0 carries 0xFFFF, and parse accepts it.
TEST(Checksum, ZeroIsSentAsFfffAndAccepted) {
  Built b = two_fp32(Bytes(8, 0));
  // Solve for the last element's two bytes: with them at 0 the datagram sums (one's complement) to S;
  // the word ~S makes the sum 0xFFFF, i.e. the checksum 0.
  do_build(b);
  Bytes udp(b.frame.begin() + 34, b.frame.end());
  udp[6] = udp[7] = 0;
  const uint16_t c0 = ref_udp(b.src.ip, b.dst.ip, udp.data(), udp.size());  // = ~S (S is never 0 here)
  wr16(&b.body[6], c0);
  do_build(b);
  EXPECT_EQ(rd16(&b.frame[40]), 0xFFFF);
  Parsed p;
  EXPECT_EQ(parse(b.frame, kDefaultPort, &p), Refusal::OK);
  // And 0 on the wire means "no checksum".
  b.frame[40] = b.frame[41] = 0;
  b.frame.back() ^= 0x55;
  EXPECT_EQ(parse(b.frame, kDefaultPort, &p), Refusal::OK);
  b.frame[41] = 1;
  EXPECT_EQ(parse(b.frame, kDefaultPort, &p), Refusal::UDP_BAD_CHECKSUM);
}

// The IPv4 header checksum is checked over the whole header, options
// included: a header of every length 20..60 whose checksum is recomputed
// here (RFC 1071) parses, and one changed bit anywhere in the checksum or
// the options is refused as IP_BAD_CHECKSUM.
TEST(Checksum, Ipv4HeaderIsCheckedWithItsOptions) {
  Built b = two_fp32({1, 2, 3, 4, 5, 6, 7, 8});
  do_build(b);
  for (size_t opt = 0; opt <= 40; opt += 4) {
    Bytes f(b.frame.begin(), b.frame.begin() + 34);                               // Ethernet + the 20-byte header
    for (size_t i = 0; i < opt; ++i) f.push_back(uint8_t(i + 1 == opt ? 0 : 1));  // NOPs, then end of list
    f.insert(f.end(), b.frame.begin() + 34, b.frame.end());
    f[14] = uint8_t(0x40 | (20 + opt) / 4);
    wr16(&f[16], uint16_t(rd16(&f[16]) + opt));
    f[24] = f[25] = 0;
    wr16(&f[24], rfc1071(&f[14], 20 + opt));
    Parsed p;
    ASSERT_EQ(parse(f, kDefaultPort, &p), Refusal::OK) << opt << " bytes of options";
    for (size_t at : std::vector<size_t>{24, 25, 14 + 20 + opt / 2}) {
      if (at >= 14 + 20 + opt && at > 25) continue;  // no options to change
      for (int bit = 0; bit < 8; ++bit) {
        Bytes g = f;
        g[at] ^= uint8_t(1 << bit);
        EXPECT_EQ(parse(g, kDefaultPort, &p), Refusal::IP_BAD_CHECKSUM) << "byte " << at << " bit " << bit;
      }
    }
  }
}

// With sums_verified (the device's RX checksum offload reported both sums
// good) parse() does not sum again, and every other check still runs.
TEST(Checksum, DeviceVerifiedSumsAreNotSummedAgain) {
  Built b = two_fp32({1, 2, 3, 4, 5, 6, 7, 8});
  do_build(b);
  Bytes bad_udp = b.frame, bad_ip = b.frame;
  bad_udp[41] ^= 1;  // UDP checksum
  bad_ip[25] ^= 1;   // IPv4 header checksum
  Parsed p;
  EXPECT_EQ(parse(bad_udp, kDefaultPort, &p), Refusal::UDP_BAD_CHECKSUM);
  EXPECT_EQ(parse(bad_ip, kDefaultPort, &p), Refusal::IP_BAD_CHECKSUM);
  EXPECT_EQ(parse(bad_udp, kDefaultPort, &p, true, true), Refusal::OK);
  EXPECT_EQ(p.h.count, 2);
  EXPECT_EQ(parse(bad_ip, kDefaultPort, &p, true, true), Refusal::OK);
  Bytes bad_magic = b.frame;
  bad_magic[42] ^= 1;
  EXPECT_EQ(parse(bad_magic, kDefaultPort, &p, true, true), Refusal::BAD_MAGIC);
  EXPECT_EQ(parse(b.frame, kDefaultPort + 1, &p, true, true), Refusal::WRONG_PORT);
}

// A UDP checksum field of 0 is no checksum (RFC 768) whatever the device
// said of the frame: a NIC's RX offload may report such a frame L4 GOOD
// (some do, net_tap does not), and a job with `udp_checksum: required` must
// still refuse it (review F21). A checksum that is there is never taken for
// none, and a zero one is not a checksum left to offload.
TEST(Checksum, AZeroUdpChecksumIsNoneEvenWhereTheDeviceVerifiedTheSums) {
  Built b = two_fp32({1, 2, 3, 4, 5, 6, 7, 8});
  do_build(b);
  Bytes bare = b.frame;
  bare[frame::udp_checksum] = bare[frame::udp_checksum + 1] = 0;
  for (const bool verified : {false, true})
    for (const bool kernel : {false, true}) {
      Parsed p;
      ASSERT_EQ(parse(bare, kDefaultPort, &p, true, verified, kernel), Refusal::OK);
      EXPECT_TRUE(p.no_checksum) << "sums_verified " << verified << ", kernel_link " << kernel;
      EXPECT_FALSE(p.partial_checksum);
      ASSERT_EQ(parse(b.frame, kDefaultPort, &p, true, verified, kernel), Refusal::OK);
      EXPECT_FALSE(p.no_checksum) << "sums_verified " << verified << ", kernel_link " << kernel;
    }
}

// ------------------------------------------------------------ bounds
// parse() on an exactly sized heap copy: ASan reports any read past the end.
Refusal parse_copy(const uint8_t* p, size_t n, uint16_t port, bool check = true) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[n ? n : 1]);
  if (n) std::memcpy(buf.get(), p, n);
  Parsed out;
  const Refusal r = parse(std::span<const uint8_t>(buf.get(), n), port, &out, check);
  if (r == Refusal::OK) {
    const uint8_t* end = buf.get() + n;
    EXPECT_TRUE(out.payload_len == 0 || (out.payload >= buf.get() && out.payload + out.payload_len <= end));
    if (out.sideband) {
      EXPECT_LE(out.sideband + out.h.count, end);
    }
    if (out.h.encoding == Encoding::KULISCH && out.h.kind == Kind::PARTIAL && check) {
      std::vector<LaneExact> lanes(out.chunk_lanes);
      EXPECT_EQ(decode_fragment(out, lanes.data()), PartialError::None);
    }
  }
  return r;
}

std::vector<Bytes> sample_frames(std::mt19937_64& rng, std::vector<uint16_t>* ports) {
  std::vector<Bytes> v;
  for (int it = 0; it < 6; ++it)
    for (const Combo& c : kCombos) {
      Built b = random_built(rng, c.kind, c.enc, c.sideband);
      do_build(b);
      v.push_back(b.frame);
      ports->push_back(b.dst.port);
      v.push_back(tagged(b.frame, uint16_t(rng())));
      ports->push_back(b.dst.port);
    }
  return v;
}

TEST(Bounds, EveryPrefixIsRefusedWithoutReadingPastTheEnd) {
  std::mt19937_64 rng(3);
  std::vector<uint16_t> ports;
  const auto frames = sample_frames(rng, &ports);
  for (size_t k = 0; k < frames.size(); ++k) {
    const Bytes& f = frames[k];
    ASSERT_EQ(parse_copy(f.data(), f.size(), ports[k]), Refusal::OK);
    for (size_t n = 0; n < f.size(); ++n) {
      const Refusal r = parse_copy(f.data(), n, ports[k]);
      ASSERT_NE(r, Refusal::OK) << "a " << n << "-byte prefix of a " << f.size() << "-byte frame parsed";
      if (n < (rd16(&f[12]) == 0x8100 ? 46u : 42u)) {
        ASSERT_EQ(r, Refusal::SHORT_FRAME) << n;
      }
    }
  }
}

// Re-computes the IPv4 and UDP checksums where the (mutated) lengths allow, so mutations reach the
// PRISM header checks instead of stopping at a checksum.
void fix_checksums(Bytes& f) {
  if (f.size() < 14) return;
  size_t at = 14;
  if (rd16(&f[12]) == 0x8100) at = 18;
  if (f.size() < at + 20) return;
  const size_t ihl = size_t(f[at] & 0xF) * 4;
  if (ihl < 20 || f.size() < at + ihl + 8) return;
  f[at + 10] = f[at + 11] = 0;
  wr16(&f[at + 10], rfc1071(&f[at], ihl));
  const size_t u = at + ihl, ulen = rd16(&f[u + 4]);
  if (ulen < 8 || u + ulen > f.size()) return;
  f[u + 6] = f[u + 7] = 0;
  wr16(&f[u + 6], ref_udp(rd32(&f[at + 12]), rd32(&f[at + 16]), &f[u], ulen));
}

TEST(Bounds, RandomMutationsNeverReadPastTheEnd) {
  std::mt19937_64 rng(4);
  std::vector<uint16_t> ports;
  const auto frames = sample_frames(rng, &ports);
  std::vector<int> seen(size_t(Refusal::kCount), 0);
  const int iterations = 200000;
  for (int it = 0; it < iterations; ++it) {
    const size_t k = rng() % frames.size();
    Bytes f = frames[k];
    const size_t at = rd16(&f[12]) == 0x8100 ? 18 : 14;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos;
      switch (rng() % 6) {
        case 0: pos = rng() % f.size(); break;           // anywhere
        case 1: pos = at + rng() % 28; break;            // IPv4 / UDP header
        case 2: pos = at + 28 + rng() % 32; break;       // PRISM header
        case 3: pos = at + 28 + 32 + rng() % 12; break;  // fragment header, first lane records
        case 4: pos = at + 28 + 20 + rng() % 4; break;   // terms, count
        default: pos = f.size() - 1 - rng() % std::min<size_t>(f.size(), 64); break;
      }
      if (pos >= f.size()) continue;
      f[pos] = rng() % 3 ? uint8_t(rng()) : uint8_t(f[pos] ^ (1u << (rng() % 8)));
    }
    if (rng() % 4 == 0) f.resize(size_t(rng() % (f.size() + 1)));
    if (rng() % 8 == 0) f.resize(f.size() + 1 + rng() % 16, uint8_t(rng()));
    if (rng() % 5 != 0) fix_checksums(f);
    const Refusal r = parse_copy(f.data(), f.size(), ports[k], rng() % 4 != 0);
    seen[size_t(r)]++;
    if (testing::Test::HasFailure()) return;
  }
  // The mutations reach deep into the parser, not just the checksums.
  for (Refusal r : {Refusal::OK, Refusal::BAD_MAGIC, Refusal::BAD_TERMS, Refusal::BAD_COUNT, Refusal::PAYLOAD_LENGTH,
                    Refusal::BAD_FRAGMENT, Refusal::BAD_PARTIAL, Refusal::IP_BAD_LENGTH, Refusal::UDP_BAD_LENGTH})
    EXPECT_GT(seen[size_t(r)], 0) << name(r);
}

// ------------------------------------------------------------ Kulisch fragments
constexpr uint32_t kR = 65535;

// fp32's largest finite value in lane units (2^-149): (2^24 - 1) * 2^104 * 2^149.
Bytes max_fp32_units() { return shl_bytes({0xFF, 0xFF, 0xFF}, 253); }

std::vector<std::pair<uint8_t, Val>> worst_lanes(std::mt19937_64& rng, uint32_t n) {
  const Bytes top = mul_add(max_fp32_units(), kR, 0);  // 65535 x max float: 2^293 > top >= 2^292
  std::vector<std::pair<uint8_t, Val>> v;
  for (uint32_t i = 0; i < n; ++i) {
    Val x;
    uint8_t s = 0;
    switch (i % 12) {
      case 0: x.mag = top; break;                  // exactly R x max
      case 1: x.mag = sub_bytes(top, {1}); break;  // every bit from 2^0 to 2^292: 37 bytes
      case 2: {                                    // R x max minus random low bits
        Bytes low(36);
        for (auto& b : low) b = uint8_t(rng());
        x.mag = sub_bytes(top, low);
        break;
      }
      case 3: x.mag = {1}; break;                                                       // the smallest subnormal
      case 4: x.mag = mul_add({0xFF, 0xFF, 0x7F}, 1 + uint32_t(rng() % kR), 0); break;  // sums of subnormals
      case 5: s = side::NAN_INPUT; break;
      case 6: s = side::POS_INF; break;
      case 7: s = side::NEG_INF; break;
      case 8: s = side::NEG_ZERO_ONLY; break;
      case 9: s = side::POS_INF | side::NEG_INF; break;
      case 10: break;  // +0
      default: {       // anything in range
        x.mag.resize(1 + rng() % 37);
        for (auto& b : x.mag) b = uint8_t(rng());
        if (x.mag.size() == 37) x.mag.back() &= 0x0F;
        x.mag.back() |= 1;
      }
    }
    x.neg = !x.zero() && (i / 12) % 2 == 1;
    v.push_back({s, trim(x)});
  }
  return v;
}

struct Sent {
  std::vector<LaneExact> lanes;  // decoded, whole chunk
  std::vector<int> covered;      // times each lane arrived
  size_t frames = 0;
};

// lanes -> kulisch_fragments -> build -> parse -> decode_fragment, checking every step.
Sent send_fragments(const std::vector<LaneExact>& lanes, size_t mtu, std::mt19937_64& rng,
                    const std::vector<Bytes>* doc_records = nullptr) {
  Sent s;
  const uint32_t n = uint32_t(lanes.size());
  LaneExact junk;
  junk.side = 0x3F;
  junk.value.limb[0] = 0xDEADBEEF;
  s.lanes.assign(n, junk);
  s.covered.assign(n, 0);
  const auto frags = kulisch_fragments(lanes.data(), n, max_body(mtu));
  EXPECT_EQ(max_body(mtu), mtu - 60);
  uint32_t next = 0;
  for (const Fragment& fr : frags) {
    EXPECT_EQ(fr.first, next) << "fragments are in lane order, back to back";
    EXPECT_GT(fr.count, 0);
    EXPECT_LE(fr.body.size(), max_body(mtu));
    EXPECT_EQ(rd16(&fr.body[0]), fr.first);
    EXPECT_EQ(rd16(&fr.body[2]), n);
    if (doc_records) {  // the records as PROTOCOL.md lays them out
      Bytes want;
      for (uint32_t i = fr.first; i < uint32_t(fr.first) + fr.count; ++i)
        want.insert(want.end(), (*doc_records)[i].begin(), (*doc_records)[i].end());
      EXPECT_EQ(Bytes(fr.body.begin() + 4, fr.body.end()), want) << "fragment at lane " << fr.first;
    }
    next = uint32_t(fr.first) + fr.count;
    Header h;
    h.kind = Kind::PARTIAL;
    h.encoding = Encoding::KULISCH;
    h.job = 7;
    h.op = 9;
    h.chunk = 3;
    h.sender = 2;
    h.group = uint16_t(kR);
    h.terms = uint16_t(1 + rng() % kR);
    h.count = fr.count;
    h.flags = hflag::LAST_CHUNK;
    Endpoint a{{2, 0, 0, 0, 0, 2}, 0x0A000201, 20562}, b{{2, 0, 0, 0, 0xFF, 1}, 0x0A0002FE, 20562};
    Bytes frame(14 + mtu + 100);
    const size_t len = build(frame.data(), 14 + mtu, a, b, h, fr.body, uint16_t(s.frames));
    EXPECT_GT(len, 0u) << "fragment does not fit the MTU";
    if (!len) return s;
    EXPECT_LE(len - 14, mtu);
    frame.resize(len);
    ++s.frames;
    Parsed p;
    const Refusal r = parse(frame, 20562, &p);
    EXPECT_EQ(r, Refusal::OK) << name(r);
    if (r != Refusal::OK) return s;
    EXPECT_EQ(p.first_lane, fr.first);
    EXPECT_EQ(p.chunk_lanes, n);
    EXPECT_EQ(p.h.count, fr.count);
    EXPECT_EQ(decode_fragment(p, s.lanes.data()), PartialError::None);
    for (uint32_t i = p.first_lane; i < uint32_t(p.first_lane) + p.h.count; ++i) s.covered[i]++;
  }
  EXPECT_EQ(next, n);
  return s;
}

void expect_same_lanes(const std::vector<LaneExact>& a, const std::vector<LaneExact>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].side, b[i].side) << "lane " << i;
    for (int k = 0; k < Wide::kLimbs; ++k) ASSERT_EQ(a[i].value.limb[k], b[i].value.limb[k]) << "lane " << i;
  }
}

TEST(Fragments, WorstCaseFp32LanesSurviveTheWire) {
  std::mt19937_64 rng(5);
  // PROTOCOL.md: the worst case (fp32, 65535 ranks at the top of the range) is 3 + 37 bytes.
  {
    Val w;
    w.mag = sub_bytes(mul_add(max_fp32_units(), kR, 0), {1});
    w = trim(w);
    EXPECT_EQ(w.mag.size(), 37u);
    LaneExact l;
    l.side = 0;
    l.value = wide_of(w);
    EXPECT_EQ(kulisch_lane_size(l), 40u);
    EXPECT_EQ(doc_record(0, w).size(), 40u);
  }
  for (uint32_t n : {1u, 12u, 35u, 36u, 256u, 360u, 2235u, 65535u})
    for (size_t mtu : {size_t(1500), size_t(9000)}) {
      SCOPED_TRACE(testing::Message() << n << " lanes, MTU " << mtu);
      const auto vals = worst_lanes(rng, n);
      std::vector<LaneExact> lanes(n);
      std::vector<Bytes> recs(n);
      for (uint32_t i = 0; i < n; ++i) {
        lanes[i].side = vals[i].first;
        lanes[i].value = wide_of(vals[i].second);
        recs[i] = doc_record(vals[i].first, vals[i].second);
      }
      const Sent s = send_fragments(lanes, mtu, rng, &recs);
      expect_same_lanes(lanes, s.lanes);
      for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(s.covered[i], 1) << "lane " << i;
      // All worst case: 40 bytes a lane, 1436 / 40 = 35 lanes in a 1500 frame, 8936 / 40 = 223 in a jumbo one.
      if (n == 256) {
        std::vector<LaneExact> all(n, lanes[1]);
        const auto frags = kulisch_fragments(all.data(), n, max_body(mtu));
        EXPECT_EQ(frags.size(), mtu == 9000 ? 2u : 8u)
            << "PROTOCOL.md: a 256-element chunk may need two jumbo fragments";
        const Sent t = send_fragments(all, mtu, rng);
        expect_same_lanes(all, t.lanes);
      }
      if (testing::Test::HasFailure()) return;
    }
}

// ------------------------------------------------------------ real accumulators
// Element codes of `f` for one contribution: lane i gets a pattern by i % 10.
uint32_t pattern_code(Format f, uint32_t lane, uint32_t rank, std::mt19937_64& rng) {
  const FormatInfo& fi = info(f);
  const uint32_t mask = fi.bytes == 4 ? 0xFFFFFFFFu : (1u << (8 * fi.bytes)) - 1;
  if (!fi.is_float) {
    switch (lane % 4) {
      case 0: return fi.max_finite;  // the top of the range
      case 1: return fi.sign_bit;    // the bottom
      case 2: return rank % 2 ? fi.sign_bit : fi.max_finite;
      default: return uint32_t(rng()) & mask;
    }
  }
  auto finite = [&] {
    uint32_t b;
    do b = uint32_t(rng()) & mask;
    while (is_special(f, b));
    return b;
  };
  switch (lane % 10) {
    case 0: return fi.max_finite;                            // R x max
    case 1: return fi.max_finite | fi.sign_bit;              // R x -max
    case 2: return rank % 2 ? 1u : fi.max_finite;            // both ends of the range
    case 3: return 1u | (rank % 3 == 0 ? fi.sign_bit : 0);   // subnormals
    case 4: return fi.has_neg_zero ? fi.sign_bit : 0;        // -0 only
    case 5: return rank == 1 ? fi.canonical_nan : finite();  // one NaN
    case 6:                                                  // +Inf and -Inf (or NaN)
      if (!fi.has_inf) return rank == 0 ? fi.canonical_nan : finite();
      return rank == 0 ? fi.inf : rank == 1 ? (fi.inf | fi.sign_bit) : finite();
    case 7: return rank % 2 ? fi.max_finite : (fi.max_finite | fi.sign_bit);  // cancels
    default: return finite();
  }
}

struct AccCase {
  Format f, out;
  uint32_t R, lanes;
};

std::unique_ptr<Accumulator> make(const AccCase& c) {
  OpDesc d;
  d.dtype = c.f;
  d.out = c.out;
  d.policy = Policy::KULISCH_FIXED;
  d.group = c.R;
  d.lanes = c.lanes;
  return make_accumulator(d);
}

void finalize(const Accumulator& a, Bytes* out, Bytes* flags) {
  out->assign(size_t(a.desc().lanes) * info(a.desc().out).bytes, 0);
  flags->assign(a.desc().lanes, 0);
  a.finalize(out->data(), flags->data());
}

TEST(Fragments, AccumulatorStateMergesToIdenticalBits) {
  const AccCase cases[] = {
      {Format::FP32, Format::FP32, 65535, 40},        {Format::FP32, Format::BF16, 300, 360},
      {Format::FP16, Format::FP32, 9000, 64},         {Format::FP16, Format::FP16, 16, 720},
      {Format::BF16, Format::FP32, 2000, 100},        {Format::E4M3FN, Format::FP32, 64, 1440},
      {Format::E4M3FNUZ, Format::E4M3FNUZ, 100, 300}, {Format::E5M2, Format::FP16, 1000, 200},
      {Format::E5M2FNUZ, Format::FP32, 7, 50},        {Format::INT8, Format::INT32, 65535, 16},
      {Format::INT32, Format::FP32, 1000, 100},
  };
  std::mt19937_64 rng(6);
  for (const AccCase& c : cases) {
    SCOPED_TRACE(testing::Message() << name(c.f) << " -> " << name(c.out) << ", R=" << c.R << ", " << c.lanes
                                    << " lanes");
    const size_t esz = info(c.f).bytes;
    // One accumulator takes every contribution; three "leaves" take a share each.
    auto whole = make(c);
    std::vector<std::unique_ptr<Accumulator>> leaves;
    for (int k = 0; k < 3; ++k) leaves.push_back(make(c));
    Bytes buf(c.lanes * esz);
    for (uint32_t r = 0; r < c.R; ++r) {
      for (uint32_t i = 0; i < c.lanes; ++i) store_bits(c.f, buf.data() + i * esz, pattern_code(c.f, i, r, rng));
      whole->add(buf.data(), r);
      leaves[r < c.R / 3 ? 0 : r < 2 * c.R / 3 ? 1 : 2]->add(buf.data(), r);
    }
    Bytes want, want_flags;
    finalize(*whole, &want, &want_flags);
    // The whole state, sent as fragments and merged into a fresh accumulator.
    std::vector<LaneExact> st(c.lanes);
    ASSERT_TRUE(whole->state(st.data()));
    if (c.f == Format::FP32 && c.R == kR) {  // the state reaches PROTOCOL.md's worst case, 3 + 37 bytes
      size_t widest = 0;
      for (const LaneExact& l : st) widest = std::max(widest, kulisch_lane_size(l));
      EXPECT_EQ(widest, 40u);
    }
    for (size_t mtu : {size_t(1500), size_t(9000)}) {
      const Sent s = send_fragments(st, mtu, rng);
      expect_same_lanes(st, s.lanes);
      auto fresh = make(c);
      ASSERT_TRUE(fresh->add_exact(s.lanes.data()));
      Bytes got, got_flags;
      finalize(*fresh, &got, &got_flags);
      EXPECT_EQ(got, want) << "MTU " << mtu;
      EXPECT_EQ(got_flags, want_flags) << "MTU " << mtu;
    }
    // A tree: each leaf's state over the wire, merged at a root.
    auto root = make(c);
    for (auto& leaf : leaves) {
      std::vector<LaneExact> ls(c.lanes);
      ASSERT_TRUE(leaf->state(ls.data()));
      const Sent s = send_fragments(ls, 1500, rng);
      expect_same_lanes(ls, s.lanes);
      ASSERT_TRUE(root->add_exact(s.lanes.data()));
    }
    Bytes got, got_flags;
    finalize(*root, &got, &got_flags);
    EXPECT_EQ(got, want) << "tree of three leaves";
    EXPECT_EQ(got_flags, want_flags) << "tree of three leaves";
    // The root's state equals the single accumulator's.
    std::vector<LaneExact> rs(c.lanes);
    ASSERT_TRUE(root->state(rs.data()));
    expect_same_lanes(st, rs);
    if (testing::Test::HasFailure()) return;
  }
}

// ---------------------------------------------------------------------------
// The wire's closed sets and offsets, against docs/PROTOCOL.md's tables.

TEST(Wire, ClosedSetsCarryTheDocumentedCodes) {
  const std::pair<int, const char*> kinds[] = {{1, "CONTRIB"}, {2, "PARTIAL"}, {3, "RESULT"}, {4, "NACK"},
                                               {5, "JOIN"},    {6, "JOINED"},  {7, "ALLOC"},  {8, "ALLOCATED"},
                                               {9, "LEAVE"},   {10, "LEFT"},   {11, "QUERY"}, {12, "STATUS"}};
  for (const auto& [c, n] : kinds) {
    EXPECT_EQ(from_code<Kind>(uint8_t(c)), Kind(c));
    EXPECT_STREQ(wire::name(Kind(c)), n);
  }
  EXPECT_FALSE(from_code<Kind>(0).has_value());
  EXPECT_FALSE(from_code<Kind>(13).has_value());
  EXPECT_EQ(choices<Encoding>(), "dtype out_dtype kulisch");
  // The NACK table of PROTOCOL.md, code by code (tests/py/switch_util.py spells them so too).
  const std::pair<int, const char*> reasons[] = {{1, "malformed"},
                                                 {2, "unknown_job"},
                                                 {3, "not_a_member"},
                                                 {4, "descriptor_mismatch"},
                                                 {5, "accumulator_too_narrow"},
                                                 {6, "no_free_slot"},
                                                 {7, "result_expired"},
                                                 {8, "op_abandoned"},
                                                 {9, "pool_full"},
                                                 {10, "group_too_large"},
                                                 {11, "out_of_pool"},
                                                 {12, "rank_taken"},
                                                 {13, "chunk_too_large"},
                                                 {14, "switch_stopping"}};
  for (const auto& [c, n] : reasons) {
    ASSERT_EQ(from_code<NackReason>(uint8_t(c)), NackReason(c)) << n;
    EXPECT_STREQ(wire::name(NackReason(c)), n);
    EXPECT_EQ(from_name<NackReason>(n), NackReason(c));
    // Each doc says what it means and, after a colon, what to do.
    const std::string d = doc(NackReason(c));
    EXPECT_NE(d.find(": "), std::string::npos) << n << ": " << d;
  }
  EXPECT_FALSE(from_code<NackReason>(0).has_value());
  EXPECT_FALSE(from_code<NackReason>(15).has_value());
  EXPECT_STREQ(wire::name(NackReason(15)), "?");
  // Refusals: named by their table, in code order, "?" beyond it.
  EXPECT_STREQ(wire::name(Refusal::OK), "ok");
  EXPECT_STREQ(wire::name(Refusal::SHORT_FRAME), "short_frame");
  EXPECT_STREQ(wire::name(Refusal::BAD_SIDEBAND), "bad_sideband");
  EXPECT_STREQ(wire::name(Refusal::kCount), "?");
  for (size_t i = 0; i < size_t(Refusal::kCount); ++i)
    EXPECT_EQ(from_name<Refusal>(wire::name(Refusal(i))), Refusal(i)) << i;
}

// PROTOCOL.md's NACK shapes, exactly: every reason takes terms 0 and an empty
// body; OP_ABANDONED (8) also takes terms up to group and a bitmap of exactly
// ceil(group / 8) bytes (counted here by hand: 1 rank -> 1 byte, 8 -> 1,
// 9 -> 2, 65535 -> 8192). count is 0 for all. Through parse() (a frame) and
// parse_message() (a socket's datagram) alike.
TEST(Parse, NackShapesAreTheDocumentedOnes) {
  const std::pair<uint16_t, size_t> groups[] = {{1, 1}, {4, 1}, {8, 1}, {9, 2}, {12, 2}, {65535, 8192}};
  const Endpoint src{{2, 0, 0, 0, 0xff, 0}, 0x0A0000FE, 20562}, dst{{2, 0, 0, 0, 0, 1}, 0x0A000001, 20562};
  for (uint8_t reason = 1; reason <= 12; ++reason)
    for (const auto& [group, bitmap] : groups) {
      const bool abandoned = reason == 8;
      const auto check = [&](uint16_t terms, uint16_t count, size_t body_len, Refusal want) {
        Header h;
        h.kind = Kind::NACK;
        h.group = group;
        h.terms = terms;
        h.count = count;
        h.status = reason;
        const Bytes body(body_len, 0xA5);
        Bytes f(kMaxFrame);
        f.resize(build(f.data(), f.size(), src, dst, h, body));
        ASSERT_FALSE(f.empty());
        SCOPED_TRACE(testing::Message() << "reason " << int(reason) << " group " << group << " terms " << terms
                                        << " count " << count << " body " << body_len);
        Parsed p;
        EXPECT_EQ(parse(f, 20562, &p), want) << name(parse(f, 20562, &p));
        if (want == Refusal::OK) {
          EXPECT_EQ(p.payload_len, body_len);
          if (body_len) {
            EXPECT_EQ(Bytes(p.payload, p.payload + p.payload_len), body);
          }
        }
        Parsed m;
        EXPECT_EQ(parse_message({f.data() + frame::header, f.size() - frame::header}, &m), want);
      };
      check(0, 0, 0, Refusal::OK);
      check(1, 0, 0, abandoned ? Refusal::OK : Refusal::BAD_TERMS);
      check(group, 0, 0, abandoned ? Refusal::OK : Refusal::BAD_TERMS);
      check(0, 0, bitmap, abandoned ? Refusal::OK : Refusal::PAYLOAD_LENGTH);
      check(group, 0, bitmap, abandoned ? Refusal::OK : Refusal::BAD_TERMS);
      check(0, 0, 1, abandoned && bitmap == 1 ? Refusal::OK : Refusal::PAYLOAD_LENGTH);
      check(0, 0, bitmap + 1, Refusal::PAYLOAD_LENGTH);
      // One byte short (or, for a bitmap of one byte, one too many).
      check(0, 0, bitmap == 1 ? 2 : bitmap - 1, Refusal::PAYLOAD_LENGTH);
      if (group < 65535) check(uint16_t(group + 1), 0, 0, Refusal::BAD_TERMS);
      check(0, 1, 0, Refusal::BAD_COUNT);
      check(abandoned ? 1 : 0, 1, abandoned ? bitmap : 0, Refusal::BAD_COUNT);
      if (testing::Test::HasFailure()) return;
    }
}

// PROTOCOL.md's Queries: a QUERY is the CONTRIB's header with terms 1, count
// 0, no flags, status 0 and no body; a STATUS echoes it with terms up to
// group, status 0 (MISSING) or 1 (HELD) and no body or the bitmap of
// ceil(group / 8) bytes. Both keep the CONTRIB's descriptor (encoding 1).
TEST(Parse, QueryAndStatusShapesAreTheDocumentedOnes) {
  const Endpoint src{{2, 0, 0, 0, 0xff, 0}, 0x0A0000FE, 20562}, dst{{2, 0, 0, 0, 0, 1}, 0x0A000001, 20562};
  Header contrib;
  contrib.job = 7, contrib.op = 3, contrib.chunk = 2, contrib.sender = 5, contrib.group = 9;
  contrib.count = 16, contrib.flags = hflag::LAST_CHUNK | hflag::RETRANSMIT;
  const auto parsed = [&](const Header& h, size_t body_len) {
    Bytes f(kMaxFrame);
    f.resize(build(f.data(), f.size(), src, dst, h, Bytes(body_len, 0x5A)));
    Parsed p, m;
    const Refusal r = parse(f, 20562, &p);
    EXPECT_EQ(parse_message({f.data() + frame::header, f.size() - frame::header}, &m), r);
    return std::pair{r, p.payload_len};
  };
  const Header q = query_header(contrib);
  EXPECT_EQ(q.kind, Kind::QUERY);
  EXPECT_EQ(q.terms, 1);
  EXPECT_EQ(q.count, 0);
  EXPECT_EQ(q.flags, 0);
  EXPECT_EQ(q.sender, 5);
  EXPECT_TRUE(same_descriptor(q, contrib));
  EXPECT_EQ(parsed(q, 0).first, Refusal::OK);
  EXPECT_EQ(parsed(q, 1).first, Refusal::PAYLOAD_LENGTH);  // no body, not even a bitmap
  EXPECT_EQ(parsed(q, 2).first, Refusal::PAYLOAD_LENGTH);
  Header bad = q;
  bad.count = 1;
  EXPECT_EQ(parsed(bad, 0).first, Refusal::BAD_COUNT);
  EXPECT_EQ(parsed(bad, 4).first, Refusal::BAD_COUNT);  // a CONTRIB's body under a QUERY's kind
  bad = q, bad.terms = 0;
  EXPECT_EQ(parsed(bad, 0).first, Refusal::BAD_TERMS);
  bad = q, bad.terms = 2;
  EXPECT_EQ(parsed(bad, 0).first, Refusal::BAD_TERMS);
  bad = q, bad.flags = hflag::RETRANSMIT;
  EXPECT_EQ(parsed(bad, 0).first, Refusal::BAD_FLAGS);
  bad = q, bad.status = 1;
  EXPECT_EQ(parsed(bad, 0).first, Refusal::BAD_STATUS);
  bad = q, bad.encoding = Encoding::OUT_DTYPE;
  EXPECT_EQ(parsed(bad, 0).first, Refusal::BAD_ENCODING);
  bad = q, bad.dtype = Format(0);
  EXPECT_EQ(parsed(bad, 0).first, Refusal::BAD_DTYPE);

  for (const bool held : {false, true}) {
    const Header st = status_header(q, 1000, held, 4);
    EXPECT_EQ(st.kind, Kind::STATUS);
    EXPECT_EQ(st.sender, 1000);
    EXPECT_EQ(st.status, held ? qstatus::HELD : qstatus::MISSING);
    EXPECT_EQ(st.terms, 4);
    EXPECT_EQ(st.job, 7u);
    EXPECT_EQ(st.op, 3u);
    EXPECT_EQ(st.chunk, 2u);
    EXPECT_TRUE(same_descriptor(st, contrib));
    EXPECT_EQ(parsed(st, 0), std::pair(Refusal::OK, size_t(0)));
    EXPECT_EQ(parsed(st, 2), std::pair(Refusal::OK, size_t(2)));  // ceil(9 / 8)
    EXPECT_EQ(parsed(st, 1).first, Refusal::PAYLOAD_LENGTH);
    EXPECT_EQ(parsed(st, 3).first, Refusal::PAYLOAD_LENGTH);
  }
  Header st = status_header(q, 1000, true, 9);
  EXPECT_EQ(parsed(st, 0).first, Refusal::OK);  // terms up to group
  st.terms = 10;
  EXPECT_EQ(parsed(st, 0).first, Refusal::BAD_TERMS);
  st = status_header(q, 1000, true, 0), st.status = 2;
  EXPECT_EQ(parsed(st, 0).first, Refusal::BAD_STATUS);
  st.status = 0, st.count = 1;
  EXPECT_EQ(parsed(st, 0).first, Refusal::BAD_COUNT);
  st.count = 0, st.flags = hflag::RETRANSMIT;
  EXPECT_EQ(parsed(st, 0).first, Refusal::BAD_FLAGS);
}

// PROTOCOL.md's header table, field by field, and the frame a build() makes:
// Ethernet 14, IPv4 20 (no options), UDP 8, then the header.
TEST(Wire, NamedOffsetsAreTheDocumentedOnes) {
  const std::pair<size_t, size_t> fields[] = {
      {off::magic, 0},       {off::version, 2},    {off::kind, 3},    {off::job, 4},       {off::op, 8},
      {off::chunk, 12},      {off::sender, 16},    {off::group, 18},  {off::terms, 20},    {off::count, 22},
      {off::dtype, 24},      {off::out_dtype, 25}, {off::policy, 26}, {off::encoding, 27}, {off::transport, 28},
      {off::exceptions, 29}, {off::flags, 30},     {off::status, 31}};
  for (const auto& [got, want] : fields) EXPECT_EQ(got, want);
  EXPECT_EQ(frame::header, 42u);
  EXPECT_EQ(frame::body, 74u);
  EXPECT_EQ(frame::ip_id, 18u);
  EXPECT_EQ(frame::ip_checksum, 24u);
  EXPECT_EQ(frame::udp_dst_port, 36u);
  EXPECT_EQ(frame::udp_checksum, 40u);
  // A built frame has its fields where the offsets say.
  Header h;
  h.kind = Kind::RESULT;
  h.job = 0x01020304;
  h.count = 2;
  h.terms = h.group = 5;
  h.dtype = Format::BF16;
  h.out_dtype = Format::FP16;
  h.encoding = Encoding::OUT_DTYPE;
  h.status = 3;
  const Endpoint src{{2, 0, 0, 0, 0, 1}, 0x0A000001, 20562}, dst{{2, 0, 0, 0, 0, 2}, 0x0A000002, 5001};
  uint8_t buf[128];
  const uint8_t body[4] = {1, 2, 3, 4};
  const size_t n = build(buf, sizeof buf, src, dst, h, body, 0xBEEF);
  ASSERT_EQ(n, 78u);
  EXPECT_EQ(buf[frame::ip_id] << 8 | buf[frame::ip_id + 1], 0xBEEF);
  EXPECT_EQ(buf[frame::udp_dst_port] << 8 | buf[frame::udp_dst_port + 1], 5001);
  EXPECT_EQ(buf[frame::at(off::kind)], 3);
  EXPECT_EQ(buf[frame::at(off::job)], 1);
  EXPECT_EQ(buf[frame::at(off::job) + 3], 4);
  EXPECT_EQ(buf[frame::at(off::dtype)], 3);
  EXPECT_EQ(buf[frame::at(off::out_dtype)], 2);
  EXPECT_EQ(buf[frame::at(off::status)], 3);
  EXPECT_EQ(buf[frame::body + 3], 4);
}

}  // namespace

// A fan-out's split frame (shared body, headers built from the body's sum)
// is byte for byte the frame build() makes in one piece.
TEST(Packet, SplitHeadersEqualWholeFrame) {
  std::mt19937 rng(11);
  for (int t = 0; t < 2000; ++t) {
    wire::Endpoint a{{2, 0, 0, 0, 0, 1}, uint32_t(rng()), uint16_t(rng())};
    wire::Endpoint b{{2, 0, 0, 0, 0, 2}, uint32_t(rng()), 20562};
    wire::Header h;
    h.kind = wire::Kind::RESULT;
    h.group = 4;
    h.terms = 4;
    h.encoding = wire::Encoding::OUT_DTYPE;
    h.count = uint16_t(1 + rng() % 300);
    std::vector<uint8_t> body(size_t(h.count) * 4 + ((rng() & 1) ? h.count : 0));
    for (auto& x : body) x = uint8_t(rng());
    std::vector<uint8_t> whole(wire::kMaxFrame), split(wire::kMaxFrame);
    const size_t n1 = wire::build(whole.data(), whole.size(), a, b, h, body, uint16_t(t));
    const size_t n2 =
        wire::build_headers(split.data(), split.size(), a, b, h, body.size(), wire::body_sum16(body), uint16_t(t));
    ASSERT_EQ(n2, wire::kFrameOverhead);
    std::copy(body.begin(), body.end(), split.begin() + long(n2));
    ASSERT_EQ(n1, n2 + body.size());
    ASSERT_TRUE(std::equal(whole.begin(), whole.begin() + long(n1), split.begin())) << "case " << t;
  }
}

// A fan-out makes one header template per destination and reuses it for
// every frame: each frame's lengths, IPv4 id and both checksums must still be
// its own (RFC 1071 and RFC 768, computed here), whatever frames came before.
TEST(Packet, HeaderTemplateServesEveryFrameOfAFanOut) {
  std::mt19937 rng(12);
  for (int d = 0; d < 200; ++d) {
    const wire::Endpoint a{{2, 0, 0, 0, 0, uint8_t(d)}, uint32_t(rng()), uint16_t(rng())};
    const wire::Endpoint b{{2, 0, 0, 0, 1, uint8_t(d)}, uint32_t(rng()), uint16_t(rng() | 1)};
    const wire::HeaderTemplate t = wire::header_template(a, b);
    for (int f = 0; f < 8; ++f) {
      wire::Header h;
      h.kind = wire::Kind::RESULT;
      h.group = h.terms = 4;
      h.encoding = wire::Encoding::OUT_DTYPE;
      h.op = uint32_t(rng());
      h.count = uint16_t(1 + rng() % 300);
      Bytes body(size_t(h.count) * 4);
      for (auto& x : body) x = uint8_t(rng());
      const uint16_t id = uint16_t(rng());
      Bytes fr(wire::kFrameOverhead + body.size());
      ASSERT_TRUE(wire::put_headers(fr.data(), t, wire::share(h, body.size(), wire::body_sum16(body)), id));
      std::copy(body.begin(), body.end(), fr.begin() + long(wire::kFrameOverhead));
      SCOPED_TRACE(testing::Message() << "destination " << d << " frame " << f);
      EXPECT_EQ(rd16(&fr[16]), fr.size() - 14);
      EXPECT_EQ(rd16(&fr[18]), id);
      EXPECT_EQ(rfc1071(&fr[14], 20), 0) << "IPv4 header checksum";
      EXPECT_EQ(rd16(&fr[38]), fr.size() - 34);
      Bytes udp(fr.begin() + 34, fr.end());
      const uint16_t sent = rd16(&udp[6]);
      udp[6] = udp[7] = 0;
      EXPECT_EQ(sent, ref_udp(a.ip, b.ip, udp.data(), udp.size())) << "UDP checksum";
      Parsed p;
      ASSERT_EQ(parse(fr, b.port, &p), Refusal::OK);
      EXPECT_EQ(p.src.ip, a.ip);
      EXPECT_EQ(p.dst.port, b.port);
      EXPECT_EQ(p.h.op, h.op);
      if (testing::Test::HasFailure()) return;
    }
  }
}

// A UDP checksum a sender on this host left to offload (CHECKSUM_PARTIAL: the
// field holds the folded sum of the pseudo-header only) is taken as not given
// on a kernel link, and nowhere else; a wrong checksum stays wrong everywhere.
TEST(Parse, ChecksumLeftToOffloadIsAcceptedOnKernelLinksOnly) {
  wire::Endpoint src{{0x02, 0, 0, 0, 0, 1}, 0x0A000001, 20562}, dst{{0x02, 0, 0, 0, 0xff, 0}, 0x0A0000FE, 20562};
  wire::Header h;
  h.kind = wire::Kind::CONTRIB;
  h.count = 2;
  const float v[2] = {1.0f, -3.5f};
  std::vector<uint8_t> f(wire::kMaxFrame);
  f.resize(wire::build(f.data(), f.size(), src, dst, h, {reinterpret_cast<const uint8_t*>(v), 8}));
  const size_t udp_len = f.size() - wire::frame::udp;
  // The pseudo-header's folded sum, by hand: addresses, protocol 17, UDP length.
  uint32_t s = (src.ip >> 16) + (src.ip & 0xFFFF) + (dst.ip >> 16) + (dst.ip & 0xFFFF) + 17 + uint32_t(udp_len);
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  auto partial = f;
  partial[wire::frame::udp_checksum] = uint8_t(s >> 8);
  partial[wire::frame::udp_checksum + 1] = uint8_t(s);
  wire::Parsed p;
  EXPECT_EQ(wire::parse(partial, 20562, &p), wire::Refusal::UDP_BAD_CHECKSUM);
  EXPECT_EQ(wire::parse(partial, 20562, &p, true, false, true), wire::Refusal::OK);
  EXPECT_TRUE(p.partial_checksum);
  EXPECT_EQ(wire::parse(f, 20562, &p, true, false, true), wire::Refusal::OK);
  EXPECT_FALSE(p.partial_checksum) << "a full, right checksum is verified as usual";
  auto wrong = partial;
  wrong[wire::frame::udp_checksum + 1] ^= 0x01;
  EXPECT_EQ(wire::parse(wrong, 20562, &p, true, false, true), wire::Refusal::UDP_BAD_CHECKSUM);
}

// PROTOCOL.md, "Job pools": the four kinds, written byte by byte from its
// table here (not by put_header), parsed, and the builders' bytes compared
// with them; then every shape PROTOCOL.md refuses.
namespace {
Bytes pool_message(uint8_t kind, uint32_t job, uint32_t op, uint32_t chunk, uint16_t sender, uint16_t group,
                   uint16_t terms, const Bytes& body = {}) {
  return prism::test::session_bytes(kind, job, op, chunk, sender, group, terms, 0, body);
}
Bytes header_bytes(const Header& h, const Bytes& body = {}) {
  Bytes m(32);
  put_header(h, m.data());
  m.resize(32 + body.size());
  if (!body.empty()) std::memcpy(m.data() + 32, body.data(), body.size());
  return m;
}
}  // namespace

TEST(Parse, PoolKindsAreTheDocumentedOnes) {
  // ALLOC: pool 1000, nonce 0xCAFEF00D, rank 0 asks for 4 ranks.
  const Bytes alloc = pool_message(7, 1000, 0xCAFEF00D, 0, 0, 4, 0);
  EXPECT_EQ(alloc[3], 7);
  EXPECT_EQ(header_bytes(alloc_header(1000, 0xCAFEF00D, 0, 4)), alloc);
  Parsed p;
  ASSERT_EQ(parse_message(alloc, &p), Refusal::OK);
  EXPECT_EQ(p.h.kind, Kind::ALLOC);
  EXPECT_EQ(p.h.job, 1000u);
  EXPECT_EQ(p.h.op, 0xCAFEF00Du);
  EXPECT_EQ(p.h.group, 4);
  // ALLOCATED: job 1003, the nonce, chunk = pool 1000, sender = switch 1, group 4, terms = 3 shards;
  // body: slot_quota 256, idle_timeout_ms 30000, big-endian.
  const Bytes body = {0, 0, 1, 0, 0, 0, 0x75, 0x30};
  const Bytes allocated = pool_message(8, 1003, 0xCAFEF00D, 1000, 1, 4, 3, body);
  EXPECT_EQ(header_bytes(allocated_header(1003, 0xCAFEF00D, 1000, 1, 4, 3),
                         [] {
                           const auto b = allocated_body(AllocatedBody{256, 30000});
                           return Bytes(b.begin(), b.end());
                         }()),
            allocated);
  ASSERT_EQ(parse_message(allocated, &p), Refusal::OK);
  ASSERT_TRUE(allocated_body(p).has_value());
  EXPECT_EQ(allocated_body(p)->slot_quota, 256u);
  EXPECT_EQ(allocated_body(p)->idle_timeout_ms, 30000u);
  EXPECT_EQ(p.h.chunk, 1000u);
  EXPECT_EQ(p.h.terms, 3);
  // LEAVE: job 1003, the rank's session nonce, rank 2, everything else 0.
  const Bytes leave = pool_message(9, 1003, 0x1234, 0, 2, 0, 0);
  EXPECT_EQ(header_bytes(leave_header(1003, 0x1234, 2)), leave);
  ASSERT_EQ(parse_message(leave, &p), Refusal::OK);
  EXPECT_EQ(p.h.kind, Kind::LEAVE);
  // LEFT: 3 ranks still bound of 4.
  const Bytes left = pool_message(10, 1003, 0x1234, 0, 2, 4, 3);
  EXPECT_EQ(header_bytes(left_header(1003, 0x1234, 2, 4, 3)), left);
  ASSERT_EQ(parse_message(left, &p), Refusal::OK);
  EXPECT_EQ(p.h.terms, 3);

  const auto refused = [&](Bytes m, size_t at, uint8_t v, Refusal want) {
    m[at] = v;
    Parsed q;
    EXPECT_EQ(parse_message(m, &q), want) << "kind " << int(m[3]) << " byte " << at << " = " << int(v);
  };
  for (const Bytes* m : {&alloc, &allocated, &leave, &left}) {
    refused(*m, 24, 1, Refusal::BAD_DTYPE);  // no descriptor
    refused(*m, 27, 1, Refusal::BAD_ENCODING);
    refused(*m, 29, 1, Refusal::BAD_EXCEPTIONS);
    refused(*m, 30, 1, Refusal::BAD_FLAGS);
    refused(*m, 31, 1, Refusal::BAD_STATUS);
    refused(*m, 23, 1, Refusal::BAD_COUNT);
  }
  refused(alloc, 19, 0, Refusal::BAD_GROUP);
  refused(allocated, 19, 0, Refusal::BAD_GROUP);
  refused(left, 19, 0, Refusal::BAD_GROUP);
  refused(alloc, 21, 1, Refusal::BAD_TERMS);
  refused(leave, 21, 1, Refusal::BAD_TERMS);
  refused(allocated, 21, 0, Refusal::BAD_TERMS);  // a switch has at least one shard
  refused(left, 21, 5, Refusal::BAD_TERMS);       // more still bound than the group
  Parsed q;
  EXPECT_EQ(parse_message(Bytes(allocated.begin(), allocated.end() - 1), &q), Refusal::PAYLOAD_LENGTH);
  EXPECT_EQ(parse_message(Bytes(allocated.begin(), allocated.begin() + 32), &q), Refusal::PAYLOAD_LENGTH);
  for (const Bytes* m : {&alloc, &leave, &left}) {
    Bytes longer = *m;
    longer.push_back(0);
    EXPECT_EQ(parse_message(longer, &q), Refusal::PAYLOAD_LENGTH) << int((*m)[3]);
  }
  // The job kinds go to the job's shard (job mod S), whatever op and chunk say.
  Header h = allocated_header(1003, 0xCAFEF00D, 1000, 1, 4, 3);
  EXPECT_EQ(shard_of(h, 3), 1003u % 3);
  EXPECT_EQ(shard_of(alloc_header(1000, 77, 0, 4), 3), 1000u % 3);
  EXPECT_EQ(shard_of(leave_header(1003, 5, 2), 3), 1003u % 3);
}
