#!/usr/bin/env python3
"""How many of a YCSB E phase's large values each scan touches for the first time.

A model of the phase as `hybridkv bench` runs it at the paper's depth: RECORDS keys placed
at random in key order (the benchmark's keys are hashed), scan start keys drawn from the
zipfian distribution (theta 0.99) over insertion ranks, lengths uniform in 1..=100, a
fifth of the pairs large (the SD and MD mixes). A value touched for the first time in a
phase that starts with a cold cache is a device read no cache can save: the floor of
large-value reads per scan (docs/PERFORMANCE.md, thirty-third round).

usage: scripts/model-scan-first-touches.py [RECORDS=40000000] [SCANS=190000] [LARGE=0.2]
Needs numpy.
"""
import sys

import numpy as np

records = int(sys.argv[1]) if len(sys.argv) > 1 else 40_000_000
scans = int(sys.argv[2]) if len(sys.argv) > 2 else 190_000
large_share = float(sys.argv[3]) if len(sys.argv) > 3 else 0.2
rng = np.random.default_rng(2)
mass = np.arange(1, records + 1, dtype=np.float64) ** -0.99
cdf = np.cumsum(mass / mass.sum())
ranks = np.minimum(np.searchsorted(cdf, rng.random(scans)), records - 1)
starts = rng.permutation(records)[ranks]
lengths = rng.integers(1, 101, scans)
large = rng.random(records) < large_share
touched = np.zeros(records, dtype=bool)
total = first = 0
for start, length in zip(starts, lengths):
    idx = np.nonzero(large[start:start + length])[0] + start
    total += len(idx)
    first += int((~touched[idx]).sum())
    touched[idx] = True
print(f"large values per scan {total / scans:.2f}; touched for the first time "
      f"{first / scans:.2f} per scan ({100 * first / max(total, 1):.0f}%)")
