#!/usr/bin/env python3
"""Writes the bundled demo inputs: 8 ranks x 1024 fp32 gradient-like values.

Each element has a magnitude drawn once (spread over 2^-20..2^10) and every
rank's value is that magnitude times N(0,1), with an occasional large term of
opposite sign: sums whose FP32 rounding depends on the order of additions.
usage: make_demo_data.py OUTDIR
"""
import sys
from pathlib import Path

import numpy as np

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(20261201)
n, ranks = 1024, 8
scale = np.exp2(rng.uniform(-20, 10, n))
big = rng.random((ranks, n)) < 0.05
for r in range(ranks):
    x = scale * rng.normal(0.0, 1.0, n)
    x = np.where(big[r], -np.sign(x) * scale * 2.0**12, x)
    x.astype("<f4").tofile(out / f"rank{r}.f32")
