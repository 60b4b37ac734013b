//! The layout of a safetensors file, computed from its tensors' names, dtypes and shapes
//! alone: the header and each tensor's byte range. Whoever knows the layout can write the
//! tensors in any order, from any process: a sharded optimizer's state is written by each
//! process at its own tensors' offsets, and is byte for byte the file one process writes
//! in name order.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use safetensors::tensor::Dtype as StDtype;
use tch::{Device, Kind, Tensor};

use crate::{Error, Result};

/// One tensor's place in the file.
#[derive(Clone, Debug)]
struct Place {
    kind: Kind,
    shape: Vec<i64>,
    /// Byte offset in the file (after the header).
    begin: u64,
    bytes: u64,
}

/// A safetensors file's header and the place of each tensor, in name order.
#[derive(Clone, Debug)]
pub struct TensorLayout {
    path: PathBuf,
    /// The header's length (8 bytes, little-endian) and the header.
    head: Vec<u8>,
    places: BTreeMap<String, Place>,
}

/// The safetensors dtype of a tensor kind we save.
pub(crate) fn st_dtype(kind: Kind) -> Result<StDtype> {
    match kind {
        Kind::Float => Ok(StDtype::F32),
        Kind::BFloat16 => Ok(StDtype::BF16),
        Kind::Half => Ok(StDtype::F16),
        k => Err(Error::Config(format!("cannot save dtype {k:?}"))),
    }
}

impl TensorLayout {
    /// The layout of `path` holding these tensors (name, kind, shape), each name once, with
    /// `format = pt` metadata: tensors in name order, the header padded with spaces to a
    /// multiple of 8 bytes, as safetensors' own writer does.
    pub fn new(
        path: &Path,
        tensors: impl IntoIterator<Item = (String, Kind, Vec<i64>)>,
    ) -> Result<TensorLayout> {
        let err = |m: String| Error::file(path, m);
        // 1. Names in order, each once.
        let mut places = BTreeMap::new();
        for (name, kind, shape) in tensors {
            let elements: i64 = shape.iter().product();
            let bytes = elements as u64 * kind.elt_size_in_bytes() as u64;
            let place = Place {
                kind,
                shape,
                begin: 0,
                bytes,
            };
            if places.insert(name.clone(), place).is_some() {
                return Err(err(format!("tensor `{name}` given twice")));
            }
        }
        // 2. The header: dtype, shape and byte range of each.
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
        let mut offset = 0u64;
        for (name, p) in &places {
            let dtype = serde_json::to_value(st_dtype(p.kind)?)
                .map_err(|e| err(format!("tensor {name}: {e}")))?;
            header.insert(
                name.clone(),
                serde_json::json!({
                    "dtype": dtype,
                    "shape": p.shape,
                    "data_offsets": [offset, offset + p.bytes],
                }),
            );
            offset += p.bytes;
        }
        let mut json = serde_json::to_vec(&header).map_err(|e| err(e.to_string()))?;
        json.resize(json.len().next_multiple_of(8), b' ');
        let mut head = (json.len() as u64).to_le_bytes().to_vec();
        head.extend_from_slice(&json);
        // 3. Each tensor's place in the file.
        let mut at = head.len() as u64;
        for p in places.values_mut() {
            p.begin = at;
            at += p.bytes;
        }
        Ok(TensorLayout {
            path: path.to_path_buf(),
            head,
            places,
        })
    }

    /// The file's length in bytes.
    pub fn file_len(&self) -> u64 {
        self.head.len() as u64 + self.places.values().map(|p| p.bytes).sum::<u64>()
    }

    /// The tensors' names, in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.places.keys().map(String::as_str)
    }

    /// `t`'s place, after checking it is the tensor the layout was made for.
    fn place_of(&self, name: &str, t: &Tensor) -> Result<&Place> {
        let err = |m: String| Error::file(&self.path, m);
        let p = self
            .places
            .get(name)
            .ok_or_else(|| err(format!("tensor `{name}` is not in the file's layout")))?;
        if t.kind() != p.kind || t.size() != p.shape {
            return Err(err(format!(
                "tensor `{name}` is {:?} {:?}, the layout says {:?} {:?}",
                t.kind(),
                t.size(),
                p.kind,
                p.shape
            )));
        }
        Ok(p)
    }

    /// Writes the file in order to `w`: the header, then each tensor of `tensor(name)`,
    /// copied to the host one at a time.
    pub fn write_in_order(
        &self,
        w: &mut impl Write,
        tensor: impl Fn(&str) -> Option<Tensor>,
    ) -> Result<()> {
        let io = |e: std::io::Error| Error::file(&self.path, e.to_string());
        w.write_all(&self.head).map_err(io)?;
        for name in self.places.keys() {
            let t = tensor(name).ok_or_else(|| {
                Error::file(&self.path, format!("tensor `{name}` has nothing to write"))
            })?;
            self.place_of(name, &t)?;
            w.write_all(&host_bytes(&t)?).map_err(io)?;
        }
        Ok(())
    }

    /// Creates the file (replacing one there): its header, and its data ranges as zeros
    /// (sparse) until [`TensorLayout::write_at`] fills them.
    pub fn create(&self) -> Result<()> {
        let io = |e: std::io::Error| Error::file(&self.path, e.to_string());
        let file = File::create(&self.path).map_err(io)?;
        file.write_all_at(&self.head, 0).map_err(io)?;
        file.set_len(self.file_len()).map_err(io)?;
        file.sync_all().map_err(io)
    }

    /// Writes `t` at `name`'s place in the file [`TensorLayout::create`] made (`file`
    /// opened for writing), from one host copy of it.
    pub fn write_at(&self, file: &File, name: &str, t: &Tensor) -> Result<()> {
        let p = self.place_of(name, t)?;
        file.write_all_at(&host_bytes(t)?, p.begin)
            .map_err(|e| Error::file(&self.path, format!("tensor `{name}`: {e}")))
    }
}

/// A tensor's bytes on the host, contiguous, in its own dtype.
fn host_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let t = t.to_device(Device::Cpu).contiguous();
    let mut buf = vec![0u8; t.numel() * t.kind().elt_size_in_bytes()];
    t.f_copy_data_u8(&mut buf, t.numel())?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tensors() -> Vec<(String, Tensor)> {
        vec![
            (
                "b".into(),
                Tensor::arange(6, (Kind::Float, Device::Cpu)).view([2, 3]),
            ),
            (
                "a".into(),
                Tensor::from_slice(&[1.5f32, -2.0]).to_kind(Kind::BFloat16),
            ),
            ("c".into(), Tensor::zeros([0], (Kind::Float, Device::Cpu))),
        ]
    }

    fn layout(path: &Path) -> TensorLayout {
        TensorLayout::new(
            path,
            tensors()
                .iter()
                .map(|(n, t)| (n.clone(), t.kind(), t.size())),
        )
        .unwrap()
    }

    /// Written in place, one tensor at a time and in reverse order, the file is the one
    /// written in order, and safetensors reads every tensor back.
    #[test]
    fn written_at_their_places_the_tensors_make_the_file_written_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (ordered, placed) = (
            dir.path().join("o.safetensors"),
            dir.path().join("p.safetensors"),
        );
        let named = tensors();
        let find = |n: &str| {
            named
                .iter()
                .find(|(m, _)| m == n)
                .map(|(_, t)| t.shallow_clone())
        };
        let mut bytes = Vec::new();
        layout(&ordered).write_in_order(&mut bytes, find).unwrap();
        let l = layout(&placed);
        l.create().unwrap();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&placed)
            .unwrap();
        for (name, t) in named.iter().rev() {
            l.write_at(&file, name, t).unwrap();
        }
        assert_eq!(std::fs::read(&placed).unwrap(), bytes);
        assert_eq!(l.file_len(), bytes.len() as u64);
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("b").unwrap().shape(), [2, 3]);
        assert_eq!(
            st.tensor("a").unwrap().data(),
            host_bytes(&named[1].1).unwrap()
        );
        assert_eq!(l.names().collect::<Vec<_>>(), ["a", "b", "c"]);
    }

    #[test]
    fn a_tensor_that_is_not_the_one_laid_out_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(&dir.path().join("x.safetensors"));
        l.create().unwrap();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("x.safetensors"))
            .unwrap();
        let wrong = Tensor::zeros([3, 2], (Kind::Float, Device::Cpu));
        let e = l.write_at(&file, "b", &wrong).unwrap_err().to_string();
        assert!(e.contains("`b`") && e.contains("[3, 2]"), "{e}");
        let e = l.write_at(&file, "z", &wrong).unwrap_err().to_string();
        assert!(e.contains("`z` is not in the file's layout"), "{e}");
        let dup = [
            ("a".to_string(), Kind::Float, vec![1]),
            ("a".into(), Kind::Float, vec![1]),
        ];
        assert!(TensorLayout::new(Path::new("d"), dup).is_err());
    }
}
