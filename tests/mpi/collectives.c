/* An unmodified MPI program calling every collective libprism-mpi takes
 * (tests/py/test_mpi.py checks what it writes):
 *   mpirun -np P collectives COUNT SEED DIR
 * COUNT is made a multiple of P. Rank r writes DIR/<what><r>.bin:
 *   in     its float input (COUNT), then its int32 input (COUNT)
 *   reduce MPI_Reduce to root 1 % P: the root's result out of place, then in place (root only)
 *   rsb    MPI_Reduce_scatter_block: its block out of place, then in place
 *   iar    MPI_Iallreduce + MPI_Wait: the float sum
 *   i32    MPI_Allreduce of the int32 input
 *   bcast  MPI_Bcast of root P-1's doubles (COUNT)
 *   ag     MPI_Allgather of every rank's int32 block (COUNT / P each): out of place, then in place */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t* s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static const char* g_dir;
static int g_rank;

static void put(const char* name, const void* a, size_t bytes) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s%d.bin", g_dir, name, g_rank);
  FILE* f = fopen(path, "ab");
  if (!f || fwrite(a, 1, bytes, f) != bytes || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

static void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "%s failed: %d\n", what, rc);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 4) {
    fprintf(stderr, "usage: collectives COUNT SEED DIR\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int p;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  g_dir = argv[3];
  const int n = atoi(argv[1]) / p * p, b = n / p, root = 1 % p;
  uint64_t s = strtoull(argv[2], NULL, 10) * 1000003u + (uint64_t)g_rank;
  float* x = malloc(sizeof(float) * (size_t)n);
  float* y = malloc(sizeof(float) * (size_t)n);
  int32_t* k = malloc(sizeof(int32_t) * (size_t)n);
  int32_t* m = malloc(sizeof(int32_t) * (size_t)n);
  double* d = malloc(sizeof(double) * (size_t)n);
  for (int i = 0; i < n; ++i) {
    const uint64_t r = next(&s);
    x[i] = ldexpf((float)(r & 0xffffff), (int)((r >> 24) % 40) - 40) * ((r >> 40) & 1 ? -1.0f : 1.0f);
    k[i] = (int32_t)(next(&s) % 2000001) - 1000000;
    d[i] = g_rank == p - 1 ? (double)x[i] * 3.0 : -1.0;
  }
  put("in", x, sizeof(float) * (size_t)n);
  put("in", k, sizeof(int32_t) * (size_t)n);

  check(MPI_Reduce(x, y, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD), "MPI_Reduce");
  if (g_rank == root) put("reduce", y, sizeof(float) * (size_t)n);
  memcpy(y, x, sizeof(float) * (size_t)n);
  check(MPI_Reduce(g_rank == root ? MPI_IN_PLACE : y, g_rank == root ? y : NULL, n, MPI_FLOAT, MPI_SUM, root,
                   MPI_COMM_WORLD),
        "MPI_Reduce in place");
  if (g_rank == root) put("reduce", y, sizeof(float) * (size_t)n);

  check(MPI_Reduce_scatter_block(x, y, b, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Reduce_scatter_block");
  put("rsb", y, sizeof(float) * (size_t)b);
  memcpy(y, x, sizeof(float) * (size_t)n);
  check(MPI_Reduce_scatter_block(MPI_IN_PLACE, y, b, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
        "MPI_Reduce_scatter_block in place");
  put("rsb", y, sizeof(float) * (size_t)b);

  MPI_Request req;
  check(MPI_Iallreduce(x, y, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req), "MPI_Iallreduce");
  check(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait");
  put("iar", y, sizeof(float) * (size_t)n);

  check(MPI_Allreduce(k, m, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce int");
  put("i32", m, sizeof(int32_t) * (size_t)n);

  check(MPI_Bcast(d, n, MPI_DOUBLE, p - 1, MPI_COMM_WORLD), "MPI_Bcast");
  put("bcast", d, sizeof(double) * (size_t)n);

  check(MPI_Allgather(k + (size_t)g_rank * b, b, MPI_INT, m, b, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  put("ag", m, sizeof(int32_t) * (size_t)n);
  memset(m, 0, sizeof(int32_t) * (size_t)n);
  memcpy(m + (size_t)g_rank * b, k + (size_t)g_rank * b, sizeof(int32_t) * (size_t)b);
  check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, m, b, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather in place");
  put("ag", m, sizeof(int32_t) * (size_t)n);

  free(x), free(y), free(k), free(m), free(d);
  MPI_Finalize();
  return 0;
}
