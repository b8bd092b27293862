/* What MPI lets ranks disagree on, and libprism-mpi must not hang over:
 *   mpirun -np P signatures MODE DIR
 * derived    (P >= 3) MPI_Bcast from rank 0 of 4*N MPI_INTs, received by rank 1 as N contiguous(4, MPI_INT)
 *            and by rank 2 as one vector(4*N, 1, 2, MPI_INT) (every other int of a buffer twice as long);
 *            then MPI_Allgather of B ints per rank: rank 1 sends one contiguous(B, MPI_INT), rank 2
 *            receives P of them. Types with the same signature as the others' MPI_INTs (MPI's rule),
 *            so every rank must take the same path. Writes DIR/bc<rank>.bin (the 4*N ints received)
 *            and DIR/ag<rank>.bin (the P*B ints gathered). Values: bcast i -> i*7+3; rank r's
 *            block i -> r*100000+i.
 * settings   MPI_ERRORS_RETURN, then MPI_Allreduce of N MPI_UINT16_T, then of N MPI_INTs: prints
 *            "rank R: ok" or "rank R: error: <MPI's text>" (and exits 3), for ranks started with
 *            different PRISM_* settings.
 * store      the TCP listening sockets this process opens during its first MPI_Allreduce of
 *            MPI_INTs and still has after it: DIR/listen<rank>.txt, one "address:port" (hex, as
 *            /proc/net/tcp writes it) per line. */
#include <dirent.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 5003, B = 777 };

static void write_ints(const char* dir, const char* tag, int rank, const int* v, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s%d.bin", dir, tag, rank);
  FILE* f = fopen(path, "wb");
  fwrite(v, sizeof(int), n, f);
  fclose(f);
}

static void check(int err, const char* what) {
  if (err != MPI_SUCCESS) {
    fprintf(stderr, "%s failed\n", what);
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
}

static void derived(int rank, int p, const char* dir) {
  if (p < 3) MPI_Abort(MPI_COMM_WORLD, 2);
  int* bc = calloc(8 * N, sizeof(int));
  if (rank == 0) {
    for (int i = 0; i < 4 * N; ++i) bc[i] = i * 7 + 3;
    check(MPI_Bcast(bc, 4 * N, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast (root)");
  } else if (rank == 1) {
    MPI_Datatype four;
    MPI_Type_contiguous(4, MPI_INT, &four);
    MPI_Type_commit(&four);
    check(MPI_Bcast(bc, N, four, 0, MPI_COMM_WORLD), "MPI_Bcast (contiguous)");
    MPI_Type_free(&four);
  } else if (rank == 2) {
    MPI_Datatype every_other;
    MPI_Type_vector(4 * N, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    for (int i = 0; i < 8 * N; ++i) bc[i] = -1;
    check(MPI_Bcast(bc, 1, every_other, 0, MPI_COMM_WORLD), "MPI_Bcast (vector)");
    MPI_Type_free(&every_other);
    for (int i = 0; i < 8 * N; i += 2)
      if (bc[i + 1] != -1) MPI_Abort(MPI_COMM_WORLD, 5); /* a gap written */
    for (int i = 0; i < 4 * N; ++i) bc[i] = bc[2 * i];
  } else {
    check(MPI_Bcast(bc, 4 * N, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  }
  write_ints(dir, "bc", rank, bc, 4 * N);

  int mine[B];
  int* all = calloc((size_t)p * B, sizeof(int));
  for (int i = 0; i < B; ++i) mine[i] = rank * 100000 + i;
  MPI_Datatype block;
  MPI_Type_contiguous(B, MPI_INT, &block);
  MPI_Type_commit(&block);
  if (rank == 1)
    check(MPI_Allgather(mine, 1, block, all, B, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather (send block)");
  else if (rank == 2)
    check(MPI_Allgather(mine, B, MPI_INT, all, 1, block, MPI_COMM_WORLD), "MPI_Allgather (receive blocks)");
  else
    check(MPI_Allgather(mine, B, MPI_INT, all, B, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  MPI_Type_free(&block);
  write_ints(dir, "ag", rank, all, (size_t)p * B);
  free(all);
  free(bc);
}

static int settings(int rank) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  uint16_t h[N], hs[N];
  int k[N], ks[N];
  for (int i = 0; i < N; ++i) h[i] = (uint16_t)(0x3F80 + (i % 7)), k[i] = i + rank;
  int err = MPI_Allreduce(h, hs, N, MPI_UINT16_T, MPI_SUM, MPI_COMM_WORLD);
  if (err == MPI_SUCCESS) err = MPI_Allreduce(k, ks, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (err == MPI_SUCCESS) {
    printf("rank %d: ok\n", rank);
    return 0;
  }
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, text, &len);
  printf("rank %d: error: %s\n", rank, text);
  fflush(stdout);
  return 3;
}

/* The inodes of this process's sockets. */
static size_t socket_inodes(unsigned long* out, size_t cap) {
  size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  struct dirent* e;
  while (d && (e = readdir(d)) && n < cap) {
    char path[512], link[128];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    const ssize_t l = readlink(path, link, sizeof link - 1);
    if (l <= 0) continue;
    link[l] = 0;
    unsigned long ino;
    if (sscanf(link, "socket:[%lu]", &ino) == 1) out[n++] = ino;
  }
  if (d) closedir(d);
  return n;
}

/* This process's listening TCP (IPv4 and IPv6) sockets: "address:port" each, into `out`. */
static int listening(char out[][80], int cap) {
  unsigned long ino[4096];
  const size_t ni = socket_inodes(ino, 4096);
  int n = 0;
  const char* tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (int t = 0; t < 2; ++t) {
    FILE* f = fopen(tables[t], "r");
    char line[512];
    if (!f) continue;
    if (!fgets(line, sizeof line, f)) line[0] = 0; /* the header */
    while (fgets(line, sizeof line, f) && n < cap) {
      char local[80];
      unsigned st;
      unsigned long inode;
      /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
      if (sscanf(line, " %*s %79s %*s %x %*s %*s %*s %*s %*s %lu", local, &st, &inode) != 3 || st != 0x0A) continue;
      for (size_t i = 0; i < ni; ++i)
        if (ino[i] == inode) snprintf(out[n++], 80, "%s", local);
    }
    fclose(f);
  }
  return n;
}

static void store(int rank, const char* dir) {
  static char before[256][80], after[256][80];
  const int nb = listening(before, 256);
  int k[N], ks[N];
  for (int i = 0; i < N; ++i) k[i] = i + rank;
  check(MPI_Allreduce(k, ks, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  const int na = listening(after, 256);
  char path[4096];
  snprintf(path, sizeof path, "%s/listen%d.txt", dir, rank);
  FILE* f = fopen(path, "w");
  for (int a = 0; a < na; ++a) {
    int old = 0;
    for (int b = 0; b < nb; ++b) old |= !strcmp(after[a], before[b]);
    if (!old) fprintf(f, "%s\n", after[a]);
  }
  fclose(f);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, p, code = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  if (argc != 3) MPI_Abort(MPI_COMM_WORLD, 2);
  if (!strcmp(argv[1], "derived"))
    derived(rank, p, argv[2]);
  else if (!strcmp(argv[1], "settings"))
    code = settings(rank);
  else if (!strcmp(argv[1], "store"))
    store(rank, argv[2]);
  else
    MPI_Abort(MPI_COMM_WORLD, 2);
  MPI_Finalize();
  return code;
}
