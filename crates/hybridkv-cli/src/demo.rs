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

/// Peak resident memory of this process in bytes (Linux `VmHWM`).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn print_stats(label: &str, s: &Stats) {
    println!("--- {label} ---");
    println!("{s}");
}

pub fn run(args: &DemoArgs) -> Result<(), Box<dyn std::error::Error>> {
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
        ..Options::default()
    };
    let n = args.pairs;
    let user_bytes = n * (24 + args.value_size as u64);
    println!(
        "hybridkv demo: {n} pairs, 24-byte keys, {}-byte values ({:.1} MiB), db {}",
        args.value_size,
        mib(user_bytes),
        dir.display()
    );

    let db = Db::open(&dir, opts.clone())?;
    let t = Instant::now();
    for i in 0..n {
        db.put(key(i), value(i, args.value_size))?;
    }
    let load = t.elapsed();
    db.flush()?;
    db.compact()?;
    let settle = t.elapsed();
    let load_stats = db.stats()?;
    db.close()?;
    println!(
        "load:   {:>10.0} ops/s ({:.2} s; {:.2} s including final flush and compactions)",
        n as f64 / load.as_secs_f64(),
        load.as_secs_f64(),
        settle.as_secs_f64()
    );

    let t = Instant::now();
    let db = Db::open(&dir, opts)?;
    println!("reopen: {:.3} s", t.elapsed().as_secs_f64());

    let t = Instant::now();
    let mut bad = 0u64;
    for i in 0..n {
        match db.get(key(i))? {
            Some(v) if v == value(i, args.value_size) => {}
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
    let t = Instant::now();
    let scanned = db.iter().try_fold(0u64, |c, r| r.map(|_| c + 1))?;
    println!(
        "scan:   {:>10.0} pairs/s ({} pairs)",
        scanned as f64 / t.elapsed().as_secs_f64(),
        scanned
    );
    let write_amp = load_stats.io.total_written() as f64 / user_bytes as f64;
    println!("write amplification (all bytes written by the engine / user bytes): {write_amp:.2}");
    println!(
        "peak memory (VmHWM): {:.1} MiB",
        mib(peak_rss().unwrap_or(0))
    );
    print_stats("after load (engine counters)", &load_stats);
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
