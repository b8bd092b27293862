#include "reduce.hpp"

namespace prism::pipe {

ReducerWork::ReducerWork(const WorkContext& c)
    : red_(c.dir, c.slots, 1500, c.shard, c.result_mtu), prefetch_(c.prefetch) {}

// Cost per packet: the reducer's work (the accumulator add: see lib/arith).
void ReducerWork::serve(uint16_t, rte_mbuf** burst, unsigned n, uint64_t now_ns, Emitter& out) {
  if (prefetch_) prefetch_burst(burst, n);
  for (unsigned j = 0; j < n; ++j) {
    if (prefetch_ && j + 1 < n) prefetch_elements(burst[j + 1]);
    const Meta* mt = meta(burst[j]);
    red_.on_packet(mt->p, mt->v, now_ns, out);
  }
  rte_pktmbuf_free_bulk(burst, n);
}

ReduceStage::ReduceStage(uint32_t shard, std::unique_ptr<ShardWork> work, std::unique_ptr<Emitter> out,
                         std::vector<VoqInput> inputs, ArbiterMode mode, uint64_t seed, uint64_t tsc_hz, uint16_t ports)
    : shard_(shard),
      work_(std::move(work)),
      out_(std::move(out)),
      in_(std::move(inputs)),
      arb_(mode, uint32_t(in_.size()), seed + shard),
      tsc_hz_(tsc_hz),
      ns_per_tsc_(1e9 / double(tsc_hz)),
      served_(std::make_unique<Counter[]>(ports)),
      served_n_(ports) {
  if (const sw::Reducer* r = work_->reducer())
    for (const auto& [job, js] : r->job_stats()) snap_jobs_.emplace_back(job, js);
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

void ReduceStage::refresh_snapshot() {
  const sw::Reducer* r = work_->reducer();
  if (!r) return;
  seq_.fetch_add(1, std::memory_order_release);
  snap_ = r->stats();
  for (auto& [job, js] : snap_jobs_) js = r->job_stats().at(job);
  seq_.fetch_add(1, std::memory_order_release);
}

// A graceful stop: the runtime moved to `phase` (Runtime::check_drain).
void ReduceStage::on_phase(int phase) {
  if (phase >= 1 && seen_.load(std::memory_order_relaxed) < 1) work_->drain();
  if (phase >= 2) {
    work_->abandon_all(*out_);
    out_->flush();
  }
  refresh_snapshot();
  seen_.store(phase, std::memory_order_release);
}

// Cost per packet: the work's, plus one ring dequeue per burst. The arbiter
// decides which input ring is served first each pass: that is how arrival
// order is varied on purpose.
unsigned ReduceStage::poll(uint64_t now_tsc) {
  const uint64_t now_ns = uint64_t(double(now_tsc) * ns_per_tsc_);
  if (phase_) {
    const int phase = phase_->load(std::memory_order_acquire);
    if (phase != seen_.load(std::memory_order_relaxed)) [[unlikely]]
      on_phase(phase);
  }
  if (now_tsc >= next_tick_) {
    work_->tick(now_ns, *out_);
    next_tick_ = now_tsc + tsc_hz_ / 1000;
    c_.ticks.add();
    refresh_snapshot();
  }
  if (!out_->flush()) {  // TX full: stop taking work so RX backs up too
    c_.backpressured.add();
    return 0;
  }
  if (in_.empty()) return 0;
  unsigned moved = 0;
  for (const uint32_t i : arb_.pass()) {
    rte_mbuf* burst[kBurst];
    const unsigned n = rte_ring_dequeue_burst(in_[i].ring, reinterpret_cast<void**>(burst), kBurst, nullptr);
    if (!n) continue;
    serve(in_[i].port, burst, n, now_ns);
    moved += n;
    out_->flush();
  }
  return moved;
}

void ReduceStage::serve(uint16_t in_port, rte_mbuf** burst, unsigned n, uint64_t now_ns) {
  c_.bursts.add();
  c_.dequeued.add(n);
  if (in_port < served_n_) served_[in_port].add(n);
  work_->serve(in_port, burst, n, now_ns, *out_);
}

void ReduceStage::take(uint16_t in_port, rte_mbuf** burst, unsigned n, uint64_t now_tsc) {
  serve(in_port, burst, n, uint64_t(double(now_tsc) * ns_per_tsc_));
  out_->flush();
}

}  // namespace prism::pipe
