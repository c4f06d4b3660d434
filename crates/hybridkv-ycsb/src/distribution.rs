//! Request distributions as YCSB defines them: zipfian (Gray et al.),
//! scrambled zipfian, skewed-latest and the insert counter.
//!
//! Generators hold only their precomputed constants; the random source is
//! passed to every draw, so one generator plus one seeded RNG gives a
//! reproducible stream, and a worker thread can own both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::{Rng, RngExt};

use crate::key::ycsb_hash;

/// YCSB's zipfian constant (`ZipfianGenerator.ZIPFIAN_CONSTANT`).
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// Item space of the zipfian generator inside [`ScrambledZipfianGenerator`]
/// (YCSB's `ScrambledZipfianGenerator.ITEM_COUNT`, ten billion).
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;

/// YCSB's precomputed zeta for the scrambled generator
/// (`ScrambledZipfianGenerator.ZETAN`): the sum over ten billion items of
/// `1 / i^0.99`.
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// The generalised harmonic number `sum_{i=1..=n} 1 / i^theta`, the "zeta"
/// of Gray et al.
#[must_use]
pub fn zeta(n: u64, theta: f64) -> f64 {
    zeta_extend(0, n, theta, 0.0)
}

/// Extends a zeta sum already computed over `from` items to `to` items:
/// `initial + sum_{i=from+1..=to} 1 / i^theta` (YCSB's incremental
/// `zetastatic(st, n, theta, initialsum)`). Returns `initial` if `to <= from`.
#[must_use]
pub fn zeta_extend(from: u64, to: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    let mut i = from;
    while i < to {
        i += 1;
        // Precision loss above 2^53 items is irrelevant for a harmonic sum.
        #[allow(clippy::cast_precision_loss)]
        let x = i as f64;
        sum += 1.0 / x.powf(theta);
    }
    sum
}

/// YCSB's `ZipfianGenerator`: item `base` is the most popular, `base + 1` the
/// next, and so on, with `P(rank r) ~ 1 / r^theta` (r = 1 for `base`).
///
/// It uses the rejection-free method of Gray et al., "Quickly Generating
/// Billion-Record Synthetic Databases" (SIGMOD 1994): with `u` uniform in
/// `[0, 1)`, `uz = u * zeta(n)`; `uz < 1` gives the first item,
/// `uz < 1 + 0.5^theta` the second, and otherwise the item is
/// `floor(n * (eta * u - eta + 1)^alpha)` with `alpha = 1 / (1 - theta)` and
/// `eta = (1 - (2/n)^(1-theta)) / (1 - zeta(2) / zeta(n))`. The first two
/// ranks are exact; the rest follow the continuous approximation, which gives
/// the head a few percent more mass than a true zipfian (e.g. the top 10 of
/// 10,000 items get 30.3% instead of 28.9%).
///
/// The item count may grow between draws ([`ZipfianGenerator::next_with_count`]):
/// zeta is then extended incrementally (only the new terms are summed), and
/// `eta` is recomputed. As in YCSB (whose `allowitemcountdecrease` defaults to
/// false), a *smaller* count than before keeps the larger zeta; results are
/// still clamped into the requested range.
#[derive(Debug, Clone, PartialEq)]
pub struct ZipfianGenerator {
    base: u64,
    items: u64,
    theta: f64,
    alpha: f64,
    zeta2theta: f64,
    zetan: f64,
    count_for_zeta: u64,
    eta: f64,
}

impl ZipfianGenerator {
    /// Zipfian over `0..items` with the YCSB constant 0.99. Computes zeta over
    /// all items (O(items) time, once). `items == 0` is treated as 1.
    #[must_use]
    pub fn new(items: u64) -> Self {
        Self::with_range(0, items.saturating_sub(1))
    }

    /// Zipfian over `min..=max` (swapped if given in the wrong order) with the
    /// YCSB constant 0.99.
    #[must_use]
    pub fn with_range(min: u64, max: u64) -> Self {
        let (min, max) = if min <= max { (min, max) } else { (max, min) };
        let items = (max - min).saturating_add(1);
        Self::with_zetan(min, max, ZIPFIAN_CONSTANT, zeta(items, ZIPFIAN_CONSTANT))
    }

    /// Zipfian over `min..=max` with the given constant `theta` and a
    /// precomputed `zetan` (which must be `zeta(max - min + 1, theta)` for the
    /// distribution to be right; YCSB's scrambled generator passes a fixed
    /// constant here). `theta` outside `(0, 1)` is replaced by 0.99.
    #[must_use]
    pub fn with_zetan(min: u64, max: u64, theta: f64, zetan: f64) -> Self {
        let (min, max) = if min <= max { (min, max) } else { (max, min) };
        let items = (max - min).saturating_add(1);
        let theta = if theta > 0.0 && theta < 1.0 {
            theta
        } else {
            ZIPFIAN_CONSTANT
        };
        let zeta2theta = zeta(2, theta);
        let mut generator = Self {
            base: min,
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2theta,
            zetan,
            count_for_zeta: items,
            eta: 0.0,
        };
        generator.eta = generator.eta_for(items);
        generator
    }

    fn eta_for(&self, count: u64) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let n = count as f64;
        (1.0 - (2.0 / n).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / self.zetan)
    }

    /// The smallest item (the most popular one).
    #[must_use]
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The item count given at construction.
    #[must_use]
    pub fn items(&self) -> u64 {
        self.items
    }

    /// The zipfian constant.
    #[must_use]
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// The current zeta(n) and the n it was computed for.
    #[must_use]
    pub fn zetan(&self) -> (f64, u64) {
        (self.zetan, self.count_for_zeta)
    }

    /// Draws an item from `base..base + items` (the construction count).
    pub fn next<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        self.next_with_count(rng, self.items)
    }

    /// Draws an item from `base..base + count` (YCSB's `nextLong(itemcount)`).
    /// If `count` exceeds the count zeta was computed for, zeta is extended
    /// incrementally first. `count == 0` returns `base`.
    pub fn next_with_count<R: Rng + ?Sized>(&mut self, rng: &mut R, count: u64) -> u64 {
        if count > self.count_for_zeta {
            self.zetan = zeta_extend(self.count_for_zeta, count, self.theta, self.zetan);
            self.count_for_zeta = count;
            self.eta = self.eta_for(count);
        }
        let u: f64 = rng.random();
        self.base.saturating_add(self.rank_for(u, count))
    }

    /// Maps a uniform `u` in `[0, 1)` to a 0-based rank below `count`.
    fn rank_for(&self, u: f64, count: u64) -> u64 {
        if count <= 1 {
            return 0;
        }
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        #[allow(clippy::cast_precision_loss)]
        let n = count as f64;
        let x = n * (self.eta * u - self.eta + 1.0).powf(self.alpha);
        // Float-to-int `as` saturates (and maps NaN to 0), so this cannot wrap;
        // the clamp keeps rounding at the top edge inside the range.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = x as u64;
        rank.min(count - 1)
    }
}

/// YCSB's `ScrambledZipfianGenerator`: zipfian popularity, but the popular
/// items are scattered over `min..=max` instead of clustered at `min`.
///
/// Faithful to YCSB: an inner [`ZipfianGenerator`] always draws from the fixed
/// space `0..=`[`SCRAMBLED_ITEM_COUNT`] (ten billion, independent of the real
/// item count) with the precomputed [`SCRAMBLED_ZETAN`] (so construction is
/// O(1)), and the draw is mapped to `min + ycsb_hash(draw) % item_count`.
///
/// Consequences (as in YCSB): the most popular item gets about `1 / 26.47 ~
/// 3.8%` of requests regardless of the item count, and because ten billion
/// ranks are folded onto `item_count` slots, the tail is flatter than a true
/// zipfian over `item_count` items (hash collisions can also merge two popular
/// ranks). Only the 0.99 constant is supported, since the zeta constant is
/// precomputed for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrambledZipfianGenerator {
    min: u64,
    item_count: u64,
    inner: ZipfianGenerator,
}

impl ScrambledZipfianGenerator {
    /// Scrambled zipfian over `0..items` (`items == 0` is treated as 1).
    #[must_use]
    pub fn new(items: u64) -> Self {
        Self::with_range(0, items.saturating_sub(1))
    }

    /// Scrambled zipfian over `min..=max` (swapped if in the wrong order).
    #[must_use]
    pub fn with_range(min: u64, max: u64) -> Self {
        let (min, max) = if min <= max { (min, max) } else { (max, min) };
        Self {
            min,
            item_count: (max - min).saturating_add(1),
            inner: ZipfianGenerator::with_zetan(
                0,
                SCRAMBLED_ITEM_COUNT,
                ZIPFIAN_CONSTANT,
                SCRAMBLED_ZETAN,
            ),
        }
    }

    /// Number of items the output is spread over.
    #[must_use]
    pub fn item_count(&self) -> u64 {
        self.item_count
    }

    /// Draws an item from `min..min + item_count`.
    pub fn next<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        let rank = self.inner.next(rng);
        self.min + ycsb_hash(rank) % self.item_count
    }
}

/// YCSB's `SkewedLatestGenerator`: favours the most recently inserted records.
///
/// Given the highest inserted record number `last`, a draw is `last -
/// zipfian.next_with_count(last)`, so `last` itself is the most popular, then
/// `last - 1`, and so on. The zipfian is created over the initial `last` items
/// and its zeta grows incrementally as records are inserted.
///
/// Faithful YCSB quirk: the zipfian draws from `0..last`, so results lie in
/// `1..=last` and record 0 is never chosen (except when `last == 0`).
#[derive(Debug, Clone, PartialEq)]
pub struct SkewedLatestGenerator {
    zipfian: ZipfianGenerator,
}

impl SkewedLatestGenerator {
    /// Creates the generator for an initial highest record number `last`
    /// (YCSB: `new ZipfianGenerator(basis.lastValue())`). O(last) time.
    #[must_use]
    pub fn new(last: u64) -> Self {
        Self {
            zipfian: ZipfianGenerator::new(last),
        }
    }

    /// Draws a record number in `1..=last` (0 if `last == 0`), skewed towards
    /// `last`.
    pub fn next<R: Rng + ?Sized>(&mut self, rng: &mut R, last: u64) -> u64 {
        if last == 0 {
            return 0;
        }
        last - self.zipfian.next_with_count(rng, last).min(last)
    }

    /// The underlying zipfian (for inspection).
    #[must_use]
    pub fn zipfian(&self) -> &ZipfianGenerator {
        &self.zipfian
    }
}

/// The insert counter (YCSB's `CounterGenerator`): hands out consecutive
/// record numbers and tells the distributions how many records exist.
///
/// It wraps an `Arc<AtomicU64>` holding the *next* record number, so clones
/// (one per worker thread) share it. The value counts inserts that have been
/// *issued*; unlike YCSB's `AcknowledgedCounterGenerator` it does not wait for
/// the insert to complete, so with several threads a read may target a record
/// whose insert another thread has generated but not yet executed.
#[derive(Debug, Clone)]
pub struct InsertCounter {
    next: Arc<AtomicU64>,
}

impl InsertCounter {
    /// A counter whose first handed-out record number is `start`.
    #[must_use]
    pub fn new(start: u64) -> Self {
        Self {
            next: Arc::new(AtomicU64::new(start)),
        }
    }

    /// A counter sharing an existing atomic.
    #[must_use]
    pub fn from_shared(next: Arc<AtomicU64>) -> Self {
        Self { next }
    }

    /// The shared atomic (the next record number to hand out).
    #[must_use]
    pub fn shared(&self) -> &Arc<AtomicU64> {
        &self.next
    }

    /// Takes the next record number.
    pub fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The number of records handed out so far, counting from 0
    /// (the next record number).
    #[must_use]
    pub fn count(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// The highest record number handed out (YCSB's `lastValue()`), or `None`
    /// if the counter is still at 0.
    #[must_use]
    pub fn last(&self) -> Option<u64> {
        self.count().checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::Xoshiro256PlusPlus;
    use rand::SeedableRng;

    #[test]
    fn zeta_small_values() {
        assert_eq!(zeta(0, 0.99), 0.0);
        assert_eq!(zeta(1, 0.99), 1.0);
        assert!((zeta(2, 0.99) - (1.0 + 0.5f64.powf(0.99))).abs() < 1e-15);
        let full = zeta(12_345, 0.99);
        let split = zeta_extend(5_000, 12_345, 0.99, zeta(5_000, 0.99));
        assert!((full - split).abs() < 1e-9);
    }

    #[test]
    fn scrambled_zetan_is_zeta_of_ten_billion() {
        // Check the constant without summing ten billion terms: the
        // Euler-Maclaurin expansion of sum_{i<=n} i^-s is
        // zeta(s) + n^(1-s)/(1-s) + n^-s/2 - s*n^(-s-1)/12, and the Riemann
        // zeta(0.99) = -99.4227843350984... (computed from its Laurent series
        // 1/(s-1) + gamma - gamma_1 (s-1)).
        let s = 0.99f64;
        let gamma = 0.577_215_664_901_532_9;
        let gamma1 = -0.072_815_845_483_676_72;
        let riemann = 1.0 / (s - 1.0) + gamma - gamma1 * (s - 1.0);
        let n = 1e10f64;
        let approx = riemann + n.powf(1.0 - s) / (1.0 - s) + n.powf(-s) / 2.0;
        assert!(
            (approx - SCRAMBLED_ZETAN).abs() < 1e-3,
            "{approx} vs {SCRAMBLED_ZETAN}"
        );
    }

    #[test]
    fn incremental_zeta_matches_full_computation() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let mut z = ZipfianGenerator::new(1_000);
        let mut seen_new = false;
        for count in [1_000u64, 1_500, 4_000, 5_000] {
            for _ in 0..20_000 {
                let v = z.next_with_count(&mut rng, count);
                assert!(v < count);
                seen_new |= v >= 1_000;
            }
        }
        let (zetan, n) = z.zetan();
        assert_eq!(n, 5_000);
        assert!((zetan - zeta(5_000, 0.99)).abs() < 1e-9);
        assert_eq!(z, {
            let mut fresh = ZipfianGenerator::new(1_000);
            fresh.next_with_count(&mut rng, 5_000);
            fresh
        });
        assert!(seen_new, "grown item space never produced a new item");
        // A smaller count than zeta's keeps zeta but stays in range.
        for _ in 0..10_000 {
            assert!(z.next_with_count(&mut rng, 3) < 3);
        }
        assert_eq!(z.zetan().1, 5_000);
    }

    #[test]
    fn degenerate_counts_stay_in_range() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(2);
        for items in [0u64, 1, 2, 3] {
            let mut z = ZipfianGenerator::new(items);
            for _ in 0..1_000 {
                assert!(z.next(&mut rng) < items.max(1));
            }
        }
        let mut z = ZipfianGenerator::with_range(10, 12);
        for _ in 0..1_000 {
            assert!((10..=12).contains(&z.next(&mut rng)));
        }
        let mut l = SkewedLatestGenerator::new(0);
        assert_eq!(l.next(&mut rng, 0), 0);
        for _ in 0..1_000 {
            let v = l.next(&mut rng, 5);
            assert!((1..=5).contains(&v));
        }
        let mut s = ScrambledZipfianGenerator::new(1);
        assert_eq!(s.next(&mut rng), 0);
    }

    #[test]
    fn scrambled_hottest_item_is_hash_of_rank_zero() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        let n = 1_000u64;
        let mut s = ScrambledZipfianGenerator::new(n);
        let mut counts = vec![0u32; n as usize];
        for _ in 0..200_000 {
            counts[s.next(&mut rng) as usize] += 1;
        }
        let hottest = (0..n as usize).max_by_key(|&i| counts[i]).unwrap() as u64;
        assert_eq!(hottest, ycsb_hash(0) % n);
    }

    #[test]
    fn counter_shares_state() {
        let c = InsertCounter::new(10);
        let d = c.clone();
        assert_eq!(c.last(), Some(9));
        assert_eq!(d.next(), 10);
        assert_eq!(c.next(), 11);
        assert_eq!(d.count(), 12);
        assert_eq!(InsertCounter::new(0).last(), None);
    }
}
