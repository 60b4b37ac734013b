//! A GGUF file's layout, checked before it is hashed or converted: the header, every
//! metadata entry, every tensor's description, and that each tensor's bytes lie inside the
//! file. The converter's own error on a file that is not GGUF, or on one cut short (an
//! interrupted download), is a Python traceback far from the cause; this names it.
//!
//! The layout (versions 1 to 3, little-endian throughout):
//! 1. `GGUF`, the version (u32), the tensor count and the metadata count (u64; u32 in
//!    version 1);
//! 2. the metadata: each a string key, a value type (u32) and a value; strings and arrays
//!    carry their length first (u64; u32 in version 1);
//! 3. each tensor's name, dimension count (u32), dimensions (u64; u32 in version 1),
//!    element type (u32) and offset (u64) into the data section;
//! 4. the data section, at the next multiple of `general.alignment` (32 by default).

use std::io::{Read, Seek};
use std::path::Path;

use anyhow::{Context, Result};

/// GGUF's magic bytes, the first four of every GGUF file.
const MAGIC: &[u8; 4] = b"GGUF";
/// The format versions llama.cpp has written (1 to 3); the version is the little-endian
/// u32 after the magic.
const VERSIONS: std::ops::RangeInclusive<u32> = 1..=3;
/// The data section's alignment when the metadata does not set `general.alignment`.
const DEFAULT_ALIGNMENT: u64 = 32;
/// The most dimensions a tensor has (ggml's limit).
const MAX_DIMS: u32 = 4;
/// The longest key or tensor name read (llama.cpp's are under 100 bytes).
const MAX_NAME: u64 = 1 << 16;
/// Arrays nest (an array of arrays); no writer nests deeper than this.
const MAX_NESTING: u32 = 8;

/// The GGUF version of a file's first 8 bytes, or why they are not a GGUF header.
pub(super) fn header_version(head: &[u8]) -> Result<u32, String> {
    let shown = |b: &[u8]| {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (Some(magic), Some(version)) = (head.get(..4), head.get(4..8)) else {
        return Err(format!(
            "{} bytes long, shorter than a GGUF header (8 bytes: `GGUF` and a version)",
            head.len()
        ));
    };
    if magic != MAGIC {
        return Err(format!(
            "it starts with the bytes {}, not `GGUF` (47 47 55 46)",
            shown(magic)
        ));
    }
    let v = u32::from_le_bytes([version[0], version[1], version[2], version[3]]);
    if !VERSIONS.contains(&v) {
        return Err(format!(
            "GGUF version {v}; the versions written so far are {} to {}",
            VERSIONS.start(),
            VERSIONS.end()
        ));
    }
    Ok(v)
}

/// Refuses a file that is not a whole GGUF file, naming what is wrong where.
pub(super) fn check(file: &Path) -> Result<Layout> {
    let f = std::fs::File::open(file)
        .with_context(|| format!("cannot read the GGUF file {}", file.display()))?;
    let len = f
        .metadata()
        .with_context(|| format!("cannot read the GGUF file {}", file.display()))?
        .len();
    let mut head = Vec::with_capacity(8);
    (&f).take(8)
        .read_to_end(&mut head)
        .with_context(|| format!("cannot read the GGUF file {}", file.display()))?;
    let version = header_version(&head)
        .map_err(|why| anyhow::anyhow!("{}: not a GGUF file: {why}", file.display()))?;
    let mut r = Reader {
        r: std::io::BufReader::new(f),
        pos: 8,
        len,
        version,
    };
    layout(&mut r).map_err(|why| match why {
        Bad::Io(e) => {
            anyhow::Error::new(e).context(format!("cannot read the GGUF file {}", file.display()))
        }
        Bad::Layout(why) => anyhow::anyhow!(
            "{}: not a whole GGUF file (version {version}, {len} bytes): {why}",
            file.display()
        ),
    })
}

/// What the check read: how many tensors, and where their bytes end (a longer file has
/// bytes after them, which readers ignore).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub tensors: u64,
    /// Where the last tensor's bytes end; a file longer than this has trailing bytes.
    pub end: u64,
}

#[derive(Debug)]
enum Bad {
    Io(std::io::Error),
    Layout(String),
}

impl From<std::io::Error> for Bad {
    fn from(e: std::io::Error) -> Self {
        Bad::Io(e)
    }
}

fn bad<T>(why: String) -> Result<T, Bad> {
    Err(Bad::Layout(why))
}

/// A reader that knows where it is and how long the file is, so a length that points past
/// the end is refused before anything is allocated for it.
struct Reader<R> {
    r: R,
    pos: u64,
    len: u64,
    version: u32,
}

impl<R: Read + Seek> Reader<R> {
    /// `n` more bytes must be in the file, for `what`.
    fn need(&self, n: u64, what: &dyn Fn() -> String) -> Result<(), Bad> {
        if n > self.len - self.pos {
            return bad(format!(
                "{} needs {n} bytes at byte {}, past the end of the file: cut short",
                what(),
                self.pos
            ));
        }
        Ok(())
    }

    fn bytes<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], Bad> {
        self.need(N as u64, what)?;
        let mut b = [0u8; N];
        self.r.read_exact(&mut b)?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, Bad> {
        self.bytes::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, Bad> {
        self.bytes::<8>(what).map(u64::from_le_bytes)
    }

    /// A count or a length: u32 in version 1, u64 after.
    fn size(&mut self, what: &dyn Fn() -> String) -> Result<u64, Bad> {
        if self.version == 1 {
            self.u32(what).map(u64::from)
        } else {
            self.u64(what)
        }
    }

    fn skip(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<(), Bad> {
        self.need(n, what)?;
        let step = i64::try_from(n).map_err(|_| Bad::Layout(format!("{}: {n} bytes", what())))?;
        self.r.seek_relative(step)?;
        self.pos += n;
        Ok(())
    }

    /// A key or a tensor name (values' strings are skipped, never read).
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, Bad> {
        let n = self.size(what)?;
        if n > MAX_NAME {
            return bad(format!(
                "{} is {n} bytes long; names are at most {MAX_NAME}",
                what()
            ));
        }
        self.need(n, what)?;
        let mut b = vec![0u8; n as usize];
        self.r.read_exact(&mut b)?;
        self.pos += n;
        String::from_utf8(b).or_else(|_| bad(format!("{} is not UTF-8", what())))
    }

    /// Skips one metadata value of type `ty`, returning it when it is a u32 (the alignment).
    fn value(
        &mut self,
        ty: u32,
        depth: u32,
        what: &dyn Fn() -> String,
    ) -> Result<Option<u32>, Bad> {
        match (ty, width(ty, what)?) {
            (4, _) => return self.u32(what).map(Some),
            (_, Some(n)) => self.skip(n, what)?,
            (8, None) => {
                let n = self.size(what)?;
                self.skip(n, what)?;
            }
            _ => {
                if depth >= MAX_NESTING {
                    return bad(format!("{} nests arrays deeper than {MAX_NESTING}", what()));
                }
                let inner = self.u32(what)?;
                let count = self.size(what)?;
                // An array of numbers is skipped whole (a tokenizer's scores and types are
                // one per token); strings and arrays one at a time.
                if let Some(n) = width(inner, what)? {
                    let all = count.checked_mul(n).map_or_else(
                        || bad(format!("{} says {count} elements: too many", what())),
                        Ok,
                    )?;
                    self.skip(all, what)?;
                } else {
                    for i in 0..count {
                        self.value(inner, depth + 1, &|| format!("{} element {i}", what()))?;
                    }
                }
            }
        }
        Ok(None)
    }
}

/// The bytes of a metadata value of type `ty`, `None` for a string or an array (whose
/// length comes first).
fn width(ty: u32, what: &dyn Fn() -> String) -> Result<Option<u64>, Bad> {
    Ok(match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        8 | 9 => None,
        _ => {
            return bad(format!(
                "{} has value type {ty}, which GGUF does not define",
                what()
            ))
        }
    })
}

/// The bytes of `n` elements of ggml type `ty`: (elements per block, bytes per block),
/// the format's table of types (llama.cpp's `ggml.h`; gguf-py's `GGML_QUANT_SIZES`).
fn type_size(ty: u32) -> Option<(&'static str, u64, u64)> {
    Some(match ty {
        0 => ("F32", 1, 4),
        1 => ("F16", 1, 2),
        2 => ("Q4_0", 32, 18),
        3 => ("Q4_1", 32, 20),
        6 => ("Q5_0", 32, 22),
        7 => ("Q5_1", 32, 24),
        8 => ("Q8_0", 32, 34),
        9 => ("Q8_1", 32, 40),
        10 => ("Q2_K", 256, 84),
        11 => ("Q3_K", 256, 110),
        12 => ("Q4_K", 256, 144),
        13 => ("Q5_K", 256, 176),
        14 => ("Q6_K", 256, 210),
        15 => ("Q8_K", 256, 292),
        16 => ("IQ2_XXS", 256, 66),
        17 => ("IQ2_XS", 256, 74),
        18 => ("IQ3_XXS", 256, 98),
        19 => ("IQ1_S", 256, 50),
        20 => ("IQ4_NL", 32, 18),
        21 => ("IQ3_S", 256, 110),
        22 => ("IQ2_S", 256, 82),
        23 => ("IQ4_XS", 256, 136),
        24 => ("I8", 1, 1),
        25 => ("I16", 1, 2),
        26 => ("I32", 1, 4),
        27 => ("I64", 1, 8),
        28 => ("F64", 1, 8),
        29 => ("IQ1_M", 256, 56),
        30 => ("BF16", 1, 2),
        34 => ("TQ1_0", 256, 54),
        35 => ("TQ2_0", 256, 66),
        39 => ("MXFP4", 32, 17),
        _ => return None,
    })
}

/// Steps 1-4 of the module's layout, after the 8 header bytes.
fn layout<R: Read + Seek>(r: &mut Reader<R>) -> Result<Layout, Bad> {
    // 1. The counts. Each metadata entry or tensor takes at least 12 bytes, so a count
    //    larger than the file could hold is refused before anything is read for it.
    let tensors = r.size(&|| "the tensor count".into())?;
    let entries = r.size(&|| "the metadata count".into())?;
    for (n, what) in [(tensors, "tensors"), (entries, "metadata entries")] {
        if n > r.len / 12 {
            return bad(format!(
                "it says {n} {what}, more than a file of {} bytes could hold: cut short, \
                 or corrupt",
                r.len
            ));
        }
    }
    // 2. The metadata, keeping the alignment.
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..entries {
        let key = r.string(&|| format!("metadata entry {i}'s key"))?;
        let what = || format!("metadata `{key}`");
        let ty = r.u32(&what)?;
        let value = r.value(ty, 0, &what)?;
        if key == "general.alignment" {
            match value {
                Some(a) if a > 0 && a.is_power_of_two() => alignment = u64::from(a),
                _ => return bad("`general.alignment` is not a power of two (a u32)".into()),
            }
        }
    }
    // 3. The tensors' descriptions.
    let mut described = Vec::new();
    for i in 0..tensors {
        let name = r.string(&|| format!("tensor {i}'s name"))?;
        let what = || format!("tensor `{name}`");
        let dims = r.u32(&what)?;
        if dims == 0 || dims > MAX_DIMS {
            return bad(format!(
                "{} has {dims} dimensions (1 to {MAX_DIMS})",
                what()
            ));
        }
        let mut elements: u64 = 1;
        for _ in 0..dims {
            let d = r.size(&what)?;
            elements = elements
                .checked_mul(d)
                .filter(|&e| e <= r.len.saturating_mul(8))
                .map_or_else(
                    || {
                        bad(format!(
                            "{} has more elements than the file could hold",
                            what()
                        ))
                    },
                    Ok,
                )?;
        }
        let ty = r.u32(&what)?;
        let offset = r.u64(&what)?;
        let Some((type_name, block, bytes)) = type_size(ty) else {
            return bad(format!(
                "{} has element type {ty}, which no GGUF reader knows",
                what()
            ));
        };
        if !elements.is_multiple_of(block) {
            return bad(format!(
                "{} ({type_name}) has {elements} elements, not whole blocks of {block}",
                what()
            ));
        }
        if !offset.is_multiple_of(alignment) {
            return bad(format!(
                "{} starts at offset {offset}, not a multiple of the alignment {alignment}",
                what()
            ));
        }
        described.push((name, type_name, offset, elements / block * bytes));
    }
    // 4. The data section, and each tensor's bytes inside the file.
    let data = r.pos.div_ceil(alignment) * alignment;
    let mut end = data;
    for (name, type_name, offset, bytes) in described {
        let stop = data.saturating_add(offset).saturating_add(bytes);
        if stop > r.len {
            return bad(format!(
                "tensor `{name}` ({type_name}, {bytes} bytes) ends at byte {stop}, past the \
                 end of the file: cut short (an interrupted download?)"
            ));
        }
        end = end.max(stop);
    }
    Ok(Layout { tensors, end })
}

#[cfg(test)]
mod tests;
