//! Decides which merge runs next (a level into the next, or L1's runs into one), and how
//! large each level may grow (its target).
//! Pure: looks at sizes, busy flags and the average flushed run, does no I/O.

/// What the picker sees of one level.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LevelShape {
    /// Bytes the level weighs against its target: its files, plus its medium values in
    /// full when the next level is the merge level (merging will write them there).
    pub bytes: u64,
    /// What a merge from the level above rewrites of this level: its files, and its
    /// medium values only if this is the merge level (above it, they stay in the transient
    /// log until this level's own merge into the merge level writes them).
    pub rewritten_bytes: u64,
    /// Target size of the level.
    pub target: u64,
    /// A job is reading or writing this level.
    pub busy: bool,
    /// Sorted runs in the level.
    pub runs: usize,
    /// Runs that make the level due for a merge on their own (0: no limit).
    pub run_limit: usize,
    /// What the run limit counts: for L1, the runs flushed into it since its last merge
    /// into the next level (a merge within L1 leaves fewer runs, not fewer flushes, so
    /// it never puts off that merge); elsewhere its runs.
    pub runs_since_merge: usize,
    /// Estimated bytes of older versions, in this level or the next, that this level's
    /// runs shadow (a merge into the next level drops them).
    pub dead_bytes: u64,
    /// Clients' gets that searched this level's runs in vain, weighed in bytes of merging
    /// (`Options::merge_bytes_per_wasted_search`): once they reach what a merge into the
    /// next level rewrites, the merge has been paid for.
    pub wasted_bytes: u64,
}

/// A level is due for a merge once the estimated dead share of what the merge rewrites (it,
/// and what the merge rewrites of the next level) reaches this, so that data that is overwritten but never fills the
/// level keeps space within about 1.5x.
const DEAD_SHARE_DUE: f64 = 1.0 / 3.0;

/// Weight of the newest flush in [`average_run_bytes`] (one in four).
const RUN_AVERAGE_WEIGHT: u64 = 4;

/// The moving average of the bytes each flush adds to L1: `previous` (0: none yet) moved a
/// quarter of the way to `run` (a flush that wrote nothing leaves it as it is).
pub(crate) fn average_run_bytes(previous: u64, run: u64) -> u64 {
    match (previous, run) {
        (_, 0) => previous,
        (0, r) => r,
        (p, r) => p - p / RUN_AVERAGE_WEIGHT + r / RUN_AVERAGE_WEIGHT,
    }
}

/// The bytes a flushed run of `entries` and `bytes` would have had if its memtable had held
/// `budget` bytes of distinct keys: bytes per entry times the versions such a memtable
/// holds (`versions` per `mem_bytes` of the memtable flushed). Saturates; 0 when nothing
/// is known.
pub(crate) fn full_run_bytes(
    bytes: u64,
    entries: u64,
    versions: u64,
    mem_bytes: u64,
    budget: u64,
) -> u64 {
    if entries == 0 || mem_bytes == 0 {
        return 0;
    }
    let scaled = u128::from(bytes)
        .saturating_mul(u128::from(versions))
        .saturating_mul(u128::from(budget))
        / (u128::from(entries) * u128::from(mem_bytes));
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

/// Target bytes of levels 1..=`levels`. L1's is `growth` memtables, but L1 is also due
/// once it holds `growth` runs; each level below is `growth` times what the level above
/// holds when it is due: `growth` times the smaller of L1's target and `growth` flushed
/// runs of `run_bytes` (their average; 0 before the first flush: L1's target), then times
/// `growth` again per level. A run is smaller than its memtable (large values stay in the
/// large log, medium ones in the transient log above the merge level), so targets
/// counted in memtables would let L2 grow to many times what L1 hands it, and every merge
/// of L1 would rewrite all of it (at 40 million SD pairs L2 reached 11x, and merges wrote
/// each pair about 7 times; at 8x, a simulation of the same load gives 5.9).
pub(crate) fn level_targets(memtable: u64, growth: u32, run_bytes: u64, levels: usize) -> Vec<u64> {
    let growth = u64::from(growth.max(1));
    let l1 = memtable.saturating_mul(growth);
    let l1_due = match run_bytes {
        0 => l1,
        r => l1.min(r.saturating_mul(growth)),
    };
    let below = std::iter::successors(Some(l1_due.saturating_mul(growth)), |t| {
        Some(t.saturating_mul(growth))
    });
    std::iter::once(l1).chain(below).take(levels).collect()
}

/// A merge the picker chose; levels are 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MergePick {
    /// Every run of the level and of the next into one run of the next.
    Down(usize),
    /// Every run of a tiered level (L1) into one run of that level, placed below the runs
    /// flushed while it ran: the searches its runs waste paid for rewriting them, but not
    /// yet for rewriting the next level with them.
    Within(usize),
}

impl MergePick {
    /// The level the merge reads runs from (and, for [`MergePick::Within`], writes to).
    pub(crate) fn source(self) -> usize {
        match self {
            MergePick::Down(l) | MergePick::Within(l) => l,
        }
    }
}

/// Picks the merge to run: the level (1-based) most over its target, among those whose
/// source and destination are idle, merged into the next ([`MergePick::Down`]); or, when
/// a tiered level's wasted searches paid for rewriting its own runs but not yet for a
/// merge into the next, its runs into one ([`MergePick::Within`]). The last level is never
/// a source. Both kinds keep the level and the next busy while they run.
pub(crate) fn pick(levels: &[LevelShape]) -> Option<MergePick> {
    let mut best: Option<(MergePick, f64)> = None;
    for (i, pair) in levels.windows(2).enumerate() {
        let [src, dst] = pair else { continue };
        if src.busy || dst.busy || src.bytes == 0 || src.target == 0 {
            continue;
        }
        let mut score = src.bytes as f64 / src.target as f64;
        if src.run_limit > 0 {
            let runs = src.runs.max(src.runs_since_merge);
            score = score.max(runs as f64 / src.run_limit as f64);
        }
        if src.dead_bytes > 0 {
            let dead_share =
                src.dead_bytes as f64 / src.bytes.saturating_add(dst.rewritten_bytes) as f64;
            score = score.max(dead_share / DEAD_SHARE_DUE);
        }
        // Waste counts only where the merge leaves fewer runs to search: a lone run merged
        // into an empty level is searched just as before (a missing key's lookups charge
        // the deepest run they search, which may be the only one). It is weighed against
        // what this merge writes: the source in full (with its medium values when they
        // reach the merge level now) and what it rewrites of the destination, not the
        // medium values the destination will write at its own merge.
        if src.wasted_bytes > 0 && src.runs + dst.runs >= 2 {
            let rewrites = src.bytes.saturating_add(dst.rewritten_bytes);
            score = score.max(src.wasted_bytes as f64 / rewrites as f64);
        }
        let mut choice = (MergePick::Down(i + 1), score);
        // Searches wasted in a tiered level's runs that pay for rewriting those runs (its
        // files, and its medium values only if it is itself the merge level) but not for
        // the merge into the next: one run instead of several leaves a get one search in
        // the level instead of one per run, for a fraction of the rewrite.
        if score < 1.0 && src.run_limit > 0 && src.runs >= 2 && src.wasted_bytes > 0 {
            let within = src.wasted_bytes as f64 / src.rewritten_bytes.max(1) as f64;
            choice = (MergePick::Within(i + 1), within);
        }
        let (pick, score) = choice;
        if score >= 1.0 && best.is_none_or(|(_, s)| score > s) {
            best = Some((pick, score));
        }
    }
    best.map(|(pick, _)| pick)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(bytes: u64, target: u64) -> LevelShape {
        LevelShape {
            bytes,
            rewritten_bytes: bytes,
            target,
            busy: false,
            runs: 1,
            run_limit: 0,
            runs_since_merge: 0,
            dead_bytes: 0,
            wasted_bytes: 0,
        }
    }

    #[test]
    fn a_level_whose_wasted_searches_paid_for_its_merge_is_due() {
        let mut v = vec![shape(600, 10_000), shape(300, 80_000), shape(5_000, 0)];
        v[0].runs = 3;
        v[0].run_limit = 8;
        v[0].wasted_bytes = 599; // short of the 600 bytes of L1's own runs
        assert_eq!(pick(&v), None);
        v[0].wasted_bytes = 899; // short of the 900 bytes a merge into L2 rewrites
        assert_eq!(pick(&v), Some(MergePick::Within(1)));
        v[0].wasted_bytes = 900;
        assert_eq!(pick(&v), Some(MergePick::Down(1)));
        // The same waste in L2 weighs against L2 and L3 together.
        v[0].wasted_bytes = 0;
        v[1].wasted_bytes = 5_000;
        assert_eq!(pick(&v), None);
        v[1].wasted_bytes = 5_300;
        assert_eq!(pick(&v), Some(MergePick::Down(2)));
        // A busy destination waits, whatever the waste.
        v[2].busy = true;
        assert_eq!(pick(&v), None);
        // A lone run over an empty level: merging it saves no search.
        let mut w = vec![shape(600, 10_000), shape(0, 80_000)];
        w[1].runs = 0;
        w[0].wasted_bytes = 1_000_000;
        assert_eq!(pick(&w), None);
        w[0].runs = 2;
        assert_eq!(pick(&w), Some(MergePick::Down(1)));
    }

    #[test]
    fn waste_is_weighed_against_the_next_levels_files_not_its_medium_values() {
        // L2 weighs 2,300 bytes against its target (its 2,000 bytes of medium values go in
        // full into L3, the merge level, at L2's own merge); merging L1 into it rewrites
        // only its 300 bytes of files.
        let mut v = vec![shape(600, 10_000), shape(2_300, 80_000), shape(5_000, 0)];
        v[1].rewritten_bytes = 300;
        v[0].runs = 3;
        v[0].run_limit = 8;
        v[0].wasted_bytes = 899;
        assert_eq!(pick(&v), Some(MergePick::Within(1)));
        v[0].wasted_bytes = 900;
        assert_eq!(pick(&v), Some(MergePick::Down(1)));
        // The source counts in full (its `bytes`, which hold its medium values when the
        // next level is the merge level); merging its runs into one rewrites only its
        // files (`rewritten_bytes`), which the waste has paid for.
        v[0].bytes = 1_600;
        assert_eq!(pick(&v), Some(MergePick::Within(1)));
        v[0].wasted_bytes = 1_900;
        assert_eq!(pick(&v), Some(MergePick::Down(1)));
    }

    #[test]
    fn runs_of_a_tiered_level_whose_waste_paid_for_rewriting_them_merge_into_one() {
        // L1's 3 runs of 600 bytes over an L2 of 30,000: 600 bytes of waste pay for
        // merging L1's runs into one, 30,600 for merging them into L2.
        let mut v = vec![shape(600, 10_000), shape(30_000, 80_000), shape(0, 640_000)];
        v[0].runs = 3;
        v[0].run_limit = 8;
        v[0].wasted_bytes = 599;
        assert_eq!(pick(&v), None);
        v[0].wasted_bytes = 600;
        assert_eq!(pick(&v), Some(MergePick::Within(1)));
        assert_eq!(MergePick::Within(1).source(), 1);
        // When L1 is itself the merge level, its medium values are rewritten in place
        // too, and count.
        v[0].rewritten_bytes = 1_000;
        assert_eq!(pick(&v), None);
        v[0].wasted_bytes = 1_000;
        assert_eq!(pick(&v), Some(MergePick::Within(1)));
        // One run is already one search.
        v[0].runs = 1;
        assert_eq!(pick(&v), None);
        v[0].runs = 3;
        // Only a tiered level (one with a run limit): deeper levels hold one run each.
        v[0].run_limit = 0;
        assert_eq!(pick(&v), None);
        v[0].run_limit = 8;
        // Both levels idle: the merge holds L2 as a merge into it would.
        v[1].busy = true;
        assert_eq!(pick(&v), None);
        v[1].busy = false;
        // A level due on its own merges into the next, whatever its waste.
        v[0].runs = 8;
        assert_eq!(pick(&v), Some(MergePick::Down(1)));
        // So is L1 after as many flushes, though merges within it left it fewer runs.
        v[0].runs = 3;
        v[0].runs_since_merge = 7;
        assert_eq!(pick(&v), Some(MergePick::Within(1)));
        v[0].runs_since_merge = 8;
        assert_eq!(pick(&v), Some(MergePick::Down(1)));
        v[0].runs_since_merge = 3;
        v[0].bytes = 20_000;
        assert_eq!(pick(&v), Some(MergePick::Down(1)));
    }

    #[test]
    fn a_merge_within_l1_competes_with_other_levels_by_its_score() {
        // L1's waste pays 1.5 times for its runs; L2 is 1.2 times its target.
        let mut v = vec![shape(600, 10_000), shape(96_000, 80_000), shape(0, 640_000)];
        v[0].runs = 3;
        v[0].run_limit = 8;
        v[0].wasted_bytes = 900;
        assert_eq!(pick(&v), Some(MergePick::Within(1)));
        // L2 twice its target wins; with L2 busy in that merge, L1 waits for it (both
        // kinds of merge of L1 hold L2).
        v[1].bytes = 160_000;
        assert_eq!(pick(&v), Some(MergePick::Down(2)));
        v[1].busy = true;
        assert_eq!(pick(&v), None);
    }

    #[test]
    fn a_level_that_shadows_a_third_of_what_its_merge_rewrites_is_due() {
        let mut v = vec![shape(600, 10_000), shape(300, 80_000)];
        v[0].runs = 3;
        v[0].run_limit = 8;
        v[0].dead_bytes = 200; // 22% of the 900 bytes a merge rewrites: not yet
        assert_eq!(pick(&v), None);
        v[0].dead_bytes = 300; // a third
        assert_eq!(pick(&v), Some(MergePick::Down(1)));
        v[1].bytes = 30_000; // the same dead bytes are little beside a large next level
        v[1].rewritten_bytes = 30_000;
        assert_eq!(pick(&v), None);
        // Unless most of that level is medium values the merge does not rewrite.
        v[1].rewritten_bytes = 300;
        assert_eq!(pick(&v), Some(MergePick::Down(1)));
    }

    #[test]
    fn levels_below_l1_are_sized_from_what_l1_hands_down() {
        // Before any flush: memtables.
        assert_eq!(level_targets(10, 8, 0, 3), vec![80, 640, 5120]);
        // Runs of 4 bytes: L1 is due at 8 runs (32 bytes), L2 is 8x that.
        assert_eq!(level_targets(10, 8, 4, 3), vec![80, 256, 2048]);
        // Runs larger than a memtable (cannot be: L1's own target still bounds them).
        assert_eq!(level_targets(10, 8, 50, 2), vec![80, 640]);
        assert_eq!(level_targets(10, 8, 4, 0), Vec::<u64>::new());
        assert_eq!(level_targets(u64::MAX, 8, 0, 3)[2], u64::MAX);
    }

    #[test]
    fn a_run_is_scaled_to_a_full_memtable_of_distinct_keys() {
        // 1,000 versions of 1,000 keys in a 100,000-byte memtable flushed at 90,000 bytes:
        // a full one holds 1,111 of them.
        assert_eq!(
            full_run_bytes(50_000, 1_000, 1_000, 90_000, 100_000),
            55_555
        );
        // Overwrites: the same memtable held ten versions of each of 100 keys; the run
        // has 100 entries of 50 bytes, as a memtable of distinct keys would have 1,111.
        assert_eq!(full_run_bytes(5_000, 100, 1_000, 90_000, 100_000), 55_555);
        assert_eq!(full_run_bytes(5_000, 0, 1_000, 90_000, 100_000), 0);
        assert_eq!(full_run_bytes(u64::MAX, 1, u64::MAX, 1, u64::MAX), u64::MAX);
    }

    #[test]
    fn the_run_average_follows_recent_flushes_and_ignores_empty_ones() {
        assert_eq!(average_run_bytes(0, 100), 100);
        assert_eq!(average_run_bytes(100, 0), 100);
        assert_eq!(average_run_bytes(100, 200), 125);
        let mut avg = 100;
        for _ in 0..40 {
            avg = average_run_bytes(avg, 400);
        }
        assert!((395..=400).contains(&avg), "{avg}");
    }

    #[test]
    fn enough_runs_make_l1_due() {
        let mut v = vec![shape(100, 1000), shape(0, 8000)];
        v[0].runs = 7;
        v[0].run_limit = 8;
        assert_eq!(pick(&v), None);
        v[0].runs = 8;
        assert_eq!(pick(&v), Some(MergePick::Down(1)));
    }

    #[test]
    fn picks_most_overfull_idle_level() {
        let mut v = vec![
            shape(90, 100),
            shape(1200, 800),
            shape(9000, 6400),
            shape(0, 51200),
        ];
        assert_eq!(pick(&v), Some(MergePick::Down(2))); // 1.5 beats 1.4
        v[2].busy = true; // L2 -> L3 blocked by a job on L3
        assert_eq!(pick(&v), None);
        v[2].busy = false;
        v[0].bytes = 300; // L1 at 3x
        assert_eq!(pick(&v), Some(MergePick::Down(1)));
    }

    #[test]
    fn last_level_never_picked_and_nothing_under_target() {
        let v = vec![shape(10, 100), shape(1_000_000, 800)];
        assert_eq!(pick(&v), None);
        assert_eq!(pick(&[]), None);
    }
}
