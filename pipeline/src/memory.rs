//! The process's resident memory, read from Linux's `/proc/self/status`: what a stage
//! held at its peak, logged beside its metrics and compared with `deltarl plan` in tests.
//!
//! Linux keeps one high-water mark a process (`VmHWM`); writing `5` to
//! `/proc/self/clear_refs` resets it to the current size, so each stage of a process that
//! runs several gets its own peak. Elsewhere (or where /proc is not readable) nothing is
//! measured and nothing is logged.

use std::sync::atomic::{AtomicU64, Ordering};

/// The highest peak seen before a [`Phase`] reset the mark, so the stage's own peak
/// ([`finish`]) still counts it.
static EARLIER_PEAK: AtomicU64 = AtomicU64::new(0);

/// Resident bytes at a stage's start and at its peak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub start: u64,
    pub peak: u64,
}

/// One `VmRSS:` / `VmHWM:` line of /proc/self/status in bytes.
fn status_field(name: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line[name.len()..]
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The memory the kernel says new allocations can have without swapping (`MemAvailable:`
/// of /proc/meminfo), in bytes, where it can be read.
pub fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Starts measuring: resets the high-water mark and returns the resident size now.
pub fn start() -> Option<u64> {
    EARLIER_PEAK.store(0, Ordering::Relaxed);
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    status_field("VmRSS:")
}

/// The usage since [`start`] returned `start` (phases measured meanwhile included).
pub fn finish(start: Option<u64>) -> Option<Usage> {
    Some(Usage {
        start: start?,
        peak: status_field("VmHWM:")?.max(EARLIER_PEAK.load(Ordering::Relaxed)),
    })
}

/// A part of a stage measured alone (loading the optimizer's state, saving it), without
/// losing the stage's peak so far.
pub struct Phase(Option<u64>);

impl Phase {
    /// Starts measuring a phase: keeps the peak so far, resets the mark.
    pub fn start() -> Phase {
        if let Some(peak) = status_field("VmHWM:") {
            EARLIER_PEAK.fetch_max(peak, Ordering::Relaxed);
        }
        Phase(
            std::fs::write("/proc/self/clear_refs", "5")
                .ok()
                .and_then(|()| status_field("VmRSS:")),
        )
    }

    /// The phase's usage (its own peak: not the stage's before it).
    pub fn finish(self) -> Option<Usage> {
        Some(Usage {
            start: self.0?,
            peak: status_field("VmHWM:")?,
        })
    }
}

/// Every process's usage over a stage they shared, on every rank (`None` where a process
/// could not measure): 16 bytes each way.
pub fn gather(g: &deltarl_dist::Group, own: Option<Usage>) -> anyhow::Result<Vec<Option<Usage>>> {
    let bytes: Vec<u8> = own.map_or(Vec::new(), |u| {
        [u.start.to_le_bytes(), u.peak.to_le_bytes()].concat()
    });
    Ok(g.all_gather_bytes(&bytes)?
        .iter()
        .map(|b| {
            let word = |at: usize| Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?));
            Some(Usage {
                start: word(0)?,
                peak: word(8)?,
            })
        })
        .collect())
}

/// The metrics of the other processes' usage (rank 0's are the stage's own):
/// `rss_start_bytes_rankR` and `rss_peak_bytes_rankR`.
pub fn by_rank(all: &[Option<Usage>]) -> Vec<(String, f64)> {
    all.iter()
        .enumerate()
        .skip(1)
        .filter_map(|(rank, u)| u.map(|u| (rank, u)))
        .flat_map(|(rank, u)| {
            [
                (format!("rss_start_bytes_rank{rank}"), u.start as f64),
                (format!("rss_peak_bytes_rank{rank}"), u.peak as f64),
            ]
        })
        .collect()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The mark sees an allocation that is gone; a phase sees its own peak and not an
    /// earlier one; the stage around it still sees the earlier one. One test, as the mark
    /// is the process's: tests measuring it in parallel threads would reset each other's.
    /// Other tests' allocations only raise a peak, so the one upper bound leaves 400 MB.
    #[test]
    fn the_peak_sees_an_allocation_that_is_gone_and_a_phase_has_its_own() {
        let s = start().expect("Linux's /proc/self/status and clear_refs");
        let big = vec![1u8; 512 << 20];
        std::hint::black_box(&big);
        drop(big);
        let u = finish(Some(s)).unwrap();
        assert!(u.peak >= u.start + (500 << 20), "{u:?}");
        let phase = Phase::start();
        let small = vec![1u8; 32 << 20];
        std::hint::black_box(&small);
        let p = phase.finish().unwrap();
        drop(small);
        assert!(p.peak >= p.start + (30 << 20), "{p:?}");
        assert!(
            p.peak < p.start + (432 << 20),
            "the phase saw the earlier peak: {p:?}"
        );
        let stage = finish(Some(s)).unwrap();
        assert!(stage.peak >= stage.start + (500 << 20), "{stage:?}");
    }
}
