//! The level-file footer: the last 128 bytes of the file's last 4 KiB block.

use crate::format::{crc32c, Decoder};

/// Size of the footer.
pub const FOOTER_SIZE: usize = 128;
const MAGIC: &[u8; 8] = b"HKVLEVEL";
/// Format version of level files written now (2: a Bloom filter unit may precede the
/// footer). Version 1 files (no filter) are still read.
/// Version 3: leaves may be version 2 (search keys in their slots); the footer is
/// version 2's. A build that knows only versions 1 and 2 refuses such a file as
/// unsupported instead of meeting leaves it cannot read.
/// Version 4: leaves may be version 3 (compact entries); the footer is unchanged.
/// Version 5: leaves may be version 4 (keys stored without the leaf's shared prefix); the
/// footer is unchanged.
/// Version 6: the footer names a large pointer table (`super::large_pointers`); leaves
/// are version 5's. A file without a table is written as version 5, which a build that
/// does not know tables still reads.
pub(crate) const LEVEL_VERSION: u32 = 6;
/// The version a file without a large pointer table is written as.
const LEVEL_VERSION_WITHOUT_TABLE: u32 = 5;

/// What the footer records about a level file.
// `pub`, not `pub(crate)`: `hybridkv::fuzzing` re-exports it (the module stays private).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// 0 for an empty file, 1 when the root is a leaf, +1 per index level.
    pub height: u32,
    /// Offset of the root node.
    pub root: u64,
    /// Entries, tombstones included.
    pub entries: u64,
    /// Tombstones.
    pub tombstones: u64,
    /// Key and value bytes of the live entries.
    pub kv_bytes: u64,
    /// Leaves.
    pub leaves: u64,
    /// Size of a leaf.
    pub leaf_size: u32,
    /// Size of an index node.
    pub index_size: u32,
    /// Value bytes of medium pairs held by pointer (read back at the merge level).
    pub medium_bytes: u64,
    /// Offset of the Bloom filter unit (0: the file has none).
    pub filter_offset: u64,
    /// Bytes of the filter unit (header and bits, without padding).
    pub filter_len: u32,
    /// Offset of the large pointer table (0: the file has none; version 6).
    pub pointers_offset: u64,
    /// Bytes of the large pointer table, without padding.
    pub pointers_len: u32,
}

/// Why a footer was rejected.
pub(crate) enum FooterError {
    Corrupt(&'static str),
    Version(u32),
}

impl Footer {
    /// Writes the footer into the last `FOOTER_SIZE` bytes of `block`.
    pub(crate) fn encode_into(&self, block: &mut [u8]) {
        let mut f = [0u8; FOOTER_SIZE];
        f[..8].copy_from_slice(MAGIC);
        let version = if self.pointers_offset > 0 {
            LEVEL_VERSION
        } else {
            LEVEL_VERSION_WITHOUT_TABLE
        };
        f[8..12].copy_from_slice(&version.to_le_bytes());
        f[12..16].copy_from_slice(&self.height.to_le_bytes());
        f[16..24].copy_from_slice(&self.root.to_le_bytes());
        f[24..32].copy_from_slice(&self.entries.to_le_bytes());
        f[32..40].copy_from_slice(&self.tombstones.to_le_bytes());
        f[40..48].copy_from_slice(&self.kv_bytes.to_le_bytes());
        f[48..56].copy_from_slice(&self.leaves.to_le_bytes());
        f[56..60].copy_from_slice(&self.leaf_size.to_le_bytes());
        f[60..64].copy_from_slice(&self.index_size.to_le_bytes());
        f[64..72].copy_from_slice(&self.medium_bytes.to_le_bytes());
        f[72..80].copy_from_slice(&self.filter_offset.to_le_bytes());
        f[80..84].copy_from_slice(&self.filter_len.to_le_bytes());
        f[84..92].copy_from_slice(&self.pointers_offset.to_le_bytes());
        f[92..96].copy_from_slice(&self.pointers_len.to_le_bytes());
        let crc = crc32c(&f[..FOOTER_SIZE - 4]);
        f[FOOTER_SIZE - 4..].copy_from_slice(&crc.to_le_bytes());
        let n = block.len();
        if let Some(dst) = block.get_mut(n.saturating_sub(FOOTER_SIZE)..) {
            dst.copy_from_slice(&f);
        }
    }

    /// Decodes and checks a footer.
    pub(crate) fn decode(f: &[u8]) -> Result<Self, FooterError> {
        let body = f
            .get(..FOOTER_SIZE - 4)
            .ok_or(FooterError::Corrupt("footer too short"))?;
        let mut d = Decoder::new(f);
        if d.bytes(8) != Some(MAGIC.as_slice()) {
            return Err(FooterError::Corrupt("not a level file (bad footer magic)"));
        }
        let crc = Decoder::new(f.get(FOOTER_SIZE - 4..).unwrap_or_default()).u32();
        if crc != Some(crc32c(body)) {
            return Err(FooterError::Corrupt("footer checksum mismatch"));
        }
        let version = d.u32().unwrap_or(0);
        if !(1..=LEVEL_VERSION).contains(&version) {
            return Err(FooterError::Version(version));
        }
        let bad = FooterError::Corrupt("footer too short");
        let footer = Footer {
            height: d.u32().ok_or(FooterError::Corrupt("footer too short"))?,
            root: d.u64().ok_or(FooterError::Corrupt("footer too short"))?,
            entries: d.u64().ok_or(FooterError::Corrupt("footer too short"))?,
            tombstones: d.u64().ok_or(FooterError::Corrupt("footer too short"))?,
            kv_bytes: d.u64().ok_or(FooterError::Corrupt("footer too short"))?,
            leaves: d.u64().ok_or(FooterError::Corrupt("footer too short"))?,
            leaf_size: d.u32().ok_or(FooterError::Corrupt("footer too short"))?,
            index_size: d.u32().ok_or(FooterError::Corrupt("footer too short"))?,
            medium_bytes: d.u64().ok_or(FooterError::Corrupt("footer too short"))?,
            filter_offset: 0,
            filter_len: 0,
            pointers_offset: 0,
            pointers_len: 0,
        };
        let mut footer = footer;
        if version >= 2 {
            footer.filter_offset = d.u64().ok_or(FooterError::Corrupt("footer too short"))?;
            footer.filter_len = d.u32().ok_or(bad)?;
            if (footer.filter_offset == 0) != (footer.filter_len == 0)
                || !footer.filter_offset.is_multiple_of(4096)
            {
                return Err(FooterError::Corrupt(
                    "footer filter offset or length invalid",
                ));
            }
        }
        if version >= 6 {
            footer.pointers_offset = d.u64().ok_or(FooterError::Corrupt("footer too short"))?;
            footer.pointers_len = d.u32().ok_or(FooterError::Corrupt("footer too short"))?;
            if (footer.pointers_offset == 0) != (footer.pointers_len == 0)
                || !footer.pointers_offset.is_multiple_of(4096)
            {
                return Err(FooterError::Corrupt(
                    "footer large pointer table offset or length invalid",
                ));
            }
        }
        let node_ok = |s: u32| (4096..=1 << 20).contains(&s) && s.is_multiple_of(4096);
        if !node_ok(footer.leaf_size) || !node_ok(footer.index_size) || footer.height > 64 {
            return Err(FooterError::Corrupt(
                "footer node sizes or height out of range",
            ));
        }
        Ok(footer)
    }
}
