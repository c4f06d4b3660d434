//! The load-and-read demo: the main job until the YCSB benchmark lands (issue #6).

use clap::Args;
use hybridkv::{Db, Options, Stats};
use std::path::PathBuf;
use std::time::Instant;

/// Options of `hybridkv demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Pairs to load.
    #[arg(long, default_value_t = 1_000_000)]
    pub pairs: u64,
    /// Value size in bytes (keys are 24-byte YCSB-style hashed keys).
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Database directory (default: a temporary directory, deleted afterwards).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Memtable size in MiB.
    #[arg(long, default_value_t = 64)]
    pub memtable_mib: usize,
    /// Cache size in MiB.
    #[arg(long, default_value_t = 256)]
    pub cache_mib: usize,
    /// Use direct I/O for level files.
    #[arg(long)]
    pub direct_io: bool,
    /// Value-size mix instead of fixed-size values: the paper's S, M, L, SD, MD or LD
    /// (small 9 B, medium 104 B, large 1004 B values; e.g. MD = 20% small, 60% medium,
    /// 20% large). Each write draws its size class, so updates change a key's class.
    #[arg(long)]
    pub mix: Option<String>,
    /// After the load, overwrite every pair this many times (new sizes from the mix).
    #[arg(long, default_value_t = 0)]
    pub update_rounds: u32,
    /// Placement mode: hybrid, inplace or alllog.
    #[arg(long, default_value = "hybrid")]
    pub placement: String,
    /// After the writes, print the space breakdown, then merge everything down
    /// (`compact_all`) and collect garbage (`gc`), and print it again.
    #[arg(long)]
    pub settle: bool,
}

/// Percent of pairs that are small, medium and large in the paper's Table 1 mixes.
fn mix_percentages(name: &str) -> Option<[u32; 3]> {
    Some(match name.to_ascii_uppercase().as_str() {
        "S" => [100, 0, 0],
        "M" => [0, 100, 0],
        "L" => [0, 0, 100],
        "SD" => [60, 20, 20],
        "MD" => [20, 60, 20],
        "LD" => [20, 20, 60],
        _ => return None,
    })
}

/// Value size of write `round` of pair `i`.
fn value_size(args: &DemoArgs, mix: Option<[u32; 3]>, i: u64, round: u32) -> usize {
    match mix {
        None => args.value_size,
        Some([s, m, _]) => {
            let pick =
                (fnv1a(i.wrapping_mul(31).wrapping_add(u64::from(round)) ^ 0x9e37) % 100) as u32;
            if pick < s {
                9
            } else if pick < s + m {
                104
            } else {
                1004
            }
        }
    }
}

/// FNV-1a, to scatter keys like YCSB's hashed inserts.
fn fnv1a(mut x: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for _ in 0..8 {
        h ^= x & 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
        x >>= 8;
    }
    h
}

/// The 24-byte key of pair `i`: `user` followed by 20 digits.
pub fn key(i: u64) -> Vec<u8> {
    format!("user{:020}", fnv1a(i)).into_bytes()
}

/// The value of pair `i`: deterministic bytes, so reads can be verified.
pub fn value(i: u64, size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(size);
    let mut x = fnv1a(i ^ 0x5bd1_e995);
    while v.len() < size {
        v.extend_from_slice(&x.to_le_bytes());
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    }
    v.truncate(size);
    v
}

/// A memory figure of this process from `/proc/self/status` (`VmHWM` peak, `VmRSS` now).
fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Peak resident memory of this process in bytes.
fn peak_rss() -> Option<u64> {
    proc_status_bytes("VmHWM:")
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn print_stats(label: &str, s: &Stats) {
    println!("--- {label} ---");
    println!("{s}");
}

pub fn run(args: &DemoArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mix = match &args.mix {
        Some(m) => Some(
            mix_percentages(m)
                .ok_or_else(|| format!("unknown mix {m:?} (use S, M, L, SD, MD or LD)"))?,
        ),
        None => None,
    };
    let placement = match args.placement.to_ascii_lowercase().as_str() {
        "hybrid" => hybridkv::Placement::Hybrid,
        "inplace" => hybridkv::Placement::InPlace,
        "alllog" => hybridkv::Placement::AllLog,
        other => {
            return Err(
                format!("unknown placement {other:?} (use hybrid, inplace or alllog)").into(),
            )
        }
    };
    let tmp;
    let dir = match &args.db {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("hybridkv-demo")
                .tempdir_in(".")?;
            tmp.path().to_path_buf()
        }
    };
    let opts = Options {
        memtable_size: args.memtable_mib << 20,
        cache_bytes: args.cache_mib << 20,
        direct_io: args.direct_io,
        placement,
        ..Options::default()
    };
    let n = args.pairs;
    let last = args.update_rounds;
    let size_of = |i: u64, round: u32| value_size(args, mix, i, round);
    let load_bytes: u64 = (0..n).map(|i| 24 + size_of(i, 0) as u64).sum();
    let live_bytes: u64 = (0..n).map(|i| 24 + size_of(i, last) as u64).sum();
    println!(
        "hybridkv demo: {n} pairs, 24-byte keys, values {} ({:.1} MiB loaded), {} update round(s), placement {placement:?}, db {}",
        args.mix.as_deref().map_or(format!("of {} bytes", args.value_size), |m| format!("of mix {m}")),
        mib(load_bytes),
        args.update_rounds,
        dir.display()
    );

    let db = Db::open(&dir, opts.clone())?;
    let t = Instant::now();
    for i in 0..n {
        db.put(key(i), value(i, size_of(i, 0)))?;
    }
    let load = t.elapsed();
    db.flush()?;
    db.compact()?;
    let settle = t.elapsed();
    println!(
        "load:   {:>10.0} ops/s ({:.2} s; {:.2} s including final flush and compactions)",
        n as f64 / load.as_secs_f64(),
        load.as_secs_f64(),
        settle.as_secs_f64()
    );
    for round in 1..=args.update_rounds {
        let t = Instant::now();
        for i in 0..n {
            db.put(key(i), value(i ^ u64::from(round) << 40, size_of(i, round)))?;
        }
        db.flush()?;
        db.compact()?;
        println!(
            "update round {round}: {:>10.0} ops/s ({:.2} s including flush and compactions)",
            n as f64 / t.elapsed().as_secs_f64(),
            t.elapsed().as_secs_f64()
        );
    }
    if args.update_rounds > 0 {
        let t = Instant::now();
        let r = db.gc()?;
        println!(
            "gc:     {} segments freed, {:.1} MiB relocated ({:.2} s)",
            r.segments_freed,
            mib(r.bytes_relocated),
            t.elapsed().as_secs_f64()
        );
    }
    let load_stats = db.stats()?;
    let mut space = db.space()?;
    if args.settle {
        println!("--- space before settling ---");
        print!("{space}");
        let t = Instant::now();
        db.compact_all()?;
        let r = db.gc()?;
        space = db.space()?;
        println!(
            "settle: compact_all + gc in {:.2} s ({} segments freed, {:.1} MiB relocated)",
            t.elapsed().as_secs_f64(),
            r.segments_freed,
            mib(r.bytes_relocated)
        );
    }
    db.close()?;

    let t = Instant::now();
    let db = Db::open(&dir, opts)?;
    println!("reopen: {:.3} s", t.elapsed().as_secs_f64());

    let t = Instant::now();
    let mut bad = 0u64;
    let final_value = |i: u64| {
        let seed = if last == 0 {
            i
        } else {
            i ^ u64::from(last) << 40
        };
        value(seed, size_of(i, last))
    };
    for i in 0..n {
        match db.get(key(i))? {
            Some(v) if v == final_value(i) => {}
            _ => bad += 1,
        }
    }
    let read = t.elapsed();
    println!(
        "read:   {:>10.0} ops/s ({:.2} s), {} wrong or missing",
        n as f64 / read.as_secs_f64(),
        read.as_secs_f64(),
        bad
    );
    let rss_before = proc_status_bytes("VmRSS:").unwrap_or(0);
    let t = Instant::now();
    let scanned = db.iter().try_fold(0u64, |c, r| r.map(|_| c + 1))?;
    let rss_after = proc_status_bytes("VmRSS:").unwrap_or(0);
    println!(
        "scan:   {:>10.0} pairs/s ({} pairs); resident memory {:.1} MiB before, {:.1} MiB after (cache budget {} MiB)",
        scanned as f64 / t.elapsed().as_secs_f64(),
        scanned,
        mib(rss_before),
        mib(rss_after),
        args.cache_mib
    );
    let write_amp =
        load_stats.io.total_written() as f64 / load_stats.user_bytes_written.max(1) as f64;
    println!("write amplification (all bytes written by the engine / user bytes): {write_amp:.2}");
    println!(
        "peak memory (VmHWM): {:.1} MiB",
        mib(peak_rss().unwrap_or(0))
    );
    print_stats("after load and updates (engine counters)", &load_stats);
    println!(
        "--- space (live bytes expected from the workload: {:.1} MiB) ---",
        mib(live_bytes)
    );
    print!("{space}");
    if space.live_bytes() != live_bytes {
        return Err(format!(
            "space report counts {} live bytes, the workload wrote {live_bytes}",
            space.live_bytes()
        )
        .into());
    }
    db.close()?;
    if bad != 0 || scanned != n {
        return Err(format!(
            "verification failed: {bad} bad reads, {scanned} of {n} pairs scanned"
        )
        .into());
    }
    println!("verified: all {n} pairs read back correctly");
    Ok(())
}
