// The rendezvous store: how the ranks of a group find each other without the
// switch's YAML (as Gloo's rendezvous::Store and PyTorch's c10d Store).
// A key-value store of small values that every rank of a group can reach:
// each rank publishes what the others need (its listening address, rank 0's
// job id from a switch's pool) and waits for theirs.
//
// Kinds (lib/rendezvous/):
//  - TCP (tcp_store.hpp): served by one process of the group (rank 0, as
//    torch's MASTER_ADDR/MASTER_PORT), every rank a client;
//  - file (file_store.hpp): one file on a filesystem every rank sees;
//  - callbacks (callback_store.hpp): set/get given by the program, so an MPI
//    library can plug MPI_Allgather-backed exchange, or a PyTorch backend
//    torch's own store;
//  - PrefixStore: another store's keys under "prefix/" (one store, many groups).
//
// Values are bytes; keys are printable strings without NUL. get() waits
// until the key is set (or the timeout passes: StoreError naming the key and
// what to check). Every call is safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace prism::rdv {

struct StoreError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Bytes = std::vector<uint8_t>;
using Millis = std::chrono::milliseconds;

inline constexpr Millis kDefaultStoreTimeout{300000};  // as torch's default rendezvous timeout

class Store {
 public:
  virtual ~Store() = default;
  // Sets `key` to `value` (replacing any earlier value) and wakes its waiters.
  virtual void set(std::string_view key, std::span<const uint8_t> value) = 0;
  // The value of `key`, once set; throws StoreError after `timeout`.
  virtual Bytes get(std::string_view key, Millis timeout = kDefaultStoreTimeout) = 0;
  // Adds `delta` to the integer at `key` (0 when unset) atomically; returns the new value.
  virtual int64_t add(std::string_view key, int64_t delta) = 0;
  // True when `key` is set now (never waits).
  virtual bool check(std::string_view key) = 0;
  // The host a rank reaches the store at over the network ("" when there is none: a file or a
  // program's own store): a rank with no address given listens at its address towards it.
  virtual std::string network_host() const { return {}; }

  // Conveniences over the four above.
  void set(std::string_view key, std::string_view value) {
    set(key, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
  }
  std::string get_string(std::string_view key, Millis timeout = kDefaultStoreTimeout) {
    const Bytes b = get(key, timeout);
    return std::string(b.begin(), b.end());
  }
};

// `inner`'s keys under "prefix/": groups sharing one store keep apart.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner) : prefix_(std::move(prefix) + "/"), inner_(inner) {}
  void set(std::string_view key, std::span<const uint8_t> value) override { inner_->set(k(key), value); }
  Bytes get(std::string_view key, Millis timeout = kDefaultStoreTimeout) override {
    return inner_->get(k(key), timeout);
  }
  int64_t add(std::string_view key, int64_t delta) override { return inner_->add(k(key), delta); }
  bool check(std::string_view key) override { return inner_->check(k(key)); }
  std::string network_host() const override { return inner_->network_host(); }
  using Store::set;

 private:
  std::string k(std::string_view key) const { return prefix_ + std::string(key); }
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

// A store named by a URL: "tcp://host:port" (rank 0 serves it at that port, every rank connects to
// host:port) or "file:///path/to/file". Throws StoreError: a URL of no known kind or with a bad part
// (saying which and what one looks like), a negative rank, and the store's own errors.
std::shared_ptr<Store> store_from_url(const std::string& url, int rank, Millis timeout = kDefaultStoreTimeout);
// The environment's store: $PRISM_STORE (a URL), else tcp://$MASTER_ADDR:$MASTER_PORT (torch's
// convention; under torchrun that port is torch's own store's: give PRISM_STORE another).
std::shared_ptr<Store> store_from_env(int rank, Millis timeout = kDefaultStoreTimeout);

}  // namespace prism::rdv
