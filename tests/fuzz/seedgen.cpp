// Seed corpus for the fuzz targets (scripts/fuzz.sh builds and runs this).
//
//   seedgen OUTDIR [CAPTURE.pcap ...]
//
// Writes OUTDIR/parse/ (one frame per file: hand-made frames of every kind and
// encoding, Kulisch fragments, VLAN / IP options / no UDP checksum / padding
// variants, and up to kPerCapture distinct frames of each capture given) and
// OUTDIR/partial/ (an option byte followed by Kulisch lane records) and
// OUTDIR/message/ (partial messages of the host collectives). File
// names are fixed, so running it again rewrites the same files.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "arith/accumulator.hpp"
#include "coll/partial_message.hpp"
#include "proto/fragment.hpp"
#include "proto/packet.hpp"
#include "proto/partial.hpp"

namespace {

using namespace prism;  // NOLINT
using Bytes = std::vector<uint8_t>;

constexpr size_t kPerCapture = 48;
std::string g_out;
size_t g_written = 0;

void write_file(const std::string& dir, const std::string& name, const Bytes& b) {
  const std::string path = g_out + "/" + dir + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
  ++g_written;
}

const wire::Endpoint kRank{{0x02, 0, 0, 0, 0, 0x01}, 0x0A000001, wire::kDefaultPort};
const wire::Endpoint kSwitch{{0x02, 0, 0, 0, 0xFF, 0x01}, 0x0A0000FE, wire::kDefaultPort};

Bytes frame(const wire::Header& h, const Bytes& body, const wire::Endpoint& src = kRank,
            const wire::Endpoint& dst = kSwitch) {
  Bytes f(wire::kMaxFrame + 64);
  const size_t n = wire::build(f.data(), f.size(), src, dst, h, body, 1);
  if (!n) throw std::runtime_error("seed frame does not fit");
  f.resize(n);
  return f;
}

wire::Header header(wire::Kind k, Format dt, Format out, uint16_t count) {
  wire::Header h;
  h.kind = k;
  h.job = 7;
  h.op = 42;
  h.chunk = 0;
  h.sender = 1;
  h.group = 2;
  h.terms = k == wire::Kind::CONTRIB ? 1 : k == wire::Kind::NACK ? 0 : 2;
  h.count = count;
  h.dtype = dt;
  h.out_dtype = out;
  h.policy = Policy::KULISCH_FIXED;
  h.encoding = k == wire::Kind::CONTRIB ? wire::Encoding::DTYPE : wire::Encoding::OUT_DTYPE;
  h.transport = PartialTransport::KULISCH;
  h.exceptions = Exceptions::IEEE;
  h.flags = wire::hflag::LAST_CHUNK;
  return h;
}

Bytes elements(Format f, uint16_t count, uint32_t seed) {
  const size_t sz = info(f).bytes;
  Bytes b(count * sz);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < b.size(); ++i) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    b[i] = uint8_t(x);
  }
  return b;
}

LaneExact lane(uint8_t side_bits, int64_t v = 0, int shift = 0) {
  LaneExact l;
  l.side = side_bits;
  if (v) l.value.add_shifted(v, shift);
  return l;
}

// Lanes that cover every kind of record: empty, zero, specials, small and
// large values of both signs, fp32-policy bits, the widest magnitude.
std::vector<LaneExact> lane_zoo() {
  std::vector<LaneExact> z = {lane(side::NEG_ZERO_ONLY),
                              lane(0),
                              lane(side::NAN_INPUT),
                              lane(side::POS_INF),
                              lane(side::NEG_INF),
                              lane(side::POS_INF | side::NEG_INF),
                              lane(side::NAN_INPUT | side::NEG_INF),
                              lane(0, 1),
                              lane(0, -1),
                              lane(0, 0x7FFFFF, 149),
                              lane(0, -0x12345678, 40),
                              lane(0, 1, 278),
                              lane(0, -0xFFFFFF, 270),
                              lane(side::INVALID, 3, 8),
                              lane(side::OVERFLOW, -5, 100),
                              lane(side::INVALID | side::OVERFLOW),
                              lane(0, 0x7FFFFFFFFFFFFFFF, 300),
                              lane(0, 0x100, 0),
                              lane(0, 1, 375)};
  return z;
}

Bytes records(const std::vector<LaneExact>& lanes) {
  Bytes b(lanes.size() * kMaxLaneBytes);
  b.resize(encode_kulisch_lanes(lanes.data(), uint32_t(lanes.size()), b.data()));
  return b;
}

// A PARTIAL carrying Kulisch fragments of `lanes`, one frame per fragment.
std::vector<Bytes> kulisch_frames(const std::vector<LaneExact>& lanes, size_t max_body, Format dt) {
  std::vector<Bytes> out;
  for (const auto& f : wire::kulisch_fragments(lanes.data(), uint32_t(lanes.size()), max_body)) {
    wire::Header h = header(wire::Kind::PARTIAL, dt, dt, f.count);
    h.encoding = wire::Encoding::KULISCH;
    h.sender = 2;
    h.group = 8;
    h.terms = 4;
    h.flags = 0;
    out.push_back(frame(h, f.body, kSwitch, kSwitch));
  }
  return out;
}

Bytes with_vlan(const Bytes& f, uint16_t vid) {
  Bytes v(f.begin(), f.begin() + 12);
  v.insert(v.end(), {0x81, 0x00, uint8_t(vid >> 8), uint8_t(vid)});
  v.insert(v.end(), f.begin() + 12, f.end());
  return v;
}

Bytes with_ip_options(const Bytes& f) {
  Bytes v(f.begin(), f.begin() + wire::kEthSize + wire::kIpv4MinSize);
  v.insert(v.end(), {0x01, 0x01, 0x01, 0x00});  // NOP NOP NOP EOL
  v.insert(v.end(), f.begin() + wire::kEthSize + wire::kIpv4MinSize, f.end());
  uint8_t* ip = v.data() + wire::kEthSize;
  ip[0] = 0x46;
  const uint16_t total = uint16_t((ip[2] << 8 | ip[3]) + 4);
  ip[2] = uint8_t(total >> 8), ip[3] = uint8_t(total);
  ip[10] = ip[11] = 0;
  const uint16_t cs = wire::ipv4_checksum(ip, 24);
  ip[10] = uint8_t(cs >> 8), ip[11] = uint8_t(cs);
  return v;
}

Bytes without_udp_checksum(Bytes f) {
  f[wire::kEthSize + wire::kIpv4MinSize + 6] = 0;
  f[wire::kEthSize + wire::kIpv4MinSize + 7] = 0;
  return f;
}

Bytes padded(Bytes f) {
  f.resize(f.size() + 17, 0);
  return f;
}

void hand_made() {
  int k = 0;
  auto put = [&](const std::string& what, const Bytes& f) {
    char name[96];
    std::snprintf(name, sizeof name, "hand-%03d-%s.bin", k++, what.c_str());
    write_file("parse", name, f);
  };
  // CONTRIBs of every dtype, RESULTs and rounded PARTIALs with and without a sideband.
  for (int c = 1; c <= kFormatCount; ++c) {
    const Format dt = Format(c);
    const Format out = is_float(dt) ? dt : Format::INT32;
    put(std::string("contrib-") + name(dt), frame(header(wire::Kind::CONTRIB, dt, out, 4), elements(dt, 4, c)));
    wire::Header r = header(wire::Kind::RESULT, dt, out, 3);
    r.flags |= wire::hflag::SIDEBAND;
    r.status = flag::OVERFLOW;
    Bytes body = elements(out, 3, 100 + c);
    body.insert(body.end(), {0, 0, flag::OVERFLOW});
    put(std::string("result-sideband-") + name(out), frame(r, body, kSwitch, kRank));
    wire::Header p = header(wire::Kind::PARTIAL, dt, out, 5);
    p.transport = PartialTransport::ROUNDED;
    put(std::string("partial-rounded-") + name(out), frame(p, elements(out, 5, 200 + c), kSwitch, kSwitch));
    p.flags |= wire::hflag::SIDEBAND;
    Bytes pb = elements(out, 5, 300 + c);
    pb.insert(pb.end(), {0, flag::OVERFLOW, flag::INVALID, flag::NAN_INPUT, 7});
    put(std::string("partial-rounded-sideband-") + name(out), frame(p, pb, kSwitch, kSwitch));
  }
  // The worked example's CONTRIB and its variants.
  wire::Header h = header(wire::Kind::CONTRIB, Format::FP32, Format::FP32, 4);
  const Bytes ex = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0, 0x00, 0x00, 0x80, 0x33, 0xe6, 0xb1, 0x61, 0x7f};
  const Bytes base = frame(h, ex);
  put("contrib-example", base);
  put("contrib-vlan", with_vlan(base, 100));
  put("contrib-ip-options", with_ip_options(base));
  put("contrib-no-udp-checksum", without_udp_checksum(base));
  put("contrib-padded", padded(base));
  put("contrib-vlan-options", with_vlan(with_ip_options(base), 4095));
  h.flags = wire::hflag::RETRANSMIT;
  put("contrib-retransmit", frame(h, ex));
  // NACKs: every reason, with an echoed (unchecked) descriptor.
  for (uint8_t r = 1; r <= wire::kNackReasonCount; ++r) {
    wire::Header n = header(wire::Kind::NACK, Format::FP32, Format::FP32, 0);
    n.status = r;
    n.sender = 1;
    put("nack-" + std::string(wire::name(wire::NackReason(r))), frame(n, {}, kSwitch, kRank));
  }
  // OP_ABANDONED with what it may carry: terms arrived and the bitmap of the members missing (rank 1 of 2).
  wire::Header ab = header(wire::Kind::NACK, Format::FP32, Format::FP32, 0);
  ab.status = uint8_t(wire::NackReason::OP_ABANDONED);
  ab.sender = 1;
  ab.terms = 1;
  put("nack-op_abandoned-bitmap", frame(ab, {0x02}, kSwitch, kRank));
  // Sessions: a JOIN (nonce in op, no descriptor) and a JOINED COMPLETE with its bitmap (ranks 0 and 1 of 2).
  wire::Header jn = header(wire::Kind::JOIN, Format(0), Format(0), 0);
  jn.policy = Policy(0);
  jn.encoding = wire::Encoding(0);
  jn.transport = PartialTransport(0);
  jn.exceptions = Exceptions(0);
  jn.op = 0x1234ABCD;
  jn.chunk = 0;
  jn.terms = 0;
  jn.count = 0;
  jn.flags = 0;
  put("join", frame(jn, {}));
  wire::Header jd = jn;
  jd.kind = wire::Kind::JOINED;
  jd.chunk = 42;
  jd.terms = 2;
  jd.status = wire::jstatus::COMPLETE;
  put("joined-complete", frame(jd, {0x03}, kSwitch, kRank));
  // Job pools: ALLOC, ALLOCATED (slot quota 256, idle timeout 30000 ms), LEAVE and LEFT.
  put("alloc", frame(wire::alloc_header(1000, 0xCAFEF00D, 0, 4), {}));
  const auto ab8 = wire::allocated_body(wire::AllocatedBody{256, 30000});
  put("allocated",
      frame(wire::allocated_header(1003, 0xCAFEF00D, 1000, 1, 4, 2), Bytes(ab8.begin(), ab8.end()), kSwitch, kRank));
  put("leave", frame(wire::leave_header(1003, 0x1234ABCD, 2), {}));
  put("left", frame(wire::left_header(1003, 0x1234ABCD, 2, 4, 3), {}, kSwitch, kRank));
  // Kulisch partials: one fragment, then the same chunk cut into small fragments.
  const auto zoo = lane_zoo();
  for (const auto& f : kulisch_frames(zoo, wire::max_body(9000), Format::FP32)) put("kulisch-one", f);
  int j = 0;
  for (const auto& f : kulisch_frames(zoo, wire::kFragmentHeader + kMaxLaneBytes + 8, Format::FP32))
    put("kulisch-frag" + std::to_string(j++), f);
  std::vector<LaneExact> many(600, lane(0, 0x3F8000, 149));
  for (size_t i = 0; i < many.size(); i += 7) many[i] = lane(0, -int64_t(i) - 1, int(i % 200));
  j = 0;
  for (const auto& f : kulisch_frames(many, wire::max_body(1500), Format::FP32))
    put("kulisch-chunk" + std::to_string(j++), f);
  for (const auto& f : kulisch_frames({lane(side::NEG_ZERO_ONLY), lane(0, 7)}, wire::max_body(1500), Format::E4M3FN))
    put("kulisch-e4m3fn", f);
  for (const auto& f : kulisch_frames({lane(0, -300), lane(0, 65535 * 127)}, wire::max_body(1500), Format::INT8))
    put("kulisch-int8", f);
  // Queries: the example CONTRIB's QUERY, a STATUS HELD with the bitmap of the member lacking (rank 1 of 2),
  // and a STATUS MISSING with no slot (terms 0, no body).
  const wire::Header q = wire::query_header(header(wire::Kind::CONTRIB, Format::FP32, Format::FP32, 4));
  put("query", frame(q, {}));
  put("status-held-bitmap", frame(wire::status_header(q, 1, true, 1), {0x02}, kSwitch, kRank));
  put("status-missing", frame(wire::status_header(q, 1, false, 0), {}, kSwitch, kRank));
}

void partial_seeds() {
  const auto zoo = lane_zoo();
  int k = 0;
  auto put = [&](uint8_t sel, const std::vector<LaneExact>& lanes) {
    Bytes b = {sel};
    const Bytes r = records(lanes);
    b.insert(b.end(), r.begin(), r.end());
    char name[64];
    std::snprintf(name, sizeof name, "seed-%03d.bin", k++);
    write_file("partial", name, b);
  };
  put(0x00, zoo);
  for (size_t i = 0; i < zoo.size(); ++i) put(uint8_t(i * 13), {zoo[i]});
  put(0x11, {lane(0, 1), lane(0, -1), lane(side::NEG_ZERO_ONLY)});
  put(0x23, {lane(0, 0x7F, 0), lane(0, 0x1, 16)});
  put(0x48, {lane(0, 100), lane(0, -100)});
  put(0x89, {lane(0, 0x7FFFFFFF), lane(0, -0x80000000LL)});
  // Broken records, so the error paths start covered.
  write_file("partial", "broken-truncated.bin", {0x00, 0x00, 0x02, 0x01});
  write_file("partial", "broken-reserved.bin", {0x00, 0x40, 0x00, 0x00});
  write_file("partial", "broken-noncanonical.bin", {0x00, 0x00, 0x02, 0x00, 0x00, 0x01});
  write_file("partial", "broken-badlength.bin", {0x00, 0x00, 0x2F, 0x01, 0x01});
  write_file("partial", "broken-special.bin", {0x00, 0x01, 0x01, 0x00, 0x05});
}

// The host collectives' partial messages (fuzz_message: byte 0 the op as
// fuzz_message.cpp reads it, byte 1 the lane count, byte 2 the encoding, then
// the payload): each encoding made by encode_partial from real states.
void message_seeds() {
  int k = 0;
  auto put = [&](uint8_t sel, uint32_t n, const Bytes& msg) {
    Bytes b = {sel, uint8_t(n == 300 ? 0 : n), msg[4]};
    b.insert(b.end(), msg.begin() + long(coll::kPartialHeader), msg.end());
    char name[64];
    std::snprintf(name, sizeof name, "seed-%03d.bin", k++);
    write_file("message", name, b);
  };
  std::mt19937_64 g(5);
  for (uint32_t n : {1u, 7u, 64u, 300u}) {
    for (int kind = 0; kind < 4; ++kind) {  // gradient, wide (pairs), specials (records), one rank (elements)
      coll::ReduceOp op;                    // fp32 -> fp32, KULISCH_FIXED, IEEE: byte 0 = 0
      const OpDesc d = coll::block_desc(op, 8, n);
      auto acc = make_accumulator(d);
      std::vector<float> x(n);
      for (int r = 0; r < (kind == 3 ? 1 : 4); ++r) {
        for (uint32_t i = 0; i < n; ++i) {
          const double m = 1.0 + double(g() >> 11) * 0x1p-53;
          const int e = kind == 1 ? int(g() % 60) - 30 : -10 - int(g() % 4);
          x[i] = float(std::ldexp(m, e) * ((g() & 1) ? -1 : 1));
          if (kind == 2 && i % 5 == 1) x[i] = (i % 10 == 1) ? INFINITY : -0.0f;
        }
        acc->add(reinterpret_cast<const uint8_t*>(x.data()), uint32_t(r));
      }
      std::vector<LaneExact> lanes;
      Bytes msg;
      coll::encode_partial(*acc, op, lanes, msg);
      put(0x00, n, msg);
    }
  }
}

uint32_t rd32(const uint8_t* p, bool swap) {
  const uint32_t v = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  return swap ? __builtin_bswap32(v) : v;
}

// Splits a libpcap capture (either byte order, micro- or nanosecond stamps) into one file per frame.
void split_capture(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  const Bytes all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (all.size() < 24) throw std::runtime_error(path + ": not a pcap file");
  const uint32_t magic = rd32(all.data(), false);
  bool swap;
  if (magic == 0xA1B2C3D4 || magic == 0xA1B23C4D)
    swap = false;
  else if (magic == 0xD4C3B2A1 || magic == 0x4D3CB2A1)
    swap = true;
  else
    throw std::runtime_error(path + ": not a pcap file");
  std::string base = path.substr(path.find_last_of('/') + 1);
  base = base.substr(0, base.rfind('.'));
  std::set<Bytes> seen;
  size_t at = 24, idx = 0;
  while (at + 16 <= all.size() && seen.size() < kPerCapture) {
    const uint32_t caplen = rd32(all.data() + at + 8, swap);
    at += 16;
    if (caplen > all.size() - at) break;
    Bytes fr(all.begin() + long(at), all.begin() + long(at + caplen));
    at += caplen;
    ++idx;
    if (!seen.insert(fr).second) continue;
    char name[160];
    std::snprintf(name, sizeof name, "%s-%05zu.bin", base.c_str(), idx);
    write_file("parse", name, fr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: seedgen OUTDIR [CAPTURE.pcap ...]\n");
    return 2;
  }
  g_out = argv[1];
  try {
    hand_made();
    partial_seeds();
    message_seeds();
    for (int i = 2; i < argc; ++i) split_capture(argv[i]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seedgen: %s\n", e.what());
    return 1;
  }
  std::printf("seedgen: %zu seed files in %s\n", g_written, g_out.c_str());
  return 0;
}
