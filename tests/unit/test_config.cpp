// Switch configuration (lib/config): configs/reference.yaml loads with the
// values docs/CONFIG.md documents, and every error says where and what.
//
// docs/CONFIG.md: "Every error names the file, the line and column, and the
// key path, and says what would be valid", e.g.
//   switch.yaml:23:9: jobs[0].members[2].ip: '10.0.0.300' is not an IPv4 address (write a.b.c.d)
// The expectations below come from that contract and the tables of
// CONFIG.md (ranges, defaults, allowed words), not from the implementation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "config/config.hpp"

namespace {

namespace fs = std::filesystem;
using prism::ConfigError;
using prism::parse_config;
using prism::SwitchConfig;

// configs/reference.yaml, found from the test's working directory, the source
// file's path (relative to the build directory) or the executable's location.
fs::path reference_yaml() {
  std::vector<fs::path> starts = {fs::current_path(), fs::path(__FILE__).parent_path()};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  for (fs::path d : starts) {
    if (d.is_relative()) d = fs::current_path() / d;
    for (int up = 0; up < 8 && !d.empty(); ++up, d = d.parent_path()) {
      const fs::path p = d / "configs" / "reference.yaml";
      if (fs::exists(p)) return p;
      if (d == d.parent_path()) break;
    }
  }
  return {};
}

// The message of the ConfigError `yaml` raises ("no error" when it parses,
// "NOT A ConfigError: ..." when something else is thrown).
std::string error_of(const std::string& yaml, const std::string& name = "t.yaml") {
  try {
    parse_config(yaml, name);
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT A ConfigError: ") + e.what();
  }
  return "no error";
}

struct Where {
  int line = 0, col = 0;
  std::string key, message;
};

// Splits "t.yaml:LINE:COL: KEY: MESSAGE"; line 0 when the message does not have that form.
Where where(const std::string& msg, const std::string& file = "t.yaml") {
  Where w;
  std::smatch m;
  const std::regex re("^" + std::regex_replace(file, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                      R"(:([0-9]+):([0-9]+): ([^ ]+): (.*)$)");
  if (!std::regex_match(msg, m, re)) return w;
  w.line = std::stoi(m[1]);
  w.col = std::stoi(m[2]);
  w.key = m[3];
  w.message = m[4];
  return w;
}

// The error has the file, `line`, a column, exactly the key path `key`, and
// every one of `says` in its message.
void expect_error(const std::string& yaml, int line, const std::string& key, std::initializer_list<std::string> says) {
  const std::string msg = error_of(yaml);
  SCOPED_TRACE("error: " + msg + "\nfor:\n" + yaml);
  const Where w = where(msg);
  ASSERT_GT(w.line, 0) << "not of the form t.yaml:LINE:COL: KEY: MESSAGE";
  EXPECT_EQ(w.line, line);
  EXPECT_GT(w.col, 0);
  EXPECT_EQ(w.key, key);
  for (const auto& s : says) EXPECT_NE(w.message.find(s), std::string::npos) << "message lacks '" << s << "'";
}

// `s` between two `q` (built with append: GCC 12's -Wrestrict misfires on "'" + std::string(s) + "'").
std::string quoted(const char* s, char q = '\'') {
  std::string r(1, q);
  r.append(s);
  r.push_back(q);
  return r;
}

// Replaces the one occurrence of `from` in `text`.
std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in the base config";
  if (at == std::string::npos) return text;
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << "'" << from << "' is not unique";
  return text.replace(at, from.size(), to);
}

// A valid root config; the comments are its line numbers.
const std::string kBase =
    "switch:\n"                                                               // 1
    "  id: 1\n"                                                               // 2
    "  role: root\n"                                                          // 3
    "ports:\n"                                                                // 4
    "  - {id: 0, mac: \"02:00:00:00:ff:00\", ip: 10.0.0.254}\n"               // 5
    "  - {id: 1, mac: \"02:00:00:00:ff:01\", ip: 10.0.1.254}\n"               // 6
    "jobs:\n"                                                                 // 7
    "  - id: 7\n"                                                             // 8
    "    group: 3\n"                                                          // 9
    "    formats: [fp32, bf16]\n"                                             // 10
    "    policies: [kulisch]\n"                                               // 11
    "    members:\n"                                                          // 12
    "      - {rank: 0, port: 0, mac: \"02:00:00:00:00:00\", ip: 10.0.0.1}\n"  // 13
    "      - {rank: 1, port: 0, mac: \"02:00:00:00:00:01\", ip: 10.0.0.2}\n"  // 14
    "      - {rank: 2, port: 0, mac: \"02:00:00:00:00:02\", ip: 10.0.0.3}\n"  // 15
    "rings:\n"                                                                // 16
    "  size: 256\n"                                                           // 17
    "arbiter:\n"                                                              // 18
    "  mode: random\n"                                                        // 19
    "  seed: 5\n";                                                            // 20

// The same job at a leaf: members 0 and 1 here, ranks 2..3 elsewhere.
const std::string kLeaf =
    "switch:\n"                                                        // 1
    "  id: 2\n"                                                        // 2
    "  role: leaf\n"                                                   // 3
    "  parent: {port: 1, mac: \"02:00:00:00:fe:01\", ip: 10.0.1.1}\n"  // 4
    "jobs:\n"                                                          // 5
    "  - id: 7\n"                                                      // 6
    "    group: 4\n"                                                   // 7
    "    members:\n"                                                   // 8
    "      - {rank: 0, mac: \"02:00:00:00:00:00\", ip: 10.0.0.1}\n"    // 9
    "      - {rank: 1, mac: \"02:00:00:00:00:01\", ip: 10.0.0.2}\n";   // 10

// A root above two leaves.
const std::string kTree =
    "switch: {id: 1}\n"                                                                // 1
    "jobs:\n"                                                                          // 2
    "  - id: 9\n"                                                                      // 3
    "    members:\n"                                                                   // 4
    "      - {rank: 0, mac: \"02:00:00:00:00:00\", ip: 10.0.0.1}\n"                    // 5
    "    children:\n"                                                                  // 6
    "      - {id: 2, port: 1, mac: \"02:00:00:00:fe:02\", ip: 10.0.2.1, ranks: 4}\n"   // 7
    "      - {id: 3, port: 1, mac: \"02:00:00:00:fe:03\", ip: 10.0.3.1, ranks: 3}\n";  // 8

prism::wire::Mac mac(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint8_t e, uint8_t f) { return {a, b, c, d, e, f}; }
uint32_t ip4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return a << 24 | b << 16 | c << 8 | d; }

// ---------------------------------------------------------------------------
// configs/reference.yaml

TEST(ConfigReference, LoadsWithTheDocumentedValues) {
  const fs::path path = reference_yaml();
  ASSERT_FALSE(path.empty()) << "configs/reference.yaml not found";
  const SwitchConfig c = prism::load_config(path.string());
  EXPECT_EQ(c.path, path.string());
  EXPECT_EQ(c.id, 1);
  EXPECT_EQ(c.role, prism::Role::ROOT);
  EXPECT_EQ(c.udp_port, 20562);
  EXPECT_FALSE(c.parent.has_value());

  ASSERT_EQ(c.ports.size(), 1u);
  EXPECT_EQ(c.ports[0].id, 0);
  EXPECT_EQ(c.ports[0].device, "");
  EXPECT_EQ(c.ports[0].mac, mac(0x02, 0, 0, 0, 0xff, 0x00));
  EXPECT_EQ(c.ports[0].ip, ip4(10, 0, 0, 254));
  EXPECT_EQ(c.port(0), &c.ports[0]);
  EXPECT_EQ(c.port(1), nullptr);

  ASSERT_EQ(c.jobs.size(), 1u);
  const prism::JobConfig& j = c.jobs[0];
  EXPECT_EQ(c.job(7), &j);
  EXPECT_EQ(c.job(8), nullptr);
  EXPECT_EQ(j.id, 7u);
  EXPECT_EQ(j.group, 4);
  using F = prism::Format;
  EXPECT_EQ(j.formats, (std::vector<F>{F::FP32, F::FP16, F::BF16, F::E4M3FN, F::E4M3FNUZ, F::E5M2, F::E5M2FNUZ, F::INT8,
                                       F::INT32}));
  using P = prism::Policy;
  EXPECT_EQ(j.policies, (std::vector<P>{P::KULISCH_FIXED, P::FP32_ARRIVAL, P::FP32_BINOMIAL}));
  EXPECT_EQ(j.slot_quota, 0u);
  EXPECT_FALSE(j.udp_checksum_optional) << "udp_checksum: required, as documented";
  EXPECT_TRUE(j.children.empty());
  ASSERT_EQ(j.members.size(), 4u);
  for (uint16_t r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const prism::MemberConfig& m = j.members[r];
    EXPECT_EQ(m.rank, r);
    EXPECT_EQ(m.port, 0);
    EXPECT_EQ(m.addr.mac, mac(0x02, 0, 0, 0, 0, uint8_t(r)));
    EXPECT_EQ(m.addr.ip, ip4(10, 0, 0, 1u + r));
    EXPECT_EQ(m.addr.port, 20562);
    EXPECT_EQ(j.member(r), &m);
  }
  EXPECT_EQ(j.member(4), nullptr);

  EXPECT_EQ(c.kulisch_width, 294);
  EXPECT_EQ(c.retention_ms, 1000u);
  EXPECT_EQ(c.retention_mib, 64u);
  EXPECT_EQ(c.op_timeout_ms, 3000u);
  EXPECT_EQ(c.peer_timeout_ms, 15000u);
  EXPECT_EQ(c.ring_size, 1024u);
  EXPECT_EQ(c.arbiter, prism::ArbiterMode::ROUND_ROBIN);
  EXPECT_EQ(c.arbiter_seed, 1u);
  EXPECT_EQ(c.reducer_shards, 1u);
  EXPECT_EQ(c.slots_per_shard, 4096u);
  EXPECT_EQ(c.fanout, prism::Fanout::COPY);
  EXPECT_EQ(c.lcores, (std::vector<unsigned>{0}));

  ASSERT_EQ(c.pools.size(), 1u);  // CONFIG.md's pools: example
  const prism::PoolConfig& pl = c.pools[0];
  EXPECT_EQ(pl.first, 1000u);
  EXPECT_EQ(pl.count, 64u);
  EXPECT_EQ(pl.max_group, 16);
  ASSERT_EQ(pl.ranges.size(), 1u);
  EXPECT_EQ(pl.ranges[0].net, ip4(10, 0, 0, 0));
  EXPECT_EQ(pl.ranges[0].len, 24);
  EXPECT_EQ(pl.ports, (std::vector<uint16_t>{0}));
  EXPECT_EQ(pl.slot_quota, 256u);
  EXPECT_EQ(pl.idle_timeout_ms, 30000u);
  EXPECT_FALSE(pl.udp_checksum_optional);
  EXPECT_EQ(c.pool_of(1000), &pl);
  EXPECT_EQ(c.pool_of(1063), &pl);
  EXPECT_EQ(c.pool_of(1064), nullptr);
  EXPECT_EQ(c.pool_of(999), nullptr);
}

// ---------------------------------------------------------------------------
// Valid configurations and defaults (CONFIG.md's tables)

TEST(ConfigValid, BaseConfigParses) {
  const SwitchConfig c = parse_config(kBase, "t.yaml");
  EXPECT_EQ(c.path, "t.yaml");
  ASSERT_EQ(c.jobs.size(), 1u);
  EXPECT_EQ(c.jobs[0].group, 3);
  EXPECT_EQ(c.ring_size, 256u);
  EXPECT_EQ(c.arbiter, prism::ArbiterMode::RANDOM);
  EXPECT_EQ(c.arbiter_seed, 5u);
}

TEST(ConfigValid, DefaultsWhenKeysAreLeftOut) {
  const SwitchConfig c =
      parse_config("jobs:\n  - id: 1\n    members: [{rank: 0, mac: \"02:00:00:00:00:01\", ip: 1.2.3.4}]\n");
  EXPECT_EQ(c.id, 0);
  EXPECT_EQ(c.role, prism::Role::ROOT);
  EXPECT_EQ(c.udp_port, 20562);
  EXPECT_TRUE(c.ports.empty());
  ASSERT_EQ(c.jobs.size(), 1u);
  EXPECT_EQ(c.jobs[0].group, 1) << "a root's group defaults to members + children's ranks";
  EXPECT_TRUE(c.jobs[0].formats.empty()) << "formats default to all (empty list)";
  EXPECT_TRUE(c.jobs[0].policies.empty());
  EXPECT_EQ(c.jobs[0].members[0].addr.port, 20562);
  EXPECT_EQ(c.jobs[0].members[0].port, 0);
  EXPECT_EQ(c.kulisch_width, 294);
  EXPECT_EQ(c.retention_ms, 1000u);
  EXPECT_EQ(c.retention_mib, 64u);
  EXPECT_EQ(c.op_timeout_ms, 3000u);
  EXPECT_EQ(c.ring_size, 1024u);
  EXPECT_EQ(c.arbiter, prism::ArbiterMode::ROUND_ROBIN);
  EXPECT_EQ(c.arbiter_seed, 1u);
  EXPECT_EQ(c.reducer_shards, 1u);
  EXPECT_EQ(c.slots_per_shard, 4096u);
  EXPECT_EQ(c.layout, prism::Layout::SHARED_NOTHING);
}

// Shards default to one per listed lcore; the steering rule's ports must fit.
TEST(ConfigValid, ShardsDefaultToTheLcoresAndTheirPortsFit) {
  const std::string job = "jobs:\n  - id: 1\n    members: [{rank: 0, mac: \"02:00:00:00:00:01\", ip: 1.2.3.4}]\n";
  EXPECT_EQ(parse_config(job + "lcores: [0, 1, 2]\n").reducer_shards, 3u);
  EXPECT_EQ(parse_config(job + "lcores: [0, 1, 2]\nreducers: {shards: 5}\n").reducer_shards, 5u);
  EXPECT_EQ(parse_config(job + "layout: pipelined\n").layout, prism::Layout::PIPELINED);
  EXPECT_EQ(parse_config(job + "switch: {udp_port: 65534}\nreducers: {shards: 2}\n").reducer_shards, 2u);
  try {
    parse_config(job + "switch: {udp_port: 65535}\nreducers: {shards: 2}\n");
    ADD_FAILURE() << "shard ports past 65535 were accepted";
  } catch (const prism::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("run past 65535"), std::string::npos) << e.what();
  }
  try {
    parse_config(job + "layout: staged\n");
    ADD_FAILURE() << "an unknown layout was accepted";
  } catch (const prism::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a layout (shared_nothing, pipelined)"), std::string::npos) << e.what();
  }
}

TEST(ConfigValid, LeafWithParentAndGroup) {
  const SwitchConfig c = parse_config(kLeaf, "t.yaml");
  EXPECT_EQ(c.role, prism::Role::LEAF);
  ASSERT_TRUE(c.parent.has_value());
  EXPECT_EQ(c.parent->port, 1);
  EXPECT_EQ(c.parent->addr.mac, mac(0x02, 0, 0, 0, 0xfe, 0x01));
  EXPECT_EQ(c.parent->addr.ip, ip4(10, 0, 1, 1));
  EXPECT_EQ(c.parent->addr.port, 20562);
  EXPECT_EQ(c.jobs[0].group, 4) << "a leaf's members are only part of the group";
}

TEST(ConfigValid, RootWithChildrenCoversTheGroup) {
  const SwitchConfig c = parse_config(kTree, "t.yaml");
  ASSERT_EQ(c.jobs.size(), 1u);
  const auto& j = c.jobs[0];
  EXPECT_EQ(j.group, 8) << "1 member + 4 + 3 children's ranks";
  ASSERT_EQ(j.children.size(), 2u);
  EXPECT_EQ(j.children[0].id, 2);
  EXPECT_EQ(j.children[0].port, 1);
  EXPECT_EQ(j.children[0].ranks, 4);
  EXPECT_EQ(j.children[1].addr.ip, ip4(10, 0, 3, 1));
}

TEST(ConfigValid, NumbersAtTheEdgesOfTheirRanges) {
  const SwitchConfig c = parse_config(
      "switch: {id: 65535, udp_port: 65472}\n"
      "ports: [{id: 1023, mac: \"02:00:00:00:00:01\", ip: 255.255.255.254}]\n"
      "jobs: [{id: 4294967295, slot_quota: 16777216, members: "
      "[{rank: 0, port: 1023, mac: \"fe:ff:ff:ff:ff:ff\", ip: 0.0.0.1, udp_port: 1}]}]\n"
      "kulisch_width: 4096\nretention_ms: 3600000\nretention_mib: 4096\nop_timeout_ms: 3600000\n"
      "rings: {size: 1048576}\narbiter: {seed: 18446744073709551615}\nreducers: {shards: 64, slots: 1048576}\n"
      "lcores: [1023, 0]\n");
  EXPECT_EQ(c.id, 65535);
  EXPECT_EQ(c.udp_port, 65472) << "the highest base whose 64 shard ports fit below 65536";
  EXPECT_EQ(c.ports[0].id, 1023);
  EXPECT_EQ(c.jobs[0].id, 4294967295u);
  EXPECT_EQ(c.jobs[0].slot_quota, 16777216u);
  EXPECT_EQ(c.ports[0].ip, 0xFFFFFFFEu) << "the highest address that is not the broadcast address";
  EXPECT_EQ(c.jobs[0].members[0].addr.mac, mac(0xfe, 0xff, 0xff, 0xff, 0xff, 0xff)) << "the highest unicast MAC";
  EXPECT_EQ(c.jobs[0].members[0].addr.ip, 1u) << "the lowest address that is not 0.0.0.0";
  EXPECT_EQ(c.jobs[0].members[0].addr.port, 1);
  EXPECT_EQ(c.kulisch_width, 4096);
  EXPECT_EQ(c.ring_size, 1048576u);
  EXPECT_EQ(c.arbiter_seed, 18446744073709551615u);
  EXPECT_EQ(c.reducer_shards, 64u);
  EXPECT_EQ(c.lcores, (std::vector<unsigned>{1023, 0}));
  EXPECT_EQ(c.retention_mib, 4096u);
  EXPECT_EQ(c.op_timeout_ms, 3600000u);
  EXPECT_EQ(c.peer_timeout_ms, 3600000u);  // by default at least op_timeout_ms
  EXPECT_EQ(parse_config(with(kBase, "size: 256", "size: 64")).ring_size, 64u);
  // The low edges: no retention at all, and no timeout.
  const SwitchConfig z = parse_config(kBase + "retention_mib: 0\nop_timeout_ms: 0\n");
  EXPECT_EQ(z.retention_mib, 0u);
  EXPECT_EQ(z.op_timeout_ms, 0u);
}

// ---------------------------------------------------------------------------
// Errors: file:line:col: key: what is wrong and what is valid

TEST(ConfigErrors, BrokenYamlNamesFileAndLine) {
  // Line 3 maps a value that is itself a mapping written inline: not YAML.
  const std::string msg = error_of("switch:\n  id: 1\n  role: root: leaf\n");
  EXPECT_EQ(msg.rfind("t.yaml:3:", 0), 0u) << msg;
  EXPECT_NE(msg.find("not valid YAML"), std::string::npos) << msg;
  // An unclosed flow sequence.
  const std::string m2 = error_of("lcores: [0, 1\n");
  EXPECT_EQ(m2.rfind("t.yaml:", 0), 0u) << m2;
  EXPECT_NE(m2.find("not valid YAML"), std::string::npos) << m2;
  // A tab where indentation is expected.
  const std::string m3 = error_of("switch:\n\tid: 1\n");
  EXPECT_EQ(m3.rfind("t.yaml:", 0), 0u) << m3;
  EXPECT_NE(m3.find("not valid YAML"), std::string::npos) << m3;
}

TEST(ConfigErrors, UnknownKeysAreTyposAndListTheValidOnes) {
  expect_error(with(kBase, "  role: root", "  rol: root"), 3, "switch.rol",
               {"unknown key", "id", "role", "udp_port", "parent"});
  expect_error(with(kBase, "rings:", "ring:"), 16, "ring", {"unknown key", "rings", "arbiter", "jobs"});
  expect_error(with(kBase, "{rank: 2,", "{rnak: 2,"), 15, "jobs[0].members[2].rnak",
               {"unknown key", "rank", "port", "mac", "ip", "udp_port"});
  expect_error(with(kBase, "    group: 3", "    groups: 3"), 9, "jobs[0].groups",
               {"unknown key", "group", "members", "children"});
  expect_error(with(kBase, "  seed: 5", "  sed: 5"), 20, "arbiter.sed", {"unknown key", "mode", "seed"});
  expect_error(with(kBase, "{id: 1, mac", "{id: 1, device: x, dev: y, mac"), 6, "ports[1].dev",
               {"unknown key", "device"});
  expect_error(with(kTree, "ranks: 3}", "rank: 3}"), 8, "jobs[0].children[1].rank", {"unknown key", "ranks"});
  expect_error(with(kLeaf, "ip: 10.0.1.1}", "ip: 10.0.1.1, mtu: 9000}"), 4, "switch.parent.mtu",
               {"unknown key", "port", "mac", "ip", "udp_port"});
}

TEST(ConfigErrors, MissingRequiredKeys) {
  expect_error(with(kBase, "{id: 0, mac: \"02:00:00:00:ff:00\", ip: 10.0.0.254}", "{id: 0, ip: 10.0.0.254}"), 5,
               "ports[0].mac", {"required"});
  expect_error(with(kBase, "{id: 1, mac: \"02:00:00:00:ff:01\", ", "{mac: \"02:00:00:00:ff:01\", "), 6, "ports[1].id",
               {"required"});
  expect_error(with(kBase, "ip: 10.0.0.3}", "}"), 15, "jobs[0].members[2].ip", {"required"});
  expect_error(with(kBase, "{rank: 1, ", "{"), 14, "jobs[0].members[1].rank", {"required"});
  expect_error(with(kBase, "  - id: 7\n    group: 3\n", "  - group: 3\n"), 8, "jobs[0].id", {"required"});
  expect_error(with(kTree, ", ranks: 4}", "}"), 7, "jobs[0].children[0].ranks", {"required"});
  expect_error(with(kLeaf, "mac: \"02:00:00:00:fe:01\", ", ""), 4, "switch.parent.mac", {"required"});
}

TEST(ConfigErrors, BadMacAddress) {
  for (const char* bad : {"02:00:00:00:00", "zz:00:00:00:00:02", "02:00:00:00:00:02:03", "02-00-00-00-00-02", ""}) {
    SCOPED_TRACE(bad);
    expect_error(with(kBase, "\"02:00:00:00:00:02\"", quoted(bad, '"')), 15, "jobs[0].members[2].mac",
                 {quoted(bad), "not a MAC address", "02:00:00:00:00:01"});
  }
  expect_error(with(kBase, "\"02:00:00:00:ff:01\"", "\"02:00:00:00:ff\""), 6, "ports[1].mac", {"not a MAC address"});
  expect_error(with(kBase, "mac: \"02:00:00:00:00:02\"", "mac: [2, 0]"), 15, "jobs[0].members[2].mac", {"string"});
}

TEST(ConfigErrors, BadIpv4Address) {
  // CONFIG.md's own example.
  expect_error(with(kBase, "ip: 10.0.0.3}", "ip: 10.0.0.300}"), 15, "jobs[0].members[2].ip",
               {"'10.0.0.300' is not an IPv4 address", "a.b.c.d"});
  for (const char* bad : {"1.2.3", "256.1.1.1", "1.2.3.4x", "1.2.3.4.5", "ten.0.0.1"}) {
    SCOPED_TRACE(bad);
    expect_error(with(kBase, "ip: 10.0.1.254}", "ip: " + quoted(bad, '"') + "}"), 6, "ports[1].ip",
                 {quoted(bad), "not an IPv4 address", "a.b.c.d"});
  }
  expect_error(with(kLeaf, "ip: 10.0.1.1}", "ip: 10.0.1}"), 4, "switch.parent.ip", {"not an IPv4 address"});
}

// SECURITY-REVIEW F24: numbers are decimal. A leading zero is not octal and
// 0x is not hexadecimal: both are refused, saying so, never read silently as
// another number (020562 was port 8562).
TEST(ConfigErrors, NumbersAreDecimalOnly) {
  expect_error(with(kBase, "  role: root\n", "  role: root\n  udp_port: 020562\n"), 4, "switch.udp_port",
               {"'020562'", "leading zero", "decimal"});
  expect_error(with(kBase, "  role: root\n", "  role: root\n  udp_port: 0x5052\n"), 4, "switch.udp_port",
               {"'0x5052'", "not a whole number", "decimal"});
  expect_error(with(kBase, "  - id: 7\n", "  - id: 010\n"), 8, "jobs[0].id", {"'010'", "leading zero"});
  expect_error(with(kBase, "  - id: 7\n", "  - id: +7\n"), 8, "jobs[0].id", {"'+7'", "not a whole number"});
  EXPECT_EQ(parse_config(with(kBase, "  role: root\n", "  role: root\n  udp_port: 20562\n")).udp_port, 20562);
  EXPECT_EQ(parse_config(with(kBase, "  - id: 7\n", "  - id: 0\n")).jobs[0].id, 0u);  // a plain 0 is fine
}

// jobs[].rate and pools[].rate: megabits and kibibytes in, bytes out; the
// peak defaults to the committed rate, the bursts to 64 KiB; a peak below
// the committed rate and unknown keys are refused, saying where.
TEST(ConfigValid, RatesInBytes) {
  const SwitchConfig c = parse_config(
      with(kBase, "  - id: 7\n", "  - id: 7\n    rate: {committed_mbit: 800, peak_mbit: 1000, peak_burst_kib: 256}\n"));
  const prism::RateConfig& r = c.jobs[0].rate;
  EXPECT_TRUE(r.set());
  EXPECT_EQ(r.committed, 100000000u);
  EXPECT_EQ(r.peak, 125000000u);
  EXPECT_EQ(r.committed_burst, 65536u);
  EXPECT_EQ(r.peak_burst, 262144u);
  EXPECT_FALSE(parse_config(kBase).jobs[0].rate.set()) << "no rate: no limit";
  const SwitchConfig p = parse_config(
      kBase +
      "pools:\n  - {jobs: {first: 100, count: 2}, max_group: 3, ranges: [10.1.0.0/16], rate: {committed_mbit: 8}}\n");
  EXPECT_EQ(p.pools[0].rate.committed, 1000000u);
  EXPECT_EQ(p.pools[0].rate.peak, 1000000u);
  expect_error(with(kBase, "  - id: 7\n", "  - id: 7\n    rate: {committed_mbit: 10, peak_mbit: 5}\n"), 9,
               "jobs[0].rate.peak_mbit", {"below committed_mbit"});
  expect_error(with(kBase, "  - id: 7\n", "  - id: 7\n    rate: {mbit: 10}\n"), 9, "jobs[0].rate.mbit",
               {"unknown key", "committed_mbit"});
}

TEST(ConfigErrors, NumbersOutOfRangeSayTheRange) {
  expect_error(with(kBase, "{id: 1, mac", "{id: 1024, mac"), 6, "ports[1].id", {"1024", "out of range", "0..1023"});
  expect_error(with(kBase, "  id: 1\n", "  id: 65536\n"), 2, "switch.id", {"65536", "out of range", "0..65535"});
  expect_error(with(kBase, "  role: root\n", "  role: root\n  udp_port: 0\n"), 4, "switch.udp_port",
               {"out of range", "1..65535"});
  expect_error(with(kBase, "size: 256", "size: 32"), 17, "rings.size", {"32", "out of range", "64..1048576"});
  expect_error(with(kBase, "  seed: 5\n", "  seed: 5\nreducers: {shards: 65}\n"), 21, "reducers.shards",
               {"65", "out of range", "1..64"});
  expect_error(with(kBase, "    group: 3", "    group: 65536"), 9, "jobs[0].group", {"out of range", "1..65535"});
  expect_error(with(kBase, "{rank: 2, port: 0,", "{rank: 2, port: 2000,"), 15, "jobs[0].members[2].port",
               {"2000", "out of range", "0..1023"});
  expect_error(with(kBase, "ip: 10.0.0.3}", "ip: 10.0.0.3, udp_port: 70000}"), 15, "jobs[0].members[2].udp_port",
               {"70000", "out of range", "1..65535"});
  expect_error(with(kBase, "  seed: 5\n", "  seed: 5\nlcores: [0, 1024]\n"), 21, "lcores[1]",
               {"1024", "out of range", "0..1023"});
  expect_error(with(kTree, "ranks: 3}", "ranks: 0}"), 8, "jobs[0].children[1].ranks", {"out of range", "1..65535"});
  expect_error(with(kBase, "  - id: 7\n", "  - id: 4294967296\n"), 8, "jobs[0].id", {"out of range", "0..4294967295"});
  // Top-level numbers: line, range and the key's name (its exact path is checked below).
  for (const auto& [yaml, key, range] :
       {std::tuple<const char*, const char*, const char*>{"kulisch_width: 7", "kulisch_width", "8..4096"},
        {"retention_ms: 3600001", "retention_ms", "0..3600000"},
        {"retention_mib: 4097", "retention_mib", "0..4096"},
        {"op_timeout_ms: 3600001", "op_timeout_ms", "0..3600000"}}) {
    const std::string msg = error_of(kBase + yaml + "\n");
    const Where w = where(msg);
    EXPECT_EQ(w.line, 21) << msg;
    EXPECT_NE(w.key.find(key), std::string::npos) << msg;
    EXPECT_NE(w.message.find("out of range"), std::string::npos) << msg;
    EXPECT_NE(w.message.find(range), std::string::npos) << msg;
  }
}

// The key path of a top-level key is its name, as for unknown top-level keys ("ring").
TEST(ConfigErrors, TopLevelKeyPathsHaveNoLeadingDot) {
  expect_error(kBase + "kulisch_width: 7\n", 21, "kulisch_width", {"out of range", "8..4096"});
  expect_error(kBase + "retention_ms: x\n", 21, "retention_ms", {"not a whole number"});
  expect_error(kBase + "op_timeout_ms: -1\n", 21, "op_timeout_ms", {"not a whole number"});
  expect_error(kBase + "op_timeout_ms: 3000\npeer_timeout_ms: 2999\n", 22, "peer_timeout_ms",
               {"2999 is below op_timeout_ms (3000)"});
  expect_error(kBase + "retention_mib: 1.5\n", 21, "retention_mib", {"not a whole number"});
}

TEST(ConfigErrors, NonNumbersSayANumberIsExpected) {
  expect_error(with(kBase, "  - id: 7\n", "  - id: seven\n"), 8, "jobs[0].id",
               {"'seven'", "not a whole number", "0..4294967295"});
  expect_error(with(kBase, "size: 256", "size: -256"), 17, "rings.size", {"'-256'", "not a whole number"});
  expect_error(with(kBase, "size: 256", "size: 2.5e2"), 17, "rings.size", {"not a whole number"});
  expect_error(with(kBase, "{rank: 1,", "{rank: one,"), 14, "jobs[0].members[1].rank", {"'one'", "not a whole number"});
  expect_error(with(kBase, "    group: 3", "    group: [3]"), 9, "jobs[0].group", {"number"});
  expect_error(with(kBase, "  seed: 5", "  seed: 99999999999999999999"), 20, "arbiter.seed", {"not a whole number"});
  expect_error(with(kBase, "  seed: 5\n", "  seed: 5\nlcores: [0, x]\n"), 21, "lcores[1]",
               {"'x'", "not a whole number"});
}

TEST(ConfigErrors, DuplicatesAreRefused) {
  expect_error(with(kBase, "{id: 1, mac", "{id: 0, mac"), 6, "ports[1].id", {"port 0", "twice"});
  expect_error(with(kBase, "{rank: 2,", "{rank: 1,"), 15, "jobs[0].members[2].rank", {"rank 1", "twice", "job 7"});
  expect_error(with(kTree, "{id: 3,", "{id: 2,"), 8, "jobs[0].children[1].id", {"child 2", "twice"});
  // Job 7 twice in the list.
  const std::string dup_job = with(kBase, "rings:\n",
                                   "  - id: 7\n"                                                           // 16
                                   "    members: [{rank: 0, mac: \"02:00:00:00:00:00\", ip: 10.0.0.1}]\n"  // 17
                                   "rings:\n");
  expect_error(dup_job, 16, "jobs[1].id", {"job 7", "twice"});
  // Two members at the same IP and UDP port.
  const std::string same_addr = with(kBase, "ip: 10.0.0.2}", "ip: 10.0.0.1}");
  const Where w = where(error_of(same_addr));
  EXPECT_EQ(w.line, 14) << error_of(same_addr);
  EXPECT_EQ(w.key.rfind("jobs[0].members[1]", 0), 0u) << error_of(same_addr);
  EXPECT_NE(w.message.find("same ip and udp_port"), std::string::npos) << error_of(same_addr);
}

TEST(ConfigErrors, RankMustBeBelowTheGroup) {
  const std::string msg = error_of(with(kBase, "{rank: 2,", "{rank: 3,"));
  const Where w = where(msg);
  ASSERT_GT(w.line, 0) << msg;
  EXPECT_GE(w.line, 8) << "within job 7: " << msg;
  EXPECT_LE(w.line, 15) << msg;
  EXPECT_EQ(w.key.rfind("jobs[0].members", 0), 0u) << msg;
  EXPECT_NE(w.message.find("rank 3"), std::string::npos) << msg;
  EXPECT_NE(w.message.find("group size 3"), std::string::npos) << msg;
}

TEST(ConfigErrors, RootMembersAndChildrenMustCoverTheGroup) {
  // Group 4 but only 3 members.
  std::string msg = error_of(with(kBase, "    group: 3", "    group: 4"));
  Where w = where(msg);
  ASSERT_GT(w.line, 0) << msg;
  EXPECT_EQ(w.key, "jobs[0].group") << msg;
  EXPECT_GE(w.line, 8) << msg;
  EXPECT_LE(w.line, 9) << msg;
  EXPECT_NE(w.message.find("(3)"), std::string::npos) << msg;
  EXPECT_NE(w.message.find("cover the group (4)"), std::string::npos) << msg;
  // Children's ranks count: 1 + 4 + 3 = 8, not 9.
  msg = error_of(with(kTree, "  - id: 9\n", "  - id: 9\n    group: 9\n"));
  w = where(msg);
  EXPECT_EQ(w.key, "jobs[0].group") << msg;
  EXPECT_NE(w.message.find("(8)"), std::string::npos) << msg;
  // More ranks than the group, at a leaf too.
  msg = error_of(with(kLeaf, "    group: 4", "    group: 1"));
  w = where(msg);
  EXPECT_EQ(w.key.rfind("jobs[0]", 0), 0u) << msg;
  EXPECT_NE(w.message.find("group size 1"), std::string::npos) << msg;
  // A job with no ranks at all.
  expect_error(with(kBase,
                    "    members:\n"
                    "      - {rank: 0, port: 0, mac: \"02:00:00:00:00:00\", ip: 10.0.0.1}\n"
                    "      - {rank: 1, port: 0, mac: \"02:00:00:00:00:01\", ip: 10.0.0.2}\n"
                    "      - {rank: 2, port: 0, mac: \"02:00:00:00:00:02\", ip: 10.0.0.3}\n",
                    ""),
               8, "jobs[0]", {"members", "children"});
}

TEST(ConfigErrors, LeafNeedsParentAndGroupRootHasNoParent) {
  expect_error(with(kLeaf, "  parent: {port: 1, mac: \"02:00:00:00:fe:01\", ip: 10.0.1.1}\n", ""), 2, "switch.parent",
               {"leaf", "parent", "mac", "ip"});
  expect_error(with(kLeaf, "  role: leaf\n", "  role: root\n"), 4, "switch.parent",
               {"root has no parent", "role: leaf"});
  expect_error(with(kLeaf, "    group: 4\n", ""), 6, "jobs[0].group", {"leaf", "group"});
}

TEST(ConfigErrors, MembersAndChildrenUseListedPorts) {
  std::string msg = error_of(with(kBase, "{rank: 2, port: 0,", "{rank: 2, port: 5,"));
  Where w = where(msg);
  ASSERT_GT(w.line, 0) << msg;
  EXPECT_EQ(w.key.rfind("jobs[0].members", 0), 0u) << msg;
  EXPECT_NE(w.message.find("port 5"), std::string::npos) << msg;
  EXPECT_NE(w.message.find("not in ports"), std::string::npos) << msg;
  msg = error_of("ports: [{id: 0, mac: \"02:00:00:00:ff:00\", ip: 10.0.0.254}]\n" + kTree.substr(kTree.find("jobs:")));
  w = where(msg);
  EXPECT_EQ(w.key.rfind("jobs[0].children", 0), 0u) << msg;
  EXPECT_NE(w.message.find("child 2"), std::string::npos) << msg;
  EXPECT_NE(w.message.find("port 1"), std::string::npos) << msg;
  // Without a ports list, any port goes.
  EXPECT_NO_THROW(parse_config(kTree));
}

TEST(ConfigErrors, RingSizeMustBeAPowerOfTwo) {
  expect_error(with(kBase, "size: 256", "size: 1000"), 17, "rings.size", {"1000", "power of two"});
  expect_error(with(kBase, "size: 256", "size: 1048575"), 17, "rings.size", {"power of two"});
}

// docs/CONFIG.md's words for the config's closed sets, in its order.
TEST(ConfigValid, ClosedSetsListTheDocumentedWords) {
  EXPECT_EQ(prism::choices<prism::Fanout>(), "copy chain");
  EXPECT_EQ(prism::choices<prism::ArbiterMode>(), "round_robin random reverse");
  EXPECT_EQ(prism::choices<prism::Role>(), "root leaf");
  EXPECT_EQ(prism::from_name<prism::ArbiterMode>("reverse"), prism::ArbiterMode::REVERSE);
  EXPECT_FALSE(prism::from_name<prism::Fanout>("egress").has_value());
  EXPECT_EQ(parse_config(with(kBase, "mode: random", "mode: reverse")).arbiter, prism::ArbiterMode::REVERSE);
}

TEST(ConfigValid, FanoutIsCopyOrChain) {
  EXPECT_EQ(parse_config(kBase + "fanout: chain\n").fanout, prism::Fanout::CHAIN);
  EXPECT_EQ(parse_config(kBase + "fanout: copy\n").fanout, prism::Fanout::COPY);
}

// Egress replication measured no gain and is gone (issue 16): the old word is
// refused with the valid ones, not silently taken as another.
TEST(ConfigErrors, FanoutEgressIsGone) {
  expect_error(kBase + "fanout: egress\n", 21, "fanout", {"'egress'", "copy", "chain"});
  const Where w = where(error_of(kBase + "fanout: egress\n"));
  EXPECT_EQ(w.message.find("egress", w.message.find("'egress'") + 8), std::string::npos)
      << "egress is not listed as valid: " << w.message;
}

TEST(ConfigErrors, UnknownWordsListTheValidOnes) {
  expect_error(with(kBase, "mode: random", "mode: fifo"), 19, "arbiter.mode",
               {"'fifo'", "round_robin", "random", "reverse"});
  expect_error(kBase + "fanout: zero_copy\n", 21, "fanout", {"'zero_copy'", "copy", "chain"});
  expect_error(with(kBase, "role: root", "role: spine"), 3, "switch.role", {"'spine'", "root", "leaf"});
  expect_error(with(kBase, "[fp32, bf16]", "[fp32, fp64]"), 10, "jobs[0].formats[1]",
               {"'fp64'", "fp32", "fp16", "bf16", "e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz", "int8", "int32"});
  expect_error(with(kBase, "[kulisch]", "[kahan]"), 11, "jobs[0].policies[0]",
               {"'kahan'", "fp32_arrival", "kulisch", "fp32_binomial"});
  expect_error(with(kBase, "[fp32, bf16]", "fp32"), 10, "jobs[0].formats", {"list"});
}

// ---------------------------------------------------------------------------
// Configurations that used to load and then misbehave (issue 16): each is a
// ConfigError at the offending value, saying what is wrong and what to do.

// The switch would take a station's frames for its own and answer them from the port.
TEST(ConfigErrors, StationIpEqualToASwitchPortIp) {
  expect_error(with(kBase, "ip: 10.0.0.3}", "ip: 10.0.1.254}"), 15, "jobs[0].members[2].ip",
               {"10.0.1.254", "port 1", "own"});
  const std::string ports =
      "ports: [{id: 0, mac: \"02:00:00:00:ff:00\", ip: 10.0.0.254}, "
      "{id: 1, mac: \"02:00:00:00:ff:01\", ip: 10.0.3.1}]\n";
  expect_error(ports + kTree, 9, "jobs[0].children[1].ip", {"10.0.3.1", "port 1", "own"});
  const std::string leaf_ports =
      "ports: [{id: 0, mac: \"02:00:00:00:ff:00\", ip: 10.0.0.254}, "
      "{id: 1, mac: \"02:00:00:00:ff:01\", ip: 10.0.1.1}]\n";
  expect_error(with(kLeaf, "jobs:\n", leaf_ports + "jobs:\n"), 4, "switch.parent.ip", {"10.0.1.1", "port 1", "own"});
  // Distinct addresses load (the same configs with the port's address changed).
  EXPECT_NO_THROW(parse_config(with(ports, "10.0.3.1", "10.0.9.254") + kTree));
  EXPECT_NO_THROW(parse_config(with(kLeaf, "jobs:\n", with(leaf_ports, "10.0.1.1", "10.0.9.254") + "jobs:\n")));
}

// A broadcast or multicast MAC (the first byte odd, IEEE 802) names no one station.
TEST(ConfigErrors, BroadcastAndMulticastMacs) {
  expect_error(with(kBase, "\"02:00:00:00:ff:01\"", "\"ff:ff:ff:ff:ff:ff\""), 6, "ports[1].mac",
               {"broadcast", "unicast"});
  expect_error(with(kBase, "\"02:00:00:00:ff:00\"", "\"01:00:5e:00:00:01\""), 5, "ports[0].mac",
               {"multicast", "unicast"});
  expect_error(with(kBase, "\"02:00:00:00:00:01\"", "\"01:00:5e:00:00:01\""), 14, "jobs[0].members[1].mac",
               {"'01:00:5e:00:00:01'", "multicast", "unicast"});
  expect_error(with(kBase, "\"02:00:00:00:00:02\"", "\"ff:ff:ff:ff:ff:ff\""), 15, "jobs[0].members[2].mac",
               {"broadcast"});
  expect_error(with(kTree, "02:00:00:00:fe:03", "33:33:00:00:00:01"), 8, "jobs[0].children[1].mac", {"multicast"});
  expect_error(with(kLeaf, "02:00:00:00:fe:01", "ff:ff:ff:ff:ff:ff"), 4, "switch.parent.mac", {"broadcast"});
  expect_error(with(kLeaf, "02:00:00:00:fe:01", "03:00:00:00:00:01"), 4, "switch.parent.mac", {"multicast"});
  // Locally administered unicast (bit 1 of the first byte) is an ordinary station address.
  EXPECT_NO_THROW(parse_config(with(kBase, "\"02:00:00:00:00:01\"", "\"fe:00:00:00:00:01\"")));
}

// 0.0.0.0 is no address and 255.255.255.255 every host's.
TEST(ConfigErrors, NoAddressAndBroadcastIps) {
  expect_error(with(kBase, "ip: 10.0.0.2}", "ip: 0.0.0.0}"), 14, "jobs[0].members[1].ip", {"0.0.0.0"});
  expect_error(with(kBase, "ip: 10.0.0.2}", "ip: 255.255.255.255}"), 14, "jobs[0].members[1].ip",
               {"255.255.255.255", "broadcast"});
  expect_error(with(kTree, "ip: 10.0.2.1", "ip: 255.255.255.255"), 7, "jobs[0].children[0].ip", {"broadcast"});
  expect_error(with(kTree, "ip: 10.0.3.1", "ip: 0.0.0.0"), 8, "jobs[0].children[1].ip", {"0.0.0.0"});
  expect_error(with(kLeaf, "ip: 10.0.1.1", "ip: 0.0.0.0"), 4, "switch.parent.ip", {"0.0.0.0"});
  expect_error(with(kLeaf, "ip: 10.0.1.1", "ip: 255.255.255.255"), 4, "switch.parent.ip", {"broadcast"});
  expect_error(with(kBase, "ip: 10.0.1.254", "ip: 0.0.0.0"), 6, "ports[1].ip", {"0.0.0.0"});
}

// The widths an exact sum needs (docs/ARITHMETIC.md: W = Emax - Emin + p + 1 +
// ceil(log2 R) for floats, bits + ceil(log2 R) for integers): fp32 278 + ceil(log2 R),
// bf16 262 + ceil(log2 R), int32 32 + ceil(log2 R).
TEST(ConfigErrors, KulischWidthTooNarrowForAFormatTheJobAllows) {
  // kBase: job 7, group 3 (ceil(log2 3) = 2), formats [fp32, bf16], policies [kulisch].
  expect_error(kBase + "kulisch_width: 279\n", 21, "kulisch_width",
               {"279", "job 7", "fp32", "280", "raise kulisch_width", "jobs[0].formats"});
  const std::string one = where(error_of(kBase + "kulisch_width: 270\n")).message;
  EXPECT_NE(one.find("fp32 needs 280"), std::string::npos) << one;
  EXPECT_EQ(one.find("bf16"), std::string::npos) << "bf16 needs 264 bits, which fit: " << one;
  const std::string both = where(error_of(kBase + "kulisch_width: 263\n")).message;
  EXPECT_NE(both.find("fp32 needs 280"), std::string::npos) << both;
  EXPECT_NE(both.find("bf16 needs 264"), std::string::npos) << both;
  EXPECT_NO_THROW(parse_config(kBase + "kulisch_width: 280\n"));
  EXPECT_NO_THROW(parse_config(with(kBase, "[fp32, bf16]", "[bf16]") + "kulisch_width: 264\n"));
  // The issue's example: fp32 at group 8 needs 281 bits.
  const std::string g8 = with(with(kTree, "ranks: 3}", "ranks: 3}\n    formats: [fp32]"), "switch: {id: 1}\n",
                              "switch: {id: 1}\nkulisch_width: 280\n");
  expect_error(g8, 2, "kulisch_width", {"job 9", "fp32", "281"});
  // The FP32 policies keep no exact sum of a float format: no width needed.
  EXPECT_NO_THROW(parse_config(with(kBase, "[kulisch]", "[fp32_arrival, fp32_binomial]") + "kulisch_width: 8\n"));
  // Integer sums are exact under every policy; with formats absent, every format is allowed.
  const std::string ints = with(with(kBase, "    formats: [fp32, bf16]\n", ""), "[kulisch]", "[fp32_arrival]");
  expect_error(ints + "kulisch_width: 33\n", 20, "kulisch_width", {"int32 needs 34", "formats"});
  EXPECT_NO_THROW(parse_config(ints + "kulisch_width: 34\n"));
}

TEST(ConfigErrors, WrongShapes) {
  expect_error(with(kBase, "switch:\n  id: 1\n  role: root\n", "switch: 5\n"), 1, "switch", {"mapping"});
  expect_error("ports: 5\n", 1, "ports", {"list"});
  expect_error("jobs: {id: 1}\n", 1, "jobs", {"list"});
  expect_error("lcores: 0\n", 1, "lcores", {"list"});
}

TEST(ConfigErrors, EmptyFile) {
  for (const char* empty : {"", "\n", "# only a comment\n", "---\n"}) {
    SCOPED_TRACE(std::string("'") + empty + "'");
    const std::string msg = error_of(empty);
    EXPECT_EQ(msg.rfind("t.yaml: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
    EXPECT_NE(msg.find("configs/reference.yaml"), std::string::npos) << msg;
  }
}

TEST(ConfigErrors, MissingFile) {
  const std::string path = "/nonexistent-prism-dir/switch.yaml";
  try {
    prism::load_config(path);
    FAIL() << "no error for a missing file";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find("cannot read"), std::string::npos) << msg;
  }
}

TEST(ConfigErrors, LoadConfigNamesTheFileItRead) {
  const fs::path dir = fs::temp_directory_path() / ("prism-test-config-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path p = dir / "switch.yaml";
  std::ofstream(p) << with(kBase, "ip: 10.0.0.3}", "ip: 10.0.0.300}");
  std::string msg;
  try {
    prism::load_config(p.string());
  } catch (const ConfigError& e) {
    msg = e.what();
  }
  fs::remove_all(dir);
  const Where w = where(msg, p.string());
  EXPECT_EQ(w.line, 15) << msg;
  EXPECT_EQ(w.key, "jobs[0].members[2].ip") << msg;
}

// Keys must be plain words: a key that is a list, a mapping or null is an
// unknown key like any other, reported as a ConfigError.
TEST(ConfigErrors, NonScalarKeysAreConfigErrors) {
  for (const char* yaml : {"[ports]: 1\n", "switch: {id: 1, [a]: 2}\n", "? \n: 1\n", "switch:\n  {a: 1}: 2\n",
                           "jobs:\n  - {id: 1, ~: 2}\n"}) {
    SCOPED_TRACE(yaml);
    const std::string msg = error_of(yaml);
    EXPECT_EQ(msg.rfind("t.yaml:", 0), 0u) << msg;
    EXPECT_NE(msg.find("unknown key"), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------------------
// Address helpers

TEST(Addresses, MacRoundTrips) {
  EXPECT_EQ(prism::parse_mac("02:00:00:00:00:01"), mac(0x02, 0, 0, 0, 0, 0x01));
  EXPECT_EQ(prism::parse_mac("ff:ff:ff:ff:ff:ff"), mac(0xff, 0xff, 0xff, 0xff, 0xff, 0xff));
  EXPECT_EQ(prism::parse_mac("0A:bC:00:10:9f:F0"), mac(0x0a, 0xbc, 0x00, 0x10, 0x9f, 0xf0));
  EXPECT_EQ(prism::format_mac(mac(0x02, 0xab, 0, 0x10, 0xff, 0x01)), "02:ab:00:10:ff:01");
  for (const char* s : {"00:00:00:00:00:00", "02:00:00:00:fe:01", "de:ad:be:ef:00:01", "12:34:56:78:9a:bc"}) {
    const auto m = prism::parse_mac(s);
    ASSERT_TRUE(m.has_value()) << s;
    EXPECT_EQ(prism::format_mac(*m), s);
  }
}

TEST(Addresses, MacRejections) {
  for (const char* s :
       {"02:00:00:00:00", "zz:00:00:00:00:00", "02:00:00:00:00:0g", "02:00:00:00:00:01:02", "02-00-00-00-00-01",
        "0200.0000.0001", "020000000001", "2:0:0:0:0:1", "02:00:00:00:00:1", "02:00:00:00:00:001", "02:00:00:00:00:01 ",
        "02:00:00:00:00:01x", "02::00:00:00:00:01", "", ":::::"}) {
    EXPECT_FALSE(prism::parse_mac(s).has_value())
        << "'" << s << "' accepted as " << prism::format_mac(*prism::parse_mac(s));
  }
}

// Every accepted MAC is six two-digit hex groups: nothing else may slip
// through as some other address.
TEST(Addresses, MacRejectsSignsBlanksAndPrefixes) {
  for (const char* s : {"-1:00:00:00:00:00", "+2:00:00:00:00:00", " 2: 0: 0: 0: 0: 0", "0x:00:00:00:00:00",
                        "02:00:00:00:00:0x", "-0:-0:-0:-0:-0:-0", " 02:00:00:00:00:1"}) {
    EXPECT_FALSE(prism::parse_mac(s).has_value())
        << "'" << s << "' accepted as " << prism::format_mac(*prism::parse_mac(s));
  }
  EXPECT_NE(error_of(with(kBase, "\"02:00:00:00:00:02\"", "\"-1:00:00:00:00:00\"")), "no error");
}

TEST(Addresses, Ipv4RoundTrips) {
  EXPECT_EQ(prism::parse_ipv4("10.0.0.1"), ip4(10, 0, 0, 1));
  EXPECT_EQ(prism::parse_ipv4("0.0.0.0"), 0u);
  EXPECT_EQ(prism::parse_ipv4("255.255.255.255"), 0xFFFFFFFFu);
  EXPECT_EQ(prism::parse_ipv4("192.168.1.254"), ip4(192, 168, 1, 254));
  EXPECT_EQ(prism::format_ipv4(ip4(10, 0, 0, 254)), "10.0.0.254");
  EXPECT_EQ(prism::format_ipv4(0), "0.0.0.0");
  EXPECT_EQ(prism::format_ipv4(0xFFFFFFFFu), "255.255.255.255");
  for (uint32_t v : {0u, 1u, 0x0A000001u, 0xC0A801FEu, 0x7F000001u, 0xFFFFFFFEu, 0x80000000u}) {
    const std::string s = prism::format_ipv4(v);
    EXPECT_EQ(prism::parse_ipv4(s), v) << s;
  }
}

TEST(Addresses, Ipv4Rejections) {
  for (const char* s : {"1.2.3",   "256.1.1.1", "1.2.3.4x", "1.2.3.4.5", "1.2.3.256",  "1.2.3.1000", "1..2.3",
                        "a.b.c.d", "1.2.3.-4",  "-1.2.3.4", "+1.2.3.4",  " 1.2.3.4",   "1.2.3.4 ",   "1.2.3.",
                        ".1.2.3",  "",          "1,2,3,4",  "0x1.2.3.4", "1.2.3.4/24", "::1"}) {
    EXPECT_FALSE(prism::parse_ipv4(s).has_value())
        << "'" << s << "' accepted as " << prism::format_ipv4(*prism::parse_ipv4(s));
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// pools: (CONFIG.md's pools table)

// kBase with a pool appended: its lines are 21.. .
std::string with_pool(const std::string& pool) { return kBase + "pools:\n" + pool; }  // pools: is line 21

TEST(ConfigPools, DefaultsAndRanges) {
  const SwitchConfig c =
      parse_config(with_pool("  - {jobs: {first: 100, count: 4}, max_group: 3, ranges: [10.1.0.0/16, 10.2.0.7]}\n"));
  ASSERT_EQ(c.pools.size(), 1u);
  const prism::PoolConfig& p = c.pools[0];
  EXPECT_TRUE(p.ports.empty()) << "default: every port";
  EXPECT_TRUE(p.lists(0) && p.lists(1) && p.lists(7));
  EXPECT_EQ(p.idle_timeout_ms, 30000u);
  EXPECT_EQ(p.join_timeout_ms, 10000u);
  // No slot_quota: a fair share of the 4096 slots among kBase's job and the pool's 4 ids (F11).
  EXPECT_EQ(p.slot_quota, 4096u / 5);
  EXPECT_EQ(c.jobs[0].slot_quota, 4096u / 5);
  EXPECT_TRUE(p.formats.empty() && p.policies.empty());
  EXPECT_TRUE(p.admits(ip4(10, 1, 255, 3)));
  EXPECT_TRUE(p.admits(ip4(10, 2, 0, 7)));  // a bare address is a /32
  EXPECT_FALSE(p.admits(ip4(10, 2, 0, 8)));
  EXPECT_FALSE(p.admits(ip4(10, 3, 0, 1)));
  const SwitchConfig all =
      parse_config(with_pool("  - {jobs: {first: 0, count: 1}, max_group: 1, ranges: [0.0.0.0/0]}\n"));
  EXPECT_TRUE(all.pools[0].admits(ip4(192, 168, 1, 1)));
  const SwitchConfig top = parse_config(
      with_pool("  - {jobs: {first: 4294967295, count: 1}, max_group: 2, ranges: [10.0.0.0/8], ports: [1]}\n"));
  EXPECT_EQ(top.pools[0].first, 4294967295u);
  EXPECT_TRUE(top.pools[0].lists(1) && !top.pools[0].lists(0));
}

TEST(ConfigPools, ErrorsSayWhereAndWhat) {
  const std::string ok =
      "  - jobs: {first: 100, count: 4}\n"  // 22
      "    max_group: 3\n"                  // 23
      "    ranges: [10.1.0.0/16]\n";        // 24
  expect_error(with_pool(with(ok, "first: 100", "first: 6")), 22, "pools[0].jobs",
               {"include job 7", "apart from every declared job"});
  expect_error(with_pool(with(ok, "first: 100", "first: 5")), 22, "pools[0].jobs", {"include job 7"});
  expect_error(with_pool(ok + "  - {jobs: {first: 103, count: 2}, max_group: 1, ranges: [10.0.0.0/8]}\n"), 25,
               "pools[1].jobs", {"overlap pools[0]", "100..103", "disjoint"});
  expect_error(with_pool(with(ok, "count: 4", "count: 0")), 22, "pools[0].jobs.count", {"out of range", "1..4096"});
  expect_error(with_pool(with(ok, "first: 100, count: 4", "first: 4294967295, count: 2")), 22, "pools[0].jobs.count",
               {"past 4294967295"});
  expect_error(with_pool(with(ok, "max_group: 3", "max_group: 0")), 23, "pools[0].max_group", {"out of range"});
  expect_error(with_pool(with(ok, "max_group: 3", "max_group: 65536")), 23, "pools[0].max_group", {"out of range"});
  expect_error(with_pool(with(ok, "    ranges: [10.1.0.0/16]\n", "")), 22, "pools[0].ranges", {"required"});
  expect_error(with_pool(with(ok, "[10.1.0.0/16]", "[]")), 24, "pools[0].ranges", {"at least one"});
  expect_error(with_pool(with(ok, "10.1.0.0/16", "10.1.0.1/16")), 24, "pools[0].ranges[0]",
               {"bits set past its prefix"});
  expect_error(with_pool(with(ok, "10.1.0.0/16", "10.1.0.0/33")), 24, "pools[0].ranges[0]", {"not an IPv4 range"});
  expect_error(with_pool(with(ok, "10.1.0.0/16", "10.1.0/16")), 24, "pools[0].ranges[0]", {"not an IPv4 range"});
  expect_error(with_pool(ok + "    ports: [2]\n"), 25, "pools[0].ports[0]", {"port 2 is not in ports"});
  expect_error(with_pool(ok + "    idle_timeout_ms: 0\n"), 25, "pools[0].idle_timeout_ms", {"out of range"});
  expect_error(with_pool(ok + "    formats: [fp99]\n"), 25, "pools[0].formats[0]", {"not a format"});
  expect_error(with_pool(ok + "    udp_checksum: maybe\n"), 25, "pools[0].udp_checksum", {"optional"});
  expect_error(with_pool(ok + "    members: []\n"), 25, "pools[0].members", {"unknown key", "max_group"});
  expect_error(with_pool(ok + "    children: []\n"), 25, "pools[0].children", {"no child switches"});
  expect_error(with_pool(with(with(ok, "count: 4", "count: 4096"), "max_group: 3", "max_group: 257")), 23,
               "pools[0].max_group", {"1048576"});
  // kulisch_width must hold the largest job the pool admits (fp32 at 65535 ranks: 294 bits).
  expect_error(with_pool(with(ok, "max_group: 3", "max_group: 65535")) + "kulisch_width: 282\n", 25, "kulisch_width",
               {"pool 100", "the pool's max_group", "pools[0].formats"});
  // A leaf takes no pools.
  expect_error(kLeaf + "pools:\n  - {jobs: {first: 100, count: 1}, max_group: 2, ranges: [10.0.0.0/8]}\n", 12, "pools",
               {"a leaf cannot take pooled jobs", "root"});
}

// polling: busy or adaptive; the default follows the ports (adaptive when one is a Linux interface, whose
// kernel is on the path anyway, busy otherwise); polling_sleep_max_us bounds the sleep.
namespace {
TEST(ConfigPolling, DefaultFollowsThePortsAndTheKeyOverrides) {
  EXPECT_EQ(parse_config(kBase, "t.yaml").polling, prism::Polling::BUSY);  // ports without a device
  EXPECT_EQ(parse_config(kBase, "t.yaml").polling_sleep_max_us, 1000u);
  for (const char* dev : {"net_af_packet0,iface=r0", "net_af_xdp0,iface=r0", "net_tap0,iface=t0"}) {
    const std::string y = with(kBase, "{id: 1, mac", std::string("{id: 1, device: \"") + dev + "\", mac");
    EXPECT_EQ(parse_config(y, "t.yaml").polling, prism::Polling::ADAPTIVE) << dev;
    EXPECT_EQ(parse_config(y + "polling: busy\n", "t.yaml").polling, prism::Polling::BUSY) << dev;
  }
  const std::string pcap = with(kBase, "{id: 1, mac", "{id: 1, device: \"net_pcap1,rx_pcap=a.pcap\", mac");
  EXPECT_EQ(parse_config(pcap, "t.yaml").polling, prism::Polling::BUSY);
  const SwitchConfig c = parse_config(kBase + "polling: adaptive\npolling_sleep_max_us: 300\n", "t.yaml");
  EXPECT_EQ(c.polling, prism::Polling::ADAPTIVE);
  EXPECT_EQ(c.polling_sleep_max_us, 300u);
}

TEST(ConfigPolling, BadValuesNameTheKeyAndTheChoices) {
  expect_error(kBase + "polling: lazy\n", 21, "polling", {"'lazy'", "busy", "adaptive"});
  expect_error(kBase + "polling_sleep_max_us: 0\n", 21, "polling_sleep_max_us", {"1"});
  expect_error(kBase + "polling_sleep_max_us: 200000\n", 21, "polling_sleep_max_us", {"100000"});
  expect_error(kBase + "poling: busy\n", 21, "poling", {"unknown key", "polling"});
}
}  // namespace
