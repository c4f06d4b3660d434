//! Arguments at and past the documented limits, invalid options and paths: every bad input
//! is a typed error that names the problem, and nothing of a rejected write is applied.

// Helpers outside `#[test]` functions unwrap too: a panic is the failure report here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hybridkv::{Db, Error, Options, Placement, WriteBatch, MAX_KEY_SIZE, MAX_VALUE_SIZE};
use std::path::Path;
use std::time::Duration;

fn opts() -> Options {
    Options {
        memtable_size: 64 << 10,
        growth_factor: 4,
        cache_bytes: 4 << 20,
        large_segment_size: 64 << 10,
        gc_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn is_invalid(r: &hybridkv::Result<impl std::fmt::Debug>, needle: &str) -> bool {
    matches!(r, Err(Error::InvalidArgument(m)) if m.contains(needle))
}

/// A deterministic value of `len` bytes that differs per `seed`.
fn big_value(seed: u32, len: usize) -> Vec<u8> {
    let mut x = u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = (len - v.len()).min(8);
        v.extend_from_slice(&x.to_le_bytes()[..n]);
    }
    v
}

fn assert_empty(db: &Db, what: &str) {
    let all: Vec<_> = db.iter().collect();
    assert!(
        all.is_empty(),
        "{what}: {} items in the database",
        all.len()
    );
}

#[test]
fn empty_key_is_invalid_for_every_operation() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let r = db.put("", "v");
    assert!(is_invalid(&r, "empty"), "{r:?}");
    let r = db.get("");
    assert!(is_invalid(&r, "empty"), "{r:?}");
    let r = db.delete("");
    assert!(is_invalid(&r, "empty"), "{r:?}");
    let mut b = WriteBatch::new();
    b.put("", "v");
    let r = db.write(b);
    assert!(is_invalid(&r, "empty"), "{r:?}");
    assert_empty(&db, "after empty-key writes");
}

#[test]
fn key_over_max_size_is_invalid_and_max_size_key_works() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let long = vec![b'k'; MAX_KEY_SIZE + 1];
    let r = db.put(&long, "v");
    assert!(is_invalid(&r, &(MAX_KEY_SIZE + 1).to_string()), "{r:?}");
    let r = db.get(&long);
    assert!(is_invalid(&r, "key"), "{r:?}");
    let r = db.delete(&long);
    assert!(is_invalid(&r, "key"), "{r:?}");
    assert_empty(&db, "after long-key writes");
    let max = vec![b'k'; MAX_KEY_SIZE];
    db.put(&max, "v").unwrap();
    assert_eq!(db.get(&max).unwrap().as_deref(), Some(&b"v"[..]));
    db.delete(&max).unwrap();
    assert_eq!(db.get(&max).unwrap(), None);
}

#[test]
fn value_of_exactly_max_size_round_trips_and_one_byte_more_is_invalid() {
    for placement in [Placement::Hybrid, Placement::InPlace] {
        let dir = tempfile::tempdir().unwrap();
        let o = Options {
            placement,
            ..opts()
        };
        let v = big_value(7, MAX_VALUE_SIZE);
        {
            let db = Db::open(dir.path(), o.clone()).unwrap();
            db.put("max", &v).unwrap();
            db.put("small", "s").unwrap();
            assert!(
                db.get("max").unwrap() == Some(v.clone()),
                "{placement:?}: before flush"
            );
            let over = vec![0u8; MAX_VALUE_SIZE + 1];
            let r = db.put("max", &over);
            assert!(
                is_invalid(&r, &(MAX_VALUE_SIZE + 1).to_string()),
                "{placement:?}: {r:?}"
            );
            let r = db.put("other", &over);
            assert!(is_invalid(&r, "value"), "{placement:?}: {r:?}");
            assert_eq!(db.get("other").unwrap(), None);
            assert!(
                db.get("max").unwrap() == Some(v.clone()),
                "{placement:?}: after reject"
            );
            db.flush().unwrap();
            db.compact().unwrap();
            assert!(
                db.get("max").unwrap() == Some(v.clone()),
                "{placement:?}: after flush"
            );
        }
        let db = Db::open(dir.path(), o).unwrap();
        assert!(
            db.get("max").unwrap() == Some(v.clone()),
            "{placement:?}: after reopen"
        );
        let all: Vec<_> = db.iter().map(|r| r.unwrap()).collect();
        assert_eq!(all.len(), 2);
        assert!(all[0].0 == b"max" && all[0].1 == v, "{placement:?}: scan");
        assert_eq!(all[1], (b"small".to_vec(), b"s".to_vec()));
    }
}

#[test]
fn invalid_options_are_rejected_at_open_naming_the_option() {
    let cases: Vec<(&str, Options)> = vec![
        (
            "memtable_size",
            Options {
                memtable_size: (64 << 10) - 1,
                ..opts()
            },
        ),
        (
            "memtable_size",
            Options {
                memtable_size: (4 << 30) + 1,
                ..opts()
            },
        ),
        (
            "max_immutable_memtables",
            Options {
                max_immutable_memtables: 0,
                ..opts()
            },
        ),
        (
            "max_immutable_memtables",
            Options {
                max_immutable_memtables: 17,
                ..opts()
            },
        ),
        (
            "growth_factor",
            Options {
                growth_factor: 1,
                ..opts()
            },
        ),
        (
            "growth_factor",
            Options {
                growth_factor: 65,
                ..opts()
            },
        ),
        (
            "max_levels",
            Options {
                max_levels: 1,
                ..opts()
            },
        ),
        (
            "max_levels",
            Options {
                max_levels: 13,
                ..opts()
            },
        ),
        (
            "leaf_size",
            Options {
                leaf_size: 2048,
                ..opts()
            },
        ),
        (
            "leaf_size",
            Options {
                leaf_size: 8192 + 100,
                ..opts()
            },
        ),
        (
            "leaf_size",
            Options {
                leaf_size: (1 << 20) + 4096,
                ..opts()
            },
        ),
        (
            "index_node_size",
            Options {
                index_node_size: 8192,
                ..opts()
            },
        ),
        (
            "index_node_size",
            Options {
                index_node_size: 12288 + 1,
                ..opts()
            },
        ),
        (
            "background_threads",
            Options {
                background_threads: 0,
                ..opts()
            },
        ),
        (
            "background_threads",
            Options {
                background_threads: 65,
                ..opts()
            },
        ),
        // Documented ranges: large_segment_size 64 KiB ..= 1 GiB, gc_threshold (0, 1].
        (
            "large_segment_size",
            Options {
                large_segment_size: 0,
                ..opts()
            },
        ),
        (
            "large_segment_size",
            Options {
                large_segment_size: (64 << 10) - 1,
                ..opts()
            },
        ),
        (
            "large_segment_size",
            Options {
                large_segment_size: (1 << 30) + 1,
                ..opts()
            },
        ),
        (
            "gc_threshold",
            Options {
                gc_threshold: 0.0,
                ..opts()
            },
        ),
        (
            "gc_threshold",
            Options {
                gc_threshold: -0.5,
                ..opts()
            },
        ),
        (
            "gc_threshold",
            Options {
                gc_threshold: 1.01,
                ..opts()
            },
        ),
        (
            "gc_threshold",
            Options {
                gc_threshold: f64::NAN,
                ..opts()
            },
        ),
    ];
    let parent = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, (name, o)) in cases.into_iter().enumerate() {
        let path = parent.path().join(format!("db{i}"));
        let r = Db::open(&path, o);
        if !is_invalid(&r, name) {
            failures.push(format!("case {i} ({name}): {:?}", r.map(|_| "opened")));
        }
        // Options are checked before anything is created.
        assert!(!path.exists(), "case {i} ({name}): directory created");
    }
    assert!(
        failures.is_empty(),
        "accepted or misreported:\n{}",
        failures.join("\n")
    );
    // The documented bounds themselves are valid.
    for o in [
        Options {
            large_segment_size: 64 << 10,
            gc_threshold: 1.0,
            ..opts()
        },
        Options {
            large_segment_size: 1 << 30,
            gc_threshold: 0.001,
            ..opts()
        },
        Options {
            memtable_size: 64 << 10,
            leaf_size: 1 << 20,
            index_node_size: 1 << 20,
            ..opts()
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        Db::open(dir.path(), o).unwrap();
    }
}

#[test]
fn a_regular_file_is_not_a_database_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, b"hello").unwrap();
    let r = Db::open(&file, opts());
    assert!(is_invalid(&r, "is a file"), "{r:?}");
    assert_eq!(std::fs::read(&file).unwrap(), b"hello");
}

#[test]
fn a_directory_of_foreign_files_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
    std::fs::create_dir(dir.path().join("photos")).unwrap();
    for create in [true, false] {
        let r = Db::open(
            dir.path(),
            Options {
                create_if_missing: create,
                ..opts()
            },
        );
        assert!(is_invalid(&r, "not a hybridkv database"), "{r:?}");
    }
    // Nothing was added or changed.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["notes.txt", "photos"]);
    assert_eq!(
        std::fs::read(dir.path().join("notes.txt")).unwrap(),
        b"mine"
    );
}

#[test]
fn missing_or_empty_directory_without_create_if_missing_is_invalid() {
    let parent = tempfile::tempdir().unwrap();
    let no_create = Options {
        create_if_missing: false,
        ..opts()
    };
    let missing = parent.path().join("missing");
    let r = Db::open(&missing, no_create.clone());
    assert!(is_invalid(&r, "does not exist"), "{r:?}");
    assert!(!missing.exists(), "directory was created");
    let empty = parent.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let r = Db::open(&empty, no_create.clone());
    assert!(is_invalid(&r, "no hybridkv database"), "{r:?}");
    // Once created, the same options open it.
    drop(Db::open(&empty, opts()).unwrap());
    let db = Db::open(&empty, no_create).unwrap();
    db.put("k", "v").unwrap();
}

#[test]
fn range_with_start_after_end_yields_one_invalid_argument() {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for k in ["a", "b", "c", "d"] {
        db.put(k, k).unwrap();
    }
    let bad: Vec<(std::ops::Bound<&str>, std::ops::Bound<&str>)> = vec![
        (Included("c"), Excluded("b")),
        (Included("c"), Included("b")),
        (Excluded("c"), Included("b")),
        (Excluded("c"), Excluded("a")),
        (Included("b\x00"), Included("b")),
    ];
    for (s, e) in bad {
        let items: Vec<_> = db.range::<&str, _>((s, e)).collect();
        assert_eq!(items.len(), 1, "{s:?}..{e:?}: {items:?}");
        assert!(
            matches!(&items[0], Err(Error::InvalidArgument(m)) if m.contains("start")),
            "{s:?}..{e:?}: {items:?}"
        );
    }
    // Empty but valid ranges are not errors.
    let ok: Vec<(std::ops::Bound<&str>, std::ops::Bound<&str>)> = vec![
        (Included("b"), Excluded("b")),
        (Excluded("b"), Included("b")),
        (Excluded("b"), Excluded("b")),
        (Included("e"), Unbounded),
        (Unbounded, Excluded("a")),
    ];
    for (s, e) in ok {
        let items: Vec<_> = db.range::<&str, _>((s, e)).collect();
        assert!(items.is_empty(), "{s:?}..{e:?}: {items:?}");
    }
    let one: Vec<_> = db
        .range::<&str, _>((Included("b"), Included("b")))
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(one, vec![(b"b".to_vec(), b"b".to_vec())]);
}

#[test]
fn a_batch_with_one_bad_operation_is_rejected_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put("keep", "old").unwrap();
    let long = vec![b'x'; MAX_KEY_SIZE + 1];
    let over = vec![0u8; MAX_VALUE_SIZE + 1];
    type Build = Box<dyn Fn(&mut WriteBatch)>;
    let bad_ops: Vec<(&str, Build)> = vec![
        (
            "empty key",
            Box::new(|b| {
                b.put("", "v");
            }),
        ),
        (
            "empty delete",
            Box::new(|b| {
                b.delete("");
            }),
        ),
        (
            "long key",
            Box::new(move |b| {
                b.put(&long, "v");
            }),
        ),
        (
            "long value",
            Box::new(move |b| {
                b.put("v", &over);
            }),
        ),
    ];
    for (what, bad) in &bad_ops {
        let mut b = WriteBatch::new();
        b.put("a", "1").delete("keep").put("b", vec![9u8; 5000]);
        bad(&mut b);
        b.put("c", "3");
        let r = db.write(b);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{what}: {r:?}");
        assert_eq!(db.get("a").unwrap(), None, "{what}");
        assert_eq!(db.get("b").unwrap(), None, "{what}");
        assert_eq!(db.get("c").unwrap(), None, "{what}");
        assert_eq!(
            db.get("keep").unwrap().as_deref(),
            Some(&b"old"[..]),
            "{what}"
        );
    }
    // Nothing of the rejected batches reaches the log either.
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    let all: Vec<_> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(all, vec![(b"keep".to_vec(), b"old".to_vec())]);
    // The database still takes writes.
    let mut b = WriteBatch::new();
    b.put("a", "1").delete("keep");
    db.write(b).unwrap();
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(db.get("keep").unwrap(), None);
}

/// A key of exactly `MAX_KEY_SIZE` bytes, distinct per `i`, sorting by `i`.
fn max_key(i: u32) -> Vec<u8> {
    let mut k = format!("{i:04}").into_bytes();
    k.resize(MAX_KEY_SIZE, b'a' + (i % 26) as u8);
    k
}

fn max_key_value_len(i: u32) -> usize {
    if i.is_multiple_of(4) {
        (2 << 20) + (i as usize % 3) * (512 << 10)
    } else {
        (i as usize * 37) % 500
    }
}

#[test]
fn max_size_keys_with_multi_mib_values_survive_flush_compaction_and_reopen() {
    for placement in [Placement::Hybrid, Placement::InPlace] {
        let dir = tempfile::tempdir().unwrap();
        let o = Options {
            placement,
            ..opts()
        };
        // Expected (seed, length) per key index; `None` for deleted.
        let mut model: std::collections::BTreeMap<u32, Option<(u32, usize)>> = Default::default();
        let n = 48u32;
        let check =
            |db: &Db, model: &std::collections::BTreeMap<u32, Option<(u32, usize)>>, what: &str| {
                for (&i, want) in model {
                    let got = db.get(max_key(i)).unwrap();
                    match want {
                        Some((seed, len)) => assert!(
                            got.as_deref() == Some(&big_value(*seed, *len)[..]),
                            "{placement:?} {what}: key {i}: got {:?} bytes, expected {len}",
                            got.map(|g| g.len())
                        ),
                        None => assert_eq!(got, None, "{placement:?} {what}: key {i}"),
                    }
                }
                let mut count = 0;
                let mut live = model.iter().filter_map(|(i, w)| w.map(|w| (*i, w)));
                for item in db.range(max_key(0)..) {
                    let (k, v) = item.unwrap();
                    let (i, (seed, len)) = live.next().expect("scan returned an extra key");
                    assert!(k == max_key(i), "{placement:?} {what}: scan key order");
                    assert!(
                        v == big_value(seed, len),
                        "{placement:?} {what}: scan value {i}"
                    );
                    count += 1;
                }
                assert!(
                    live.next().is_none(),
                    "{placement:?} {what}: scan missed keys ({count} seen)"
                );
            };
        {
            let db = Db::open(dir.path(), o.clone()).unwrap();
            for round in 0..2u32 {
                for i in 0..n {
                    let len = max_key_value_len(i + round);
                    db.put(max_key(i), big_value(i * 10 + round, len)).unwrap();
                    model.insert(i, Some((i * 10 + round, len)));
                }
                for i in (round..n).step_by(5) {
                    db.delete(max_key(i)).unwrap();
                    model.insert(i, None);
                }
                db.flush().unwrap();
                db.compact().unwrap();
                check(&db, &model, &format!("round {round}"));
            }
            let s = db.stats().unwrap();
            assert!(s.compactions > 0, "{placement:?}: no compaction: {s}");
        }
        let db = Db::open(dir.path(), o).unwrap();
        check(&db, &model, "after reopen");
    }
}

fn probe_writable(dir: &Path) -> bool {
    let probe = dir.join("probe");
    let ok = std::fs::write(&probe, b"x").is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

#[test]
fn a_path_under_a_regular_file_is_an_io_error() {
    // Fails for every user, root included: the parent is not a directory.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let r = Db::open(file.join("db"), opts());
    assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
    let r = Db::open(file.join("a").join("b"), opts());
    assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
}

/// `FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS` and the immutable flag (`linux/fs.h`; the `libc`
/// crate does not define them). Set with an `ioctl` rather than by running `chattr`: a
/// child process forked while another test drops its `Db` would inherit that `Db`'s locked
/// file descriptor until it execs, and the other test's reopen would see `Locked`.
const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
const FS_IMMUTABLE_FL: libc::c_int = 0x10;

/// Sets or clears the immutable attribute of `dir`; false if the file system refuses.
fn set_immutable(dir: &Path, on: bool) -> bool {
    use std::os::unix::io::AsRawFd;
    let Ok(f) = std::fs::File::open(dir) else {
        return false;
    };
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int into `flags`; the fd is open while `f` lives.
    if unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_GETFLAGS, &mut flags) } != 0 {
        return false;
    }
    flags = if on {
        flags | FS_IMMUTABLE_FL
    } else {
        flags & !FS_IMMUTABLE_FL
    };
    // SAFETY: FS_IOC_SETFLAGS reads one int from `flags`.
    unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS, &flags) == 0 }
}

/// Clears the immutable attribute set by [`make_read_only`] when dropped, so that the
/// temporary directory can be removed even if an assertion fails.
struct Immutable(std::path::PathBuf);

impl Drop for Immutable {
    fn drop(&mut self) {
        set_immutable(&self.0, false);
    }
}

/// Makes `dir` read-only for this process: mode 0o555, and for root (whom permission bits
/// do not stop) the immutable attribute (ext4/xfs/btrfs).
fn make_read_only(dir: &Path) -> Option<Immutable> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    if !probe_writable(dir) {
        return None;
    }
    let ok = set_immutable(dir, true);
    let guard = Immutable(dir.to_path_buf());
    assert!(
        ok && !probe_writable(dir),
        "cannot make {} read-only here (root, on a file system without the immutable attribute)",
        dir.display()
    );
    Some(guard)
}

#[test]
fn a_read_only_directory_is_an_io_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db_dir = dir.path().join("ro");
    std::fs::create_dir(&db_dir).unwrap();
    {
        let _guard = make_read_only(&db_dir);
        let r = Db::open(&db_dir, opts());
        assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains(&*db_dir.to_string_lossy()),
            "the error names the path: {msg}"
        );
        let r = Db::open(db_dir.join("sub"), opts());
        assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
    }
    std::fs::set_permissions(&db_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_newer_format_version_is_unsupported_version_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        db.put(b"k", b"v").unwrap();
        db.flush().unwrap();
    }
    let manifest = dir.path().join("MANIFEST");
    let mut data = std::fs::read(&manifest).unwrap();
    // The version is the u32 after the 8-byte magic (docs/FORMAT.md): 3 for a database
    // without delta buckets; this build reads up to 4.
    assert_eq!(data[8..12], 3u32.to_le_bytes());
    data[8..12].copy_from_slice(&5u32.to_le_bytes());
    std::fs::write(&manifest, &data).unwrap();
    match Db::open(dir.path(), opts()) {
        Err(Error::UnsupportedVersion {
            file,
            found,
            supported,
        }) => {
            assert!(file.ends_with("MANIFEST"), "{}", file.display());
            assert_eq!((found, supported), (5, 4));
        }
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
    // Putting the version back restores the database: nothing was changed by the refusal.
    data[8..12].copy_from_slice(&3u32.to_le_bytes());
    std::fs::write(&manifest, &data).unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}
