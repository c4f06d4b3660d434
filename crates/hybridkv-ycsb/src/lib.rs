//! YCSB workload generator for hybridkv.
//!
//! This crate only *generates* operations; it does not talk to the engine. It
//! reproduces the parts of the Yahoo! Cloud Serving Benchmark's
//! `CoreWorkload` that decide *what* a benchmark does:
//!
//! * **Keys** ([`Key`]): record number `n` becomes `"user"` followed by the
//!   20-digit zero-padded decimal of YCSB's FNV-1a-64 hash of `n` (or of `n`
//!   itself with `insertorder=ordered`) — always exactly 24 bytes (see the
//!   [`key`] module).
//! * **Request distributions**: [`ZipfianGenerator`] (Gray et al., constant
//!   0.99, incremental zeta), [`ScrambledZipfianGenerator`] (YCSB's fixed
//!   ten-billion-item zipfian hashed onto the key space),
//!   [`SkewedLatestGenerator`] (zipfian back from the newest record), uniform,
//!   and the [`InsertCounter`] that hands out new record numbers.
//! * **Operation mixes**: the load phase (inserts of records
//!   `0..recordcount`) and core workloads A–F ([`Workload::core`]), or any
//!   YCSB property file ([`WorkloadSpec::parse`]; format in the [`spec`]
//!   module).
//! * **Value sizes**: the Parallax paper's small/medium/large classes (9, 104
//!   and 1004 bytes) and mixes S, M, L, SD, MD, LD ([`ValueMix`]), drawn per
//!   write, with deterministic bytes ([`ValueSpec`]; table in the [`value`]
//!   module).
//!
//! Generation is deterministic: each worker thread owns an [`OpGenerator`]
//! whose Xoshiro256++ RNG is seeded from the workload seed, the thread
//! index, the phase (load or run) and, in the run phase, the workload itself
//! (its proportions, distribution and scan lengths), so that workloads run
//! one after the other on one seed draw independent records; the threads
//! share the insert counter (an `Arc<AtomicU64>`).
//!
//! ```
//! use hybridkv_ycsb::{Operation, ValueMix, Workload};
//!
//! let workload = Workload::core('a')?
//!     .with_record_count(1_000)
//!     .with_operation_count(10)
//!     .with_value_mix(ValueMix::SD)
//!     .with_seed(7);
//! let loaded = workload.load_generator(0).count();
//! assert_eq!(loaded, 1_000);
//! for op in workload.run_generator(0)? {
//!     match op {
//!         Operation::Read { key } => assert_eq!(key.as_bytes().len(), 24),
//!         Operation::Update { key, value } => {
//!             let bytes = value.to_vec();
//!             assert!(key.record() < 1_000 && !bytes.is_empty());
//!         }
//!         other => unreachable!("workload A only reads and updates: {other:?}"),
//!     }
//! }
//! # Ok::<(), hybridkv_ycsb::WorkloadError>(())
//! ```
//!
//! # Differences from YCSB
//!
//! * Keys use a fixed zero padding of 20 digits (YCSB's default is no padding),
//!   so all keys are 24 bytes.
//! * `uniform` covers all records that exist when the operation is generated,
//!   including ones inserted during the run; YCSB fixes it at `recordcount`.
//! * After the zipfian item count grows, `eta` is recomputed with the new
//!   count (Gray et al.'s formula); YCSB keeps the construction-time count
//!   there. The effect is far below sampling noise.
//! * The insert counter counts issued inserts; YCSB's acknowledged counter
//!   only exposes completed ones.
//! * Record numbers are full `u64`s; YCSB's `nextKeynum` narrows the chosen
//!   number to a Java `int`.
//! * Only `scanlengthdistribution=uniform` and `requestdistribution` values
//!   `uniform`, `zipfian` and `latest` are supported; fields
//!   (`fieldcount`, `fieldlength`, ...) are replaced by the value mixes.

pub mod distribution;
pub mod error;
pub mod key;
pub mod spec;
pub mod value;
pub mod workload;

pub use distribution::{
    zeta, zeta_extend, InsertCounter, ScrambledZipfianGenerator, SkewedLatestGenerator,
    ZipfianGenerator, SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN, ZIPFIAN_CONSTANT,
};
pub use error::{PropertyError, WorkloadError};
pub use key::{
    fnv1a_64, ycsb_hash, InsertOrder, Key, FNV_OFFSET_BASIS_64, FNV_PRIME_64, KEY_DIGITS, KEY_LEN,
    KEY_PREFIX,
};
pub use spec::{
    ParsedProperties, Proportions, RequestDistribution, UnknownKey, WorkloadSpec, CORE_WORKLOAD_A,
    CORE_WORKLOAD_B, CORE_WORKLOAD_C, CORE_WORKLOAD_D, CORE_WORKLOAD_E, CORE_WORKLOAD_F,
};
pub use value::{SizeClass, ValueMix, ValueSpec};
pub use workload::{zipfian_key_space, OpGenerator, Operation, OperationKind, Workload};
