//! `hybridkv`: inspect a database, run the YCSB benchmark and the load-and-read demo.

mod allocator;
mod bench;
mod demo;
mod scaling;
mod text;

use clap::{Parser, Subcommand};
use hybridkv::{Db, Options, WriteBatch};
use std::io::{BufRead, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use text::Form;

#[derive(Parser)]
#[command(
    name = "hybridkv",
    version,
    about = "hybridkv key-value store: inspect a database, run the YCSB benchmark or the demo"
)]
struct Cli {
    /// Keys and values in hex (two digits per byte), given and printed. Without it they
    /// are escaped text: printable ASCII as is, `\\` for a backslash, `\xNN` for any
    /// other byte (and `\n`, `\t`, `\r`, `\0` on input).
    #[arg(long, global = true)]
    hex: bool,
    /// The keyspace a command reads or writes (default: the database's own). Every
    /// keyspace of the database opens with it.
    #[arg(long, global = true)]
    keyspace: Option<String>,
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
    /// Write scaling with keyspaces: one thread into one keyspace, two threads into two
    /// keyspaces, two threads into one keyspace, each into a fresh database, same run.
    KeyspaceBench(scaling::ScalingArgs),
    /// Store a value. Every writing command opens the database with the options it was
    /// last opened with (its OPTIONS file).
    Put {
        #[arg(long)]
        db: PathBuf,
        /// Create the database if the directory holds none (without it, a mistyped
        /// `--db` is an error, not a new database).
        #[arg(long)]
        create: bool,
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
    /// Delete a key; with `--to END`, every key from KEY up to END (excluded); with
    /// `--prefix`, every key starting with KEY. A range or prefix deletion is one write
    /// whatever the number of keys.
    Delete {
        #[arg(long)]
        db: PathBuf,
        key: String,
        /// Delete the range KEY..END (END excluded).
        #[arg(long, conflicts_with = "prefix")]
        to: Option<String>,
        /// Delete every key that starts with KEY.
        #[arg(long)]
        prefix: bool,
    },
    /// Print pairs (`key<TAB>value`) or keys in key order.
    Scan {
        #[arg(long)]
        db: PathBuf,
        /// Only keys starting with this prefix.
        #[arg(long, conflicts_with_all = ["from", "to"])]
        prefix: Option<String>,
        /// Only keys at or after this one.
        #[arg(long)]
        from: Option<String>,
        /// Only keys before this one.
        #[arg(long)]
        to: Option<String>,
        /// Print keys only (values are never read).
        #[arg(long)]
        keys_only: bool,
        /// Last key first.
        #[arg(long)]
        reverse: bool,
        /// Print at most this many (0: all).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Write every pair as a line `key<TAB>value` (escaped or hex, as `scan` prints
    /// them), for `load`.
    Dump {
        #[arg(long)]
        db: PathBuf,
        /// Write to this file instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Store the pairs of a dump (lines `key<TAB>value`), in batches.
    Load {
        #[arg(long)]
        db: PathBuf,
        /// Read this file instead of standard input.
        #[arg(long = "in")]
        input: Option<PathBuf>,
        /// Create the database if the directory holds none.
        #[arg(long)]
        create: bool,
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
    /// Merge every level down (every overwritten version and tombstone is dropped), then
    /// collect the large log; print the space before and after.
    Compact {
        #[arg(long)]
        db: PathBuf,
    },
    /// Collect every large-log segment whose garbage passed the threshold.
    Gc {
        #[arg(long)]
        db: PathBuf,
    },
    /// Make a consistent copy of the database in a new directory (hard links for
    /// immutable files), openable like any database.
    Checkpoint {
        #[arg(long)]
        db: PathBuf,
        /// The new directory.
        #[arg(long)]
        to: PathBuf,
    },
    /// List the database's keyspaces (besides its own, "default"); read-only.
    Keyspaces {
        #[arg(long)]
        db: PathBuf,
    },
    /// Create a keyspace, with the options the database was last opened with.
    CreateKeyspace {
        #[arg(long)]
        db: PathBuf,
        name: String,
    },
    /// Drop a keyspace: its files are deleted.
    DropKeyspace {
        #[arg(long)]
        db: PathBuf,
        name: String,
    },
}

/// The options a writing command opens `db` with: the stored ones if the database has
/// them, else the defaults; never creating a database unless `create`.
fn writing_options(db: &Path, create: bool) -> hybridkv::Result<Options> {
    let stored = match db.is_dir() {
        true => Db::stored_options(db)?,
        false => None,
    };
    Ok(Options {
        create_if_missing: create,
        ..stored.unwrap_or_default()
    })
}

fn open_writing(db: &Path, create: bool) -> hybridkv::Result<Db> {
    Db::open(db, writing_options(db, create)?)
}

/// For the reading commands: no lock, nothing on disk changes, so they run beside a
/// process that has the database open.
fn open_reading(db: &Path) -> hybridkv::Result<Db> {
    Db::open_read_only(db, writing_options(db, false)?)
}

/// A usage error (bad text for a key or value) as the error this program prints.
fn usage(msg: String) -> Box<dyn std::error::Error> {
    msg.into()
}

/// Pairs per batch of `load`, and the bytes that end a batch early.
const LOAD_BATCH_PAIRS: usize = 1000;
const LOAD_BATCH_BYTES: usize = 4 << 20;

fn run(cli: Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let form = Form::new(cli.hex);
    let keyspace = cli.keyspace.clone();
    // The keyspace a command works on (the database's own without `--keyspace`).
    let pick = |db: &Db| db.keyspace(keyspace.as_deref().unwrap_or(hybridkv::DEFAULT_KEYSPACE));
    let parse = |text: &str, what: &str| form.parse(text, what).map_err(usage);
    let stdout = std::io::stdout();
    match cli.command {
        Command::Bench(args) => bench::run(*args)?,
        Command::Demo(args) => demo::run(&args)?,
        Command::KeyspaceBench(args) => scaling::run(&args)?,
        Command::Put {
            db,
            create,
            key,
            value,
        } => {
            let (key, value) = (parse(&key, "key")?, parse(&value, "value")?);
            let db = open_writing(&db, create)?;
            let ks = pick(&db)?;
            ks.put(key, value)?;
            db.close()?;
        }
        Command::Get { db, key } => {
            let key = parse(&key, "key")?;
            let db = open_reading(&db)?;
            let ks = pick(&db)?;
            match ks.get(&key)? {
                Some(v) => println!("{}", form.show(&v)),
                None => {
                    eprintln!("key not found: {}", form.show(&key));
                    return Ok(ExitCode::from(1));
                }
            }
        }
        Command::Delete {
            db,
            key,
            to,
            prefix,
        } => {
            let key = parse(&key, "key")?;
            let to = to.as_deref().map(|t| parse(t, "--to")).transpose()?;
            let db = open_writing(&db, false)?;
            let ks = pick(&db)?;
            match (to, prefix) {
                (Some(end), _) => ks.delete_range(key, end)?,
                (None, true) => ks.delete_prefix(key)?,
                (None, false) => ks.delete(key)?,
            }
            db.close()?;
        }
        Command::Scan {
            db,
            prefix,
            from,
            to,
            keys_only,
            reverse,
            limit,
        } => {
            let db = open_reading(&db)?;
            let ks = pick(&db)?;
            let iter = match (&prefix, &from, &to) {
                (Some(p), _, _) => ks.prefix(parse(p, "prefix")?),
                (None, from, to) => {
                    let from = from.as_deref().map(|f| parse(f, "--from")).transpose()?;
                    let to = to.as_deref().map(|t| parse(t, "--to")).transpose()?;
                    let lower = from.map_or(Bound::Unbounded, Bound::Included);
                    let upper = to.map_or(Bound::Unbounded, Bound::Excluded);
                    ks.range::<Vec<u8>, _>((lower, upper))
                }
            };
            let limit = if limit == 0 { usize::MAX } else { limit };
            let mut out = std::io::BufWriter::new(stdout.lock());
            // Items in the order asked for, at most `limit` of them.
            fn ordered<I: DoubleEndedIterator>(
                it: I,
                reverse: bool,
                limit: usize,
            ) -> impl Iterator<Item = I::Item> {
                let (fwd, back) = if reverse {
                    (None, Some(it.rev()))
                } else {
                    (Some(it), None)
                };
                fwd.into_iter()
                    .flatten()
                    .chain(back.into_iter().flatten())
                    .take(limit)
            }
            if keys_only {
                for key in ordered(iter.keys(), reverse, limit) {
                    writeln!(out, "{}", form.show(&key?))?;
                }
            } else {
                for pair in ordered(iter, reverse, limit) {
                    let (k, v) = pair?;
                    writeln!(out, "{}\t{}", form.show(&k), form.show(&v))?;
                }
            }
            out.flush()?;
        }
        Command::Dump { db, out } => {
            let db = open_reading(&db)?;
            let ks = pick(&db)?;
            let sink: Box<dyn Write> = match &out {
                Some(path) => Box::new(
                    std::fs::File::create(path)
                        .map_err(|e| usage(format!("cannot create {}: {e}", path.display())))?,
                ),
                None => Box::new(stdout.lock()),
            };
            let mut sink = std::io::BufWriter::new(sink);
            let mut pairs = 0u64;
            for pair in ks.iter() {
                let (k, v) = pair?;
                writeln!(sink, "{}\t{}", form.show(&k), form.show(&v))?;
                pairs += 1;
            }
            sink.flush()?;
            eprintln!("dumped {pairs} pairs");
        }
        Command::Load { db, input, create } => {
            let source: Box<dyn BufRead> = match &input {
                Some(path) => Box::new(std::io::BufReader::new(
                    std::fs::File::open(path)
                        .map_err(|e| usage(format!("cannot open {}: {e}", path.display())))?,
                )),
                None => Box::new(std::io::stdin().lock()),
            };
            let db = open_writing(&db, create)?;
            let ks = pick(&db)?;
            let mut batch = WriteBatch::new();
            let (mut pending, mut bytes, mut pairs) = (0usize, 0usize, 0u64);
            for (i, line) in source.lines().enumerate() {
                let line = line?;
                if line.is_empty() {
                    continue;
                }
                let Some((k, v)) = line.split_once('\t') else {
                    return Err(usage(format!(
                        "line {}: expected key<TAB>value, found {line:?}",
                        i + 1
                    )));
                };
                let at = format!("line {}", i + 1);
                let (k, v) = (
                    parse(k, &format!("{at}: key"))?,
                    parse(v, &format!("{at}: value"))?,
                );
                bytes += k.len() + v.len();
                batch.put(k, v);
                pending += 1;
                pairs += 1;
                if pending >= LOAD_BATCH_PAIRS || bytes >= LOAD_BATCH_BYTES {
                    ks.write(std::mem::take(&mut batch))?;
                    (pending, bytes) = (0, 0);
                }
            }
            if pending > 0 {
                ks.write(batch)?;
            }
            db.close()?;
            eprintln!("loaded {pairs} pairs");
        }
        Command::Stats { db } => {
            let db = open_reading(&db)?;
            let ks = pick(&db)?;
            println!("{}", ks.stats()?);
        }
        Command::Space { db } => {
            let db = open_reading(&db)?;
            let ks = pick(&db)?;
            print!("{}", ks.space()?);
        }
        Command::Check { db } => {
            let db = open_reading(&db)?;
            let ks = pick(&db)?;
            let report = ks.check()?;
            print!("{report}");
            if !report.is_ok() {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Compact { db } => {
            let db = open_writing(&db, false)?;
            let ks = pick(&db)?;
            let before = ks.space()?;
            ks.compact_all()?;
            let gc = ks.gc()?;
            let after = ks.space()?;
            println!(
                "bytes on disk: {} before, {} after (live data {}); large-log segments freed: {}",
                before.total_on_disk,
                after.total_on_disk,
                after.live_bytes(),
                gc.segments_freed
            );
            db.close()?;
        }
        Command::Gc { db } => {
            let db = open_writing(&db, false)?;
            let ks = pick(&db)?;
            let r = ks.gc()?;
            println!(
                "segments freed: {} ({} bytes); records checked: {}, relocated: {} ({} bytes); damaged segments: {}",
                r.segments_freed,
                r.bytes_freed,
                r.entries_checked,
                r.entries_relocated,
                r.bytes_relocated,
                r.segments_damaged
            );
            for d in &r.damage {
                println!("damage: {d}");
            }
            db.close()?;
            if r.segments_damaged > 0 {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Keyspaces { db } => {
            let db = open_reading(&db)?;
            for name in db.keyspace_names() {
                println!("{name}");
            }
        }
        Command::CreateKeyspace { db: path, name } => {
            let options = writing_options(&path, false)?;
            let db = Db::open(&path, options.clone())?;
            db.create_keyspace(&name, options)?;
            db.close()?;
        }
        Command::DropKeyspace { db, name } => {
            let db = open_writing(&db, false)?;
            db.drop_keyspace(&name)?;
            db.close()?;
        }
        Command::Checkpoint { db, to } => {
            // Every keyspace is copied (a checkpoint is of the whole database).
            let db = open_writing(&db, false)?;
            print!("{}", db.checkpoint(&to)?);
            db.close()?;
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
