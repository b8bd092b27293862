#include "coll/inproc.hpp"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

namespace prism::coll {
namespace {

struct Mailbox {  // messages from one rank to another, in order
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::vector<uint8_t>> q;
};

struct Group {
  int n;
  std::vector<std::unique_ptr<Mailbox>> box;  // [from * n + to]
  Observer observer;
  std::mutex seq_m;
  uint64_t seq = 0;
  Mailbox& at(int from, int to) { return *box[size_t(from) * size_t(n) + size_t(to)]; }
};

class InProc final : public Links {
 public:
  InProc(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->n; }

  void send(int peer, const void* data, size_t len) override {
    check(peer);
    if (g_->observer) {
      std::lock_guard<std::mutex> l(g_->seq_m);
      g_->observer(MessageEvent{rank_, peer, len, g_->seq++});
    }
    Mailbox& b = g_->at(rank_, peer);
    {
      std::lock_guard<std::mutex> l(b.m);
      const auto* p = static_cast<const uint8_t*>(data);
      b.q.emplace_back(p, p + len);
    }
    b.cv.notify_one();
  }

  size_t recv(int peer, void* data, size_t cap) override {
    check(peer);
    Mailbox& b = g_->at(peer, rank_);
    std::unique_lock<std::mutex> l(b.m);
    b.cv.wait(l, [&] { return !b.q.empty(); });
    std::vector<uint8_t> msg = std::move(b.q.front());
    b.q.pop_front();
    if (msg.size() > cap)
      throw LinkError("rank " + std::to_string(rank_) + ": a message of " + std::to_string(msg.size()) +
                      " bytes from rank " + std::to_string(peer) + " where at most " + std::to_string(cap) +
                      " were expected");
    if (!msg.empty()) std::memcpy(data, msg.data(), msg.size());
    return msg.size();
  }

  size_t sendrecv(int to, const void* sdata, size_t slen, int from, void* rdata, size_t rcap) override {
    send(to, sdata, slen);
    return recv(from, rdata, rcap);
  }

 private:
  void check(int peer) const {
    if (peer < 0 || peer >= g_->n || peer == rank_)
      throw LinkError("rank " + std::to_string(rank_) + ": no peer " + std::to_string(peer) + " in a group of " +
                      std::to_string(g_->n));
  }
  std::shared_ptr<Group> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Links>> make_inproc_group(int n, Observer observer) {
  auto g = std::make_shared<Group>();
  g->n = n;
  g->observer = std::move(observer);
  for (int i = 0; i < n * n; ++i) g->box.push_back(std::make_unique<Mailbox>());
  std::vector<std::unique_ptr<Links>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<InProc>(g, r));
  return out;
}

}  // namespace prism::coll
