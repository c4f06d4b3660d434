//! The `OPTIONS` file: the options a database was last opened (for writing) with.
//!
//! Owns: the file's encoding (FORMAT.md, "Options file": a checksummed header, then one
//! `name = value` line per option, so that a person can read it with `cat`), its decoding
//! with every length, line and value checked, and its store (atomic, at a writable open
//! whose options differ from the stored ones) and load (by tools that open a database
//! with the options it was made with: the CLI, [`crate::Db::stored_options`]). Never:
//! decides or checks what an option means (`options` does), or changes the database in a
//! read-only open.
//!
//! `create_if_missing` is not stored (it is about one open, not about the database).
//! Names it does not know are skipped, so a file written by a newer build that added an
//! option still loads; a known name with a bad value is `Error::Corruption` naming the
//! line.

use crate::error::{Error, Result};
use crate::filename::OPTIONS;
use crate::format::{crc32c, Decoder};
use crate::io::{Io, IoComponent};
use crate::options::{MediumMergeLevel, Options};
use crate::placement::Placement;
use std::path::Path;
use std::time::Duration;

const MAGIC: &[u8; 8] = b"HKVOPTS\0";
/// Format version of the options file.
pub(crate) const VERSION: u32 = 1;
/// Magic, version, payload length, payload CRC-32C.
const HEADER: usize = 20;
/// Largest payload accepted (the file holds a few dozen short lines).
const MAX_PAYLOAD: usize = 64 << 10;

fn placement_name(p: Placement) -> &'static str {
    match p {
        Placement::Hybrid => "hybrid",
        Placement::InPlace => "in_place",
        Placement::AllLog => "all_log",
    }
}

fn merge_level_name(m: MediumMergeLevel) -> &'static str {
    match m {
        MediumMergeLevel::Last => "last",
        MediumMergeLevel::SecondToLast => "second_to_last",
    }
}

/// The `name = value` lines of `o`, in a fixed order.
fn lines(o: &Options) -> Vec<(&'static str, String)> {
    vec![
        ("memtable_size", o.memtable_size.to_string()),
        (
            "max_immutable_memtables",
            o.max_immutable_memtables.to_string(),
        ),
        ("growth_factor", o.growth_factor.to_string()),
        (
            "merge_bytes_per_wasted_search",
            o.merge_bytes_per_wasted_search.to_string(),
        ),
        ("max_levels", o.max_levels.to_string()),
        ("leaf_size", o.leaf_size.to_string()),
        ("index_node_size", o.index_node_size.to_string()),
        ("cache_bytes", o.cache_bytes.to_string()),
        ("prepopulate_cache", o.prepopulate_cache.to_string()),
        ("direct_io", o.direct_io.to_string()),
        ("mmap_reads", o.mmap_reads.to_string()),
        ("read_spin_us", o.read_spin_us.to_string()),
        ("mmap_log_writes", o.mmap_log_writes.to_string()),
        ("background_threads", o.background_threads.to_string()),
        ("sync", o.sync.to_string()),
        ("placement", placement_name(o.placement).to_string()),
        ("small_threshold", o.small_threshold.to_string()),
        ("large_threshold", o.large_threshold.to_string()),
        ("large_segment_size", o.large_segment_size.to_string()),
        // `{:?}` of an f64 round-trips exactly.
        ("gc_threshold", format!("{:?}", o.gc_threshold)),
        ("gc_interval_ns", o.gc_interval.as_nanos().to_string()),
        (
            "medium_merge_level",
            merge_level_name(o.medium_merge_level).to_string(),
        ),
        (
            "space_amp_limit",
            o.space_amp_limit
                .map_or_else(|| "none".to_string(), |v| format!("{v:?}")),
        ),
        ("bloom_bits_per_key", o.bloom_bits_per_key.to_string()),
        ("pinned_index_bytes", o.pinned_index_bytes.to_string()),
        (
            "large_pointer_table_bytes",
            o.large_pointer_table_bytes.to_string(),
        ),
        ("warm_read_bytes", o.warm_read_bytes.to_string()),
        ("reload_cache", o.reload_cache.to_string()),
        ("fold_on_read", o.fold_on_read.to_string()),
        ("delta_separation", o.delta_separation.to_string()),
        ("delta_bucket_size", o.delta_bucket_size.to_string()),
    ]
    .into_iter()
    // The operator's name, for tools (an operator is code: it cannot be loaded back).
    .chain(
        o.merge_operator
            .as_ref()
            .map(|m| ("merge_operator", m.name().escape_debug().to_string())),
    )
    .collect()
}

/// The file's bytes for `o`.
pub(crate) fn encode(o: &Options) -> Vec<u8> {
    let mut payload = String::new();
    for (name, value) in lines(o) {
        payload.push_str(name);
        payload.push_str(" = ");
        payload.push_str(&value);
        payload.push('\n');
    }
    let payload = payload.into_bytes();
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// The options the file `data` (read from `file`) records, over `Options::default()` for
/// any the file does not name. Every byte is checked: `Error::Corruption` (with the
/// offset or line) or `Error::UnsupportedVersion`, never a panic.
pub(crate) fn decode(data: &[u8], file: &Path) -> Result<Options> {
    let bad = |offset: u64, what: String| Error::corruption(file, offset, what);
    let mut d = Decoder::new(data);
    if d.bytes(8) != Some(MAGIC.as_slice()) {
        return Err(bad(0, "not an options file (bad magic)".into()));
    }
    let version = d.u32().ok_or_else(|| bad(8, "truncated header".into()))?;
    if version != VERSION {
        return Err(Error::UnsupportedVersion {
            file: file.to_path_buf(),
            found: version,
            supported: VERSION,
        });
    }
    let len = d.u32().ok_or_else(|| bad(12, "truncated header".into()))? as usize;
    let crc = d.u32().ok_or_else(|| bad(16, "truncated header".into()))?;
    if len > MAX_PAYLOAD {
        return Err(bad(
            12,
            format!("payload length {len} is over {MAX_PAYLOAD}"),
        ));
    }
    let payload = d
        .bytes(len)
        .ok_or_else(|| bad(HEADER as u64, "payload shorter than its length".into()))?;
    if crc32c(payload) != crc {
        return Err(bad(HEADER as u64, "options checksum mismatch".into()));
    }
    if d.remaining() != 0 {
        return Err(bad(
            (HEADER + len) as u64,
            "options file has bytes after its payload".into(),
        ));
    }
    let text = std::str::from_utf8(payload)
        .map_err(|e| bad(HEADER as u64 + e.valid_up_to() as u64, "not UTF-8".into()))?;
    let mut o = Options::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let offset = HEADER as u64;
        let Some((name, value)) = line.split_once('=') else {
            return Err(bad(
                offset,
                format!("line {}: expected `name = value`, found {line:?}", i + 1),
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        set(&mut o, name, value)
            .map_err(|why| bad(offset, format!("line {} ({name}): {why}: {value:?}", i + 1)))?;
    }
    Ok(o)
}

/// Sets option `name` from its text; `Err` says what is wrong with the value. An unknown
/// name is skipped.
fn set(o: &mut Options, name: &str, value: &str) -> std::result::Result<(), &'static str> {
    fn num<T: std::str::FromStr>(v: &str) -> std::result::Result<T, &'static str> {
        v.parse().map_err(|_| "not a number in range")
    }
    fn flag(v: &str) -> std::result::Result<bool, &'static str> {
        v.parse().map_err(|_| "not true or false")
    }
    fn real(v: &str) -> std::result::Result<f64, &'static str> {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or("not a finite number")
    }
    match name {
        "memtable_size" => o.memtable_size = num(value)?,
        "max_immutable_memtables" => o.max_immutable_memtables = num(value)?,
        "growth_factor" => o.growth_factor = num(value)?,
        "merge_bytes_per_wasted_search" => o.merge_bytes_per_wasted_search = num(value)?,
        "max_levels" => o.max_levels = num(value)?,
        "leaf_size" => o.leaf_size = num(value)?,
        "index_node_size" => o.index_node_size = num(value)?,
        "cache_bytes" => o.cache_bytes = num(value)?,
        "direct_io" => o.direct_io = flag(value)?,
        "mmap_reads" => o.mmap_reads = flag(value)?,
        "read_spin_us" => o.read_spin_us = num(value)?,
        "mmap_log_writes" => o.mmap_log_writes = flag(value)?,
        "background_threads" => o.background_threads = num(value)?,
        "sync" => o.sync = flag(value)?,
        "placement" => {
            o.placement = match value {
                "hybrid" => Placement::Hybrid,
                "in_place" => Placement::InPlace,
                "all_log" => Placement::AllLog,
                _ => return Err("not hybrid, in_place or all_log"),
            }
        }
        "small_threshold" => o.small_threshold = num(value)?,
        "large_threshold" => o.large_threshold = num(value)?,
        "large_segment_size" => o.large_segment_size = num(value)?,
        "gc_threshold" => o.gc_threshold = real(value)?,
        "gc_interval_ns" => {
            let ns: u128 = num(value)?;
            o.gc_interval = Duration::new(
                u64::try_from(ns / 1_000_000_000).map_err(|_| "over u64 seconds")?,
                (ns % 1_000_000_000) as u32,
            );
        }
        "medium_merge_level" => {
            o.medium_merge_level = match value {
                "last" => MediumMergeLevel::Last,
                "second_to_last" => MediumMergeLevel::SecondToLast,
                _ => return Err("not last or second_to_last"),
            }
        }
        "space_amp_limit" => {
            o.space_amp_limit = match value {
                "none" => None,
                v => Some(real(v)?),
            }
        }
        "bloom_bits_per_key" => o.bloom_bits_per_key = num(value)?,
        "pinned_index_bytes" => o.pinned_index_bytes = num(value)?,
        "large_pointer_table_bytes" => o.large_pointer_table_bytes = num(value)?,
        "warm_read_bytes" => o.warm_read_bytes = num(value)?,
        "reload_cache" => o.reload_cache = flag(value)?,
        "fold_on_read" => o.fold_on_read = flag(value)?,
        "prepopulate_cache" => o.prepopulate_cache = flag(value)?,
        "delta_separation" => o.delta_separation = flag(value)?,
        "delta_bucket_size" => o.delta_bucket_size = num(value)?,
        // Informative: an operator is code, set by whoever opens the database.
        "merge_operator" => {}
        _ => log::warn!("options file: skipping unknown option {name:?}"),
    }
    Ok(())
}

/// The name of the merge operator stored in `dir`'s options file (escaped as written,
/// trimmed), if the file names one: a database written with deltas needs its operator to
/// flush and merge them. A file that cannot be read or decoded names none here (the open
/// goes on, as without this check, and stores a new file once it succeeded).
pub(crate) fn stored_merge_operator(io: &Io, dir: &Path) -> Option<String> {
    let path = dir.join(OPTIONS);
    let data = match io.fs().kind(&path) {
        Ok(Some(_)) => io.read_all(&path, IoComponent::Manifest),
        _ => return None,
    };
    let checked = data.and_then(|d| decode(&d, &path).map(|_| d));
    let data = match checked {
        Ok(d) => d,
        Err(e) => {
            log::warn!(
                "{}: options file not used to check the merge operator: {e}",
                dir.display()
            );
            return None;
        }
    };
    let text = std::str::from_utf8(data.get(HEADER..).unwrap_or_default()).unwrap_or_default();
    text.lines().find_map(|line| {
        let (name, value) = line.split_once('=')?;
        (name.trim() == "merge_operator").then(|| value.trim().to_string())
    })
}

/// The options stored in `dir`, or `None` if it has no options file.
pub(crate) fn load(io: &Io, dir: &Path) -> Result<Option<Options>> {
    let path = dir.join(OPTIONS);
    if io.fs().kind(&path)?.is_none() {
        return Ok(None);
    }
    let data = io.read_all(&path, IoComponent::Manifest)?;
    decode(&data, &path).map(Some)
}

/// Stores `o` as `dir`'s options unless the file already says the same.
pub(crate) fn store_if_changed(io: &Io, dir: &Path, o: &Options) -> Result<()> {
    let bytes = encode(o);
    let path = dir.join(OPTIONS);
    if io.fs().kind(&path)? == Some(false)
        && io.read_all(&path, IoComponent::Manifest).ok().as_ref() == Some(&bytes)
    {
        return Ok(());
    }
    io.write_atomic(dir, OPTIONS, &bytes, IoComponent::Manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn file() -> PathBuf {
        PathBuf::from("/db/OPTIONS")
    }

    fn custom() -> Options {
        Options {
            create_if_missing: false,
            memtable_size: 1 << 20,
            max_immutable_memtables: 3,
            growth_factor: 4,
            merge_bytes_per_wasted_search: 1000,
            max_levels: 5,
            leaf_size: 16384,
            index_node_size: 16384,
            cache_bytes: 12345,
            prepopulate_cache: false,
            direct_io: true,
            mmap_reads: true,
            read_spin_us: 75,
            mmap_log_writes: false,
            background_threads: 3,
            sync: true,
            placement: Placement::AllLog,
            small_threshold: 64,
            large_threshold: 512,
            large_segment_size: 1 << 20,
            gc_threshold: 0.3,
            gc_interval: Duration::new(3, 250_000_123),
            medium_merge_level: MediumMergeLevel::SecondToLast,
            space_amp_limit: Some(1.75),
            bloom_bits_per_key: 0,
            pinned_index_bytes: 99,
            large_pointer_table_bytes: 77,
            warm_read_bytes: 8192,
            reload_cache: false,
            merge_operator: None,
            fold_on_read: false,
            delta_separation: true,
            delta_bucket_size: 3 << 20,
        }
    }

    #[test]
    fn the_merge_operator_is_stored_by_name_and_not_loaded() {
        let o = Options {
            merge_operator: Some(std::sync::Arc::new(crate::delta::CounterAdd)),
            ..custom()
        };
        let bytes = encode(&o);
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.contains("merge_operator = hybridkv.counter_add"),
            "{text}"
        );
        let back = decode(&bytes, &file()).unwrap();
        assert!(back.merge_operator.is_none());
        assert!(same(&back, &custom()));
    }

    /// Every stored option, as its line (Options has no `PartialEq`: a float field).
    fn same(a: &Options, b: &Options) -> bool {
        lines(a) == lines(b)
    }

    #[test]
    fn every_option_round_trips() {
        let o = custom();
        let back = decode(&encode(&o), &file()).unwrap();
        assert!(same(&o, &back), "{back:?}");
        assert!(back.create_if_missing, "not stored: the default comes back");
        let d = decode(&encode(&Options::default()), &file()).unwrap();
        assert!(same(&d, &Options::default()));
        assert!(!same(&d, &o), "the comparison can fail");
    }

    #[test]
    fn damage_is_a_typed_error_never_a_panic() {
        let good = encode(&custom());
        for cut in 0..good.len() {
            assert!(decode(&good[..cut], &file()).is_err(), "cut at {cut}");
        }
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x20;
            match decode(&b, &file()) {
                Err(Error::Corruption { .. } | Error::UnsupportedVersion { .. }) => {}
                other => panic!("flip at {i}: {other:?}"),
            }
        }
    }

    /// The payload `text` in a valid envelope.
    fn wrap(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c(text.as_bytes()).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        out
    }

    #[test]
    fn bad_values_name_their_line_and_unknown_names_are_skipped() {
        let o = decode(&wrap("growth_factor = 5\nfuture_option = 7\n"), &file()).unwrap();
        assert_eq!(o.growth_factor, 5);
        for (text, what) in [
            ("growth_factor = -1\n", "line 1 (growth_factor)"),
            ("sync = yes\n", "line 1 (sync)"),
            ("\nplacement = sideways\n", "line 2 (placement)"),
            ("gc_threshold = NaN\n", "line 1 (gc_threshold)"),
            ("no equals sign\n", "line 1: expected"),
        ] {
            let err = decode(&wrap(text), &file()).unwrap_err().to_string();
            assert!(err.contains(what), "{text:?}: {err}");
        }
    }

    #[test]
    fn stored_once_then_only_when_changed() {
        use crate::io::SimFs;
        use std::sync::Arc;
        let fs = SimFs::new();
        let io = Io::new(Arc::new(fs.clone()), false);
        let dir = Path::new("/db");
        io.fs().create_dir_all(dir).unwrap();
        assert!(load(&io, dir).unwrap().is_none());
        store_if_changed(&io, dir, &custom()).unwrap();
        assert!(same(&load(&io, dir).unwrap().unwrap(), &custom()));
        let before = fs.mutation_count();
        store_if_changed(&io, dir, &custom()).unwrap();
        assert_eq!(fs.mutation_count(), before, "same options: nothing written");
        store_if_changed(&io, dir, &Options::default()).unwrap();
        assert!(same(&load(&io, dir).unwrap().unwrap(), &Options::default()));
    }
}
