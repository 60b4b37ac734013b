//! The optimizer's state on disk: `optimizer.safetensors` (moments, and master weights of
//! non-f32 parameters) and `optimizer.json` (the step), consolidated from the ranks that
//! own each parameter when the state is sharded.

use std::path::Path;

use deltarl_dist::Group;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::adamw::AdamW;
use crate::{Error, Result};

#[derive(Serialize, Deserialize)]
struct Meta {
    step: u64,
}

impl AdamW {
    /// The whole state by name, as one process holds it. Sharded, every process must call
    /// it: each parameter's state goes from its owner to rank 0 (one parameter at a time,
    /// kept on the host there, as torch's `consolidate_state_dict(to=0)`); other ranks get
    /// an empty list.
    pub fn consolidated(&self, ranks: Option<&Group>) -> Result<Vec<(String, Tensor)>> {
        if ranks.is_none() && self.sharded_rank.is_some() {
            return Err(Error::Unconsolidated);
        }
        let mut named = Vec::with_capacity(self.params.len() * 3);
        for s in &self.params {
            let mut parts = vec![
                ("exp_avg", Some(&s.exp_avg)),
                ("exp_avg_sq", Some(&s.exp_avg_sq)),
            ];
            if s.param.kind() != Kind::Float {
                parts.push(("master", s.master.as_ref()));
            }
            for (prefix, mine) in parts {
                let key = format!("{prefix}.{}", s.name);
                let (Some(g), Some(rank)) = (ranks, self.sharded_rank) else {
                    if let Some(t) = mine {
                        named.push((key, t.shallow_clone()));
                    }
                    continue;
                };
                let mut t = match mine {
                    Some(t) if rank == s.owner => t.to_device(Device::Cpu),
                    _ => Tensor::zeros(s.param.size(), (Kind::Float, Device::Cpu)),
                };
                if s.owner != 0 {
                    g.broadcast(&mut t, s.owner)?;
                }
                if rank == 0 {
                    named.push((key, t));
                }
            }
        }
        Ok(named)
    }

    /// Saves the moments (and master weights) as `optimizer.safetensors` and the step as
    /// `optimizer.json`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        self.save_named(dir, &self.consolidated(None)?)
    }

    /// Writes state from [`AdamW::consolidated`].
    pub fn save_named(&self, dir: &Path, named: &[(String, Tensor)]) -> Result<()> {
        deltarl_model::write_tensors(&dir.join("optimizer.safetensors"), named)?;
        let json = serde_json::to_vec(&Meta { step: self.step }).unwrap_or_default();
        deltarl_schemas::atomic_write_bytes(&dir.join("optimizer.json"), &json)?;
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
            let mut slots = vec![("exp_avg", &mut s.exp_avg, true)];
            slots.push(("exp_avg_sq", &mut s.exp_avg_sq, true));
            if let Some(m) = s.master.as_mut() {
                slots.push(("master", m, false));
            }
            for (prefix, slot, required) in slots {
                let key = format!("{prefix}.{n}");
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
