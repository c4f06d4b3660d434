#!/usr/bin/env python3
# Splits each run phase of WORKLOAD (default c, Run C) in a results file into device reads
# and the rest, for hybridkv and the RocksDB run that follows it, and says what ratio the
# reads alone allow:
#   python3 scripts/get-time-split.py docs/bench/bloom-40m-md.jsonl [FLOOR_READS] [WORKLOAD]
# An operation's time (1 / throughput) = device reads per operation x device time per read
# + the rest (the processor's work, the harness's, submitting and finishing each read, and
# whatever background work delays it). FLOOR_READS, per operation (default 0.345: Run C of
# MD at 40M pairs with filters on, PERFORMANCE.md's thirty-eighth round; half of it for Run
# A, whose other half are updates), is the fewest reads a fresh process can make at that
# cache share; "at the floor" keeps hybridkv's measured rest, "floor, no rest" drops it.
import datetime, json, sys

path = sys.argv[1]
floor = float(sys.argv[2]) if len(sys.argv) > 2 else 0.345
workload = sys.argv[3] if len(sys.argv) > 3 else 'c'
rows = [json.loads(l) for l in open(path) if l.strip()]
rows = [r for r in rows if r['phase'] == 'run' and r['workload'] == workload
        and r.get('device_reads') and r.get('device_read_ms')]


def split(r):
    per_get = 1000.0 / r['throughput_kops']
    reads = r['device_reads'] / r['operations']
    us = r['device_read_ms'] * 1000.0 / r['device_reads']
    return per_get, reads, us, per_get - reads * us


print('| run ended (UTC) | ratio | hybridkv: us per op = reads x us + rest | RocksDB | '
      'RocksDB us per read / ours | at the floor | floor, no rest |')
print('|---|---:|---|---|---:|---:|---:|')
ours = None
for r in rows:
    if r['engine'] == 'hybridkv':
        ours = r
        continue
    if r['engine'] != 'rocksdb' or ours is None:
        continue
    th, rh, dh, bh = split(ours)
    tr, rr, dr, br = split(r)
    when = datetime.datetime.fromtimestamp(ours['unix_time'], datetime.timezone.utc)
    print(f"| {when:%m-%d %H:%M} | {tr / th:.2f}x | {th:.1f} = {rh:.3f} x {dh:.1f} + {bh:.1f} "
          f"| {tr:.1f} = {rr:.3f} x {dr:.1f} + {br:.1f} | {dr / dh:.2f} "
          f"| {tr / (floor * dh + bh):.2f}x | {tr / (floor * dh):.2f}x |")
    ours = None
