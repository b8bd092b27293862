// A store whose set/get/add/check are the program's own functions: an MPI
// library's exchange, a PyTorch backend's torch store. (The C API wraps it
// with C function pointers.)
//
// What the functions must do:
//  - set(key, value): make value visible to every rank's get(key);
//  - get(key, timeout): the value once set, or nullopt when the timeout
//    passes (the store then throws StoreError naming the key);
//  - add(key, delta) (optional): atomically add to the integer at key (0
//    when unset), returning the new value; absent: add() throws;
//  - check(key) (optional): whether key is set now; absent: get(key, 0).
// An exception from a function comes out as a StoreError naming the key.
#pragma once

#include <functional>
#include <optional>

#include "rendezvous/store.hpp"

namespace prism::rdv {

struct StoreCallbacks {
  std::function<void(std::string_view key, std::span<const uint8_t> value)> set;
  std::function<std::optional<Bytes>(std::string_view key, Millis timeout)> get;
  std::function<int64_t(std::string_view key, int64_t delta)> add;  // optional
  std::function<bool(std::string_view key)> check;                  // optional
};

class CallbackStore final : public Store {
 public:
  // Throws StoreError when set or get is missing.
  explicit CallbackStore(StoreCallbacks cb);

  void set(std::string_view key, std::span<const uint8_t> value) override;
  Bytes get(std::string_view key, Millis timeout = kDefaultStoreTimeout) override;
  int64_t add(std::string_view key, int64_t delta) override;
  bool check(std::string_view key) override;
  using Store::set;

 private:
  StoreCallbacks cb_;
};

}  // namespace prism::rdv
