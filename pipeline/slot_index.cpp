#include "slot_index.hpp"

#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_jhash.h>
#include <rte_lcore.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace prism::pipe {
namespace {

// No RTE_HASH_EXTRA_FLAGS_MULTI_WRITER_ADD: one lcore writes and reads it.
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

std::unique_ptr<sw::SlotIndex> make_rte_hash_index(uint32_t shard, uint32_t entries) {
  return std::make_unique<RteHashIndex>(shard, entries);
}

}  // namespace prism::pipe
