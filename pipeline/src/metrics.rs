//! Metrics where users' tools look: after every stage, the numbers of its summary (the
//! stage's summary struct of `deltarl_schemas::summary` as its manifest records it, so a
//! tag is a field's path and no list of names is kept here) are appended to `runs/<run>/metrics.jsonl` (one JSON object a stage run) and, as scalars
//! `<stage>/<key>` at step = iteration, to TensorBoard event files under `runs/<run>/tb/`
//! (so `tensorboard --logdir runs` and `wandb sync --sync-tensorboard` see them).
//!
//! Both are append-only logs, not results: a rerun stage appends again, and a killed
//! process leaves at most a truncated last record, which both readers skip.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use deltarl_schemas::{Manifest, Stage};

use crate::memory::Usage;

/// The numbers of a summary, flattened to `a/b` keys (non-numbers left out).
fn numbers(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, f64)>) {
    match v {
        serde_json::Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                out.push((prefix.to_string(), x));
            }
        }
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                numbers(&format!("{prefix}/{k}"), v, out);
            }
        }
        _ => {}
    }
}

/// Appends `line` to the JSON-lines file `path`. A last record a killed process left
/// without its newline is ended first, so it stays one unreadable line (readers skip it)
/// instead of swallowing the new record.
fn append_line(path: &Path, line: &str) -> Result<()> {
    let mut f = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let len = f
        .metadata()
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    let mut last = [b'\n'];
    if len > 0 {
        use std::io::{Read, Seek, SeekFrom};
        f.seek(SeekFrom::Start(len - 1))
            .and_then(|_| f.read_exact(&mut last))
            .with_context(|| format!("cannot read {}", path.display()))?;
    }
    let sep = if last[0] == b'\n' { "" } else { "\n" };
    writeln!(f, "{sep}{line}").with_context(|| format!("cannot append to {}", path.display()))
}

/// Appends one stage's metrics to both logs of the run in `root`, with the process's
/// resident memory at the stage's start and peak when it was measured, what else the run
/// measured (`measured`, by name under the stage's), and the number of processes (torchrun
/// ranks) that ran it.
pub fn record(
    root: &Path,
    stage: Stage,
    m: &Manifest,
    mem: Option<Usage>,
    measured: &[(String, f64)],
    processes: usize,
) -> Result<()> {
    let mut scalars = Vec::new();
    numbers(stage.name(), &m.summary, &mut scalars);
    scalars.push((format!("{}/seconds", stage.name()), m.seconds));
    if let Some(u) = mem {
        scalars.push((format!("{}/rss_start_bytes", stage.name()), u.start as f64));
        scalars.push((format!("{}/rss_peak_bytes", stage.name()), u.peak as f64));
    }
    for (name, x) in measured {
        scalars.push((format!("{}/{name}", stage.name()), *x));
    }
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let line = serde_json::json!({
        "iter": m.iter,
        "stage": stage,
        "wall_time": wall,
        "processes": processes,
        "metrics": scalars
            .iter()
            .map(|(k, x)| (k.clone(), serde_json::Value::from(*x)))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
    });
    append_line(&root.join("metrics.jsonl"), &line.to_string())?;
    let tb = root.join("tb");
    std::fs::create_dir_all(&tb).with_context(|| format!("cannot create {}", tb.display()))?;
    tensorboard::append(&tb, wall, i64::from(m.iter), &scalars)
}

/// The TensorBoard event-file format: TFRecords of `Event` protocol buffers, written by hand
/// (the format is small and stable; no crate for it is maintained).
mod tensorboard {
    use super::*;

    /// CRC-32C (Castagnoli), bitwise over a table built once.
    fn crc32c(data: &[u8]) -> u32 {
        static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
        let table = TABLE.get_or_init(|| {
            let mut t = [0u32; 256];
            for (i, e) in t.iter_mut().enumerate() {
                let mut c = i as u32;
                for _ in 0..8 {
                    c = if c & 1 != 0 {
                        0x82F6_3B78 ^ (c >> 1)
                    } else {
                        c >> 1
                    };
                }
                *e = c;
            }
            t
        });
        !data.iter().fold(!0u32, |c, &b| {
            table[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8)
        })
    }

    /// TFRecord's masked CRC.
    pub(super) fn masked_crc(data: &[u8]) -> u32 {
        let c = crc32c(data);
        c.rotate_right(15).wrapping_add(0xa282_ead8)
    }

    fn varint(mut x: u64, out: &mut Vec<u8>) {
        while x >= 0x80 {
            out.push((x as u8) | 0x80);
            x >>= 7;
        }
        out.push(x as u8);
    }

    fn bytes_field(field: u64, data: &[u8], out: &mut Vec<u8>) {
        varint((field << 3) | 2, out);
        varint(data.len() as u64, out);
        out.extend_from_slice(data);
    }

    /// `Event { wall_time = 1; step = 2; file_version = 3 | summary = 5 }`, where
    /// `Summary { repeated Value value = 1 }` and `Value { tag = 1; simple_value = 2 }`.
    fn event(wall: f64, step: i64, body: Body<'_>) -> Vec<u8> {
        let mut e = vec![0x09];
        e.extend_from_slice(&wall.to_le_bytes());
        varint(2 << 3, &mut e);
        varint(step as u64, &mut e);
        match body {
            Body::Version => bytes_field(3, b"brain.Event:2", &mut e),
            Body::Scalars(values) => {
                let mut summary = Vec::new();
                for (tag, x) in values {
                    let mut v = Vec::new();
                    bytes_field(1, tag.as_bytes(), &mut v);
                    v.push(0x15);
                    v.extend_from_slice(&(*x as f32).to_le_bytes());
                    bytes_field(1, &v, &mut summary);
                }
                bytes_field(5, &summary, &mut e);
            }
        }
        e
    }

    enum Body<'a> {
        Version,
        Scalars(&'a [(String, f64)]),
    }

    fn record(data: &[u8], out: &mut Vec<u8>) {
        let len = (data.len() as u64).to_le_bytes();
        out.extend_from_slice(&len);
        out.extend_from_slice(&masked_crc(&len).to_le_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(&masked_crc(data).to_le_bytes());
    }

    /// Appends the scalars to this process's event file in `dir` (created, with its version
    /// record, on first use).
    pub(super) fn append(
        dir: &Path,
        wall: f64,
        step: i64,
        scalars: &[(String, f64)],
    ) -> Result<()> {
        let path = dir.join(format!(
            "events.out.tfevents.{}.deltarl.{}",
            wall as u64 / 3600 * 3600,
            std::process::id()
        ));
        let mut buf = Vec::new();
        if !path.exists() {
            record(&event(wall, 0, Body::Version), &mut buf);
        }
        record(&event(wall, step, Body::Scalars(scalars)), &mut buf);
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        f.write_all(&buf)
            .with_context(|| format!("cannot append to {}", path.display()))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn crc32c_of_the_standard_check_string() {
            // The CRC-32C check value (RFC 3720, B.4).
            assert_eq!(crc32c(b"123456789"), 0xE306_9283);
            assert_eq!(crc32c(b""), 0);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_truncated_last_record_does_not_swallow_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("metrics.jsonl");
        append_line(&p, "{\"a\":1}").unwrap();
        // A process killed mid-write left half a record.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        write!(f, "{{\"b\":").unwrap();
        drop(f);
        append_line(&p, "{\"c\":3}").unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text, "{\"a\":1}\n{\"b\":\n{\"c\":3}\n");
        let parsed: Vec<bool> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
            .collect();
        assert_eq!(parsed, [true, false, true]);
    }
}
