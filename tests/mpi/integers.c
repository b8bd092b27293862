/* MPI_SUM of integers whose sum fits, or does not fit, the datatype:
 *   mpirun -np P integers MODE DIR
 * MODE int8: MPI_INT8_T values in [-40, 40] (sums fit for P <= 3), written to DIR/i8<rank>.bin;
 * int8-over: 100 from every rank (beyond int8 from P = 2); int32-over: 2^30 from every rank
 * (beyond int32 from P = 2). Open MPI wraps such sums; libprism-mpi refuses them.
 * bf16: MPI_UINT16_T holding bf16 codes (PRISM_MPI_16BIT=bf16), written to DIR/h<rank>.bin (input, result). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* DIR/<tag><rank>.bin: the input, then the result (n elements of esz bytes each). */
static void dump(const char* dir, const char* tag, int rank, const void* a, const void* b, size_t n, size_t esz) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s%d.bin", dir, tag, rank);
  FILE* f = fopen(path, "wb");
  fwrite(a, esz, n, f);
  fwrite(b, esz, n, f);
  fclose(f);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc != 3) MPI_Abort(MPI_COMM_WORLD, 2);
  enum { N = 1000 };
  if (!strcmp(argv[1], "bf16")) {
    uint16_t a[N], b[N];
    for (int i = 0; i < N; ++i) {
      const uint32_t e = 100u + (uint32_t)((i * 13 + rank * 7) % 40), m = (uint32_t)((i * 29 + rank * 3) % 128);
      a[i] = (uint16_t)(((uint32_t)((i + rank) & 1) << 15) | (e << 7) | m); /* finite bf16 over 40 binades */
    }
    MPI_Allreduce(a, b, N, MPI_UINT16_T, MPI_SUM, MPI_COMM_WORLD);
    dump(argv[2], "h", rank, a, b, N, 2);
  } else if (!strcmp(argv[1], "int32-over")) {
    int32_t a[N], b[N];
    for (int i = 0; i < N; ++i) a[i] = i < 10 ? (1 << 30) : i;
    MPI_Allreduce(a, b, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d: b[0] = %d\n", rank, b[0]);
  } else {
    int8_t a[N], b[N];
    const int over = !strcmp(argv[1], "int8-over");
    for (int i = 0; i < N; ++i) a[i] = over ? 100 : (int8_t)((i * 7 + rank * 13) % 81 - 40);
    MPI_Allreduce(a, b, N, MPI_INT8_T, MPI_SUM, MPI_COMM_WORLD);
    dump(argv[2], "i8", rank, a, b, N, 1);
  }
  MPI_Finalize();
  return 0;
}
