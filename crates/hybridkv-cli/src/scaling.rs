//! `hybridkv keyspace-bench`: do keyspaces let writers run in parallel? Loads pairs three ways in
//! one run, each into a fresh database: one thread into one keyspace; `--writers` threads
//! (default 2), each into a keyspace of its own; as many threads into one keyspace. Prints throughput, CPU per
//! write and the ratio of the two-keyspace run to the one-thread run.
//!
//! Each phase ends when every write is acknowledged and every memtable is flushed (the
//! background work the writes caused is part of their cost).

use crate::demo::{key, value};
use clap::Args;
use hybridkv::{Db, Keyspace, Options};
use hybridkv_bench::sys::CpuTime;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Options of `hybridkv keyspace-bench`.
#[derive(Args, Debug)]
pub struct ScalingArgs {
    /// Pairs each writer thread writes.
    #[arg(long, default_value_t = 1_000_000)]
    pub pairs: u64,
    /// Value size in bytes (keys are 24-byte YCSB-style hashed keys).
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Directory for the three databases (default: a temporary directory, deleted
    /// afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Memtable size in MiB (per keyspace).
    #[arg(long, default_value_t = 64)]
    pub memtable_mib: usize,
    /// Write with sync (every write durable before it is acknowledged).
    #[arg(long)]
    pub sync: bool,
    /// Writer threads of the many-writer phases (more than the machine's cores shows
    /// whether group commit keeps its advantage).
    #[arg(long, default_value_t = 2)]
    pub writers: u64,
}

/// What one phase measured.
struct Phase {
    label: String,
    writes: u64,
    secs: f64,
    cpu: CpuTime,
}

impl Phase {
    fn kops(&self) -> f64 {
        self.writes as f64 / self.secs / 1e3
    }
}

fn options(args: &ScalingArgs) -> Options {
    Options {
        memtable_size: args.memtable_mib << 20,
        sync: args.sync,
        ..Options::default()
    }
}

/// Writes pairs `first..first + n` into `ks`.
fn load(ks: &Keyspace, first: u64, n: u64, size: usize) -> hybridkv::Result<()> {
    for i in first..first + n {
        ks.put(key(i), value(i, size))?;
    }
    Ok(())
}

/// Runs `writers` threads, writer `w` into `spaces[w % spaces.len()]`, then flushes every
/// keyspace; returns the phase's figures.
fn phase(
    label: String,
    dir: &Path,
    args: &ScalingArgs,
    writers: u64,
    keyspaces: usize,
) -> Result<Phase, Box<dyn std::error::Error>> {
    let db = Db::open(dir, options(args))?;
    let mut spaces: Vec<Keyspace> = vec![(*db).clone()];
    for k in 1..keyspaces {
        spaces.push(db.create_keyspace(&format!("ks{k}"), options(args))?);
    }
    let cpu0 = CpuTime::now();
    let t0 = Instant::now();
    let results: Vec<hybridkv::Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let ks = spaces[w as usize % spaces.len()].clone();
                let (n, size) = (args.pairs, args.value_size);
                s.spawn(move || load(&ks, w * n, n, size))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(hybridkv::Error::Internal("a writer thread panicked".into()))
                })
            })
            .collect()
    });
    for r in results {
        r?;
    }
    for ks in &spaces {
        ks.flush()?;
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = CpuTime::now().since(&cpu0);
    drop(spaces);
    db.close()?;
    Ok(Phase {
        label,
        writes: writers * args.pairs,
        secs,
        cpu,
    })
}

/// Runs the three phases and prints the comparison.
pub fn run(args: &ScalingArgs) -> Result<(), Box<dyn std::error::Error>> {
    let tmp;
    let root = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    println!(
        "keyspace scaling: {} pairs per writer, {}-byte values, memtable {} MiB, sync {}",
        args.pairs, args.value_size, args.memtable_mib, args.sync
    );
    let w = args.writers.max(1);
    let phases = [
        phase("1 thread, 1 keyspace".into(), &root.join("one"), args, 1, 1)?,
        phase(
            format!("{w} threads, {w} keyspaces"),
            &root.join("many-keyspaces"),
            args,
            w,
            w as usize,
        )?,
        phase(
            format!("{w} threads, 1 keyspace"),
            &root.join("shared"),
            args,
            w,
            1,
        )?,
    ];
    println!(
        "{:<24} {:>10} {:>9} {:>12} {:>14}",
        "phase", "writes", "secs", "Kops/s", "CPU us/write"
    );
    for p in &phases {
        println!(
            "{:<24} {:>10} {:>9.2} {:>12.1} {:>14.2}",
            p.label,
            p.writes,
            p.secs,
            p.kops(),
            p.cpu.total() * 1e6 / p.writes as f64
        );
    }
    println!(
        "scaling: {w} threads on {w} keyspaces = {:.2}x the throughput of 1 thread on 1 \
         ({w} threads on 1 keyspace: {:.2}x)",
        phases[1].kops() / phases[0].kops(),
        phases[2].kops() / phases[0].kops()
    );
    Ok(())
}
