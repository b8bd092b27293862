// prism-switch: the DPDK aggregation switch.
//
//   prism-switch [EAL options] -- --config FILE [--exit-when-idle MS] [--quiet]
//
// Without hugepages it falls back to --no-huge (with a warning) rather than
// fail. SIGINT, SIGTERM and SIGHUP stop it gracefully (no new ops; those in flight
// finish within stop_timeout_ms; a second signal stops at once) and print a summary. Counters are on
// DPDK's telemetry socket: dpdk-telemetry.py -f <file-prefix>, then /prism/...
#include <fcntl.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_log.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "config/config.hpp"
#include "runtime.hpp"

using namespace prism;

namespace {

const char* kUsage =
    "usage: prism-switch [EAL options] -- --config FILE [--exit-when-idle MS] [--quiet]\n"
    "  --config FILE        the switch's YAML configuration (docs/CONFIG.md)\n"
    "  --exit-when-idle MS  stop once no packet arrived for MS ms and every queue is empty;\n"
    "                       report the ops left incomplete or abandoned by op_timeout_ms\n"
    "                       (exit status 3 if any)\n"
    "  --quiet              no summary on exit\n"
    "EAL options as for any DPDK program, e.g. -l 0-1 --no-huge -m 512 --no-pci --file-prefix p1\n"
    "  --vdev net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap (or give ports a device: in the config)\n";

bool hugepages_available() {
  std::ifstream f("/proc/meminfo");
  std::string k;
  long v;
  while (f >> k >> v) {
    if (k == "HugePages_Free:") return v > 0;
    f.ignore(256, '\n');
  }
  return false;
}

// The first SIGINT, SIGTERM or SIGHUP stops gracefully (no new ops; those in
// flight finish within stop_timeout_ms); a second one stops at once.
std::atomic<int> g_signals{0};
void on_signal(int) {
  if (g_signals.fetch_add(1) == 0)
    pipe::Runtime::request_drain();
  else
    pipe::Runtime::request_stop();
}

// The EAL's --file-prefix (default "rte").
std::string file_prefix(const std::vector<std::string>& eal) {
  for (size_t i = 0; i < eal.size(); ++i) {
    if (eal[i] == "--file-prefix" && i + 1 < eal.size()) return eal[i + 1];
    if (eal[i].rfind("--file-prefix=", 0) == 0) return eal[i].substr(14);
  }
  return "rte";
}

// The process that holds the EAL's lock on this prefix's runtime config (a
// primary process already running with the same --file-prefix), or 0. The
// EAL fails on such a clash without setting rte_errno, so its own message
// would end in "Success".
pid_t prefix_holder(const std::string& prefix) {
  const char* run = getuid() == 0 ? "/var/run/dpdk" : std::getenv("XDG_RUNTIME_DIR");
  const std::string path = std::string(run ? run : "/tmp") + (getuid() == 0 ? "/" : "/dpdk/") + prefix + "/config";
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return 0;
  struct flock lk {};
  lk.l_type = F_WRLCK;
  lk.l_whence = SEEK_SET;
  const bool held = fcntl(fd, F_GETLK, &lk) == 0 && lk.l_type != F_UNLCK;
  close(fd);
  return held ? lk.l_pid : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Split EAL options from ours at "--".
  std::vector<std::string> eal_args{argv[0]};
  int app_start = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      app_start = i + 1;
      break;
    }
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    eal_args.push_back(argv[i]);
  }
  std::string config_path;
  pipe::RunOptions opt;
  try {
    const cli::Args a(argc, argv, app_start, {"--config", "--exit-when-idle"}, {"--quiet", "--help"});
    if (a.has("--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!a.positional.empty()) cli::fail("unexpected argument '" + a.positional[0] + "' (see --help)");
    config_path = a.str("--config");
    if (config_path.empty()) cli::fail("missing --config FILE after '--' (see --help)");
    opt.exit_when_idle_ms = uint32_t(a.num("--exit-when-idle", 1, 3600000, 0));
    opt.quiet = a.has("--quiet");
  } catch (const cli::Error& e) {
    std::fprintf(stderr, "prism-switch: %s\n", e.msg.c_str());
    return 2;
  }
  // Read the configuration before touching the EAL: a config error costs nothing.
  SwitchConfig cfg;
  try {
    cfg = load_config(config_path);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "prism-switch: %s\n", e.what());
    return 2;
  }
  bool no_huge = false, has_mem = false;
  for (const auto& s : eal_args) {
    no_huge |= s == "--no-huge";
    has_mem |= s == "-m" || s.rfind("--socket-mem", 0) == 0;
  }
  if (!no_huge && !hugepages_available()) {
    std::fprintf(stderr, "prism-switch: warning: no free hugepages: running with --no-huge%s\n",
                 has_mem ? "" : " -m 512");
    eal_args.push_back("--no-huge");
    if (!has_mem) {
      eal_args.push_back("-m");
      eal_args.push_back("512");
    }
  }
  const std::string prefix = file_prefix(eal_args);
  if (const pid_t holder = prefix_holder(prefix)) {
    std::fprintf(stderr,
                 "prism-switch: another DPDK process (pid %d) already runs with --file-prefix %s: give this one "
                 "its own (e.g. --file-prefix %s2)\n",
                 int(holder), prefix.c_str(), prefix.c_str());
    return 2;
  }
  std::vector<char*> eargv;
  for (auto& s : eal_args) eargv.push_back(s.data());
  if (rte_eal_init(int(eargv.size()), eargv.data()) < 0) {
    const int err = rte_errno;
    std::fprintf(stderr, "prism-switch: EAL initialisation failed: %s (check the EAL options before '--'%s)\n",
                 err ? rte_strerror(err) : "see the EAL's message above",
                 prefix_holder(prefix) ? "; another DPDK process uses the same --file-prefix: give each its own" : "");
    return 2;
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_signal);
  int rc;
  try {
    pipe::Runtime rt(cfg, opt);
    PRISM_LOG(INFO, "switch %u up: %zu ports, %u reducer shards\n", cfg.id, cfg.ports.size(), cfg.reducer_shards);
    for (const auto& p : cfg.pools)
      PRISM_LOG(INFO, "pool %u: job ids %u..%u for up to %u ranks each, idle timeout %u ms\n", p.first, p.first,
                p.first + p.count - 1, p.max_group, p.idle_timeout_ms);
    rc = rt.run();
  } catch (const std::exception& e) {  // SetupError, and anything a setup step threw
    PRISM_LOG(ERR, "%s\n", e.what());
    std::fprintf(stderr, "prism-switch: %s\n", e.what());
    rc = 2;
  }
  rte_eal_cleanup();
  return rc;
}
