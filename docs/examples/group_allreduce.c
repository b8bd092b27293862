/* A group of ranks in plain C with no configuration at all: the ranks find each
 * other through a rendezvous store (rank 0 serves it, as torch's MASTER_ADDR),
 * allreduce exactly among the hosts with the algorithm the cost model picks,
 * then again through a PRISM switch with a job taken from the switch's pool;
 * both digests are printed (KULISCH_FIXED: they are the same).
 *
 *   cc group_allreduce.c $(pkg-config --cflags --libs prism) -o group_allreduce
 *   PRISM_STORE=tcp://10.0.0.1:29500 PRISM_SWITCH=10.0.0.254:20562 PRISM_POOL=1000 \
 *     ./group_allreduce RANK SIZE [ELEMENTS [DIR]]
 * With DIR, rank r writes its input to DIR/in<r>.bin and the switch's result to DIR/out<r>.bin.
 */
#include <prism.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FNV-1a 64 of the result bytes (prism-rank's digest). */
static unsigned long long digest(const void* p, size_t n) {
  const unsigned char* b = (const unsigned char*)p;
  unsigned long long h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* One allreduce of v over a group made from the store; the algorithm and the group's name given. */
static int run(prism_store* store, int rank, int size, prism_algorithm algo, const char* name, const float* v,
               float* out, size_t n, unsigned long long* d, prism_algorithm* ran) {
  prism_group_options go;
  memset(&go, 0, sizeof go);
  go.algorithm = algo;
  go.name = name;
  const prism_algorithm hosts[] = {PRISM_ALGO_BINOMIAL, PRISM_ALGO_CHAIN, PRISM_ALGO_RHD, PRISM_ALGO_RING};
  if (algo == PRISM_ALGO_AUTO) {
    go.candidates = hosts;
    go.ncandidates = 4;
  }
  prism_group* g = NULL;
  if (prism_group_from_store(store, rank, size, &go, &g) != PRISM_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, prism_last_error());
    return 1;
  }
  prism_coll_options co;
  memset(&co, 0, sizeof co);
  co.op.out = PRISM_FP32;
  co.op.policy = PRISM_KULISCH_FIXED;
  prism_coll_report rep;
  const int rc = prism_group_allreduce(g, v, out, n, PRISM_FP32, &co, &rep);
  if (rc != PRISM_OK) fprintf(stderr, "rank %d: %s\n", rank, prism_last_error());
  *d = digest(out, n * sizeof(float));
  *ran = rep.algorithm;
  prism_group_destroy(g); /* a pooled job is left here */
  return rc == PRISM_OK ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: %s RANK SIZE [ELEMENTS [DIR]]   (PRISM_STORE, PRISM_SWITCH, PRISM_POOL in the environment)\n",
            argv[0]);
    return 2;
  }
  const int rank = atoi(argv[1]), size = atoi(argv[2]);
  const size_t n = argc > 3 ? (size_t)strtoul(argv[3], NULL, 10) : 100000;
  float* v = malloc(n * sizeof(float));
  float* out = malloc(n * sizeof(float));
  if (!v || !out) return 2;
  unsigned long long x = 0x9E3779B97F4A7C15ull ^ (unsigned long long)rank;
  for (size_t i = 0; i < n; ++i) { /* values over many binades, both signs: sums round */
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 2 - 1) * (float)(1u << (x % 20)) / 1024.0f;
  }
  unsigned long long on_hosts = 0, via_switch = 0;
  prism_algorithm a1 = PRISM_ALGO_AUTO, a2 = PRISM_ALGO_AUTO;
  prism_store* store = NULL; /* the environment's: PRISM_STORE, else MASTER_ADDR and MASTER_PORT */
  if (prism_store_from_url(NULL, rank, &store) != PRISM_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, prism_last_error());
    return 1;
  }
  int rc = run(store, rank, size, PRISM_ALGO_AUTO, "hosts", v, out, n, &on_hosts, &a1);
  if (rc == 0) rc = run(store, rank, size, PRISM_ALGO_SWITCH, "switch", v, out, n, &via_switch, &a2);
  if (rc == 0 && argc > 4) {
    char path[4096];
    snprintf(path, sizeof path, "%s/in%d.bin", argv[4], rank);
    FILE* f = fopen(path, "wb");
    if (f) fwrite(v, sizeof(float), n, f), fclose(f);
    snprintf(path, sizeof path, "%s/out%d.bin", argv[4], rank);
    f = fopen(path, "wb");
    if (f) fwrite(out, sizeof(float), n, f), fclose(f);
  }
  if (rc == 0)
    printf("rank %d: hosts (%s) %016llx switch (%s) %016llx%s\n", rank, prism_algorithm_name(a1), on_hosts,
           prism_algorithm_name(a2), via_switch, on_hosts == via_switch ? " same" : " DIFFER");
  prism_store_destroy(store); /* after its groups */
  free(v);
  free(out);
  return rc;
}
