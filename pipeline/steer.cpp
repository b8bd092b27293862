#include "steer.hpp"

#include <rte_flow.h>

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

}  // namespace

Steering steer_port(uint16_t dpdk_port, const std::string& driver, const std::string& ifname, const SteerPlan& plan,
                    std::string* why) {
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
  return Steering::SOFTWARE;
}

void unsteer_port(uint16_t dpdk_port, Steering s) {
  if (s != Steering::RTE_FLOW) return;
  rte_flow_error err{};
  rte_flow_flush(dpdk_port, &err);
}

}  // namespace prism::pipe
