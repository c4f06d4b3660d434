//! The operating system's file system, with optional `O_DIRECT` or memory-mapped reads,
//! memory-mapped appends (the small log), and batched reads through `io_uring`.

use super::{BatchRead, DirLock, FileSystem, RawReadTarget, ReadableFile, WritableFile, IO_ALIGN};
use crate::error::{Error, Result};
use std::alloc::Layout;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

/// Size of the user-space write buffer: appends leave in chunks of this size (the paper
/// writes logs in 256 KiB chunks and levels in larger segments).
const WRITE_CHUNK: usize = 256 << 10;

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

/// A heap buffer aligned to [`IO_ALIGN`], as `O_DIRECT` requires.
struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
    /// A pooled buffer: goes back to the dropping thread's [`SpareBufs`].
    spare: bool,
}

// SAFETY: the buffer is plain owned memory with no interior sharing.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only read the bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn new(cap: usize) -> Self {
        let cap = cap.max(IO_ALIGN).next_multiple_of(IO_ALIGN);
        match Layout::from_size_align(cap, IO_ALIGN) {
            Ok(layout) => {
                // SAFETY: layout has a non-zero size.
                let raw = unsafe { std::alloc::alloc_zeroed(layout) };
                match NonNull::new(raw) {
                    Some(ptr) => AlignedBuf {
                        ptr,
                        cap,
                        len: 0,
                        spare: false,
                    },
                    None => std::alloc::handle_alloc_error(layout),
                }
            }
            // Unreachable: IO_ALIGN is a power of two and cap is rounded to it.
            Err(_) => std::alloc::handle_alloc_error(Layout::new::<u8>()),
        }
    }

    /// A buffer of at least `need` bytes: one this thread used before when it has one of
    /// the right size class (a direct read's bounce buffer is needed for one system call;
    /// allocating and zeroing it each time cost 12% of a scan's CPU; a writer's, zeroed
    /// at each file created, 1.5% of a load's instructions).
    fn pooled(need: usize) -> Self {
        let class = SpareBufs::class_of(need);
        let reused = class.and_then(|c| {
            SPARE_BUFS
                .try_with(|s| s.borrow_mut().take(c))
                .ok()
                .flatten()
        });
        match (reused, class) {
            (Some(buf), _) => buf,
            (None, Some(c)) => {
                let mut buf = AlignedBuf::new(SpareBufs::size_of(c));
                buf.spare = true;
                buf
            }
            (None, None) => AlignedBuf::new(need),
        }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap bytes, len <= cap, all bytes initialised (zeroed at
        // allocation, or holding an earlier read's or write's bytes).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    fn full_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for cap bytes and uniquely borrowed through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }
    /// Copies as much of `data` as fits; returns how much was taken.
    fn extend(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.cap - self.len);
        let start = self.len;
        let full = self.full_mut();
        if let (Some(dst), Some(src)) = (full.get_mut(start..start + n), data.get(..n)) {
            dst.copy_from_slice(src);
        }
        self.len += n;
        n
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.spare {
            let kept = SPARE_BUFS
                .try_with(|s| s.borrow_mut().keep(self.ptr, self.cap))
                .unwrap_or(false);
            if kept {
                return;
            }
        }
        if let Ok(layout) = Layout::from_size_align(self.cap, IO_ALIGN) {
            // SAFETY: allocated in `new` with this exact layout, and not kept as a spare.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// Each thread's spare aligned buffers (direct reads' bounce buffers, file writers'
/// buffers; a buffer goes to the pool of the thread that drops it), by size class (powers
/// of two from [`IO_ALIGN`] to [`SpareBufs::LARGEST`]); at most [`SpareBufs::MAX_BYTES`]
/// kept per thread.
struct SpareBufs {
    classes: Vec<Vec<NonNull<u8>>>,
    bytes: usize,
}

impl SpareBufs {
    /// Up to 2 MiB: a level scanner's window (read straight into it when aligned, else,
    /// as at a file's unaligned end, through a bounce buffer of its size) and a file
    /// writer's buffer (1 MiB with `O_DIRECT`); a fresh buffer each time cost its zeroing
    /// and page faults (5% of a load's CPU when scan windows were bounced).
    const LARGEST: usize = 2 << 20;
    const MAX_BYTES: usize = 4 << 20;

    /// The class of a buffer of `need` bytes, if buffers that size are kept.
    fn class_of(need: usize) -> Option<usize> {
        let size = need.max(IO_ALIGN).checked_next_power_of_two()?;
        (size <= Self::LARGEST).then(|| (size / IO_ALIGN).trailing_zeros() as usize)
    }

    fn size_of(class: usize) -> usize {
        IO_ALIGN << class
    }

    fn take(&mut self, class: usize) -> Option<AlignedBuf> {
        let ptr = self.classes.get_mut(class)?.pop()?;
        let cap = Self::size_of(class);
        self.bytes -= cap;
        Some(AlignedBuf {
            ptr,
            cap,
            len: 0,
            spare: true,
        })
    }

    /// Keeps the buffer (allocated with `cap` bytes) if there is room; false if the caller
    /// must free it.
    fn keep(&mut self, ptr: NonNull<u8>, cap: usize) -> bool {
        let Some(class) = Self::class_of(cap).filter(|&c| Self::size_of(c) == cap) else {
            return false;
        };
        if self.bytes + cap > Self::MAX_BYTES {
            return false;
        }
        if self.classes.len() <= class {
            self.classes.resize_with(class + 1, Vec::new);
        }
        match self.classes.get_mut(class) {
            Some(list) => {
                list.push(ptr);
                self.bytes += cap;
                true
            }
            None => false,
        }
    }
}

impl Drop for SpareBufs {
    fn drop(&mut self) {
        for (class, list) in self.classes.iter().enumerate() {
            if let Ok(layout) = Layout::from_size_align(Self::size_of(class), IO_ALIGN) {
                for ptr in list {
                    // SAFETY: each was allocated by `AlignedBuf::new` with this layout and
                    // is owned by this list alone.
                    unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
                }
            }
        }
    }
}

thread_local! {
    static SPARE_BUFS: std::cell::RefCell<SpareBufs> = const {
        std::cell::RefCell::new(SpareBufs { classes: Vec::new(), bytes: 0 })
    };
}

struct RealWriter {
    file: File,
    path: PathBuf,
    buf: AlignedBuf,
    direct: bool,
    /// Bytes already handed to the OS.
    flushed: u64,
}

impl RealWriter {
    fn write_out(&mut self) -> Result<()> {
        if self.buf.len == 0 {
            return Ok(());
        }
        if self.direct && !self.buf.len.is_multiple_of(IO_ALIGN) {
            return Err(Error::InvalidArgument(format!(
                "direct-I/O write of {} bytes to {} is not a multiple of {IO_ALIGN}",
                self.buf.len,
                self.path.display()
            )));
        }
        self.file
            .write_all_at(self.buf.as_slice(), self.flushed)
            .map_err(|e| Error::io("write", &self.path, e))?;
        self.flushed += self.buf.len as u64;
        self.buf.len = 0;
        Ok(())
    }
}

impl WritableFile for RealWriter {
    fn append(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = self.buf.extend(data);
            data = data.get(n..).unwrap_or_default();
            if self.buf.len == self.buf.cap {
                self.write_out()?;
            }
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        self.write_out()
    }
    fn sync_data(&mut self) -> Result<()> {
        self.write_out()?;
        self.file
            .sync_data()
            .map_err(|e| Error::io("fsync", &self.path, e))
    }
    fn len(&self) -> u64 {
        self.flushed + self.buf.len as u64
    }
    fn finish(&mut self) -> Result<()> {
        self.write_out()
    }
}

/// Space a memory-mapped appender reserves (and maps) first: the file grows with
/// `fallocate` before any byte is stored past its end, so no store into the mapping ever
/// needs a block the file system could refuse (a refusal there would be `SIGBUS`, not an
/// error). Each later step doubles what is reserved, up to [`MAPPED_MAX_STEP`]: a log that
/// stays small (a fresh one holds a 16-byte header) reserves a page, a long one grows a step
/// per megabyte.
const MAPPED_FIRST_STEP: u64 = 4 << 10;
/// The largest step of a memory-mapped appender.
const MAPPED_MAX_STEP: u64 = 1 << 20;

/// A file appended to through a memory map ([`FileSystem::create_mapped`]): an append is a
/// copy into the page cache, with no system call, so it reaches the operating system (and
/// survives a crash of the process) as a `pwrite` would. The file is reserved ahead in
/// steps ([`MAPPED_FIRST_STEP`] doubling up to [`MAPPED_MAX_STEP`]), so until [`WritableFile::finish`] cuts it to the bytes appended its
/// length runs past them, the rest zeros (the small log's replay reads such a tail as the
/// end of the log).
struct MappedWriter {
    file: File,
    path: PathBuf,
    /// Bytes appended.
    len: u64,
    /// Bytes reserved (the file's length until `finish`).
    reserved: u64,
    /// The mapping of the step being filled, and its offset in the file.
    map: Option<(u64, memmap2::MmapMut)>,
    /// Cut to `len` by `finish` (a later sync then makes the length durable too).
    finished: bool,
}

impl MappedWriter {
    /// Reserves and maps the next step. On an error nothing is counted as reserved or
    /// mapped, so a later append tries the same step again.
    fn grow(&mut self) -> Result<()> {
        let step = self.reserved.clamp(MAPPED_FIRST_STEP, MAPPED_MAX_STEP);
        let (Ok(off), Ok(n), Ok(map_len)) = (
            libc::off_t::try_from(self.reserved),
            libc::off_t::try_from(step),
            usize::try_from(step),
        ) else {
            return Err(Error::InvalidArgument(format!(
                "{} would grow past the largest file offset",
                self.path.display()
            )));
        };
        loop {
            // SAFETY: the descriptor is open for as long as `self.file` lives.
            let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, off, n) };
            if rc == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io("reserve space (fallocate)", &self.path, e));
            }
        }
        let start = self.reserved;
        // Unmapped first: the pages stay in the page cache, dirty, as a write left them.
        self.map = None;
        // SAFETY: the mapping is of bytes this writer alone changes; the engine never cuts
        // the file while it is open (`finish` unmaps before it cuts), and the bytes were
        // reserved above on a file system that allocates on `fallocate` (see
        // `reserves_blocks`), so a store into the mapping needs no new block.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(start)
                .len(map_len)
                .map_mut(&self.file)
        }
        .map_err(|e| Error::io("mmap", &self.path, e))?;
        self.map = Some((start, map));
        self.reserved += step;
        Ok(())
    }
}

/// Whether `fallocate` on `file`'s file system allocates the blocks a later store into a
/// shared mapping needs. Not on copy-on-write file systems: ZFS checks free space and
/// leaves the file sparse, btrfs and bcachefs write a shared extent elsewhere, so a store
/// into the mapping could meet a full disk inside the page fault (`SIGBUS`, not an error).
/// The magic numbers are `statfs`'s `f_type` (linux/magic.h; ZFS's from OpenZFS).
fn reserves_blocks(file: &File) -> bool {
    const BTRFS: i64 = 0x9123_683E;
    const ZFS: i64 = 0x2FC1_2FC1;
    const BCACHEFS: i64 = 0xCA45_1A4E;
    // SAFETY: `statfs` is a plain C struct for which all-zero bytes are valid; `fstatfs`
    // only writes into it, and the descriptor is open while `file` lives.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between targets
    let kind = st.f_type as i64;
    !matches!(kind, BTRFS | ZFS | BCACHEFS)
}

impl WritableFile for MappedWriter {
    fn append(&mut self, mut data: &[u8]) -> Result<()> {
        if self.finished {
            return Err(Error::Internal(format!(
                "append to {} after it was finished",
                self.path.display()
            )));
        }
        while !data.is_empty() {
            if self.len == self.reserved {
                self.grow()?;
            }
            let Some((start, map)) = self.map.as_mut() else {
                return Err(Error::Internal(format!(
                    "{}: no mapping after growing",
                    self.path.display()
                )));
            };
            let at = usize::try_from(self.len - *start).unwrap_or(usize::MAX);
            let Some(room) = map.get_mut(at..) else {
                return Err(Error::Internal(format!(
                    "{}: offset {} outside its mapping",
                    self.path.display(),
                    self.len
                )));
            };
            let n = room.len().min(data.len());
            let (now, rest) = data.split_at(n);
            if let Some(dst) = room.get_mut(..n) {
                dst.copy_from_slice(now);
            }
            data = rest;
            self.len += n as u64;
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        // Every appended byte is in the page cache already.
        Ok(())
    }
    fn sync_data(&mut self) -> Result<()> {
        // `fdatasync` writes the mapping's dirty pages (they are the file's page cache)
        // and the file's length when it changed; after `finish` the whole inode is made
        // durable, so that the cut cannot come undone.
        let r = if self.finished {
            self.file.sync_all()
        } else {
            self.file.sync_data()
        };
        r.map_err(|e| Error::io("fsync", &self.path, e))
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn finish(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.map = None;
        self.file
            .set_len(self.len)
            .map_err(|e| Error::io("truncate", &self.path, e))?;
        self.reserved = self.len;
        self.finished = true;
        Ok(())
    }
}

struct RealReader {
    file: File,
    path: PathBuf,
    len: u64,
    direct: bool,
    /// Offset and length alignment of this file's `O_DIRECT` reads (see [`dio_read_align`]).
    read_align: u64,
}

/// The alignment `O_DIRECT` reads of `file` need: the file system's answer to
/// `statx(STATX_DIOALIGN)` (Linux 6.1+; for ext4 on most devices the logical block size,
/// 512 bytes), or [`IO_ALIGN`] when it cannot tell. A 1 KiB record then costs a 1-1.5 KiB
/// device read instead of 4-8 KiB, as with RocksDB, which aligns direct reads to the
/// device's logical block size too.
fn dio_read_align(file: &File) -> u64 {
    // SAFETY: `statx` only writes into `stx`, a plain C struct for which all-zero bytes are
    // a valid value; the path is an empty NUL-terminated string used with AT_EMPTY_PATH.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: see above; the fd is open for as long as `file` lives.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    let align = u64::from(stx.stx_dio_offset_align);
    let known = rc == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0;
    // The bounce buffer is aligned to IO_ALIGN, which covers any memory alignment up to it.
    if known
        && align.is_power_of_two()
        && align <= IO_ALIGN as u64
        && u64::from(stx.stx_dio_mem_align) <= IO_ALIGN as u64
    {
        align
    } else {
        IO_ALIGN as u64
    }
}

/// Fills `bounce` (whose start is the aligned file offset `start`) by `pread`s until its
/// first `need` bytes are read or the file ends; returns the bytes read.
///
/// Each `pread` of an `O_DIRECT` file must start at an aligned offset. A short read that
/// is not a whole number of blocks ended at the end of the file *as it was then*; a log
/// segment may grow before a next `pread`, which would then start inside a block and fail
/// with `EINVAL` (issue 14, defect 5). So: stop once `need` bytes are in, stop at a short
/// unaligned read, and after a short aligned one go on from that block boundary.
fn fill_aligned(
    bounce: &mut [u8],
    start: u64,
    need: usize,
    align: u64,
    mut pread: impl FnMut(&mut [u8], u64) -> std::io::Result<usize>,
) -> std::io::Result<usize> {
    let mut done = 0usize;
    while done < need {
        let Some(dst) = bounce.get_mut(done..).filter(|d| !d.is_empty()) else {
            break;
        };
        let n = pread(dst, start + done as u64)?;
        done += n;
        if n == 0 || !(n as u64).is_multiple_of(align) {
            break; // end of file (as it was at this read)
        }
    }
    Ok(done)
}

impl RealReader {
    /// One `pread` of `dst` at `at`: through this thread's ring, spinning on the
    /// completion for up to `spin` (see [`spin_read`]), when `spin` is given and the ring
    /// can take it; else a plain blocking `pread`.
    fn pread(
        &self,
        dst: &mut [u8],
        at: u64,
        spin: Option<std::time::Duration>,
    ) -> std::io::Result<usize> {
        let Some(spin) = spin else {
            return self.file.read_at(dst, at);
        };
        // A larger read follows the plan of the small ones (it takes longer still), but
        // counts neither in their averages nor towards their probes.
        let plan = plan_wait(WaitKind::One, spin, dst.len() <= WAIT_SAMPLE_MAX);
        if plan.spins() {
            if let Some(n) = spin_read(self.file.as_raw_fd(), dst, at, spin, plan) {
                return Ok(n);
            }
        }
        // Slept on: measured too.
        let started = std::time::Instant::now();
        let read = self.file.read_at(dst, at);
        if dst.len() <= WAIT_SAMPLE_MAX {
            note_wait(WaitKind::One, started.elapsed(), WaitPlan::Sleep, false);
        }
        read
    }

    /// [`ReadableFile::read_exact_at`], each `O_DIRECT` read waited for as
    /// [`RealReader::pread`] says.
    fn read_exact(
        &self,
        offset: u64,
        buf: &mut [u8],
        spin: Option<std::time::Duration>,
    ) -> Result<()> {
        // No check against the length seen at open: log segments are read while they grow.
        if offset.checked_add(buf.len() as u64).is_none() {
            return Err(Error::InvalidArgument(format!(
                "read at {offset} overflows"
            )));
        }
        if !self.direct {
            return self
                .file
                .read_exact_at(buf, offset)
                .map_err(|e| Error::io("read", &self.path, e));
        }
        let align = self.read_align;
        if offset.is_multiple_of(align)
            && (buf.len() as u64).is_multiple_of(align)
            && (buf.as_ptr() as usize).is_multiple_of(IO_ALIGN)
        {
            // O_DIRECT straight into the caller's buffer (a level scanner's window is
            // aligned for this: a bounce buffer's copy was 1% of a load's instructions).
            let need = buf.len();
            let done = fill_aligned(buf, offset, need, align, |dst, at| {
                self.pread(dst, at, spin)
            })
            .map_err(|e| Error::io("read", &self.path, e))?;
            if done < need {
                return Err(Error::io(
                    "read",
                    &self.path,
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "read past the end of the file",
                    ),
                ));
            }
            return Ok(());
        }
        // O_DIRECT: read the aligned range that covers the request into a bounce buffer.
        let start = offset / align * align;
        let stop = (offset + buf.len() as u64).next_multiple_of(align);
        let span = usize::try_from(stop - start)
            .map_err(|_| Error::InvalidArgument("read too large".into()))?;
        let mut bounce = AlignedBuf::pooled(span);
        let skip = usize::try_from(offset - start).unwrap_or(0);
        let need = skip + buf.len();
        let span_buf = bounce.full_mut().get_mut(..span).unwrap_or_default();
        let done = fill_aligned(span_buf, start, need, align, |dst, at| {
            self.pread(dst, at, spin)
        })
        .map_err(|e| Error::io("read", &self.path, e))?;
        // Only the `done` bytes read count; past them is the end of the file.
        let read = bounce.full_mut().get(..done).unwrap_or_default();
        super::read_from(read, skip as u64, buf, &self.path)
    }
}

impl ReadableFile for RealReader {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read_exact(offset, buf, None)
    }
    fn read_exact_at_spinning(
        &self,
        offset: u64,
        buf: &mut [u8],
        spin: std::time::Duration,
    ) -> Result<()> {
        self.read_exact(offset, buf, Some(spin))
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn raw_read_target(&self) -> Option<RawReadTarget> {
        Some(RawReadTarget {
            fd: self.file.as_raw_fd(),
            direct: self.direct,
            align: if self.direct { self.read_align } else { 1 },
        })
    }
}

/// A file read through a memory map (`Options::mmap_reads`, Kreon's mode): a read is a
/// copy out of the mapping, and the kernel reads what is not resident on the page faults.
/// Faults read only the page they need (`MADV_RANDOM`); a read of more than one page,
/// and each read of a batch, first asks for all of its pages (`MADV_WILLNEED`), so they
/// are read together. The file is mapped at its first read, whole; a read past the mapped length (a log
/// segment that grew since) maps it again at its current length, and past that is an
/// `UnexpectedEof` error as with `pread`. Files opened so are never cut shorter while open
/// (recovery cuts a torn tail before anything reads the file) below what is read: the
/// one exception, the large-log segment being appended to through a memory map, is cut
/// when full or at close only past its records (the zeros it reserved), and its readers
/// read records. So no read touches a page past the end of the file.
struct MappedReader {
    file: File,
    path: PathBuf,
    /// The length at open (as [`ReadableFile::len`] of every reader).
    len: u64,
    map: parking_lot::RwLock<Option<memmap2::Mmap>>,
}

impl MappedReader {
    /// Copies `buf.len()` bytes at `offset` out of `map`, if it covers them.
    fn copy_out(map: Option<&memmap2::Mmap>, offset: u64, buf: &mut [u8]) -> bool {
        let src = map.and_then(|m| {
            let start = usize::try_from(offset).ok()?;
            m.get(start..start.checked_add(buf.len())?)
        });
        match src {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

impl ReadableFile for MappedReader {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        if buf.len() > IO_ALIGN {
            // Fault the pages in together rather than one synchronous read per page.
            self.will_need(offset, buf.len());
        }
        if Self::copy_out(self.map.read().as_ref(), offset, buf) {
            return Ok(());
        }
        let end = offset.checked_add(buf.len() as u64).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "read at {offset} of {} overflows",
                self.path.display()
            ))
        })?;
        let now = self
            .file
            .metadata()
            .map_err(|e| Error::io("stat", &self.path, e))?
            .len();
        if end > now {
            return super::read_from(&[], 0, buf, &self.path);
        }
        let mut map = self.map.write();
        if map.as_ref().is_none_or(|m| (m.len() as u64) < end) {
            // SAFETY: the engine never changes bytes of a file it reads (level files are
            // immutable; log segments only grow, by appends past what any pointer names)
            // and never cuts one shorter below what a reader reads while it is open (see
            // above), so the mapped bytes read stay what they are while the mapping lives;
            // they are only copied out.
            let fresh = unsafe { memmap2::Mmap::map(&self.file) }
                .map_err(|e| Error::io("mmap", &self.path, e))?;
            // No read-around on a fault: the kernel's default reads up to 128 KiB around
            // every faulting page, which for point lookups multiplied the device bytes
            // over a thousandfold under a memory limit. Longer reads ask for their pages
            // ahead instead (below, and `will_need` for batches).
            let _ = fresh.advise(memmap2::Advice::Random);
            *map = Some(fresh);
            drop(map);
            // The hint before found no mapping (or a short one): give it now.
            if buf.len() > IO_ALIGN {
                self.will_need(offset, buf.len());
            }
            return if Self::copy_out(self.map.read().as_ref(), offset, buf) {
                Ok(())
            } else {
                super::read_from(&[], 0, buf, &self.path)
            };
        }
        if Self::copy_out(map.as_ref(), offset, buf) {
            Ok(())
        } else {
            super::read_from(&[], 0, buf, &self.path)
        }
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn will_need(&self, offset: u64, len: usize) {
        let map = self.map.read();
        if let (Some(m), Ok(start)) = (map.as_ref(), usize::try_from(offset)) {
            // The advice needs a page-aligned start.
            let page = start / IO_ALIGN * IO_ALIGN;
            let span = len.saturating_add(start - page);
            if page.saturating_add(span) <= m.len() {
                let _ = m.advise_range(memmap2::Advice::WillNeed, page, span);
            }
        }
    }
}

/// Entries of each thread's submission ring; a larger batch goes in several rounds.
const RING_ENTRIES: u32 = 64;

/// Set when `io_uring` cannot be used in this process (kernel without it, a seccomp
/// policy, a failed submission): every batch then reads one call at a time.
static URING_UNAVAILABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `io_uring` is out of use ([`URING_UNAVAILABLE`]).
fn uring_unavailable() -> bool {
    #[cfg(test)]
    if let Some(here) = UNAVAILABLE_HERE.with(std::cell::Cell::get) {
        return here;
    }
    URING_UNAVAILABLE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Takes `io_uring` out of use for the process ([`URING_UNAVAILABLE`]).
fn mark_uring_unavailable() {
    #[cfg(test)]
    if UNAVAILABLE_HERE.with(|c| c.get().is_some()) {
        UNAVAILABLE_HERE.with(|c| c.set(Some(true)));
        return;
    }
    URING_UNAVAILABLE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// An `io_uring_enter` that submits what is queued and, with `wait`, waits for that many
/// completions. The one door to the kernel for the reads' rings, so that tests can make it
/// fail ([`INJECTED_ENTERS`]).
fn enter(ring: &mut io_uring::IoUring, wait: Option<usize>) -> std::io::Result<usize> {
    fn enter_now(ring: &mut io_uring::IoUring, wait: Option<usize>) -> std::io::Result<usize> {
        match wait {
            Some(n) => ring.submit_and_wait(n),
            None => ring.submit(),
        }
    }
    #[cfg(test)]
    match INJECTED_ENTERS.with(|q| q.borrow_mut().pop_front()) {
        Some(InjectedEnter::AsUsual) | None => {}
        Some(InjectedEnter::Refused(code)) => return Err(std::io::Error::from_raw_os_error(code)),
        Some(InjectedEnter::FailedAfter(code)) => {
            let _ = enter_now(ring, wait);
            return Err(std::io::Error::from_raw_os_error(code));
        }
    }
    enter_now(ring, wait)
}

/// Whether a thread that began to spin at `started`, for at most `spin`, has spun its time
/// out, its reads `submitted` or not yet. In tests ([`SPIN_ENDS_AT_SUBMISSION`]) the spin
/// may instead end the moment the reads are submitted, whatever the clock says, so that
/// the sleeping wait that follows a spin can be made to fail without a test depending on
/// how fast a read completes.
fn spin_over(started: std::time::Instant, spin: std::time::Duration, submitted: bool) -> bool {
    #[cfg(test)]
    if SPIN_ENDS_AT_SUBMISSION.with(std::cell::Cell::get) {
        return submitted;
    }
    let _ = submitted;
    started.elapsed() >= spin
}

/// Whether a spinning thread looks at its completion queue while it spins (always, but in
/// tests that end the spin at submission: those look only once they have slept).
fn polls_while_spinning() -> bool {
    #[cfg(test)]
    if SPIN_ENDS_AT_SUBMISSION.with(std::cell::Cell::get) {
        return false;
    }
    true
}

/// Leaves `buf` to the kernel, which may still write into it: never freed, never reused.
fn leak_to_kernel(buf: AlignedBuf) {
    #[cfg(test)]
    LEAKED_BUFFERS.with(|c| c.set(c.get() + 1));
    std::mem::forget(buf);
}

/// A fault a test makes this thread's next [`enter`] return.
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
enum InjectedEnter {
    /// Enters as it would without a fault (to let entries through before the one that
    /// fails).
    AsUsual,
    /// Fails with this error code without entering: nothing queued reaches the kernel.
    Refused(i32),
    /// Enters (the kernel takes the reads, and may complete them), then reports this
    /// error code: the case where the caller cannot know what is in flight.
    FailedAfter(i32),
}

#[cfg(test)]
thread_local! {
    /// Faults this thread's next [`enter`]s return, in order; then they enter as usual.
    static INJECTED_ENTERS: std::cell::RefCell<std::collections::VecDeque<InjectedEnter>> =
        const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
    /// `Some`: this thread keeps its own "`io_uring` unavailable" flag instead of the
    /// process's, so that a test that makes its ring fail does not take the ring away from
    /// the tests running beside it.
    static UNAVAILABLE_HERE: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
    /// A spin on this thread ends the moment its reads are submitted ([`spin_over`]),
    /// before it looks at a completion ([`polls_while_spinning`]).
    static SPIN_ENDS_AT_SUBMISSION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Read buffers this thread left to the kernel ([`leak_to_kernel`]).
    static LEAKED_BUFFERS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

thread_local! {
    /// Each thread's ring, made at its first batch.
    static RING: std::cell::RefCell<Option<io_uring::IoUring>> =
        const { std::cell::RefCell::new(None) };
}

/// Threads spinning on a read's completion right now ([`spin_read`]).
static SPINNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many threads may spin on reads at once: half the processors this process may use,
/// at least one, so that spinning readers never take every core from the threads that
/// have work (flushes, compactions, other readers).
fn max_spinning() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get() / 2)
            .max(1)
    })
}

/// A place among the spinning threads (counted in the counter it came from), given back
/// on drop.
struct SpinPlace(&'static std::sync::atomic::AtomicUsize);

impl SpinPlace {
    /// A place among the threads spinning on reads, if fewer than [`max_spinning`] are.
    fn take() -> Option<SpinPlace> {
        #[cfg(test)]
        if NO_PLACE.with(std::cell::Cell::get) {
            return None;
        }
        #[cfg(test)]
        if UNCAPPED.with(std::cell::Cell::get) {
            return Self::take_from(&SPINNING, usize::MAX);
        }
        Self::take_from(&SPINNING, max_spinning())
    }

    /// A place counted in `count`, if fewer than `max` are taken.
    fn take_from(count: &'static std::sync::atomic::AtomicUsize, max: usize) -> Option<SpinPlace> {
        use std::sync::atomic::Ordering;
        let before = count.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(SpinPlace(count))
    }
}

impl Drop for SpinPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

#[cfg(test)]
thread_local! {
    /// Reads this thread completed through [`spin_read`] (tests tell them from plain
    /// `pread`s with it).
    static SPUN_READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// This thread spins whatever the number of spinning threads (a test that checks its
    /// reads go through the ring, while other tests' threads spin).
    static UNCAPPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// This thread never finds a spinning place free (as when others hold them all).
    static NO_PLACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Batch rounds this thread began by polling (with a spinning place).
    static POLLED_ROUNDS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// This thread's rings are made plain, as on a kernel without cooperative completion
    /// work ([`new_ring`]).
    static PLAIN_RINGS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Times this thread entered the kernel for completion work it was flagged for.
    static FLAGGED_ENTERS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Whether this thread's last ring made by [`new_ring`] is cooperative.
    static COOPERATIVE_RING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The largest read that spins ([`spin_read`]): a larger one (a scan's window) is mostly
/// transfer, not wake-up, and would take a spinning place for long.
const SPIN_READ_MAX: usize = 256 << 10;

/// Marks the completion of a [`spin_read`] (a batch's completions carry their index).
const SPIN_READ_TAG: u64 = u64::MAX;

/// Reads up to this size count in a thread's average wait for one read ([`WAITS`]): a
/// larger one (a scan's read-ahead) is mostly transfer and would make point reads look
/// slow.
const WAIT_SAMPLE_MAX: usize = 16 << 10;

/// A thread's recent waits for its reads' completions, in nanoseconds: a moving average
/// (each new wait weighs an eighth) for one read of up to [`WAIT_SAMPLE_MAX`] bytes, and
/// one for a batch. Whether to spin is decided from them ([`plan_wait`]) in two steps.
///
/// - **Does a spin end in time?** Where the reads of late took longer than the spin
///   allows, the thread would spin its whole budget and then sleep anyway, so it sleeps
///   at once (a slow device then costs no processor time spent polling). Every
///   [`PROBE_EVERY`]th wait it spins instead, and a probe that ends within the spin sets
///   the average to its wait: the thread spins again once the device answers within the
///   budget.
/// - **Does the spin pay?** A spin pays where a slept read waits longer: on a virtual
///   machine whose idle processors halt, for the hypervisor to wake the processor. It
///   does not everywhere (on the machine of `docs/PERFORMANCE.md`'s forty-fourth round a
///   slept read took no longer than a spun one, and spinning doubled the processor time
///   per get). So while its waits end in time the thread keeps an average of each way's
///   waits ([`Way`]: those that began with a spin, whole, and those slept on at once),
///   waits the way the averages favour, and every [`PROBE_EVERY`]th wait, of either way,
///   goes the other way to keep the other average current. It sleeps when a slept wait
///   averages at most [`SLEEP_COST_LIMIT`] more than a spun one. Waits planned while the
///   device was slow count in neither, and the end of a slow spell (a probe that ends in
///   time) forgets both: the thread spins first and compares afresh.
///
/// Only waits of reads that are timed count towards the probes (a larger read follows
/// the plan without counting), so that a pattern of reads cannot put every probe on a
/// read whose wait is never noted.
///
/// Per thread, so that one thread's slow files do not decide for another's.
#[derive(Clone, Copy, Default)]
struct Waits {
    one: Wait,
    batch: Wait,
}

/// One kind of wait's averages, and a count of its waits (which of them probe).
#[derive(Clone, Copy, Default)]
struct Wait {
    /// Every wait's (each weighs an eighth): does a spin end in time.
    avg_ns: u64,
    /// Waits that began with a spin, whole.
    spun: Way,
    /// Waits slept on at once.
    slept: Way,
    /// Waits planned so far (every [`PROBE_EVERY`]th probes the way not taken).
    planned: u32,
    /// The last plan was made while the waits outlasted the spin: its wait counts in
    /// neither [`Way`].
    planned_slow: bool,
}

/// The average of one way of waiting: the mean of its first [`SLOW_WEIGHT`] waits, then
/// each new wait weighing one in [`SLOW_WEIGHT`].
#[derive(Clone, Copy, Default)]
struct Way {
    ns: u64,
    /// Waits counted, up to [`SLOW_WEIGHT`] (0: none yet).
    n: u64,
}

impl Way {
    fn add(&mut self, ns: u64) {
        self.n = (self.n + 1).min(SLOW_WEIGHT);
        self.ns = self.ns - self.ns / self.n + ns / self.n;
    }
}

impl Waits {
    fn of(&mut self, kind: WaitKind) -> &mut Wait {
        match kind {
            WaitKind::One => &mut self.one,
            WaitKind::Batch => &mut self.batch,
        }
    }
}

impl Wait {
    /// Whether spinning is worth its processor time: a slept wait averages more than
    /// [`SLEEP_COST_LIMIT`] over a spun one, or either way has no average yet (a thread
    /// spins first, as it did before it could compare).
    fn spin_pays(&self) -> bool {
        self.spun.n == 0
            || self.slept.n == 0
            || self.slept.ns.saturating_mul(SLEEP_COST_LIMIT.1)
                > self
                    .spun
                    .ns
                    .saturating_mul(SLEEP_COST_LIMIT.0 + SLEEP_COST_LIMIT.1)
    }
}

thread_local! {
    static WAITS: std::cell::Cell<Waits> = const {
        let wait = Wait {
            avg_ns: 0,
            spun: Way { ns: 0, n: 0 },
            slept: Way { ns: 0, n: 0 },
            planned: 0,
            planned_slow: false,
        };
        std::cell::Cell::new(Waits { one: wait, batch: wait })
    };
}

/// Every this many waits a thread goes the way it would not ([`Waits`]).
const PROBE_EVERY: u32 = 32;

/// A [`Way`]'s average is the mean of its first this many waits, then each new one
/// weighs one in this many. The way not taken gets one wait in [`PROBE_EVERY`], so its average
/// spans some 2,000 waits (a fraction of a second of gets), smooth enough that a device
/// read's spread (a slow read may take several times the usual) rarely tips the choice.
const SLOW_WEIGHT: u64 = 64;

/// How much longer (numerator, denominator) a slept wait may average than a spun one for
/// the thread to sleep: an eighth. Within it the processor time a spin burns (about the
/// whole wait) buys too little.
const SLEEP_COST_LIMIT: (u64, u64) = (1, 8);

/// Which of a thread's wait averages ([`Waits`]).
#[derive(Clone, Copy)]
enum WaitKind {
    One,
    Batch,
}

/// How a thread waits for a read ([`plan_wait`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WaitPlan {
    /// Its recent waits ended within the spin, and a spin pays.
    Spin,
    /// They did not, or a spin did not pay, but this one spins to see whether it does.
    Probe,
    /// They did not, or a spin did not pay (or this wait probes sleeping): it sleeps at
    /// once.
    Sleep,
}

impl WaitPlan {
    fn spins(self) -> bool {
        self != WaitPlan::Sleep
    }
}

/// How this thread waits for a wait of kind `kind` with a spin of up to `spin`; `timed`:
/// its wait will be noted ([`note_wait`]), so it counts towards the probes and may be
/// one.
fn plan_wait(kind: WaitKind, spin: std::time::Duration, timed: bool) -> WaitPlan {
    WAITS.with(|c| {
        let mut w = c.get();
        let k = w.of(kind);
        let in_time = u128::from(k.avg_ns) <= spin.as_nanos();
        let probe = timed && {
            k.planned = k.planned.wrapping_add(1);
            k.planned.is_multiple_of(PROBE_EVERY)
        };
        k.planned_slow = !in_time;
        let plan = match (in_time && k.spin_pays(), probe) {
            (true, false) => WaitPlan::Spin,
            // Sleeping probed, to keep the slept average current (only once the device
            // answers within the spin: a slow one's waits are all slept anyway).
            (true, true) => WaitPlan::Sleep,
            (false, false) => WaitPlan::Sleep,
            (false, true) => WaitPlan::Probe,
        };
        c.set(w);
        plan
    })
}

/// Counts a wait of `waited`, waited for as `plan` said, in this thread's averages of
/// kind `kind`: every wait in the average that says whether a spin ends in time (a probe
/// that ended while the thread still spun, `within`, sets it, and when the plan was made
/// while the device was slow, forgets both ways); a wait planned while waits ended in time
/// in its [`Way`]: one that began with a spin in the spun average, whole (a spin that ran
/// out and slept for the rest is what spinning cost that read: leaving out the slow reads
/// would flatter the spin), one slept on at once in the slept average. A caller whose
/// planned spin found no spinning place notes its wait as slept.
fn note_wait(kind: WaitKind, waited: std::time::Duration, plan: WaitPlan, within: bool) {
    let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
    WAITS.with(|c| {
        let mut w = c.get();
        let k = w.of(kind);
        let slow_spell_over = plan == WaitPlan::Probe && within;
        k.avg_ns = if slow_spell_over {
            ns
        } else {
            k.avg_ns - k.avg_ns / 8 + ns / 8
        };
        if slow_spell_over && k.planned_slow {
            k.spun = Way::default();
            k.slept = Way::default();
            k.planned_slow = false;
        }
        if !k.planned_slow {
            if plan.spins() {
                k.spun.add(ns);
            } else {
                k.slept.add(ns);
            }
        }
        c.set(w);
    });
}

/// Forgets this thread's waits (tests that need a thread that spins at once).
#[cfg(test)]
fn forget_waits() {
    WAITS.with(|c| c.set(Waits::default()));
}

/// One `pread` of `dst.len()` bytes at `at` of `fd` (an `O_DIRECT` file: `dst`'s length
/// and `at` aligned as it needs), submitted through this thread's ring, the thread then
/// spinning on the completion queue for up to `spin` before it sleeps in the kernel for
/// the rest (`Options::read_spin_us`). On a virtual machine whose idle processors halt, a
/// thread that sleeps on a read wakes only after the hypervisor has woken its processor:
/// on this project's machine 8 KiB `O_DIRECT` reads took 86 us slept on against 58 us
/// spun on. The read goes into a buffer the ring owns, then is copied to `dst`, so that a
/// ring that fails with the read in flight can leak that buffer (and the ring) rather than
/// leave the kernel writing into `dst`. While it sleeps the thread gives its spinning place
/// to another. Returns the bytes read (short at the end of the file).
///
/// `None` when this read does not spin (larger than [`SPIN_READ_MAX`], no spinning place
/// free, the ring unavailable or in use on this thread, the submission refused) or the
/// ring failed it: the caller reads with a plain `pread`, which reports any real error.
fn spin_read(
    fd: i32,
    dst: &mut [u8],
    at: u64,
    spin: std::time::Duration,
    plan: WaitPlan,
) -> Option<usize> {
    if uring_unavailable() {
        return None;
    }
    if dst.len() > SPIN_READ_MAX {
        return None;
    }
    let len = u32::try_from(dst.len()).ok()?;
    let mut place = Some(SpinPlace::take()?);
    // The wait noted runs from here, as a slept read's runs over its whole `pread`: the
    // submission (a doorbell on a virtual disk) is part of either.
    let began = std::time::Instant::now();
    RING.try_with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        let ring = ring_in(&mut slot)?;
        let mut buf = AlignedBuf::pooled(dst.len());
        let entry =
            io_uring::opcode::Read::new(io_uring::types::Fd(fd), buf.full_mut().as_mut_ptr(), len)
                .offset(at)
                .build()
                .user_data(SPIN_READ_TAG);
        // SAFETY: `buf` outlives the read: it is dropped only after the read's
        // completion is reaped below, or leaked with the ring when that cannot be.
        if unsafe { ring.submission().push(&entry) }.is_err() {
            return None; // the queue is full (it never is between calls)
        }
        // A submission refused for a moment (interrupted, queue busy, no memory) left
        // the read in the queue: submitted again, a few times.
        let mut tries = 0;
        let submitted = loop {
            tries += 1;
            match enter(ring, None) {
                Ok(1) => break true,
                Err(e) if tries < 4 && retry_enter(&e) => {}
                _ => break false,
            }
        };
        if !submitted {
            // Whether the kernel took the read is unknown: keep the ring and the
            // buffer from ever being used or freed.
            leak_to_kernel(buf);
            abandon_ring(&mut slot);
            return None;
        }
        let started = std::time::Instant::now();
        let mut polls = 0u32;
        let mut slept = false;
        let result = loop {
            if slept || polls_while_spinning() {
                if let Some(cqe) = ring.completion().next() {
                    if cqe.user_data() == SPIN_READ_TAG {
                        break cqe.result();
                    }
                    continue; // not ours (none is expected): skipped
                }
            }
            enter_if_flagged(ring);
            polls = polls.wrapping_add(1);
            let look = polls.is_multiple_of(64) || !polls_while_spinning();
            if look && spin_over(started, spin, true) {
                // Sleep in the kernel until the read completes, giving the spinning
                // place to another thread meanwhile.
                place = None;
                match enter(ring, Some(1)) {
                    Ok(_) => slept = true,
                    Err(e) if retry_enter(&e) => {}
                    Err(_) => {
                        leak_to_kernel(buf);
                        abandon_ring(&mut slot);
                        // The read may still be in flight, into the leaked buffer:
                        // the caller reads again with `pread`.
                        return None;
                    }
                }
            } else {
                std::hint::spin_loop();
            }
        };
        let within = place.take().is_some();
        if result >= 0 && dst.len() <= WAIT_SAMPLE_MAX {
            // (A read the ring failed is read again by the caller, and counted there.)
            note_wait(WaitKind::One, began.elapsed(), plan, within);
        }
        let n = match usize::try_from(result) {
            Ok(n) => n.min(dst.len()),
            // A ring may fail a read that `pread` would have done (an `O_DIRECT` read
            // completing with EAGAIN on older kernels): the read is over, so the
            // caller can read it again with `pread`, which reports a real error.
            Err(_) => return None,
        };
        #[cfg(test)]
        SPUN_READS.with(|c| c.set(c.get() + 1));
        if let (Some(to), Some(from)) = (dst.get_mut(..n), buf.full_mut().get(..n)) {
            to.copy_from_slice(from);
        }
        Some(n)
    })
    .ok()
    .flatten()
}

/// This thread's ring in `slot`, made if it has none yet; `None` (and `io_uring` marked
/// unavailable for the process) if the kernel refuses one.
fn ring_in(slot: &mut Option<io_uring::IoUring>) -> Option<&mut io_uring::IoUring> {
    if slot.is_none() {
        match new_ring() {
            Ok(ring) => *slot = Some(ring),
            Err(_) => {
                mark_uring_unavailable();
                return None;
            }
        }
    }
    slot.as_mut()
}

/// A ring whose completions wait for the thread to ask (`IORING_SETUP_COOP_TASKRUN`, with
/// `IORING_SETUP_TASKRUN_FLAG` to say when one waits), or a plain one where the kernel
/// lacks them (before Linux 5.19).
///
/// Why: a direct read completes in the device's interrupt, on whichever processor takes
/// it, and the kernel must then run the ring's completion work on the reading thread. A
/// plain ring interrupts that thread's processor to do so (an inter-processor interrupt,
/// costly in a virtual machine); a cooperative ring only raises the flag, which a
/// spinning thread sees and answers with one `io_uring_enter` ([`enter_if_flagged`]).
/// On this project's machine that cut a spun 4 KiB read on the processor that does not
/// take the disk's interrupts from 105-113 to 83-86 us (`docs/PERFORMANCE.md`). A thread
/// asleep in `io_uring_enter` is woken either way.
fn new_ring() -> std::io::Result<io_uring::IoUring> {
    #[cfg(test)]
    if PLAIN_RINGS.with(std::cell::Cell::get) {
        return io_uring::IoUring::new(RING_ENTRIES);
    }
    let cooperative = io_uring::IoUring::builder()
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .build(RING_ENTRIES);
    #[cfg(test)]
    COOPERATIVE_RING.with(|c| c.set(cooperative.is_ok()));
    cooperative.or_else(|_| io_uring::IoUring::new(RING_ENTRIES))
}

/// For a thread polling its completion queue: if the kernel flagged completion work
/// waiting for this thread (a cooperative ring, [`new_ring`]), enters the kernel to have it
/// done, so the completions appear. Nothing else is submitted (the queue is empty), and a
/// failed entry is left to the wait that follows the spin, which reports it.
fn enter_if_flagged(ring: &mut io_uring::IoUring) {
    if ring.submission().taskrun() && ring.submission().is_empty() {
        #[cfg(test)]
        FLAGGED_ENTERS.with(|c| c.set(c.get() + 1));
        // `submit` adds `IORING_ENTER_GETEVENTS` when the flag is up.
        let _ = ring.submit();
    }
}

/// Takes the ring out of use for good after a failure that may leave reads in flight: it
/// is leaked, never dropped (the caller leaks their buffers), and `io_uring` is marked
/// unavailable for the process.
fn abandon_ring(slot: &mut Option<io_uring::IoUring>) {
    if let Some(ring) = slot.take() {
        std::mem::forget(ring);
    }
    mark_uring_unavailable();
}

/// Whether a failed `io_uring_enter` left the ring as it was and may be entered again
/// (interrupted, the completion queue busy, a moment without memory).
fn retry_enter(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::Interrupted
        || matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN))
}

/// One read of a round: where it goes in the kernel, the aligned buffer it fills, and
/// which part of that buffer the request wants.
struct Pending {
    request: usize,
    buf: AlignedBuf,
    /// Bytes the kernel must return for the request to be whole.
    need: usize,
    /// Where the request's bytes start in `buf`.
    skip: usize,
}

/// Submits the reads of `reqs` whose files have a descriptor, in rounds of at most
/// [`RING_ENTRIES`], each round one `io_uring_enter`; returns, per request, whether its
/// buffer was filled. Anything not filled (no descriptor, an error, a short read) is left
/// to the caller's one-by-one read. With `spin`, the thread spins on the completions for
/// up to that long before it sleeps (as [`spin_read`] does, within the same bound on
/// spinning threads).
pub(super) fn submit_batch(
    reqs: &mut [BatchRead<'_>],
    spin: Option<std::time::Duration>,
) -> Vec<bool> {
    let mut filled = vec![false; reqs.len()];
    if uring_unavailable() {
        return filled;
    }
    let batchable: Vec<usize> = (0..reqs.len())
        .filter(|&i| {
            reqs.get(i)
                .is_some_and(|r| r.file.raw_read_target().is_some())
        })
        .collect();
    if batchable.len() < 2 {
        return filled;
    }
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        for round in batchable.chunks(RING_ENTRIES as usize) {
            let Some(ring) = ring_in(&mut slot) else {
                return;
            };
            if !submit_round(ring, reqs, round, &mut filled, spin) {
                // The ring may still own buffers of reads in flight (see `submit_round`).
                abandon_ring(&mut slot);
                return;
            }
        }
    });
    filled
}

/// One round: prepares an aligned buffer per request, queues the reads, submits them with
/// one system call and waits for all of them (spinning first for up to `spin`, when a
/// spinning place is free). False if the ring failed in a way that leaves reads in flight
/// (their buffers are then leaked, never freed under the kernel).
fn submit_round(
    ring: &mut io_uring::IoUring,
    reqs: &mut [BatchRead<'_>],
    round: &[usize],
    filled: &mut [bool],
    spin: Option<std::time::Duration>,
) -> bool {
    use io_uring::{opcode, types};
    // Taken before any read is queued: nothing between queueing and submitting may fail.
    let plan = spin.map(|s| plan_wait(WaitKind::Batch, s, true));
    let spin = spin.filter(|_| plan.is_some_and(WaitPlan::spins));
    let mut place = spin.and_then(|s| Some((SpinPlace::take()?, s)));
    // A planned spin that found no spinning place sleeps, and is noted so.
    let plan = plan.map(|p| if place.is_some() { p } else { WaitPlan::Sleep });
    #[cfg(test)]
    if place.is_some() {
        POLLED_ROUNDS.with(|c| c.set(c.get() + 1));
    }
    let mut pending: Vec<Pending> = Vec::with_capacity(round.len());
    for &i in round {
        let Some(r) = reqs.get(i) else { continue };
        let Some(t) = r.file.raw_read_target() else {
            continue;
        };
        let align = t.align.max(1);
        let start = r.offset / align * align;
        let Some(end) = r.offset.checked_add(r.buf.len() as u64) else {
            continue;
        };
        let stop = end.next_multiple_of(align);
        let (Ok(span), Ok(skip)) = (
            usize::try_from(stop - start),
            usize::try_from(r.offset - start),
        ) else {
            continue;
        };
        let Ok(span32) = u32::try_from(span) else {
            continue;
        };
        let mut buf = AlignedBuf::pooled(span);
        let ptr = buf.full_mut().as_mut_ptr();
        let entry = opcode::Read::new(types::Fd(t.fd), ptr, span32)
            .offset(start)
            .build()
            .user_data(pending.len() as u64);
        // SAFETY: the buffer lives in `pending` until this round's completions are all
        // reaped below (or is leaked if they cannot be), and the descriptor belongs to a
        // file `reqs` borrows for the whole call.
        if unsafe { ring.submission().push(&entry) }.is_err() {
            break; // the queue is full: the rest are read one by one
        }
        pending.push(Pending {
            request: i,
            buf,
            need: skip + r.buf.len(),
            skip,
        });
    }
    let mut results: Vec<Option<i32>> = vec![None; pending.len()];
    let mut reaped = 0;
    // While spinning: the reads are submitted (until the queue is empty), then the
    // completion queue is polled; past the spin, or without a place, the thread sleeps in
    // the kernel (and gives its place back).
    let started = std::time::Instant::now();
    while reaped < pending.len() {
        let queued = !ring.submission().is_empty();
        let poll = place
            .as_ref()
            .is_some_and(|(_, s)| !spin_over(started, *s, !queued));
        if !poll {
            place = None;
        }
        let entered = match (poll, !queued) {
            (true, true) => {
                enter_if_flagged(ring);
                Ok(0)
            }
            (true, false) => enter(ring, None),
            (false, _) => enter(ring, Some(pending.len() - reaped)),
        };
        match entered {
            Ok(_) => {}
            Err(e) if retry_enter(&e) => {}
            Err(_) => {
                // Reads may be in flight: their buffers must outlive them.
                for p in pending {
                    leak_to_kernel(p.buf);
                }
                return false;
            }
        }
        if poll && !polls_while_spinning() {
            continue;
        }
        for cqe in ring.completion() {
            let slot = usize::try_from(cqe.user_data()).ok();
            if let Some(r) = slot.and_then(|i| results.get_mut(i)) {
                if r.is_none() {
                    reaped += 1;
                }
                *r = Some(cqe.result());
            }
        }
        if poll {
            std::hint::spin_loop();
        }
    }
    if let Some(plan) = plan {
        note_wait(WaitKind::Batch, started.elapsed(), plan, place.is_some());
    }
    for (p, res) in pending.iter_mut().zip(results) {
        let got = res.and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
        if got < p.need {
            continue; // an error or the end of the file: read alone, for its exact error
        }
        let (Some(r), Some(src)) = (
            reqs.get_mut(p.request),
            p.buf.full_mut().get(p.skip..p.need),
        ) else {
            continue;
        };
        r.buf.copy_from_slice(src);
        if let Some(f) = filled.get_mut(p.request) {
            *f = true;
        }
    }
    true
}

#[derive(Debug)]
struct FileLock {
    file: File,
}
impl DirLock for FileLock {}

impl Drop for FileLock {
    /// Unlocks explicitly before the file closes. A `flock` belongs to the open file
    /// description, which a child process forked at that moment (anywhere in the
    /// application) shares until it execs: closing our descriptor alone would leave the
    /// lock held, and a reopen right after the drop would fail with `Locked`. Unlocking
    /// releases it for every sharer.
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

fn direct_flag(direct: bool) -> i32 {
    if direct {
        libc::O_DIRECT
    } else {
        0
    }
}

impl FileSystem for RealFs {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        std::fs::create_dir_all(path).map_err(|e| Error::io("create directory", path, e))
    }

    fn create(&self, path: &Path, direct: bool) -> Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(direct_flag(direct))
            .open(path)
            .map_err(|e| Error::io("create", path, e))?;
        Ok(Box::new(RealWriter {
            file,
            path: path.to_path_buf(),
            buf: AlignedBuf::pooled(if direct { 1 << 20 } else { WRITE_CHUNK }),
            direct,
            flushed: 0,
        }))
    }

    fn create_mapped(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io("create", path, e))?;
        let mut writer = MappedWriter {
            file,
            path: path.to_path_buf(),
            len: 0,
            reserved: 0,
            map: None,
            finished: false,
        };
        if !reserves_blocks(&writer.file) {
            // A reservation there is no guarantee: buffered appends.
            drop(writer);
            return self.create(path, false);
        }
        match writer.grow() {
            Ok(()) => Ok(Box::new(writer)),
            // A file system that cannot reserve space (no `fallocate`) or map the file
            // for writing (some network and FUSE file systems) gets buffered appends.
            Err(Error::Io { source, .. })
                if matches!(
                    source.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::ENODEV | libc::EACCES)
                ) =>
            {
                drop(writer);
                self.create(path, false)
            }
            Err(e) => {
                // Its space may be reserved (the map failed after `fallocate`): give it
                // back, so the file holds no zeros that would read as a torn header.
                let _ = writer.file.set_len(0);
                Err(e)
            }
        }
    }

    fn open(&self, path: &Path, direct: bool) -> Result<Arc<dyn ReadableFile>> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(direct_flag(direct))
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat", path, e))?
            .len();
        let read_align = if direct {
            dio_read_align(&file)
        } else {
            IO_ALIGN as u64
        };
        Ok(Arc::new(RealReader {
            file,
            path: path.to_path_buf(),
            len,
            direct,
            read_align,
        }))
    }
    fn open_mapped(&self, path: &Path) -> Result<Arc<dyn ReadableFile>> {
        let file = File::open(path).map_err(|e| Error::io("open", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat", path, e))?
            .len();
        Ok(Arc::new(MappedReader {
            file,
            path: path.to_path_buf(),
            len,
            map: parking_lot::RwLock::new(None),
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io("delete", path, e))
    }

    fn remove_dir(&self, path: &Path) -> Result<()> {
        std::fs::remove_dir(path).map_err(|e| Error::io("delete directory", path, e))
    }

    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::hard_link(from, to).map_err(|e| Error::io("hard link", to, e))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
            let entry = entry.map_err(|e| Error::io("list", dir, e))?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("fsync directory", dir, e))
    }

    fn kind(&self, path: &Path) -> Result<Option<bool>> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Some(m.is_dir())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("stat", path, e)),
        }
    }

    fn file_len(&self, path: &Path) -> Result<u64> {
        std::fs::metadata(path)
            .map(|m| m.len())
            .map_err(|e| Error::io("stat", path, e))
    }

    fn allocated_len(&self, path: &Path) -> Result<u64> {
        std::fs::metadata(path)
            .map(|m| m.blocks() * 512)
            .map_err(|e| Error::io("stat", path, e))
    }

    fn truncate(&self, path: &Path, len: u64) -> Result<()> {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        file.set_len(len)
            .map_err(|e| Error::io("truncate", path, e))?;
        file.sync_all().map_err(|e| Error::io("fsync", path, e))
    }

    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<()> {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return Err(Error::InvalidArgument(format!(
                "hole {offset}+{len} out of range"
            )));
        };
        // SAFETY: fd is a valid open descriptor for the duration of the call.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                n,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::io(
                "punch hole",
                path,
                std::io::Error::last_os_error(),
            ))
        }
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn DirLock>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("create lock file", path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(FileLock { file })),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
                path: path.parent().unwrap_or(path).to_path_buf(),
            }),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that grows by `grow` bytes after every read and, like `O_DIRECT`, refuses
    /// reads that start off a 512-byte boundary with `EINVAL`.
    struct GrowingFile {
        data: Vec<u8>,
        len: usize,
        grow: usize,
        reads: Vec<u64>,
    }

    impl GrowingFile {
        fn pread(&mut self, dst: &mut [u8], at: u64) -> std::io::Result<usize> {
            self.reads.push(at);
            if !at.is_multiple_of(512) {
                return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
            }
            let at = at as usize;
            let n = dst.len().min(self.len.saturating_sub(at));
            dst[..n].copy_from_slice(&self.data[at..at + n]);
            self.len = (self.len + self.grow).min(self.data.len());
            Ok(n)
        }
    }

    fn growing(len: usize, grow: usize) -> GrowingFile {
        GrowingFile {
            data: (0..8192u32).map(|i| (i % 251) as u8).collect(),
            len,
            grow,
            reads: Vec::new(),
        }
    }

    /// Issue 14, defect 5: a read near the end of a segment being appended to got a short
    /// first `pread`; the writer appended; the second `pread` started inside a block and
    /// failed with EINVAL. The request was already covered by the first read.
    #[test]
    fn a_short_read_that_covers_the_request_is_not_followed_by_an_unaligned_one() {
        let mut f = growing(1000, 2000);
        let mut bounce = vec![0u8; 512];
        // Bytes 900..950: the aligned span is 512..1024, the file ends at 1000 at first.
        let done = fill_aligned(&mut bounce, 512, 388 + 50, 512, |d, at| f.pread(d, at)).unwrap();
        assert_eq!(done, 488);
        assert_eq!(f.reads, vec![512], "one aligned read, nothing at 1000");
        assert_eq!(&bounce[388..438], &f.data[900..950]);
    }

    #[test]
    fn a_short_aligned_read_goes_on_from_the_block_boundary() {
        // The file ends at a block boundary (1024) when the first read runs, then grows.
        let mut f = growing(1024, 2000);
        let mut bounce = vec![0u8; 1024];
        // Bytes 1000..1100: span 512..1536.
        let done = fill_aligned(&mut bounce, 512, 488 + 100, 512, |d, at| f.pread(d, at)).unwrap();
        assert_eq!(f.reads, vec![512, 1024]);
        assert!(done >= 588);
        assert_eq!(&bounce[488..588], &f.data[1000..1100]);
    }

    #[test]
    fn a_file_shorter_than_the_request_returns_what_there_is() {
        let mut f = growing(1000, 0);
        let mut bounce = vec![0u8; 1024];
        let done = fill_aligned(&mut bounce, 512, 1000, 512, |d, at| f.pread(d, at)).unwrap();
        assert_eq!(
            done, 488,
            "the caller turns this into an UnexpectedEof error"
        );
        assert!(f.reads.iter().all(|at| at.is_multiple_of(512)));
    }

    #[test]
    fn write_then_read_back_buffered_and_chunked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut w = RealFs.create(&p, false).unwrap();
        let data: Vec<u8> = (0..(WRITE_CHUNK * 2 + 123))
            .map(|i| (i % 251) as u8)
            .collect();
        w.append(&data).unwrap();
        assert_eq!(w.len(), data.len() as u64);
        w.sync_data().unwrap();
        let r = RealFs.open(&p, false).unwrap();
        let mut back = vec![0u8; data.len()];
        r.read_exact_at(0, &mut back).unwrap();
        assert_eq!(back, data);
        let mut past = [0u8; 2];
        assert!(r.read_exact_at(data.len() as u64 - 1, &mut past).is_err());
    }

    #[test]
    fn a_writer_reusing_a_pooled_buffer_writes_only_its_own_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let pooled = || SPARE_BUFS.with(|s| s.borrow().bytes);
        let before = pooled();
        let mut w = RealFs.create(&a, false).unwrap();
        w.append(&vec![0xAB; WRITE_CHUNK + 100]).unwrap();
        w.sync_data().unwrap();
        drop(w);
        assert_eq!(
            pooled(),
            before + WRITE_CHUNK,
            "the writer's buffer went to the pool"
        );
        // The next writer on this thread takes that buffer, full of 0xAB.
        let mut w = RealFs.create(&b, false).unwrap();
        assert_eq!(pooled(), before, "the pooled buffer was taken");
        w.append(b"0123456789").unwrap();
        w.append(&[7u8; 5]).unwrap();
        w.sync_data().unwrap();
        drop(w);
        let back = std::fs::read(&b).unwrap();
        assert_eq!(back, b"0123456789\x07\x07\x07\x07\x07");
    }

    #[test]
    fn mapped_reads_follow_a_growing_file_and_stop_at_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("seg");
        let data: Vec<u8> = (0..30_000u32).map(|i| (i % 253) as u8).collect();
        let mut w = RealFs.create(&p, false).unwrap();
        w.append(&data[..10_000]).unwrap();
        w.flush().unwrap();
        let io = crate::io::Io::new(Arc::new(RealFs), false).with_mapped_reads(true);
        let r = io.open(&p, crate::io::IoComponent::LargeLog).unwrap();
        let r2 = io.open(&p, crate::io::IoComponent::LargeLog).unwrap();
        assert_eq!(r.len(), 10_000);
        let mut buf = vec![0u8; 3000];
        r.read_exact_at(7000, &mut buf).unwrap();
        assert_eq!(buf, data[7000..10_000]);
        // Past the end: an error, the file as it is now.
        let mut past = vec![0u8; 10];
        let e = r.read_exact_at(9995, &mut past).unwrap_err();
        assert!(
            matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof),
            "{e}"
        );
        // The file grows: a read past the first mapping maps it again.
        w.append(&data[10_000..]).unwrap();
        w.flush().unwrap();
        let mut buf = vec![0u8; 12_000];
        r.read_exact_at(9000, &mut buf).unwrap();
        assert_eq!(buf, data[9000..21_000]);
        // A batch over mapped files: each read on its own, the pages asked for ahead.
        let (mut a, mut b, mut c) = (vec![0u8; 500], vec![0u8; 4000], vec![0u8; 100]);
        let mut reqs = [
            BatchRead {
                file: r.as_ref(),
                offset: 29_000,
                buf: &mut a,
            },
            BatchRead {
                file: r2.as_ref(),
                offset: 123,
                buf: &mut b,
            },
            BatchRead {
                file: r.as_ref(),
                offset: 29_950,
                buf: &mut c,
            },
        ];
        let results = io.read_batch(&mut reqs);
        assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
        assert!(results[2].is_err(), "a read past the end must fail");
        assert_eq!(a, data[29_000..29_500]);
        assert_eq!(b, data[123..4123]);
        let read = io
            .stats()
            .snapshot()
            .read_by(crate::io::IoComponent::LargeLog);
        assert_eq!(read, 3000 + 12_000 + 500 + 4000, "bytes counted");
    }

    /// A buffer of `len` bytes at an address aligned to [`IO_ALIGN`] (in `backing`).
    fn aligned(backing: &mut Vec<u8>, len: usize) -> &mut [u8] {
        *backing = vec![0u8; len + IO_ALIGN];
        let off =
            (backing.as_ptr() as usize).next_multiple_of(IO_ALIGN) - backing.as_ptr() as usize;
        &mut backing[off..off + len]
    }

    #[test]
    fn a_direct_read_into_an_aligned_buffer_needs_no_bounce_and_stops_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..(5 * 4096 + 300u32)).map(|i| (i % 241) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let r = RealFs.open(&p, true).unwrap();
        let pooled = || SPARE_BUFS.with(|s| s.borrow().bytes);
        let mut backing = Vec::new();
        let buf = aligned(&mut backing, 2 * 4096);
        r.read_exact_at(4096, buf).unwrap();
        assert_eq!(buf, &data[4096..3 * 4096]);
        assert_eq!(
            pooled(),
            0,
            "no bounce buffer was taken (it would be kept after)"
        );
        // Aligned, but running past the end: the end of file, whatever the buffer held.
        let buf = aligned(&mut backing, 2 * 4096);
        buf.fill(0xEE);
        let e = r.read_exact_at(4 * 4096, buf).unwrap_err();
        assert!(
            matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof),
            "{e}"
        );
        assert_eq!(
            pooled(),
            0,
            "no bounce buffer was taken (it would be kept after)"
        );
        // An unaligned address goes through the bounce buffer and reads the same bytes.
        let mut plain = vec![0u8; 4097];
        let shifted = &mut plain[1..];
        r.read_exact_at(4096, shifted).unwrap();
        assert_eq!(shifted, &data[4096..2 * 4096]);
        assert!(pooled() > 0, "the bounce buffer went back to the pool");
    }

    #[test]
    fn reused_read_buffers_never_show_an_earlier_reads_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let full = dir.path().join("full");
        let short = dir.path().join("short");
        std::fs::write(&full, vec![0xAAu8; 64 << 10]).unwrap();
        let tail: Vec<u8> = (0..5000u32).map(|i| (i % 7) as u8).collect();
        std::fs::write(&short, &tail).unwrap();
        let a = RealFs.open(&full, true).unwrap();
        let b = RealFs.open(&short, true).unwrap();
        for round in 0..3 {
            // Fill this thread's spare buffers with 0xAA, of every size used below.
            for len in [100usize, 4096, 8192, 20_000] {
                let mut buf = vec![0u8; len];
                a.read_exact_at(0, &mut buf).unwrap();
                assert!(buf.iter().all(|&x| x == 0xAA), "round {round}");
            }
            let mut buf = vec![0u8; 904];
            b.read_exact_at(4096, &mut buf).unwrap();
            assert_eq!(buf, tail[4096..], "round {round}");
            // Past the end: an error, not the bytes a spare buffer held.
            let mut past = vec![0u8; 1000];
            let r = b.read_exact_at(4500, &mut past);
            assert!(
                matches!(&r, Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::UnexpectedEof),
                "round {round}: {r:?}"
            );
            // The same through a batch (io_uring where the kernel allows it).
            let (mut x, mut y, mut z) = (vec![0u8; 904], vec![0u8; 300], vec![0u8; 1000]);
            let mut reqs = [
                BatchRead {
                    file: b.as_ref(),
                    offset: 4096,
                    buf: &mut x,
                },
                BatchRead {
                    file: b.as_ref(),
                    offset: 10,
                    buf: &mut y,
                },
                BatchRead {
                    file: b.as_ref(),
                    offset: 4500,
                    buf: &mut z,
                },
            ];
            let filled = submit_batch(&mut reqs, None);
            if filled[0] {
                assert_eq!(x, tail[4096..]);
            }
            if filled[1] {
                assert_eq!(y, tail[10..310]);
            }
            assert!(!filled[2], "a read past the end was reported filled");
        }
    }

    /// Reads of `file` at assorted offsets and lengths (aligned and not, and past the
    /// end) through `read_exact_at_spinning` with `spin` give what `read_exact_at` gives.
    fn spun_reads_match_plain_reads(r: &dyn ReadableFile, data: &[u8], spin: std::time::Duration) {
        let len = data.len();
        for (off, n) in [
            (0, 4096),
            (0, 8192),
            (4096, 8192),
            (511, 2),
            (4095, 4097),
            (len - 1000, 1000),
            (len - 1000, 1001),
            (len, 1),
            (7, 0),
        ] {
            // A thread with no waits behind it spins on each of them.
            forget_waits();
            let mut spun = vec![0xEEu8; n];
            let mut plain = vec![0x11u8; n];
            let a = r.read_exact_at_spinning(off as u64, &mut spun, spin);
            let b = r.read_exact_at(off as u64, &mut plain);
            match (&a, &b) {
                (Ok(()), Ok(())) => {
                    assert_eq!(spun, plain, "at {off}+{n}");
                    assert_eq!(spun, &data[off..off + n], "at {off}+{n}");
                }
                (Err(Error::Io { source: x, .. }), Err(Error::Io { source: y, .. })) => {
                    assert_eq!(x.kind(), y.kind(), "at {off}+{n}");
                }
                _ => panic!("at {off}+{n}: spun {a:?}, plain {b:?}"),
            }
        }
    }

    #[test]
    fn spun_direct_reads_return_the_bytes_and_errors_of_plain_reads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 253) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let r = RealFs.open(&p, true).unwrap();
        UNCAPPED.with(|u| u.set(true));
        // A long spin (reads complete while the thread polls) and one that runs out at
        // once (the thread sleeps in the kernel for the rest).
        for spin in [
            std::time::Duration::from_millis(50),
            std::time::Duration::from_nanos(1),
        ] {
            // A thread with no waits behind it spins (the first read, at least).
            forget_waits();
            let before = SPUN_READS.with(|n| n.get());
            spun_reads_match_plain_reads(r.as_ref(), &data, spin);
            if !uring_unavailable() {
                assert!(
                    SPUN_READS.with(|n| n.get()) > before,
                    "no read went through the ring with a spin of {spin:?}"
                );
            }
        }
        // A buffered file never spins: its reads are plain `pread`s.
        let buffered = RealFs.open(&p, false).unwrap();
        let before = SPUN_READS.with(|n| n.get());
        spun_reads_match_plain_reads(
            buffered.as_ref(),
            &data,
            std::time::Duration::from_millis(50),
        );
        assert_eq!(SPUN_READS.with(|n| n.get()), before);
        UNCAPPED.with(|u| u.set(false));
    }

    /// Whether the running kernel is at least `major.minor` (from `uname`'s release).
    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release
            .trim()
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().ok());
        match (parts.next().flatten(), parts.next().flatten()) {
            (Some(a), Some(b)) => (a, b) >= (major, minor),
            _ => false,
        }
    }

    #[test]
    fn cooperative_and_plain_rings_return_the_bytes_of_plain_reads_alone_and_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let r = RealFs.open(&p, true).unwrap();
        for plain in [false, true] {
            // A fresh thread makes a fresh ring, of the kind asked for.
            std::thread::scope(|s| {
                s.spawn(|| {
                    PLAIN_RINGS.with(|c| c.set(plain));
                    UNCAPPED.with(|u| u.set(true));
                    let before = SPUN_READS.with(|n| n.get());
                    spun_reads_match_plain_reads(
                        r.as_ref(),
                        &data,
                        std::time::Duration::from_millis(50),
                    );
                    if uring_unavailable() {
                        return;
                    }
                    assert!(SPUN_READS.with(|n| n.get()) > before, "plain: {plain}");
                    // Linux 5.19 has cooperative completion work: the ring is made so
                    // unless a plain one is asked for.
                    if !plain && kernel_at_least(5, 19) {
                        assert!(COOPERATIVE_RING.with(std::cell::Cell::get));
                    }
                    if plain {
                        assert!(!COOPERATIVE_RING.with(std::cell::Cell::get));
                        assert_eq!(FLAGGED_ENTERS.with(std::cell::Cell::get), 0);
                    }
                    // A spun batch of reads across the file, unaligned ones among them.
                    let io = crate::io::Io::new(Arc::new(RealFs), true).with_read_spin_us(50_000);
                    let spans: Vec<(u64, usize)> = (0..40u64)
                        .map(|i| (i * 7_001 % 290_000, 1 + (i as usize * 977) % 9_000))
                        .collect();
                    let mut bufs: Vec<Vec<u8>> = spans.iter().map(|&(_, n)| vec![0; n]).collect();
                    let file = io.open(&p, crate::io::IoComponent::LevelRead).unwrap();
                    let mut reqs: Vec<crate::io::BatchRead<'_>> = spans
                        .iter()
                        .zip(bufs.iter_mut())
                        .map(|(&(at, _), buf)| crate::io::BatchRead {
                            file: file.as_ref(),
                            offset: at,
                            buf: buf.as_mut_slice(),
                        })
                        .collect();
                    for (i, res) in io.read_batch(&mut reqs).into_iter().enumerate() {
                        res.unwrap_or_else(|e| panic!("read {i} (plain: {plain}): {e}"));
                    }
                    drop(reqs);
                    for (&(at, n), buf) in spans.iter().zip(&bufs) {
                        let at = at as usize;
                        assert_eq!(buf, &data[at..at + n], "at {at}+{n}, plain: {plain}");
                    }
                    UNCAPPED.with(|u| u.set(false));
                });
            });
        }
    }

    #[test]
    fn a_read_the_ring_fails_is_left_to_pread() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 16_384]).unwrap();
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&p)
            .unwrap();
        UNCAPPED.with(|u| u.set(true));
        let spin = std::time::Duration::from_millis(50);
        let mut buf = AlignedBuf::new(4096);
        // A descriptor that is not open (EBADF) and an `O_DIRECT` read at an unaligned
        // offset (EINVAL): the ring completes each with an error, and the read is not
        // reported done, so the caller's `pread` reports the error itself.
        assert_eq!(spin_read(-1, buf.full_mut(), 0, spin, WaitPlan::Spin), None);
        assert_eq!(
            spin_read(file.as_raw_fd(), buf.full_mut(), 1, spin, WaitPlan::Spin),
            None
        );
        assert!(file.read_at(buf.full_mut(), 1).is_err());
        // The ring still works after them.
        let got = spin_read(file.as_raw_fd(), buf.full_mut(), 4096, spin, WaitPlan::Spin);
        if !uring_unavailable() {
            assert_eq!(got, Some(4096));
            assert!(buf.full_mut().iter().all(|&b| b == 7));
        }
        // Larger than the spinning bound: never through the ring.
        let mut big = AlignedBuf::new(SPIN_READ_MAX + 4096);
        assert_eq!(
            spin_read(file.as_raw_fd(), big.full_mut(), 0, spin, WaitPlan::Spin),
            None
        );
        UNCAPPED.with(|u| u.set(false));
    }

    /// Runs `f` on a fresh thread (a fresh ring) that keeps its own "`io_uring`
    /// unavailable" flag (starting from the process's) and spins whatever the others do;
    /// `f` gets the faults to inject.
    fn with_ring_faults(f: impl FnOnce(&dyn Fn(&[InjectedEnter])) + Send) {
        std::thread::scope(|s| {
            s.spawn(|| {
                UNAVAILABLE_HERE.with(|c| c.set(Some(uring_unavailable())));
                UNCAPPED.with(|u| u.set(true));
                forget_waits();
                // The ring made now: where the kernel refuses one, the thread's flag says
                // so, and the tests (which need a ring to fail) stop there.
                RING.with(|r| {
                    ring_in(&mut r.borrow_mut());
                });
                if uring_unavailable() {
                    eprintln!("io_uring is unavailable here: the ring-failure checks did not run");
                    return;
                }
                let inject = |faults: &[InjectedEnter]| {
                    INJECTED_ENTERS.with(|q| q.borrow_mut().extend(faults.iter().copied()));
                };
                f(&inject);
                // Every injected fault was met.
                assert!(INJECTED_ENTERS.with(|q| q.borrow().is_empty()));
            });
        });
    }

    /// A file of `len` patterned bytes in `dir`, its path and its bytes.
    fn patterned_file(dir: &std::path::Path, len: u32) -> (std::path::PathBuf, Vec<u8>) {
        let p = dir.join("f");
        let data: Vec<u8> = (0..len).map(|i| (i * 11 % 241) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        (p, data)
    }

    /// Where a test makes a ring fail: at the entry that submits the reads, or at the
    /// sleeping wait that follows a spin (the spin then ends the moment the reads are
    /// submitted, so that the wait is the next entry whatever the read's timing).
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum FaultAt {
        Submission,
        WaitAfterSpin,
    }

    impl FaultAt {
        /// The entries to inject for `fault` to land here.
        fn entries(self, fault: InjectedEnter) -> Vec<InjectedEnter> {
            match self {
                FaultAt::Submission => vec![fault],
                FaultAt::WaitAfterSpin => vec![InjectedEnter::AsUsual, fault],
            }
        }

        /// Runs `f` with this thread's spin ending as this place needs.
        fn run(self, f: impl FnOnce()) {
            let ends_at_submission = self == FaultAt::WaitAfterSpin;
            SPIN_ENDS_AT_SUBMISSION.with(|c| c.set(ends_at_submission));
            f();
            SPIN_ENDS_AT_SUBMISSION.with(|c| c.set(false));
        }
    }

    /// A spun read whose ring fails at `at`: interrupted once, it is entered again and the
    /// read is the ring's; refused, or failed after the kernel took the read, the ring is
    /// retired (its buffer left to the kernel) and that read and every later one return the
    /// file's bytes through `pread`.
    fn spun_read_survives_a_ring_failure(at: FaultAt) {
        let dir = tempfile::tempdir().unwrap();
        let (p, data) = patterned_file(dir.path(), 40_000);
        let r = RealFs.open(&p, true).unwrap();
        let spin = std::time::Duration::from_millis(50);
        let read = |at: usize, n: usize| {
            let mut buf = vec![0u8; n];
            r.read_exact_at_spinning(at as u64, &mut buf, spin).unwrap();
            assert_eq!(buf, &data[at..at + n], "at {at}+{n}");
        };
        with_ring_faults(|inject| {
            at.run(|| {
                inject(&at.entries(InjectedEnter::Refused(libc::EINTR)));
                let before = SPUN_READS.with(std::cell::Cell::get);
                let leaked = LEAKED_BUFFERS.with(std::cell::Cell::get);
                read(4096, 4096);
                assert_eq!(SPUN_READS.with(std::cell::Cell::get), before + 1, "{at:?}");
                assert_eq!(LEAKED_BUFFERS.with(std::cell::Cell::get), leaked, "{at:?}");
                assert!(!uring_unavailable(), "{at:?}");
                // The ring still serves reads.
                read(0, 8192);
                assert_eq!(SPUN_READS.with(std::cell::Cell::get), before + 2, "{at:?}");
            });
        });
        for fault in [
            InjectedEnter::Refused(libc::EBADF),
            InjectedEnter::FailedAfter(libc::EIO),
        ] {
            with_ring_faults(|inject| {
                at.run(|| {
                    inject(&at.entries(fault));
                    let before = SPUN_READS.with(std::cell::Cell::get);
                    let leaked = LEAKED_BUFFERS.with(std::cell::Cell::get);
                    read(8192, 4096);
                    // The read's buffer is left to the kernel, which may have taken the read.
                    assert_eq!(
                        LEAKED_BUFFERS.with(std::cell::Cell::get),
                        leaked + 1,
                        "{at:?} {fault:?}"
                    );
                    assert!(uring_unavailable(), "{at:?} {fault:?}");
                    assert!(RING.with(|r| r.borrow().is_none()), "{at:?} {fault:?}");
                    read(100, 9000);
                    read(0, 4096);
                    assert_eq!(
                        SPUN_READS.with(std::cell::Cell::get),
                        before,
                        "{at:?} {fault:?}"
                    );
                });
            });
        }
    }

    #[test]
    fn a_spun_read_whose_submission_fails_retires_the_ring_and_still_returns_its_bytes() {
        spun_read_survives_a_ring_failure(FaultAt::Submission);
    }

    #[test]
    fn a_spun_read_whose_wait_after_the_spin_fails_retires_the_ring_and_returns_its_bytes() {
        spun_read_survives_a_ring_failure(FaultAt::WaitAfterSpin);
    }

    /// A batch whose ring fails at `at`, with each spin in `spins` (`None`: not spinning):
    /// interrupted once, every read is filled by the ring; refused, or failed after the
    /// kernel took the reads, none is reported filled, every buffer is left to the kernel,
    /// the ring is retired, and every read, that batch's and later ones, is done on its own
    /// and returns its bytes.
    fn batch_survives_a_ring_failure(at: FaultAt, spins: &[Option<u32>]) {
        let dir = tempfile::tempdir().unwrap();
        let (p, data) = patterned_file(dir.path(), 200_000);
        let spans: Vec<(u64, usize)> = (0..12u64)
            .map(|i| (i * 15_013 % 190_000, 1 + (i as usize * 733) % 8_000))
            .collect();
        // Reads the spans in one batch of the ring (`spin`: spinning on the completions, or
        // not) and checks the reads it filled; then reads them through `Io::read_batch`
        // and checks every one. Returns what the ring filled.
        let batch = |spin: Option<u32>| -> Vec<bool> {
            let mut io = crate::io::Io::new(Arc::new(RealFs), true);
            if let Some(us) = spin {
                io = io.with_read_spin_us(us);
            }
            let file = io.open(&p, crate::io::IoComponent::LevelRead).unwrap();
            let read_all = |through_io: bool| {
                let mut bufs: Vec<Vec<u8>> = spans.iter().map(|&(_, n)| vec![0; n]).collect();
                let mut reqs: Vec<crate::io::BatchRead<'_>> = spans
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(&(at, _), buf)| crate::io::BatchRead {
                        file: file.as_ref(),
                        offset: at,
                        buf: buf.as_mut_slice(),
                    })
                    .collect();
                let filled = if through_io {
                    for (i, res) in io.read_batch(&mut reqs).into_iter().enumerate() {
                        res.unwrap_or_else(|e| panic!("read {i}: {e}"));
                    }
                    vec![true; spans.len()]
                } else {
                    let spin = spin.map(|us| std::time::Duration::from_micros(u64::from(us)));
                    submit_batch(&mut reqs, spin)
                };
                drop(reqs);
                for ((&(at, n), buf), &f) in spans.iter().zip(&bufs).zip(&filled) {
                    let at = at as usize;
                    if f {
                        assert_eq!(buf, &data[at..at + n], "at {at}+{n}");
                    }
                }
                filled
            };
            let filled = read_all(false);
            read_all(true);
            filled
        };
        for &spin in spins {
            with_ring_faults(|inject| {
                at.run(|| {
                    inject(&at.entries(InjectedEnter::Refused(libc::EINTR)));
                    let polled = POLLED_ROUNDS.with(std::cell::Cell::get);
                    assert!(batch(spin).iter().all(|&f| f), "{at:?}, spin {spin:?}");
                    // A spinning round spun (and so, at a wait, met the wait after its spin).
                    if spin.is_some() {
                        assert!(POLLED_ROUNDS.with(std::cell::Cell::get) > polled);
                    }
                    assert!(!uring_unavailable());
                });
            });
            for fault in [
                InjectedEnter::Refused(libc::EBADF),
                InjectedEnter::FailedAfter(libc::EIO),
            ] {
                with_ring_faults(|inject| {
                    at.run(|| {
                        inject(&at.entries(fault));
                        let leaked = LEAKED_BUFFERS.with(std::cell::Cell::get);
                        let what = format!("{at:?}, {fault:?}, spin {spin:?}");
                        assert!(batch(spin).iter().all(|&f| !f), "{what}");
                        // Every read's buffer is left to the kernel.
                        assert_eq!(
                            LEAKED_BUFFERS.with(std::cell::Cell::get),
                            leaked + spans.len() as u64,
                            "{what}"
                        );
                        assert!(uring_unavailable(), "{what}");
                        assert!(RING.with(|r| r.borrow().is_none()), "{what}");
                        // Later batches read one by one, and right.
                        assert!(batch(spin).iter().all(|&f| !f), "{what}");
                    });
                });
            }
        }
    }

    #[test]
    fn a_batch_whose_submission_fails_retires_the_ring_and_each_read_still_returns_its_bytes() {
        batch_survives_a_ring_failure(FaultAt::Submission, &[None, Some(50_000)]);
    }

    #[test]
    fn a_batch_whose_wait_after_the_spin_fails_retires_the_ring_and_each_read_returns_its_bytes() {
        // Only a spinning round has a wait after its spin (one that does not spin submits
        // and waits in one entry, the case above).
        batch_survives_a_ring_failure(FaultAt::WaitAfterSpin, &[Some(50_000)]);
    }

    #[test]
    fn spinning_places_are_capped_and_given_back() {
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let a = SpinPlace::take_from(&COUNT, 2).expect("first place");
        let b = SpinPlace::take_from(&COUNT, 2).expect("second place");
        assert!(SpinPlace::take_from(&COUNT, 2).is_none(), "a third place");
        assert_eq!(COUNT.load(std::sync::atomic::Ordering::SeqCst), 2);
        drop(a);
        let c = SpinPlace::take_from(&COUNT, 2).expect("a place given back is taken again");
        drop((b, c));
        assert_eq!(COUNT.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(max_spinning() >= 1);
    }

    #[test]
    fn concurrent_spinning_readers_each_get_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 249) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let r = RealFs.open(&p, true).unwrap();
        // More threads than may spin at once: the others read with a plain `pread`.
        std::thread::scope(|s| {
            for t in 0..6usize {
                let (r, data) = (&r, &data);
                s.spawn(move || {
                    // Half the threads spin whatever the others do: rings in use at once.
                    UNCAPPED.with(|u| u.set(t % 2 == 0));
                    for i in 0..200usize {
                        let off = ((t * 977 + i * 131) % 255) * 4096;
                        let mut buf = vec![0u8; 8192];
                        r.read_exact_at_spinning(
                            off as u64,
                            &mut buf,
                            std::time::Duration::from_micros(if i % 2 == 0 { 500 } else { 1 }),
                        )
                        .unwrap();
                        assert_eq!(buf, &data[off..off + 8192], "thread {t} read {i}");
                    }
                });
            }
        });
    }

    /// This thread's average of kind `kind`, in nanoseconds.
    fn avg_of(kind: WaitKind) -> u64 {
        WAITS.with(|c| c.get().of(kind).avg_ns)
    }

    #[test]
    fn a_wait_average_weighs_each_new_wait_an_eighth_per_kind_and_a_probe_resets_it() {
        let ms = std::time::Duration::from_millis;
        forget_waits();
        assert_eq!(plan_wait(WaitKind::One, ms(0), true), WaitPlan::Spin);
        note_wait(WaitKind::One, ms(80), WaitPlan::Spin, true);
        assert_eq!(avg_of(WaitKind::One), 10_000_000);
        note_wait(WaitKind::One, ms(0), WaitPlan::Spin, false);
        assert_eq!(avg_of(WaitKind::One), 8_750_000);
        // The other kind is its own.
        assert_eq!(avg_of(WaitKind::Batch), 0);
        assert_eq!(plan_wait(WaitKind::Batch, ms(0), true), WaitPlan::Spin);
        // (No slept wait yet: a spin is taken to pay.)
        forget_waits();
        note_wait(WaitKind::One, ms(70), WaitPlan::Spin, false);
        assert_eq!(plan_wait(WaitKind::One, ms(9), true), WaitPlan::Spin);
        // Past the spin: 31 waits sleep, the 32nd probes, and so on.
        let plans: Vec<WaitPlan> = (1..2 * PROBE_EVERY)
            .map(|_| plan_wait(WaitKind::One, ms(8), true))
            .collect();
        for (i, plan) in plans.iter().enumerate() {
            let probe = (i + 2) % PROBE_EVERY as usize == 0;
            assert_eq!(*plan == WaitPlan::Probe, probe, "wait {i}");
            assert_eq!(plan.spins(), probe, "wait {i}");
        }
        // A probe that ran out of its spin counts as any wait; one that ended within it
        // sets the average.
        note_wait(WaitKind::One, ms(8), WaitPlan::Probe, false);
        assert_eq!(avg_of(WaitKind::One), 8_656_250);
        note_wait(WaitKind::One, ms(1), WaitPlan::Probe, true);
        assert_eq!(avg_of(WaitKind::One), 1_000_000);
        assert_eq!(plan_wait(WaitKind::One, ms(8), true), WaitPlan::Spin);
        // Waits past any duration do not overflow.
        note_wait(
            WaitKind::Batch,
            std::time::Duration::MAX,
            WaitPlan::Spin,
            false,
        );
        assert_ne!(
            plan_wait(WaitKind::Batch, ms(1 << 40), true),
            WaitPlan::Spin
        );
        forget_waits();
    }

    /// This thread's (spun, slept) averages of kind `kind`, in nanoseconds.
    fn ways_of(kind: WaitKind) -> (u64, u64) {
        WAITS.with(|c| {
            let w = *c.get().of(kind);
            (w.spun.ns, w.slept.ns)
        })
    }

    #[test]
    fn a_thread_spins_only_while_a_slept_wait_takes_an_eighth_longer_than_a_spun_one() {
        let us = std::time::Duration::from_micros;
        let spin = us(200);
        let weigh = |avg: u64, ns: u64| avg - avg / SLOW_WEIGHT + ns / SLOW_WEIGHT;
        forget_waits();
        // Each way's average is the mean of its first waits, then each new one weighs a
        // sixty-fourth.
        note_wait(WaitKind::One, us(100), WaitPlan::Sleep, false);
        note_wait(WaitKind::One, us(200), WaitPlan::Sleep, false);
        assert_eq!(ways_of(WaitKind::One), (0, 150_000));
        for _ in 0..SLOW_WEIGHT {
            note_wait(WaitKind::One, us(100), WaitPlan::Spin, true);
        }
        assert_eq!(ways_of(WaitKind::One).0, 100_000);
        note_wait(WaitKind::One, us(164), WaitPlan::Spin, true);
        assert_eq!(ways_of(WaitKind::One).0, weigh(100_000, 164_000));
        // A spin that ran out of its budget counts whole (it slept for the rest), and so
        // does a probe that spun.
        let before = ways_of(WaitKind::One).0;
        note_wait(WaitKind::One, us(1_024), WaitPlan::Spin, false);
        assert_eq!(ways_of(WaitKind::One).0, weigh(before, 1_024_000));
        assert_eq!(
            ways_of(WaitKind::Batch),
            (0, 0),
            "the other kind is its own"
        );

        // Sleeping costs twice a spun wait: the thread spins, and every 32nd wait sleeps
        // to keep the slept average current.
        let plans = |n: u32| -> Vec<WaitPlan> {
            (0..n)
                .map(|_| {
                    let plan = plan_wait(WaitKind::One, spin, true);
                    note_wait(WaitKind::One, us(60), plan, plan.spins());
                    plan
                })
                .collect()
        };
        forget_waits();
        note_wait(WaitKind::One, us(50), WaitPlan::Spin, true);
        note_wait(WaitKind::One, us(100), WaitPlan::Sleep, false);
        let got = plans(PROBE_EVERY);
        for (i, plan) in got.iter().enumerate() {
            let probe = i + 1 == PROBE_EVERY as usize;
            let want = if probe {
                WaitPlan::Sleep
            } else {
                WaitPlan::Spin
            };
            assert_eq!(*plan, want, "wait {i}");
        }

        // Sleeping costs at most an eighth more: the thread sleeps, and every 32nd wait
        // spins to see whether a spin pays again.
        forget_waits();
        note_wait(WaitKind::One, us(60), WaitPlan::Spin, true);
        note_wait(WaitKind::One, us(67), WaitPlan::Sleep, false);
        let got = plans(2 * PROBE_EVERY);
        for (i, plan) in got.iter().enumerate() {
            let probe = (i + 1) % PROBE_EVERY as usize == 0;
            let want = if probe {
                WaitPlan::Probe
            } else {
                WaitPlan::Sleep
            };
            assert_eq!(*plan, want, "wait {i}");
        }
        // A read whose wait is not noted (over 16 KiB) follows the plan but neither
        // probes nor counts towards the next probe.
        let planned = WAITS.with(|c| c.get().one.planned);
        for _ in 0..3 * PROBE_EVERY {
            assert_eq!(plan_wait(WaitKind::One, spin, false), WaitPlan::Sleep);
        }
        assert_eq!(WAITS.with(|c| c.get().one.planned), planned);

        // The line between: an eighth more is still too little, a few nanoseconds past
        // it pays.
        forget_waits();
        note_wait(WaitKind::One, us(80), WaitPlan::Spin, true);
        note_wait(WaitKind::One, us(90), WaitPlan::Sleep, false);
        assert_eq!(plan_wait(WaitKind::One, spin, true), WaitPlan::Sleep);
        forget_waits();
        note_wait(WaitKind::One, us(80), WaitPlan::Spin, true);
        note_wait(
            WaitKind::One,
            us(90) + std::time::Duration::from_nanos(8),
            WaitPlan::Sleep,
            false,
        );
        assert_eq!(plan_wait(WaitKind::One, spin, true), WaitPlan::Spin);

        // A slow spell: waits planned while they outlast the spin count in neither way,
        // and the probe that ends in time forgets both (the thread spins first again).
        forget_waits();
        note_wait(WaitKind::One, us(60), WaitPlan::Spin, true);
        note_wait(WaitKind::One, us(61), WaitPlan::Sleep, false);
        assert_eq!(plan_wait(WaitKind::One, spin, true), WaitPlan::Sleep);
        WAITS.with(|c| {
            let mut w = c.get();
            w.one.avg_ns = 900_000;
            c.set(w);
        });
        let mut probed = false;
        for _ in 0..PROBE_EVERY {
            let plan = plan_wait(WaitKind::One, spin, true);
            if plan == WaitPlan::Probe {
                probed = true;
                note_wait(WaitKind::One, us(40), plan, true);
                break;
            }
            assert_eq!(plan, WaitPlan::Sleep);
            note_wait(WaitKind::One, us(900), plan, false);
            assert_eq!(ways_of(WaitKind::One), (60_000, 61_000));
        }
        assert!(probed);
        assert_eq!(avg_of(WaitKind::One), 40_000);
        assert_eq!(ways_of(WaitKind::One), (40_000, 0));
        assert_eq!(plan_wait(WaitKind::One, spin, true), WaitPlan::Spin);
        forget_waits();
    }

    #[test]
    fn a_planned_spin_that_finds_no_spinning_place_is_noted_as_slept() {
        let dir = tempfile::tempdir().unwrap();
        let (p, data) = patterned_file(dir.path(), 40_000);
        let r = RealFs.open(&p, true).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                NO_PLACE.with(|c| c.set(true));
                forget_waits();
                let mut buf = vec![0u8; 4096];
                r.read_exact_at_spinning(4096, &mut buf, std::time::Duration::from_millis(50))
                    .unwrap();
                assert_eq!(buf, &data[4096..8192]);
                let w = WAITS.with(|c| c.get().one);
                assert_eq!((w.spun.n, w.slept.n), (0, 1));
                let (mut x, mut y) = (vec![0u8; 4096], vec![0u8; 4096]);
                let mut reqs = [
                    BatchRead {
                        file: r.as_ref(),
                        offset: 0,
                        buf: &mut x,
                    },
                    BatchRead {
                        file: r.as_ref(),
                        offset: 20_480,
                        buf: &mut y,
                    },
                ];
                let filled = submit_batch(&mut reqs, Some(std::time::Duration::from_millis(50)));
                if filled.iter().all(|&f| f) {
                    assert_eq!((&x[..], &y[..]), (&data[..4096], &data[20_480..24_576]));
                    let w = WAITS.with(|c| c.get().batch);
                    assert_eq!((w.spun.n, w.slept.n), (0, 1));
                }
                NO_PLACE.with(|c| c.set(false));
            });
        });
    }

    #[test]
    fn reads_that_outlast_the_spin_sleep_at_once_but_probe_and_spin_again_when_fast() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..64_000u32).map(|i| (i % 239) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let f = RealFs.open(&p, true).unwrap();
        UNCAPPED.with(|u| u.set(true));
        let spin = std::time::Duration::from_millis(5);
        let slow = |kind| {
            for _ in 0..40 {
                note_wait(
                    kind,
                    std::time::Duration::from_secs(1000),
                    WaitPlan::Spin,
                    false,
                );
            }
        };
        let fast = |kind| {
            for _ in 0..400 {
                note_wait(
                    kind,
                    std::time::Duration::from_micros(1),
                    WaitPlan::Spin,
                    true,
                );
            }
        };
        // (Read after the reads: a thread learns the ring is unavailable at its first use.)
        let ring = || !uring_unavailable();
        let spun = || SPUN_READS.with(|n| n.get());

        // Single reads: after waits far past the spin, 31 reads in a row sleep (plain
        // reads, each counted: the average falls), and the 32nd probes through the ring.
        forget_waits();
        slow(WaitKind::One);
        let mut buf = vec![0u8; 4096];
        let before = spun();
        for i in 0..PROBE_EVERY as usize {
            let avg = avg_of(WaitKind::One);
            let at = (i % 15) * 4096;
            f.read_exact_at_spinning(at as u64, &mut buf, spin).unwrap();
            assert_eq!(buf, &data[at..at + 4096], "read {i}");
            if i + 1 < PROBE_EVERY as usize {
                assert_eq!(spun(), before, "read {i} spun past slow waits");
                assert!(avg_of(WaitKind::One) < avg, "slept read {i} not counted");
            }
        }
        if ring() {
            assert_eq!(spun(), before + 1, "the probe did not go through the ring");
        }
        // After fast waits every read spins.
        fast(WaitKind::One);
        let before = spun();
        f.read_exact_at_spinning(4096, &mut buf, spin).unwrap();
        assert_eq!(buf, &data[4096..8192]);
        if ring() {
            assert_eq!(spun(), before + 1, "no spin after fast waits");
        }

        // A batch: the same, with its own average (the single reads' is fast now).
        let batch = |f: &dyn ReadableFile| {
            let (mut x, mut y) = (vec![0u8; 4096], vec![0u8; 4096]);
            let polled = POLLED_ROUNDS.with(|c| c.get());
            let mut reqs = [
                BatchRead {
                    file: f,
                    offset: 0,
                    buf: &mut x,
                },
                BatchRead {
                    file: f,
                    offset: 40_960,
                    buf: &mut y,
                },
            ];
            let filled = submit_batch(&mut reqs, Some(spin));
            if ring() {
                assert_eq!(filled, vec![true, true]);
            }
            if filled[0] {
                assert_eq!(x, &data[..4096]);
            }
            if filled[1] {
                assert_eq!(y, &data[40_960..45_056]);
            }
            POLLED_ROUNDS.with(|c| c.get()) > polled
        };
        slow(WaitKind::Batch);
        let before = avg_of(WaitKind::Batch);
        assert!(!batch(f.as_ref()), "a batch polled past slow waits");
        if ring() {
            assert!(
                avg_of(WaitKind::Batch) < before,
                "the slept batch not counted"
            );
        }
        fast(WaitKind::Batch);
        let polled = batch(f.as_ref());
        assert_eq!(polled, ring(), "a batch did not poll after fast waits");
        forget_waits();
        UNCAPPED.with(|u| u.set(false));
    }

    #[test]
    fn a_spun_batch_fills_what_an_unspun_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..40_000u32).map(|i| (i % 241) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let f = RealFs.open(&p, true).unwrap();
        UNCAPPED.with(|u| u.set(true));
        for spin in [
            None,
            Some(std::time::Duration::from_millis(50)),
            Some(std::time::Duration::from_nanos(1)),
        ] {
            let (mut x, mut y, mut z) = (vec![0u8; 8192], vec![0u8; 300], vec![0u8; 1000]);
            let mut reqs = [
                BatchRead {
                    file: f.as_ref(),
                    offset: 8192,
                    buf: &mut x,
                },
                BatchRead {
                    file: f.as_ref(),
                    offset: 10,
                    buf: &mut y,
                },
                BatchRead {
                    file: f.as_ref(),
                    offset: 39_500,
                    buf: &mut z,
                },
            ];
            forget_waits();
            let polled = POLLED_ROUNDS.with(|c| c.get());
            let filled = submit_batch(&mut reqs, spin);
            if !uring_unavailable() {
                assert_eq!(filled, vec![true, true, false], "{spin:?}");
                assert_eq!(
                    POLLED_ROUNDS.with(|c| c.get()) > polled,
                    spin.is_some(),
                    "{spin:?}"
                );
            }
            if filled[0] {
                assert_eq!(x, &data[8192..16_384]);
            }
            if filled[1] {
                assert_eq!(y, &data[10..310]);
            }
        }
        UNCAPPED.with(|u| u.set(false));
    }

    #[test]
    fn direct_reads_at_any_offset_and_length_return_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let file = std::fs::File::open(&p).unwrap();
        let align = dio_read_align(&file);
        assert!(align.is_power_of_two() && (512..=IO_ALIGN as u64).contains(&align));
        let r = RealFs.open(&p, true).unwrap();
        for (off, len) in [
            (0, 1),
            (511, 2),
            (4095, 4097),
            (1000, 1030),
            (49_000, 1000),
            (7, 0),
        ] {
            let mut buf = vec![0u8; len];
            r.read_exact_at(off as u64, &mut buf).unwrap();
            assert_eq!(buf, data[off..off + len], "offset {off}, length {len}");
        }
        // Past the end: an error, not garbage.
        let mut buf = vec![0u8; 100];
        assert!(r.read_exact_at(49_950, &mut buf).is_err());
    }

    #[test]
    fn second_lock_fails_and_release_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("LOCK");
        let l = RealFs.lock(&p).unwrap();
        assert!(matches!(RealFs.lock(&p), Err(Error::Locked { .. })));
        drop(l);
        assert!(RealFs.lock(&p).is_ok());
    }

    #[test]
    fn a_batch_reads_what_single_reads_read_and_the_same_errors() {
        use crate::io::{BatchRead, Io, IoComponent};
        let dir = tempfile::tempdir().unwrap();
        let a: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let b: Vec<u8> = (0..70_000u32).map(|i| (i % 13) as u8 ^ 0x5a).collect();
        std::fs::write(dir.path().join("a"), &a).unwrap();
        std::fs::write(dir.path().join("b"), &b).unwrap();
        for direct in [false, true] {
            let io = Io::new(Arc::new(RealFs), direct);
            let fa = io
                .open(&dir.path().join("a"), IoComponent::LargeLog)
                .unwrap();
            let fb = io
                .open(&dir.path().join("b"), IoComponent::LargeLog)
                .unwrap();
            // Unaligned offsets and lengths, both files, one read past the end of b.
            let wants: Vec<(bool, u64, usize)> = vec![
                (true, 0, 10),
                (false, 1, 4097),
                (true, 123_457, 3000),
                (false, 69_990, 10),
                (true, 299_000, 1000),
                (false, 69_995, 10), // 5 bytes past the end
                (true, 4096, 8192),
            ];
            let mut bufs: Vec<Vec<u8>> = wants.iter().map(|w| vec![0u8; w.2]).collect();
            let before = io.stats().snapshot();
            let mut reqs: Vec<BatchRead<'_>> = wants
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&(in_a, offset, _), buf)| BatchRead {
                    file: if in_a { fa.as_ref() } else { fb.as_ref() },
                    offset,
                    buf: buf.as_mut_slice(),
                })
                .collect();
            let results = io.read_batch(&mut reqs);
            drop(reqs);
            let after = io.stats().snapshot();
            for (k, ((in_a, offset, len), res)) in wants.iter().zip(&results).enumerate() {
                let data = if *in_a { &a } else { &b };
                let (o, l) = (*offset as usize, *len);
                if o + l <= data.len() {
                    assert!(res.is_ok(), "direct {direct}, read {k}: {res:?}");
                    assert_eq!(&bufs[k][..], &data[o..o + l], "direct {direct}, read {k}");
                } else {
                    match res {
                        Err(crate::Error::Io { source, .. }) => {
                            assert_eq!(source.kind(), std::io::ErrorKind::UnexpectedEof)
                        }
                        other => panic!("read {k} past the end: {other:?}"),
                    }
                }
            }
            // Every successful read is counted once, with its bytes.
            let ok: Vec<usize> = wants
                .iter()
                .zip(&results)
                .filter(|(_, r)| r.is_ok())
                .map(|(w, _)| w.2)
                .collect();
            assert_eq!(
                after.read_ops_by(IoComponent::LargeLog)
                    - before.read_ops_by(IoComponent::LargeLog),
                ok.len() as u64
            );
            assert_eq!(
                after.read_by(IoComponent::LargeLog) - before.read_by(IoComponent::LargeLog),
                ok.iter().sum::<usize>() as u64
            );
        }
    }

    #[test]
    fn a_batch_larger_than_the_ring_is_read_in_rounds() {
        use crate::io::{BatchRead, Io, IoComponent};
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
        std::fs::write(dir.path().join("f"), &data).unwrap();
        let io = Io::new(Arc::new(RealFs), true);
        let f = io
            .open(&dir.path().join("f"), IoComponent::LevelRead)
            .unwrap();
        let n = RING_ENTRIES as usize * 2 + 5;
        let mut bufs: Vec<Vec<u8>> = (0..n).map(|i| vec![0u8; 100 + i]).collect();
        let mut reqs: Vec<BatchRead<'_>> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, buf)| BatchRead {
                file: f.as_ref(),
                offset: (i * 7919 % 900_000) as u64,
                buf: buf.as_mut_slice(),
            })
            .collect();
        for (i, r) in io.read_batch(&mut reqs).iter().enumerate() {
            assert!(r.is_ok(), "read {i}: {r:?}");
        }
        drop(reqs);
        for (i, buf) in bufs.iter().enumerate() {
            let o = i * 7919 % 900_000;
            assert_eq!(&buf[..], &data[o..o + buf.len()], "read {i}");
        }
    }

    #[test]
    fn read_time_is_counted_for_the_component_that_read() {
        use crate::io::{BatchRead, Io, IoComponent};
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..1_048_576u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("f"), &data).unwrap();
        for direct in [false, true] {
            let io = Io::new(Arc::new(RealFs), direct);
            let f = io
                .open(&dir.path().join("f"), IoComponent::LevelRead)
                .unwrap();
            let mut buf = vec![0u8; 65_536];
            let outer = std::time::Instant::now();
            for i in 0..16u64 {
                f.read_exact_at(i * 65_536, &mut buf).unwrap();
            }
            let outer = u64::try_from(outer.elapsed().as_nanos()).unwrap();
            let s = io.stats().snapshot();
            let timed = s.read_nanos_by(IoComponent::LevelRead);
            // The reads ran one after another inside the outer interval.
            assert!(timed > 0 && timed <= outer, "{timed} of {outer} ns");
            assert_eq!(s.read_ops_by(IoComponent::LevelRead), 16);
            assert_eq!(s.timed_reads_by(IoComponent::LevelRead), 16);
            assert_eq!(s.read_nanos_by(IoComponent::LargeLog), 0);
            // A batch's reads through the ring are counted, not timed (their waits
            // overlap); without a ring they are read one by one, and timed.
            let (mut x, mut y) = (vec![0u8; 4096], vec![0u8; 4096]);
            let mut reqs = [
                BatchRead {
                    file: f.as_ref(),
                    offset: 8192,
                    buf: &mut x,
                },
                BatchRead {
                    file: f.as_ref(),
                    offset: 65_536,
                    buf: &mut y,
                },
            ];
            assert!(io.read_batch(&mut reqs).iter().all(Result::is_ok));
            assert_eq!(
                (&x[..], &y[..]),
                (&data[8192..12_288], &data[65_536..69_632])
            );
            let s = io.stats().snapshot();
            assert_eq!(s.read_ops_by(IoComponent::LevelRead), 18);
            // (A ring may fail a read, which is then read alone, and timed.)
            let timed = s.timed_reads_by(IoComponent::LevelRead);
            if uring_unavailable() {
                assert_eq!(timed, 18, "direct {direct}");
            } else {
                assert!((16..18).contains(&timed), "direct {direct}: {timed}");
            }
        }
    }

    #[test]
    fn mapped_appends_cross_steps_and_finish_cuts_the_reserved_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let mut w = RealFs.create_mapped(&p).unwrap();
        // Created: the first step reserved, nothing appended.
        assert_eq!(w.len(), 0);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), MAPPED_FIRST_STEP);
        // Pieces of odd sizes, so that some straddle a step's end.
        let data: Vec<u8> = (0..(2 * MAPPED_MAX_STEP as usize + 70_001))
            .map(|i| (i % 251) as u8 | 1)
            .collect();
        for piece in data.chunks(9_973) {
            w.append(piece).unwrap();
        }
        w.flush().unwrap();
        assert_eq!(w.len(), data.len() as u64);
        // The file is reserved in doubling steps (4 KiB, 4, 8, 16, ... 512 KiB, then 1 MiB
        // steps) past the bytes appended; the rest is zeros (what a crash leaves), and the
        // bytes are in the page cache without a write.
        let on_disk = std::fs::read(&p).unwrap();
        assert_eq!(on_disk.len() as u64, 3 * MAPPED_MAX_STEP);
        assert_eq!(&on_disk[..data.len()], &data[..]);
        assert!(on_disk[data.len()..].iter().all(|&b| b == 0));
        w.sync_data().unwrap();
        w.finish().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), data);
        // Finished: durable once synced, nothing appended after, finishing twice is fine.
        w.sync_data().unwrap();
        w.finish().unwrap();
        let e = w.append(b"late").unwrap_err();
        assert!(matches!(e, Error::Internal(_)), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), data);
    }

    #[test]
    fn mapped_appends_through_io_are_counted_and_sealed() {
        use crate::io::{Io, IoComponent};
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false).with_mapped_log_writes(true);
        let p = dir.path().join("000001.wal");
        let mut w = io.create(&p, IoComponent::Wal).unwrap();
        w.append(&[7u8; 3000]).unwrap();
        // Through a mapping: the file was reserved ahead.
        assert_eq!(std::fs::metadata(&p).unwrap().len(), MAPPED_FIRST_STEP);
        assert_eq!(io.stats().snapshot().written_by(IoComponent::Wal), 3000);
        // The large log too, but no other component.
        let v = dir.path().join("000003.vlog");
        let mut large = io.create(&v, IoComponent::LargeLog).unwrap();
        large.append(&[2u8; 10]).unwrap();
        assert_eq!(std::fs::metadata(&v).unwrap().len(), MAPPED_FIRST_STEP);
        let q = dir.path().join("000002.tlog");
        let mut l = io.create(&q, IoComponent::TransientLog).unwrap();
        l.append(&[1u8; 10]).unwrap();
        l.flush().unwrap();
        assert_eq!(std::fs::metadata(&q).unwrap().len(), 10);
        // Sealed: neither appends nor the cut go through.
        io.seal();
        assert!(matches!(w.append(b"x"), Err(Error::Closed)));
        assert!(matches!(w.finish(), Err(Error::Closed)));
        assert_eq!(std::fs::metadata(&p).unwrap().len(), MAPPED_FIRST_STEP);
    }

    /// Set in the child process of
    /// [`a_mapping_refused_after_the_reservation_gives_the_reservation_back`].
    const MAP_REFUSED_CHILD: &str = "HYBRIDKV_MAP_REFUSED_FILE";

    /// The kernel refuses the mapping after `fallocate` reserved the file's first step:
    /// `create_mapped` must fail with the `mmap` error naming the file and leave the file
    /// empty (a reserved tail of zeros would read as a torn segment header). The refusal is
    /// the kernel's own: the test runs itself again as a child process whose address-space
    /// limit (`RLIMIT_AS`) is set to what it already maps, so no new mapping fits, while
    /// `fallocate` needs no address space.
    #[test]
    fn a_mapping_refused_after_the_reservation_gives_the_reservation_back() {
        if let Ok(path) = std::env::var(MAP_REFUSED_CHILD) {
            map_refused_child(Path::new(&path));
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000001.vlog");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "io::real::tests::a_mapping_refused_after_the_reservation_gives_the_reservation_back",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(MAP_REFUSED_CHILD, &path)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed: {said}");
        assert!(
            said.contains("CHILD-CHECKED"),
            "the child's checks did not run: {said}"
        );
    }

    fn map_refused_child(path: &Path) {
        // Whether this file system gets mapped appends at all: a copy-on-write one, or one
        // without `fallocate`, gets buffered appends and never maps. Then there is no
        // mapping to refuse: the fallback is checked, without a lowered limit.
        let probe = File::create(path.with_extension("probe")).unwrap();
        // SAFETY: the descriptor is open while `probe` lives.
        let reserves = unsafe { libc::fallocate(probe.as_raw_fd(), 0, 0, 4096) } == 0;
        let maps = reserves_blocks(&probe) && reserves;
        drop(probe);
        if !maps {
            assert!(RealFs.create_mapped(path).is_ok());
            assert_eq!(std::fs::metadata(path).unwrap().len(), 0);
            println!("CHILD-CHECKED (buffered appends on this file system)");
            return;
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmSize:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        let mut old = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain libc calls on this process's own limits.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_AS, &mut old), 0);
            let tight = libc::rlimit {
                rlim_cur: vm_kib * 1024,
                rlim_max: old.rlim_max,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &tight), 0);
        }
        let created = RealFs.create_mapped(path);
        // SAFETY: as above; the soft limit goes back below the unchanged hard one.
        unsafe {
            assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &old), 0);
        }
        let err = created
            .err()
            .expect("no mapping fits: the create must fail");
        let text = err.to_string();
        assert!(
            text.contains("mmap") && text.contains(&path.display().to_string()),
            "{text}"
        );
        assert_eq!(
            std::fs::metadata(path).unwrap().len(),
            0,
            "the reserved step must be given back"
        );
        println!("CHILD-CHECKED");
    }
}
