#include "stages.hpp"

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_hash.h>
#include <rte_jhash.h>
#include <rte_prefetch.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "arith/kernels.hpp"

namespace prism::pipe {

uint64_t fanout_flag() {
  static const uint64_t flag = [] {
    const rte_mbuf_dynflag desc{"prism_dynflag_fanout", 0};
    const int bit = rte_mbuf_dynflag_register(&desc);
    if (bit < 0)
      throw std::runtime_error(std::string("cannot register the mbuf flag for egress replication: ") +
                               rte_strerror(rte_errno));
    return uint64_t(1) << bit;
  }();
  return flag;
}

bool LinkWatch::up(uint16_t dpdk_port, uint64_t now_tsc) {
  if (now_tsc >= next_) {
    rte_eth_link link{};
    up_ = rte_eth_link_get_nowait(dpdk_port, &link) != 0 || link.link_status == RTE_ETH_LINK_UP;
    next_ = now_tsc + rte_get_tsc_hz() / 1000;
  }
  return up_;
}

// --- RX ---------------------------------------------------------------------

RxStage::RxStage(uint16_t cfg_port, uint16_t dpdk_port, const sw::Directory& dir, std::vector<rte_ring*> voq,
                 rte_ring* tx, rte_mempool* pool)
    : cfg_port_(cfg_port), dpdk_port_(dpdk_port), dir_(dir), voq_(std::move(voq)), tx_(tx), pool_(pool) {}

void RxStage::refuse(rte_mbuf* m, const wire::Parsed* p, sw::Drop why, bool nack) {
  c_.dropped[size_t(why)].add();
  if (nack && p) {
    // The sender is registered: tell it why (a small frame of its own, never a reflection).
    rte_mbuf* n = rte_pktmbuf_alloc(pool_);
    if (n) {
      wire::Header h = p->h;  // echoes the refused packet's job, op, chunk and codes
      h.magic = wire::kMagic;
      h.version = wire::kVersion;
      h.kind = wire::Kind::NACK;
      h.sender = dir_.config().id;
      h.terms = 0;
      h.count = 0;
      h.flags = 0;
      switch (why) {
        case sw::Drop::UNKNOWN_JOB: h.status = uint8_t(wire::NackReason::UNKNOWN_JOB); break;
        case sw::Drop::NOT_A_MEMBER:
        case sw::Drop::SPOOFED: h.status = uint8_t(wire::NackReason::NOT_A_MEMBER); break;
        default: h.status = uint8_t(wire::NackReason::MALFORMED);
      }
      auto* buf = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(n, wire::kFrameOverhead));
      wire::build(buf, wire::kFrameOverhead, dir_.self(cfg_port_), p->src, h, {});
      if (rte_ring_enqueue(tx_, n) == 0)
        c_.nacks.add();
      else
        rte_pktmbuf_free(n);
    }
  }
  rte_pktmbuf_free(m);
}

// Cost per packet: parse (~40 ns: headers, checksums over the header, not the
// payload's elements) + admit (two hash lookups) + one ring enqueue per burst.
unsigned RxStage::poll(uint64_t now_tsc) {
  // Backpressure: finish handing on the last burst before taking more (run
  // to completion: until the reducers' frames have TX room).
  if (pending_n_ && !hand_on()) {
    c_.polls_skipped.add();
    return 0;
  }
  for (ReduceStage* r : direct_)
    if (!r->ready()) {
      c_.polls_skipped.add();
      return 0;
    }

  if (!link_.up(dpdk_port_, now_tsc)) return 0;
  rte_mbuf* burst[kBurst];
  const uint16_t n = rte_eth_rx_burst(dpdk_port_, 0, burst, kBurst);
  if (n == 0) return 0;
  last_rx_.store(now_tsc, std::memory_order_relaxed);
  c_.packets.add(n);
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = burst[i];
    c_.bytes.add(rte_pktmbuf_pkt_len(m));
    if (m->nb_segs != 1) {  // jumbo frames need a data room that holds them whole
      c_.multi_segment.add();
      refuse(m, nullptr, sw::Drop::MALFORMED, false);
      continue;
    }
    Meta* mt = meta(m);
    // A device with RX checksum offload that found both sums good says so: they are not summed again.
    const bool sums_good = (m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD &&
                           (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD;
    if (sums_good) c_.hw_checksums.add();
    const wire::Refusal r = wire::parse({rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m)},
                                        dir_.config().udp_port, &mt->p, true, sums_good);
    if (r != wire::Refusal::OK) {
      c_.refused[size_t(r)].add();
      // Past the UDP checks it was PRISM traffic, however broken, from a source
      // whose address checked out: a registered sender is told (NACK MALFORMED).
      const bool ours = r > wire::Refusal::WRONG_PORT;
      const bool foreign = r == wire::Refusal::NOT_IPV4 || r == wire::Refusal::NOT_UDP ||
                           r == wire::Refusal::WRONG_PORT || r == wire::Refusal::SHORT_FRAME;
      refuse(m, &mt->p, foreign ? sw::Drop::NOT_FOR_US : sw::Drop::MALFORMED, ours && dir_.registered(mt->p.src));
      continue;
    }
    mt->v = sw::admit(dir_, mt->p, cfg_port_);
    if (!mt->v.ok) {
      refuse(m, &mt->p, mt->v.why, mt->v.nack);
      continue;
    }
    pending_shard_[pending_n_] =
        uint16_t(voq_.size() == 1 ? 0 : sw::shard_of({mt->p.h.job, mt->p.h.op, mt->p.h.chunk}, uint32_t(voq_.size())));
    pending_[pending_n_++] = m;
  }
  if (direct_.empty())
    hand_on();  // what does not fit waits for the next poll
  else
    hand_direct(now_tsc);
  return n;
}

void RxStage::hand_direct(uint64_t now_tsc) {
  for (uint16_t at = 0; at < pending_n_;) {
    const uint16_t shard = pending_shard_[at];
    uint16_t end = uint16_t(at + 1);
    while (end < pending_n_ && pending_shard_[end] == shard) ++end;
    direct_[shard]->take(direct_input_, pending_ + at, unsigned(end - at), now_tsc);
    at = end;
  }
  c_.enqueued.add(pending_n_);
  pending_n_ = pending_at_ = 0;
}

// One ring operation per run of packets for the same shard: a ring's head and
// tail move once per burst, not once per packet (they are shared with the
// reducer's lcore).
bool RxStage::hand_on() {
  while (pending_at_ < pending_n_) {
    const uint16_t shard = pending_shard_[pending_at_];
    uint16_t end = uint16_t(pending_at_ + 1);
    while (end < pending_n_ && pending_shard_[end] == shard) ++end;
    const unsigned put = rte_ring_enqueue_burst(voq_[shard], reinterpret_cast<void**>(pending_ + pending_at_),
                                                unsigned(end - pending_at_), nullptr);
    c_.enqueued.add(put);
    pending_at_ = uint16_t(pending_at_ + put);
    if (pending_at_ < end) return false;  // the ring is full
  }
  pending_n_ = pending_at_ = 0;
  return true;
}

// --- Emitter ----------------------------------------------------------------

rte_mbuf* Emitter::payload_for(const std::shared_ptr<const std::vector<uint8_t>>& body) {
  if (body == last_body_ && last_payload_) return last_payload_;
  if (last_payload_) rte_pktmbuf_free(last_payload_);  // drop our reference; clones keep theirs
  last_payload_ = nullptr;
  last_body_ = nullptr;
  rte_mbuf* p = rte_pktmbuf_alloc(pool_);
  if (!p) return nullptr;
  void* d = rte_pktmbuf_append(p, uint16_t(body->size()));
  if (!d) {
    rte_pktmbuf_free(p);
    return nullptr;
  }
  std::memcpy(d, body->data(), body->size());
  payload_copies.add();
  last_body_ = body;
  last_payload_ = p;
  return p;
}

uint32_t Emitter::sum_for(const std::shared_ptr<const std::vector<uint8_t>>& body) {
  if (body->empty()) return 0;
  if (body != sum_body_) {
    sum_body_ = body;
    sum_ = wire::body_sum16(*body);
  }
  return sum_;
}

void Emitter::queue_slow(uint16_t port, rte_mbuf* m) {
  if (port >= pending_.size() || !tx_[port]) {  // no such port: count and drop
    rte_pktmbuf_free(m);
    alloc_failures.add();
    return;
  }
  pending_[port].push_back(m);
  ++pending_n_;
  frames.add();
}

bool Emitter::build(rte_mbuf* m, const sw::Dest& d, const wire::SharedPart& sh,
                    const std::shared_ptr<const std::vector<uint8_t>>& body, uint16_t ip_id) {
  const bool whole = body->empty() || d.port >= copies_.size() || copies_[d.port] != Copies::CHAINED;
  const size_t n = wire::kFrameOverhead + (whole ? body->size() : 0);
  auto* buf = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, uint16_t(n)));
  if (!buf || !wire::put_headers(buf, d.hdr, sh, ip_id)) {
    rte_pktmbuf_free(m);
    alloc_failures.add();
    return false;
  }
  if (whole) {
    if (!body->empty()) std::memcpy(buf + wire::kFrameOverhead, body->data(), body->size());
  } else {
    rte_mbuf* payload = payload_for(body);
    rte_mbuf* clone = payload ? rte_pktmbuf_clone(payload, pool_) : nullptr;  // indirect: shares the data
    if (!clone || rte_pktmbuf_chain(m, clone) != 0) {
      if (clone) rte_pktmbuf_free(clone);
      rte_pktmbuf_free(m);
      alloc_failures.add();
      return false;
    }
  }
  queue(d.port, m);
  return true;
}

void Emitter::send(sw::Out&& o) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (!m) {
    alloc_failures.add();
    return;
  }
  build(m, sw::Dest{o.port, o.src, o.dst, wire::header_template(o.src, o.dst)},
        wire::share(o.h, o.body->size(), sum_for(o.body)), o.body, ip_id_++);
}

void Emitter::send_all(const wire::Header& h, const std::shared_ptr<const std::vector<uint8_t>>& body,
                       std::span<const sw::Dest> to) {
  const wire::SharedPart sh = wire::share(h, body->size(), sum_for(body));
  const uint16_t id0 = ip_id_;
  ip_id_ = uint16_t(ip_id_ + to.size());
  if (!egress_ || to.size() > 0xFFFF) {  // every copy from here (Replication's indices are 16-bit)
    rte_mbuf* ms[kBurst];
    for (size_t at = 0; at < to.size(); at += kBurst) {
      const unsigned n = unsigned(std::min<size_t>(kBurst, to.size() - at));
      if (rte_pktmbuf_alloc_bulk(pool_, ms, n) != 0)  // all or nothing: then one at a time
        for (unsigned j = 0; j < n; ++j) ms[j] = rte_pktmbuf_alloc(pool_);
      for (unsigned j = 0; j < n; ++j)
        if (ms[j])
          build(ms[j], to[at + j], sh, body, uint16_t(id0 + at + j));
        else
          alloc_failures.add();
    }
    return;
  }
  // A port whose TX stage replicates gets one frame, its first destination's,
  // carrying the fan-out; the others get every copy from here.
  constexpr uint8_t kLost = 2;  // port_seen_: the port's frame could not be made (1: it was)
  auto made_here = [&](const sw::Dest& d) {
    if (!replicated_at_egress(d.port)) return true;
    if (port_seen_[d.port]) return false;
    port_seen_[d.port] = 1;
    return true;
  };
  std::fill(port_seen_.begin(), port_seen_.end(), 0);
  size_t need = 0;
  for (const sw::Dest& d : to) need += made_here(d);
  std::fill(port_seen_.begin(), port_seen_.end(), 0);
  rte_mbuf* ms[kBurst];
  unsigned have = 0, used = 0;
  for (size_t j = 0; j < to.size(); ++j) {
    const sw::Dest& d = to[j];
    if (!made_here(d)) {  // the port's TX stage makes it, unless the port's frame was lost
      if (port_seen_[d.port] == kLost)
        alloc_failures.add();
      else
        frames.add();
      continue;
    }
    if (used == have) {  // buffers for up to the rest, in one allocation
      have = unsigned(std::min<size_t>(kBurst, need));
      need -= have;
      used = 0;
      if (rte_pktmbuf_alloc_bulk(pool_, ms, have) != 0)  // all or nothing: then one at a time
        for (unsigned k = 0; k < have; ++k) ms[k] = rte_pktmbuf_alloc(pool_);
    }
    rte_mbuf* m = ms[used++];
    if (!m) {
      alloc_failures.add();
      if (replicated_at_egress(d.port)) port_seen_[d.port] = kLost;
      continue;
    }
    if (replicated_at_egress(d.port)) {
      Replication& f = meta(m)->f;
      f.dests = to.data();
      f.sh = sh;
      f.n = uint16_t(to.size());
      f.first = uint16_t(j);
      f.ip_id = id0;
      m->ol_flags |= fanout_flag_;
    }
    if (!build(m, d, sh, body, uint16_t(id0 + j)) && replicated_at_egress(d.port)) port_seen_[d.port] = kLost;
  }
}

bool Emitter::flush() {
  if (pending_n_ == 0) return true;
  for (size_t port = 0; port < pending_.size(); ++port) {
    auto& q = pending_[port];
    if (q.empty()) continue;
    const unsigned put =
        port < direct_tx_.size() && direct_tx_[port]
            ? direct_tx_[port]->send(q.data(), unsigned(q.size()))
            : rte_ring_enqueue_burst(tx_[port], reinterpret_cast<void**>(q.data()), unsigned(q.size()), nullptr);
    q.erase(q.begin(), q.begin() + long(put));
    pending_n_ -= put;
  }
  if (last_payload_ && pending_n_ == 0) {  // the fan-out is queued: release our reference
    rte_pktmbuf_free(last_payload_);
    last_payload_ = nullptr;
    last_body_ = nullptr;
  }
  return pending_n_ == 0;
}

// --- Reduce -----------------------------------------------------------------

namespace {

// The shard's slot index on DPDK's hash: (job, op, chunk) -> slot. Only its
// own lcore touches it, so no locking (no RTE_HASH_EXTRA_FLAGS_MULTI_WRITER_ADD).
class RteHashIndex final : public sw::SlotIndex {
 public:
  RteHashIndex(uint32_t shard, uint32_t entries) {
    const std::string name = "prism_slots_" + std::to_string(shard);
    rte_hash_parameters p{};
    p.name = name.c_str();
    p.entries = std::max<uint32_t>(entries * 2, 64);  // headroom: cuckoo tables fill before 100%
    p.key_len = sizeof(sw::SlotKey);
    p.hash_func = rte_jhash;
    p.socket_id = int(rte_socket_id());
    h_ = rte_hash_create(&p);
    if (!h_) throw std::runtime_error("cannot create the slot hash " + name + ": " + rte_strerror(rte_errno));
  }
  ~RteHashIndex() override { rte_hash_free(h_); }
  int32_t find(const sw::SlotKey& k) const override {
    void* v;
    return rte_hash_lookup_data(h_, &k, &v) < 0 ? -1 : int32_t(reinterpret_cast<intptr_t>(v));
  }
  bool insert(const sw::SlotKey& k, int32_t slot) override {
    return rte_hash_add_key_data(h_, &k, reinterpret_cast<void*>(intptr_t(slot))) == 0;
  }
  void erase(const sw::SlotKey& k) override { rte_hash_del_key(h_, &k); }

 private:
  rte_hash* h_ = nullptr;
};

}  // namespace

ReduceStage::ReduceStage(uint32_t shard, const sw::Directory& dir, std::vector<rte_ring*> inputs,
                         std::vector<uint16_t> in_ports, std::vector<rte_ring*> tx_by_port, std::vector<Copies> copies,
                         rte_mempool* pool, Arbiter mode, uint64_t seed, uint32_t slots, uint64_t tsc_hz,
                         Baseline baseline)
    : shard_(shard),
      in_(std::move(inputs)),
      in_port_(std::move(in_ports)),
      emitter_(std::move(tx_by_port), pool, std::move(copies)),
      red_(dir, slots, std::make_unique<RteHashIndex>(shard, slots)),
      mode_(mode),
      baseline_(baseline),
      rng_(seed + shard),
      tsc_hz_(tsc_hz),
      ns_per_tsc_(1e9 / double(tsc_hz)) {
  served_ = std::make_unique<Counter[]>(in_.size());
  for (const auto& [job, js] : red_.job_stats()) snap_jobs_.emplace_back(job, js);
  order_.resize(in_.size());
  for (uint32_t i = 0; i < order_.size(); ++i) order_[i] = i;
  if (mode_ == Arbiter::REVERSE) std::reverse(order_.begin(), order_.end());
}

const char* ReduceStage::mode_name() const {
  return mode_ == Arbiter::RANDOM ? "random" : mode_ == Arbiter::REVERSE ? "reverse" : "round_robin";
}

sw::ReducerStats ReduceStage::snapshot(std::vector<std::pair<uint32_t, sw::JobStats>>* jobs) const {
  for (;;) {
    const uint32_t s0 = seq_.load(std::memory_order_acquire);
    if (s0 & 1) continue;
    sw::ReducerStats s = snap_;
    if (jobs) *jobs = snap_jobs_;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq_.load(std::memory_order_relaxed) == s0) return s;
  }
}

// Cost per packet: the reducer's work (the accumulator add: see lib/arith)
// plus one ring dequeue per burst. The arbiter decides which input ring is
// served first each pass: that is how arrival order is varied on purpose.
unsigned ReduceStage::poll(uint64_t now_tsc) {
  const uint64_t now_ns = uint64_t(double(now_tsc) * ns_per_tsc_);
  if (now_tsc >= next_tick_) {
    red_.tick(now_ns, emitter_);
    next_tick_ = now_tsc + tsc_hz_ / 1000;
    c_.ticks.add();
    seq_.fetch_add(1, std::memory_order_release);
    snap_ = red_.stats();
    for (auto& [job, js] : snap_jobs_) js = red_.job_stats().at(job);
    seq_.fetch_add(1, std::memory_order_release);
  }
  if (!emitter_.flush()) {  // TX rings full: stop taking work so RX backs up too
    c_.backpressured.add();
    return 0;
  }
  if (mode_ == Arbiter::RANDOM) std::shuffle(order_.begin(), order_.end(), rng_);
  unsigned moved = 0;
  const uint32_t n_in = uint32_t(in_.size());
  for (uint32_t k = 0; k < n_in; ++k) {
    const uint32_t i = mode_ == Arbiter::ROUND_ROBIN ? (next_ + k) % n_in : order_[k];
    rte_mbuf* burst[kBurst];
    const unsigned n = rte_ring_dequeue_burst(in_[i], reinterpret_cast<void**>(burst), kBurst, nullptr);
    if (!n) continue;
    serve(i, burst, n, now_ns);
    moved += n;
    emitter_.flush();
  }
  next_ = (next_ + 1) % std::max<uint32_t>(1, n_in);
  return moved;
}

// One burst from input `input`: the reducer's work, then the mbufs freed.
void ReduceStage::serve(uint32_t input, rte_mbuf** burst, unsigned n, uint64_t now_ns) {
  c_.bursts.add();
  c_.dequeued.add(n);
  served_[input].add(n);
  if (baseline_ != Baseline::NONE) {
    if (baseline_ == Baseline::IDEAL) ideal(burst, n);
    // The ring says where the packets came in: forward-only does not touch
    // the mbufs on this lcore (each line read here is one RX must take back).
    for (unsigned j = 0; j < n; ++j) emitter_.forward(in_port_[input], burst[j]);
  } else {
    prefetch_burst(burst, n);
    for (unsigned j = 0; j < n; ++j) {
      if (j + 1 < n) prefetch_elements(burst[j + 1]);
      Meta* mt = meta(burst[j]);
      red_.on_packet(mt->p, mt->v, now_ns, emitter_);
    }
    rte_pktmbuf_free_bulk(burst, n);
  }
}

// The packets were written on the RX lcore: fetch their metadata, and both
// lines of each mbuf's own header (the bulk free reads the reference count,
// segments and pool), then the first packet's elements; serve() fetches
// each next packet's elements while one is added (hides the cross-core misses).
void ReduceStage::prefetch_burst(rte_mbuf** burst, unsigned n) const {
  if (!prefetch_ || n == 0) return;
  for (unsigned k = 0; k < n; ++k) {
    rte_prefetch0(meta(burst[k]));
    rte_prefetch0(burst[k]);
    rte_prefetch0(&burst[k]->cacheline1);
  }
  prefetch_elements(burst[0]);
}

void ReduceStage::prefetch_elements(rte_mbuf* m) const {
  if (!prefetch_) return;
  const Meta* mt = meta(m);
  const uint8_t* p = mt->p.payload;
  for (size_t off = 0; off < mt->p.payload_len; off += RTE_CACHE_LINE_SIZE) rte_prefetch0(p + off);
}

// Baseline::IDEAL (see stages.hpp): the add and the result body, with the
// same prefetching as the reducer's own path. Not a switch: the elements it
// writes are the running sum of what this stage has seen since rank 0's last
// contribution.
void ReduceStage::ideal(rte_mbuf** burst, unsigned n) {
  const Kernels& k = best_kernels();
  prefetch_burst(burst, n);
  for (unsigned j = 0; j < n; ++j) {
    if (j + 1 < n) prefetch_elements(burst[j + 1]);
    const wire::Parsed& p = meta(burst[j])->p;
    const Format f = p.h.dtype;
    if (!is_float(f) || p.h.encoding != wire::Encoding::DTYPE) continue;
    const uint32_t count = p.h.count;
    if (ideal_acc_.size() < count) ideal_acc_.resize(count, 0.0f);
    // Rank 0's contribution starts the sum again, as an op's first term
    // starts its slot: the lanes hold sums of about R terms, in range.
    if (p.h.sender == 0) std::fill_n(ideal_acc_.begin(), count, 0.0f);
    auto* body = const_cast<uint8_t*>(p.payload);
    if (f == Format::FP32) {
      k.add_f32_out(ideal_acc_.data(), body, body, count);  // one pass: add, then the sum over the elements
    } else {
      k.add_f32(f, ideal_acc_.data(), body, count);
      k.round_f32(f, ideal_acc_.data(), count, body);  // false (a special or an overflow) leaves garbage: fine here
    }
  }
}

void ReduceStage::take(uint32_t input, rte_mbuf** burst, unsigned n, uint64_t now_tsc) {
  serve(input, burst, n, uint64_t(double(now_tsc) * ns_per_tsc_));
  emitter_.flush();
}

// --- TX ---------------------------------------------------------------------

uint16_t TxStage::burst(rte_mbuf** m, uint16_t k) {
  if (linearize_)
    for (uint16_t i = 0; i < k; ++i)
      if (m[i]->nb_segs > 1 && rte_pktmbuf_linearize(m[i]) != 0) c_.retries.add();
  uint32_t len[kBurst];
  for (uint16_t i = 0; i < k; ++i) len[i] = rte_pktmbuf_pkt_len(m[i]);  // before the device may free them
  const uint16_t sent = rte_eth_tx_burst(dpdk_port_, 0, m, k);
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < sent; ++i) bytes += len[i];
  c_.bytes.add(bytes);
  c_.packets.add(sent);
  return sent;
}

TxStage::TxStage(uint16_t cfg_port, uint16_t dpdk_port, rte_ring* ring, bool linearize, bool replicates,
                 rte_mempool* pool)
    : cfg_port_(cfg_port),
      dpdk_port_(dpdk_port),
      ring_(ring),
      linearize_(linearize),
      replicates_(replicates),
      pool_(pool),
      fanout_flag_(fanout_flag()) {}

TxStage::~TxStage() {
  if (pending_at_ < pending_n_) rte_pktmbuf_free_bulk(pending_ + pending_at_, unsigned(pending_n_ - pending_at_));
  if (in_at_ < in_n_) rte_pktmbuf_free_bulk(in_ + in_at_, unsigned(in_n_ - in_at_));
  if (fanout_) rte_pktmbuf_free(fanout_);
}

uint16_t TxStage::copies(rte_mbuf** out, uint16_t room) {
  const Replication& f = meta(fanout_)->f;
  const uint8_t* from = rte_pktmbuf_mtod(fanout_, const uint8_t*);
  const uint16_t len = rte_pktmbuf_data_len(fanout_);
  uint16_t k = 0;
  while (k < room && fanout_next_ < f.n) {
    const sw::Dest& d = f.dests[fanout_next_];
    const uint16_t i = fanout_next_++;
    if (d.port != cfg_port_) continue;
    rte_mbuf* c = rte_pktmbuf_alloc(pool_);
    auto* buf = c ? reinterpret_cast<uint8_t*>(rte_pktmbuf_append(c, len)) : nullptr;
    if (!buf || !wire::put_headers(buf, d.hdr, f.sh, uint16_t(f.ip_id + i))) {
      if (c) rte_pktmbuf_free(c);
      c_.alloc_failures.add();
      continue;
    }
    std::memcpy(buf + wire::kFrameOverhead, from + wire::kFrameOverhead, len - wire::kFrameOverhead);
    c_.copies.add();
    out[k++] = c;
  }
  if (fanout_next_ >= f.n) {
    rte_pktmbuf_free(fanout_);  // our reference: the device holds its own while it sends the frame
    fanout_ = nullptr;
  }
  return k;
}

uint16_t TxStage::fill(rte_mbuf** out) {
  if (!replicates_)  // the ring's frames as they are
    return uint16_t(rte_ring_dequeue_burst(ring_, reinterpret_cast<void**>(out), kBurst, nullptr));
  uint16_t n = 0;
  while (n < kBurst) {
    if (fanout_) {
      n = uint16_t(n + copies(out + n, uint16_t(kBurst - n)));
      continue;  // full, or the fan-out is done
    }
    if (in_at_ == in_n_) {
      in_n_ = uint16_t(rte_ring_dequeue_burst(ring_, reinterpret_cast<void**>(in_), kBurst, nullptr));
      in_at_ = 0;
      if (!in_n_) break;
    }
    rte_mbuf* m = in_[in_at_++];
    if (m->ol_flags & fanout_flag_) {  // the first destination's frame goes first; its copies follow
      m->ol_flags &= ~fanout_flag_;
      rte_mbuf_refcnt_update(m, 1);
      fanout_ = m;
      fanout_next_ = uint16_t(meta(m)->f.first + 1);
    }
    out[n++] = m;
  }
  return n;
}

unsigned TxStage::send(rte_mbuf** m, unsigned n) {
  // The ring's frames first; none while the link is down.
  if (pending_at_ < pending_n_ || in_at_ < in_n_ || fanout_ || !link_.last()) return 0;
  unsigned done = 0;
  while (done < n) {
    const uint16_t k = uint16_t(std::min<unsigned>(kBurst, n - done));
    const uint16_t sent = burst(m + done, k);
    done += sent;
    if (sent < k) {
      c_.retries.add();
      break;
    }
  }
  return done;
}

unsigned TxStage::poll(uint64_t now_tsc) {
  if (!link_.up(dpdk_port_, now_tsc)) return 0;
  // Several bursts a pass while the ring holds them: taking one burst a pass
  // against RX's one never wins back a pass that found the ring empty, so
  // the ring would stay full, and every frame in it holds a buffer out of
  // the cache (a working set of ring size x data room).
  unsigned total = 0;
  for (unsigned b = 0; b < kTxBurstsPerPoll; ++b) {
    if (pending_at_ == pending_n_) {
      pending_n_ = fill(pending_);
      pending_at_ = 0;
      if (!pending_n_) break;
    }
    const uint16_t want = uint16_t(pending_n_ - pending_at_);
    const uint16_t sent = burst(pending_ + pending_at_, want);
    total += sent;
    pending_at_ = uint16_t(pending_at_ + sent);
    if (pending_at_ < pending_n_) {  // the device is full: the rest next pass
      c_.retries.add();
      break;
    }
    pending_n_ = pending_at_ = 0;
    if (want < kBurst) break;  // the ring had no more
  }
  return total;
}

}  // namespace prism::pipe
