//! The wasted-search count file (`SEARCH_COUNTS`, `docs/FORMAT.md`, "Search count file"):
//! how many client searches each level run wasted (`LevelFile::wasted_searches`), saved
//! at a clean close and added back at the next writable open, so that the merges those
//! searches pay for (`Options::merge_bytes_per_wasted_search`) weigh what every process
//! paid, not only the one that happens to be running. Without it a database reopened
//! more often than its runs earn a merge never merges them, and a merge one process
//! earned lands in the next.
//!
//! Owns: the file's encoding and its checked decoding (the entry count checked against
//! the bytes left, entries in order and nonzero, the whole file under one CRC32C), when
//! it is written (the first close of a writable open, not a poisoned one, after the
//! background threads stopped) and read (a writable open, before they start). Never:
//! fails an open or a close (the file is advice), or changes which runs are live: a count
//! naming a run no longer live is dropped.

use crate::engine::Engine;
use crate::error::Error;
use crate::filename::SEARCH_COUNTS;
use crate::format::{Decoder, SideFileError, SideFileFrame};
use crate::io::{Io, IoComponent};
use crate::stats::Counters;
use std::path::Path;
use std::sync::Arc;

/// First eight bytes of a search count file.
pub(crate) const MAGIC: &[u8; 8] = b"HKVWASTE";
/// The version this code writes and reads.
pub(crate) const VERSION: u32 = 1;
/// The largest count a file may hold (2^48: more searches than a process makes in years;
/// a larger one is damage). Counts are written clamped to it, so sums of a level's counts
/// stay far from overflowing.
pub(crate) const MAX_SEARCHES: u64 = 1 << 48;
/// Bytes of one entry: keyspace u32, file id u64, searches u64.
const ENTRY_LEN: usize = 4 + 8 + 8;

/// One run's count: the keyspace, the run's file id in it, and the searches it wasted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RunCount {
    pub keyspace: u32,
    pub file: u64,
    pub searches: u64,
}

/// The frame of a search count file (magic, version, body, CRC32C).
const FRAME: SideFileFrame = SideFileFrame {
    magic: MAGIC,
    version: VERSION,
    kind: "search count",
};

/// Encodes `counts` (sorted here; zero counts dropped, counts over [`MAX_SEARCHES`]
/// clamped to it, and of a run named twice the first count kept): the header (magic, version, entry count), the entries, and the CRC32C of
/// everything before it.
pub(crate) fn encode(mut counts: Vec<RunCount>) -> Vec<u8> {
    counts.retain(|c| c.searches > 0);
    counts.sort_by_key(|c| (c.keyspace, c.file));
    counts.dedup_by_key(|c| (c.keyspace, c.file));
    // A database has far fewer runs than u32::MAX; more would be cut, not miscounted.
    counts.truncate(u32::MAX as usize);
    let mut out = FRAME.start(4 + counts.len() * ENTRY_LEN);
    out.extend_from_slice(&(counts.len() as u32).to_le_bytes());
    for c in &counts {
        out.extend_from_slice(&c.keyspace.to_le_bytes());
        out.extend_from_slice(&c.file.to_le_bytes());
        out.extend_from_slice(&c.searches.min(MAX_SEARCHES).to_le_bytes());
    }
    FRAME.seal(out)
}

/// Decodes a search count file, checking its magic, version and checksum first, then
/// that the entry count fills the bytes exactly and every entry.
pub(crate) fn decode(buf: &[u8]) -> Result<Vec<RunCount>, SideFileError> {
    let mut d = Decoder::new(FRAME.open(buf, 4)?);
    let count = d.u32().ok_or(SideFileError::Truncated)? as usize;
    // The count is checked against the bytes left before anything is reserved for it.
    let needed = count
        .checked_mul(ENTRY_LEN)
        .ok_or(SideFileError::Truncated)?;
    if needed > d.remaining() {
        return Err(SideFileError::Truncated);
    }
    if needed < d.remaining() {
        return Err(SideFileError::Invalid("bytes after the last entry"));
    }
    let mut out: Vec<RunCount> = Vec::with_capacity(count);
    for _ in 0..count {
        let c = RunCount {
            keyspace: d.u32().ok_or(SideFileError::Truncated)?,
            file: d.u64().ok_or(SideFileError::Truncated)?,
            searches: d.u64().ok_or(SideFileError::Truncated)?,
        };
        if c.searches == 0 || c.searches > MAX_SEARCHES {
            return Err(SideFileError::Invalid("a count out of range"));
        }
        if out
            .last()
            .is_some_and(|p| (p.keyspace, p.file) >= (c.keyspace, c.file))
        {
            return Err(SideFileError::Invalid("runs out of order or named twice"));
        }
        out.push(c);
    }
    Ok(out)
}

/// Writes what every run of `engines` (the default keyspace's first) wasted to the file
/// in `dir`, replacing the last one (with an empty list too, so that counts read at this
/// open are not read again at the next; no file is written when there is nothing to save
/// and none to replace). A poisoned keyspace's runs are left out: its state in memory may
/// be ahead of its manifest. A failure is logged, not returned.
pub(crate) fn save(io: &Io, dir: &Path, engines: &[Arc<Engine>]) {
    let mut counts = Vec::new();
    for e in engines {
        if e.poisoned.load(std::sync::atomic::Ordering::Acquire) {
            continue;
        }
        let (sv, _) = e.snapshot();
        counts.extend(sv.version.all_runs().map(|run| RunCount {
            keyspace: e.keyspace,
            file: run.id(),
            searches: run.wasted_searches(),
        }));
    }
    if counts.iter().all(|c| c.searches == 0) && io.fs().file_len(&dir.join(SEARCH_COUNTS)).is_err()
    {
        return;
    }
    let data = encode(counts);
    if let Err(e) = io.write_atomic(dir, SEARCH_COUNTS, &data, IoComponent::SearchCounts) {
        log::warn!("wasted-search counts not written: {e}");
    }
}

/// Reads the file in `dir` and adds each count to its run, if that run is still live in
/// its keyspace's current state. A missing file adds nothing; one that cannot be read or
/// decoded is logged and counted in the default keyspace's
/// `Stats::search_counts_rejected`.
pub(crate) fn restore(io: &Io, dir: &Path, engines: &[Arc<Engine>]) {
    let Some(root) = engines.first() else {
        return;
    };
    let path = dir.join(SEARCH_COUNTS);
    let counts = match io.read_all(&path, IoComponent::SearchCounts) {
        Ok(data) => match decode(&data) {
            Ok(counts) => counts,
            Err(why) => {
                log::warn!("{}: ignored: {why}", path.display());
                Counters::add(&root.counters.search_counts_rejected, 1);
                return;
            }
        },
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return;
        }
        Err(e) => {
            log::warn!("wasted-search counts not read: {e}");
            Counters::add(&root.counters.search_counts_rejected, 1);
            return;
        }
    };
    let mut added = 0u64;
    for e in engines {
        let (sv, _) = e.snapshot();
        for run in sv.version.all_runs() {
            if let Some(n) = count_of(&counts, e.keyspace, run.id()) {
                run.add_wasted_searches(n);
                added = added.saturating_add(n);
            }
        }
    }
    log::info!(
        "{}: {added} wasted searches of the last clean close added back",
        dir.display()
    );
}

/// The count `counts` (as [`decode`] returns them: in order) hold for run `file` of
/// keyspace `keyspace`.
fn count_of(counts: &[RunCount], keyspace: u32, file: u64) -> Option<u64> {
    counts
        .binary_search_by_key(&(keyspace, file), |c| (c.keyspace, c.file))
        .ok()
        .map(|i| counts[i].searches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::crc32c;
    use proptest::prelude::*;

    fn c(keyspace: u32, file: u64, searches: u64) -> RunCount {
        RunCount {
            keyspace,
            file,
            searches,
        }
    }

    #[test]
    fn counts_come_back_sorted_without_zeros_or_repeats() {
        let input = vec![
            c(1, 4, 7),
            c(0, 9, 3),
            c(0, 2, 0),
            c(0, 3, 1 << 40),
            c(0, 9, 5),
        ];
        let out = decode(&encode(input)).expect("decodes");
        assert_eq!(out, vec![c(0, 3, 1 << 40), c(0, 9, 3), c(1, 4, 7)]);
        assert_eq!(
            decode(&encode(vec![c(0, 9, 5), c(0, 9, 3)])),
            Ok(vec![c(0, 9, 5)])
        );
        assert_eq!(decode(&encode(Vec::new())), Ok(Vec::new()));
    }

    #[test]
    fn a_count_belongs_to_its_keyspaces_run_alone() {
        // File ids are numbered per keyspace: the same id in two keyspaces is two runs.
        let counts = decode(&encode(vec![c(2, 7, 30), c(0, 7, 10), c(1, 8, 20)])).unwrap();
        assert_eq!(count_of(&counts, 0, 7), Some(10));
        assert_eq!(count_of(&counts, 2, 7), Some(30));
        assert_eq!(count_of(&counts, 1, 7), None);
        assert_eq!(count_of(&counts, 1, 8), Some(20));
        assert_eq!(count_of(&counts, 0, 8), None);
    }

    #[test]
    fn counts_past_the_bound_are_clamped_when_written_and_refused_when_read() {
        let out = decode(&encode(vec![c(0, 1, u64::MAX), c(0, 2, MAX_SEARCHES)])).unwrap();
        assert_eq!(out, vec![c(0, 1, MAX_SEARCHES), c(0, 2, MAX_SEARCHES)]);
        let over = [c(0, 1, MAX_SEARCHES + 1)];
        assert!(matches!(
            decode(&sealed(1, &over, &[])),
            Err(SideFileError::Invalid(_))
        ));
    }

    #[test]
    fn damage_is_refused_with_its_reason() {
        let good = encode(vec![c(0, 3, 10), c(0, 5, 20)]);
        // Any flipped byte: the magic, the version, or (through the CRC) the rest.
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_err(), "byte {i} flipped was accepted");
        }
        for len in 0..good.len() {
            assert!(decode(&good[..len]).is_err(), "cut at {len} was accepted");
        }
        let mut other = good.clone();
        other[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(decode(&other), Err(SideFileError::Version(2)));
        assert_eq!(
            decode(b"HKVHINT\0\x01\0\0\0\0\0\0\0\0\0\0\0"),
            Err(SideFileError::BadMagic("search count"))
        );
    }

    /// Rewrites the entries of a well-formed file and seals it with a correct checksum, so
    /// that the checks behind the checksum are reached.
    fn sealed(count: u32, entries: &[RunCount], extra: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        for e in entries {
            out.extend_from_slice(&e.keyspace.to_le_bytes());
            out.extend_from_slice(&e.file.to_le_bytes());
            out.extend_from_slice(&e.searches.to_le_bytes());
        }
        out.extend_from_slice(extra);
        let crc = crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn checked_fields_behind_a_good_checksum_are_refused() {
        let two = [c(0, 3, 1), c(0, 5, 1)];
        assert_eq!(decode(&sealed(2, &two, &[])).map(|v| v.len()), Ok(2));
        assert_eq!(decode(&sealed(3, &two, &[])), Err(SideFileError::Truncated));
        assert_eq!(
            decode(&sealed(u32::MAX, &two, &[])),
            Err(SideFileError::Truncated)
        );
        assert!(matches!(
            decode(&sealed(1, &two, &[])),
            Err(SideFileError::Invalid(_))
        ));
        assert!(matches!(
            decode(&sealed(2, &two, &[0])),
            Err(SideFileError::Invalid(_))
        ));
        let zero = [c(0, 3, 0)];
        assert!(matches!(
            decode(&sealed(1, &zero, &[])),
            Err(SideFileError::Invalid(_))
        ));
        let twice = [c(0, 3, 1), c(0, 3, 2)];
        assert!(matches!(
            decode(&sealed(2, &twice, &[])),
            Err(SideFileError::Invalid(_))
        ));
        let backwards = [c(1, 3, 1), c(0, 9, 2)];
        assert!(matches!(
            decode(&sealed(2, &backwards, &[])),
            Err(SideFileError::Invalid(_))
        ));
    }

    proptest! {
        #[test]
        fn any_counts_round_trip(raw in proptest::collection::vec((0u32..3, 0u64..50, 0u64..u64::MAX), 0..60)) {
            let counts: Vec<RunCount> = raw.iter().map(|&(k, f, s)| c(k, f, s)).collect();
            let mut want: Vec<RunCount> = Vec::new();
            for x in &counts {
                if x.searches > 0 && !want.iter().any(|w| (w.keyspace, w.file) == (x.keyspace, x.file)) {
                    want.push(c(x.keyspace, x.file, x.searches.min(MAX_SEARCHES)));
                }
            }
            want.sort_unstable();
            prop_assert_eq!(decode(&encode(counts)), Ok(want));
        }

        #[test]
        fn any_bytes_decode_without_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&data);
        }
    }
}
