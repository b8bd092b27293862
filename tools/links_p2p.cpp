// PRISM's Links point to point, timed as tools/mpi/mpi_p2p.cpp times Open
// MPI's, so the two compare size by size on one machine. The ranks are
// processes this program forks, found through a file store, with the links
// lib/group/links_choice.hpp chooses (--links auto|tcp|shm, as PRISM_LINKS):
//   pingpong  rank 0 sends, rank 1 sends it back (p = 2); one-way time = half
//             the round trip
//   stream    rank 0 sends --burst messages back to back, rank 1 receives
//             them and answers one empty message; time per message
//   exchange  every rank at once sendrecv to r + 1 and from r - 1 (a ring's
//             step; p = 2 is RHD's pairwise exchange)
// Each size's figure is the median over rounds (the slowest rank's time)
// after --warmup.
//
//   build/tools/prism-links-p2p --links shm --mode exchange --ranks 4 --sizes 4096,1048576
// prints one JSON object per size on stdout.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "group/links_choice.hpp"
#include "rendezvous/file_store.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string links = "auto", mode = "pingpong";
  std::vector<size_t> sizes{4096, 65536, 1 << 20, 16 << 20};
  int ranks = 2, repeat = 5, warmup = 1, burst = 8;
};

std::vector<size_t> sizes_of(const char* list) {
  std::vector<size_t> v;
  for (const char* p = list; *p;) {
    char* end = nullptr;
    v.push_back(std::strtoull(p, &end, 0));
    if (end == p) break;
    p = *end == ',' ? end + 1 : end;
  }
  return v;
}

int rounds_for(size_t bytes, int repeat) {
  return std::max(repeat, int(std::min<size_t>(200, (64u << 20) / std::max<size_t>(bytes, 1))));
}

void barrier(prism::coll::Links& l) {
  uint8_t x = 0;
  if (l.rank() == 0) {
    for (int j = 1; j < l.size(); ++j) l.recv(j, &x, 1);
    for (int j = 1; j < l.size(); ++j) l.send(j, &x, 1);
  } else {
    l.send(0, &x, 1);
    l.recv(0, &x, 1);
  }
}

// The slowest rank's `t`, at rank 0.
double slowest(prism::coll::Links& l, double t) {
  if (l.rank() != 0) {
    l.send(0, &t, sizeof t);
    return t;
  }
  for (int j = 1; j < l.size(); ++j) {
    double u = 0;
    l.recv(j, &u, sizeof u);
    t = std::max(t, u);
  }
  return t;
}

void rank_main(const Args& a, int rank, const std::string& store_path) {
  prism::rdv::FileStore store(store_path);
  prism::coll::TcpOptions o;
  o.local_ip = "127.0.0.1";
  const prism::group::LinksKind kind = prism::group::links_kind_from_env();
  auto links = prism::group::connect_links(store, rank, a.ranks, o, kind);
  prism::coll::Links& l = *links;
  const int p = l.size();
  for (size_t bytes : a.sizes) {
    std::vector<uint8_t> out(bytes, uint8_t(rank + 1)), in(bytes);
    const int rounds = rounds_for(bytes, a.repeat);
    std::vector<double> times;
    for (int it = 0; it < a.warmup + rounds; ++it) {
      barrier(l);
      const Clock::time_point t0 = Clock::now();
      int per = 1;
      if (a.mode == "pingpong") {
        if (rank == 0) {
          l.send(1, out.data(), bytes);
          l.recv(1, in.data(), bytes);
        } else {
          l.recv(0, in.data(), bytes);
          l.send(0, out.data(), bytes);
        }
        per = 2;
      } else if (a.mode == "stream") {
        if (rank == 0) {
          for (int b = 0; b < a.burst; ++b) l.send(1, out.data(), bytes);
          l.recv(1, in.data(), 0);
        } else {
          for (int b = 0; b < a.burst; ++b) l.recv(0, in.data(), bytes);
          l.send(0, out.data(), 0);
        }
        per = a.burst;
      } else {
        l.sendrecv((rank + 1) % p, out.data(), bytes, (rank + p - 1) % p, in.data(), bytes);
      }
      const double t = slowest(l, std::chrono::duration<double>(Clock::now() - t0).count() / per);
      if (it >= a.warmup) times.push_back(t);
    }
    if (rank == 0) {
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      std::printf(
          "{\"impl\":\"prism-%s\",\"mode\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"rounds\":%d,\"seconds\":%.9g,"
          "\"gbyte_s\":%.6g}\n",
          a.links.c_str(), a.mode.c_str(), p, bytes, rounds, med, med > 0 ? double(bytes) / med / 1e9 : 0.0);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (s == "--links" && v)
      a.links = argv[++i];
    else if (s == "--mode" && v)
      a.mode = argv[++i];
    else if (s == "--sizes" && v)
      a.sizes = sizes_of(argv[++i]);
    else if (s == "--ranks" && v)
      a.ranks = std::max(2, std::atoi(argv[++i]));
    else if (s == "--repeat" && v)
      a.repeat = std::max(1, std::atoi(argv[++i]));
    else if (s == "--warmup" && v)
      a.warmup = std::max(0, std::atoi(argv[++i]));
    else if (s == "--burst" && v)
      a.burst = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr,
                   "usage: prism-links-p2p [--links auto|tcp|shm] [--mode pingpong|stream|exchange] [--ranks P] "
                   "[--sizes BYTES,...] [--repeat N] [--warmup N] [--burst N]\n");
      return 2;
    }
  }
  if (a.mode != "exchange" && a.ranks != 2) {
    std::fprintf(stderr, "prism-links-p2p: --mode %s needs --ranks 2\n", a.mode.c_str());
    return 2;
  }
  setenv("PRISM_LINKS", a.links.c_str(), 1);
  const std::string store =
      (std::filesystem::temp_directory_path() / ("prism_links_p2p_" + std::to_string(getpid()))).string();
  std::vector<pid_t> kids;
  for (int r = 0; r < a.ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        rank_main(a, r, store);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        _exit(1);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  int failed = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  std::filesystem::remove(store);
  return failed ? 1 : 0;
}
