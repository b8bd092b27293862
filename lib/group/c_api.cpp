// The C API of groups (prism.h's prism_group_*) over prism::Group.
#include <cstdlib>
#include <cstring>
#include <string>

#include "coll/algorithms.hpp"
#include "prism/group.hpp"
#include "rank/c_guard.hpp"
#include "rendezvous/callback_store.hpp"
#include "rendezvous/from_url.hpp"

struct prism_group {
  prism::Group g;
};
struct prism_store {
  std::shared_ptr<prism::rdv::Store> s;
};

namespace {

using prism::capi::fail;
using prism::capi::guarded;

// The C enums mirror prism/types.hpp's one for one (checked against the tables below).
static_assert(int(prism::Algorithm::AUTO) == PRISM_ALGO_AUTO && int(prism::Algorithm::RING) == PRISM_ALGO_RING);
static_assert(int(prism::Collective::ALLREDUCE) == PRISM_ALLREDUCE && int(prism::Collective::BARRIER) == PRISM_BARRIER);
static_assert(prism::coll::kAlgorithmCount == PRISM_ALGO_RING, "prism_algorithm has a value for every algorithm");
static_assert(prism::kCollectiveCount == PRISM_BARRIER + 1, "prism_collective has a value for every collective");

prism::Algorithm algorithm(prism_algorithm a) {
  const auto v = prism::Algorithm(a);
  if (v != prism::Algorithm::AUTO && !prism::coll::algorithm_info(v))
    throw prism::Error(prism::Errc::INVALID_ARGUMENT, "algorithm code " + std::to_string(int(a)) + " is not one (" +
                                                          "auto " + prism::choices<prism::Algorithm>() + ")");
  return v;
}

prism::GroupOptions group_options(const prism_group_options* o) {
  prism::GroupOptions d;
  if (!o) return d;
  d.algorithm = algorithm(o->algorithm);
  for (size_t i = 0; o->candidates && i < o->ncandidates; ++i) d.candidates.push_back(algorithm(o->candidates[i]));
  if (o->calibration) d.calibration = o->calibration;
  if (o->host_ip) d.host_ip = o->host_ip;
  if (o->name) d.name = o->name;
  if (o->connect_timeout_ms) d.connect_timeout_ms = o->connect_timeout_ms;
  if (o->recv_timeout_ms) d.recv_timeout_ms = o->recv_timeout_ms;
  d.tuning = prism::capi::tuning(o->tuning);
  return d;
}

prism::CollOptions coll_options(const prism_coll_options* o) {
  prism::CollOptions d;
  if (!o) return d;
  d.op = prism::capi::options(&o->op);
  if (o->algorithm_given) d.algorithm = algorithm(o->algorithm);
  d.root = o->root;
  d.segments = o->segments;
  return d;
}

void put(const prism::CollReport& r, prism_coll_report* out) {
  if (!out) return;
  *out = prism_coll_report{prism_algorithm(r.algorithm), r.segments, r.overflow, r.invalid, r.nan_input, r.seconds,
                           r.predicted_seconds};
}

prism::rdv::StoreCallbacks callbacks(const prism_store_callbacks s) {
  namespace rdv = prism::rdv;
  rdv::StoreCallbacks cb;
  const std::string who = "the store's ";
  cb.set = [s, who](std::string_view key, std::span<const uint8_t> value) {
    if (s.set(s.user, std::string(key).c_str(), value.data(), value.size()) != 0)
      throw rdv::StoreError(who + "set failed");
  };
  cb.get = [s, who](std::string_view key, rdv::Millis timeout) -> std::optional<rdv::Bytes> {
    void* v = nullptr;
    size_t len = 0;
    const int rc = s.get(s.user, std::string(key).c_str(), uint32_t(timeout.count()), &v, &len);
    if (rc == 1) return std::nullopt;
    if (rc != 0) throw rdv::StoreError(who + "get failed");
    rdv::Bytes out(static_cast<uint8_t*>(v), static_cast<uint8_t*>(v) + (v ? len : 0));
    std::free(v);
    return out;
  };
  if (s.add)
    cb.add = [s, who](std::string_view key, int64_t delta) {
      int64_t r = 0;
      if (s.add(s.user, std::string(key).c_str(), delta, &r) != 0) throw rdv::StoreError(who + "add failed");
      return r;
    };
  if (s.check)
    cb.check = [s, who](std::string_view key) {
      int set = 0;
      if (s.check(s.user, std::string(key).c_str(), &set) != 0) throw rdv::StoreError(who + "check failed");
      return set != 0;
    };
  return cb;
}

// A store's own errors are the caller's to fix (a URL, an unreachable server): INVALID_ARGUMENT or LINK.
template <class F>
int store_guarded(F&& f) {
  return guarded([&] {
    try {
      f();
    } catch (const prism::rdv::StoreError& e) {
      throw prism::Error(prism::Errc::LINK, std::string("the rendezvous store: ") + e.what());
    }
  });
}

}  // namespace

extern "C" {

int prism_group_from_config(const char* yaml_path, uint32_t job, int rank, const prism_group_options* o,
                            prism_group** out) {
  if (!yaml_path || !out) return fail(PRISM_EINVAL, "prism_group_from_config: a null argument");
  *out = nullptr;
  return guarded([&] { *out = new prism_group{prism::Group::from_config(yaml_path, {job, rank}, group_options(o))}; });
}

int prism_group_from_store_url(const char* url, int rank, int size, const prism_group_options* o, prism_group** out) {
  if (!out) return fail(PRISM_EINVAL, "prism_group_from_store_url: a null argument");
  *out = nullptr;
  return store_guarded([&] {
    auto store = url ? prism::rdv::store_from_url(url, rank) : prism::rdv::store_from_env(rank);
    *out = new prism_group{prism::Group::from_store(store, rank, size, group_options(o))};
  });
}

int prism_store_from_url(const char* url, int rank, prism_store** out) {
  if (!out) return fail(PRISM_EINVAL, "prism_store_from_url: a null argument");
  *out = nullptr;
  return store_guarded(
      [&] { *out = new prism_store{url ? prism::rdv::store_from_url(url, rank) : prism::rdv::store_from_env(rank)}; });
}

void prism_store_destroy(prism_store* s) { delete s; }

int prism_group_from_store(prism_store* store, int rank, int size, const prism_group_options* o, prism_group** out) {
  if (!store || !out) return fail(PRISM_EINVAL, "prism_group_from_store: a null argument");
  *out = nullptr;
  return store_guarded(
      [&] { *out = new prism_group{prism::Group::from_store(store->s, rank, size, group_options(o))}; });
}

int prism_group_from_callbacks(const prism_store_callbacks* s, int rank, int size, const prism_group_options* o,
                               prism_group** out) {
  if (!s || !s->set || !s->get || !out)
    return fail(PRISM_EINVAL, "prism_group_from_callbacks: a null argument (set and get are required)");
  *out = nullptr;
  return store_guarded([&] {
    auto store = std::make_shared<prism::rdv::CallbackStore>(callbacks(*s));
    *out = new prism_group{prism::Group::from_store(store, rank, size, group_options(o))};
  });
}

void prism_group_destroy(prism_group* g) { delete g; }
int prism_group_rank(const prism_group* g) { return g ? g->g.rank() : -1; }
int prism_group_size(const prism_group* g) { return g ? g->g.size() : -1; }

int prism_group_run(prism_group* g, prism_collective c, const void* in, void* out, size_t count, prism_dtype dtype,
                    const prism_coll_options* o, prism_coll_report* report) {
  if (!g) return fail(PRISM_EINVAL, "prism_group_run: a null group");
  return guarded([&] {
    if (!prism::entry(prism::Collective(c)))
      throw prism::Error(prism::Errc::INVALID_ARGUMENT, "collective code " + std::to_string(int(c)) + " is not one (" +
                                                            prism::choices<prism::Collective>() + ")");
    put(g->g.run(prism::Collective(c), in, out, count, prism::Format(dtype), coll_options(o)), report);
  });
}

int prism_group_allreduce(prism_group* g, const void* in, void* out, size_t count, prism_dtype dtype,
                          const prism_coll_options* o, prism_coll_report* report) {
  return prism_group_run(g, PRISM_ALLREDUCE, in, out, count, dtype, o, report);
}

int prism_group_barrier(prism_group* g) {
  return prism_group_run(g, PRISM_BARRIER, nullptr, nullptr, 0, PRISM_INT32, nullptr, nullptr);
}

const char* prism_algorithm_name(prism_algorithm a) {
  const auto v = prism::Algorithm(a);
  return v == prism::Algorithm::AUTO ? "auto" : prism::name(v);
}

const char* prism_collective_name(prism_collective c) { return prism::name(prism::Collective(c)); }

}  // extern "C"
