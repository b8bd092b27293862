#!/usr/bin/env python3
"""Checks a switch's replies from a pcap replay against prism-gen's golden results.

usage: replay_check.py PRISM_GEN EXPECTED_DIR OUT.pcap [OUT.pcap...] [--baseline FILE] [--save FILE]

Reads the RESULTs in the output captures (decoded with `prism-gen dump`),
checks that every member got every chunk of every op exactly once, compares
the payloads with EXPECTED_DIR/op<N>.out, and prints one JSON line:
  {"results": n, "missing": n, "duplicates": n, "inconsistent": copies,
   "golden_mismatch": elements (per op and chunk),
   "digest": sha256 of the results, "differ_from_baseline": elements}
--save writes the results (one payload per (op, chunk)) for a later --baseline.
"""
import hashlib
import json
import subprocess
import sys
from pathlib import Path


def main() -> int:
    args = sys.argv[1:]
    baseline = save = None
    if "--baseline" in args:
        i = args.index("--baseline")
        baseline = args[i + 1]
        del args[i:i + 2]
    if "--save" in args:
        i = args.index("--save")
        save = args[i + 1]
        del args[i:i + 2]
    gen, exp_dir, outs = args[0], Path(args[1]), args[2:]
    man = json.loads((exp_dir / "manifest.json").read_text())
    esz = {"fp32": 4, "fp16": 2, "bf16": 2, "int32": 4}.get(man["out_dtype"], 1)
    chunk, group = man["chunk"], man["group"]
    seen = {}
    dup = 0
    for pcap in outs:
        out = subprocess.run([gen, "dump", pcap], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            r = json.loads(line)
            if r["refusal"] != "ok" or r["kind"] != 3:
                continue
            key = (r["op"], r["chunk"], r["dst_ip"])
            if key in seen:
                dup += 1
            seen[key] = bytes.fromhex(r["payload"])
    results = {}
    inconsistent = 0
    for (op, ch, _), payload in sorted(seen.items()):
        if (op, ch) in results and results[(op, ch)] != payload:
            inconsistent += 1  # two members got different results for one chunk
        results[(op, ch)] = payload
    mismatch = 0
    for (op, ch), payload in results.items():
        golden = (exp_dir / f"op{op}.out").read_bytes()[ch * chunk * esz:ch * chunk * esz + len(payload)]
        mismatch += sum(payload[i:i + esz] != golden[i:i + esz] for i in range(0, len(payload), esz))
    want = len(man["ops"]) * man["chunks"] * group
    digest = hashlib.sha256(b"".join(results[k] for k in sorted(results))).hexdigest()[:16]
    differ = None
    if baseline:
        base = json.loads(Path(baseline).read_text())
        differ = 0
        for k, v in results.items():
            b = bytes.fromhex(base.get(f"{k[0]}:{k[1]}", ""))
            differ += sum(v[i:i + esz] != b[i:i + esz] for i in range(0, len(v), esz))
    if save:
        Path(save).write_text(json.dumps({f"{k[0]}:{k[1]}": v.hex() for k, v in results.items()}))
    print(json.dumps({"results": len(seen), "missing": want - len(seen), "duplicates": dup,
                      "inconsistent": inconsistent,
                      "golden_mismatch": mismatch, "digest": digest, "differ_from_baseline": differ}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
