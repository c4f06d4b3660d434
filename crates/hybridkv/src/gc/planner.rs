//! Chooses which large-log segments to collect. Pure: sizes and counters in, ids out.

/// What the planner sees of one segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SegmentUsage {
    pub id: u64,
    /// Record bytes in the segment.
    pub bytes: u64,
    /// Record bytes known to be garbage.
    pub garbage: u64,
}

impl SegmentUsage {
    fn ratio(&self) -> f64 {
        if self.bytes == 0 {
            return 1.0;
        }
        self.garbage.min(self.bytes) as f64 / self.bytes as f64
    }
}

/// Segments at or above `threshold` garbage, most garbage first, never the `active` one
/// (still being appended to), at most `max`.
pub(crate) fn pick_victims(
    segments: &[SegmentUsage],
    active: Option<u64>,
    threshold: f64,
    max: usize,
) -> Vec<u64> {
    let mut v: Vec<&SegmentUsage> = segments
        .iter()
        .filter(|s| Some(s.id) != active && s.ratio() >= threshold)
        .collect();
    v.sort_by(|a, b| b.ratio().total_cmp(&a.ratio()).then(a.id.cmp(&b.id)));
    v.into_iter().take(max).map(|s| s.id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(id: u64, bytes: u64, garbage: u64) -> SegmentUsage {
        SegmentUsage { id, bytes, garbage }
    }

    #[test]
    fn threshold_order_and_active_excluded() {
        let s = [
            seg(1, 1000, 50),
            seg(2, 1000, 100),
            seg(3, 1000, 900),
            seg(4, 1000, 1000),
            seg(5, 0, 0),
        ];
        assert_eq!(pick_victims(&s, Some(4), 0.10, 10), vec![5, 3, 2]);
        assert_eq!(pick_victims(&s, None, 0.5, 2), vec![4, 5]);
        assert!(pick_victims(&s[..1], None, 0.10, 10).is_empty());
    }
}
