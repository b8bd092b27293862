// The C API (prism.h) over the C++ Communicator: exceptions become
// negative codes and a per-thread message.
#include <cstring>
#include <string>

#include "rank/c_guard.hpp"

struct prism_comm {
  prism::Communicator c;
};
struct prism_request {
  prism_comm* owner;
  prism::Request r;
};

namespace prism::capi {

namespace {
thread_local std::string last_error;
}  // namespace

const char* last_error_text() { return last_error.c_str(); }

int fail(prism_errc code, const std::string& msg) {
  last_error = msg;
  return code;
}

prism_errc code_of(Errc e) {
  switch (e) {
    case Errc::INVALID_ARGUMENT: return PRISM_EINVAL;
    case Errc::SYSTEM: return PRISM_ESYSTEM;
    case Errc::TIMEOUT: return PRISM_ETIMEOUT;
    case Errc::REFUSED: return PRISM_EREFUSED;
    case Errc::ABANDONED: return PRISM_EABANDONED;
    case Errc::LINK: return PRISM_ELINK;
  }
  return PRISM_EINTERNAL;
}

Tuning tuning(const prism_tuning* t) {
  Tuning d;
  if (!t) return d;
  if (t->window) d.window = t->window;
  if (t->chunk_elems) d.chunk_elems = t->chunk_elems;
  if (t->timeout_ms) d.timeout_ms = t->timeout_ms;
  if (t->rto_initial_ms) d.rto_initial_ms = t->rto_initial_ms;
  if (t->rto_min_ms) d.rto_min_ms = t->rto_min_ms;
  if (t->rto_max_ms) d.rto_max_ms = t->rto_max_ms;
  if (t->join_timeout_ms) d.join_timeout_ms = t->join_timeout_ms;
  d.join = !t->no_join;
  d.first_op = t->first_op;
  return d;
}

OpOptions options(const prism_op_options* o) {
  OpOptions d;
  if (!o) return d;
  if (o->out) {
    d.out = Format(o->out);  // checked with the op (an unknown code is refused there)
    d.out_given = true;
  }
  if (o->policy) d.policy = Policy(o->policy);
  if (o->transport) d.transport = PartialTransport(o->transport);
  if (o->overflow) d.exceptions = Exceptions(o->overflow);
  return d;
}

}  // namespace prism::capi

namespace {

using prism::capi::fail;
using prism::capi::guarded;
using prism::capi::options;
using prism::capi::tuning;

void put_report(const prism::OpReport& r, prism_op_report* out) {
  if (!out) return;
  *out = prism_op_report{r.op, r.overflow, r.invalid, r.nan_input, r.chunks, r.retransmits, r.seconds};
}

}  // namespace

extern "C" {

const char* prism_last_error(void) { return prism::capi::last_error_text(); }

int prism_comm_from_config(const char* yaml_path, uint32_t job, int rank, const prism_tuning* t, prism_comm** out) {
  if (!yaml_path || !out) return fail(PRISM_EINVAL, "prism_comm_from_config: a null argument");
  *out = nullptr;
  return guarded([&] { *out = new prism_comm{prism::Communicator::from_config(yaml_path, {job, rank}, tuning(t))}; });
}

int prism_comm_create(const prism_endpoints* e, const prism_tuning* t, prism_comm** out) {
  if (!e || !out || !e->switch_ip)
    return fail(PRISM_EINVAL, "prism_comm_create: a null argument (switch_ip is required)");
  *out = nullptr;
  return guarded([&] {
    prism::Endpoints ep;
    ep.job = e->job;
    ep.rank = e->rank;
    ep.group = e->group;
    ep.local_ip = e->local_ip ? e->local_ip : "";
    ep.local_port = e->local_port ? e->local_port : 20562;
    ep.switch_ip = e->switch_ip;
    ep.switch_port = e->switch_port ? e->switch_port : 20562;
    ep.slot_quota = e->slot_quota;
    ep.switch_shards = e->switch_shards ? e->switch_shards : 1;
    *out = new prism_comm{prism::Communicator(ep, tuning(t))};
  });
}

void prism_comm_destroy(prism_comm* c) { delete c; }

int prism_allreduce(prism_comm* c, const void* in, void* out, size_t count, prism_dtype dtype,
                    const prism_op_options* o, prism_op_report* report) {
  if (!c) return fail(PRISM_EINVAL, "prism_allreduce: a null communicator");
  return guarded([&] { put_report(c->c.allreduce(in, out, count, prism::Format(dtype), options(o)), report); });
}

int prism_reduce(prism_comm* c, const void* in, void* out, size_t count, prism_dtype dtype, uint16_t root,
                 const prism_op_options* o, prism_op_report* report) {
  if (!c) return fail(PRISM_EINVAL, "prism_reduce: a null communicator");
  return guarded([&] { put_report(c->c.reduce(in, out, count, prism::Format(dtype), root, options(o)), report); });
}

int prism_iallreduce(prism_comm* c, const void* in, void* out, size_t count, prism_dtype dtype,
                     const prism_op_options* o, prism_request** req) {
  if (!c || !req) return fail(PRISM_EINVAL, "prism_iallreduce: a null argument");
  *req = nullptr;
  return guarded([&] {
    *req = new prism_request{c, c->c.iallreduce(in, out, count, prism::Format(dtype), options(o))};
  });
}

int prism_ireduce(prism_comm* c, const void* in, void* out, size_t count, prism_dtype dtype, uint16_t root,
                  const prism_op_options* o, prism_request** req) {
  if (!c || !req) return fail(PRISM_EINVAL, "prism_ireduce: a null argument");
  *req = nullptr;
  return guarded([&] {
    *req = new prism_request{c, c->c.ireduce(in, out, count, prism::Format(dtype), root, options(o))};
  });
}

int prism_wait(prism_request** req, prism_op_report* report) {
  if (!req || !*req) return fail(PRISM_EINVAL, "prism_wait: a null request");
  prism_request* r = *req;
  *req = nullptr;
  const int rc = guarded([&] { put_report(r->owner->c.wait(r->r), report); });
  delete r;
  return rc;
}

int prism_test(prism_request* req, int* done) {
  if (!req || !done) return fail(PRISM_EINVAL, "prism_test: a null argument");
  return guarded([&] { *done = req->owner->c.test(req->r) ? 1 : 0; });
}

int prism_comm_stats(const prism_comm* c, prism_stats* s) {
  if (!c || !s) return fail(PRISM_EINVAL, "prism_comm_stats: a null argument");
  const prism::Stats& x = c->c.stats();
  *s = prism_stats{};
  s->ops = x.ops;
  s->ops_failed = x.ops_failed;
  s->chunks = x.chunks;
  s->retransmits = x.retransmits;
  s->results = x.results;
  s->duplicate_results = x.duplicate_results;
  s->stray = x.stray;
  s->nacks = x.nacks;
  s->no_slot_retries = x.no_slot_retries;
  std::memcpy(s->nack_by_reason, x.nack_by_reason, sizeof s->nack_by_reason);
  s->packets_sent = x.packets_sent;
  s->packets_received = x.packets_received;
  s->bytes_sent = x.bytes_sent;
  s->bytes_received = x.bytes_received;
  s->joins_sent = x.joins_sent;
  s->join_seconds = x.join_seconds;
  s->rtt_min_us = x.rtt_min_us;
  s->rtt_srtt_us = x.rtt_srtt_us;
  s->rtt_max_us = x.rtt_max_us;
  s->rto_us = x.rto_us;
  return PRISM_OK;
}

int prism_comm_stat(const prism_comm* c, const char* name, double* value) {
  if (!c || !name || !value) return fail(PRISM_EINVAL, "prism_comm_stat: a null argument");
  size_t n = 0;
  const prism::StatField* f = prism::stat_fields(&n);
  for (size_t i = 0; i < n; ++i)
    if (std::strcmp(f[i].name, name) == 0) {
      const prism::Stats& x = c->c.stats();
      *value = f[i].count ? double(x.*f[i].count) : x.*f[i].value;
      return PRISM_OK;
    }
  return fail(PRISM_EINVAL, std::string("prism_comm_stat: no statistic '") + name + "' (prism_stat_name lists them)");
}

const char* prism_stat_name(size_t i) {
  size_t n = 0;
  const prism::StatField* f = prism::stat_fields(&n);
  return i < n ? f[i].name : nullptr;
}

size_t prism_dtype_size(prism_dtype d) { return prism::format_bytes(prism::Format(d)); }

}  // extern "C"
