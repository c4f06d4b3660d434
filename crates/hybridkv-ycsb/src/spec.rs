//! Workload specifications and YCSB property files.
//!
//! A [`WorkloadSpec`] is the data a YCSB property file describes: counts,
//! operation proportions, request distribution, scan lengths and insert order
//! (plus this crate's value-size mix). [`WorkloadSpec::parse`] reads the
//! `key=value` format:
//!
//! * one property per line, `key=value`, split at the first `=`; key and value
//!   are trimmed of surrounding whitespace;
//! * blank lines and lines whose first non-blank character is `#` or `!` are
//!   comments; there are no trailing comments (as in Java properties), so
//!   `recordcount=10 # note` is an invalid number;
//! * keys are case-sensitive; the enumerated values (`zipfian`, `hashed`, ...)
//!   are matched ignoring ASCII case;
//! * a key given twice takes its last value (as in Java);
//! * Java's `:` separator and `\` line continuations are not supported.
//!
//! Recognised keys and defaults (the defaults are YCSB's `CoreWorkload`
//! defaults):
//!
//! | key | default | accepted |
//! |-----|---------|----------|
//! | `recordcount` | 0 | non-negative integer |
//! | `operationcount` | 0 (no limit) | non-negative integer |
//! | `readproportion` | 0.95 | number in `[0, 1]` |
//! | `updateproportion` | 0.05 | number in `[0, 1]` |
//! | `insertproportion` | 0 | number in `[0, 1]` |
//! | `scanproportion` | 0 | number in `[0, 1]` |
//! | `readmodifywriteproportion` | 0 | number in `[0, 1]` |
//! | `requestdistribution` | `uniform` | `uniform`, `zipfian`, `latest` |
//! | `minscanlength` | 1 | integer >= 1 |
//! | `maxscanlength` | 1000 | integer >= `minscanlength` |
//! | `scanlengthdistribution` | `uniform` | `uniform` only |
//! | `insertorder` | `hashed` | `hashed`, `ordered` |
//! | `valuemix` (hybridkv extension) | `L` | `S`, `M`, `L`, `SD`, `MD`, `LD` |
//!
//! The proportions must each lie in `[0, 1]` and must not all be zero. They
//! need not sum to 1: like YCSB's `DiscreteGenerator`, the generator divides
//! each by their sum (so `0.5/0.5/0.5` means a third each). The spec keeps the
//! values as written; [`Proportions::normalized`] gives the divided ones.
//!
//! Any other key (`workload`, `fieldcount`, `readallfields`, `zeropadding`,
//! ...) is ignored and returned in [`ParsedProperties::unknown_keys`].

use std::str::FromStr;

use crate::error::{PropertyError, WorkloadError};
use crate::key::InsertOrder;
use crate::value::ValueMix;

/// How operations choose the record they touch (`requestdistribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RequestDistribution {
    /// Uniform over all records that exist when the operation is generated
    /// (loaded plus inserted so far).
    #[default]
    Uniform,
    /// YCSB's `zipfian`, which in `CoreWorkload` is a
    /// [`ScrambledZipfianGenerator`](crate::ScrambledZipfianGenerator) over
    /// `recordcount + 2 * operationcount * insertproportion` items; draws that
    /// name a record not inserted yet are redrawn (after 65,536 failed redraws
    /// the draw is reduced modulo the record count). With `operationcount=0`
    /// the space has no room for inserts, so, as in YCSB, records inserted
    /// during the run are never chosen.
    Zipfian,
    /// YCSB's `latest`: a [`SkewedLatestGenerator`](crate::SkewedLatestGenerator)
    /// following the insert counter, so the newest records are the hottest.
    Latest,
}

impl RequestDistribution {
    /// The property-file name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::Zipfian => "zipfian",
            Self::Latest => "latest",
        }
    }
}

/// Operation proportions, in YCSB's order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Proportions {
    /// `readproportion`.
    pub read: f64,
    /// `updateproportion`.
    pub update: f64,
    /// `insertproportion`.
    pub insert: f64,
    /// `scanproportion`.
    pub scan: f64,
    /// `readmodifywriteproportion`.
    pub read_modify_write: f64,
}

impl Default for Proportions {
    /// YCSB's defaults: 95% reads, 5% updates.
    fn default() -> Self {
        Self {
            read: 0.95,
            update: 0.05,
            insert: 0.0,
            scan: 0.0,
            read_modify_write: 0.0,
        }
    }
}

impl Proportions {
    /// The five values in YCSB's order: read, update, insert, scan,
    /// read-modify-write.
    #[must_use]
    pub const fn as_array(&self) -> [f64; 5] {
        [
            self.read,
            self.update,
            self.insert,
            self.scan,
            self.read_modify_write,
        ]
    }

    /// Sum of the five proportions.
    #[must_use]
    pub fn sum(&self) -> f64 {
        self.as_array().iter().sum()
    }

    /// The proportions divided by their sum (unchanged if the sum is 0).
    #[must_use]
    pub fn normalized(&self) -> Self {
        let s = self.sum();
        if s > 0.0 {
            Self {
                read: self.read / s,
                update: self.update / s,
                insert: self.insert / s,
                scan: self.scan / s,
                read_modify_write: self.read_modify_write / s,
            }
        } else {
            *self
        }
    }

    /// Checks each value is finite and in `[0, 1]` and that not all are 0.
    ///
    /// # Errors
    /// [`PropertyError::ProportionOutOfRange`] (reported with line 0, since a
    /// spec built in code has no lines) or [`PropertyError::NoOperations`].
    pub fn validate(&self) -> Result<(), PropertyError> {
        for (key, value) in PROPORTION_KEYS.iter().zip(self.as_array()) {
            if !(0.0..=1.0).contains(&value) {
                return Err(PropertyError::ProportionOutOfRange {
                    line: 0,
                    key: (*key).to_owned(),
                    value,
                });
            }
        }
        if self.sum() > 0.0 {
            Ok(())
        } else {
            Err(PropertyError::NoOperations)
        }
    }
}

const PROPORTION_KEYS: [&str; 5] = [
    "readproportion",
    "updateproportion",
    "insertproportion",
    "scanproportion",
    "readmodifywriteproportion",
];

/// Everything needed to generate a YCSB workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadSpec {
    /// Records loaded before the run phase (`recordcount`).
    pub record_count: u64,
    /// Run-phase operations over all threads (`operationcount`); 0 means no
    /// limit. It also sizes the zipfian key space for inserts.
    pub operation_count: u64,
    /// Operation proportions.
    pub proportions: Proportions,
    /// Record-choice distribution for reads, updates, scans and
    /// read-modify-writes.
    pub request_distribution: RequestDistribution,
    /// Shortest scan (`minscanlength`, >= 1).
    pub min_scan_length: usize,
    /// Longest scan (`maxscanlength`); scan lengths are uniform in
    /// `min_scan_length..=max_scan_length`.
    pub max_scan_length: usize,
    /// Hashed or ordered keys (`insertorder`).
    pub insert_order: InsertOrder,
    /// Value sizes (`valuemix`, a hybridkv extension).
    pub value_mix: ValueMix,
}

impl Default for WorkloadSpec {
    /// YCSB's `CoreWorkload` defaults, no records, no operation limit, mix L.
    fn default() -> Self {
        Self {
            record_count: 0,
            operation_count: 0,
            proportions: Proportions::default(),
            request_distribution: RequestDistribution::Uniform,
            min_scan_length: 1,
            max_scan_length: 1000,
            insert_order: InsertOrder::Hashed,
            value_mix: ValueMix::default(),
        }
    }
}

/// A key the parser did not use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    /// 1-based line number.
    pub line: usize,
    /// The key as written.
    pub key: String,
}

/// Result of [`WorkloadSpec::parse`].
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedProperties {
    /// The parsed spec (defaults for keys not given).
    pub spec: WorkloadSpec,
    /// Keys that were ignored, in file order.
    pub unknown_keys: Vec<UnknownKey>,
}

/// YCSB's workload A (update heavy): 50% reads, 50% updates, zipfian.
pub const CORE_WORKLOAD_A: &str = "\
# YCSB core workload A: update heavy (session store).
# Read/update 50/50, zipfian request distribution.
# recordcount and operationcount are left to the caller.
workload=site.ycsb.workloads.CoreWorkload
readallfields=true
readproportion=0.5
updateproportion=0.5
scanproportion=0
insertproportion=0
requestdistribution=zipfian
";

/// YCSB's workload B (read mostly): 95% reads, 5% updates, zipfian.
pub const CORE_WORKLOAD_B: &str = "\
# YCSB core workload B: read mostly (photo tagging).
# Read/update 95/5, zipfian request distribution.
workload=site.ycsb.workloads.CoreWorkload
readallfields=true
readproportion=0.95
updateproportion=0.05
scanproportion=0
insertproportion=0
requestdistribution=zipfian
";

/// YCSB's workload C (read only): 100% reads, zipfian.
pub const CORE_WORKLOAD_C: &str = "\
# YCSB core workload C: read only (user profile cache).
# Read 100, zipfian request distribution.
workload=site.ycsb.workloads.CoreWorkload
readallfields=true
readproportion=1
updateproportion=0
scanproportion=0
insertproportion=0
requestdistribution=zipfian
";

/// YCSB's workload D (read latest): 95% reads, 5% inserts, latest.
pub const CORE_WORKLOAD_D: &str = "\
# YCSB core workload D: read latest (status updates).
# Read/update/insert 95/0/5, latest request distribution.
workload=site.ycsb.workloads.CoreWorkload
readallfields=true
readproportion=0.95
updateproportion=0
scanproportion=0
insertproportion=0.05
requestdistribution=latest
";

/// YCSB's workload E (short ranges): 95% scans, 5% inserts, zipfian start
/// keys, scan lengths uniform in 1..=100.
pub const CORE_WORKLOAD_E: &str = "\
# YCSB core workload E: short ranges (threaded conversations).
# Scan/insert 95/5, zipfian start keys, scan length uniform up to 100.
workload=site.ycsb.workloads.CoreWorkload
readallfields=true
readproportion=0
updateproportion=0
scanproportion=0.95
insertproportion=0.05
requestdistribution=zipfian
maxscanlength=100
scanlengthdistribution=uniform
";

/// YCSB's workload F (read-modify-write): 50% reads, 50% RMW, zipfian.
pub const CORE_WORKLOAD_F: &str = "\
# YCSB core workload F: read-modify-write (user database).
# Read/read-modify-write 50/50, zipfian request distribution.
workload=site.ycsb.workloads.CoreWorkload
readallfields=true
readproportion=0.5
updateproportion=0
scanproportion=0
insertproportion=0
readmodifywriteproportion=0.5
requestdistribution=zipfian
";

impl WorkloadSpec {
    /// The property text of core workload `letter` (`a`..=`f`, any case).
    ///
    /// # Errors
    /// [`WorkloadError::UnknownCoreWorkload`] for any other character.
    pub fn core_text(letter: char) -> Result<&'static str, WorkloadError> {
        match letter.to_ascii_lowercase() {
            'a' => Ok(CORE_WORKLOAD_A),
            'b' => Ok(CORE_WORKLOAD_B),
            'c' => Ok(CORE_WORKLOAD_C),
            'd' => Ok(CORE_WORKLOAD_D),
            'e' => Ok(CORE_WORKLOAD_E),
            'f' => Ok(CORE_WORKLOAD_F),
            _ => Err(WorkloadError::UnknownCoreWorkload(letter)),
        }
    }

    /// The built-in spec of core workload `letter` (`a`..=`f`, any case),
    /// with `record_count` and `operation_count` 0 for the caller to set.
    ///
    /// # Errors
    /// [`WorkloadError::UnknownCoreWorkload`] for any other character.
    pub fn core(letter: char) -> Result<Self, WorkloadError> {
        let p = |read, update, insert, scan, read_modify_write| Proportions {
            read,
            update,
            insert,
            scan,
            read_modify_write,
        };
        let base = Self::default();
        let spec = match letter.to_ascii_lowercase() {
            'a' => Self {
                proportions: p(0.5, 0.5, 0.0, 0.0, 0.0),
                request_distribution: RequestDistribution::Zipfian,
                ..base
            },
            'b' => Self {
                proportions: p(0.95, 0.05, 0.0, 0.0, 0.0),
                request_distribution: RequestDistribution::Zipfian,
                ..base
            },
            'c' => Self {
                proportions: p(1.0, 0.0, 0.0, 0.0, 0.0),
                request_distribution: RequestDistribution::Zipfian,
                ..base
            },
            'd' => Self {
                proportions: p(0.95, 0.0, 0.05, 0.0, 0.0),
                request_distribution: RequestDistribution::Latest,
                ..base
            },
            'e' => Self {
                proportions: p(0.0, 0.0, 0.05, 0.95, 0.0),
                request_distribution: RequestDistribution::Zipfian,
                max_scan_length: 100,
                ..base
            },
            'f' => Self {
                proportions: p(0.5, 0.0, 0.0, 0.0, 0.5),
                request_distribution: RequestDistribution::Zipfian,
                ..base
            },
            _ => return Err(WorkloadError::UnknownCoreWorkload(letter)),
        };
        Ok(spec)
    }

    /// Checks the invariants the parser enforces, for specs built in code.
    ///
    /// # Errors
    /// The same [`PropertyError`]s the parser returns (with line 0).
    pub fn validate(&self) -> Result<(), PropertyError> {
        self.proportions.validate()?;
        if self.min_scan_length == 0 {
            return Err(PropertyError::ZeroScanLength {
                line: 0,
                key: "minscanlength".to_owned(),
            });
        }
        if self.min_scan_length > self.max_scan_length {
            return Err(PropertyError::ScanLengthRange {
                min: self.min_scan_length as u64,
                max: self.max_scan_length as u64,
            });
        }
        Ok(())
    }

    /// Parses a YCSB property file (format in the module docs). Keys not
    /// given keep [`WorkloadSpec::default`] values.
    ///
    /// # Errors
    /// A [`PropertyError`] naming the line and key of the first problem, or
    /// [`PropertyError::NoOperations`] / [`PropertyError::ScanLengthRange`]
    /// for problems that span lines.
    pub fn parse(text: &str) -> Result<ParsedProperties, PropertyError> {
        let mut spec = Self::default();
        let mut unknown_keys = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
                continue;
            }
            let Some((key, value)) = trimmed.split_once('=') else {
                return Err(PropertyError::MissingSeparator {
                    line,
                    text: trimmed.to_owned(),
                });
            };
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() {
                return Err(PropertyError::EmptyKey { line });
            }
            let field = Field { line, key, value };
            match key {
                "recordcount" => spec.record_count = field.integer()?,
                "operationcount" => spec.operation_count = field.integer()?,
                "readproportion" => spec.proportions.read = field.proportion()?,
                "updateproportion" => spec.proportions.update = field.proportion()?,
                "insertproportion" => spec.proportions.insert = field.proportion()?,
                "scanproportion" => spec.proportions.scan = field.proportion()?,
                "readmodifywriteproportion" => {
                    spec.proportions.read_modify_write = field.proportion()?;
                }
                "requestdistribution" => {
                    spec.request_distribution = field.choice(
                        &[
                            ("uniform", RequestDistribution::Uniform),
                            ("zipfian", RequestDistribution::Zipfian),
                            ("latest", RequestDistribution::Latest),
                        ],
                        "uniform, zipfian, latest",
                    )?;
                }
                "minscanlength" => spec.min_scan_length = field.scan_length()?,
                "maxscanlength" => spec.max_scan_length = field.scan_length()?,
                "scanlengthdistribution" => {
                    field.choice(&[("uniform", ())], "uniform")?;
                }
                "insertorder" => {
                    spec.insert_order = field.choice(
                        &[
                            ("hashed", InsertOrder::Hashed),
                            ("ordered", InsertOrder::Ordered),
                        ],
                        "hashed, ordered",
                    )?;
                }
                "valuemix" => {
                    spec.value_mix =
                        ValueMix::from_str(value).map_err(|_| PropertyError::UnsupportedValue {
                            line,
                            key: key.to_owned(),
                            value: value.to_owned(),
                            supported: "S, M, L, SD, MD, LD",
                        })?;
                }
                _ => unknown_keys.push(UnknownKey {
                    line,
                    key: key.to_owned(),
                }),
            }
        }
        if spec.proportions.sum() <= 0.0 {
            return Err(PropertyError::NoOperations);
        }
        if spec.min_scan_length > spec.max_scan_length {
            return Err(PropertyError::ScanLengthRange {
                min: spec.min_scan_length as u64,
                max: spec.max_scan_length as u64,
            });
        }
        Ok(ParsedProperties { spec, unknown_keys })
    }
}

/// One `key=value` line being interpreted.
struct Field<'a> {
    line: usize,
    key: &'a str,
    value: &'a str,
}

impl Field<'_> {
    fn invalid(&self, expected: &'static str) -> PropertyError {
        PropertyError::InvalidNumber {
            line: self.line,
            key: self.key.to_owned(),
            value: self.value.to_owned(),
            expected,
        }
    }

    fn integer(&self) -> Result<u64, PropertyError> {
        self.value
            .parse()
            .map_err(|_| self.invalid("non-negative integer"))
    }

    fn scan_length(&self) -> Result<usize, PropertyError> {
        let n: usize = self
            .value
            .parse()
            .map_err(|_| self.invalid("positive integer"))?;
        if n == 0 {
            return Err(PropertyError::ZeroScanLength {
                line: self.line,
                key: self.key.to_owned(),
            });
        }
        Ok(n)
    }

    fn proportion(&self) -> Result<f64, PropertyError> {
        let v: f64 = self.value.parse().map_err(|_| self.invalid("number"))?;
        if (0.0..=1.0).contains(&v) {
            Ok(v)
        } else {
            Err(PropertyError::ProportionOutOfRange {
                line: self.line,
                key: self.key.to_owned(),
                value: v,
            })
        }
    }

    fn choice<T: Copy>(
        &self,
        options: &[(&str, T)],
        supported: &'static str,
    ) -> Result<T, PropertyError> {
        options
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(self.value))
            .map(|&(_, v)| v)
            .ok_or_else(|| PropertyError::UnsupportedValue {
                line: self.line,
                key: self.key.to_owned(),
                value: self.value.to_owned(),
                supported,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_text_parses_to_builtin_struct() {
        for letter in ['a', 'b', 'c', 'd', 'e', 'f'] {
            let parsed = WorkloadSpec::parse(WorkloadSpec::core_text(letter).unwrap()).unwrap();
            assert_eq!(
                parsed.spec,
                WorkloadSpec::core(letter).unwrap(),
                "workload {letter}"
            );
            let ignored: Vec<&str> = parsed.unknown_keys.iter().map(|k| k.key.as_str()).collect();
            assert_eq!(ignored, ["workload", "readallfields"], "workload {letter}");
            assert_eq!(
                WorkloadSpec::core(letter.to_ascii_uppercase()).unwrap(),
                parsed.spec
            );
            parsed.spec.validate().unwrap();
        }
        assert_eq!(
            WorkloadSpec::core('g'),
            Err(WorkloadError::UnknownCoreWorkload('g'))
        );
        assert!(WorkloadSpec::core_text('z').is_err());
    }

    #[test]
    fn parses_comments_whitespace_and_all_keys() {
        let text = "\
# comment
   ! another comment

  recordcount =  1000  \r
operationcount=5000
readproportion= 0.25
updateproportion=0.25
insertproportion=0.25
scanproportion=0
readmodifywriteproportion=0.25
requestdistribution=Latest
minscanlength=2
maxscanlength=50
scanlengthdistribution=uniform
insertorder=ordered
valuemix=md
fieldcount=10
recordcount=2000
";
        let p = WorkloadSpec::parse(text).unwrap();
        let s = p.spec;
        assert_eq!(s.record_count, 2000, "last value of a repeated key wins");
        assert_eq!(s.operation_count, 5000);
        assert_eq!(
            s.proportions,
            Proportions {
                read: 0.25,
                update: 0.25,
                insert: 0.25,
                scan: 0.0,
                read_modify_write: 0.25
            }
        );
        assert_eq!(s.request_distribution, RequestDistribution::Latest);
        assert_eq!((s.min_scan_length, s.max_scan_length), (2, 50));
        assert_eq!(s.insert_order, InsertOrder::Ordered);
        assert_eq!(s.value_mix, ValueMix::MD);
        assert_eq!(
            p.unknown_keys,
            vec![UnknownKey {
                line: 17,
                key: "fieldcount".into()
            }]
        );
    }

    #[test]
    fn empty_file_gives_ycsb_defaults() {
        let p = WorkloadSpec::parse("").unwrap();
        assert_eq!(p.spec, WorkloadSpec::default());
        assert!(p.unknown_keys.is_empty());
    }

    #[test]
    fn errors_name_line_and_key() {
        let err = |t: &str| WorkloadSpec::parse(t).unwrap_err();
        assert_eq!(
            err("recordcount=10\nreadproportion=1.5\n"),
            PropertyError::ProportionOutOfRange {
                line: 2,
                key: "readproportion".into(),
                value: 1.5
            }
        );
        assert!(matches!(
            err("updateproportion=-0.1"),
            PropertyError::ProportionOutOfRange { line: 1, .. }
        ));
        assert!(matches!(
            err("readproportion=NaN"),
            PropertyError::ProportionOutOfRange { line: 1, .. }
        ));
        assert_eq!(
            err("\n\nrecordcount=ten"),
            PropertyError::InvalidNumber {
                line: 3,
                key: "recordcount".into(),
                value: "ten".into(),
                expected: "non-negative integer"
            }
        );
        assert!(matches!(
            err("operationcount=-5"),
            PropertyError::InvalidNumber { line: 1, .. }
        ));
        assert!(matches!(
            err("recordcount=10 # trailing"),
            PropertyError::InvalidNumber { line: 1, .. }
        ));
        assert_eq!(
            err("# c\njust some words"),
            PropertyError::MissingSeparator {
                line: 2,
                text: "just some words".into()
            }
        );
        assert_eq!(err(" = 3"), PropertyError::EmptyKey { line: 1 });
        assert_eq!(
            err("scanlengthdistribution=zipfian"),
            PropertyError::UnsupportedValue {
                line: 1,
                key: "scanlengthdistribution".into(),
                value: "zipfian".into(),
                supported: "uniform"
            }
        );
        assert!(matches!(
            err("requestdistribution=hotspot"),
            PropertyError::UnsupportedValue { line: 1, .. }
        ));
        assert!(matches!(
            err("insertorder=random"),
            PropertyError::UnsupportedValue { line: 1, .. }
        ));
        assert!(matches!(
            err("valuemix=XL"),
            PropertyError::UnsupportedValue { line: 1, .. }
        ));
        assert_eq!(
            err("maxscanlength=0"),
            PropertyError::ZeroScanLength {
                line: 1,
                key: "maxscanlength".into()
            }
        );
        assert_eq!(
            err("minscanlength=20\nmaxscanlength=10"),
            PropertyError::ScanLengthRange { min: 20, max: 10 }
        );
        assert_eq!(
            err("readproportion=0\nupdateproportion=0"),
            PropertyError::NoOperations
        );
        // Messages carry the line and key.
        let msg = err("a=1\nreadproportion=2").to_string();
        assert!(
            msg.contains("line 2") && msg.contains("readproportion"),
            "{msg}"
        );
    }

    #[test]
    fn proportions_normalise() {
        let p =
            WorkloadSpec::parse("readproportion=0.5\nupdateproportion=0.5\ninsertproportion=0.5")
                .unwrap()
                .spec
                .proportions;
        let n = p.normalized();
        assert!((n.read - 1.0 / 3.0).abs() < 1e-12);
        assert!((n.sum() - 1.0).abs() < 1e-12);
        let mut spec = WorkloadSpec::default();
        spec.proportions.read = 2.0;
        assert!(spec.validate().is_err());
        spec.proportions = Proportions {
            read: 0.0,
            update: 0.0,
            insert: 0.0,
            scan: 0.0,
            read_modify_write: 0.0,
        };
        assert_eq!(spec.validate(), Err(PropertyError::NoOperations));
    }
}
