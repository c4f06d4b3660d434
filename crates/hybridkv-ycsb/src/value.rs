//! Value sizes from the Parallax paper's Table 1 and deterministic value bytes.
//!
//! Parallax evaluates with three key-value pair sizes built on 24-byte keys:
//! small (9-byte values, 33-byte pairs), medium (104-byte values, 128-byte
//! pairs) and large (1004-byte values, 1028-byte pairs), and six mixes giving
//! the percentage of pairs in each class (small-medium-large):
//!
//! | mix | small | medium | large |
//! |-----|------:|-------:|------:|
//! | S   | 100   | 0      | 0     |
//! | M   | 0     | 100    | 0     |
//! | L   | 0     | 0      | 100   |
//! | SD  | 60    | 20     | 20    |
//! | MD  | 20    | 60     | 20    |
//! | LD  | 20    | 20     | 60    |
//!
//! Every insert, update and read-modify-write draws its class independently
//! from the mix, so an update can move a key to a different class.

use std::fmt;
use std::str::FromStr;

use rand::{Rng, RngExt};

use crate::error::WorkloadError;

/// Size class of one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SizeClass {
    /// 9-byte value (33-byte pair with a 24-byte key).
    Small,
    /// 104-byte value (128-byte pair).
    Medium,
    /// 1004-byte value (1028-byte pair).
    Large,
}

impl SizeClass {
    /// All classes, smallest first.
    pub const ALL: [SizeClass; 3] = [SizeClass::Small, SizeClass::Medium, SizeClass::Large];

    /// Value length in bytes: 9, 104 or 1004.
    #[must_use]
    pub const fn value_len(self) -> usize {
        match self {
            Self::Small => 9,
            Self::Medium => 104,
            Self::Large => 1004,
        }
    }
}

/// One of the Parallax value-size mixes (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ValueMix {
    /// 100% small.
    S,
    /// 100% medium.
    M,
    /// 100% large. The default: closest to YCSB's default 1 KB record.
    #[default]
    L,
    /// 60% small, 20% medium, 20% large.
    SD,
    /// 20% small, 60% medium, 20% large.
    MD,
    /// 20% small, 20% medium, 60% large.
    LD,
}

impl ValueMix {
    /// All mixes in the paper's order.
    pub const ALL: [ValueMix; 6] = [
        ValueMix::S,
        ValueMix::M,
        ValueMix::L,
        ValueMix::SD,
        ValueMix::MD,
        ValueMix::LD,
    ];

    /// Percent of pairs that are `[small, medium, large]` (sums to 100).
    #[must_use]
    pub const fn percentages(self) -> [u32; 3] {
        match self {
            Self::S => [100, 0, 0],
            Self::M => [0, 100, 0],
            Self::L => [0, 0, 100],
            Self::SD => [60, 20, 20],
            Self::MD => [20, 60, 20],
            Self::LD => [20, 20, 60],
        }
    }

    /// The mix's name as used in the paper ("S", "SD", ...).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::S => "S",
            Self::M => "M",
            Self::L => "L",
            Self::SD => "SD",
            Self::MD => "MD",
            Self::LD => "LD",
        }
    }

    /// Draws a size class: one uniform integer in `0..100` compared against
    /// the cumulative percentages.
    pub fn draw<R: Rng + ?Sized>(self, rng: &mut R) -> SizeClass {
        let [small, medium, _] = self.percentages();
        let r: u32 = rng.random_range(0..100);
        if r < small {
            SizeClass::Small
        } else if r < small + medium {
            SizeClass::Medium
        } else {
            SizeClass::Large
        }
    }

    /// Expected value length in bytes under this mix.
    #[must_use]
    pub fn mean_value_len(self) -> f64 {
        let p = self.percentages();
        SizeClass::ALL
            .iter()
            .zip(p)
            .map(|(c, pct)| {
                #[allow(clippy::cast_precision_loss)]
                let len = c.value_len() as f64;
                len * f64::from(pct) / 100.0
            })
            .sum()
    }
}

impl FromStr for ValueMix {
    type Err = WorkloadError;

    /// Parses a mix name, ignoring ASCII case and surrounding whitespace.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        ValueMix::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| WorkloadError::UnknownValueMix(s.to_owned()))
    }
}

impl fmt::Display for ValueMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The value an operation writes: its size class and a seed for its bytes.
///
/// The bytes are not materialised until asked for ([`ValueSpec::fill`] or
/// [`ValueSpec::to_vec`]); the same spec always yields the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValueSpec {
    /// Size class drawn from the workload's [`ValueMix`].
    pub class: SizeClass,
    /// Seed of the byte stream.
    pub seed: u64,
}

impl ValueSpec {
    /// Value length in bytes.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.class.value_len()
    }

    /// Always false: every class has a non-zero length.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// Replaces the contents of `buf` with the value bytes (a SplitMix64
    /// stream started from `seed`, eight bytes per step, little-endian).
    pub fn fill(&self, buf: &mut Vec<u8>) {
        // Sized once, then written a word at a time (the benchmark's own cost per insert:
        // extending the vector eight bytes at a time took about as many instructions as a
        // memtable insert).
        buf.clear();
        buf.resize(self.len(), 0);
        let mut state = self.seed;
        let mut words = buf.chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&splitmix64(&mut state).to_le_bytes());
        }
        let rest = words.into_remainder();
        let n = rest.len();
        rest.copy_from_slice(&splitmix64(&mut state).to_le_bytes()[..n]);
    }

    /// The value bytes in a new vector.
    #[must_use]
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.fill(&mut v);
        v
    }
}

/// One step of SplitMix64 (Steele, Lea and Flood): advances `state` and
/// returns a well-mixed 64-bit output.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_mix_names() {
        for m in ValueMix::ALL {
            assert_eq!(m.name().parse::<ValueMix>().unwrap(), m);
            assert_eq!(m.name().to_lowercase().parse::<ValueMix>().unwrap(), m);
            assert_eq!(m.percentages().iter().sum::<u32>(), 100);
        }
        assert_eq!(" sd ".parse::<ValueMix>().unwrap(), ValueMix::SD);
        assert!(matches!(
            "XL".parse::<ValueMix>(),
            Err(WorkloadError::UnknownValueMix(s)) if s == "XL"
        ));
        assert!("".parse::<ValueMix>().is_err());
    }

    #[test]
    fn value_bytes_are_deterministic_and_sized() {
        for class in SizeClass::ALL {
            let a = ValueSpec { class, seed: 42 };
            let b = ValueSpec { class, seed: 43 };
            assert_eq!(a.to_vec().len(), class.value_len());
            assert_eq!(a.to_vec(), a.to_vec());
            assert_ne!(a.to_vec(), b.to_vec());
            let mut buf = vec![1, 2, 3];
            a.fill(&mut buf);
            assert_eq!(buf, a.to_vec());
        }
        // The stream is SplitMix64's words, little-endian, cut at the value's length (as
        // every earlier result file's values were).
        for class in SizeClass::ALL {
            let spec = ValueSpec { class, seed: 99 };
            let mut state = 99;
            let mut expected = Vec::new();
            while expected.len() < class.value_len() {
                expected.extend_from_slice(&splitmix64(&mut state).to_le_bytes());
            }
            expected.truncate(class.value_len());
            assert_eq!(spec.to_vec(), expected);
        }
        // A longer value starts with the bytes of a shorter one (same stream).
        let small = ValueSpec {
            class: SizeClass::Small,
            seed: 7,
        }
        .to_vec();
        let large = ValueSpec {
            class: SizeClass::Large,
            seed: 7,
        }
        .to_vec();
        assert_eq!(&large[..9], &small[..]);
        assert!(
            (ValueMix::SD.mean_value_len() - (0.6 * 9.0 + 0.2 * 104.0 + 0.2 * 1004.0)).abs() < 1e-9
        );
    }
}
