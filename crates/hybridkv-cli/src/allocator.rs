//! The process's memory allocator: jemalloc with a single arena, for the Rust code of this
//! binary (the engine, fjall; RocksDB's C++ keeps the C library's `malloc`).
//!
//! Why: the engine's long-lived allocations (cached leaves, blocks and records) are made by
//! whichever thread missed or wrote them and freed by whichever thread evicts them. The C
//! library's `malloc` gives each thread its own arena, and each arena keeps the free space
//! its own peak left behind: 4M SD pairs, cache 200 MiB, Run A held 331 MiB above the
//! harness with the C library's arenas, 242 MiB with one of them and 260 MiB with one
//! jemalloc arena (whose per-thread caches of small sizes spare most allocations its
//! lock); the load 365, 302 and 292 MiB. One C library arena would also be RocksDB's, so
//! the peers' allocator is left as it was. Owns nothing else; never changes what the
//! engine allocates.

/// Every Rust allocation of this binary goes through jemalloc (which has no MSVC build).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's start-up options, read once when it initialises: `narenas:1`, one arena for
/// every thread (see the module comment).
#[cfg(not(target_env = "msvc"))]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8; 10] = b"narenas:1\0";
