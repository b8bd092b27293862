/* libprism's C API: a rank of a PRISM job (docs/RANK.md). The C++ API is
 * prism.hpp; this is the same library behind plain functions.
 *
 *   prism_comm* comm;
 *   if (prism_comm_from_config("switch.yaml", 7, 3, NULL, &comm) != PRISM_OK) {
 *     fprintf(stderr, "%s\n", prism_last_error()); return 1;
 *   }
 *   prism_allreduce(comm, grad, grad, n, PRISM_FP32, NULL, NULL);
 *   prism_comm_destroy(comm);
 *
 * Every function returns PRISM_OK (0) or a negative prism_errc; the message
 * of the calling thread's last error is prism_last_error(). */
#ifndef PRISM_H
#define PRISM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  PRISM_FP32 = 1,
  PRISM_FP16 = 2,
  PRISM_BF16 = 3,
  PRISM_E4M3FN = 4,
  PRISM_E4M3FNUZ = 5,
  PRISM_E5M2 = 6,
  PRISM_E5M2FNUZ = 7,
  PRISM_INT8 = 8,
  PRISM_INT32 = 9
} prism_dtype;
typedef enum { PRISM_FP32_ARRIVAL = 1, PRISM_KULISCH_FIXED = 2, PRISM_FP32_BINOMIAL = 3 } prism_policy;
typedef enum { PRISM_ROUNDED = 1, PRISM_KULISCH = 2, PRISM_AUTO = 3 } prism_transport;
typedef enum { PRISM_IEEE = 1, PRISM_SATURATE = 2 } prism_overflow;

typedef enum {
  PRISM_OK = 0,
  PRISM_EINVAL = -1,     /* a bad argument or configuration */
  PRISM_ESYSTEM = -2,    /* a socket call failed */
  PRISM_ETIMEOUT = -3,   /* no RESULT came back in time */
  PRISM_EREFUSED = -4,   /* the switch NACKed the op */
  PRISM_EABANDONED = -5, /* the switch abandoned the op: a contributor never sent */
  PRISM_EINTERNAL = -6,
  PRISM_ELINK = -7 /* a link to another rank failed (a peer died, went silent, or disagreed) */
} prism_errc;

typedef struct prism_comm prism_comm;
typedef struct prism_request prism_request;

/* Zero fields take the defaults of prism.hpp's Tuning. */
typedef struct {
  uint32_t window, chunk_elems, timeout_ms, rto_initial_ms, rto_min_ms, rto_max_ms;
  uint32_t join_timeout_ms;
  int no_join; /* 1: do not join the job's session; op numbers start at first_op */
  uint32_t first_op;
} prism_tuning;

typedef struct {
  uint32_t job;
  uint16_t rank, group;
  const char* local_ip; /* NULL: any */
  uint16_t local_port;  /* 0: 20562 */
  const char* switch_ip;
  uint16_t switch_port; /* 0: 20562; the switch's replies come from this port */
  uint32_t slot_quota;
  /* The switch's reducers.shards (0: 1): each chunk goes to UDP port
   * switch_port + (job + op + chunk) mod switch_shards (docs/PROTOCOL.md, Steering).
   * Added after slot_quota: a program built against an older prism.h must be rebuilt. */
  uint32_t switch_shards;
} prism_endpoints;

/* Zero fields: out = fp32 (int32 for integer inputs), policy kulisch, transport kulisch, overflow ieee. */
typedef struct {
  prism_dtype out;
  prism_policy policy;
  prism_transport transport;
  prism_overflow overflow;
} prism_op_options;

typedef struct {
  uint32_t op;
  uint64_t overflow, invalid, nan_input, chunks, retransmits;
  double seconds;
} prism_op_report;

typedef struct {
  uint64_t ops, ops_failed, chunks, retransmits, results, duplicate_results, stray, nacks, no_slot_retries;
  uint64_t nack_by_reason[16];
  uint64_t packets_sent, packets_received, bytes_sent, bytes_received, joins_sent;
  double join_seconds;
  double rtt_min_us, rtt_srtt_us, rtt_max_us, rto_us;
} prism_stats;

const char* prism_last_error(void);

int prism_comm_from_config(const char* yaml_path, uint32_t job, int rank, const prism_tuning* t, prism_comm** out);
int prism_comm_create(const prism_endpoints* e, const prism_tuning* t, prism_comm** out);
void prism_comm_destroy(prism_comm* c);

int prism_allreduce(prism_comm* c, const void* in, void* out, size_t count, prism_dtype dtype,
                    const prism_op_options* o, prism_op_report* report);
int prism_reduce(prism_comm* c, const void* in, void* out, size_t count, prism_dtype dtype, uint16_t root,
                 const prism_op_options* o, prism_op_report* report);
int prism_iallreduce(prism_comm* c, const void* in, void* out, size_t count, prism_dtype dtype,
                     const prism_op_options* o, prism_request** req);
int prism_ireduce(prism_comm* c, const void* in, void* out, size_t count, prism_dtype dtype, uint16_t root,
                  const prism_op_options* o, prism_request** req);
/* Frees *req either way and sets it to NULL. */
int prism_wait(prism_request** req, prism_op_report* report);
/* *done = 1 when prism_wait would return at once. */
int prism_test(prism_request* req, int* done);

int prism_comm_stats(const prism_comm* c, prism_stats* s);
size_t prism_dtype_size(prism_dtype d);

#ifdef __cplusplus
}
#endif
#endif
