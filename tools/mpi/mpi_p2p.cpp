// Open MPI's point-to-point, timed as tools/links_p2p.cpp times PRISM's
// Links, so the two are compared message size by message size on one machine:
//   pingpong  rank 0 sends, rank 1 sends it back (p = 2); one-way time = half
//             the round trip
//   stream    rank 0 sends --burst messages back to back, rank 1 receives
//             them and answers one empty message; time per message
//   exchange  every rank at once MPI_Sendrecv to r + 1 and from r - 1 (a
//             ring's step; p = 2 is the pairwise exchange of RHD)
// Each size's figure is the median of --repeat timed rounds after --warmup.
//
//   mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,tcp -np 2
//     build/tools/mpi-p2p --sizes 4096,1048576 --mode pingpong
// prints one JSON object per size on rank 0's stdout.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

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

// Rounds of one size: enough to move some 64 MiB, at least 3.
int rounds_for(size_t bytes, int repeat) {
  return std::max(repeat, int(std::min<size_t>(200, (64u << 20) / std::max<size_t>(bytes, 1))));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* sizes = "4096,65536,1048576,16777216";
  std::string mode = "pingpong";
  int repeat = 5, warmup = 1, burst = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc)
      sizes = argv[++i];
    else if (a == "--mode" && i + 1 < argc)
      mode = argv[++i];
    else if (a == "--repeat" && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--warmup" && i + 1 < argc)
      warmup = std::max(0, std::atoi(argv[++i]));
    else if (a == "--burst" && i + 1 < argc)
      burst = std::max(1, std::atoi(argv[++i]));
    else {
      if (rank == 0)
        std::fprintf(stderr,
                     "usage: mpi-p2p [--mode pingpong|stream|exchange] [--sizes BYTES,...] [--repeat N] "
                     "[--warmup N] [--burst N]\n");
      MPI_Finalize();
      return 2;
    }
  }
  if (mode != "exchange" && size != 2) {
    if (rank == 0) std::fprintf(stderr, "mpi-p2p: --mode %s needs exactly 2 ranks\n", mode.c_str());
    MPI_Finalize();
    return 2;
  }
  for (size_t bytes : sizes_of(sizes)) {
    std::vector<char> out(bytes, char(rank + 1)), in(bytes);
    const int rounds = rounds_for(bytes, repeat);
    std::vector<double> times;
    for (int it = 0; it < warmup + rounds; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      int per = 1;
      if (mode == "pingpong") {
        if (rank == 0) {
          MPI_Send(out.data(), int(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
          MPI_Recv(in.data(), int(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(in.data(), int(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(out.data(), int(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
        per = 2;
      } else if (mode == "stream") {
        if (rank == 0) {
          for (int b = 0; b < burst; ++b) MPI_Send(out.data(), int(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
          MPI_Recv(in.data(), 0, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          for (int b = 0; b < burst; ++b)
            MPI_Recv(in.data(), int(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(out.data(), 0, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
        per = burst;
      } else {
        MPI_Sendrecv(out.data(), int(bytes), MPI_BYTE, (rank + 1) % size, 0, in.data(), int(bytes), MPI_BYTE,
                     (rank + size - 1) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      double t = (MPI_Wtime() - t0) / per, slowest = 0;
      MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (it >= warmup) times.push_back(slowest);
    }
    if (rank == 0) {
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      std::printf(
          "{\"impl\":\"mpi\",\"mode\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"rounds\":%d,\"seconds\":%.9g,"
          "\"gbyte_s\":%.6g}\n",
          mode.c_str(), size, bytes, rounds, med, med > 0 ? double(bytes) / med / 1e9 : 0.0);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
