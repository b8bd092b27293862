// tcp_peers_from_config: the one part of the TCP links that reads the
// switch's YAML (the links themselves know nothing of it).
#include <string>
#include <vector>

#include "coll/tcp.hpp"
#include "config/config.hpp"

namespace prism::coll {

using std::to_string;

TcpPeers tcp_peers_from_config(const SwitchConfig& cfg, uint32_t job_id, const TcpOptions& o) {
  const std::string where = cfg.path.empty() ? "the switch config" : cfg.path;
  const JobConfig* job = job_id == 0 && cfg.jobs.size() == 1 ? &cfg.jobs[0] : cfg.job(job_id);
  if (!job) {
    std::string ids;
    for (const auto& j : cfg.jobs) ids.append(ids.empty() ? "" : ", ").append(to_string(j.id));
    throw LinkError(where + ": no job " + to_string(job_id) + " (its jobs: " + (ids.empty() ? "none" : ids) +
                    "): give the id of the job whose ranks connect");
  }
  TcpPeers out;
  out.job = job->id;
  out.ranks.resize(job->group);
  std::vector<bool> seen(job->group);
  for (const MemberConfig& m : job->members) {
    if (m.rank >= job->group) continue;  // the config reader refuses these
    const long port = long(m.addr.port) + o.port_offset;
    if (port < 1 || port > 65535)
      throw LinkError(where + ": job " + to_string(job->id) + " rank " + to_string(m.rank) + ": udp_port " +
                      to_string(m.addr.port) + " + port_offset " + to_string(o.port_offset) +
                      " is not a TCP port (1..65535)");
    out.ranks[m.rank] = TcpAddr{m.addr.ip, uint16_t(port)};
    seen[m.rank] = true;
  }
  std::string missing;
  for (size_t r = 0; r < seen.size(); ++r)
    if (!seen[r]) missing.append(missing.empty() ? "" : ", ").append(to_string(r));
  if (!missing.empty())
    throw LinkError(where + ": job " + to_string(job->id) + " (group " + to_string(job->group) + "): ranks " + missing +
                    " are not members at this switch (behind a child switch?); the TCP transport needs every "
                    "rank's address: give it a config that lists all of them as members");
  return out;
}

TcpPeers tcp_peers_from_config(const std::string& yaml_path, uint32_t job, const TcpOptions& o) {
  try {
    return tcp_peers_from_config(load_config(yaml_path), job, o);
  } catch (const ConfigError& e) {
    throw LinkError(e.what());
  }
}

}  // namespace prism::coll
