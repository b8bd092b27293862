// Seed corpus for fuzz_switch (scripts/fuzz.sh builds and runs this).
//
//   seedgen_switch OUTDIR [CAPTURE.pcap ...]
//
// Writes OUTDIR/<name> files in fuzz_switch's input language
// (switch_input.hpp): honest allreduces of every declared job and
// descriptor, retransmissions and queries before and after retention, the
// tree (JOINs through the leaf, PARTIALs up, RESULTs down, a lost PARTIAL
// retried), time-outs, pool jobs allocated, joined, used, left and reused,
// an idle reclaim, refusals from strangers and spoofs; and, from each capture
// given, its first contributions of three ranks re-addressed to job 7, as raw
// messages. The same as the unit suites' scenarios (test_switch, test_pool),
// so that coverage starts deep. File names are fixed: a rerun rewrites them.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "proto/packet.hpp"
#include "switch_input.hpp"

namespace {

using namespace fuzz::sw;  // NOLINT
using Bytes = std::vector<uint8_t>;

std::string g_out;
size_t g_written = 0;

void write(const std::string& name, const Writer& w) {
  const std::string path = g_out + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(w.b.data()), std::streamsize(w.b.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
  ++g_written;
}

// Job bytes (kJobs): 0 job 7, 1 job 8, 2 job 9, 3..5 pool A's ids 100..102, 6..7 pool B's 200..201.
constexpr uint8_t J7 = 0, J8 = 1, J9 = 2, P100 = 3, P101 = 4, P200 = 6;
constexpr uint8_t kRetransmit = 1, kLast = 2;

void declared() {
  for (uint8_t d = 0; d < kDescCount; ++d) {  // every descriptor, two ops, chunks 0 and 1
    Writer w;
    w.allreduce(J7, 0, 0, 3, d, 5).allreduce(J7, 0, 1, 2, d, 9).allreduce(J7, 1, 0, 0xF2, d, 1);
    w.allreduce(J8, 2, 0, 1, d, 7);
    write("declared-desc" + std::to_string(d), w);
  }
  Writer w;  // contributions one by one, a duplicate, retransmits while open, after completion, after expiry
  w.contrib(J7R1, J7, 3, 0, 0, kLast, 1).contrib(J7R1, J7, 3, 0, 0, kLast, 1).contrib(J7R0, J7, 3, 0, 0, kLast, 2);
  w.contrib(J7R0, J7, 3, 0, 0, kLast | kRetransmit, 2).query(J7R0, J7, 3, 0).query(J7R2, J7, 3, 0);
  w.contrib(J7R2, J7, 3, 0, 0, kLast, 3);  // completes
  w.contrib(J7R2, J7, 3, 0, 0, kLast | kRetransmit, 3).query(J7R1, J7, 3, 0).contrib(J7R1, J7, 3, 0, 0, kLast, 1);
  w.advance(150).contrib(J7R0, J7, 3, 0, 0, kLast | kRetransmit, 2).query(J7R0, J7, 3, 0).query(J7R0, J7, 4, 1);
  write("declared-retransmit-query", w);
  Writer a;  // a rank never sends: OP_ABANDONED, then late packets
  a.contrib(J7R0, J7, 5, 2, 1, kLast, 4).contrib(J7R2, J7, 5, 2, 1, kLast, 4).advance(200).advance(200);
  a.contrib(J7R1, J7, 5, 2, 1, kLast, 4).query(J7R0, J7, 5, 2, 1).contrib(J7R0, J7, 5, 2, 1, kRetransmit, 4);
  write("declared-abandon", a);
  Writer g;  // a graceful stop: op 6 in flight finishes (another chunk of it too), op 7 is refused, then give up
  g.contrib(J7R0, J7, 6, 0, 0, kLast, 1).contrib(LEAF_R2, J9, 6, 0).advance(254);
  g.contrib(J7R1, J7, 6, 0, 0, kLast, 1).contrib(J7R2, J7, 6, 0, 0, kLast, 1).contrib(J7R0, J7, 6, 1, 0, kLast, 1);
  g.contrib(J7R0, J7, 7, 0, 0, kLast, 1).allreduce(J9, 6, 1, 1, 0, 2).advance(255).deliver_all();
  write("graceful-stop", g);
  Writer q;  // job 8: its quota of 2 slots, a refused format, no UDP checksum (optional for it)
  q.contrib(J8R0, J8, 0, 0).contrib(J8R0, J8, 1, 0).contrib(J8R0, J8, 2, 0).contrib(J8R0, J8, 3, 0, 6);
  q.contrib(J8R1, J8, 0, 0, 0, kLast, 0, 0, 0, 0, 0, 1).contrib(J8R1, J8, 1, 0, 2).contrib(J8R1, J8, 2, 0);
  q.allreduce(J8, 4, 1, 0xF1, 2, 3);
  write("declared-quota-checksum", q);
  Writer m;  // descriptor mismatches, wrong groups and counts
  m.contrib(J7R0, J7, 6, 0, 0).contrib(J7R1, J7, 6, 0, 1).contrib(J7R1, J7, 6, 0, 0, kLast, 0, 1);
  m.contrib(J7R2, J7, 6, 0, 0, kLast, 0, 0, 0, 0, 0xE2).contrib(J7R2, J7, 6, 0, 0x80).query(J7R2, J7, 6, 0, 3);
  m.contrib(J7R2, J7, 6, 0);
  write("declared-mismatch", m);
  Writer f;  // a full shard: many open chunks
  for (uint8_t op = 0; op < 8; ++op)
    for (uint8_t c = 0; c < 3; ++c) f.contrib(J7R0, J7, op, c, 0, kLast, op);
  f.advance(250).advance(100);
  write("declared-full-table", f);
}

void spoofs() {
  Writer w;  // strangers, a spoofed MAC, a member on another port, a wrong sender, a broadcast MAC
  w.contrib(STRANGER, J7, 0, 0).contrib(SPOOF, J7, 0, 0).contrib(J7R0, J7, 0, 0, 0, kLast, 0, 0, 0xE1);
  w.contrib(J7R0, J7, 0, 0, 0, kLast, 0, 0, 0, 0xC1).contrib(J7R1, J8, 0, 0).contrib(J7R1, 0xF3, 0, 0);
  w.alloc(BCAST, 0, 1, 1).alloc(STRANGER, 0, 2, 1).alloc(15, 0, 3, 1).join(STRANGER, P100, 1);
  w.contrib(LEAF_STRANGER, J9, 0, 0).inject(STRANGER, 0, 1, J7, 0, 0, 0, 0, 0, 0, kLast, 0);
  w.leave(J7R0, J7, 1).join(J7R0, J7, 0).join(J7R0, J7, 1).join(J7R1, J7, 1).join(J7R2, J7, 1);
  w.advance(120).alloc(STRANGER, 0, 2, 1).alloc(STRANGER, 0, 2, 1);
  write("spoofs-strangers", w);
}

void tree() {
  Writer w;  // sessions through the leaf, then allreduces of job 9 in every transport
  w.join(J9R0, J9, 1).join(J9R1, J9, 2).join(LEAF_R2, J9, 3).join(LEAF_R3, J9, 4).deliver_all();
  w.allreduce(J9, 0, 0, 3, 0, 1).allreduce(J9, 0, 1, 0xF4, 0, 2).allreduce(J9, 1, 0, 2, 2, 3);
  w.allreduce(J9, 1, 1, 2, 3, 4).allreduce(J9, 2, 0, 1, 4, 5).allreduce(J9, 2, 1, 1, 1, 6);
  w.query(LEAF_R2, J9, 0, 0).contrib(LEAF_R3, J9, 0, 0, 0, kLast | kRetransmit, 2);
  write("tree-sessions-allreduce", w);
  Writer r;  // the leaf's PARTIAL is lost: it retries; the root's RESULT is lost: the retry gets it again
  r.contrib(LEAF_R2, J9, 3, 0).contrib(LEAF_R3, J9, 3, 0).drop(0).contrib(J9R0, J9, 3, 0).contrib(J9R1, J9, 3, 0);
  r.advance(60).deliver(0).drop(0).query(LEAF_R2, J9, 3, 0).advance(60).deliver_all();
  r.contrib(LEAF_R2, J9, 3, 0, 0, kLast | kRetransmit);
  write("tree-partial-retry", r);
  Writer p;  // the parent's RESULT injected from the parent's own port, and its JOINED
  p.contrib(LEAF_R2, J9, 4, 0).contrib(LEAF_R3, J9, 4, 0).drop(0);
  p.inject(PARENT, 0, 1, J9, 4, 0, 1, 0, 0, 0, kLast, 9).inject(PARENT, 0, 2, J9, 4, 0, 0, 0, 0, 0, 1, 0);
  p.inject(CHILD, 0, 0, J9, 5, 0, 2, 0, 0, 0, kLast, 3).contrib(J9R0, J9, 5, 0).contrib(J9R1, J9, 5, 0);
  write("tree-parent-inject", p);
  Writer t;  // the leaf's chunk times out waiting for its parent
  t.contrib(LEAF_R2, J9, 6, 1).advance(100).contrib(LEAF_R3, J9, 6, 1).advance(250).advance(100).deliver_all();
  write("tree-timeout", t);
}

void pools() {
  Writer w;  // pool A: a job of 2 up, two allreduces, a query, down; the id reused by a job of 3
  w.pool_up(0, 1, 1, 0).allreduce(P100, 0, 0, 1, 0, 1).allreduce(P100, 1, 0, 2, 1, 2).query(POOL_A, P100, 1, 0);
  w.pool_down(P100).pool_up(0, 2, 2, 4).allreduce(P100, 3, 0, 1, 0, 3).allreduce(P100, 4, 1, 1, 3, 4);
  w.pool_down(P100);
  write("pool-a-lifecycle", w);
  Writer r;  // pool A: full, ALLOC repeated, a JOIN race, LEAVE repeated, an idle reclaim
  r.pool_up(0, 1, 3, 0).pool_up(0, 2, 0, 8).pool_up(0, 3, 1, 12).alloc(POOL_A + 16, 0, 9, 1);
  r.alloc(POOL_A, 0, 0x41, 1).alloc(POOL_A, 0, 0x41, 1).join(POOL_A + 20, P101, 1, 0).join(POOL_A + 21, P101, 2, 0);
  r.leave(POOL_A + 8, P101, 0xFF).leave(POOL_A + 8, P101, 0xFF).advance(200).contrib(POOL_A + 12, 5, 0, 0);
  r.advance(250).advance(250).advance(100).contrib(POOL_A + 12, 5, 0, 0).alloc(POOL_A, 0, 0x42, 2);
  write("pool-a-full-reclaim", r);
  Writer b;  // pool B: a job of 3, a job of 65 (every rank bound), allreduces, down, reuse
  b.pool_up(1, 1, 2, 0).allreduce(P200, 0, 0, 1, 1, 1).pool_up(1, 2, 4, 8).allreduce(P200 + 1, 0, 0, 1, 0, 2);
  b.pool_down(P200).pool_down(P200 + 1).advance(120).pool_up(1, 3, 3, 16).allreduce(P200, 5, 0, 2, 1, 3);
  b.pool_down(P200);
  write("pool-b-large", b);
  Writer o;  // a pooled chunk left open when its job is released, then the id taken again
  o.pool_up(0, 5, 1, 0).contrib(POOL_A, P100, 0, 0).pool_down(P100).advance(150).pool_up(0, 6, 1, 4);
  o.allreduce(P100, 1, 0, 1, 0, 5).pool_down(P100);
  write("pool-released-open-chunk", o);
}

// From a capture: the first contributions of three ranks re-addressed to
// job 7's ranks 0..2 (raw messages from their registered addresses).
void from_capture(const std::string& path, size_t index) {
  std::ifstream f(path, std::ios::binary);
  Bytes all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (all.size() < 24) return;
  Writer w;
  size_t taken = 0;
  for (size_t at = 24; at + 16 <= all.size() && taken < 3;) {
    uint32_t incl;
    std::memcpy(&incl, all.data() + at + 8, 4);  // little-endian pcap
    at += 16;
    if (at + incl > all.size()) break;
    const Bytes frame(all.begin() + long(at), all.begin() + long(at + incl));
    at += incl;
    prism::wire::Parsed p;
    if (prism::wire::parse(frame, prism::wire::PortRange(prism::wire::kDefaultPort, 64), &p) !=
        prism::wire::Refusal::OK)
      continue;
    if (p.h.kind != prism::wire::Kind::CONTRIB) continue;
    Bytes msg(frame.begin() + long(prism::wire::frame::header), frame.end());
    const uint8_t rank = uint8_t(taken);
    msg[prism::wire::off::job + 3] = 7;
    msg[prism::wire::off::job + 2] = msg[prism::wire::off::job + 1] = msg[prism::wire::off::job] = 0;
    msg[prism::wire::off::sender] = 0;
    msg[prism::wire::off::sender + 1] = rank;
    msg[prism::wire::off::group] = 0;
    msg[prism::wire::off::group + 1] = 3;
    w.raw_msg(uint8_t(J7R0 + rank), msg);
    ++taken;
  }
  w.query(J7R0, J7, 0, 0).advance(10);
  if (taken) write("capture-" + std::to_string(index), w);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: seedgen_switch OUTDIR [CAPTURE.pcap ...]\n");
    return 2;
  }
  g_out = argv[1];
  try {
    declared();
    spoofs();
    tree();
    pools();
    for (int i = 2; i < argc; ++i) from_capture(argv[i], size_t(i - 2));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seedgen_switch: %s\n", e.what());
    return 1;
  }
  std::printf("seedgen_switch: %zu seeds in %s\n", g_written, g_out.c_str());
  return 0;
}
