//! The process's resident memory, read from Linux's `/proc/self/status`: what a stage
//! held at its peak, logged beside its metrics and compared with `deltarl plan` in tests.
//!
//! Linux keeps one high-water mark a process (`VmHWM`); writing `5` to
//! `/proc/self/clear_refs` resets it to the current size, so each stage of a process that
//! runs several gets its own peak. Elsewhere (or where /proc is not readable) nothing is
//! measured and nothing is logged.

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

/// Starts measuring: resets the high-water mark and returns the resident size now.
pub fn start() -> Option<u64> {
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    status_field("VmRSS:")
}

/// The usage since [`start`] returned `start`.
pub fn finish(start: Option<u64>) -> Option<Usage> {
    Some(Usage {
        start: start?,
        peak: status_field("VmHWM:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_sees_an_allocation_that_is_gone() {
        let Some(s) = start() else {
            return; // not Linux: nothing to measure
        };
        let big = vec![1u8; 64 << 20];
        std::hint::black_box(&big);
        drop(big);
        let u = finish(Some(s)).unwrap();
        assert!(u.peak >= u.start + (60 << 20), "{u:?}");
    }
}
