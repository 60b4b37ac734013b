//! A safetensors file read one tensor at a time: the header is parsed once, and each
//! tensor's bytes are read from its offset when asked for, so a reader holds at most the
//! tensor it is copying (tch's `read_safetensors` reads the whole file and then copies
//! every tensor out of it: twice the file in host memory). A process that owns part of a
//! file (an optimizer shard) reads only that part.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tch::{Kind, Tensor};

use crate::{Error, Result};

/// The largest header safetensors readers accept (100 MB), so a corrupt length is refused
/// before it is allocated.
const MAX_HEADER: u64 = 100_000_000;

/// Where one tensor lies in the file.
#[derive(Clone, Debug)]
struct Entry {
    kind: Kind,
    shape: Vec<i64>,
    /// Byte range in the file.
    begin: u64,
    end: u64,
}

/// An open safetensors file whose tensors are read on demand.
pub struct TensorFile {
    path: PathBuf,
    file: File,
    entries: BTreeMap<String, Entry>,
}

#[derive(serde::Deserialize)]
struct Info {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

impl TensorFile {
    /// Opens `path` and reads its header; every tensor's place is checked against the
    /// file's length, its dtype and its shape.
    pub fn open(path: &Path) -> Result<TensorFile> {
        let err = |m: String| Error::file(path, m);
        let file = File::open(path).map_err(|e| err(e.to_string()))?;
        let len = file.metadata().map_err(|e| err(e.to_string()))?.len();
        let mut n = [0u8; 8];
        file.read_exact_at(&mut n, 0)
            .map_err(|_| err("shorter than a safetensors header".into()))?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER || 8 + n > len {
            return Err(err(format!(
                "header length {n} does not fit the file ({len} bytes)"
            )));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact_at(&mut header, 8)
            .map_err(|e| err(e.to_string()))?;
        let raw: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&header)
            .map_err(|e| err(format!("header is not a JSON object: {e}")))?;
        let data_start = 8 + n;
        let mut entries = BTreeMap::new();
        for (name, v) in raw {
            if name == "__metadata__" {
                continue;
            }
            let info: Info = serde_json::from_value(v)
                .map_err(|e| err(format!("header entry `{name}`: {e}")))?;
            // Every dtype tch has (the caller decides which it takes).
            let (kind, size) = match info.dtype.as_str() {
                "F64" => (Kind::Double, 8),
                "F32" => (Kind::Float, 4),
                "BF16" => (Kind::BFloat16, 2),
                "F16" => (Kind::Half, 2),
                "I64" => (Kind::Int64, 8),
                "I32" => (Kind::Int, 4),
                "I16" => (Kind::Int16, 2),
                "I8" => (Kind::Int8, 1),
                "U8" => (Kind::Uint8, 1),
                "BOOL" => (Kind::Bool, 1),
                other => {
                    return Err(err(format!(
                        "tensor `{name}` has dtype {other}, which libtorch has no type for"
                    )))
                }
            };
            let numel = info
                .shape
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .ok_or_else(|| err(format!("tensor `{name}`: shape {:?} overflows", info.shape)))?;
            let [b, e] = info.data_offsets;
            let (begin, end) = (data_start.saturating_add(b), data_start.saturating_add(e));
            if b > e || end > len || numel.checked_mul(size) != Some(e - b) {
                return Err(err(format!(
                    "tensor `{name}`: offsets [{b}, {e}] do not hold {numel} values of {} \
                     in a file of {len} bytes",
                    info.dtype
                )));
            }
            let shape = info
                .shape
                .iter()
                .map(|&d| i64::try_from(d))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|_| err(format!("tensor `{name}`: shape {:?} too large", info.shape)))?;
            entries.insert(
                name,
                Entry {
                    kind,
                    shape,
                    begin,
                    end,
                },
            );
        }
        Ok(TensorFile {
            path: path.to_path_buf(),
            file,
            entries,
        })
    }

    /// The tensors' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The tensor `name` on the CPU, read from the file now (None when the file has none).
    pub fn read(&self, name: &str) -> Result<Option<Tensor>> {
        let Some(e) = self.entries.get(name) else {
            return Ok(None);
        };
        let mut bytes = vec![0u8; (e.end - e.begin) as usize];
        self.file
            .read_exact_at(&mut bytes, e.begin)
            .map_err(|x| Error::Tensor {
                path: self.path.clone(),
                name: name.to_string(),
                message: x.to_string(),
            })?;
        Ok(Some(Tensor::f_from_data_size(&bytes, &e.shape, e.kind)?))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// What `write_tensors` writes reads back tensor by tensor, bit for bit, in each dtype;
    /// a damaged header is refused with the file's name.
    #[test]
    fn tensors_read_back_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        let a = Tensor::arange(12, (Kind::Float, tch::Device::Cpu)).reshape([3, 4]) / 7.0;
        let b = a.to_kind(Kind::BFloat16).reshape([12]);
        let c = Tensor::from_slice(&[1.5f32]).to_kind(Kind::Half);
        let named = vec![
            ("b.x".to_string(), b.shallow_clone()),
            ("a".into(), a.shallow_clone()),
            ("c".into(), c.shallow_clone()),
        ];
        crate::write_tensors(&path, &named).unwrap();
        let f = TensorFile::open(&path).unwrap();
        assert_eq!(f.names().collect::<Vec<_>>(), ["a", "b.x", "c"]);
        for (name, t) in &named {
            let got = f.read(name).unwrap().unwrap();
            assert_eq!((got.kind(), got.size()), (t.kind(), t.size()), "{name}");
            assert!(got.equal(t), "{name}");
        }
        assert!(f.read("missing").unwrap().is_none());
        // The canonical readers take the streamed file: the safetensors crate's validation
        // (offsets contiguous, covering the data exactly) and Python's safetensors, value
        // for value (bf16 and f16 widen to f64 exactly).
        let bytes = std::fs::read(&path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.len(), 3);
        let py = std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into());
        let out = std::process::Command::new(py)
            .args(["-c", "import sys, json; from safetensors.torch import load_file\n\
                 d = load_file(sys.argv[1])\n\
                 print(json.dumps({k: [str(v.dtype), list(v.shape), v.double().flatten().tolist()] for k, v in d.items()}))"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: BTreeMap<String, (String, Vec<i64>, Vec<f64>)> =
            serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got.len(), named.len());
        for (name, t) in &named {
            let (dtype, shape, values) = &got[name];
            let want: Vec<f64> = Vec::try_from(t.to_kind(Kind::Double).flatten(0, -1)).unwrap();
            let torch_dtype = match t.kind() {
                Kind::Float => "torch.float32",
                Kind::BFloat16 => "torch.bfloat16",
                _ => "torch.float16",
            };
            assert_eq!(
                (dtype.as_str(), shape, values),
                (torch_dtype, &t.size(), &want),
                "{name}"
            );
        }
        // A header length past the file's end.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let bad = dir.path().join("bad.safetensors");
        std::fs::write(&bad, &bytes).unwrap();
        let e = TensorFile::open(&bad).err().unwrap().to_string();
        assert!(
            e.contains("bad.safetensors") && e.contains("header length"),
            "{e}"
        );
        // A file cut short: the last tensor's offsets pass its end.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&bad, &bytes[..bytes.len() - 1]).unwrap();
        let e = TensorFile::open(&bad).err().unwrap().to_string();
        assert!(e.contains("do not hold"), "{e}");
    }
}
