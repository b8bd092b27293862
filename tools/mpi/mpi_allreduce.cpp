// The baseline beside prism-rank: Open MPI's MPI_Allreduce (sum) over the
// same sizes, timed the same way (each collective's time is the slowest
// rank's; min and median over --repeat). tools/bench_rank.py runs it between
// the testbed's namespaces, over TCP, next to prism-rank through the switch;
// tools/bench_coll.py --compare runs it on loopback beside the host algorithms.
//
//   mpirun -np 4 mpi-allreduce --sizes 4096,1048576 --repeat 10
// prints one JSON object per size on rank 0's stdout.
//
// Timing. By default every collective follows a barrier and its time is the
// slowest rank's (MPI_Reduce MAX of each rank's time), then min and median
// over the collectives. --back-to-back times as prism-rank does: no barrier,
// every rank times its own collectives in a row, and the figure is the
// slowest rank's median (and min) of its own times. --target-seconds T sets
// the repeat from the slowest rank's warmup time (about T seconds measured,
// between --min-repeat and --max-repeat), the same count on every rank.
//
// Data and --check. Element i of rank r is a small multiple of 1/256 (fp32;
// at most 1000/256 in magnitude) or a small integer (bf16; at most 16), so
// every partial sum of up to 2^12 ranks is exact in the format whatever the
// order of the additions: the result is exactly the sum, which --check
// recomputes here from every rank's generator (in double, independently of
// MPI) and compares element by element with the last collective's result
// (each rank a 1/p share of the elements).
//
// bf16 has no MPI datatype in Open MPI 4: it travels as MPI_UINT16_T under a
// user-defined commutative sum (widen to fp32, add, round to nearest even),
// which is what an application would write.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
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

// Element i of rank r, as a value (see the header: every sum of them is exact).
double value_of(bool bf16, size_t i, int r) {
  const uint32_t h = uint32_t(i) * 2654435761u + uint32_t(r) * 40503u;
  return bf16 ? double(int(h % 33) - 16) : double(int(h % 2001) - 1000) / 256.0;
}

float bf16_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {  // round to nearest even (no NaN among the sums here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

// The element's value in the buffer, as a double.
double element(bool bf16, const std::vector<uint8_t>& buf, size_t i) {
  if (bf16) {
    uint16_t b;
    std::memcpy(&b, buf.data() + 2 * i, 2);
    return bf16_to_float(b);
  }
  float f;
  std::memcpy(&f, buf.data() + 4 * i, 4);
  return f;
}

void fill(bool bf16, std::vector<uint8_t>& buf, size_t n, int rank) {
  for (size_t i = 0; i < n; ++i) {
    const double v = value_of(bf16, i, rank);
    if (bf16) {
      const uint16_t b = float_to_bf16(float(v));
      std::memcpy(buf.data() + 2 * i, &b, 2);
    } else {
      const float f = float(v);
      std::memcpy(buf.data() + 4 * i, &f, 4);
    }
  }
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
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
  int repeat = 10, warmup = 2, min_repeat = 2, max_repeat = 20;
  double target = 0;
  bool back_to_back = false, check = false, bf16 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc)
      sizes = argv[++i];
    else if (a == "--repeat" && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--warmup" && i + 1 < argc)
      warmup = std::max(0, std::atoi(argv[++i]));
    else if (a == "--target-seconds" && i + 1 < argc)
      target = std::atof(argv[++i]);
    else if (a == "--min-repeat" && i + 1 < argc)
      min_repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--max-repeat" && i + 1 < argc)
      max_repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--dtype" && i + 1 < argc &&
             (std::strcmp(argv[i + 1], "fp32") == 0 || std::strcmp(argv[i + 1], "bf16") == 0))
      bf16 = std::strcmp(argv[++i], "bf16") == 0;
    else if (a == "--back-to-back")
      back_to_back = true;
    else if (a == "--check")
      check = true;
    else {
      if (rank == 0)
        std::fprintf(stderr,
                     "usage: mpi-allreduce [--sizes BYTES,...] [--dtype fp32|bf16] [--repeat N] [--warmup N]\n"
                     "                     [--target-seconds T [--min-repeat A] [--max-repeat B]] [--back-to-back]"
                     " [--check]\n");
      MPI_Finalize();
      return 2;
    }
  }
  if (target > 0 && warmup < 1) warmup = 1;  // the adaptive repeat needs a warmup's time
  const size_t esz = bf16 ? 2 : 4;
  MPI_Op bf16_op = MPI_OP_NULL;
  if (bf16) MPI_Op_create(&bf16_sum, /*commute=*/1, &bf16_op);
  const MPI_Datatype type = bf16 ? MPI_UINT16_T : MPI_FLOAT;
  const MPI_Op op = bf16 ? bf16_op : MPI_SUM;
  int status = 0;
  for (size_t bytes : sizes_of(sizes)) {
    const size_t n = bytes / esz;
    std::vector<uint8_t> in(n * esz), out(n * esz);
    fill(bf16, in, n, rank);
    std::vector<double> times;    // the slowest rank's time of each collective (barrier mode, rank 0)
    std::vector<double> own;      // this rank's own time of each collective
    double cpu = 0, cpu_all = 0;  // this rank's CPU time in the timed allreduces; every rank's
    double warm = 0;              // this rank's slowest warmup collective
    int reps = repeat;
    for (int it = 0; it < warmup + reps; ++it) {
      if (!back_to_back) MPI_Barrier(MPI_COMM_WORLD);
      const double c0 = cpu_now(), t0 = MPI_Wtime();
      MPI_Allreduce(in.data(), out.data(), int(n), type, op, MPI_COMM_WORLD);
      double t = MPI_Wtime() - t0, slowest = 0;
      if (it >= warmup) cpu += cpu_now() - c0, own.push_back(t);
      if (it < warmup) warm = std::max(warm, t);
      if (!back_to_back) {
        MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (it >= warmup) times.push_back(slowest);
      }
      if (target > 0 && it + 1 == warmup) {  // every rank the same count, from the slowest warmup
        double w = 0;
        MPI_Allreduce(&warm, &w, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        reps =
            std::clamp(int(std::lround(w > 0 ? target / w : max_repeat)), min_repeat, std::max(min_repeat, max_repeat));
      }
    }
    MPI_Reduce(&cpu, &cpu_all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    // Each rank's own median and min; the slowest rank's of each.
    double mine[2] = {median_of(own), *std::min_element(own.begin(), own.end())}, worst[2] = {0, 0};
    MPI_Reduce(mine, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    // --check: the last result against the exact sum, recomputed from every rank's generator; each
    // rank checks its own share of the elements (every rank holds the whole result).
    uint64_t differ = 0;
    if (check) {
      for (size_t i = n * size_t(rank) / size_t(size); i < n * size_t(rank + 1) / size_t(size); ++i) {
        double want = 0;
        for (int r = 0; r < size; ++r) want += value_of(bf16, i, r);
        differ += element(bf16, out, i) != want;
      }
      uint64_t all = 0;
      MPI_Allreduce(&differ, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
      differ = all;
      if (differ) status = 1;
    }
    if (rank == 0) {
      double tmin, tmed;
      if (back_to_back) {
        tmin = worst[1], tmed = worst[0];
      } else {
        std::sort(times.begin(), times.end());
        tmin = times.front(), tmed = times[times.size() / 2];
      }
      std::printf(
          "{\"impl\":\"mpi\",\"ranks\":%d,\"dtype\":\"%s\",\"bytes\":%zu,\"repeat\":%d,\"warmup\":%d,"
          "\"timing\":\"%s\",\"seconds_min\":%.9g,\"seconds_median\":%.9g,\"rank_seconds_median_max\":%.9g,"
          "\"rank_seconds_min_max\":%.9g,\"gbit_s\":%.6g,\"cpu_seconds\":%.6g,\"digest\":\"%016" PRIx64 "\"",
          size, bf16 ? "bf16" : "fp32", n * esz, reps, warmup, back_to_back ? "back_to_back" : "barrier", tmin, tmed,
          worst[0], worst[1], tmin > 0 ? double(n * esz) * 8 / tmin / 1e9 : 0.0, cpu_all, fnv1a(out.data(), n * esz));
      if (check) std::printf(",\"checked\":true,\"check_differ\":%" PRIu64, differ);
      std::printf("}\n");
      std::fflush(stdout);
    }
  }
  if (bf16) MPI_Op_free(&bf16_op);
  MPI_Finalize();
  return status;
}
