#include "kernel_link.hpp"

#include <dirent.h>
#include <linux/ethtool.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace prism::pipe {
namespace {

std::string devarg(const std::string& device, const std::string& key) {
  const std::string k = key + "=";
  for (size_t at = device.find(','); at != std::string::npos; at = device.find(',', at + 1)) {
    if (device.compare(at + 1, k.size(), k) == 0) {
      const size_t end = device.find(',', at + 1);
      return device.substr(at + 1 + k.size(), end == std::string::npos ? std::string::npos : end - at - 1 - k.size());
    }
  }
  return "";
}

}  // namespace

std::string af_packet_devargs(const std::string& device, std::string* why) {
  if (device.rfind("net_af_packet", 0) != 0) return device;
  // The ring as deep as the other port kinds' 1024 descriptors (the driver's
  // default is 512 frames): the ranks behind a port size their windows for it.
  if (devarg(device, "framecnt").empty()) {
    std::string more;
    const std::string d = af_packet_devargs(device + ",framecnt=1024", &more);
    if (why) *why = "framecnt=1024 added to its net_af_packet device" + (more.empty() ? "" : "; " + more);
    return d;
  }
  if (!devarg(device, "framesz").empty() || !devarg(device, "blocksz").empty()) return device;
  const std::string iface = devarg(device, "iface");
  std::ifstream f("/sys/class/net/" + iface + "/mtu");
  unsigned mtu = 0;
  if (iface.empty() || !(f >> mtu)) return device;
  // A frame holds the packet (MTU + Ethernet header + a VLAN tag) and the
  // ring's own header (tpacket2_hdr and sockaddr_ll, under 128 bytes).
  const unsigned need = mtu + 18 + 128;
  if (need <= 2048) return device;
  const unsigned framesz = (need + 1023) / 1024 * 1024;
  const unsigned page = unsigned(sysconf(_SC_PAGESIZE));
  const unsigned blocksz = (4 * framesz + page - 1) / page * page;
  if (why)
    *why = iface + " has MTU " + std::to_string(mtu) + ": framesz=" + std::to_string(framesz) +
           ",blocksz=" + std::to_string(blocksz) + " added to its net_af_packet device (set them in device: to choose)";
  return device + ",framesz=" + std::to_string(framesz) + ",blocksz=" + std::to_string(blocksz);
}

std::string af_xdp_devargs(const std::string& device, unsigned lcores, std::string* why) {
  if (device.rfind("net_af_xdp", 0) != 0 || lcores <= 1 || !devarg(device, "queue_count").empty()) return device;
  const std::string iface = devarg(device, "iface");
  if (iface.empty()) return device;
  // What the driver itself goes by: the interface's combined channels (a veth has none, so one queue).
  unsigned queues = 1;
  if (const int fd = socket(AF_INET, SOCK_DGRAM, 0); fd >= 0) {
    ethtool_channels ch{};
    ch.cmd = ETHTOOL_GCHANNELS;
    ifreq ifr{};
    iface.copy(ifr.ifr_name, IF_NAMESIZE - 1);
    ifr.ifr_data = reinterpret_cast<char*>(&ch);
    if (ioctl(fd, SIOCETHTOOL, &ifr) == 0 && ch.combined_count > 0) queues = ch.combined_count;
    close(fd);
  }
  const std::string first = devarg(device, "start_queue");
  const unsigned start = first.empty() ? 0 : unsigned(std::atoi(first.c_str()));
  const unsigned n = queues > start ? std::min(lcores, queues - start) : 1;
  if (n <= 1) return device;
  if (why)
    *why = iface + " has " + std::to_string(queues) + " combined channels: queue_count=" + std::to_string(n) +
           " added to its net_af_xdp device, one per lcore (set it in device: to choose)";
  return device + ",queue_count=" + std::to_string(n);
}

unsigned iface_mtu(unsigned ifindex) {
  char name[IF_NAMESIZE] = {};
  if (!ifindex || !if_indextoname(ifindex, name)) return 0;
  std::ifstream f(std::string("/sys/class/net/") + name + "/mtu");
  unsigned mtu = 0;
  return f >> mtu ? mtu : 0;
}

RingDrops::RingDrops(unsigned ifindex) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    sockaddr_ll a{};
    socklen_t len = sizeof a;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sll_family != AF_PACKET) continue;
    if (unsigned(a.sll_ifindex) == ifindex) fds_.push_back(fd);
  }
  closedir(d);
  sample();  // drops from before the switch took the port are not its
}

uint64_t RingDrops::sample() {
  uint64_t n = 0;
  for (int fd : fds_) {
    tpacket_stats st{};
    socklen_t len = sizeof st;
    if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) n += st.tp_drops;
  }
  return n;
}

}  // namespace prism::pipe
