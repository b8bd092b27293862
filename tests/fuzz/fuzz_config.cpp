// libFuzzer target: parse_config on arbitrary text (lib/config/config.hpp).
//
// parse_config must either return a configuration or throw ConfigError whose
// message starts with the file name ("fuzz.yaml:LINE:COL: key: message", or
// "fuzz.yaml: the file is empty..."). Any other exception, a crash or a
// sanitizer report is a bug. A configuration it returns must keep the rules
// it checks: unique port ids, job ids, ranks and child ids, ranks below the
// group, members plus children's ranks covering the group at a root, a leaf
// with a parent and a root without one, a power-of-two ring size, unicast
// station MACs, station IPs that are addresses and not a port's, and a
// kulisch_width that holds every exact sum a job allows. The same
// bytes also go to parse_mac / parse_ipv4 (checks below).
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <typeinfo>

#include "config/config.hpp"
#include "fuzz_check.hpp"

namespace {

using namespace prism;  // NOLINT

void check_config(const SwitchConfig& c) {
  FUZZ_CHECK(c.path == "fuzz.yaml");
  FUZZ_CHECK(c.ring_size >= 64 && (c.ring_size & (c.ring_size - 1)) == 0);
  FUZZ_CHECK((c.role == Role::LEAF) == c.parent.has_value());
  std::set<uint16_t> ports;
  for (const auto& p : c.ports) FUZZ_CHECK(ports.insert(p.id).second && c.port(p.id) == &p);
  std::set<uint32_t> jobs;
  for (const auto& j : c.jobs) {
    FUZZ_CHECK(jobs.insert(j.id).second && c.job(j.id) == &j);
    FUZZ_CHECK(j.group >= 1);
    std::set<uint16_t> ranks, children;
    uint32_t local = 0;
    for (const auto& m : j.members) {
      FUZZ_CHECK(m.rank < j.group && ranks.insert(m.rank).second && j.member(m.rank) == &m);
      FUZZ_CHECK(c.ports.empty() || c.port(m.port));
      ++local;
    }
    for (const auto& ch : j.children) {
      FUZZ_CHECK(ch.ranks >= 1 && children.insert(ch.id).second);
      FUZZ_CHECK(c.ports.empty() || c.port(ch.port));
      local += ch.ranks;
    }
    FUZZ_CHECK(local >= 1 && local <= j.group);
    if (c.role == Role::ROOT) FUZZ_CHECK(local == j.group);
  }
  for (const auto& p : c.ports) {
    (void)format_mac(p.mac);
    (void)format_ipv4(p.ip);
  }
  // Stations are unicast, have an address, and none has a switch port's IP;
  // kulisch_width holds every exact sum a job allows.
  auto station = [&](const wire::Mac& m, uint32_t ip, bool is_port) {
    FUZZ_CHECK((m[0] & 1) == 0);
    FUZZ_CHECK(ip != 0 && ip != 0xFFFFFFFFu);
    if (!is_port)
      for (const auto& p : c.ports) FUZZ_CHECK(p.ip != ip);
  };
  for (const auto& p : c.ports) station(p.mac, p.ip, true);
  if (c.parent) station(c.parent->addr.mac, c.parent->addr.ip, false);
  for (const auto& j : c.jobs) {
    for (const auto& m : j.members) station(m.addr.mac, m.addr.ip, false);
    for (const auto& ch : j.children) station(ch.addr.mac, ch.addr.ip, false);
    for (const auto& f : entries(Format{}))
      for (const auto& p : entries(Policy{})) {
        const bool allowed = (j.formats.empty() || std::count(j.formats.begin(), j.formats.end(), f.value)) &&
                             (j.policies.empty() || std::count(j.policies.begin(), j.policies.end(), p.value));
        if (allowed && needs_exact_width(f.value, p.value))
          FUZZ_CHECK(required_width(f.value, j.group) <= c.kulisch_width);
      }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const SwitchConfig c = parse_config(text, "fuzz.yaml");
    check_config(c);
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    FUZZ_CHECK(m.rfind("fuzz.yaml:", 0) == 0 && m.size() > 11);
  } catch (const std::exception& e) {
    int status = 0;
    char* type = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
    std::fprintf(stderr, "parse_config threw %s (not ConfigError): %s\n", type ? type : typeid(e).name(), e.what());
    std::free(type);
    __builtin_trap();
  } catch (...) {
    std::fprintf(stderr, "parse_config threw a non-std exception\n");
    __builtin_trap();
  }
  // The address helpers on the same bytes. A MAC is accepted only as six
  // two-digit hex groups, so it prints back as the same text (lower case); an
  // IPv4 address only as four dot-separated decimal numbers up to 255.
  if (size <= 64) {
    if (const auto mac = parse_mac(text)) {
      std::string lower = text;
      for (char& ch : lower) ch = char(ch >= 'A' && ch <= 'F' ? ch - 'A' + 'a' : ch);
      if (format_mac(*mac) != lower)
        std::fprintf(stderr, "parse_mac accepted '%s' as %s\n", text.c_str(), format_mac(*mac).c_str());
      FUZZ_CHECK(format_mac(*mac) == lower);
    }
    if (const auto ip = parse_ipv4(text)) {
      FUZZ_CHECK(text.find_first_not_of("0123456789.") == std::string::npos);
      FUZZ_CHECK(parse_ipv4(format_ipv4(*ip)) == ip);
    }
  }
  return 0;
}
