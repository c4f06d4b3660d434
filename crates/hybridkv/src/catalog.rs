//! The keyspace catalog (`KEYSPACES`): the name and id of every keyspace of a database
//! other than the default one (id 0, unnamed in the file, always present).
//!
//! Owns: the catalog's on-disk format (FORMAT.md, "Keyspace catalog"), its validation, and
//! its atomic store. Never: creates or deletes a keyspace's directory, or decides when the
//! catalog changes (`Db::create_keyspace` and `Db::drop_keyspace` do, in the order that
//! keeps a crash from leaving a named keyspace without its files).

use crate::error::{Error, Result};
use crate::filename::KEYSPACES;
use crate::format::{crc32c, Decoder};
use crate::io::{Io, IoComponent};
use std::collections::BTreeMap;
use std::path::Path;

const MAGIC: &[u8; 8] = b"HKVKEYS\0";
/// Format version of the catalog.
const VERSION: u32 = 1;
/// Longest keyspace name, in bytes.
pub const MAX_KEYSPACE_NAME: usize = 255;
/// The name of the default keyspace (the database's own directory; never in the file).
pub const DEFAULT_KEYSPACE: &str = "default";

/// The keyspaces of a database, by name, and the next id to hand out (ids are never
/// reused, so a small-log record of a dropped keyspace never reaches a newer one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Catalog {
    pub next_id: u32,
    pub by_name: BTreeMap<String, u32>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog {
            next_id: 1,
            by_name: BTreeMap::new(),
        }
    }
}

/// `Error::InvalidArgument` unless `name` may name a keyspace.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_KEYSPACE_NAME {
        return Err(Error::InvalidArgument(format!(
            "a keyspace name is 1 to {MAX_KEYSPACE_NAME} bytes, not {}",
            name.len()
        )));
    }
    if name == DEFAULT_KEYSPACE {
        return Err(Error::InvalidArgument(format!(
            "\"{DEFAULT_KEYSPACE}\" names the database's own keyspace (use the Db handle)"
        )));
    }
    Ok(())
}

impl Catalog {
    /// The catalog stored in `dir` (an empty one if there is none: a database made before
    /// keyspaces existed, or one that never created any).
    pub(crate) fn load(io: &Io, dir: &Path) -> Result<Catalog> {
        let path = dir.join(KEYSPACES);
        if io.fs().kind(&path)?.is_none() {
            return Ok(Catalog::default());
        }
        Catalog::decode(&io.read_all(&path, IoComponent::Manifest)?, &path)
    }

    /// Stores the catalog in `dir` atomically and durably.
    pub(crate) fn store(&self, io: &Io, dir: &Path) -> Result<()> {
        io.write_atomic(dir, KEYSPACES, &self.encode(), IoComponent::Manifest)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.by_name.len() * 16);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.next_id.to_le_bytes());
        out.extend_from_slice(&(self.by_name.len() as u32).to_le_bytes());
        for (name, id) in &self.by_name {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
        }
        let crc = crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and validates a catalog read from `path`.
    pub(crate) fn decode(data: &[u8], path: &Path) -> Result<Catalog> {
        let bad = |offset: usize, what: String| Error::corruption(path, offset as u64, what);
        let body_len = data
            .len()
            .checked_sub(4)
            .ok_or_else(|| bad(0, format!("keyspace catalog is {} bytes", data.len())))?;
        let (body, tail) = data.split_at(body_len);
        let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        if crc32c(body) != stored {
            return Err(bad(body_len, "keyspace catalog checksum mismatch".into()));
        }
        let mut d = Decoder::new(body);
        let short = |at: usize| bad(at, "keyspace catalog ends early".into());
        if d.bytes(MAGIC.len()).ok_or_else(|| short(0))? != MAGIC {
            return Err(bad(0, "not a keyspace catalog (bad magic)".into()));
        }
        let version = d.u32().ok_or_else(|| short(8))?;
        if version != VERSION {
            return Err(bad(
                8,
                format!("keyspace catalog version {version} (this build reads {VERSION})"),
            ));
        }
        let next_id = d.u32().ok_or_else(|| short(12))?;
        let count = d.u32().ok_or_else(|| short(16))?;
        let mut by_name = BTreeMap::new();
        let mut ids = std::collections::BTreeSet::new();
        let mut previous: Option<&str> = None;
        for _ in 0..count {
            let at = body.len() - d.remaining();
            let id = d.u32().ok_or_else(|| short(at))?;
            let len = usize::from(d.u16().ok_or_else(|| short(at))?);
            let name = d.bytes(len).ok_or_else(|| short(at))?;
            let name = std::str::from_utf8(name)
                .map_err(|_| bad(at, "keyspace name is not UTF-8".into()))?;
            check_name(name).map_err(|e| bad(at, e.to_string()))?;
            // Written in name order: one catalog has one encoding.
            if previous.is_some_and(|p| p >= name) {
                return Err(bad(at, format!("keyspace {name:?} is out of name order")));
            }
            previous = Some(name);
            if id == 0 || id >= next_id {
                return Err(bad(
                    at,
                    format!("keyspace {name:?} has id {id}, outside 1..{next_id}"),
                ));
            }
            if !ids.insert(id) || by_name.insert(name.to_string(), id).is_some() {
                return Err(bad(
                    at,
                    format!("keyspace {name:?} (id {id}) appears twice"),
                ));
            }
        }
        if d.remaining() != 0 {
            return Err(bad(
                body.len() - d.remaining(),
                "bytes after the last keyspace".into(),
            ));
        }
        Ok(Catalog { next_id, by_name })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn sample() -> Catalog {
        let mut c = Catalog::default();
        c.by_name.insert("users".into(), 1);
        c.by_name.insert("events".into(), 3);
        c.next_id = 4;
        c
    }

    #[test]
    fn a_catalog_round_trips() {
        let c = sample();
        let back = Catalog::decode(&c.encode(), &PathBuf::from("/db/KEYSPACES")).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn every_damaged_or_cut_catalog_is_corruption() {
        let bytes = sample().encode();
        let path = PathBuf::from("/db/KEYSPACES");
        for cut in 0..bytes.len() {
            assert!(matches!(
                Catalog::decode(&bytes[..cut], &path),
                Err(Error::Corruption { .. })
            ));
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(
                matches!(Catalog::decode(&bad, &path), Err(Error::Corruption { .. })),
                "flip at {i} accepted"
            );
        }
    }

    #[test]
    fn ids_out_of_range_and_duplicates_are_refused_even_with_a_valid_checksum() {
        let path = PathBuf::from("/db/KEYSPACES");
        let mut c = sample();
        c.next_id = 3; // "events" has id 3
        assert!(Catalog::decode(&c.encode(), &path).is_err());
        let mut c = sample();
        c.by_name.insert("again".into(), 1);
        assert!(Catalog::decode(&c.encode(), &path).is_err());
        let mut c = sample();
        c.by_name.insert("default".into(), 2);
        assert!(Catalog::decode(&c.encode(), &path).is_err());
        // Entries out of name order (a valid checksum over them).
        let mut bytes = sample().encode();
        bytes.truncate(bytes.len() - 4);
        let (first, second) = (20..20 + 4 + 2 + 6, 30..30 + 4 + 2 + 5); // "events", "users"
        let mut swapped = bytes[..20].to_vec();
        swapped.extend_from_slice(&bytes[second]);
        swapped.extend_from_slice(&bytes[first]);
        let crc = crc32c(&swapped);
        swapped.extend_from_slice(&crc.to_le_bytes());
        assert!(Catalog::decode(&swapped, &path).is_err());
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(MAX_KEYSPACE_NAME + 1)).is_err());
        assert!(check_name("default").is_err());
        assert!(check_name("orders/2026").is_ok());
    }
}
