// fuzz_switch's input language (docs/FUZZING.md, fuzz_switch): a sequence of
// actions, each one code byte and its fixed fields, read by fuzz_switch.cpp
// and written by seedgen_switch.cpp. Every field is a byte (RAW_FRAME's
// length two) chosen so that most values mean something: an index into a
// table of sources, jobs and descriptors, a small op or chunk number so that
// ops collide, a natural sender and group unless the byte is high. A missing
// byte reads as 0, so every input decodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fuzz::sw {

// The action codes (the code byte mod kActs).
enum Act : uint8_t {
  CONTRIB = 0,       // src port job op chunk sender group count desc flags variant misc
  QUERY = 1,         // src port job op chunk sender group desc misc
  JOIN = 2,          // src port job sender group nonce
  ALLOC = 3,         // src port pool nonce group
  LEAVE = 4,         // src port job sender nonce
  INJECT = 5,        // src port kind job op chunk sender group count desc flags variant: a PARTIAL, RESULT or JOINED
  ADVANCE = 6,       // dt: the clock moves dt ms (dt < 128) or (dt - 128) * 10 ms, then every shard ticks;
                     // 254: both switches begin a graceful stop (Reducer::drain), 255: they give up what is open
  TICK = 7,          // every shard of both switches ticks at the current time
  DELIVER = 8,       // idx: the pending switch-to-switch frame idx (mod their number) reaches its switch
  DROP = 9,          // idx: that frame is lost
  DELIVER_ALL = 10,  // every pending frame (and what they cause) is delivered, oldest first
  RAW_MSG = 11,      // src port len16 misc bytes[len % 1600]: a PRISM message of raw bytes, well framed from src
  RAW_FRAME = 12,    // sw port len16 bytes[len % 1600]: a whole raw frame
  ALLREDUCE = 13,    // job op chunk count desc variant skip: every member (and leaf) of the job contributes
  POOL_UP = 14,      // pool nonce group host: ALLOC from a pool host, then JOIN of every rank from host + rank
  POOL_DOWN = 15,    // job: every bound rank of a pooled job LEAVEs with its JOIN's nonce
  kActs = 16
};

// Source table indices (fuzz_switch.cpp's `source()`).
enum Src : uint8_t {
  J7R0 = 0,
  J7R1 = 1,
  J7R2 = 2,  // job 7 at the root: ranks 0, 1 on port 0, rank 2 on port 1
  J8R0 = 3,
  J8R1 = 4,  // job 8: rank 0 port 0, rank 1 port 1 (UDP port 30000)
  J9R0 = 5,
  J9R1 = 6,      // job 9's root members
  CHILD = 7,     // the leaf's address, at the root's port 2
  STRANGER = 8,  // 192.0.2.1 at the root's port 0
  BCAST = 9,     // MAC ff:ff:ff:ff:ff:ff, IP 10.0.0.99 (pool A's range) at port 0
  SPOOF = 10,    // job 7 rank 0's IP and UDP port with another MAC
  LEAF_R2 = 11,
  LEAF_R3 = 12,        // job 9's ranks 2 and 3, at the leaf's port 0
  PARENT = 13,         // the parent's address (the root's port 2), at the leaf's port 1
  LEAF_STRANGER = 14,  // 192.0.2.2 at the leaf's port 0
  POOL_A = 16,         // 16 + k (k < 32): pool A hosts 10.0.0.65 + k % 4, UDP port 20562 + k / 4
  POOL_B = 48          // 48 + k: pool B hosts 10.0.1.65 + k % 8, UDP port 20562 + k / 8, root port 1
};

// Job table (the job byte mod 9; 0xF0 and above: that byte as a job id).
inline constexpr uint32_t kJobs[] = {7, 8, 9, 100, 101, 102, 200, 201, 9};
inline constexpr size_t kJobCount = sizeof kJobs / sizeof kJobs[0];
// Descriptor table (the desc byte mod 8; bit 7: exceptions SATURATE): dtype, out_dtype, policy, transport.
struct Desc {
  uint8_t dtype, out, policy, transport;
};
inline constexpr Desc kDescs[] = {
    {1, 1, 2, 2},  // fp32 kulisch, Kulisch partials
    {9, 9, 2, 2},  // int32 kulisch
    {1, 1, 1, 1},  // fp32 fp32_arrival, rounded partials
    {1, 1, 3, 3},  // fp32 fp32_binomial, auto
    {9, 9, 2, 3},  // int32 kulisch, auto
    {9, 1, 2, 1},  // int32 in, fp32 out, rounded
    {3, 1, 2, 2},  // bf16 in, fp32 out
    {4, 4, 2, 3},  // e4m3fn in and out
};
inline constexpr size_t kDescCount = sizeof kDescs / sizeof kDescs[0];
// RAW_MSG and RAW_FRAME: at most this many bytes (a 1500-byte MTU's frame fits).
inline constexpr size_t kRawMax = 1600;

// Writes actions for the seed generator (and documents each one's bytes).
struct Writer {
  std::vector<uint8_t> b;
  Writer& put(std::initializer_list<uint8_t> v) {
    b.insert(b.end(), v);
    return *this;
  }
  // A CONTRIB with natural sender and group (0), `count` elements 1 + count % 4.
  Writer& contrib(uint8_t src, uint8_t job, uint8_t op, uint8_t chunk, uint8_t desc = 0, uint8_t flags = 2,
                  uint8_t variant = 0, uint8_t count = 0, uint8_t port = 0, uint8_t sender = 0, uint8_t group = 0,
                  uint8_t misc = 0) {
    return put({CONTRIB, src, port, job, op, chunk, sender, group, count, desc, flags, variant, misc});
  }
  Writer& query(uint8_t src, uint8_t job, uint8_t op, uint8_t chunk, uint8_t desc = 0, uint8_t sender = 0,
                uint8_t group = 0) {
    return put({QUERY, src, 0, job, op, chunk, sender, group, desc, 0});
  }
  Writer& join(uint8_t src, uint8_t job, uint8_t nonce, uint8_t sender = 0, uint8_t group = 0) {
    return put({JOIN, src, 0, job, sender, group, nonce});
  }
  Writer& alloc(uint8_t src, uint8_t pool, uint8_t nonce, uint8_t group) {
    return put({ALLOC, src, 0, pool, nonce, group});
  }
  Writer& leave(uint8_t src, uint8_t job, uint8_t nonce, uint8_t sender = 0) {
    return put({LEAVE, src, 0, job, sender, nonce});
  }
  Writer& inject(uint8_t src, uint8_t port, uint8_t kind, uint8_t job, uint8_t op, uint8_t chunk, uint8_t sender,
                 uint8_t group, uint8_t count, uint8_t desc, uint8_t flags, uint8_t variant) {
    return put({INJECT, src, port, kind, job, op, chunk, sender, group, count, desc, flags, variant});
  }
  Writer& advance(uint8_t dt) { return put({ADVANCE, dt}); }
  Writer& tick() { return put({TICK}); }
  Writer& deliver(uint8_t idx) { return put({DELIVER, idx}); }
  Writer& drop(uint8_t idx) { return put({DROP, idx}); }
  Writer& deliver_all() { return put({DELIVER_ALL}); }
  Writer& raw_msg(uint8_t src, const std::vector<uint8_t>& msg, uint8_t port = 0, uint8_t misc = 0) {
    const size_t n = msg.size() % kRawMax;
    put({RAW_MSG, src, port, uint8_t(n >> 8), uint8_t(n), misc});
    b.insert(b.end(), msg.begin(), msg.begin() + long(n));
    return *this;
  }
  Writer& raw_frame(uint8_t sw, uint8_t port, const std::vector<uint8_t>& f) {
    const size_t n = f.size() % kRawMax;
    put({RAW_FRAME, sw, port, uint8_t(n >> 8), uint8_t(n)});
    b.insert(b.end(), f.begin(), f.begin() + long(n));
    return *this;
  }
  Writer& allreduce(uint8_t job, uint8_t op, uint8_t chunk, uint8_t count = 0, uint8_t desc = 0, uint8_t variant = 0,
                    uint8_t skip = 0) {
    return put({ALLREDUCE, job, op, chunk, count, desc, variant, skip});
  }
  Writer& pool_up(uint8_t pool, uint8_t nonce, uint8_t group, uint8_t host) {
    return put({POOL_UP, pool, nonce, group, host});
  }
  Writer& pool_down(uint8_t job) { return put({POOL_DOWN, job}); }
};

}  // namespace fuzz::sw
