//! The optimizer's state on disk: `optimizer.safetensors` (moments, and master weights of
//! non-f32 parameters) and `optimizer.json` (the step). Sharded, each process writes and
//! reads the tensors it owns in the one file a single process writes.

use std::path::Path;

use deltarl_dist::Group;
use deltarl_model::TensorLayout;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::adamw::{AdamW, Slot};
use crate::{Error, Result};

fn state_err(path: &Path, message: String) -> Error {
    Error::State {
        path: path.to_path_buf(),
        message,
    }
}

/// Every process learns whether every process's part of a save succeeded: its own error
/// is returned as it is, and a process whose part succeeded while another's failed gets
/// an error naming how many failed, so no process goes on to a file with a hole in it.
fn agree(ranks: Option<&Group>, path: &Path, mine: Result<()>, what: &str) -> Result<()> {
    let Some(g) = ranks else { return mine };
    let mut failed = Tensor::from_slice(&[f32::from(u8::from(mine.is_err()))]);
    g.all_reduce_sum(&mut failed)?;
    mine?;
    let failed = failed.double_value(&[0]);
    if failed > 0.0 {
        return Err(state_err(
            path,
            format!("{failed} other process(es) could not {what} their part of the state"),
        ));
    }
    Ok(())
}

/// One tensor of a parameter's state.
#[derive(Clone, Copy, Debug)]
enum Part {
    ExpAvg,
    ExpAvgSq,
    Master,
}

impl Part {
    /// The prefix of its name in the file (`exp_avg.model.norm.weight`).
    fn prefix(self) -> &'static str {
        match self {
            Part::ExpAvg => "exp_avg",
            Part::ExpAvgSq => "exp_avg_sq",
            Part::Master => "master",
        }
    }

    fn of(self, s: &Slot) -> Option<&Tensor> {
        match self {
            Part::ExpAvg => Some(&s.exp_avg),
            Part::ExpAvgSq => Some(&s.exp_avg_sq),
            Part::Master => s.master.as_ref(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Meta {
    step: u64,
}

impl AdamW {
    /// The tensors of the state file, by name: per parameter its two moments, and its
    /// master weights when the parameter is not f32.
    fn state_tensors(&self) -> Vec<(String, &Slot, Part)> {
        let mut out = Vec::with_capacity(self.params.len() * 3);
        for s in &self.params {
            let parts: &[Part] = if s.param.kind() == Kind::Float {
                &[Part::ExpAvg, Part::ExpAvgSq]
            } else {
                &[Part::ExpAvg, Part::ExpAvgSq, Part::Master]
            };
            out.extend(
                parts
                    .iter()
                    .map(|&p| (format!("{}.{}", p.prefix(), s.name), s, p)),
            );
        }
        out
    }

    /// Saves the moments (and master weights) as `optimizer.safetensors` and the step as
    /// `optimizer.json` in `dir`, a folder every process sees. The file is the one a single
    /// process writes whatever the number of processes, so any number can resume from it.
    ///
    /// Every process of `ranks` calls it. Each computes the file's layout from the
    /// parameters' shapes; rank 0 creates the file; each process then writes the tensors
    /// it owns at their offsets (sharded: its share; otherwise rank 0 writes them all), so
    /// none holds more than its own state and one tensor's host copy, and no state crosses
    /// between processes. Sharded state without its process group is refused.
    pub fn save(&self, dir: &Path, ranks: Option<&Group>) -> Result<()> {
        if ranks.is_none() && self.sharded_rank.is_some() {
            return Err(Error::WithoutGroup);
        }
        let path = dir.join("optimizer.safetensors");
        let tensors = self.state_tensors();
        let layout = TensorLayout::new(
            &path,
            tensors
                .iter()
                .map(|(key, s, _)| (key.clone(), Kind::Float, s.param.size())),
        )?;
        let rank = ranks.map_or(0, Group::rank);
        // 1. Rank 0 creates the file; the others open it once it exists.
        let created = if rank == 0 {
            layout.create().map_err(Error::from)
        } else {
            Ok(())
        };
        agree(ranks, &path, created, "create")?;
        // 2. Each process writes its tensors where they go, and flushes them to disk.
        let written = (|| -> Result<()> {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| state_err(&path, e.to_string()))?;
            for (key, s, part) in &tensors {
                // Sharded, a parameter's owner writes its state; otherwise rank 0 writes all.
                let writer = if self.sharded_rank.is_some() {
                    s.owner
                } else {
                    0
                };
                if writer != rank {
                    continue;
                }
                let t = part.of(s).ok_or_else(|| {
                    state_err(&path, format!("`{key}`: no master weights to save"))
                })?;
                layout.write_at(&file, key, t)?;
            }
            file.sync_all().map_err(|e| state_err(&path, e.to_string()))
        })();
        // 3. Rank 0 records the step only when every process has written its part.
        agree(ranks, &path, written, "write")?;
        if rank == 0 {
            let json = serde_json::to_vec(&Meta { step: self.step }).unwrap_or_default();
            deltarl_schemas::atomic_write_bytes(&dir.join("optimizer.json"), &json)?;
        }
        Ok(())
    }

    /// Restores state saved by [`AdamW::save`]; every moment must be present. Master
    /// weights are restored when saved (a run that continues in bf16); otherwise they stay
    /// the working copy upcast (the first bf16 step after an f32 run). Each tensor is read
    /// from the file when its turn comes, and a process holding a share of the state
    /// (sharded) reads only the tensors it owns: its host memory is its share plus one
    /// tensor, not the whole file.
    pub fn load(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join("optimizer.safetensors");
        let file = deltarl_model::TensorFile::open(&path).map_err(|e| Error::State {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let rank = self.sharded_rank;
        for s in &mut self.params {
            if rank.is_some_and(|r| r != s.owner) {
                // Another process keeps this state; the weights came with the policy.
                continue;
            }
            let (n, p) = (&s.name, &s.param);
            let mut slots = vec![(Part::ExpAvg, &mut s.exp_avg, true)];
            slots.push((Part::ExpAvgSq, &mut s.exp_avg_sq, true));
            if let Some(m) = s.master.as_mut() {
                slots.push((Part::Master, m, false));
            }
            for (part, slot, required) in slots {
                let key = format!("{}.{n}", part.prefix());
                let read = file.read(&key).map_err(|e| Error::State {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                let Some(t) = read else {
                    if !required {
                        continue;
                    }
                    return Err(Error::State {
                        path: path.clone(),
                        message: format!("missing tensor `{key}`"),
                    });
                };
                if t.size() != p.size() {
                    return Err(Error::State {
                        path: path.clone(),
                        message: format!(
                            "tensor `{key}` has shape {:?}, expected {:?}",
                            t.size(),
                            p.size()
                        ),
                    });
                }
                tch::no_grad(|| slot.copy_(&t.to_device(slot.device())));
            }
            if let Some(m) = &s.master {
                // The working copy follows the restored master exactly.
                tch::no_grad(|| s.param.copy_(&m.to_kind(s.param.kind())));
            }
        }
        let mpath = dir.join("optimizer.json");
        let text = std::fs::read(&mpath).map_err(|e| Error::State {
            path: mpath.clone(),
            message: e.to_string(),
        })?;
        let meta: Meta = serde_json::from_slice(&text).map_err(|e| Error::State {
            path: mpath.clone(),
            message: e.to_string(),
        })?;
        self.step = meta.step;
        Ok(())
    }
}
