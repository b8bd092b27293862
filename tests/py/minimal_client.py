#!/usr/bin/python3
"""A minimal PRISM client, written from docs/PROTOCOL.md alone: one process is
one rank of one allreduce. It shares nothing with the C++ code or with the
other test helpers: plain UDP sockets, struct, numpy for the element formats.

    minimal_client.py --config switch.yaml --rank 3 --elements 20000 --dtype fp32 --seed 1
    minimal_client.py --config switch.yaml --rank 3 --join --ops 3     # in a session

It reads its own address (member `rank` of the job: ip, udp_port, and its
port's ip, the switch's) and the switch's udp_port and shard count from the
switch's YAML, binds that address, sends one CONTRIB per chunk (a window of
chunks in flight) to the chunk's shard port (PROTOCOL.md, Steering: udp_port +
(job + op + chunk) mod S; its JOIN to udp_port + job mod S), collects one RESULT per
chunk, re-sends a chunk whose RESULT is late with the RETRANSMIT flag (timeout
doubling up to a cap), ignores duplicate RESULTs, and stops with a clear error
on a NACK (NO_FREE_SLOT is retried later, as PROTOCOL.md says). It prints one
JSON line: the sha256 of the result bytes and its counts. Exit status 0 when
every chunk's RESULT arrived, 3 on a NACK, 4 on a timeout, 2 on bad arguments.

With --join it first joins the job's session (PROTOCOL.md, Sessions): it
sends JOIN with a random non-zero nonce of this process, again (the same
nonce) on a doubling timer until a JOINED for that nonce says COMPLETE, and
then numbers its ops from the session's first op number (the JOINED's chunk),
one per allreduce. Without --join the op numbers start at --op. A JOIN that
is not complete within --join-timeout fails (exit 4), naming the ranks that
had not joined (from the last JOINED's bitmap).

--ops N runs N allreduces in a row, op k with the inputs of seed + k.

With --pool POOL_ID the job is a pooled one (PROTOCOL.md, Job pools): no
member entry in the config (its switch section gives udp_port and shards);
the client binds --ip and --udp-port and talks to --switch-ip. Rank 0 sends
ALLOC (a random non-zero nonce, group --group) to udp_port + POOL_ID mod S
until ALLOCATED (or a NACK) answers that nonce, and writes the job id and the
switch's shard count to --pool-share FILE (atomically); the other ranks wait
for that file (or take --pool-job JOB). Then every rank JOINs (the first JOIN
binds the rank to its address), runs its ops, and LEAVEs: LEAVE (op = its
JOIN's nonce) to udp_port + job mod S until a LEFT answers it. --no-leave
skips the LEAVE (a job that dies without one); --linger S waits S seconds
before it; --alloc-only stops after the ALLOC.

--shards S sends as if the switch had S shards (--shards 1: everything to
udp_port, as a client that ignores steering does); by default S is the
config's.

Its inputs come from make_input(seed, rank, elements, dtype), so a test can
compute the expected sum without it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import select
import socket
import struct
import sys
import time

import numpy as np

# ---------------------------------------------------------------- PROTOCOL.md
MAGIC, VERSION = 0x5052, 1
CONTRIB, PARTIAL, RESULT, NACK, JOIN, JOINED = 1, 2, 3, 4, 5, 6
ALLOC, ALLOCATED, LEAVE, LEFT = 7, 8, 9, 10
F_RETRANSMIT, F_LAST_CHUNK, F_SIDEBAND = 1, 2, 4
JOINED_COMPLETE = 1     # JOINED's status bit0: every rank of the job has joined
POLICY = {'fp32_arrival': 1, 'kulisch': 2, 'fp32_binomial': 3}
TRANSPORT_KULISCH, EXC_IEEE, ENC_DTYPE, ENC_OUT = 2, 1, 1, 2
# format name -> (wire code, numpy little-endian dtype)
FORMATS = {'fp32': (1, '<f4'), 'fp16': (2, '<f2')}
NACK_REASON = {
    1: ('MALFORMED', 'the switch could not parse the packet: a client bug'),
    2: ('UNKNOWN_JOB', 'the job id is not configured on this switch: check --job and the config'),
    3: ('NOT_A_MEMBER', 'this rank is not a member of the job: check --rank and the config'),
    4: ('DESCRIPTOR_MISMATCH', 'another rank sent this op with another descriptor (dtype, policy, '
        'group, count...), or the job does not allow it: give every rank the same arguments'),
    5: ('ACCUMULATOR_TOO_NARROW', 'the switch\'s kulisch_width is too narrow for this dtype and group'),
    6: ('NO_FREE_SLOT', 'the switch has no free slot now: retried later'),
    7: ('RESULT_EXPIRED', 'the result was no longer retained when this rank asked again: '
        'raise retention_ms or lower the timeouts'),
    8: ('OP_ABANDONED', 'the switch gave the chunk up after op_timeout_ms: a contributor never sent '
        'or died; the collective failed'),
    9: ('POOL_FULL', 'every job id of the pool is taken: retry later, or ask for a larger pool'),
    10: ('GROUP_TOO_LARGE', 'the group is larger than the pool\'s max_group'),
    11: ('OUT_OF_POOL', 'this address (or the switch port it came in on) is outside the pool'),
    12: ('RANK_TAKEN', 'this rank of the job is already bound to another address'),
    13: ('CHUNK_TOO_LARGE', 'the chunk is larger than the switch takes (its RESULT must fit the MTU): '
         'send smaller chunks'),
    14: ('SWITCH_STOPPING', 'the switch is stopping: it takes no new op; run the job again once it is back'),
}
NO_FREE_SLOT, OP_ABANDONED = 6, 8
# magic ver kind job op chunk sender group terms count dtype out policy enc transport exc flags status
HDR = struct.Struct('>HBBIIIHHHHBBBBBBBB')
assert HDR.size == 32
IP_UDP_OVERHEAD = 20 + 8


def make_input(seed: int, rank: int, n: int, dtype: str) -> np.ndarray:
    """Rank `rank`'s elements: finite values of mixed magnitudes (a sum in arrival order
    would depend on the order), with exact cancellations and fp16 subnormals."""
    rng = np.random.default_rng([seed, rank, n])
    if dtype == 'fp32':
        x = rng.standard_normal(n) * np.exp2(rng.integers(-40, 40, n).astype(np.float64))
        x[::7] = 1.0 + rank * 2.0 ** -23      # the same value in every rank, ulp apart
        x[3::11] = (-1) ** rank * 3.0e20      # cancels pairwise
        return x.astype('<f4')
    if dtype == 'fp16':
        x = rng.standard_normal(n) * np.exp2(rng.integers(-22, 8, n).astype(np.float64))
        x[::5] = 2.0 ** -24 * (rank + 1)      # subnormals
        return x.astype('<f2')
    raise ValueError(f'dtype {dtype}: fp32 or fp16')


def chunk_elements(dtype: str, out_dtype: str, mtu: int) -> int:
    """The most elements whose CONTRIB, and whose RESULT with a sideband (a status byte per
    element), fit an IP MTU."""
    body = mtu - IP_UDP_OVERHEAD - HDR.size
    isz = np.dtype(FORMATS[dtype][1]).itemsize
    osz = np.dtype(FORMATS[out_dtype][1]).itemsize
    return min(body // isz, body // (osz + 1))


def shard_port(sw_port: int, shards: int, job: int, op: int, chunk: int) -> int:
    """PROTOCOL.md, Steering: the packet goes to UDP port udp_port + shard, shard = (job + op + chunk)
    mod S, the three added without wrapping (Python's integers do not wrap). A JOIN passes op = chunk = 0."""
    return sw_port + (job + op + chunk) % shards


def read_member(config: str, rank: int, job: int | None):
    """(job id, group, my ip, my udp port, switch ip, switch udp port, switch shards) from the switch YAML."""
    import yaml   # Debian's python3-yaml
    with open(config) as f:
        cfg = yaml.safe_load(f)
    sw_port = int((cfg.get('switch') or {}).get('udp_port', 20562))
    # PROTOCOL.md, Steering: reducers.shards; by default one per listed lcore, 1 when none is listed.
    shards = int((cfg.get('reducers') or {}).get('shards', max(1, len(cfg.get('lcores') or []))))
    jobs = cfg.get('jobs') or []
    if job is None:
        if len(jobs) != 1:
            raise SystemExit(f'{config}: {len(jobs)} jobs: give --job')
        j = jobs[0]
    else:
        j = next((x for x in jobs if int(x['id']) == job), None)
        if j is None:
            raise SystemExit(f'{config}: no job {job}')
    members = j.get('members') or []
    m = next((x for x in members if int(x['rank']) == rank), None)
    if m is None:
        raise SystemExit(f'{config}: job {j["id"]} has no member with rank {rank}')
    group = int(j['group']) if 'group' in j else \
        len(members) + sum(int(c['ranks']) for c in j.get('children') or [])
    port = next((p for p in cfg.get('ports') or [] if int(p['id']) == int(m['port'])), None)
    if port is None:
        raise SystemExit(f'{config}: rank {rank}\'s port {m["port"]} is not under ports')
    return int(j['id']), group, str(m['ip']), int(m.get('udp_port', 20562)), str(port['ip']), sw_port, shards


class Failure(Exception):
    def __init__(self, code: int, what: str, **info):
        super().__init__(what)
        self.code, self.info = code, info


def bitmap_ranks(body: bytes, group: int) -> list[int]:
    """The ranks whose bit is set in a ceil(group / 8)-byte bitmap: bit r % 8 of byte r // 8."""
    return [r for r in range(group) if len(body) > r // 8 and body[r // 8] >> (r % 8) & 1]


def datagrams(sock: socket.socket):
    """Every datagram waiting on the non-blocking socket (an ICMP port-unreachable skipped), then stop."""
    while True:
        try:
            yield sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionRefusedError:
            continue


def new_nonce() -> int:
    """Random, non-zero, new each time the process starts (PROTOCOL.md, Sessions)."""
    while True:
        n = secrets.randbits(32)
        if n:
            return n


def join(sock: socket.socket, *, to: tuple[str, int], job: int, rank: int, group: int, nonce: int, rto: float,
         rto_max: float, deadline: float) -> tuple[int, dict]:
    """Joins the job's session: JOIN (op = nonce, chunk 0, sender = rank, group = R, terms, count,
    descriptor, flags and status 0, no body), sent to `to` (the session's shard port), until a JOINED
    for this nonce and rank says COMPLETE. Returns the session's first op number and what happened."""
    pkt = HDR.pack(MAGIC, VERSION, JOIN, job, nonce, 0, rank, group, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    info = {'nonce': nonce, 'join_sends': 0, 'joined_received': 0, 'joined_ranks': None}
    t0 = time.monotonic()
    t_end = t0 + deadline
    tmo, due = rto, 0.0
    while True:
        now = time.monotonic()
        if now >= due:
            try:
                sock.sendto(pkt, to)
            except (BlockingIOError, ConnectionRefusedError, OSError):
                pass                   # as if lost: the timer sends it again
            info['join_sends'] += 1
            due = now + tmo
            tmo = min(tmo * 2, rto_max)
        if now > t_end:
            seen = info['joined_ranks']
            if not info['joined_received']:
                raise Failure(4, f'timeout joining job {job}\'s session after {deadline} s: no JOINED from the '
                              f'switch ({info["join_sends"]} JOINs sent): is it up, is this rank\'s address '
                              'the one its config registers?', missing_ranks=None, **info)
            if seen is None:           # JOINEDs without the bitmap: only how many
                raise Failure(4, f'timeout joining job {job}\'s session after {deadline} s: '
                              f'{info["joined_count"]} of {group} ranks joined', missing_ranks=None, **info)
            missing = [r for r in range(group) if r not in seen]
            raise Failure(4, f'timeout joining job {job}\'s session after {deadline} s: {len(seen)} of {group} '
                          f'ranks joined; not joined: rank{"s" if len(missing) != 1 else ""} '
                          f'{", ".join(map(str, missing))}', missing_ranks=missing, **info)
        r, _, _ = select.select([sock], [], [], max(0.0, min(due, t_end) - time.monotonic()))
        if not r:
            continue
        for pkt_in in datagrams(sock):
            if len(pkt_in) < HDR.size:
                continue
            (magic, ver, kind, pjob, pop, chunk, sender, pgroup, terms, _count, *_desc, _flags,
             status) = HDR.unpack_from(pkt_in)
            if magic != MAGIC or ver != VERSION or pjob != job or pop != nonce:
                continue               # not about this process's JOIN (e.g. a late RESULT)
            if kind == NACK:
                name, what = NACK_REASON.get(status, (f'reason {status}', 'unknown reason code'))
                raise Failure(3, f'NACK {name} for job {job} rank {rank}\'s JOIN (nonce {nonce:#010x}): {what}',
                              **info)
            if kind != JOINED or sender != rank:
                continue
            info['joined_received'] += 1
            body = pkt_in[HDR.size:]
            if body:                   # the bitmap of the ranks joined (a JOINED may have none)
                info['joined_ranks'] = bitmap_ranks(body, group)
            info['joined_count'] = terms
            if status & JOINED_COMPLETE:
                info['join_seconds'] = round(time.monotonic() - t0, 3)
                return chunk, info


def allreduce(sock: socket.socket, *, sw_ip: str, sw_port: int, shards: int, job: int, op: int, rank: int,
              group: int, data: np.ndarray, dtype: str, out_dtype: str, policy: str, chunk: int, window: int,
              rto: float, rto_max: float, deadline: float, log=None) -> tuple[bytes, dict]:
    n = len(data)
    chunks = (n + chunk - 1) // chunk
    dcode, ocode = FORMATS[dtype][0], FORMATS[out_dtype][0]
    out_np = np.dtype(FORMATS[out_dtype][1])
    osz = out_np.itemsize
    result = bytearray(n * osz)
    payload = data.astype(FORMATS[dtype][1]).tobytes()
    isz = data.dtype.itemsize
    done = [False] * chunks
    sent_at = {}           # chunk -> (next deadline, current timeout)
    stats = {'sent': 0, 'retransmits': 0, 'results': 0, 'duplicates': 0, 'nacks': {}, 'status': 0,
             'flagged_elements': 0, 'no_free_slot_retries': 0, 'ignored': 0}
    next_chunk = 0
    remaining = chunks
    t_end = time.monotonic() + deadline

    def contrib(c: int, retransmit: bool) -> bytes:
        first = c * chunk
        count = min(chunk, n - first)
        flags = (F_RETRANSMIT if retransmit else 0) | (F_LAST_CHUNK if c == chunks - 1 else 0)
        h = HDR.pack(MAGIC, VERSION, CONTRIB, job, op, c, rank, group, 1, count, dcode, ocode,
                     POLICY[policy], ENC_DTYPE, TRANSPORT_KULISCH, EXC_IEEE, flags, 0)
        return h + payload[first * isz:(first + count) * isz]

    def send(c: int, retransmit: bool, timeout: float):
        try:   # to the chunk's shard port; a RETRANSMIT to the same one
            sock.sendto(contrib(c, retransmit), (sw_ip, shard_port(sw_port, shards, job, op, c)))
        except (BlockingIOError, ConnectionRefusedError, OSError) as e:
            if log:
                log(f'send chunk {c}: {e}')   # counts as lost: the timer re-sends it
        stats['sent'] += 1
        if retransmit:
            stats['retransmits'] += 1
        sent_at[c] = (time.monotonic() + timeout, timeout)

    while remaining:
        now = time.monotonic()
        # fill the window
        while next_chunk < chunks and len(sent_at) < window:
            send(next_chunk, False, rto)
            next_chunk += 1
        # re-send late chunks, doubling their timeout
        for c, (due, tmo) in list(sent_at.items()):
            if due <= now:
                send(c, True, min(tmo * 2, rto_max))
        if now > t_end:
            missing = [c for c in range(chunks) if not done[c]]
            raise Failure(4, f'timeout: no RESULT for {len(missing)} of {chunks} chunks after {deadline} s',
                          missing=missing[:20], **stats)
        wait = max(0.0, min([d for d, _ in sent_at.values()] + [t_end]) - time.monotonic())
        r, _, _ = select.select([sock], [], [], wait)
        if not r:
            continue
        for pkt in datagrams(sock):
            if len(pkt) < HDR.size:
                stats['ignored'] += 1
                continue
            (magic, ver, kind, pjob, pop, c, sender, pgroup, terms, count, pd, po, ppol, enc, _tr, _ex,
             flags, status) = HDR.unpack_from(pkt)
            if magic != MAGIC or ver != VERSION or pjob != job or pop != op or c >= chunks:
                stats['ignored'] += 1
                continue
            if kind == NACK:
                name, what = NACK_REASON.get(status, (f'reason {status}', 'unknown reason code'))
                stats['nacks'][name] = stats['nacks'].get(name, 0) + 1
                if status == NO_FREE_SLOT and not done[c]:
                    stats['no_free_slot_retries'] += 1
                    tmo = sent_at.get(c, (0, rto))[1]
                    sent_at[c] = (time.monotonic() + tmo, min(tmo * 2, rto_max))
                    continue
                if done[c]:
                    continue   # a late NACK for a chunk we have: nothing to do
                extra = {}
                if status == OP_ABANDONED:
                    # terms: contributions that arrived; body: a bitmap of this switch's members
                    # that had not (bit r % 8 of byte r // 8), or empty
                    bitmap = pkt[HDR.size:HDR.size + (group + 7) // 8]
                    missing = [r for r in range(group) if len(bitmap) > r // 8 and bitmap[r // 8] >> (r % 8) & 1]
                    extra = {'arrived': terms, 'missing_ranks': missing}
                    what += f' ({terms} of {group} contributions arrived; missing ranks here: {missing or "?"})'
                raise Failure(3, f'NACK {name} for job {job} op {op} chunk {c}: {what}', **extra, **stats)
            if kind != RESULT:
                stats['ignored'] += 1
                continue
            if done[c]:
                stats['duplicates'] += 1
                continue
            first = c * chunk
            want = min(chunk, n - first)
            body = pkt[HDR.size:]
            if (count != want or pgroup != group or terms != group or enc != ENC_OUT or pd != dcode
                    or po != ocode or ppol != POLICY[policy] or len(body) < count * osz
                    or (flags & F_SIDEBAND and len(body) < count * (osz + 1))):
                raise Failure(5, f'malformed RESULT for chunk {c}: count {count} (want {want}), group '
                              f'{pgroup}, terms {terms}, encoding {enc}, {len(body)} body bytes', **stats)
            result[first * osz:(first + count) * osz] = body[:count * osz]
            stats['status'] |= status
            if flags & F_SIDEBAND:
                sb = body[count * osz:count * (osz + 1)]
                stats['flagged_elements'] += sum(1 for b in sb if b)
            done[c] = True
            remaining -= 1
            stats['results'] += 1
            sent_at.pop(c, None)
    return bytes(result), stats


def read_switch(config: str) -> tuple[int, int]:
    """(switch udp_port, shard count) from the switch YAML (PROTOCOL.md, Steering)."""
    import yaml
    with open(config) as f:
        cfg = yaml.safe_load(f)
    sw_port = int((cfg.get('switch') or {}).get('udp_port', 20562))
    shards = int((cfg.get('reducers') or {}).get('shards', max(1, len(cfg.get('lcores') or []))))
    return sw_port, shards


def request(sock: socket.socket, pkt: bytes, to: tuple[str, int], *, want_kind: int, job: int | None, nonce: int,
            rto: float, rto_max: float, deadline: float, what: str):
    """Sends `pkt` to `to` on a doubling timer until a reply of `want_kind` (or a NACK) whose op is
    `nonce` (and whose job is `job`, when given) comes back; returns (header fields, body, sends)."""
    t_end = time.monotonic() + deadline
    tmo, due, sends = rto, 0.0, 0
    while True:
        now = time.monotonic()
        if now >= due:
            try:
                sock.sendto(pkt, to)
            except (BlockingIOError, ConnectionRefusedError, OSError):
                pass
            sends += 1
            due, tmo = now + tmo, min(tmo * 2, rto_max)
        if now > t_end:
            raise Failure(4, f'timeout: no answer to {what} after {deadline} s ({sends} sent)', sends=sends)
        r, _, _ = select.select([sock], [], [], max(0.0, min(due, t_end) - time.monotonic()))
        if not r:
            continue
        for pkt_in in datagrams(sock):
            if len(pkt_in) < HDR.size:
                continue
            f = HDR.unpack_from(pkt_in)
            magic, ver, kind, pjob, pop = f[:5]
            if magic != MAGIC or ver != VERSION or pop != nonce or (job is not None and pjob != job):
                continue
            if kind == NACK:
                status = f[-1]
                name, why = NACK_REASON.get(status, (f'reason {status}', 'unknown reason code'))
                raise Failure(3, f'NACK {name} for {what}: {why}', nack=name, sends=sends)
            if kind == want_kind:
                return f, pkt_in[HDR.size:], sends


def pool_alloc(sock, *, sw_ip: str, sw_port: int, shards: int, pool: int, rank: int, group: int, rto: float,
               rto_max: float, deadline: float) -> dict:
    """ALLOC (job = pool id, op = nonce, sender = this rank, group = R, the rest 0) to udp_port + pool
    mod S, until ALLOCATED: job id, chunk = pool id, terms = the switch's shard count, body = slot_quota
    and idle_timeout_ms (big-endian u32 each)."""
    nonce = new_nonce()
    # Padded with 8 zero bytes, the ALLOCATED body's size: the switch sends a source it has not
    # bound no more bytes than it received (an unpadded ALLOC is answered when it is repeated).
    pkt = HDR.pack(MAGIC, VERSION, ALLOC, pool, nonce, 0, rank, group, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) + bytes(8)
    f, body, sends = request(sock, pkt, (sw_ip, shard_port(sw_port, shards, pool, 0, 0)), want_kind=ALLOCATED,
                             job=None, nonce=nonce, rto=rto, rto_max=rto_max, deadline=deadline,
                             what=f'ALLOC of pool {pool} (group {group})')
    (_m, _v, _k, job, _op, chunk, _sender, pgroup, terms, count, *_rest) = f
    if chunk != pool or pgroup != group or terms < 1 or count != 0 or len(body) != 8:
        raise Failure(5, f'malformed ALLOCATED: chunk {chunk}, group {pgroup}, terms {terms}, {len(body)} body bytes')
    quota, idle = struct.unpack('>II', body)
    return {'job': job, 'alloc_nonce': nonce, 'shards': terms, 'slot_quota': quota, 'idle_timeout_ms': idle,
            'alloc_sends': sends}


def pool_leave(sock, *, sw_ip: str, sw_port: int, shards: int, job: int, rank: int, nonce: int, rto: float,
               rto_max: float, deadline: float) -> dict:
    """LEAVE (op = the JOIN's nonce, sender = rank, the rest 0) to udp_port + job mod S, until LEFT."""
    pkt = HDR.pack(MAGIC, VERSION, LEAVE, job, nonce, 0, rank, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    f, _body, sends = request(sock, pkt, (sw_ip, shard_port(sw_port, shards, job, 0, 0)), want_kind=LEFT, job=job,
                              nonce=nonce, rto=rto, rto_max=rto_max, deadline=deadline,
                              what=f'LEAVE of job {job} rank {rank}')
    return {'left_terms': f[8], 'leave_sends': sends}


def share_job(path: str, info: dict):
    """Writes the job id and shard count for the other ranks: a new file renamed into place."""
    import os
    tmp = f'{path}.tmp{os.getpid()}'
    with open(tmp, 'w') as f:
        json.dump({'job': info['job'], 'shards': info['shards']}, f)
    os.replace(tmp, path)


def wait_share(path: str, deadline: float) -> dict:
    import os
    t_end = time.monotonic() + deadline
    while not os.path.exists(path):
        if time.monotonic() > t_end:
            raise Failure(4, f'timeout: rank 0 shared no job id in {path} after {deadline} s')
        time.sleep(0.01)
    with open(path) as f:
        return json.load(f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--config', required=True, help='the switch YAML that registers this rank')
    p.add_argument('--rank', type=int, required=True)
    p.add_argument('--job', type=int, help='job id (default: the config\'s only job)')
    p.add_argument('--op', type=int, help='the first op number, without --join (default 0)')
    p.add_argument('--join', action='store_true',
                   help='join the job\'s session first and number the ops from its first op number')
    p.add_argument('--join-timeout', type=float, default=30,
                   help='give up joining after this many seconds (default 30)')
    p.add_argument('--ops', type=int, default=1, help='allreduces in a row, op k with seed + k (default 1)')
    p.add_argument('--elements', type=int, default=1000)
    p.add_argument('--dtype', choices=sorted(FORMATS), default='fp32')
    p.add_argument('--out-dtype', choices=sorted(FORMATS), default='fp32')
    p.add_argument('--policy', choices=sorted(POLICY), default='kulisch')
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--mtu', type=int, default=1500, help='IP MTU the chunks must fit (default 1500)')
    p.add_argument('--chunk', type=int, help='elements per chunk (default: the most the MTU fits)')
    p.add_argument('--window', type=int, default=32, help='chunks in flight (default 32)')
    p.add_argument('--timeout-ms', type=float, default=200, help='first retransmission timeout')
    p.add_argument('--max-timeout-ms', type=float, default=1600, help='cap of the doubling timeout')
    p.add_argument('--deadline', type=float, default=60, help='give up after this many seconds')
    p.add_argument('--shards', type=int,
                   help='steer as if the switch had this many shards (default: the config\'s; 1: all to udp_port)')
    g = p.add_argument_group('job pools (PROTOCOL.md, Job pools)')
    g.add_argument('--pool', type=int, help='the pool id: join a pooled job instead of a configured one')
    g.add_argument('--group', type=int, help='R, the ranks of the pooled job (with --pool)')
    g.add_argument('--ip', help='this rank\'s address (with --pool)')
    g.add_argument('--udp-port', type=int, default=20562, help='this rank\'s UDP port (with --pool)')
    g.add_argument('--switch-ip', help='the switch port\'s address (with --pool)')
    g.add_argument('--pool-share', help='file through which rank 0 shares the job id with the others')
    g.add_argument('--pool-job', type=int, help='join this pooled job id without ALLOC or a share file')
    g.add_argument('--no-leave', action='store_true', help='end without LEAVE (a job that dies)')
    g.add_argument('--linger', type=float, default=0, help='seconds to wait before LEAVE')
    g.add_argument('--alloc-only', action='store_true', help='ALLOC, share, and stop')
    a = p.parse_args(argv)
    if a.pool is not None:
        return pool_main(a, p)
    if a.elements < 1:
        p.error('--elements must be at least 1')
    if a.ops < 1:
        p.error('--ops must be at least 1')
    if a.join and a.op is not None:
        p.error('--op and --join: a session gives the op numbers')
    if a.op is not None and not 0 <= a.op < 1 << 32:
        p.error(f'--op {a.op}: 0..2^32-1')
    most = chunk_elements(a.dtype, a.out_dtype, a.mtu)
    chunk = a.chunk or most
    if not 1 <= chunk <= most:
        p.error(f'--chunk {chunk}: 1..{most} for {a.dtype} -> {a.out_dtype} at MTU {a.mtu}')
    if a.shards is not None and a.shards < 1:
        p.error('--shards must be at least 1')
    job, group, ip, port, sw_ip, sw_port, shards = read_member(a.config, a.rank, a.job)
    shards = a.shards or shards

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((ip, port))
    # RESULTs, NACKs and JOINEDs come from the switch's udp_port, whatever port a packet went to: a socket
    # connected there hears nothing else, and still names each packet's shard port (Linux allows it).
    sock.connect((sw_ip, sw_port))
    sock.setblocking(False)
    line = {'rank': a.rank, 'job': job, 'shards': shards, 'op': a.op or 0, 'ops': a.ops, 'group': group,
            'dtype': a.dtype,
            'out_dtype': a.out_dtype, 'policy': a.policy, 'elements': a.elements, 'chunk': chunk,
            'chunks': -(-a.elements // chunk), 'first_op': None}
    t0 = time.monotonic()
    rto, rto_max = a.timeout_ms / 1000, a.max_timeout_ms / 1000
    stats: dict = {}
    digests = []
    try:
        if a.join:
            first, info = join(sock, to=(sw_ip, shard_port(sw_port, shards, job, 0, 0)), job=job, rank=a.rank,
                               group=group, nonce=new_nonce(), rto=rto,
                               rto_max=max(rto, min(rto_max, 1.0)), deadline=a.join_timeout)
            line.update(info, first_op=first, op=first)
        for k in range(a.ops):
            op = (line['op'] + k) & 0xFFFFFFFF      # op numbers wrap after 2^32
            data = make_input(a.seed + k, a.rank, a.elements, a.dtype)
            try:
                out, st = allreduce(sock, sw_ip=sw_ip, sw_port=sw_port, shards=shards, job=job, op=op, rank=a.rank,
                                    group=group, data=data, dtype=a.dtype,
                                    out_dtype=a.out_dtype, policy=a.policy, chunk=chunk, window=a.window,
                                    rto=rto, rto_max=rto_max, deadline=a.deadline,
                                    log=lambda m: print(m, file=sys.stderr))
            except Failure as e:
                e.info['failed_op'] = op
                raise
            for key, v in st.items():   # summed over the ops
                if key == 'nacks':
                    for n, c in v.items():
                        stats.setdefault('nacks', {})[n] = stats.get('nacks', {}).get(n, 0) + c
                elif key == 'status':
                    stats['status'] = stats.get('status', 0) | v
                else:
                    stats[key] = stats.get(key, 0) + v
            digests.append(hashlib.sha256(out).hexdigest())
    except Failure as e:
        line.update(e.info)
        line.update(error=str(e), seconds=round(time.monotonic() - t0, 3))
        print(json.dumps(line), flush=True)
        print(f'minimal_client rank {a.rank}: {e}', file=sys.stderr)
        return e.code
    finally:
        sock.close()
    line.update(stats)
    # digest: the last op's result (the only one's, without --ops); digests: every op's, in order
    line.update(digest=digests[-1], digests=digests, last_op=(line['op'] + a.ops - 1) & 0xFFFFFFFF,
                seconds=round(time.monotonic() - t0, 3))
    print(json.dumps(line), flush=True)
    return 0


def pool_main(a, p) -> int:
    """A rank of a pooled job: ALLOC (rank 0) or the shared id, JOIN, the ops, LEAVE."""
    if a.group is None or a.ip is None or a.switch_ip is None:
        p.error('--pool needs --group, --ip and --switch-ip')
    if not 0 <= a.rank < a.group:
        p.error(f'--rank {a.rank}: 0..{a.group - 1}')
    if a.pool_job is None and a.pool_share is None:
        p.error('--pool needs --pool-share FILE (or --pool-job JOB)')
    most = chunk_elements(a.dtype, a.out_dtype, a.mtu)
    chunk = a.chunk or most
    sw_port, shards = read_switch(a.config)
    shards = a.shards or shards
    rto, rto_max = a.timeout_ms / 1000, a.max_timeout_ms / 1000
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((a.ip, a.udp_port))
    sock.connect((a.switch_ip, sw_port))
    sock.setblocking(False)
    line = {'rank': a.rank, 'pool': a.pool, 'group': a.group, 'elements': a.elements, 'chunk': chunk,
            'chunks': -(-a.elements // chunk), 'ops': a.ops, 'job': None, 'first_op': None}
    t0 = time.monotonic()
    digests, stats = [], {'results': 0, 'retransmits': 0}
    try:
        if a.pool_job is not None:
            line['job'] = a.pool_job
        elif a.rank == 0:
            info = pool_alloc(sock, sw_ip=a.switch_ip, sw_port=sw_port, shards=shards, pool=a.pool, rank=0,
                              group=a.group, rto=rto, rto_max=rto_max, deadline=a.join_timeout)
            line.update(info)
            shards = info['shards']
            share_job(a.pool_share, info)
        else:
            shared = wait_share(a.pool_share, a.join_timeout)
            line['job'], shards = shared['job'], shared['shards']
        line['shards'] = shards
        if a.alloc_only:
            print(json.dumps(line), flush=True)
            return 0
        job, nonce = line['job'], new_nonce()
        first, info = join(sock, to=(a.switch_ip, shard_port(sw_port, shards, job, 0, 0)), job=job, rank=a.rank,
                           group=a.group, nonce=nonce, rto=rto, rto_max=max(rto, min(rto_max, 1.0)),
                           deadline=a.join_timeout)
        line.update(info, first_op=first)
        for k in range(a.ops):
            op = (first + k) & 0xFFFFFFFF
            out, st = allreduce(sock, sw_ip=a.switch_ip, sw_port=sw_port, shards=shards, job=job, op=op,
                                rank=a.rank, group=a.group, data=make_input(a.seed + k, a.rank, a.elements, a.dtype),
                                dtype=a.dtype, out_dtype=a.out_dtype, policy=a.policy, chunk=chunk,
                                window=a.window, rto=rto, rto_max=rto_max, deadline=a.deadline)
            stats['results'] += st['results']
            stats['retransmits'] += st['retransmits']
            digests.append(hashlib.sha256(out).hexdigest())
        if a.linger:
            time.sleep(a.linger)
        if not a.no_leave:
            line.update(pool_leave(sock, sw_ip=a.switch_ip, sw_port=sw_port, shards=shards, job=job, rank=a.rank,
                                   nonce=nonce, rto=rto, rto_max=rto_max, deadline=a.deadline))
    except Failure as e:
        line.update(e.info, error=str(e), seconds=round(time.monotonic() - t0, 3))
        print(json.dumps(line), flush=True)
        print(f'minimal_client rank {a.rank}: {e}', file=sys.stderr)
        return e.code
    finally:
        sock.close()
    line.update(stats, digests=digests, digest=digests[-1] if digests else None,
                last_op=(line['first_op'] + a.ops - 1) & 0xFFFFFFFF, seconds=round(time.monotonic() - t0, 3))
    print(json.dumps(line), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
