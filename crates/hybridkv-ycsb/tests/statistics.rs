//! Statistical and behavioural checks of the generated workloads, on large
//! samples with fixed seeds.

use std::collections::{BTreeMap, HashSet};
use std::thread;

use hybridkv_ycsb::{
    ycsb_hash, zeta, zipfian_key_space, InsertOrder, Key, Operation, OperationKind,
    RequestDistribution, ScrambledZipfianGenerator, SizeClass, ValueMix, Workload, WorkloadError,
    WorkloadSpec, ZipfianGenerator, KEY_LEN,
};
use rand::rngs::Xoshiro256PlusPlus;
use rand::SeedableRng;

fn rng(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed)
}

/// Counts per item, sorted by descending count: (item, count).
fn ranked(counts: &[u32]) -> Vec<(usize, u32)> {
    let mut v: Vec<(usize, u32)> = counts.iter().copied().enumerate().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

fn share(counts: &[(usize, u32)], top: usize, total: u32) -> f64 {
    counts[..top].iter().map(|&(_, c)| c as f64).sum::<f64>() / total as f64
}

/// Least-squares slope of ln(count) against ln(rank) over ranks 1..=n.
fn log_log_slope(counts_by_rank: &[u32]) -> f64 {
    let pts: Vec<(f64, f64)> = counts_by_rank
        .iter()
        .enumerate()
        .map(|(i, &c)| (((i + 1) as f64).ln(), (c as f64).ln()))
        .collect();
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    sxy / sxx
}

// ---------------------------------------------------------------- keys

#[test]
fn keys_are_24_bytes_and_distinct_for_four_million_records() {
    const N: u64 = 4_000_000;
    let mut hashes = Vec::with_capacity(N as usize);
    for r in 0..N {
        let k = Key::hashed(r);
        let bytes = k.as_bytes();
        assert_eq!(bytes.len(), KEY_LEN);
        assert_eq!(&bytes[..4], b"user");
        // The 20 digits read back as the YCSB hash, so key <-> hash is 1:1.
        let digits = &k.as_str()[4..];
        assert!(digits.bytes().all(|b| b.is_ascii_digit()));
        let h: u64 = digits.parse().unwrap();
        assert_eq!(h, ycsb_hash(r));
        hashes.push(h);
    }
    hashes.sort_unstable();
    hashes.dedup();
    assert_eq!(hashes.len() as u64, N, "two records share a key");

    // Ordered keys: distinct and sorted like record numbers.
    let ordered: Vec<Key> = (0..100_000u64).map(Key::ordered).collect();
    assert!(ordered
        .windows(2)
        .all(|w| w[0].as_bytes() < w[1].as_bytes()));
    assert!(ordered.iter().all(|k| k.as_bytes().len() == 24));
}

// ------------------------------------------------------------- zipfian

#[test]
fn zipfian_head_and_slope_match_zipf_099() {
    const N: u64 = 10_000;
    const DRAWS: u32 = 1_000_000;
    let mut g = ZipfianGenerator::new(N);
    let mut r = rng(11);
    let mut counts = vec![0u32; N as usize];
    for _ in 0..DRAWS {
        counts[g.next(&mut r) as usize] += 1;
    }
    let z = zeta(N, 0.99);
    let p = |rank: u64| 1.0 / (rank as f64).powf(0.99) / z;
    let freq = |item: usize| counts[item] as f64 / DRAWS as f64;

    // The two most popular items are exact in Gray's method.
    assert!(
        (freq(0) / p(1) - 1.0).abs() < 0.02,
        "item 0: {} vs {}",
        freq(0),
        p(1)
    );
    assert!(
        (freq(1) / p(2) - 1.0).abs() < 0.03,
        "item 1: {} vs {}",
        freq(1),
        p(2)
    );
    // Item i is the (i+1)-th most popular: popularity decreases with the item.
    assert!(counts[0] > counts[1] && counts[1] > counts[2] && counts[2] > counts[10]);

    // Top-k shares. Gray et al.'s method is exact for the two hottest items
    // and a continuous approximation beyond, whose closed form is
    // P(item < k) = 1 - (1 - (k/n)^(1-theta)) / eta. The sample must match that
    // closely, and the true zipf(0.99) share (zeta(k)/zeta(n)) within the
    // approximation's known few-percent excess.
    let alpha_inv = 1.0 - 0.99;
    let eta = (1.0 - (2.0 / N as f64).powf(alpha_inv)) / (1.0 - zeta(2, 0.99) / z);
    for k in [10u64, 100, 1_000] {
        let gray = 1.0 - (1.0 - (k as f64 / N as f64).powf(alpha_inv)) / eta;
        let exact = zeta(k, 0.99) / z;
        let got = counts[..k as usize].iter().map(|&c| c as f64).sum::<f64>() / DRAWS as f64;
        assert!(
            (got / gray - 1.0).abs() < 0.01,
            "top-{k} share {got} vs Gray {gray}"
        );
        assert!(
            (got / exact - 1.0).abs() < 0.07,
            "top-{k} share {got} vs zipf {exact}"
        );
    }

    // Rank-frequency slope over the top 100 items on a log-log fit.
    let slope = log_log_slope(&counts[..100]);
    eprintln!("zipfian log-log slope over the top 100 items: {slope}");
    assert!((slope + 0.99).abs() < 0.08, "slope {slope}");

    // A uniform sample would fail these: the top item would get 1e-4.
    assert!(freq(0) > 0.08);
}

#[test]
fn scrambled_zipfian_is_skewed_but_spread_over_the_keyspace() {
    const N: u64 = 100_000;
    const DRAWS: u32 = 1_000_000;
    let mut g = ScrambledZipfianGenerator::new(N);
    let mut r = rng(12);
    let mut counts = vec![0u32; N as usize];
    for _ in 0..DRAWS {
        let v = g.next(&mut r);
        assert!(v < N);
        counts[v as usize] += 1;
    }
    let ranked = ranked(&counts);

    // Skew: the hottest item gets about 1/ZETAN (3.78%), the hottest 1% of
    // items over a quarter of the requests (a uniform draw would give 0.001%
    // and 1%).
    let top1 = share(&ranked, 1, DRAWS);
    assert!(
        (top1 - 1.0 / 26.469).abs() < 0.003,
        "hottest item share {top1}"
    );
    assert_eq!(ranked[0].0 as u64, ycsb_hash(0) % N);
    let top_percent = share(&ranked, (N / 100) as usize, DRAWS);
    assert!(top_percent > 0.25, "top 1% share {top_percent}");

    // Spread: the 100 hottest items are scattered, not clustered at 0.
    let hot: Vec<u64> = ranked[..100].iter().map(|&(i, _)| i as u64).collect();
    let mut deciles = [0u32; 10];
    for &h in &hot {
        deciles[(h * 10 / N) as usize] += 1;
    }
    assert!(
        deciles.iter().all(|&d| (2..=25).contains(&d)),
        "deciles {deciles:?}"
    );
    let low = hot.iter().filter(|&&h| h < N / 100).count();
    assert!(
        low <= 5,
        "{low} of the 100 hottest items are in the lowest 1%"
    );
    let mean = hot.iter().sum::<u64>() as f64 / hot.len() as f64;
    assert!((mean / N as f64 - 0.5).abs() < 0.15, "mean hot item {mean}");

    // Contrast: the plain zipfian's hottest 100 items are exactly 0..100.
    let mut plain = ZipfianGenerator::new(N);
    let mut pc = vec![0u32; N as usize];
    for _ in 0..DRAWS {
        pc[plain.next(&mut r) as usize] += 1;
    }
    assert!(ranked_items(&pc, 20).iter().all(|&i| i < 100));
}

fn ranked_items(counts: &[u32], top: usize) -> Vec<usize> {
    ranked(counts)[..top].iter().map(|&(i, _)| i).collect()
}

// -------------------------------------------------------------- latest

#[test]
fn latest_favours_recently_inserted_records() {
    const RECORDS: u64 = 100_000;
    let w = Workload::core('d')
        .unwrap()
        .with_record_count(RECORDS)
        .with_operation_count(200_000)
        .with_seed(13);
    let mut total = RECORDS;
    let (mut reads, mut last_percent, mut last_five, mut new_records) = (0u64, 0u64, 0u64, 0u64);
    let mut inserts = 0u64;
    for op in w.run_generator(0).unwrap() {
        match op {
            Operation::Insert { key, .. } => {
                assert_eq!(key.record(), total, "inserts take consecutive numbers");
                total += 1;
                inserts += 1;
            }
            Operation::Read { key } => {
                let rec = key.record();
                assert!(
                    rec < total && rec >= 1,
                    "read of {rec} with {total} records"
                );
                let age = total - 1 - rec;
                reads += 1;
                last_percent += u64::from(age < total / 100);
                last_five += u64::from(age < total / 20);
                new_records += u64::from(rec >= RECORDS);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let frac = |x: u64| x as f64 / reads as f64;
    // zipf(0.99) over ~100k items puts ~63% of the mass on the newest 1% and
    // ~77% on the newest 5% (zeta(k) / zeta(n)).
    let n = RECORDS + inserts / 2;
    let expect_1 = zeta(n / 100, 0.99) / zeta(n, 0.99);
    let expect_5 = zeta(n / 20, 0.99) / zeta(n, 0.99);
    assert!(
        (frac(last_percent) - expect_1).abs() < 0.03,
        "{} vs {expect_1}",
        frac(last_percent)
    );
    assert!(
        (frac(last_five) - expect_5).abs() < 0.03,
        "{} vs {expect_5}",
        frac(last_five)
    );
    assert!(frac(last_five) > 0.7);
    // Records inserted during the run (5% of the keyspace at most) get a
    // large share of the reads.
    assert!(
        frac(new_records) > 0.5,
        "new-record share {}",
        frac(new_records)
    );
    assert_eq!(w.record_total(), total);
}

// --------------------------------------------------------------- scans

#[test]
fn workload_e_scan_lengths_uniform_1_to_100_and_start_keys_exist() {
    const RECORDS: u64 = 10_000;
    let w = Workload::core('e')
        .unwrap()
        .with_record_count(RECORDS)
        .with_operation_count(200_000)
        .with_seed(14);
    let mut hist = [0u64; 101];
    let (mut scans, mut sum, mut total) = (0u64, 0u64, RECORDS);
    let mut new_starts = 0u64;
    for op in w.run_generator(0).unwrap() {
        match op {
            Operation::Scan { start_key, len } => {
                assert!((1..=100).contains(&len), "len {len}");
                assert!(
                    start_key.record() < total,
                    "scan starts at a missing record"
                );
                new_starts += u64::from(start_key.record() >= RECORDS);
                hist[len] += 1;
                scans += 1;
                sum += len as u64;
            }
            Operation::Insert { .. } => total += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    let mean = sum as f64 / scans as f64;
    assert!((mean - 50.5).abs() < 0.3, "mean {mean}");
    assert!(hist[1] > 0 && hist[100] > 0 && hist[0] == 0);
    let expected = scans as f64 / 100.0;
    let chi2: f64 = hist[1..]
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    // 99 degrees of freedom: the 0.1% critical value is about 148.
    assert!(chi2 < 148.0, "chi-square {chi2}");
    assert!(hist[1..]
        .iter()
        .all(|&c| (c as f64 / expected - 1.0).abs() < 0.1));
    // Keys inserted during the run become reachable as scan starts.
    assert!(new_starts > 0);
    // The zipfian key space was sized like YCSB's: records + 2 * expected inserts.
    assert_eq!(zipfian_key_space(w.spec()), RECORDS + 20_000);
}

// ---------------------------------------------------------- op mixes

fn kind_fractions(
    ops: impl Iterator<Item = Operation>,
    expected_ops: u64,
) -> BTreeMap<OperationKind, f64> {
    let mut counts = BTreeMap::new();
    let mut n = 0u64;
    for op in ops {
        *counts.entry(op.kind()).or_insert(0u64) += 1;
        n += 1;
    }
    assert_eq!(n, expected_ops);
    counts
        .into_iter()
        .map(|(k, c)| (k, c as f64 / n as f64))
        .collect()
}

#[test]
fn core_workload_operation_proportions() {
    use OperationKind::*;
    let expected: [(char, &[(OperationKind, f64)]); 6] = [
        ('a', &[(Read, 0.5), (Update, 0.5)]),
        ('b', &[(Read, 0.95), (Update, 0.05)]),
        ('c', &[(Read, 1.0)]),
        ('d', &[(Read, 0.95), (Insert, 0.05)]),
        ('e', &[(Scan, 0.95), (Insert, 0.05)]),
        ('f', &[(Read, 0.5), (ReadModifyWrite, 0.5)]),
    ];
    for (i, (letter, want)) in expected.into_iter().enumerate() {
        let w = Workload::core(letter)
            .unwrap()
            .with_record_count(10_000)
            .with_operation_count(200_000)
            .with_seed(100 + i as u64);
        let got = kind_fractions(w.run_generator(0).unwrap(), w.spec().operation_count);
        assert_eq!(got.len(), want.len(), "workload {letter}: {got:?}");
        for &(kind, p) in want {
            let g = got.get(&kind).copied().unwrap_or(0.0);
            assert!(
                (g - p).abs() < 0.005,
                "workload {letter} {kind:?}: {g} vs {p}"
            );
        }
    }
}

#[test]
fn proportions_not_summing_to_one_are_normalised() {
    let text = "recordcount=1000\noperationcount=90000\nreadproportion=0.5\nupdateproportion=0.5\nscanproportion=0.5\n";
    let (w, unknown) = Workload::from_properties(text).unwrap();
    assert!(unknown.is_empty());
    let got = kind_fractions(w.run_generator(0).unwrap(), w.spec().operation_count);
    for kind in [
        OperationKind::Read,
        OperationKind::Update,
        OperationKind::Scan,
    ] {
        assert!(
            (got[&kind] - 1.0 / 3.0).abs() < 0.01,
            "{kind:?}: {}",
            got[&kind]
        );
    }
    // Default distribution is uniform and default scan range 1..=1000.
    let mut seen_long = false;
    let mut again = w.clone();
    again.reset();
    for op in again.run_generator(0).unwrap() {
        if let Operation::Scan { len, .. } = op {
            assert!((1..=1000).contains(&len));
            seen_long |= len > 100;
        }
    }
    assert!(seen_long);
}

#[test]
fn uniform_requests_cover_the_keyspace_evenly() {
    let text = "recordcount=1000\noperationcount=200000\nreadproportion=1\nupdateproportion=0\n";
    let (w, _) = Workload::from_properties(text).unwrap();
    let mut counts = vec![0u32; 1000];
    for op in w.run_generator(0).unwrap() {
        counts[op.key().record() as usize] += 1;
    }
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    // Expected 200 per record, sd ~14.
    assert!(*min > 130 && *max < 270, "min {min} max {max}");
}

// --------------------------------------------------------- value mixes

#[test]
fn value_mix_proportions() {
    for (i, mix) in ValueMix::ALL.into_iter().enumerate() {
        let mut r = rng(200 + i as u64);
        let mut counts = [0u32; 3];
        const N: u32 = 300_000;
        for _ in 0..N {
            counts[mix.draw(&mut r) as usize] += 1;
        }
        for (c, pct) in counts.iter().zip(mix.percentages()) {
            let got = *c as f64 / N as f64;
            assert!(
                (got - pct as f64 / 100.0).abs() < 0.005,
                "{mix}: {counts:?}"
            );
        }
    }
}

#[test]
fn inserts_and_updates_draw_size_classes_from_the_mix() {
    // Load phase with SD.
    let w = Workload::core('a')
        .unwrap()
        .with_record_count(100_000)
        .with_operation_count(100_000)
        .with_value_mix(ValueMix::SD)
        .with_seed(15);
    let mut load = [0u32; 3];
    for op in w.load_generator(0) {
        let v = op.value().unwrap();
        assert_eq!(v.len(), v.class.value_len());
        load[v.class as usize] += 1;
    }
    let expect = [0.6, 0.2, 0.2];
    for (c, e) in load.iter().zip(expect) {
        assert!((*c as f64 / 100_000.0 - e).abs() < 0.01, "load {load:?}");
    }
    // Updates in workload A, MD: classes follow the mix, so a key's class
    // changes between writes.
    let w = w.with_value_mix(ValueMix::MD);
    let mut upd = [0u32; 3];
    let mut n = 0u32;
    for op in w.run_generator(0).unwrap() {
        if let Operation::Update { value, .. } = op {
            upd[value.class as usize] += 1;
            n += 1;
        }
    }
    for (c, e) in upd.iter().zip([0.2, 0.6, 0.2]) {
        assert!((*c as f64 / n as f64 - e).abs() < 0.01, "updates {upd:?}");
    }
    // Read-modify-writes carry values too (LD).
    let w = Workload::core('f')
        .unwrap()
        .with_record_count(1_000)
        .with_operation_count(50_000)
        .with_value_mix(ValueMix::LD);
    let large = w
        .run_generator(0)
        .unwrap()
        .filter_map(|op| match op {
            Operation::ReadModifyWrite { value, .. } => Some(value.class == SizeClass::Large),
            _ => None,
        })
        .collect::<Vec<_>>();
    let frac = large.iter().filter(|&&l| l).count() as f64 / large.len() as f64;
    assert!((frac - 0.6).abs() < 0.02, "LD large share {frac}");
}

// ------------------------------------------- determinism and threads

#[test]
fn same_seed_same_stream_and_threads_differ() {
    let make = |seed| {
        Workload::core('a')
            .unwrap()
            .with_record_count(10_000)
            .with_operation_count(5_000)
            .with_seed(seed)
    };
    let a: Vec<Operation> = make(1).run_generator(0).unwrap().collect();
    let b: Vec<Operation> = make(1).run_generator(0).unwrap().collect();
    let c: Vec<Operation> = make(2).run_generator(0).unwrap().collect();
    let d: Vec<Operation> = make(1).run_generator(1).unwrap().collect();
    assert_eq!(a.len(), 5_000);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_ne!(a, d);
    let la: Vec<Operation> = make(1).load_generator(0).collect();
    let lb: Vec<Operation> = make(1).load_generator(0).collect();
    assert_eq!(la, lb);
    // Value bytes follow the op's seed.
    let v = a.iter().find_map(|op| op.value()).unwrap();
    assert_eq!(v.to_vec(), v.to_vec());
}

/// Records of a workload's first `ops` operations on `seed`, over a billion records drawn
/// uniformly (two independent streams share about `ops * ops / 1e9` of them: nothing).
#[allow(clippy::unwrap_used)] // a test helper fails by panicking
fn records_of(letter: char, seed: u64, ops: u64) -> Vec<u64> {
    let mut spec = WorkloadSpec::core(letter).unwrap();
    spec.record_count = 1_000_000_000;
    spec.operation_count = ops;
    spec.request_distribution = RequestDistribution::Uniform;
    Workload::new(spec)
        .unwrap()
        .with_seed(seed)
        .run_generator(0)
        .unwrap()
        .map(|op| op.key().record())
        .collect()
}

#[test]
fn workloads_run_one_after_another_on_one_seed_draw_independent_records() {
    let a = records_of('a', 9, 20_000);
    let shared_with_a = |other: &[u64]| {
        let a: HashSet<u64> = a.iter().copied().collect();
        other.iter().filter(|r| a.contains(r)).count()
    };
    // Run A, then Run B, C and E on one seed, as the benchmark runs them: each draws its own
    // records. (When they read one stream in step, Run B repeated 13,650 of Run A's 20,000
    // records and Run C 13,278.)
    for letter in ['b', 'c', 'e'] {
        let other = records_of(letter, 9, 20_000);
        assert_eq!(other.len(), 20_000);
        let shared = shared_with_a(&other);
        assert!(
            shared < 20,
            "Run {letter} repeats {shared} of Run A's records"
        );
    }
    // The same workload on the same seed is the same stream.
    assert_eq!(records_of('c', 9, 20_000), records_of('c', 9, 20_000));
}

#[test]
fn threads_share_the_insert_counter_and_operation_budget() {
    const RECORDS: u64 = 1_000;
    const OPS: u64 = 40_000;
    let w = Workload::core('d')
        .unwrap()
        .with_record_count(RECORDS)
        .with_operation_count(OPS)
        .with_seed(16);
    let handles: Vec<_> = (0..2)
        .map(|t| {
            let mut generator = w.run_generator(t).unwrap();
            thread::spawn(move || {
                let mut inserted = Vec::new();
                let mut n = 0u64;
                for op in generator.by_ref() {
                    n += 1;
                    if let Operation::Insert { key, .. } = op {
                        inserted.push(key.record());
                    }
                }
                (n, inserted)
            })
        })
        .collect();
    // How the budget splits between the threads depends on the scheduler
    // (on a loaded machine one thread may drain it before the other starts),
    // so only the totals are checked here; the deterministic interleaving
    // below shows that both generators draw from the one budget.
    let mut total = 0;
    let mut all = Vec::new();
    for h in handles {
        let (n, ins) = h.join().unwrap();
        total += n;
        all.extend(ins);
    }
    assert_eq!(total, OPS);
    all.sort_unstable();
    let expected: Vec<u64> = (RECORDS..RECORDS + all.len() as u64).collect();
    assert_eq!(
        all, expected,
        "inserted record numbers are not consecutive/unique"
    );
    assert_eq!(
        w.insert_counter()
            .load(std::sync::atomic::Ordering::Relaxed),
        RECORDS + all.len() as u64
    );
}

#[test]
fn interleaved_generators_draw_from_one_budget() {
    const RECORDS: u64 = 1_000;
    const OPS: u64 = 10_000;
    let w = Workload::core('d')
        .unwrap()
        .with_record_count(RECORDS)
        .with_operation_count(OPS)
        .with_seed(16);
    let mut a = w.run_generator(0).unwrap();
    let mut b = w.run_generator(1).unwrap();
    let (mut na, mut nb) = (0u64, 0u64);
    let mut inserted = Vec::new();
    // Alternate one operation from each until both are exhausted.
    loop {
        let oa = a.next();
        let ob = b.next();
        if oa.is_none() && ob.is_none() {
            break;
        }
        for (op, n) in [(oa, &mut na), (ob, &mut nb)] {
            if let Some(op) = op {
                *n += 1;
                if let Operation::Insert { key, .. } = op {
                    inserted.push(key.record());
                }
            }
        }
    }
    assert_eq!(
        na + nb,
        OPS,
        "the two generators together exceed the budget"
    );
    assert_eq!(
        (na, nb),
        (OPS / 2, OPS / 2),
        "alternating pulls split evenly"
    );
    assert!(!inserted.is_empty(), "workload D inserts");
    inserted.sort_unstable();
    let expected: Vec<u64> = (RECORDS..RECORDS + inserted.len() as u64).collect();
    assert_eq!(
        inserted, expected,
        "insert numbers shared across generators"
    );
}

#[test]
fn load_phase_inserts_every_record_once_across_threads() {
    const RECORDS: u64 = 50_000;
    let w = Workload::core('c')
        .unwrap()
        .with_record_count(RECORDS)
        .with_insert_order(InsertOrder::Ordered);
    let handles: Vec<_> = (0..2)
        .map(|t| {
            let g = w.load_generator(t);
            thread::spawn(move || g.map(|op| op.key().record()).collect::<Vec<_>>())
        })
        .collect();
    let mut seen = HashSet::new();
    for h in handles {
        for r in h.join().unwrap() {
            assert!(seen.insert(r), "record {r} loaded twice");
        }
    }
    assert_eq!(seen.len() as u64, RECORDS);
    assert!(seen.iter().all(|&r| r < RECORDS));
    assert_eq!(w.load_generator(0).next(), None, "load is finished");
    assert_eq!(Key::ordered(5).as_str(), "user00000000000000000005");
}

#[test]
fn run_phase_needs_records() {
    let w = Workload::core('a').unwrap();
    assert_eq!(w.run_generator(0).err(), Some(WorkloadError::EmptyKeyspace));
    let mut spec = WorkloadSpec::core('b').unwrap();
    spec.proportions.read = 1.5;
    assert!(matches!(
        Workload::new(spec),
        Err(WorkloadError::Property(_))
    ));
    assert!(matches!(
        Workload::core('x'),
        Err(WorkloadError::UnknownCoreWorkload('x'))
    ));
}
