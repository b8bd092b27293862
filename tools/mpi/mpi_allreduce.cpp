// The baseline beside prism-rank: Open MPI's MPI_Allreduce (fp32 sum) over
// the same sizes, timed the same way (each collective's time is the slowest
// rank's; min and median over --repeat). tools/bench_rank.py runs it between
// the testbed's namespaces, over TCP, next to prism-rank through the switch.
//
//   mpirun -np 4 mpi-allreduce --sizes 4096,1048576 --repeat 10
// prints one JSON object per size on rank 0's stdout.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<size_t> sizes_of(const char* list) {
  std::vector<size_t> v;
  for (const char* p = list; *p;) {
    char* end = nullptr;
    v.push_back(std::strtoull(p, &end, 0));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return v;
}

uint64_t fnv1a(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace

// This process's CPU time so far, user and system.
static double cpu_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* sizes = "4096,65536,1048576";
  int repeat = 10, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc)
      sizes = argv[++i];
    else if (a == "--repeat" && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--warmup" && i + 1 < argc)
      warmup = std::max(0, std::atoi(argv[++i]));
    else {
      if (rank == 0) std::fprintf(stderr, "usage: mpi-allreduce [--sizes BYTES,...] [--repeat N] [--warmup N]\n");
      MPI_Finalize();
      return 2;
    }
  }
  for (size_t bytes : sizes_of(sizes)) {
    const size_t n = bytes / 4;
    std::vector<float> in(n), out(n);
    for (size_t i = 0; i < n; ++i)
      in[i] = float(int((i * 2654435761u + uint32_t(rank) * 40503u) % 2001) - 1000) / 256.0f;
    std::vector<double> times;
    double cpu = 0, cpu_all = 0;  // this rank's CPU time in the timed allreduces; every rank's
    for (int it = 0; it < warmup + repeat; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double c0 = cpu_now(), t0 = MPI_Wtime();
      MPI_Allreduce(in.data(), out.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t = MPI_Wtime() - t0, slowest = 0;
      if (it >= warmup) cpu += cpu_now() - c0;
      MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (it >= warmup) times.push_back(slowest);
    }
    MPI_Reduce(&cpu, &cpu_all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::sort(times.begin(), times.end());
      const double tmin = times.front(), tmed = times[times.size() / 2];
      std::printf(
          "{\"impl\":\"mpi\",\"ranks\":%d,\"bytes\":%zu,\"repeat\":%d,\"seconds_min\":%.9g,"
          "\"seconds_median\":%.9g,\"gbit_s\":%.6g,\"cpu_seconds\":%.6g,\"digest\":\"%016" PRIx64 "\"}\n",
          size, n * 4, repeat, tmin, tmed, tmin > 0 ? double(n * 4) * 8 / tmin / 1e9 : 0.0, cpu_all,
          fnv1a(out.data(), n * 4));
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
