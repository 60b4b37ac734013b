//! AdamW (PyTorch semantics, decoupled weight decay) with state that is saved beside the
//! policy, so the next iteration continues the optimizer.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::{Error, Result};

/// AdamW hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AdamWSettings {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// Optimizer state: first and second moments per parameter (sorted by name), step count.
pub struct AdamW {
    pub settings: AdamWSettings,
    /// (name, parameter, exp_avg, exp_avg_sq)
    params: Vec<(String, Tensor, Tensor, Tensor)>,
    pub step: u64,
}

#[derive(Serialize, Deserialize)]
struct Meta {
    step: u64,
}

impl AdamW {
    pub fn new(vs: &tch::nn::VarStore, settings: AdamWSettings) -> Self {
        let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let params = vars
            .into_iter()
            .map(|(n, p)| {
                let m = p.zeros_like().to_kind(Kind::Float);
                let v = p.zeros_like().to_kind(Kind::Float);
                (n, p, m, v)
            })
            .collect();
        AdamW {
            settings,
            params,
            step: 0,
        }
    }

    pub fn zero_grad(&mut self) {
        for (_, p, _, _) in &mut self.params {
            p.zero_grad();
        }
    }

    /// L2 norm of all gradients.
    pub fn grad_norm(&self) -> f64 {
        let mut sq = 0.0;
        for (_, p, _, _) in &self.params {
            let g = p.grad();
            if g.defined() {
                sq += g
                    .to_kind(Kind::Double)
                    .pow_tensor_scalar(2)
                    .sum(Kind::Double)
                    .double_value(&[]);
            }
        }
        sq.sqrt()
    }

    /// Clips gradients to `max_norm` (no-op when max_norm <= 0) and returns the norm before.
    pub fn clip_grad_norm(&mut self, max_norm: f64) -> f64 {
        let norm = self.grad_norm();
        if max_norm > 0.0 && norm > max_norm {
            let scale = max_norm / (norm + 1e-6);
            tch::no_grad(|| {
                for (_, p, _, _) in &mut self.params {
                    let mut g = p.grad();
                    if g.defined() {
                        let _ = g.g_mul_scalar_(scale);
                    }
                }
            });
        }
        norm
    }

    /// One step at learning rate `lr`.
    pub fn step(&mut self, lr: f64) {
        self.step += 1;
        let s = self.settings;
        let t = self.step as i32;
        let bc1 = 1.0 - s.beta1.powi(t);
        let bc2 = 1.0 - s.beta2.powi(t);
        tch::no_grad(|| {
            for (_, p, m, v) in &mut self.params {
                let g = p.grad();
                if !g.defined() {
                    continue;
                }
                let g = g.to_kind(Kind::Float);
                // Decoupled weight decay, then the Adam moments.
                let _ = p.g_mul_scalar_(1.0 - lr * s.weight_decay);
                let _ = m.g_mul_scalar_(s.beta1);
                let _ = m.g_add_(&(&g * (1.0 - s.beta1)));
                let _ = v.g_mul_scalar_(s.beta2);
                let _ = v.g_add_(&(&g * &g * (1.0 - s.beta2)));
                let denom = (v.sqrt() / bc2.sqrt()) + s.eps;
                let update = (&*m / &denom) * (lr / bc1);
                let _ = p.g_sub_(&update.to_kind(p.kind()));
            }
        });
    }

    /// Saves the moments as `optimizer.safetensors` and the step as `optimizer.json`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let mut named = Vec::with_capacity(self.params.len() * 2);
        for (n, _, m, v) in &self.params {
            named.push((format!("exp_avg.{n}"), m.shallow_clone()));
            named.push((format!("exp_avg_sq.{n}"), v.shallow_clone()));
        }
        deltarl_model::write_tensors(&dir.join("optimizer.safetensors"), &named)?;
        let json = serde_json::to_vec(&Meta { step: self.step }).unwrap_or_default();
        deltarl_schemas::atomic_write_bytes(&dir.join("optimizer.json"), &json)?;
        Ok(())
    }

    /// Restores state saved by [`AdamW::save`]; every moment must be present.
    pub fn load(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join("optimizer.safetensors");
        let named = Tensor::read_safetensors(&path).map_err(|e| Error::State {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let map: std::collections::HashMap<String, Tensor> = named.into_iter().collect();
        for (n, p, m, v) in &mut self.params {
            for (prefix, slot) in [("exp_avg", &mut *m), ("exp_avg_sq", &mut *v)] {
                let key = format!("{prefix}.{n}");
                let t = map.get(&key).ok_or_else(|| Error::State {
                    path: path.clone(),
                    message: format!("missing tensor `{key}`"),
                })?;
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
