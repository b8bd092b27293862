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
/* One statistic by name (prism.hpp's stat_fields(): "chunks", "retransmits", "rtt_srtt_us", ...), and
 * the i-th name (NULL past the last): what a program lists without knowing prism_stats' layout. */
int prism_comm_stat(const prism_comm* c, const char* name, double* value);
const char* prism_stat_name(size_t i);
size_t prism_dtype_size(prism_dtype d);

/* ---- Groups (prism/group.hpp): every collective with any algorithm, or auto ---- */

typedef enum {
  PRISM_ALGO_AUTO = 0,
  PRISM_ALGO_SWITCH = 1,
  PRISM_ALGO_BINOMIAL = 2,
  PRISM_ALGO_CHAIN = 3,
  PRISM_ALGO_RHD = 4,
  PRISM_ALGO_RING = 5
} prism_algorithm;
typedef enum {
  PRISM_ALLREDUCE = 0,
  PRISM_REDUCE = 1,
  PRISM_BROADCAST = 2,
  PRISM_REDUCE_SCATTER = 3,
  PRISM_ALLGATHER = 4,
  PRISM_BARRIER = 5
} prism_collective;

typedef struct prism_group prism_group;
typedef struct prism_store prism_store;

/* Zero fields take GroupOptions' defaults. */
typedef struct {
  prism_algorithm algorithm;         /* every collective's, unless a call names one (default auto) */
  const prism_algorithm* candidates; /* what auto chooses among (NULL: every algorithm the group has) */
  size_t ncandidates;
  const char* calibration; /* a calibration file (NULL: auto measures when it first needs to) */
  const char* host_ip;     /* this rank's address for the host links (NULL: found) */
  const char* name;        /* groups sharing one store keep apart by name (NULL: none) */
  uint32_t connect_timeout_ms, recv_timeout_ms;
  const prism_tuning* tuning; /* the switch communicator's */
} prism_group_options;

/* A store given as functions (an MPI library's exchange, a framework's store). Each returns 0, or
 * non-zero on failure. get waits up to timeout_ms for key to be set and writes its value to
 * *value (malloc'd: the library frees it) and its length to *len; it returns 1 on timeout. add and
 * check may be NULL. */
typedef struct {
  void* user;
  int (*set)(void* user, const char* key, const void* value, size_t len);
  int (*get)(void* user, const char* key, uint32_t timeout_ms, void** value, size_t* len);
  int (*add)(void* user, const char* key, int64_t delta, int64_t* result);
  int (*check)(void* user, const char* key, int* is_set);
} prism_store_callbacks;

typedef struct {
  prism_op_options op;
  int algorithm_given; /* 1: use `algorithm`; 0: the group's */
  prism_algorithm algorithm;
  uint16_t root;   /* reduce's and broadcast's */
  size_t segments; /* the chain's m (0: the model's) */
} prism_coll_options;

typedef struct {
  prism_algorithm algorithm; /* what ran (auto's choice) */
  size_t segments;
  uint64_t overflow, invalid, nan_input;
  double seconds, predicted_seconds; /* predicted: -1 without a calibration */
} prism_coll_report;

/* From the switch's YAML (as prism_comm_from_config). */
int prism_group_from_config(const char* yaml_path, uint32_t job, int rank, const prism_group_options* o,
                            prism_group** out);
/* A rendezvous store ("tcp://host:port": rank 0 serves it; "file:///path"); NULL: the environment
 * (PRISM_STORE, else MASTER_ADDR and MASTER_PORT). Several groups may share one (GroupOptions' name
 * keeps them apart); destroy it after its groups. */
int prism_store_from_url(const char* url, int rank, prism_store** out);
void prism_store_destroy(prism_store* s);
int prism_group_from_store(prism_store* store, int rank, int size, const prism_group_options* o, prism_group** out);
/* The same with a store of its own, made from `url` as prism_store_from_url does. */
int prism_group_from_store_url(const char* url, int rank, int size, const prism_group_options* o, prism_group** out);
/* From a store given as functions. */
int prism_group_from_callbacks(const prism_store_callbacks* store, int rank, int size, const prism_group_options* o,
                               prism_group** out);
void prism_group_destroy(prism_group* g);
int prism_group_rank(const prism_group* g);
int prism_group_size(const prism_group* g);

/* Buffers as prism/group.hpp's Group::run (count: elements of the whole vector). */
int prism_group_run(prism_group* g, prism_collective c, const void* in, void* out, size_t count, prism_dtype dtype,
                    const prism_coll_options* o, prism_coll_report* report);
int prism_group_allreduce(prism_group* g, const void* in, void* out, size_t count, prism_dtype dtype,
                          const prism_coll_options* o, prism_coll_report* report);
int prism_group_barrier(prism_group* g);

const char* prism_algorithm_name(prism_algorithm a);   /* "auto", "switch", ...; "?" otherwise */
const char* prism_collective_name(prism_collective c); /* "allreduce", ... */

#ifdef __cplusplus
}
#endif
#endif
