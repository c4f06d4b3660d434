#!/usr/bin/env python3
# The merge benchmark tables of docs/BENCHMARKS.md from scripts/bench-merge.sh results:
#   python3 scripts/merge-table.py docs/bench/merge.jsonl [since-unix-time]
import json, sys
path = sys.argv[1]
since = int(sys.argv[2]) if len(sys.argv) > 2 else 0
rows = [json.loads(l) for l in open(path) if l.strip()]
rows = [r for r in rows if r.get('unix_time', 0) >= since and r['phase'] == 'run']
kinds = {'f-merge': 'F: merge', 'u-merge': 'update-heavy: merge', 'f-getput': 'F: get-then-put'}
for mix in ['SD', 'L']:
    group = [r for r in rows if r['mix'] == mix]
    if not group: continue
    base = {}
    for r in group:
        k = r['label'].rsplit('-', 1)[0]
        if r['engine'] == 'rocksdb' and k in ('f-merge', 'u-merge'):
            base[k] = r['throughput_kops']
    print(f"**{mix}** ({group[0]['records_after']:,} records, {group[0]['operations']:,} operations, cache {group[0]['cache_bytes']>>20} MiB, memtable {group[0]['memtable_bytes']>>10} KiB)\n")
    print("| workload | engine | Kops/s | vs RocksDB merge | read p99 (us) | rmw p99 (us) | I/O amp | CPU us/op | space amp |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for k in ['f-merge', 'u-merge', 'f-getput']:
        for eng in ['hybridkv', 'hybridkv-kdsep', 'rocksdb']:
            for r in group:
                if r['engine'] == eng and r['label'].rsplit('-', 1)[0] == k:
                    ref = base.get(k if k != 'f-getput' else 'f-merge')
                    lat = r['latency_us']
                    rp = lat.get('read', {}).get('p99', float('nan'))
                    wp = lat.get('read_modify_write', {}).get('p99', float('nan'))
                    ratio = f"{r['throughput_kops']/ref:.2f}x" if ref else '-'
                    print(f"| {kinds[k]} | {eng} | {r['throughput_kops']:.1f} | {ratio} | {rp:.0f} | {wp:.0f} | {r['io_amplification']:.2f} | {r['cpu_us_per_op']:.1f} | {r['space_amplification']:.2f} |")
    print()
