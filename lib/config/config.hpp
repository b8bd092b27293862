// The switch's configuration, read from YAML (docs/CONFIG.md is the reference,
// configs/reference.yaml the commented example). The same file gives prism-gen
// the addresses of a job's members.
//
// Every error names the file, the line and the key, says what was wrong and
// what would be valid: "switch.yaml:14:7: jobs[0].members[2].ip: '10.0.0.300'
// is not an IPv4 address (write a.b.c.d)".
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "arith/op.hpp"
#include "proto/packet.hpp"
#include "util/closed_set.hpp"

namespace prism {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct PortConfig {
  uint16_t id = 0;
  std::string device;  // DPDK device (PCI address or vdev such as "net_pcap0,rx_pcap=in.pcap"); may be empty
  wire::Mac mac{};
  uint32_t ip = 0;
};

// Whether a job's contributions must carry a UDP checksum.
enum class UdpChecksum : uint8_t { REQUIRED, OPTIONAL };
inline constexpr size_t kUdpChecksumCount = 2;
inline constexpr Entry<UdpChecksum> kUdpChecksums[] = {
    {UdpChecksum::REQUIRED, "required", "a UDP checksum of 0 (none) is refused (NACK MALFORMED)"},
    {UdpChecksum::OPTIONAL, "optional",
     "a UDP checksum of 0 is accepted, and the switch sums nothing of such a packet: the link's CRC is its only check"},
};
static_assert(std::size(kUdpChecksums) == kUdpChecksumCount, "every UdpChecksum has a row in kUdpChecksums");
constexpr std::span<const Entry<UdpChecksum>> entries(UdpChecksum) { return kUdpChecksums; }

// A rank of a job attached to this switch.
struct MemberConfig {
  uint16_t rank = 0;  // 0..group-1: the sender id in its CONTRIBs, the index in FP32_BINOMIAL's order
  uint16_t port = 0;  // switch port it is reached through
  wire::Endpoint addr;
};

// A switch below this one that sends PARTIALs for a job.
struct ChildConfig {
  uint16_t id = 0;  // the sender id in its PARTIALs
  uint16_t port = 0;
  wire::Endpoint addr;
  uint16_t ranks = 0;  // contributions it folds into each partial (terms)
};

// A job's contribution rate (jobs[].rate, pools[].rate): a two-rate
// three-colour marker (RFC 2698, DPDK's rte_meter trTCM), in bytes of frames.
// What exceeds the peak rate is dropped at RX (`over_rate`) before it costs
// any reducer work. Unset (0): no limit.
struct RateConfig {
  uint64_t committed = 0, peak = 0;              // bytes per second
  uint64_t committed_burst = 0, peak_burst = 0;  // bytes
  bool set() const { return peak != 0; }
};

struct JobConfig {
  uint32_t id = 0;
  uint16_t group = 0;            // R: contributions an op combines in total
  std::vector<Format> formats;   // input formats allowed (default: all)
  std::vector<Policy> policies;  // policies allowed (default: all)
  uint32_t slot_quota = 0;       // max ops in flight for this job (0: no quota)
  // Contributions may come without a UDP checksum (0, as RFC 768 allows and RoCEv2 does): the switch
  // then sums nothing of them. The default requires one (verified unless the device verified it).
  bool udp_checksum_optional = false;
  RateConfig rate;
  std::vector<MemberConfig> members;
  std::vector<ChildConfig> children;
  const MemberConfig* member(uint16_t rank) const;
};

// An IPv4 range in CIDR form (10.0.0.0/24): `len` leading bits of `net`.
struct Ipv4Range {
  uint32_t net = 0;
  uint8_t len = 32;
  bool has(uint32_t ip) const { return len == 0 || ((ip ^ net) >> (32 - len)) == 0; }
};

// A pool of job ids that ranks claim at run time (PROTOCOL.md, "Job pools"):
// ALLOC takes a free id, the first JOIN of each rank binds it to the address
// it came from. A root switch's, with its ranks attached directly.
struct PoolConfig {
  uint32_t first = 0;  // the pool id: ALLOCs name it
  uint32_t count = 0;  // ids first .. first + count - 1
  uint16_t max_group = 0;
  std::vector<Ipv4Range> ranges;  // sources its ranks may have (at least one)
  std::vector<uint16_t> ports;    // switch ports they may come through; empty: every port
  uint32_t slot_quota = 0;        // per job, as JobConfig's
  std::vector<Format> formats;
  std::vector<Policy> policies;
  bool udp_checksum_optional = false;
  uint32_t idle_timeout_ms = 30000;  // a job silent this long is reclaimed
  uint32_t join_timeout_ms = 10000;  // an id ALLOCATED that no rank joins this long is reclaimed
  RateConfig rate;                   // each of its jobs
  bool has(uint32_t job) const { return job - first < count; }
  bool admits(uint32_t ip) const;
  bool lists(uint16_t port) const;
};

// Where the switch sits in a tree of switches.
enum class Role : uint8_t { ROOT, LEAF };
inline constexpr size_t kRoleCount = 2;
inline constexpr Entry<Role> kRoles[] = {
    {Role::ROOT, "root", "the top of the tree: completes ops and sends RESULTs to members and children"},
    {Role::LEAF, "leaf", "below a parent: sends its partial sum up and forwards the parent's RESULT down"},
};
static_assert(std::size(kRoles) == kRoleCount, "every Role has a row in kRoles");
constexpr std::span<const Entry<Role>> entries(Role) { return kRoles; }

// How a RESULT reaches several ranks.
enum class Fanout : uint8_t { COPY, CHAIN };
inline constexpr size_t kFanoutCount = 2;
inline constexpr Entry<Fanout> kFanouts[] = {
    {Fanout::COPY, "copy", "a whole frame per rank, made by the reducer"},
    {Fanout::CHAIN, "chain",
     "a header mbuf per rank chained to one shared payload (only on devices that send chained mbufs, else copied)"},
};
static_assert(std::size(kFanouts) == kFanoutCount, "every Fanout has a row in kFanouts");
constexpr std::span<const Entry<Fanout>> entries(Fanout) { return kFanouts; }

// The order in which the VOQ arbiter serves its inputs.
enum class ArbiterMode : uint8_t { ROUND_ROBIN, RANDOM, REVERSE };
inline constexpr size_t kArbiterModeCount = 3;
inline constexpr Entry<ArbiterMode> kArbiterModes[] = {
    {ArbiterMode::ROUND_ROBIN, "round_robin", "each pass starts one input further on"},
    {ArbiterMode::RANDOM, "random", "each pass in a new random order (seeded by arbiter.seed)"},
    {ArbiterMode::REVERSE, "reverse", "a fixed order, last input first (a test of order independence)"},
};
static_assert(std::size(kArbiterModes) == kArbiterModeCount, "every ArbiterMode has a row in kArbiterModes");
constexpr std::span<const Entry<ArbiterMode>> entries(ArbiterMode) { return kArbiterModes; }

// How the lcores share the work (docs/PERFORMANCE.md measures both).
enum class Layout : uint8_t { SHARED_NOTHING, PIPELINED };
inline constexpr size_t kLayoutCount = 2;
inline constexpr Entry<Layout> kLayouts[] = {
    {Layout::SHARED_NOTHING, "shared_nothing",
     "every lcore polls its own queue of every port and runs its own shards to completion (RX, reduce, TX); the "
     "ports steer each shard's UDP port to its lcore"},
    {Layout::PIPELINED, "pipelined",
     "the main lcore runs RX and TX of every port, the others the reducer shards, through rings (the earlier "
     "layout, kept to compare)"},
};
static_assert(std::size(kLayouts) == kLayoutCount, "every Layout has a row in kLayouts");
constexpr std::span<const Entry<Layout>> entries(Layout) { return kLayouts; }

// How an lcore waits while its queues are empty (pipeline/idle.hpp).
enum class Polling : uint8_t { BUSY, ADAPTIVE };
inline constexpr size_t kPollingCount = 2;
inline constexpr Entry<Polling> kPollings[] = {
    {Polling::BUSY, "busy", "poll without pause: the lowest latency, and a whole CPU per lcore even when idle"},
    {Polling::ADAPTIVE, "adaptive",
     "when the queues are empty, sleep an eighth of the time idle so far, up to polling_sleep_max_us; busy again at "
     "the "
     "first packet"},
};
static_assert(std::size(kPollings) == kPollingCount, "every Polling has a row in kPollings");
constexpr std::span<const Entry<Polling>> entries(Polling) { return kPollings; }

// A port on a Linux interface (its device a net_af_packet, net_af_xdp or net_tap vdev): the kernel is on its
// path, and polling defaults to adaptive.
bool kernel_interface(const PortConfig& p);

struct ParentConfig {
  uint16_t port = 0;
  wire::Endpoint addr;
  uint32_t shards = 1;  // the parent's reducers.shards: its PARTIALs and JOINs go to the parent's shard ports
};

struct SwitchConfig {
  std::string path;  // where it was read from
  uint16_t id = 0;
  Role role = Role::ROOT;
  uint16_t udp_port = wire::kDefaultPort;
  std::optional<ParentConfig> parent;
  std::vector<PortConfig> ports;
  std::vector<JobConfig> jobs;
  std::vector<PoolConfig> pools;
  int kulisch_width = kMaxWidth;
  uint32_t retention_ms = 1000;   // how long a completed result is kept for retransmission
  uint32_t retention_mib = 64;    // room per reducer shard for retained results (0: none are kept)
  uint32_t op_timeout_ms = 3000;  // an incomplete op is abandoned after this (0: never)
  // An op whose own members have all contributed and that waits only for
  // another switch (a root for a child's PARTIAL, a leaf for its parent's
  // RESULT) is abandoned after this instead: that switch judges it, and may
  // be stalled or restarting meanwhile (at least op_timeout_ms).
  uint32_t peer_timeout_ms = 15000;
  // A graceful stop (SIGTERM): how long the ops in flight have to finish
  // before the switch gives them up and exits (0: at once).
  uint32_t stop_timeout_ms = 5000;
  uint32_t partial_retry_ms = 200;  // a leaf re-sends a PARTIAL whose RESULT is this late (0: never)
  uint32_t ring_size = 1024;        // VOQ ring entries (power of two)
  ArbiterMode arbiter = ArbiterMode::ROUND_ROBIN;
  uint64_t arbiter_seed = 1;
  uint32_t reducer_shards = 1;  // default: one per listed lcore; the steering rule's S (proto/steer.hpp)
  uint32_t slots_per_shard = 4096;
  Fanout fanout = Fanout::COPY;
  std::vector<unsigned> lcores;  // lcores that run stages; one lcore may run them all
  Layout layout = Layout::SHARED_NOTHING;
  // Default: adaptive when any port is on a Linux interface (kernel_interface), else busy.
  Polling polling = Polling::BUSY;
  uint32_t polling_sleep_max_us = 1000;  // adaptive: the longest sleep (OVS-DPDK's pmd-sleep-max)

  const JobConfig* job(uint32_t id) const;
  const PortConfig* port(uint16_t id) const;
  const PoolConfig* pool_of(uint32_t job) const;  // the pool whose ids hold `job`, or null
};

// Throws ConfigError.
SwitchConfig load_config(const std::string& path);
SwitchConfig parse_config(const std::string& yaml_text, const std::string& name = "<config>");

// Address helpers shared with the command-line tools.
std::optional<wire::Mac> parse_mac(const std::string& s);
std::optional<uint32_t> parse_ipv4(const std::string& s);
std::optional<Ipv4Range> parse_cidr(const std::string& s);  // a.b.c.d/len (host bits 0), or a.b.c.d (/32)
std::string format_mac(const wire::Mac& m);
std::string format_ipv4(uint32_t ip);

}  // namespace prism
