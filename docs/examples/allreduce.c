/* A rank in plain C through libprism: each rank contributes rank + i/4 to
 * element i; the exact sum comes back to every rank.
 *
 *   cc allreduce.c $(pkg-config --cflags --libs prism) -o allreduce
 *   ./allreduce switch.yaml 3          # rank 3 of the config's only job
 */
#include <prism.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s SWITCH_YAML RANK\n", argv[0]);
    return 2;
  }
  const int rank = atoi(argv[2]);
  prism_comm* comm = NULL;
  if (prism_comm_from_config(argv[1], 0, rank, NULL, &comm) != PRISM_OK) {
    fprintf(stderr, "%s\n", prism_last_error());
    return 2;
  }
  enum { N = 1000 };
  static float v[N];
  for (int i = 0; i < N; ++i) v[i] = (float)rank + (float)i / 4.0f;
  prism_op_options o = {PRISM_FP32, PRISM_KULISCH_FIXED, PRISM_KULISCH, PRISM_IEEE};
  prism_op_report report;
  if (prism_allreduce(comm, v, v, N, PRISM_FP32, &o, &report) != PRISM_OK) { /* in place */
    fprintf(stderr, "%s\n", prism_last_error());
    prism_comm_destroy(comm);
    return 1;
  }
  printf("rank %d: v[0] = %g, v[%d] = %g (op %u, %.6f s)\n", rank, v[0], N - 1, v[N - 1], report.op, report.seconds);
  prism_comm_destroy(comm);
  return 0;
}
