//! The names of the files in a database directory.
//!
//! Owns: how each kind of file is named (`NNNNNNNN.wal`, `.lvl`, `.vlog`, `.tlog`, `.dbkt`,
//! `MANIFEST`, `OPTIONS`, `CACHE_HINTS`, `SEARCH_COUNTS`, `LOCK`, `KEYSPACES`, `ks/<id>/`, `*.tmp`), parsing a name back to its kind and id, and listing the
//! numbered files of one kind in id order. Open, small-log deletion, `check` and `space`
//! classify a directory through it; every module that names a file takes the name from
//! it. Never: touches a file (callers list the directory through the I/O layer and pass
//! the names).

/// The manifest's name (`FORMAT.md`, "Manifest").
pub(crate) const MANIFEST: &str = "MANIFEST";
/// The options file's name (`FORMAT.md`, "Options file").
pub(crate) const OPTIONS: &str = "OPTIONS";
/// The cache hint file's name (`FORMAT.md`, "Cache hint file"; only in the database's own
/// directory).
pub(crate) const CACHE_HINTS: &str = "CACHE_HINTS";
/// The wasted-search count file's name (`FORMAT.md`, "Search count file"; only in the
/// database's own directory).
pub(crate) const SEARCH_COUNTS: &str = "SEARCH_COUNTS";
/// The directory lock's name.
pub(crate) const LOCK: &str = "LOCK";
/// The keyspace catalog's name (`FORMAT.md`, "Keyspace catalog"; only in the database's
/// own directory).
pub(crate) const KEYSPACES: &str = "KEYSPACES";
/// The directory holding one subdirectory per keyspace other than the default one.
pub(crate) const KEYSPACE_DIR: &str = "ks";
/// Suffix of a file being written before its atomic rename (`Io::write_atomic`).
pub(crate) const TEMP_SUFFIX: &str = ".tmp";

/// A kind of numbered file (its id comes from the version set's file ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    /// A small-log (write-ahead log) file.
    SmallLog,
    /// A level file (one sorted run).
    Level,
    /// A large-log segment, collected by GC.
    LargeSegment,
    /// A transient segment of medium values, freed whole at the merge level.
    TransientSegment,
    /// A segment of a delta bucket (`Options::delta_separation`).
    DeltaBucket,
}

const KINDS: [FileKind; 5] = [
    FileKind::SmallLog,
    FileKind::Level,
    FileKind::LargeSegment,
    FileKind::TransientSegment,
    FileKind::DeltaBucket,
];

impl FileKind {
    fn extension(self) -> &'static str {
        match self {
            FileKind::SmallLog => "wal",
            FileKind::Level => "lvl",
            FileKind::LargeSegment => "vlog",
            FileKind::TransientSegment => "tlog",
            FileKind::DeltaBucket => "dbkt",
        }
    }

    /// The name of file `id` of this kind.
    pub(crate) fn name(self, id: u64) -> String {
        format!("{id:08}.{}", self.extension())
    }
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DbFile {
    Manifest,
    Options,
    Lock,
    /// The keyspace catalog, or the directory of the keyspaces.
    Keyspaces,
    /// The cache hint file (advice for the next open, never needed to read data).
    CacheHints,
    /// The wasted-search count file (advice for the next open's merges, never needed to
    /// read data).
    SearchCounts,
    /// A leftover of an atomic write that did not finish.
    Temp,
    Numbered(FileKind, u64),
}

/// The kind of the file named `name`, or `None` if hybridkv does not write such a name.
pub(crate) fn parse(name: &str) -> Option<DbFile> {
    if name == MANIFEST {
        return Some(DbFile::Manifest);
    }
    if name == LOCK {
        return Some(DbFile::Lock);
    }
    if name == OPTIONS {
        return Some(DbFile::Options);
    }
    if name == CACHE_HINTS {
        return Some(DbFile::CacheHints);
    }
    if name == SEARCH_COUNTS {
        return Some(DbFile::SearchCounts);
    }
    if name == KEYSPACES || name == KEYSPACE_DIR {
        return Some(DbFile::Keyspaces);
    }
    if name.ends_with(TEMP_SUFFIX) {
        return Some(DbFile::Temp);
    }
    let (stem, ext) = name.rsplit_once('.')?;
    let kind = KINDS.into_iter().find(|k| k.extension() == ext)?;
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(DbFile::Numbered(kind, stem.parse().ok()?))
}

/// The directory of keyspace `id` (other than the default one) under the database's.
pub(crate) fn keyspace_dir(db: &std::path::Path, id: u32) -> std::path::PathBuf {
    db.join(KEYSPACE_DIR).join(format!("{id:08}"))
}

/// The id of `name` if it is a file of `kind`.
pub(crate) fn id_of(name: &str, kind: FileKind) -> Option<u64> {
    match parse(name)? {
        DbFile::Numbered(k, id) if k == kind => Some(id),
        _ => None,
    }
}

/// The files of `kind` among `names`, as (id, name), in id order.
pub(crate) fn numbered(names: &[String], kind: FileKind) -> Vec<(u64, &str)> {
    let mut out: Vec<(u64, &str)> = names
        .iter()
        .filter_map(|n| id_of(n, kind).map(|id| (id, n.as_str())))
        .collect();
    out.sort_by_key(|(id, _)| *id);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_kind_and_id() {
        for kind in KINDS {
            for id in [0, 7, 12_345_678, 123_456_789, u64::MAX] {
                assert_eq!(
                    parse(&kind.name(id)),
                    Some(DbFile::Numbered(kind, id)),
                    "{kind:?} {id}"
                );
            }
        }
        assert_eq!(FileKind::SmallLog.name(42), "00000042.wal");
        assert_eq!(parse("MANIFEST"), Some(DbFile::Manifest));
        assert_eq!(parse("LOCK"), Some(DbFile::Lock));
        assert_eq!(parse("OPTIONS"), Some(DbFile::Options));
        assert_eq!(parse("CACHE_HINTS"), Some(DbFile::CacheHints));
        assert_eq!(parse("SEARCH_COUNTS"), Some(DbFile::SearchCounts));
        assert_eq!(parse("KEYSPACES"), Some(DbFile::Keyspaces));
        assert_eq!(parse("ks"), Some(DbFile::Keyspaces));
        assert_eq!(parse("MANIFEST.tmp"), Some(DbFile::Temp));
    }

    #[test]
    fn foreign_names_are_not_ours() {
        for name in [
            "notes.txt",
            ".wal",
            "12a.lvl",
            "-1.vlog",
            "+1.vlog",
            "1.2.lvl",
            "00000001.sst",
            "manifest",
            "99999999999999999999999.wal",
        ] {
            assert_eq!(parse(name), None, "{name}");
        }
    }

    #[test]
    fn numbered_lists_one_kind_in_id_order() {
        let names: Vec<String> = ["00000010.wal", "00000002.wal", "00000003.lvl", "LOCK", "x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            numbered(&names, FileKind::SmallLog),
            vec![(2, "00000002.wal"), (10, "00000010.wal")]
        );
        assert_eq!(id_of("00000003.lvl", FileKind::Level), Some(3));
        assert_eq!(id_of("00000003.lvl", FileKind::SmallLog), None);
    }
}
