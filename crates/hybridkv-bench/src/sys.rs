//! What the operating system says about this process and machine: device bytes
//! (`/proc/self/io`), CPU time (`getrusage`), processor frequency (`/proc/cpuinfo`),
//! allocated bytes of a directory, and a description of the host.
//!
//! Everything here is Linux-specific; on another system the readers return zeros or
//! `None`, and the results say so (a zero device-byte count is never silently used as
//! an I/O amplification: see `record`).

use crate::error::{BenchError, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Bytes this process made the block layer read and write (`/proc/self/io`:
/// `read_bytes`, `write_bytes`), all threads included. With direct I/O this is device
/// traffic; buffered writes are counted when the page is dirtied, buffered reads only when
/// they miss the page cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceIo {
    /// `read_bytes`.
    pub read_bytes: u64,
    /// `write_bytes`.
    pub write_bytes: u64,
    /// `cancelled_write_bytes`: dirty page-cache bytes that were truncated before writeback.
    pub cancelled_write_bytes: u64,
}

impl DeviceIo {
    /// Parses the text of `/proc/<pid>/io`.
    pub fn parse(text: &str) -> Option<DeviceIo> {
        let mut io = DeviceIo::default();
        let mut seen = 0;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<u64>() else {
                continue;
            };
            match key.trim() {
                "read_bytes" => {
                    io.read_bytes = value;
                    seen += 1;
                }
                "write_bytes" => {
                    io.write_bytes = value;
                    seen += 1;
                }
                "cancelled_write_bytes" => io.cancelled_write_bytes = value,
                _ => {}
            }
        }
        (seen == 2).then_some(io)
    }

    /// The counters now, or `None` where `/proc/self/io` is missing (not Linux, or a
    /// kernel without task I/O accounting).
    pub fn now() -> Option<DeviceIo> {
        let text = std::fs::read_to_string("/proc/self/io").ok()?;
        Self::parse(&text)
    }

    /// `self - earlier`, saturating.
    pub fn since(&self, earlier: &DeviceIo) -> DeviceIo {
        DeviceIo {
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            cancelled_write_bytes: self
                .cancelled_write_bytes
                .saturating_sub(earlier.cancelled_write_bytes),
        }
    }
}

/// A block device's read counters (`/proc/diskstats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskReads {
    /// Reads completed (the fourth column).
    pub reads: u64,
    /// Milliseconds those reads spent from issue to completion, summed over reads (the
    /// seventh column: overlapping reads each count their whole time, so a batch of eight
    /// that took 100 us counts 800). The kernel prints it as a 32-bit counter, which
    /// wraps after about 49.7 days of summed read time.
    pub read_ms: u64,
}

impl DiskReads {
    /// `self - earlier`: the reads saturating, the milliseconds across one wrap of their
    /// 32-bit counter.
    pub fn since(&self, earlier: &DiskReads) -> DiskReads {
        let read_ms = match self.read_ms.checked_sub(earlier.read_ms) {
            Some(ms) => ms,
            None if earlier.read_ms <= u64::from(u32::MAX) => {
                (self.read_ms + (1 << 32)).saturating_sub(earlier.read_ms)
            }
            None => 0,
        };
        DiskReads {
            reads: self.reads.saturating_sub(earlier.reads),
            read_ms,
        }
    }
}

/// The read counters of block device `major:minor`, from the text of `/proc/diskstats`.
pub fn parse_disk_reads(diskstats: &str, major: u64, minor: u64) -> Option<DiskReads> {
    diskstats.lines().find_map(|line| {
        let mut cols = line.split_whitespace();
        let ma = cols.next()?.parse::<u64>().ok()?;
        let mi = cols.next()?.parse::<u64>().ok()?;
        let _name = cols.next()?;
        let reads = cols.next()?.parse::<u64>().ok()?;
        let _merged = cols.next()?;
        let _sectors = cols.next()?;
        let read_ms = cols.next()?.parse::<u64>().ok()?;
        (ma == major && mi == minor).then_some(DiskReads { reads, read_ms })
    })
}

/// The read counters so far of the block device holding `path` (`/proc/diskstats`).
/// They count every process's reads of that device, not only this one's; `None` off
/// Linux or when the device is not listed (e.g. a tmpfs or overlay directory).
pub fn device_reads(path: &Path) -> Option<DiskReads> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (u64::from(libc::major(dev)), u64::from(libc::minor(dev)));
    let text = std::fs::read_to_string("/proc/diskstats").ok()?;
    parse_disk_reads(&text, major, minor)
}

/// A `kB` field of `/proc/self/status` (e.g. `VmRSS`, `VmHWM`, `RssAnon`) in bytes.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// This process's resident memory now and its peak (`VmRSS`, `VmHWM`), in bytes; `None`
/// where `/proc/self/status` is unavailable.
pub fn resident_bytes() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    Some((
        parse_status_kib(&status, "VmRSS")?,
        parse_status_kib(&status, "VmHWM")?,
    ))
}

/// Starts a new peak: `VmHWM` becomes the current `VmRSS` (writing 5 to
/// `/proc/self/clear_refs`, Linux 4.0+). False where that is not allowed.
pub fn reset_peak_resident() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// User and system CPU seconds of this process, all threads included (`getrusage`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTime {
    /// User-mode seconds.
    pub user: f64,
    /// Kernel-mode seconds.
    pub sys: f64,
}

impl CpuTime {
    /// The process's CPU time so far.
    pub fn now() -> CpuTime {
        // SAFETY: `rusage` is plain old data, so all-zero is a valid value, and
        // `getrusage` only writes into the struct we pass.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a `rusage` we own, for the duration of the call.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
        if rc != 0 {
            return CpuTime::default();
        }
        let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        CpuTime {
            user: secs(usage.ru_utime),
            sys: secs(usage.ru_stime),
        }
    }

    /// `self - earlier` (never negative).
    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user: (self.user - earlier.user).max(0.0),
            sys: (self.sys - earlier.sys).max(0.0),
        }
    }

    /// User + system seconds.
    pub fn total(&self) -> f64 {
        self.user + self.sys
    }
}

/// The mean of the `cpu MHz` lines of a `/proc/cpuinfo` text.
pub fn parse_cpu_mhz(cpuinfo: &str) -> Option<f64> {
    let values: Vec<f64> = cpuinfo
        .lines()
        .filter(|l| l.starts_with("cpu MHz"))
        .filter_map(|l| l.split_once(':')?.1.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    if values.is_empty() {
        return None;
    }
    Some(values.iter().sum::<f64>() / values.len() as f64)
}

/// The processor frequency in MHz as `/proc/cpuinfo` reports it now (mean over CPUs).
pub fn cpu_mhz() -> Option<f64> {
    parse_cpu_mhz(&std::fs::read_to_string("/proc/cpuinfo").ok()?)
}

/// Bytes allocated on disk to every file under `dir` (the sum of `st_blocks * 512`, what
/// `du` reports), directories included. A file that disappears while being counted
/// (an engine deleting it) is skipped.
pub fn allocated_bytes(dir: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| BenchError::io("measure the size of", dir, e))?;
    let mut total = meta.blocks() * 512;
    if !meta.is_dir() {
        return Ok(total);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| BenchError::io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| BenchError::io("list", dir, e))?;
        let path = entry.path();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => total += allocated_bytes(&path)?,
            Ok(m) => total += m.blocks() * 512,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(BenchError::io("measure the size of", path, e)),
        }
    }
    Ok(total)
}

/// The machine a result was measured on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Logical CPUs this process may use.
    pub cpus: usize,
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// `MemTotal` from `/proc/meminfo`, in bytes.
    pub mem_bytes: u64,
    /// The kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
}

impl Host {
    /// Describes this machine (empty fields where the system does not say).
    pub fn detect() -> Host {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let mem_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                let line = m.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(0, |kb| kb * 1024);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Host {
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            cpu_model,
            mem_bytes,
            kernel,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn status_fields_are_read_in_bytes() {
        let status = "Name:\tx\nVmHWM:\t  123456 kB\nVmRSS:\t   23456 kB\nRssAnon:\t 1 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM"), Some(123_456 * 1024));
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(23_456 * 1024));
        assert_eq!(parse_status_kib(status, "VmSwap"), None);
        assert_eq!(parse_status_kib("VmRSS: lots", "VmRSS"), None);
        let (now, peak) = resident_bytes().unwrap();
        assert!(now > 0 && peak >= now, "{now} {peak}");
    }

    #[test]
    fn disk_reads_are_read_from_the_device_line() {
        let text = " 254       0 vda 83785379 183066 1359900327 6487549 17743808\n 254       1 vda1 120 0 960 1 0\n 253       0 zram0 0 0 0 0 0\n";
        let reads = |reads, read_ms| Some(DiskReads { reads, read_ms });
        assert_eq!(parse_disk_reads(text, 254, 0), reads(83_785_379, 6_487_549));
        assert_eq!(parse_disk_reads(text, 254, 1), reads(120, 1));
        assert_eq!(parse_disk_reads(text, 8, 0), None);
        assert_eq!(parse_disk_reads("garbage line\n", 8, 0), None);
        // A line cut before the time column is not read as one.
        assert_eq!(parse_disk_reads(" 254 0 vda 5 0 40\n", 254, 0), None);
        let d = |reads, read_ms| DiskReads { reads, read_ms };
        assert_eq!(d(90, 7).since(&d(40, 3)), d(50, 4));
        // The reads went backwards (another device, a reset): none, not a wrap.
        assert_eq!(d(30, 7).since(&d(40, 3)), d(0, 4));
        // The milliseconds' 32-bit counter wrapped between the two readings.
        assert_eq!(d(90, 7).since(&d(40, u64::from(u32::MAX) - 2)), d(50, 10));
    }

    use super::*;

    #[test]
    fn parses_proc_io() {
        let text = "rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 12\n";
        let io = DeviceIo::parse(text).unwrap();
        assert_eq!(io.read_bytes, 4096);
        assert_eq!(io.write_bytes, 8192);
        assert_eq!(io.cancelled_write_bytes, 12);
        assert!(DeviceIo::parse("rchar: 1\n").is_none());
        let later = DeviceIo {
            read_bytes: 5000,
            write_bytes: 9000,
            cancelled_write_bytes: 12,
        };
        assert_eq!(later.since(&io).read_bytes, 904);
        assert_eq!(later.since(&io).write_bytes, 808);
    }

    #[test]
    fn parses_cpu_mhz() {
        let text = "processor\t: 0\ncpu MHz\t\t: 2000.000\nprocessor\t: 1\ncpu MHz\t\t: 3000.000\n";
        assert_eq!(parse_cpu_mhz(text), Some(2500.0));
        assert_eq!(parse_cpu_mhz("processor: 0\n"), None);
    }

    #[test]
    fn cpu_time_grows() {
        let a = CpuTime::now();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = CpuTime::now();
        assert!(b.since(&a).total() >= 0.0);
        assert!(b.total() >= a.total());
    }

    #[test]
    fn allocated_bytes_counts_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 100_000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), vec![1u8; 50_000]).unwrap();
        let n = allocated_bytes(dir.path()).unwrap();
        assert!(n >= 150_000, "{n}");
    }
}
