/* An unmodified MPI program: MPI_Allreduce of floats (out of place and in
 * place) and of doubles, each rank writing its input and results for the
 * test to check (tests/py/test_mpi.py).
 *   mpirun -np P allreduce COUNT SEED DIR
 * writes DIR/in<rank>.f32 and DIR/out<rank>.f32 (the out-of-place result,
 * then the in-place one), DIR/in<rank>.f64 and DIR/out<rank>.f64. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

static uint64_t next(uint64_t* s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void put(const char* dir, const char* name, int rank, const void* a, size_t n, size_t esz) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s%d.%s", dir, name, rank, esz == 4 ? "f32" : "f64");
  FILE* f = fopen(path, "ab");
  if (!f || fwrite(a, esz, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 4) {
    fprintf(stderr, "usage: allreduce COUNT SEED DIR\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int n = atoi(argv[1]);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  uint64_t s = strtoull(argv[2], NULL, 10) * 1000003u + (uint64_t)rank;
  float* x = malloc(sizeof(float) * (size_t)n);
  float* y = malloc(sizeof(float) * (size_t)n);
  double* d = malloc(sizeof(double) * (size_t)n);
  double* e = malloc(sizeof(double) * (size_t)n);
  for (int i = 0; i < n; ++i) {
    const uint64_t r = next(&s);
    /* 24-bit significands over 40 binades, either sign: sums that round differently in other orders */
    x[i] = ldexpf((float)(r & 0xffffff), (int)((r >> 24) % 40) - 40) * ((r >> 40) & 1 ? -1.0f : 1.0f);
    d[i] = (double)x[i];
  }
  put(argv[3], "in", rank, x, (size_t)n, 4);
  put(argv[3], "in", rank, d, (size_t)n, 8);
  MPI_Allreduce(x, y, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  put(argv[3], "out", rank, y, (size_t)n, 4);
  MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  put(argv[3], "out", rank, x, (size_t)n, 4);
  MPI_Allreduce(d, e, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* not PRISM's: Open MPI's */
  put(argv[3], "out", rank, e, (size_t)n, 8);
  free(x), free(y), free(d), free(e);
  MPI_Finalize();
  return 0;
}
