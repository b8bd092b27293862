#include "config/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace prism {
namespace {

constexpr uint32_t kQuotaUnset = ~uint32_t(0);  // slot_quota not given: default_quotas() decides
constexpr uint32_t kMinQuota = 16;

// Reads one YAML document with positions for error messages.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Node& n, const std::string& key, const std::string& msg) const {
    std::ostringstream o;
    o << file_;
    if (n && !n.Mark().is_null()) o << ":" << n.Mark().line + 1 << ":" << n.Mark().column + 1;
    o << ": " << key << ": " << msg;
    throw ConfigError(o.str());
  }

  // Refuses keys other than `allowed` (catches typos).
  void only(const YAML::Node& map, const std::string& key, std::initializer_list<const char*> allowed) const {
    if (!map.IsMap()) fail(map, key, "expected a mapping of keys to values");
    std::set<std::string> seen;
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) {
        std::string valid;
        for (const char* a : allowed) valid += std::string(valid.empty() ? "" : ", ") + a;
        fail(kv.first, key.empty() ? "(top level)" : key,
             "unknown key: keys are plain words (valid here: " + valid + ")");
      }
      const std::string k = kv.first.Scalar();
      if (!seen.insert(k).second) fail(kv.first, key.empty() ? k : key + "." + k, "given twice: keep one");
      if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; })) {
        std::string valid;
        for (const char* a : allowed) valid += std::string(valid.empty() ? "" : ", ") + a;
        fail(kv.first, key.empty() ? k : key + "." + k, "unknown key (valid here: " + valid + ")");
      }
    }
  }

  uint64_t uint(const YAML::Node& n, const std::string& key, uint64_t lo, uint64_t hi) const {
    if (!n.IsScalar()) fail(n, key, "expected a number");
    const std::string s = n.Scalar();
    char* end = nullptr;
    errno = 0;
    // Decimal only: strtoull's base 0 would read 020562 as octal (8562) and 0x10 as 16, silently.
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end || errno || s[0] == '-' || s[0] == '+' || std::isspace(uint8_t(s[0])))
      fail(n, key,
           "'" + s + "' is not a whole number (expected " + std::to_string(lo) + ".." + std::to_string(hi) +
               ", in decimal)");
    if (s.size() > 1 && s[0] == '0')
      fail(n, key,
           "'" + s + "' has a leading zero: write it in decimal without one (" + std::to_string(v) +
               "?), as it is not read as octal");
    if (v < lo || v > hi)
      fail(n, key,
           std::to_string(v) + " is out of range (expected " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
    return v;
  }
  uint64_t uint_or(const YAML::Node& map, const char* k, const std::string& key, uint64_t lo, uint64_t hi,
                   uint64_t def) const {
    const YAML::Node n = map[k];
    return n ? uint(n, key.empty() ? std::string(k) : key + "." + k, lo, hi) : def;
  }
  const YAML::Node need(const YAML::Node& map, const char* k, const std::string& key) const {
    const YAML::Node n = map[k];
    if (!n) fail(map, key.empty() ? k : key + "." + k, "missing (required)");
    return n;
  }
  std::string str(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail(n, key, "expected a string");
    return n.Scalar();
  }
  // The value of closed set E that the scalar names, or an error that lists
  // the set's names ("'x' is not `what` (a, b)").
  template <ClosedSet E>
  E word(const YAML::Node& n, const std::string& key, const char* what) const {
    const std::string v = str(n, key);
    if (const auto e = from_name<E>(v)) return *e;
    fail(n, key, "'" + v + "' is not " + what + " (" + choices<E>(", ") + ")");
  }
  // A station's MAC: unicast (a frame PRISM sends has it as its source, or
  // is sent to that one station).
  wire::Mac mac(const YAML::Node& n, const std::string& key) const {
    const auto m = parse_mac(str(n, key));
    if (!m) fail(n, key, "'" + n.Scalar() + "' is not a MAC address (write 02:00:00:00:00:01)");
    if (*m == wire::Mac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
      fail(n, key,
           "'" + n.Scalar() +
               "' is the broadcast MAC: give the station's own unicast address (such as "
               "02:00:00:00:00:01)");
    if ((*m)[0] & 1)
      fail(n, key,
           "'" + n.Scalar() + "' is a multicast MAC (the first byte is odd): give the station's own unicast " +
               "address (the first byte even, such as 02:00:00:00:00:01)");
    return *m;
  }
  // A station's IPv4 address: not 0.0.0.0 (no address) or 255.255.255.255 (broadcast).
  uint32_t ip(const YAML::Node& n, const std::string& key) const {
    const auto v = parse_ipv4(str(n, key));
    if (!v) fail(n, key, "'" + n.Scalar() + "' is not an IPv4 address (write a.b.c.d)");
    if (*v == 0) fail(n, key, "0.0.0.0 is no address: give the station's own IPv4 address (nothing answers 0.0.0.0)");
    if (*v == 0xFFFFFFFFu)
      fail(n, key,
           "255.255.255.255 is the broadcast address: give the station's own IPv4 address (a RESULT or NACK "
           "sent there would reach every host)");
    return *v;
  }
  wire::Endpoint endpoint(const YAML::Node& map, const std::string& key) const {
    wire::Endpoint e;
    e.mac = mac(need(map, "mac", key), key + ".mac");
    e.ip = ip(need(map, "ip", key), key + ".ip");
    e.port = uint16_t(uint_or(map, "udp_port", key, 1, 65535, wire::kDefaultPort));
    return e;
  }

 private:
  std::string file_;
};

std::string idx(const std::string& key, size_t i) { return key + "[" + std::to_string(i) + "]"; }

// A member, child or parent must not share its IP with one of the switch's
// own ports: the switch would take its own frames for theirs (and answer
// them from the port), and what it sends them would never leave.
void check_not_a_port_ip(const Reader& rd, const SwitchConfig& c, const YAML::Node& ip_node, const std::string& key,
                         const char* who) {
  const uint32_t ip = rd.ip(ip_node, key);
  for (const auto& p : c.ports)
    if (p.ip == ip)
      rd.fail(ip_node, key,
              format_ipv4(ip) + " is the IP of switch port " + std::to_string(p.id) + ": a " + who +
                  " needs an address of its own (change its ip, or the port's)");
}

// kulisch_width must hold every exact sum a job allows: each format of its
// formats (every format when absent) at the job's group size, under the
// policies that keep an exact sum (needs_exact_width()). Else every such op
// would be refused at run time.
// What check_width() says about a job or a pool: "job 7" / "pool 1000",
// "the job's group" / "the pool's max_group", and the key of its entry.
struct WidthSubject {
  std::string who, group_word, key;
};

void check_width(const Reader& rd, const YAML::Node& width_node, int width, const JobConfig& j,
                 const WidthSubject& subj) {
  std::vector<Format> formats = j.formats;
  if (formats.empty())
    for (const auto& e : entries(Format{})) formats.push_back(e.value);
  std::vector<Policy> policies = j.policies;
  if (policies.empty())
    for (const auto& e : entries(Policy{})) policies.push_back(e.value);
  std::string narrow;
  int widest = 0;
  bool kulisch_float = false;
  for (Format f : formats) {
    int need = 0;
    for (Policy p : policies)
      if (needs_exact_width(f, p)) need = required_width(f, j.group);
    if (need <= width) continue;
    narrow += std::string(narrow.empty() ? "" : ", ") + name(f) + " needs " + std::to_string(need) + " bits";
    widest = std::max(widest, need);
    kulisch_float |= is_float(f);
  }
  if (narrow.empty()) return;
  const std::string fkey = subj.key + ".formats";
  rd.fail(width_node, "kulisch_width",
          std::to_string(width) + " bits is too narrow for " + subj.who + ": an exact sum of " +
              std::to_string(j.group) + " values (" + subj.group_word + ") is refused at run time where " + narrow +
              "; raise kulisch_width to at least " + std::to_string(widest) + ", or drop " +
              (narrow.find(',') == std::string::npos ? "that format" : "those formats") + " from " + fkey +
              (j.formats.empty() ? " (absent, it allows every format)" : "") +
              (kulisch_float ? (" (or, for a float format, kulisch from " + subj.key + ".policies)") : ""));
}

}  // namespace

std::optional<wire::Mac> parse_mac(const std::string& s) {
  // Exactly six pairs of hex digits separated by colons: no signs, blanks or prefixes.
  if (s.size() != 17) return std::nullopt;
  wire::Mac m;
  for (int i = 0; i < 6; ++i) {
    if (i && s[size_t(3 * i - 1)] != ':') return std::nullopt;
    unsigned v = 0;
    for (int j = 0; j < 2; ++j) {
      const char c = s[size_t(3 * i + j)];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return std::nullopt;
      v = v * 16 + unsigned(d);
    }
    m[size_t(i)] = uint8_t(v);
  }
  return m;
}

std::optional<uint32_t> parse_ipv4(const std::string& s) {
  // Four decimal octets 0-255, no leading zeros (they read as octal elsewhere), nothing else.
  uint32_t ip = 0;
  size_t at = 0;
  for (int i = 0; i < 4; ++i) {
    if (i) {
      if (at >= s.size() || s[at] != '.') return std::nullopt;
      ++at;
    }
    const size_t start = at;
    unsigned v = 0;
    while (at < s.size() && s[at] >= '0' && s[at] <= '9' && at - start < 3) v = v * 10 + unsigned(s[at++] - '0');
    if (at == start || v > 255 || (s[start] == '0' && at - start > 1)) return std::nullopt;
    ip = ip << 8 | v;
  }
  if (at != s.size()) return std::nullopt;
  return ip;
}

std::optional<Ipv4Range> parse_cidr(const std::string& s) {
  const auto slash = s.find('/');
  const auto ip = parse_ipv4(s.substr(0, slash));
  if (!ip) return std::nullopt;
  Ipv4Range r{*ip, 32};
  if (slash != std::string::npos) {
    const std::string len = s.substr(slash + 1);
    if (len.empty() || len.size() > 2 || len.find_first_not_of("0123456789") != std::string::npos ||
        (len.size() == 2 && len[0] == '0'))
      return std::nullopt;
    const int n = std::stoi(len);
    if (n > 32) return std::nullopt;
    r.len = uint8_t(n);
  }
  const uint32_t host = r.len == 0 ? ~0u : r.len == 32 ? 0u : (~0u >> r.len);
  if (r.net & host) return std::nullopt;  // bits past the prefix: a typo for another range
  return r;
}

std::string format_mac(const wire::Mac& m) {
  char b[18];
  std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return b;
}

std::string format_ipv4(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." + std::to_string((ip >> 8) & 255) +
         "." + std::to_string(ip & 255);
}

const MemberConfig* JobConfig::member(uint16_t rank) const {
  for (const auto& m : members)
    if (m.rank == rank) return &m;
  return nullptr;
}
const JobConfig* SwitchConfig::job(uint32_t id) const {
  for (const auto& j : jobs)
    if (j.id == id) return &j;
  return nullptr;
}
const PoolConfig* SwitchConfig::pool_of(uint32_t job) const {
  for (const auto& p : pools)
    if (p.has(job)) return &p;
  return nullptr;
}
bool PoolConfig::admits(uint32_t ip) const {
  return std::any_of(ranges.begin(), ranges.end(), [&](const Ipv4Range& r) { return r.has(ip); });
}
bool PoolConfig::lists(uint16_t port) const {
  return ports.empty() || std::find(ports.begin(), ports.end(), port) != ports.end();
}
const PortConfig* SwitchConfig::port(uint16_t id) const {
  for (const auto& p : ports)
    if (p.id == id) return &p;
  return nullptr;
}

namespace {

// switch: its id, role, UDP port and parent.
void read_switch(const Reader& rd, const YAML::Node& root, SwitchConfig& c) {
  if (const YAML::Node s = root["switch"]) {
    rd.only(s, "switch", {"id", "role", "udp_port", "parent"});
    c.id = uint16_t(rd.uint_or(s, "id", "switch", 0, 65535, 0));
    c.udp_port = uint16_t(rd.uint_or(s, "udp_port", "switch", 1, 65535, wire::kDefaultPort));
    if (const YAML::Node r = s["role"]) c.role = rd.word<Role>(r, "switch.role", "a role");
    if (const YAML::Node p = s["parent"]) {
      rd.only(p, "switch.parent", {"port", "mac", "ip", "udp_port", "shards"});
      ParentConfig pc;
      pc.port = uint16_t(rd.uint_or(p, "port", "switch.parent", 0, 65535, 0));
      pc.addr = rd.endpoint(p, "switch.parent");
      pc.shards = uint32_t(rd.uint_or(p, "shards", "switch.parent", 1, 64, 1));
      if (uint32_t(pc.addr.port) + pc.shards - 1 > 65535)
        rd.fail(p["shards"], "switch.parent.shards",
                "the parent's shard ports " + std::to_string(pc.addr.port) + " + 0.." + std::to_string(pc.shards - 1) +
                    " run past 65535: lower udp_port or shards");
      c.parent = pc;
    }
    if (c.role == Role::LEAF && !c.parent)
      rd.fail(s, "switch.parent", "a leaf needs its parent's address (port, mac, ip, udp_port)");
    if (c.role == Role::ROOT && c.parent)
      rd.fail(s["parent"], "switch.parent", "a root has no parent: remove it or set role: leaf");
  }
}

void read_ports(const Reader& rd, const YAML::Node& root, SwitchConfig& c) {
  if (const YAML::Node ps = root["ports"]) {
    if (!ps.IsSequence()) rd.fail(ps, "ports", "expected a list of ports");
    std::set<uint16_t> ids;
    for (size_t i = 0; i < ps.size(); ++i) {
      const YAML::Node p = ps[i];
      const std::string key = idx("ports", i);
      rd.only(p, key, {"id", "device", "mac", "ip"});
      PortConfig pc;
      pc.id = uint16_t(rd.uint(rd.need(p, "id", key), key + ".id", 0, 1023));
      if (!ids.insert(pc.id).second)
        rd.fail(p["id"], key + ".id", "port " + std::to_string(pc.id) + " is listed twice");
      if (p["device"]) pc.device = rd.str(p["device"], key + ".device");
      pc.mac = rd.mac(rd.need(p, "mac", key), key + ".mac");
      pc.ip = rd.ip(rd.need(p, "ip", key), key + ".ip");
      c.ports.push_back(pc);
    }
  }
}

// jobs[i].members: each rank's port and address, no rank or address twice.
void read_members(const Reader& rd, const YAML::Node& ms, const std::string& key, const SwitchConfig& c,
                  JobConfig& jc) {
  if (ms && !ms.IsSequence()) rd.fail(ms, key + ".members", "expected a list of members");
  std::set<uint16_t> ranks;
  std::set<std::pair<uint32_t, uint16_t>> addrs;
  for (size_t k = 0; ms && k < ms.size(); ++k) {
    const YAML::Node m = ms[k];
    const std::string mk = idx(key + ".members", k);
    rd.only(m, mk, {"rank", "port", "mac", "ip", "udp_port"});
    MemberConfig mc;
    mc.rank = uint16_t(rd.uint(rd.need(m, "rank", mk), mk + ".rank", 0, 65534));
    if (!ranks.insert(mc.rank).second)
      rd.fail(m["rank"], mk + ".rank",
              "rank " + std::to_string(mc.rank) + " is listed twice in job " + std::to_string(jc.id));
    mc.port = uint16_t(rd.uint_or(m, "port", mk, 0, 1023, 0));
    mc.addr = rd.endpoint(m, mk);
    check_not_a_port_ip(rd, c, m["ip"], mk + ".ip", "member");
    if (!addrs.insert({mc.addr.ip, mc.addr.port}).second)
      rd.fail(m["ip"], mk, "another member of job " + std::to_string(jc.id) + " has the same ip and udp_port");
    jc.members.push_back(mc);
  }
}

// jobs[i].children: each child switch's id, port, address and the ranks it folds.
void read_children(const Reader& rd, const YAML::Node& cs, const std::string& key, const SwitchConfig& c,
                   JobConfig& jc) {
  if (cs && !cs.IsSequence()) rd.fail(cs, key + ".children", "expected a list of child switches");
  std::set<uint16_t> child_ids;
  for (size_t k = 0; cs && k < cs.size(); ++k) {
    const YAML::Node m = cs[k];
    const std::string ck = idx(key + ".children", k);
    rd.only(m, ck, {"id", "port", "mac", "ip", "udp_port", "ranks"});
    ChildConfig cc;
    cc.id = uint16_t(rd.uint(rd.need(m, "id", ck), ck + ".id", 0, 65535));
    if (!child_ids.insert(cc.id).second)
      rd.fail(m["id"], ck + ".id", "child " + std::to_string(cc.id) + " is listed twice");
    cc.port = uint16_t(rd.uint_or(m, "port", ck, 0, 1023, 0));
    cc.addr = rd.endpoint(m, ck);
    check_not_a_port_ip(rd, c, m["ip"], ck + ".ip", "child switch");
    cc.ranks = uint16_t(rd.uint(rd.need(m, "ranks", ck), ck + ".ranks", 1, 65535));
    jc.children.push_back(cc);
  }
}

// formats: and policies: of a job or a pool: lists of the closed sets' words.
void read_formats(const Reader& rd, const YAML::Node& j, const std::string& key, std::vector<Format>& out) {
  if (const YAML::Node fs = j["formats"]) {
    if (!fs.IsSequence()) rd.fail(fs, key + ".formats", "expected a list such as [fp32, bf16]");
    for (size_t k = 0; k < fs.size(); ++k) {
      const std::string v = rd.str(fs[k], idx(key + ".formats", k));
      const auto f = from_name<Format>(v);
      if (!f) rd.fail(fs[k], idx(key + ".formats", k), "'" + v + "' is not a format (" + choices<Format>() + ")");
      out.push_back(*f);
    }
  }
}
void read_policies(const Reader& rd, const YAML::Node& j, const std::string& key, std::vector<Policy>& out) {
  if (const YAML::Node ps = j["policies"]) {
    if (!ps.IsSequence()) rd.fail(ps, key + ".policies", "expected a list such as [kulisch, fp32_arrival]");
    for (size_t k = 0; k < ps.size(); ++k) {
      const std::string v = rd.str(ps[k], idx(key + ".policies", k));
      const auto p = from_name<Policy>(v);
      if (!p) rd.fail(ps[k], idx(key + ".policies", k), "'" + v + "' is not a policy (" + choices<Policy>() + ")");
      out.push_back(*p);
    }
  }
}

// rate: {committed_mbit, peak_mbit, committed_burst_kib, peak_burst_kib}:
// the peak defaults to the committed rate, the bursts to 64 KiB and the
// committed burst; a peak below the committed rate is refused.
RateConfig read_rate(const Reader& rd, const YAML::Node& parent, const std::string& key) {
  RateConfig r;
  const YAML::Node n = parent["rate"];
  if (!n) return r;
  const std::string k = key + ".rate";
  rd.only(n, k, {"committed_mbit", "peak_mbit", "committed_burst_kib", "peak_burst_kib"});
  const uint64_t cir = rd.uint(rd.need(n, "committed_mbit", k), k + ".committed_mbit", 1, 1000000);
  const uint64_t pir = rd.uint_or(n, "peak_mbit", k, 1, 1000000, cir);
  if (pir < cir) rd.fail(n["peak_mbit"], k + ".peak_mbit", "below committed_mbit: the peak rate is the larger");
  const uint64_t cbs = rd.uint_or(n, "committed_burst_kib", k, 2, 1u << 20, 64);
  const uint64_t pbs = rd.uint_or(n, "peak_burst_kib", k, 2, 1u << 20, cbs);
  r.committed = cir * 1000000 / 8;
  r.peak = pir * 1000000 / 8;
  r.committed_burst = cbs << 10;
  r.peak_burst = pbs << 10;
  return r;
}

// jobs[i]: its id, formats, policies, members, children and group, checked
// against the switch's role and ports.
JobConfig read_job(const Reader& rd, const YAML::Node& j, const std::string& key, const SwitchConfig& c,
                   std::set<uint32_t>& job_ids) {
  rd.only(j, key, {"id", "group", "formats", "policies", "slot_quota", "udp_checksum", "rate", "members", "children"});
  JobConfig jc;
  jc.id = uint32_t(rd.uint(rd.need(j, "id", key), key + ".id", 0, 0xFFFFFFFFu));
  if (!job_ids.insert(jc.id).second) rd.fail(j["id"], key + ".id", "job " + std::to_string(jc.id) + " is listed twice");
  jc.slot_quota = uint32_t(rd.uint_or(j, "slot_quota", key, 0, 1u << 24, kQuotaUnset));
  if (const YAML::Node u = j["udp_checksum"])
    jc.udp_checksum_optional =
        rd.word<UdpChecksum>(u, key + ".udp_checksum", "a UDP checksum rule") == UdpChecksum::OPTIONAL;
  jc.rate = read_rate(rd, j, key);
  read_formats(rd, j, key, jc.formats);
  read_policies(rd, j, key, jc.policies);
  const YAML::Node ms = j["members"];
  read_members(rd, ms, key, c, jc);
  read_children(rd, j["children"], key, c, jc);
  uint32_t child_ranks = 0;
  for (const auto& cc : jc.children) child_ranks += cc.ranks;
  const uint32_t local = uint32_t(jc.members.size()) + child_ranks;
  if (local == 0) rd.fail(j, key, "a job needs members (ranks) or children (switches below)");
  jc.group =
      uint16_t(rd.uint_or(j, "group", key, 1, 65535, c.role == Role::ROOT ? std::min<uint32_t>(local, 65535) : 0));
  if (jc.group == 0) rd.fail(j, key + ".group", "a leaf must say how many ranks the whole job has (group)");
  for (size_t k = 0; k < jc.members.size(); ++k)
    if (jc.members[k].rank >= jc.group)
      rd.fail(
          ms[k]["rank"], idx(key + ".members", k) + ".rank",
          "rank " + std::to_string(jc.members[k].rank) + " is not below the group size " + std::to_string(jc.group));
  if (local > jc.group)
    rd.fail(j["group"] ? j["group"] : j, key + ".group",
            std::to_string(local) + " ranks attach here, more than the group size " + std::to_string(jc.group));
  if (c.role == Role::ROOT && local != jc.group)
    rd.fail(j["group"] ? j["group"] : j, key + ".group",
            "at a root, members plus children's ranks (" + std::to_string(local) + ") must cover the group (" +
                std::to_string(jc.group) + ")");
  if (!c.ports.empty()) {
    for (const auto& m : jc.members)
      if (!c.port(m.port))
        rd.fail(j, key + ".members",
                "rank " + std::to_string(m.rank) + " uses port " + std::to_string(m.port) + ", which is not in ports");
    for (const auto& ch : jc.children)
      if (!c.port(ch.port))
        rd.fail(j, key + ".children",
                "child " + std::to_string(ch.id) + " uses port " + std::to_string(ch.port) + ", which is not in ports");
  }
  return jc;
}

void read_jobs(const Reader& rd, const YAML::Node& root, SwitchConfig& c) {
  const YAML::Node js = root["jobs"];
  if (!js) return;
  if (!js.IsSequence()) rd.fail(js, "jobs", "expected a list of jobs");
  std::set<uint32_t> job_ids;
  for (size_t i = 0; i < js.size(); ++i) c.jobs.push_back(read_job(rd, js[i], idx("jobs", i), c, job_ids));
}

// pools[i].ranges: CIDR ranges, at least one.
void read_ranges(const Reader& rd, const YAML::Node& pn, const std::string& key, PoolConfig& pc) {
  const YAML::Node rs = rd.need(pn, "ranges", key);
  if (!rs.IsSequence() || rs.size() == 0)
    rd.fail(rs, key + ".ranges", "expected a list of at least one IPv4 range such as [10.0.0.0/24]");
  for (size_t k = 0; k < rs.size(); ++k) {
    const std::string v = rd.str(rs[k], idx(key + ".ranges", k));
    const auto r = parse_cidr(v);
    if (!r) {
      const auto slash = v.find('/');
      const std::string len = slash == std::string::npos ? "" : v.substr(slash + 1);
      // The address and the length are fine but bits past the prefix are set (10.0.0.1/24).
      const bool host_bits = parse_ipv4(v.substr(0, slash)) && !len.empty() && len.size() <= 2 &&
                             len.find_first_not_of("0123456789") == std::string::npos && std::stoi(len) <= 32;
      rd.fail(rs[k], idx(key + ".ranges", k),
              host_bits ? "'" + v + "' has bits set past its prefix length: write the range's first address"
                        : "'" + v + "' is not an IPv4 range (write a.b.c.d/len, len 0..32, such as 10.0.0.0/24)");
    }
    pc.ranges.push_back(*r);
  }
}

// pools[i].ports: switch ports its ranks may come through (default: every port).
void read_pool_ports(const Reader& rd, const YAML::Node& pn, const std::string& key, const SwitchConfig& c,
                     PoolConfig& pc) {
  const YAML::Node ps = pn["ports"];
  if (!ps) return;
  if (!ps.IsSequence() || ps.size() == 0)
    rd.fail(ps, key + ".ports", "expected a list of switch port ids such as [0] (or leave it out: every port)");
  for (size_t k = 0; k < ps.size(); ++k) {
    const uint16_t id = uint16_t(rd.uint(ps[k], idx(key + ".ports", k), 0, 1023));
    if (!c.ports.empty() && !c.port(id))
      rd.fail(ps[k], idx(key + ".ports", k), "port " + std::to_string(id) + " is not in ports");
    pc.ports.push_back(id);
  }
}

// pools[i]: a range of job ids, disjoint from every job and every other pool.
PoolConfig read_pool(const Reader& rd, const YAML::Node& pn, const std::string& key, const SwitchConfig& c) {
  if (pn.IsMap() && pn["children"])
    rd.fail(pn["children"], key + ".children",
            "a pooled job has no child switches: its ranks attach to this switch directly (declare a job with "
            "children under jobs:)");
  rd.only(pn, key,
          {"jobs", "max_group", "ranges", "ports", "slot_quota", "formats", "policies", "udp_checksum",
           "idle_timeout_ms", "join_timeout_ms", "rate"});
  PoolConfig pc;
  const YAML::Node ids = rd.need(pn, "jobs", key);
  rd.only(ids, key + ".jobs", {"first", "count"});
  pc.first = uint32_t(rd.uint(rd.need(ids, "first", key + ".jobs"), key + ".jobs.first", 0, 0xFFFFFFFFu));
  pc.count = uint32_t(rd.uint(rd.need(ids, "count", key + ".jobs"), key + ".jobs.count", 1, 4096));
  if (uint64_t(pc.first) + pc.count - 1 > 0xFFFFFFFFu)
    rd.fail(ids["count"], key + ".jobs.count",
            "ids " + std::to_string(pc.first) + " + 0.." + std::to_string(pc.count - 1) +
                " run past 4294967295: lower first or count");
  pc.max_group = uint16_t(rd.uint(rd.need(pn, "max_group", key), key + ".max_group", 1, 65535));
  if (uint64_t(pc.count) * pc.max_group > (uint64_t(1) << 20))
    rd.fail(pn["max_group"], key + ".max_group",
            std::to_string(pc.count) + " jobs of up to " + std::to_string(pc.max_group) +
                " ranks: the switch keeps a member entry for each (count x max_group at most 1048576): lower count "
                "or max_group");
  read_ranges(rd, pn, key, pc);
  read_pool_ports(rd, pn, key, c, pc);
  pc.slot_quota = uint32_t(rd.uint_or(pn, "slot_quota", key, 0, 1u << 24, kQuotaUnset));
  read_formats(rd, pn, key, pc.formats);
  read_policies(rd, pn, key, pc.policies);
  if (const YAML::Node u = pn["udp_checksum"])
    pc.udp_checksum_optional =
        rd.word<UdpChecksum>(u, key + ".udp_checksum", "a UDP checksum rule") == UdpChecksum::OPTIONAL;
  pc.idle_timeout_ms = uint32_t(rd.uint_or(pn, "idle_timeout_ms", key, 1, 86400000, 30000));
  pc.join_timeout_ms = uint32_t(rd.uint_or(pn, "join_timeout_ms", key, 1, 86400000, 10000));
  pc.rate = read_rate(rd, pn, key);
  return pc;
}

// pools: at a root only, each pool's ids apart from every job's and every other pool's.
void read_pools(const Reader& rd, const YAML::Node& root, SwitchConfig& c) {
  const YAML::Node ps = root["pools"];
  if (!ps) return;
  if (!ps.IsSequence()) rd.fail(ps, "pools", "expected a list of pools");
  if (c.role == Role::LEAF && ps.size())
    rd.fail(ps, "pools",
            "a leaf cannot take pooled jobs: pools are for a root switch with the ranks attached directly (declare "
            "the pool at the root, or set switch.role: root)");
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::string key = idx("pools", i);
    PoolConfig pc = read_pool(rd, ps[i], key, c);
    const YAML::Node at = ps[i]["jobs"];
    for (const auto& j : c.jobs)
      if (pc.has(j.id))
        rd.fail(at, key + ".jobs",
                "ids " + std::to_string(pc.first) + ".." + std::to_string(pc.first + pc.count - 1) + " include job " +
                    std::to_string(j.id) +
                    " of jobs: a pool's ids are apart from every declared job (move the pool or the job)");
    for (size_t k = 0; k < c.pools.size(); ++k)
      if (pc.has(c.pools[k].first) || c.pools[k].has(pc.first))
        rd.fail(at, key + ".jobs",
                "ids " + std::to_string(pc.first) + ".." + std::to_string(pc.first + pc.count - 1) + " overlap " +
                    idx("pools", k) + "'s " + std::to_string(c.pools[k].first) + ".." +
                    std::to_string(c.pools[k].first + c.pools[k].count - 1) + ": pools are disjoint");
    c.pools.push_back(std::move(pc));
  }
}

// The switch-wide settings: width, timers, rings, arbiter, reducers, fan-out, lcores.
void read_settings(const Reader& rd, const YAML::Node& root, SwitchConfig& c) {
  c.kulisch_width = int(rd.uint_or(root, "kulisch_width", "", 8, 4096, kMaxWidth));
  for (size_t i = 0; i < c.jobs.size(); ++i)
    check_width(rd, root["kulisch_width"] ? root["kulisch_width"] : root, c.kulisch_width, c.jobs[i],
                {"job " + std::to_string(c.jobs[i].id), "the job's group", idx("jobs", i)});
  for (size_t i = 0; i < c.pools.size(); ++i) {
    JobConfig widest;  // the largest job the pool admits
    widest.group = c.pools[i].max_group;
    widest.formats = c.pools[i].formats;
    widest.policies = c.pools[i].policies;
    check_width(rd, root["kulisch_width"] ? root["kulisch_width"] : root, c.kulisch_width, widest,
                {"pool " + std::to_string(c.pools[i].first), "the pool's max_group", idx("pools", i)});
  }
  c.retention_ms = uint32_t(rd.uint_or(root, "retention_ms", "", 0, 3600000, 1000));
  c.retention_mib = uint32_t(rd.uint_or(root, "retention_mib", "", 0, 4096, 64));
  c.op_timeout_ms = uint32_t(rd.uint_or(root, "op_timeout_ms", "", 0, 3600000, 3000));
  c.peer_timeout_ms =
      uint32_t(rd.uint_or(root, "peer_timeout_ms", "", 0, 3600000, std::max<uint32_t>(15000, c.op_timeout_ms)));
  if (c.op_timeout_ms && c.peer_timeout_ms < c.op_timeout_ms)
    rd.fail(root["peer_timeout_ms"], "peer_timeout_ms",
            std::to_string(c.peer_timeout_ms) + " is below op_timeout_ms (" + std::to_string(c.op_timeout_ms) +
                "): an op waiting for another switch is given at least op_timeout_ms");
  c.partial_retry_ms = uint32_t(rd.uint_or(root, "partial_retry_ms", "", 0, 3600000, 200));
  c.stop_timeout_ms = uint32_t(rd.uint_or(root, "stop_timeout_ms", "", 0, 3600000, 5000));
  if (const YAML::Node r = root["rings"]) {
    rd.only(r, "rings", {"size"});
    c.ring_size = uint32_t(rd.uint_or(r, "size", "rings", 64, 1u << 20, 1024));
    if (c.ring_size & (c.ring_size - 1))
      rd.fail(r["size"], "rings.size", std::to_string(c.ring_size) + " is not a power of two");
  }
  if (const YAML::Node a = root["arbiter"]) {
    rd.only(a, "arbiter", {"mode", "seed"});
    if (const YAML::Node m = a["mode"]) c.arbiter = rd.word<ArbiterMode>(m, "arbiter.mode", "an arbiter mode");
    c.arbiter_seed = rd.uint_or(a, "seed", "arbiter", 0, ~uint64_t(0), 1);
  }
  if (const YAML::Node f = root["fanout"]) c.fanout = rd.word<Fanout>(f, "fanout", "a fan-out");
  if (const YAML::Node l = root["layout"]) c.layout = rd.word<Layout>(l, "layout", "a layout");
  if (const YAML::Node l = root["lcores"]) {
    if (!l.IsSequence()) rd.fail(l, "lcores", "expected a list of lcore ids such as [0, 1]");
    for (size_t i = 0; i < l.size(); ++i) c.lcores.push_back(unsigned(rd.uint(l[i], idx("lcores", i), 0, 1023)));
  }
  c.polling = std::any_of(c.ports.begin(), c.ports.end(), kernel_interface) ? Polling::ADAPTIVE : Polling::BUSY;
  if (const YAML::Node p = root["polling"]) c.polling = rd.word<Polling>(p, "polling", "a polling mode");
  c.polling_sleep_max_us = uint32_t(rd.uint_or(root, "polling_sleep_max_us", "", 1, 100000, 1000));
  // Shards: one per listed lcore unless given. Clients read the same key (the steering rule's S).
  c.reducer_shards = uint32_t(std::max<size_t>(1, c.lcores.size()));
  if (const YAML::Node r = root["reducers"]) {
    rd.only(r, "reducers", {"shards", "slots"});
    c.reducer_shards = uint32_t(rd.uint_or(r, "shards", "reducers", 1, 64, c.reducer_shards));
    c.slots_per_shard = uint32_t(rd.uint_or(r, "slots", "reducers", 1, 1u << 20, 4096));
  }
  if (uint32_t(c.udp_port) + c.reducer_shards - 1 > 65535)
    rd.fail(root["reducers"] ? root["reducers"] : root, "reducers.shards",
            "the shard ports " + std::to_string(c.udp_port) + " + 0.." + std::to_string(c.reducer_shards - 1) +
                " run past 65535: lower switch.udp_port or the shards");
}

// A job or pool that names no slot_quota gets a fair share of a shard's slot
// table (SECURITY-REVIEW F11): slots / (declared jobs + pool ids), at least
// kMinQuota, so that no one job or tenant can take every slot. 0, given,
// still means none (the table alone bounds it).
void default_quotas(SwitchConfig& c) {
  size_t tenants = c.jobs.size();
  for (const PoolConfig& p : c.pools) tenants += p.count;
  const uint32_t fair = std::max<uint32_t>(kMinQuota, uint32_t(c.slots_per_shard / std::max<size_t>(1, tenants)));
  for (JobConfig& j : c.jobs)
    if (j.slot_quota == kQuotaUnset) j.slot_quota = fair;
  for (PoolConfig& p : c.pools)
    if (p.slot_quota == kQuotaUnset) p.slot_quota = fair;
}

}  // namespace

bool kernel_interface(const PortConfig& p) {
  for (const char* kind : {"net_af_packet", "net_af_xdp", "net_tap"})
    if (p.device.rfind(kind, 0) == 0) return true;
  return false;
}

SwitchConfig parse_config(const std::string& text, const std::string& name) {
  Reader rd(name);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(name + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                      ": not valid YAML: " + e.msg);
  }
  if (!root || root.IsNull()) throw ConfigError(name + ": the file is empty: see configs/reference.yaml");
  rd.only(root, "",
          {"switch", "ports", "jobs", "kulisch_width", "retention_ms", "retention_mib", "op_timeout_ms",
           "peer_timeout_ms", "partial_retry_ms", "rings", "arbiter", "reducers", "fanout", "layout", "lcores", "pools",
           "polling", "polling_sleep_max_us", "stop_timeout_ms"});
  SwitchConfig c;
  c.path = name;
  read_switch(rd, root, c);
  read_ports(rd, root, c);
  if (c.parent) check_not_a_port_ip(rd, c, root["switch"]["parent"]["ip"], "switch.parent.ip", "parent switch");
  read_jobs(rd, root, c);
  read_pools(rd, root, c);
  read_settings(rd, root, c);
  default_quotas(c);
  return c;
}

SwitchConfig load_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError(path + ": cannot read the configuration file (does it exist? see configs/reference.yaml)");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_config(ss.str(), path);
}

}  // namespace prism
