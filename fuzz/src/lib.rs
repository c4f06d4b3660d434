//! Shared helpers of the hybridkv fuzz targets: an allocator that records the largest
//! single allocation (so a target can check that a decoder allocates no more than its
//! input justifies) and checksum fixers (so byte-level mutations reach the structural
//! checks behind each CRC).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The system allocator, recording the largest request while [`measure`] runs.
pub struct Tracking;

static LARGEST: AtomicUsize = AtomicUsize::new(0);
static ON: AtomicBool = AtomicBool::new(false);

fn note(size: usize) {
    if ON.load(Ordering::Relaxed) {
        LARGEST.fetch_max(size, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to `System` unchanged; only records sizes.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Tracking = Tracking;

/// Runs `f` and returns its result with the largest single allocation it made.
/// (Targets are single-threaded while they measure.)
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST.store(0, Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
    let r = f();
    ON.store(false, Ordering::Relaxed);
    (r, LARGEST.load(Ordering::Relaxed))
}

/// Runs `f` and panics if any single allocation exceeded `factor * input_len + slack`
/// bytes: a decoder must size what it allocates by the bytes it was given, never by a
/// length field alone.
pub fn bounded<R>(
    what: &str,
    input_len: usize,
    factor: usize,
    slack: usize,
    f: impl FnOnce() -> R,
) -> R {
    let (r, largest) = measure(f);
    let cap = input_len.saturating_mul(factor).saturating_add(slack);
    assert!(
        largest <= cap,
        "{what}: allocated {largest} bytes at once for a {input_len}-byte input (cap {cap})"
    );
    r
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    if let Some(d) = buf.get_mut(at..at + 4) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}

fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(at..at + 4)?.try_into().ok()?))
}

/// Rewrites the checksums of a small-log file (`docs/FORMAT.md`, "Small log"): the file
/// header's and, walking the records by their declared lengths, each record's header and
/// payload checksums (as far as the bytes reach).
pub fn fix_wal(data: &mut [u8]) {
    if data.len() >= 16 {
        put_u32(data, 12, crc32c::crc32c(&data[..12]));
    }
    let mut pos = 16usize;
    while pos + 24 <= data.len() {
        let len = u32_at(data, pos).unwrap_or(0) as usize;
        let hcrc = crc32c::crc32c(&data[pos..pos + 16]);
        put_u32(data, pos + 16, hcrc);
        let start = pos + 24;
        let Some(end) = start.checked_add(len).filter(|&e| e <= data.len()) else {
            return;
        };
        put_u32(data, pos + 20, crc32c::crc32c(&data[start..end]));
        pos = end;
    }
}

/// Rewrites the checksums of a log segment (`docs/FORMAT.md`, "Large log"): the header's
/// and each record's, walking records by their declared lengths.
pub fn fix_segment(data: &mut [u8]) {
    if data.len() >= 16 {
        put_u32(data, 12, crc32c::crc32c(&data[..12]));
    }
    let mut pos = 16usize;
    while pos + 20 <= data.len() {
        let klen = u32_at(data, pos).unwrap_or(0) as usize;
        let vlen = u32_at(data, pos + 4).unwrap_or(0) as usize;
        let Some(end) = (pos + 20)
            .checked_add(klen)
            .and_then(|e| e.checked_add(vlen))
            .filter(|&e| e <= data.len())
        else {
            return;
        };
        let crc = crc32c::crc32c_append(crc32c::crc32c(&data[pos..pos + 16]), &data[pos + 20..end]);
        put_u32(data, pos + 16, crc);
        pos = end;
    }
}

/// Rewrites a manifest's payload checksum (over the declared payload, as far as it reaches).
pub fn fix_manifest(data: &mut [u8]) {
    let Some(len) = u32_at(data, 12) else { return };
    let end = 20usize.saturating_add(len as usize).min(data.len());
    if end >= 20 {
        let crc = crc32c::crc32c(&data[20..end]);
        put_u32(data, 16, crc);
    }
}

/// Rewrites an options file's payload checksum (the same header layout as the manifest's).
pub fn fix_options(data: &mut [u8]) {
    fix_manifest(data);
}

/// Rewrites a level-file footer's checksum (`f` is the footer's 128 bytes).
pub fn fix_footer(f: &mut [u8]) {
    if f.len() >= 128 {
        let crc = crc32c::crc32c(&f[..124]);
        put_u32(f, 124, crc);
    }
}

/// Rewrites every checksum of a level file: the footer's, then, walking the 4 KiB units
/// with the footer's node sizes, each leaf's and index node's and each blob header's.
pub fn fix_level_file(data: &mut [u8]) {
    let n = data.len();
    if n < 4096 || !n.is_multiple_of(4096) {
        return;
    }
    fix_footer(&mut data[n - 128..]);
    let leaf = u32_at(data, n - 128 + 56).unwrap_or(0) as usize;
    let index = u32_at(data, n - 128 + 60).unwrap_or(0) as usize;
    let end = n - 4096;
    let mut pos = 0usize;
    while pos < end {
        let size = match data[pos] {
            1 => leaf,
            2 => index,
            3 => {
                put_u32(data, pos + 12, crc32c::crc32c(&data[pos..pos + 12]));
                let len = u32_at(data, pos + 4).unwrap_or(0) as usize;
                (16 + len).next_multiple_of(4096)
            }
            _ => 4096,
        };
        if size == 0 || !size.is_multiple_of(4096) {
            return;
        }
        if matches!(data[pos], 1 | 2) && pos + size <= end {
            hybridkv::fuzzing::seal_node(&mut data[pos..pos + size]);
        }
        pos += size;
    }
}

/// Rewrites a file's trailing checksum (its last four bytes: the CRC32C of everything
/// before them), as the cache hint file and the search count file end.
pub fn fix_trailing_crc(data: &mut [u8]) {
    if let Some(body) = data.len().checked_sub(4) {
        let crc = crc32c::crc32c(&data[..body]);
        put_u32(data, body, crc);
    }
}
