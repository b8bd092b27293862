#include "rendezvous/callback_store.hpp"

#include <string>

namespace prism::rdv {
namespace {

// Runs a program's function, its exceptions turned into StoreErrors that
// name the operation and key.
template <class F>
auto guarded(const char* op, std::string_view key, F f) {
  try {
    return f();
  } catch (const StoreError&) {
    throw;
  } catch (const std::exception& e) {
    throw StoreError("callback store: the program's " + std::string(op) + " of key '" + std::string(key) +
                     "' failed: " + e.what());
  } catch (...) {
    throw StoreError("callback store: the program's " + std::string(op) + " of key '" + std::string(key) +
                     "' threw something that is not a std::exception");
  }
}

}  // namespace

CallbackStore::CallbackStore(StoreCallbacks cb) : cb_(std::move(cb)) {
  if (!cb_.set || !cb_.get)
    throw StoreError("callback store: no set or get function: both are needed (add and check may be left out)");
}

void CallbackStore::set(std::string_view key, std::span<const uint8_t> value) {
  guarded("set", key, [&] { cb_.set(key, value); });
}

Bytes CallbackStore::get(std::string_view key, Millis timeout) {
  std::optional<Bytes> v = guarded("get", key, [&] { return cb_.get(key, timeout); });
  if (!v)
    throw StoreError("callback store: key '" + std::string(key) + "' not set after " + std::to_string(timeout.count()) +
                     " ms: is the rank that sets it running, with the same store (and prefix)?");
  return std::move(*v);
}

int64_t CallbackStore::add(std::string_view key, int64_t delta) {
  if (!cb_.add)
    throw StoreError("callback store: add to key '" + std::string(key) +
                     "', but the program gave no add function: give one (it must be atomic across ranks)");
  return guarded("add", key, [&] { return cb_.add(key, delta); });
}

bool CallbackStore::check(std::string_view key) {
  if (cb_.check) return guarded("check", key, [&] { return cb_.check(key); });
  return guarded("get", key, [&] { return cb_.get(key, Millis(0)).has_value(); });
}

}  // namespace prism::rdv
