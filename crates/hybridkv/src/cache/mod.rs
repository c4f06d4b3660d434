//! The node cache: verified level nodes, bounded by a byte budget.
//!
//! Owns: a concurrent S3-FIFO cache (`quick_cache`) keyed by (file id, offset) and weighed
//! by node bytes. Never: the only copy of anything (every entry can be re-read from its
//! file), and never holds an unverified node. File ids are never reused, so entries of a
//! deleted file can never be confused with a newer file's nodes; they simply age out.

use quick_cache::sync::Cache;
use quick_cache::Weighter;
use std::sync::Arc;

/// A verified node's bytes.
pub(crate) type NodeBytes = Arc<[u8]>;

#[derive(Clone, Copy)]
struct ByteWeighter;

impl Weighter<(u64, u64), NodeBytes> for ByteWeighter {
    fn weight(&self, _key: &(u64, u64), val: &NodeBytes) -> u64 {
        val.len() as u64
    }
}

/// Byte-bounded cache of level nodes shared by every level file of one database.
pub(crate) struct NodeCache {
    inner: Option<Cache<(u64, u64), NodeBytes, ByteWeighter>>,
}

impl std::fmt::Debug for NodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCache")
            .field("bytes", &self.used_bytes())
            .finish()
    }
}

impl NodeCache {
    /// A cache holding at most `budget` bytes of nodes (`0` disables it).
    pub(crate) fn new(budget: usize) -> Self {
        let inner = (budget > 0)
            .then(|| Cache::with_weighter((budget / 8192).max(16), budget as u64, ByteWeighter));
        NodeCache { inner }
    }

    pub(crate) fn get(&self, file: u64, offset: u64) -> Option<NodeBytes> {
        self.inner.as_ref()?.get(&(file, offset))
    }

    pub(crate) fn insert(&self, file: u64, offset: u64, node: NodeBytes) {
        if let Some(c) = &self.inner {
            c.insert((file, offset), node);
        }
    }

    /// Bytes currently held.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.inner.as_ref().map_or(0, Cache::weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_budget() {
        let c = NodeCache::new(64 << 10);
        for i in 0..100u64 {
            c.insert(1, i * 8192, Arc::from(vec![0u8; 8192]));
        }
        assert!(c.used_bytes() <= 64 << 10, "{}", c.used_bytes());
        let off = NodeCache::new(0);
        off.insert(1, 0, Arc::from(vec![0u8; 8192]));
        assert!(off.get(1, 0).is_none());
    }
}
