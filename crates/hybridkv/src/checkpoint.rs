//! Checkpoints: a consistent copy of an open database in another directory.
//!
//! Owns: capturing the database's state at one point (between two commits), and building
//! the copy from it: hard links for the files nothing changes any more (level runs,
//! older large-log segments, transient segments), byte copies for the ones still growing
//! or that recovery may cut (every small-log file the copy replays, the newest large-log
//! segment, each up to its length at the point), the options file, and last the
//! manifest of the captured state, so that a directory with a manifest is a complete
//! checkpoint. Never: changes the source directory or its state. A checkpoint that
//! failed removes what it made; one cut short by a crash has no manifest (and no small-log
//! file under its real name until the last steps), so it does not open as a database.
//!
//! The copy holds every write committed before the capture and none after: the capture
//! holds the small log, then every keyspace's slot, then the `log` mutex, so no commit is
//! half done; every committed record has
//! been handed to the operating system (what the copy reads); the manifest written is the
//! captured state, whose small-log files replay exactly the writes the levels lack.

use crate::catalog::Catalog;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::filename::FileKind;
use crate::io::IoComponent;
use crate::log::large::SegmentKind;
use crate::manifest::ManifestState;
use crate::version_set::SuperVersion;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes copied per read/append when a file is copied.
const COPY_CHUNK: usize = 1 << 20;

/// What a checkpoint made.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointReport {
    /// The checkpoint's directory.
    pub dir: PathBuf,
    /// The last write (its LSN) the checkpoint holds: every write acknowledged before
    /// the checkpoint was asked for is at or below it.
    pub sequence: u64,
    /// Files hard-linked (level runs, sealed log segments).
    pub files_linked: u64,
    /// Bytes of those files (shared with the source: no new space).
    pub bytes_linked: u64,
    /// Files copied (small-log files, the large-log segment being appended to, options).
    pub files_copied: u64,
    /// Bytes copied.
    pub bytes_copied: u64,
}

impl std::fmt::Display for CheckpointReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "checkpoint: {}", self.dir.display())?;
        writeln!(f, "sequence: {}", self.sequence)?;
        writeln!(
            f,
            "linked: {} files, {} bytes",
            self.files_linked, self.bytes_linked
        )?;
        writeln!(
            f,
            "copied: {} files, {} bytes",
            self.files_copied, self.bytes_copied
        )
    }
}

/// One file of the checkpoint and how it is made.
#[derive(Debug)]
enum Source {
    /// Immutable: a second name for the same bytes.
    Link(String),
    /// Still changing (or cut by recovery): its first `len` bytes, copied.
    Copy(String, u64),
}

/// One keyspace's state at the checkpoint's point.
struct CapturedSpace {
    engine: Arc<Engine>,
    manifest: ManifestState,
    files: Vec<Source>,
    /// Holds every run and segment the manifest names (an obsolete file goes when its
    /// last holder lets go).
    _sv: Arc<SuperVersion>,
}

/// The state of every keyspace at the checkpoint's point, and what keeps its files on
/// disk until the copy is done.
struct Captured {
    /// The default keyspace first.
    spaces: Vec<CapturedSpace>,
    sequence: u64,
    /// The small-log files to copy (into the checkpoint's own directory).
    logs: Vec<Source>,
    /// Keeps small-log files from being deleted while they are copied.
    _hold: crate::write::SmallLogHold,
}

/// Makes a checkpoint of the database whose default keyspace is `root`, with its other
/// keyspaces `others` (as `catalog` names them), in `target` (which must not exist). On
/// failure, every file this call made in `target` is removed (best effort), so that a
/// checkpoint that reported an error leaves nothing that opens as a database.
pub(crate) fn checkpoint(
    root: &Arc<Engine>,
    others: &[Arc<Engine>],
    catalog: &Catalog,
    target: &Path,
) -> Result<CheckpointReport> {
    if root.io.fs().kind(target)?.is_some() {
        return Err(Error::InvalidArgument(format!(
            "checkpoint directory {} already exists (a checkpoint goes into a new directory)",
            target.display()
        )));
    }
    let mut made: Vec<PathBuf> = Vec::new();
    build(root, others, catalog, target, &mut made).inspect_err(|e| {
        // The manifest first: without it nothing left opens as this checkpoint.
        for path in made.iter().rev() {
            let _ = root.io.fs().remove(path);
        }
        log::warn!(
            "{}: checkpoint into {} failed: {e}",
            root.dir.display(),
            target.display()
        );
    })
}

/// The directory whose entry names `path` (`.` for a bare relative name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates `dir` and any missing parent, each made durable in its parent.
fn create_dirs(fs: &dyn crate::io::FileSystem, dir: &Path) -> Result<()> {
    let mut missing: Vec<&Path> = Vec::new();
    let mut d = Some(dir);
    while let Some(p) = d.filter(|p| !p.as_os_str().is_empty()) {
        if fs.kind(p)?.is_some() {
            break;
        }
        missing.push(p);
        d = p.parent();
    }
    fs.create_dir_all(dir)?;
    for p in missing.iter().rev() {
        fs.sync_dir(parent_of(p))?;
    }
    Ok(())
}

/// Puts `files` of `from` into `to` (links or copies); small-log copies are written under
/// temporary names, returned as renames to do last.
fn place(
    engine: &Engine,
    files: &[Source],
    from: &Path,
    to: &Path,
    made: &mut Vec<PathBuf>,
    report: &mut CheckpointReport,
) -> Result<Vec<(PathBuf, PathBuf)>> {
    let fs = engine.io.fs();
    let mut renames = Vec::new();
    for file in files {
        match file {
            Source::Link(name) => {
                let dst = to.join(name);
                fs.hard_link(&from.join(name), &dst)?;
                made.push(dst.clone());
                // A sealed segment may never have been synced (a commit without `sync`):
                // make the bytes under the new name durable (truncating to the current
                // length changes nothing else).
                let len = fs.file_len(&dst)?;
                fs.truncate(&dst, len)?;
                report.files_linked += 1;
                report.bytes_linked += len;
            }
            Source::Copy(name, len) => {
                let dst = to.join(name);
                let is_log = crate::filename::id_of(name, FileKind::SmallLog).is_some();
                let written = if is_log {
                    to.join(format!("{name}{}", crate::filename::TEMP_SUFFIX))
                } else {
                    dst.clone()
                };
                made.push(written.clone());
                copy_prefix(engine, &from.join(name), &written, *len)?;
                if is_log {
                    renames.push((written, dst));
                }
                report.files_copied += 1;
                report.bytes_copied += len;
            }
        }
    }
    Ok(renames)
}

/// Stores a keyspace's options in `dir` (the copy opens with them).
fn store_options(
    engine: &Engine,
    dir: &Path,
    made: &mut Vec<PathBuf>,
    report: &mut CheckpointReport,
) -> Result<()> {
    let options = crate::options_file::encode(&engine.opts);
    made.push(dir.join(crate::filename::OPTIONS));
    engine.io.write_atomic(
        dir,
        crate::filename::OPTIONS,
        &options,
        IoComponent::Checkpoint,
    )?;
    report.files_copied += 1;
    report.bytes_copied += options.len() as u64;
    Ok(())
}

/// Builds the checkpoint; `made` collects every file created in `target`, in order.
fn build(
    root: &Arc<Engine>,
    others: &[Arc<Engine>],
    catalog: &Catalog,
    target: &Path,
    made: &mut Vec<PathBuf>,
) -> Result<CheckpointReport> {
    let fs = root.io.fs();
    let captured = capture(root, others)?;
    create_dirs(fs, target)?;
    let mut report = CheckpointReport {
        dir: target.to_path_buf(),
        sequence: captured.sequence,
        ..CheckpointReport::default()
    };
    // Every other keyspace whole (its manifest included) before the default keyspace's
    // manifest makes the directory a database.
    for space in captured.spaces.iter().skip(1) {
        let e = &space.engine;
        let dir = crate::filename::keyspace_dir(target, e.keyspace);
        create_dirs(fs, &dir)?;
        place(e, &space.files, &e.dir, &dir, made, &mut report)?;
        store_options(e, &dir, made, &mut report)?;
        fs.sync_dir(&dir)?;
        made.push(dir.join(crate::filename::MANIFEST));
        space.manifest.store(&e.io, &dir)?;
    }
    let Some(main) = captured.spaces.first() else {
        return Err(Error::Internal("a checkpoint captured no keyspace".into()));
    };
    // Small-log files are copied under temporary names and renamed only once everything
    // else is in place: until then a crash leaves no log a later open could replay
    // (temporary files are swept at open).
    let mut renames = place(root, &main.files, &root.dir, target, made, &mut report)?;
    renames.extend(place(
        root,
        &captured.logs,
        root.writes.log_dir(),
        target,
        made,
        &mut report,
    )?);
    store_options(root, target, made, &mut report)?;
    if !catalog.by_name.is_empty() {
        made.push(target.join(crate::filename::KEYSPACES));
        catalog.store(&root.io, target)?;
    }
    for (from, to) in renames {
        fs.rename(&from, &to)?;
        made.push(to);
    }
    // Every file is durable and named durably before the manifest makes the directory a
    // database.
    fs.sync_dir(target)?;
    made.push(target.join(crate::filename::MANIFEST));
    main.manifest.store(&root.io, target)?;
    log::info!(
        "{}: checkpoint at sequence {} in {} ({} keyspaces, {} files linked, {} bytes copied)",
        root.dir.display(),
        report.sequence,
        target.display(),
        captured.spaces.len(),
        report.files_linked,
        report.bytes_copied
    );
    Ok(report)
}

/// Captures the state of every keyspace between two commits: every keyspace's slot, then
/// the `log` lock, keep commits out, and under them each keyspace's versions lock gives
/// its live state (lock order slots -> `log` -> `versions`).
fn capture(root: &Arc<Engine>, others: &[Arc<Engine>]) -> Result<Captured> {
    // Before anything is listed: no small-log file goes from here on.
    let hold = root.writes.hold_small_logs();
    // Every keyspace's slot, then the log: no commit is half done.
    let _quiet = root.writes.hold_all()?;
    let log = root.writes.lock();
    let engines: Vec<&Arc<Engine>> = std::iter::once(root).chain(others).collect();
    // A commit that failed may have left part of a group in the logs: nothing to copy.
    for e in &engines {
        e.check_poison()?;
    }
    let sequence = log.next_lsn.saturating_sub(1);
    let mut spaces = Vec::with_capacity(engines.len());
    for engine in engines {
        let active_large = log
            .space(engine.keyspace)?
            .large
            .as_ref()
            .map(|w| (w.id(), w.len()));
        let vs = engine.versions.lock();
        let (sv, _) = engine.versions.snapshot();
        let mut manifest = vs.as_manifest(engine.versions.peek_next_file_id());
        drop(vs);
        // A transient segment whose run is not installed yet belongs to a flush still
        // running: it is not part of this state (and may still be growing).
        let runs: std::collections::HashSet<u64> =
            manifest.levels.iter().map(|&(_, id, _)| id).collect();
        manifest
            .segments
            .retain(|s| s.kind == SegmentKind::Large || runs.contains(&s.owner));
        let mut files: Vec<Source> = manifest
            .levels
            .iter()
            .map(|&(_, id, _)| Source::Link(FileKind::Level.name(id)))
            .collect();
        // The newest large segment is copied, never linked: the copy's recovery cuts that
        // segment's tail (to where its records end), and the source may still append to
        // it.
        let newest_large = manifest
            .segments
            .iter()
            .filter(|s| s.kind == SegmentKind::Large)
            .map(|s| s.id)
            .max();
        for s in &manifest.segments {
            let name = s.kind.file_name(s.id);
            if Some(s.id) == newest_large {
                let len = match active_large {
                    Some((id, len)) if id == s.id => len,
                    // Not appended to since the last open: its length is final.
                    _ => engine.io.fs().file_len(&engine.dir.join(&name))?,
                };
                files.push(Source::Copy(name, len));
            } else {
                files.push(Source::Link(name));
            }
        }
        // Delta bucket segments are copied up to their committed lengths, never linked:
        // the last one of a bucket may still grow, and the copy's open would cut what
        // lies past its committed length in a shared file.
        for b in &manifest.buckets {
            for &(id, committed) in &b.segments {
                files.push(Source::Copy(FileKind::DeltaBucket.name(id), committed));
            }
        }
        spaces.push(CapturedSpace {
            engine: Arc::clone(engine),
            manifest,
            files,
            _sv: sv,
        });
    }
    // Every commit so far was handed to the operating system, so each small-log file's
    // length now ends at a whole record; the one being appended to ends where its writer
    // says (a log appended to through a memory map is longer: a reserved tail of zeros,
    // not worth copying). The copy replays from the oldest replay start of any keyspace.
    let from = spaces
        .iter()
        .map(|s| s.manifest.log_min_id)
        .min()
        .unwrap_or(0);
    let mut logs = Vec::new();
    for (id, path) in crate::log::small::list(&root.io, root.writes.log_dir(), from)? {
        let len = if id == log.writer.id() {
            log.writer.len()
        } else {
            root.io.fs().file_len(&path)?
        };
        logs.push(Source::Copy(FileKind::SmallLog.name(id), len));
    }
    drop(log);
    Ok(Captured {
        spaces,
        sequence,
        logs,
        _hold: hold,
    })
}

/// Copies the first `len` bytes of `from` into a new file `to`, and makes them durable.
fn copy_prefix(engine: &Engine, from: &Path, to: &Path, len: u64) -> Result<()> {
    let src = engine.io.open(from, IoComponent::Checkpoint)?;
    let mut dst = engine.io.create(to, IoComponent::Checkpoint)?;
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut offset = 0u64;
    while offset < len {
        let n = usize::try_from(len - offset).map_or(COPY_CHUNK, |r| r.min(COPY_CHUNK));
        let chunk = buf.get_mut(..n).unwrap_or_default();
        src.read_exact_at(offset, chunk)?;
        dst.append(chunk)?;
        offset += n as u64;
    }
    dst.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_relative_name_lives_in_the_current_directory() {
        assert_eq!(parent_of(Path::new("backup")), Path::new("."));
        assert_eq!(parent_of(Path::new("a/backup")), Path::new("a"));
        assert_eq!(parent_of(Path::new("/backup")), Path::new("/"));
    }
}
