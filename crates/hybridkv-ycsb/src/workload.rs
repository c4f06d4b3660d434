//! The operation stream: [`Workload`] (shared configuration and counters) and
//! [`OpGenerator`] (one per worker thread).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, RngExt, SeedableRng};

use crate::distribution::{InsertCounter, ScrambledZipfianGenerator, SkewedLatestGenerator};
use crate::error::WorkloadError;
use crate::key::{InsertOrder, Key};
use crate::spec::{RequestDistribution, UnknownKey, WorkloadSpec};
use crate::value::{splitmix64, ValueMix, ValueSpec};

/// The kind of an [`Operation`], in YCSB's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OperationKind {
    /// Point read.
    Read,
    /// Overwrite of an existing record.
    Update,
    /// Write of a new record.
    Insert,
    /// Range read.
    Scan,
    /// Read followed by an update of the same record.
    ReadModifyWrite,
}

impl OperationKind {
    /// All kinds, in YCSB's order (the order of [`crate::Proportions::as_array`]).
    pub const ALL: [OperationKind; 5] = [
        OperationKind::Read,
        OperationKind::Update,
        OperationKind::Insert,
        OperationKind::Scan,
        OperationKind::ReadModifyWrite,
    ];
}

/// One generated operation.
///
/// Writes carry a [`ValueSpec`] (size class drawn from the workload's
/// [`ValueMix`], plus a seed for the bytes); a read-modify-write's value is the
/// one written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Insert a new record.
    Insert {
        /// The new record's key.
        key: Key,
        /// The value to write.
        value: ValueSpec,
    },
    /// Read one record.
    Read {
        /// The record's key.
        key: Key,
    },
    /// Overwrite one record.
    Update {
        /// The record's key.
        key: Key,
        /// The new value.
        value: ValueSpec,
    },
    /// Read up to `len` records in key order starting at `start_key`.
    Scan {
        /// First key of the range (an existing record's key).
        start_key: Key,
        /// Number of records to read.
        len: usize,
    },
    /// Read a record, then write a new value to it.
    ReadModifyWrite {
        /// The record's key.
        key: Key,
        /// The value written back.
        value: ValueSpec,
    },
}

impl Operation {
    /// The operation's kind.
    #[must_use]
    pub fn kind(&self) -> OperationKind {
        match self {
            Self::Insert { .. } => OperationKind::Insert,
            Self::Read { .. } => OperationKind::Read,
            Self::Update { .. } => OperationKind::Update,
            Self::Scan { .. } => OperationKind::Scan,
            Self::ReadModifyWrite { .. } => OperationKind::ReadModifyWrite,
        }
    }

    /// The key the operation targets (a scan's start key).
    #[must_use]
    pub fn key(&self) -> &Key {
        match self {
            Self::Insert { key, .. }
            | Self::Read { key }
            | Self::Update { key, .. }
            | Self::ReadModifyWrite { key, .. } => key,
            Self::Scan { start_key, .. } => start_key,
        }
    }

    /// The value written, if the operation writes.
    #[must_use]
    pub fn value(&self) -> Option<&ValueSpec> {
        match self {
            Self::Insert { value, .. }
            | Self::Update { value, .. }
            | Self::ReadModifyWrite { value, .. } => Some(value),
            Self::Read { .. } | Self::Scan { .. } => None,
        }
    }
}

/// Redraws allowed when the zipfian chooser names a record that does not
/// exist yet, before falling back to `draw % records`.
const MAX_REDRAWS: u32 = 1 << 16;

/// Seed-stream tags so the load and run phases of one thread differ.
const LOAD_STREAM: u64 = 0x4c4f_4144; // "LOAD"
const RUN_STREAM: u64 = 0x5255_4e00; // "RUN"

/// A configured workload shared by all worker threads.
///
/// It holds the [`WorkloadSpec`], the seed and three shared counters:
/// the run-phase insert counter (an `Arc<AtomicU64>` holding the next record
/// number, starting at `record_count`), the load-phase counter and the
/// run-phase operation budget. Each worker calls
/// [`Workload::load_generator`] or [`Workload::run_generator`] with its own
/// thread index and gets an [`OpGenerator`] with its own RNG seeded from
/// `(seed, thread index, phase)`; the generators share the counters, so
/// inserts from all threads take consecutive record numbers and every
/// thread's distributions see the grown record count.
///
/// With one thread the whole stream is a pure function of the spec and seed.
/// With several, each thread's random choices are still fixed by its seed, but
/// which record numbers its inserts get (and so the counts its distributions
/// see) depends on scheduling.
///
/// Clones share the counters. The `with_*` builders and [`Workload::reset`]
/// start fresh counters; configure the workload before making generators.
#[derive(Debug, Clone)]
pub struct Workload {
    spec: WorkloadSpec,
    seed: u64,
    inserts: InsertCounter,
    loaded: Arc<AtomicU64>,
    issued: Arc<AtomicU64>,
    latest: Arc<OnceLock<SkewedLatestGenerator>>,
}

impl Workload {
    /// Default seed used until [`Workload::with_seed`] is called.
    pub const DEFAULT_SEED: u64 = 0x5943_5342; // "YCSB"

    /// A workload for `spec` with [`Workload::DEFAULT_SEED`].
    ///
    /// # Errors
    /// [`WorkloadError::Property`] if the spec breaks a rule the parser
    /// enforces (see [`WorkloadSpec::validate`]).
    pub fn new(spec: WorkloadSpec) -> Result<Self, WorkloadError> {
        spec.validate()?;
        Ok(Self {
            spec,
            seed: Self::DEFAULT_SEED,
            inserts: InsertCounter::new(spec.record_count),
            loaded: Arc::new(AtomicU64::new(0)),
            issued: Arc::new(AtomicU64::new(0)),
            latest: Arc::new(OnceLock::new()),
        })
    }

    /// Core workload `letter` (`'a'`..=`'f'`, any case) with its built-in spec;
    /// record and operation counts are 0 until set with
    /// [`Workload::with_record_count`] / [`Workload::with_operation_count`].
    ///
    /// # Errors
    /// [`WorkloadError::UnknownCoreWorkload`] for other letters.
    pub fn core(letter: char) -> Result<Self, WorkloadError> {
        Self::new(WorkloadSpec::core(letter)?)
    }

    /// A workload from property-file text, with the keys it ignored.
    ///
    /// # Errors
    /// [`WorkloadError::Property`] for an invalid file.
    pub fn from_properties(text: &str) -> Result<(Self, Vec<UnknownKey>), WorkloadError> {
        let parsed = WorkloadSpec::parse(text)?;
        Ok((Self::new(parsed.spec)?, parsed.unknown_keys))
    }

    fn rebuilt(mut self, spec: WorkloadSpec) -> Self {
        self.spec = spec;
        self.reset();
        self
    }

    /// Sets the number of loaded records (fresh counters).
    #[must_use]
    pub fn with_record_count(self, record_count: u64) -> Self {
        let spec = WorkloadSpec {
            record_count,
            ..self.spec
        };
        self.rebuilt(spec)
    }

    /// Sets the run-phase operation count, 0 for no limit (fresh counters).
    #[must_use]
    pub fn with_operation_count(self, operation_count: u64) -> Self {
        let spec = WorkloadSpec {
            operation_count,
            ..self.spec
        };
        self.rebuilt(spec)
    }

    /// Sets the value-size mix (fresh counters).
    #[must_use]
    pub fn with_value_mix(self, value_mix: ValueMix) -> Self {
        let spec = WorkloadSpec {
            value_mix,
            ..self.spec
        };
        self.rebuilt(spec)
    }

    /// Sets hashed or ordered keys (fresh counters).
    #[must_use]
    pub fn with_insert_order(self, insert_order: InsertOrder) -> Self {
        let spec = WorkloadSpec {
            insert_order,
            ..self.spec
        };
        self.rebuilt(spec)
    }

    /// Sets the seed (fresh counters).
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self.reset();
        self
    }

    /// Replaces the shared counters with fresh ones (insert counter at
    /// `record_count`, load counter and operation budget at 0), detaching this
    /// workload from clones made earlier.
    pub fn reset(&mut self) {
        self.inserts = InsertCounter::new(self.spec.record_count);
        self.loaded = Arc::new(AtomicU64::new(0));
        self.issued = Arc::new(AtomicU64::new(0));
        self.latest = Arc::new(OnceLock::new());
    }

    /// The spec.
    #[must_use]
    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    /// The seed.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The shared run-phase insert counter: the next record number a
    /// run-phase insert will take (`record_count` plus inserts issued so far).
    #[must_use]
    pub fn insert_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(self.inserts.shared())
    }

    /// Number of records that exist from the run phase's point of view
    /// (loaded plus issued inserts).
    #[must_use]
    pub fn record_total(&self) -> u64 {
        self.inserts.count()
    }

    /// The RNG seed of one thread's stream in one phase: SplitMix64 applied
    /// to the seed, the thread index and a phase tag.
    fn stream_seed(&self, thread_index: u64, phase: u64) -> u64 {
        let mut s = self.seed;
        let a = splitmix64(&mut s);
        let mut t = a ^ thread_index.wrapping_mul(0xd1b5_4a32_d192_ed03) ^ phase;
        splitmix64(&mut t)
    }

    /// The load phase for one thread: inserts of records `0..record_count`,
    /// each handed to exactly one of the threads sharing this workload (in
    /// record order, through a shared counter). The generator ends when all
    /// records have been handed out.
    #[must_use]
    pub fn load_generator(&self, thread_index: u64) -> OpGenerator {
        OpGenerator {
            rng: Xoshiro256PlusPlus::seed_from_u64(self.stream_seed(thread_index, LOAD_STREAM)),
            spec: self.spec,
            mode: Mode::Load {
                next: Arc::clone(&self.loaded),
            },
        }
    }

    /// The run phase (transactions) for one thread. All threads together
    /// produce `operation_count` operations (unlimited if 0).
    ///
    /// For `latest`, the zipfian zeta over the loaded records is computed once
    /// per workload (O(record_count)) and shared by copy.
    ///
    /// # Errors
    /// [`WorkloadError::EmptyKeyspace`] if `record_count` is 0.
    pub fn run_generator(&self, thread_index: u64) -> Result<OpGenerator, WorkloadError> {
        let spec = self.spec;
        if spec.record_count == 0 {
            return Err(WorkloadError::EmptyKeyspace);
        }
        let chooser = match spec.request_distribution {
            RequestDistribution::Uniform => KeyChooser::Uniform,
            RequestDistribution::Zipfian => {
                KeyChooser::Zipfian(ScrambledZipfianGenerator::new(zipfian_key_space(&spec)))
            }
            RequestDistribution::Latest => KeyChooser::Latest(
                self.latest
                    .get_or_init(|| SkewedLatestGenerator::new(spec.record_count - 1))
                    .clone(),
            ),
        };
        let proportions = spec.proportions.normalized().as_array();
        let mut thresholds = [None; 5];
        let mut cumulative = 0.0;
        for (slot, (kind, p)) in thresholds
            .iter_mut()
            .zip(OperationKind::ALL.into_iter().zip(proportions))
        {
            if p > 0.0 {
                cumulative += p;
                *slot = Some((cumulative, kind));
            }
        }
        Ok(OpGenerator {
            rng: Xoshiro256PlusPlus::seed_from_u64(
                self.stream_seed(thread_index, RUN_STREAM ^ run_stream_tag(&spec)),
            ),
            spec,
            mode: Mode::Run(Box::new(RunState {
                chooser,
                thresholds,
                inserts: self.inserts.clone(),
                issued: Arc::clone(&self.issued),
            })),
        })
    }
}

/// What makes one workload's run stream differ from another's on the same seed: its
/// normalised operation proportions, request distribution and scan lengths, mixed by
/// SplitMix64. Without it, Run A, B and C of one seed (run one after the other on one
/// database, as the benchmark does) drew their records from one random stream, each reading
/// it in step (a read takes two draws, a write four), so about two thirds of Run C's
/// records were the very records Run A had read or updated just before: the later phases
/// found their hot records where Run A's updates had gathered them. YCSB's separate client
/// runs draw independently; so do these now. The same workload on the same seed still
/// draws the same stream.
fn run_stream_tag(spec: &WorkloadSpec) -> u64 {
    let distribution = match spec.request_distribution {
        RequestDistribution::Uniform => 1,
        RequestDistribution::Zipfian => 2,
        RequestDistribution::Latest => 3,
    };
    let scans = [spec.min_scan_length, spec.max_scan_length].map(|n| n as u64);
    let mut tag = 0u64;
    for part in spec
        .proportions
        .normalized()
        .as_array()
        .map(f64::to_bits)
        .into_iter()
        .chain([distribution])
        .chain(scans)
    {
        let mut state = tag ^ part;
        tag = splitmix64(&mut state);
    }
    tag
}

/// Item space of the scrambled zipfian chooser, as YCSB's `CoreWorkload`
/// sizes it: `recordcount + (long)(operationcount * insertproportion * 2)`,
/// the 2 being YCSB's "fudge factor" for inserts. The insert proportion is
/// taken after normalisation.
#[must_use]
pub fn zipfian_key_space(spec: &WorkloadSpec) -> u64 {
    #[allow(clippy::cast_precision_loss)]
    let ops = spec.operation_count as f64;
    let expected = ops * spec.proportions.normalized().insert * 2.0;
    // Saturating float-to-int cast; `expected` is finite and non-negative.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let expected_new = expected as u64;
    spec.record_count.saturating_add(expected_new)
}

#[derive(Debug, Clone)]
enum KeyChooser {
    Uniform,
    Zipfian(ScrambledZipfianGenerator),
    Latest(SkewedLatestGenerator),
}

#[derive(Debug)]
struct RunState {
    chooser: KeyChooser,
    /// Cumulative normalised proportion and kind, for kinds with p > 0.
    thresholds: [Option<(f64, OperationKind)>; 5],
    inserts: InsertCounter,
    issued: Arc<AtomicU64>,
}

#[derive(Debug)]
enum Mode {
    Load { next: Arc<AtomicU64> },
    Run(Box<RunState>),
}

/// Takes one unit from a shared budget of `limit` (0 = unlimited).
fn take_budget(counter: &AtomicU64, limit: u64) -> Option<u64> {
    if limit == 0 {
        return Some(counter.fetch_add(1, Ordering::Relaxed));
    }
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            (v < limit).then_some(v + 1)
        })
        .ok()
}

/// One worker thread's operation stream (an [`Iterator`] of [`Operation`]s).
///
/// Per operation the RNG is used in a fixed order: operation kind, record,
/// scan length (scans), size class and value seed (writes).
#[derive(Debug)]
pub struct OpGenerator {
    rng: Xoshiro256PlusPlus,
    spec: WorkloadSpec,
    mode: Mode,
}

impl OpGenerator {
    fn next_run(&mut self) -> Option<Operation> {
        let Mode::Run(state) = &mut self.mode else {
            return None;
        };
        let spec = &self.spec;
        let rng = &mut self.rng;
        take_budget(&state.issued, spec.operation_count)?;
        let u: f64 = rng.random();
        let kind = state
            .thresholds
            .iter()
            .flatten()
            .find(|(cum, _)| u < *cum)
            .or_else(|| state.thresholds.iter().flatten().last())
            .map_or(OperationKind::Read, |&(_, kind)| kind);
        if kind == OperationKind::Insert {
            let key = Key::new(state.inserts.next(), spec.insert_order);
            let value = draw_value(spec.value_mix, rng);
            return Some(Operation::Insert { key, value });
        }
        let record = choose_record(&mut state.chooser, &state.inserts, rng);
        let key = Key::new(record, spec.insert_order);
        let op = match kind {
            OperationKind::Read => Operation::Read { key },
            OperationKind::Update => Operation::Update {
                key,
                value: draw_value(spec.value_mix, rng),
            },
            OperationKind::Scan => {
                let (lo, hi) = (spec.min_scan_length, spec.max_scan_length);
                let len = rng.random_range(lo..=hi.max(lo));
                Operation::Scan {
                    start_key: key,
                    len,
                }
            }
            OperationKind::ReadModifyWrite | OperationKind::Insert => Operation::ReadModifyWrite {
                key,
                value: draw_value(spec.value_mix, rng),
            },
        };
        Some(op)
    }

    fn next_load(&mut self) -> Option<Operation> {
        let Mode::Load { next } = &self.mode else {
            return None;
        };
        let limit = self.spec.record_count;
        let record = next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                (v < limit).then_some(v + 1)
            })
            .ok()?;
        let key = Key::new(record, self.spec.insert_order);
        let value = draw_value(self.spec.value_mix, &mut self.rng);
        Some(Operation::Insert { key, value })
    }
}

/// Draws a value: size class from the mix, then a seed for the bytes.
fn draw_value<R: Rng + ?Sized>(mix: ValueMix, rng: &mut R) -> ValueSpec {
    let class = mix.draw(rng);
    ValueSpec {
        class,
        seed: rng.next_u64(),
    }
}

/// Picks an existing record (YCSB's `nextKeynum`).
fn choose_record<R: Rng + ?Sized>(
    chooser: &mut KeyChooser,
    inserts: &InsertCounter,
    rng: &mut R,
) -> u64 {
    // `run_generator` guarantees record_count >= 1 and the counter only grows.
    let records = inserts.count().max(1);
    match chooser {
        KeyChooser::Uniform => rng.random_range(0..records),
        KeyChooser::Zipfian(generator) => {
            let mut draw = 0;
            for _ in 0..MAX_REDRAWS {
                draw = generator.next(rng);
                if draw < records {
                    return draw;
                }
            }
            draw % records
        }
        KeyChooser::Latest(generator) => generator.next(rng, records - 1),
    }
}

impl Iterator for OpGenerator {
    type Item = Operation;

    fn next(&mut self) -> Option<Operation> {
        match self.mode {
            Mode::Load { .. } => self.next_load(),
            Mode::Run(_) => self.next_run(),
        }
    }
}
