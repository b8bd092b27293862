#include "steer.hpp"

#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_thash.h>

#include <vector>

#include "tap_steer.hpp"

namespace prism::pipe {
namespace {

// One rule: IPv4 / UDP to `port` -> `queue`. Validated first (a device may
// take the pattern but not the action); returns null and says why.
rte_flow* udp_port_rule(uint16_t dpdk_port, uint16_t port, uint16_t queue, std::string* why) {
  const rte_flow_attr attr{.group = 0, .priority = 0, .ingress = 1, .egress = 0, .transfer = 0, .reserved = 0};
  rte_flow_item_udp spec{}, mask{};
  spec.hdr.dst_port = rte_cpu_to_be_16(port);
  mask.hdr.dst_port = 0xffff;
  const rte_flow_item pattern[] = {
      {RTE_FLOW_ITEM_TYPE_ETH, nullptr, nullptr, nullptr},
      {RTE_FLOW_ITEM_TYPE_IPV4, nullptr, nullptr, nullptr},
      {RTE_FLOW_ITEM_TYPE_UDP, &spec, nullptr, &mask},
      {RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr},
  };
  const rte_flow_action_queue q{queue};
  const rte_flow_action actions[] = {
      {RTE_FLOW_ACTION_TYPE_QUEUE, &q},
      {RTE_FLOW_ACTION_TYPE_END, nullptr},
  };
  rte_flow_error err{};
  if (rte_flow_validate(dpdk_port, &attr, pattern, actions, &err) != 0) {
    *why += std::string("rte_flow: ") + (err.message ? err.message : "not supported") + "; ";
    return nullptr;
  }
  rte_flow* f = rte_flow_create(dpdk_port, &attr, pattern, actions, &err);
  if (!f) *why += std::string("rte_flow: ") + (err.message ? err.message : "rule refused") + "; ";
  return f;
}

// Programs the indirection table; false (and why) when the device refuses.
bool set_reta(uint16_t dpdk_port, const std::vector<uint16_t>& reta, std::string* why) {
  std::vector<rte_eth_rss_reta_entry64> conf((reta.size() + RTE_ETH_RETA_GROUP_SIZE - 1) / RTE_ETH_RETA_GROUP_SIZE);
  for (size_t i = 0; i < reta.size(); ++i) {
    conf[i / RTE_ETH_RETA_GROUP_SIZE].mask |= uint64_t(1) << (i % RTE_ETH_RETA_GROUP_SIZE);
    conf[i / RTE_ETH_RETA_GROUP_SIZE].reta[i % RTE_ETH_RETA_GROUP_SIZE] = reta[i];
  }
  const int rc = rte_eth_dev_rss_reta_update(dpdk_port, conf.data(), uint16_t(reta.size()));
  if (rc != 0) *why += std::string("rss: indirection table refused: ") + rte_strerror(-rc) + "; ";
  return rc == 0;
}

}  // namespace

uint32_t rss_hash_dst_port(const uint8_t* key, uint16_t port) {
  uint32_t tuple = uint32_t(port) << 16;  // the port's two bytes, then nothing: the input is 16 bits
  return rte_softrss(&tuple, 1, key);
}

RssTable rss_table(const uint8_t* key, uint16_t reta_size, const SteerPlan& plan) {
  RssTable t;
  t.reta.resize(reta_size);
  for (uint16_t i = 0; i < reta_size; ++i) t.reta[i] = uint16_t(i % plan.queues);
  std::vector<int64_t> taken(reta_size, -1);  // the shard that set each entry
  for (uint32_t s = 0; s < plan.shards; ++s) {
    const uint32_t e = rss_hash_dst_port(key, uint16_t(plan.base + s)) % reta_size;
    if (taken[e] >= 0 && t.reta[e] != plan.queue_of(s)) {
      t.unsteered.push_back(s);
      continue;
    }
    taken[e] = s;
    t.reta[e] = plan.queue_of(s);
  }
  return t;
}

Steering steer_port(uint16_t dpdk_port, const std::string& driver, const std::string& ifname, const SteerPlan& plan,
                    bool rss, uint16_t reta_size, std::string* why) {
  if (plan.queues <= 1 && plan.lcores <= 1) return Steering::NONE;
  if (plan.queues <= 1) return Steering::SOFTWARE;
  bool all = true;
  for (uint32_t s = 0; s < plan.shards && all; ++s)
    all = udp_port_rule(dpdk_port, uint16_t(plan.base + s), plan.queue_of(s), why) != nullptr;
  if (all) return Steering::RTE_FLOW;
  rte_flow_error err{};
  rte_flow_flush(dpdk_port, &err);
  if (driver == "net_tap") {
    const std::string w = install_tap_steering(ifname, {plan.base, plan.shards, plan.lcores, plan.queues});
    if (w.empty()) return Steering::TAP_PROGRAM;
    *why += "tap program: " + w + "; ";
  }
  if (rss && reta_size) {
    const RssTable t = rss_table(kRssKey, reta_size, plan);
    if (set_reta(dpdk_port, t.reta, why)) {
      if (!t.unsteered.empty())
        *why += "rss: " + std::to_string(t.unsteered.size()) + " shard ports share a table entry with another " +
                "lcore's shard, and go by software; ";
      return Steering::RSS;
    }
  } else if (!rss) {
    *why += "rss: the device cannot hash the UDP destination port alone; ";
  }
  return Steering::SOFTWARE;
}

void unsteer_port(uint16_t dpdk_port, Steering s) {
  if (s != Steering::RTE_FLOW) return;
  rte_flow_error err{};
  rte_flow_flush(dpdk_port, &err);
}

}  // namespace prism::pipe
