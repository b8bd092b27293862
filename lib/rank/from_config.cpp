// A Communicator from the switch's own YAML: the rank finds its member
// entry in its job, the switch port in front of it, the switch's UDP port
// and reducer shards (where its chunks are steered), and checks that this
// host really has the registered address and MAC (a mismatch would make the
// switch drop every packet as spoofed, and the rank would only ever see
// timeouts).
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "config/config.hpp"
#include "prism/prism.hpp"

namespace prism {
namespace {

struct Interface {
  std::string name;
  std::optional<wire::Mac> mac;
};

// The interface holding IPv4 address `ip` (host order), if this host has it.
std::optional<Interface> interface_with(uint32_t ip) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<Interface> found;
  for (ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if (ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr) == ip)
      found = Interface{a->ifa_name, {}};
  }
  freeifaddrs(list);
  if (!found) return found;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    ifreq r{};
    std::strncpy(r.ifr_name, found->name.c_str(), IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFHWADDR, &r) == 0) {
      wire::Mac m;
      std::memcpy(m.data(), r.ifr_hwaddr.sa_data, 6);
      found->mac = m;
    }
    close(fd);
  }
  return found;
}

}  // namespace

Communicator Communicator::from_config(const std::string& yaml_path, ConfigSelect sel, Tuning t) {
  SwitchConfig cfg;
  try {
    cfg = load_config(yaml_path);
  } catch (const ConfigError& e) {
    throw Error(Errc::INVALID_ARGUMENT, e.what());
  }
  const JobConfig* job = nullptr;
  if (sel.job == 0 && cfg.jobs.size() == 1) {
    job = &cfg.jobs[0];
  } else {
    job = cfg.job(sel.job);
    if (!job) {
      std::string ids;
      for (const auto& j : cfg.jobs) ids.append(ids.empty() ? "" : ", ").append(std::to_string(j.id));
      throw Error(Errc::INVALID_ARGUMENT, yaml_path + ": no job " + std::to_string(sel.job) + " (its jobs: " + ids +
                                              "): give the job id this rank belongs to");
    }
  }
  if (sel.rank < 0 || sel.rank > 65535)
    throw Error(Errc::INVALID_ARGUMENT, "give the rank (0.." + std::to_string(job->group - 1) + ")");
  const MemberConfig* m = job->member(uint16_t(sel.rank));
  if (!m) {
    std::string ranks;
    for (const auto& mm : job->members) ranks.append(ranks.empty() ? "" : " ").append(std::to_string(mm.rank));
    throw Error(Errc::INVALID_ARGUMENT, yaml_path + ": rank " + std::to_string(sel.rank) + " is not a member of job " +
                                            std::to_string(job->id) + " at this switch (its members: " + ranks +
                                            "): use the configuration of the switch this rank is attached to");
  }
  const PortConfig* port = cfg.port(m->port);
  if (!port)
    throw Error(Errc::INVALID_ARGUMENT, yaml_path + ": rank " + std::to_string(sel.rank) + "'s port " +
                                            std::to_string(m->port) + " is not among the switch's ports");
  const std::string ip = format_ipv4(m->addr.ip);
  const auto itf = interface_with(m->addr.ip);
  if (!itf)
    throw Error(Errc::INVALID_ARGUMENT, yaml_path + ": rank " + std::to_string(sel.rank) + " is registered at " + ip +
                                            ", which no interface of this host has: run the rank where that address is "
                                            "(or fix the member's ip)");
  if (itf->mac && !wire::same_mac(*itf->mac, m->addr.mac))
    throw Error(Errc::INVALID_ARGUMENT,
                yaml_path + ": rank " + std::to_string(sel.rank) + " is registered with MAC " +
                    format_mac(m->addr.mac) + ", but " + itf->name + " (" + ip + ") has " + format_mac(*itf->mac) +
                    ": the switch would drop every packet as spoofed; put this host's MAC in the member's entry");
  Endpoints e;
  e.job = job->id;
  e.rank = uint16_t(sel.rank);
  e.group = job->group;
  e.local_ip = ip;
  e.local_port = m->addr.port;
  e.switch_ip = format_ipv4(port->ip);
  e.switch_port = cfg.udp_port;
  e.slot_quota = job->slot_quota;
  e.switch_shards = cfg.reducer_shards;  // the steering rule's S: chunks go to the shards' ports
  return Communicator(e, t);
}

}  // namespace prism
