#include "emit.hpp"

#include <algorithm>
#include <cstring>

namespace prism::pipe {

Emitter::Emitter(std::unique_ptr<Egress> egress, rte_mempool* pool, std::vector<Copies> copies, size_t ports)
    : egress_(std::move(egress)),
      pool_(pool),
      copies_(std::move(copies)),
      ports_(ports),
      pending_(ports),
      nacks_(std::make_unique<Counter[]>(ports)) {
  for (auto& q : pending_) q.reserve(2 * kBurst);
  any_chained_ = std::find(copies_.begin(), copies_.end(), Copies::CHAINED) != copies_.end();
}

Emitter::~Emitter() {
  for (auto& q : pending_)
    if (!q.empty()) rte_pktmbuf_free_bulk(q.data(), unsigned(q.size()));
  if (res_) rte_pktmbuf_free(res_);
}

void Emitter::queue_slow(uint16_t port, rte_mbuf* m) {
  if (port >= pending_.size() || !egress_->has(port)) return lost(m);  // no such port: counted
  pending_[port].push_back(m);
  ++pending_n_;
  c_.frames.add();
}

void Emitter::send(sw::Out&& o) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  const size_t n = wire::kFrameOverhead + o.body_size();
  auto* buf =
      m && n <= rte_pktmbuf_tailroom(m) ? reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, uint16_t(n))) : nullptr;
  const std::span<const uint8_t> body = o.body ? std::span<const uint8_t>(*o.body) : std::span<const uint8_t>();
  if (!buf || wire::build(buf, n, o.src, o.dst, o.h, body, ip_id_++) != n) return lost(m);
  if (o.h.kind == wire::Kind::NACK && o.port < ports_) nacks_[o.port].add();
  queue(o.port, m);
}

// The result's body goes where it is sent from: behind the first copy's
// headers, or (when some port chains its copies) in the payload mbuf every
// chained copy clones.
uint8_t* Emitter::result_buffer(size_t bytes) {
  if (res_) rte_pktmbuf_free(res_);  // a result that was never sent
  res_ = nullptr;
  spilled_ = false;
  const size_t head = any_chained_ ? 0 : wire::kFrameOverhead;
  if (rte_mbuf* m = rte_pktmbuf_alloc(pool_)) {
    if (head + bytes <= rte_pktmbuf_tailroom(m)) {
      res_ = m;
      return reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, uint16_t(head + bytes))) + head;
    }
    rte_pktmbuf_free(m);
  }
  // No buffer, or too large for one with the room asked for (the sideband's, which most results do
  // not need): send_result() moves it into a buffer if it then fits, or counts the copies as lost.
  spill_.resize(bytes);
  spilled_ = true;
  return spill_.data();
}

void Emitter::alloc(rte_mbuf** m, unsigned n) {
  if (rte_pktmbuf_alloc_bulk(pool_, m, n) != 0)  // all or nothing: then one at a time
    for (unsigned j = 0; j < n; ++j) m[j] = rte_pktmbuf_alloc(pool_);
}

void Emitter::whole_copy(rte_mbuf* m, const sw::Dest& d, const wire::SharedPart& sh, const uint8_t* body,
                         uint16_t ip_id) {
  auto* buf =
      m ? reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, uint16_t(wire::kFrameOverhead + sh.body_len))) : nullptr;
  if (!buf) return lost(m);
  wire::put_headers(buf, d.hdr, sh, ip_id);
  std::memcpy(buf + wire::kFrameOverhead, body, sh.body_len);
  queue(d.port, m);
}

void Emitter::chained_copy(rte_mbuf* m, const sw::Dest& d, const wire::SharedPart& sh, uint16_t ip_id) {
  auto* buf = m ? reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, wire::kFrameOverhead)) : nullptr;
  rte_mbuf* clone = buf ? rte_pktmbuf_clone(res_, pool_) : nullptr;  // indirect: shares the data
  if (!clone || rte_pktmbuf_chain(m, clone) != 0) {
    if (clone) rte_pktmbuf_free(clone);
    return lost(m);
  }
  wire::put_headers(buf, d.hdr, sh, ip_id);
  queue(d.port, m);
}

// Cost per destination: a header template's few fields and two folded sums
// (no pass over the body), plus one memcpy of the body for a whole copy;
// the body itself is summed once per result.
void Emitter::send_result(const wire::Header& h, size_t len, std::span<const sw::Dest> to) {
  const size_t head = any_chained_ ? 0 : wire::kFrameOverhead;
  if (spilled_) {  // written aside: into a buffer now, if the result as it came out fits one
    spilled_ = false;
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    if (m && head + len <= rte_pktmbuf_tailroom(m)) {
      std::memcpy(rte_pktmbuf_mtod_offset(m, uint8_t*, head), spill_.data(), len);
      rte_pktmbuf_append(m, uint16_t(head + len));
      res_ = m;
    } else if (m) {
      rte_pktmbuf_free(m);
    }
  }
  // Lost when no mbuf held it, or too long for one IPv4 packet (the same for every copy).
  if (!res_ || wire::kFrameOverhead - wire::kEthSize + len > 0xFFFF || to.empty()) {
    if (res_) rte_pktmbuf_free(res_);
    res_ = nullptr;
    c_.alloc_failures.add(to.size());
    return;
  }
  rte_pktmbuf_trim(res_, uint16_t(rte_pktmbuf_data_len(res_) - head - len));
  uint8_t* frame = rte_pktmbuf_mtod(res_, uint8_t*);
  const uint8_t* body = frame + head;
  const wire::SharedPart sh = wire::share(h, len, wire::body_sum16({body, len}));
  const uint16_t id0 = ip_id_;
  ip_id_ = uint16_t(ip_id_ + to.size());
  size_t at = 0;
  if (!any_chained_) {  // the first destination's frame is the result's own mbuf
    wire::put_headers(frame, to[0].hdr, sh, id0);
    queue(to[0].port, res_);
    at = 1;
  } else {
    c_.payload_copies.add();
  }
  rte_mbuf* ms[kBurst];
  for (; at < to.size(); at += kBurst) {
    const unsigned n = unsigned(std::min<size_t>(kBurst, to.size() - at));
    alloc(ms, n);
    for (unsigned k = 0; k < n; ++k) {
      const sw::Dest& d = to[at + k];
      const uint16_t ip_id = uint16_t(id0 + at + k);
      if (chained(d.port))
        chained_copy(ms[k], d, sh, ip_id);
      else
        whole_copy(ms[k], d, sh, body, ip_id);
    }
  }
  if (any_chained_) rte_pktmbuf_free(res_);  // our reference: the clones hold theirs
  res_ = nullptr;
}

bool Emitter::flush() {
  if (pending_n_ == 0) return true;
  for (size_t port = 0; port < pending_.size(); ++port) {
    auto& q = pending_[port];
    if (q.empty()) continue;
    const unsigned put = egress_->put(uint16_t(port), q.data(), unsigned(q.size()));
    q.erase(q.begin(), q.begin() + long(put));
    pending_n_ -= put;
  }
  return pending_n_ == 0;
}

}  // namespace prism::pipe
