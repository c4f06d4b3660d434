//! `hybridkv`: inspect a database, run the YCSB benchmark and the load-and-read demo.

mod bench;
mod demo;

use clap::{Parser, Subcommand};
use hybridkv::{Db, Options};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "hybridkv",
    version,
    about = "hybridkv key-value store: inspect a database, run the YCSB benchmark or the demo"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// YCSB benchmark against the peers (RocksDB, BlobDB with `--features rocksdb`; fjall):
    /// with no arguments, Load A then Run A on the SD mix with every built engine, then the
    /// comparison. `bench plot` and `bench report` turn a results file into PNGs and Markdown.
    Bench(Box<bench::BenchArgs>),
    /// Load pairs into a fresh database, reopen it, read every pair back and verify it,
    /// printing throughput, peak memory and bytes written per component.
    Demo(demo::DemoArgs),
    /// Store a value.
    Put {
        #[arg(long)]
        db: PathBuf,
        key: String,
        value: String,
    },
    /// Print a value (exit status 1 if the key is absent). Like every reading command,
    /// it opens the database read-only: no lock, nothing on disk changes.
    Get {
        #[arg(long)]
        db: PathBuf,
        key: String,
    },
    /// Delete a key.
    Delete {
        #[arg(long)]
        db: PathBuf,
        key: String,
    },
    /// Print pairs in key order.
    Scan {
        #[arg(long)]
        db: PathBuf,
        /// Only keys starting with this prefix.
        #[arg(long)]
        prefix: Option<String>,
        /// Print at most this many pairs.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Print the database's statistics.
    Stats {
        #[arg(long)]
        db: PathBuf,
    },
    /// Print live bytes against bytes on disk per component, with the reason for each kind
    /// of space not yet reclaimed.
    Space {
        #[arg(long)]
        db: PathBuf,
    },
    /// Verify every checksum, every log pointer and every file the manifest names; list
    /// orphaned files. Exit status 1 if damage is found. Read-only: it repairs nothing.
    Check {
        #[arg(long)]
        db: PathBuf,
    },
}

fn open_existing(db: &PathBuf) -> hybridkv::Result<Db> {
    Db::open(
        db,
        Options {
            create_if_missing: false,
            ..Options::default()
        },
    )
}

/// For the reading commands: no lock, nothing on disk changes, so they run beside a
/// process that has the database open.
fn open_reading(db: &PathBuf) -> hybridkv::Result<Db> {
    Db::open_read_only(db, Options::default())
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(cli: Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match cli.command {
        Command::Bench(args) => bench::run(*args)?,
        Command::Demo(args) => demo::run(&args)?,
        Command::Put { db, key, value } => {
            let db = Db::open(&db, Options::default())?;
            db.put(key, value)?;
            db.close()?;
        }
        Command::Get { db, key } => {
            let db = open_reading(&db)?;
            match db.get(&key)? {
                Some(v) => println!("{}", show(&v)),
                None => {
                    eprintln!("key not found: {key}");
                    return Ok(ExitCode::from(1));
                }
            }
        }
        Command::Delete { db, key } => {
            let db = open_existing(&db)?;
            db.delete(key)?;
            db.close()?;
        }
        Command::Scan { db, prefix, limit } => {
            let db = open_reading(&db)?;
            let iter = match &prefix {
                Some(p) => db.prefix(p),
                None => db.iter(),
            };
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            for pair in iter.take(limit) {
                let (k, v) = pair?;
                writeln!(out, "{}\t{}", show(&k), show(&v))?;
            }
        }
        Command::Stats { db } => {
            let db = open_reading(&db)?;
            println!("{}", db.stats()?);
        }
        Command::Space { db } => {
            let db = open_reading(&db)?;
            print!("{}", db.space()?);
        }
        Command::Check { db } => {
            let db = open_reading(&db)?;
            let report = db.check()?;
            print!("{report}");
            if !report.is_ok() {
                return Ok(ExitCode::from(1));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
