//! RMSNorm, computed in f32 whatever the parameter dtype (as transformers does).

use tch::{nn, Kind, Tensor};

#[derive(Debug)]
pub struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub fn new(p: nn::Path, dim: i64, eps: f64) -> Self {
        RmsNorm {
            weight: p.ones("weight", &[dim]),
            eps,
        }
    }

    /// The scale γ: [dim].
    pub(crate) fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// x: [..., dim] -> [..., dim]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let kind = x.kind();
        if kind == Kind::Float {
            // f32 already: skip the casts (a measurable share of a decoding step).
            let var = x.square().mean_dim(-1, true, Kind::Float);
            return &self.weight * (x * (var + self.eps).rsqrt());
        }
        let x32 = x.to_kind(Kind::Float);
        let var = x32.square().mean_dim(-1, true, Kind::Float);
        let normed = x32 * (var + self.eps).rsqrt();
        &self.weight * normed.to_kind(kind)
    }
}
