#!/usr/bin/env python3
"""What this machine's disk answers a random 4 KiB direct read in, by kind of file.

usage: scripts/device-probe.py DB_DIR [READS=2000] [PASSES=3] [KINDS=lvl,vlog]

Picks READS random 4 KiB-aligned offsets in the database's files of each kind (by name
ending: hybridkv's level files *.lvl and large-log segments *.vlog by default; "sst" for
RocksDB's tables), then reads each set PASSES times, one O_DIRECT read at a
time (queue depth 1, as a single client's gets), and prints the mean wall time per read of
every pass. A second pass over the same offsets that runs much faster than the first says
that the disk is served through a cache beneath this machine (a virtual disk whose host
keeps recently read and written blocks): a benchmark's read times then depend on what ran
before it, not only on the engine. Reads nothing but the files named; writes nothing.
"""
import glob
import mmap
import os
import random
import sys
import time

BLOCK = 4096


def offsets(files, n, rng):
    sized = [(f, os.path.getsize(f)) for f in files]
    sized = [(f, s) for f, s in sized if s >= BLOCK]
    total = sum(s for _, s in sized)
    picks = []
    for _ in range(n if sized else 0):
        # A file chosen by its size, so that every byte is equally likely.
        at = rng.randrange(total)
        for f, s in sized:
            if at < s:
                picks.append((f, rng.randrange(s - BLOCK + 1) // BLOCK * BLOCK))
                break
            at -= s
    return picks


def one_pass(picks, fds, buf):
    t0 = time.perf_counter()
    for f, off in picks:
        fd = fds.get(f)
        if fd is None:
            fd = fds[f] = os.open(f, os.O_RDONLY | os.O_DIRECT)
        os.preadv(fd, [buf], off)
    return (time.perf_counter() - t0) / max(1, len(picks)) * 1e6


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    db = sys.argv[1]
    reads = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    kinds = (sys.argv[4] if len(sys.argv) > 4 else "lvl,vlog").split(",")
    rng = random.Random(1)
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT wants
    fds = {}
    for kind in kinds:
        files = glob.glob(os.path.join(db, "**", f"*.{kind}"), recursive=True)
        picks = offsets(files, reads, rng)
        if not picks:
            print(f"{kind}: no files")
            continue
        times = [one_pass(picks, fds, buf) for _ in range(passes)]
        shown = ", ".join(f"{t:.1f}" for t in times)
        print(f"{kind}: {len(files)} files, {len(picks)} reads, us per read by pass: {shown}")
    for fd in fds.values():
        os.close(fd)


if __name__ == "__main__":
    main()
