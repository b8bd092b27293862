#include "stage.hpp"

#include <rte_cycles.h>
#include <rte_ethdev.h>

namespace prism::pipe {

bool LinkWatch::up(uint16_t dpdk_port, uint64_t now_tsc) {
  if (now_tsc >= next_) {
    rte_eth_link link{};
    up_ = rte_eth_link_get_nowait(dpdk_port, &link) != 0 || link.link_status == RTE_ETH_LINK_UP;
    next_ = now_tsc + rte_get_tsc_hz() / 1000;
  }
  return up_;
}

}  // namespace prism::pipe
