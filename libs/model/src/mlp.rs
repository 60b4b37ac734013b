//! SwiGLU feed-forward block.

use tch::{nn, Tensor};

use crate::packed::PackedMatrix;

#[derive(Debug)]
pub struct Mlp {
    gate_proj: nn::Linear,
    up_proj: nn::Linear,
    down_proj: nn::Linear,
}

/// The block's projections packed for decoding, those that pack (see [`crate::packed`]).
#[derive(Debug)]
pub struct PackedMlp {
    gate: Option<PackedMatrix>,
    up: Option<PackedMatrix>,
    down: Option<PackedMatrix>,
}

impl PackedMlp {
    /// How many of the projections are packed.
    pub fn count(&self) -> usize {
        [&self.gate, &self.up, &self.down]
            .iter()
            .filter(|m| m.is_some())
            .count()
    }
}

impl Mlp {
    /// The projections that pack, packed.
    pub fn pack(&self) -> PackedMlp {
        PackedMlp {
            gate: PackedMatrix::linear(&self.gate_proj),
            up: PackedMatrix::linear(&self.up_proj),
            down: PackedMatrix::linear(&self.down_proj),
        }
    }

    pub fn new(p: nn::Path, hidden: i64, inter: i64) -> Self {
        let c = nn::LinearConfig {
            bias: false,
            ..Default::default()
        };
        Mlp {
            gate_proj: nn::linear(&p / "gate_proj", hidden, inter, c),
            up_proj: nn::linear(&p / "up_proj", hidden, inter, c),
            down_proj: nn::linear(&p / "down_proj", inter, hidden, c),
        }
    }

    /// x: [B, T, hidden] -> [B, T, hidden]
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.forward_packed(x, None)
    }

    /// [`Mlp::forward`], through the packed projections where `p` has them.
    pub fn forward_packed(&self, x: &Tensor, p: Option<&PackedMlp>) -> Tensor {
        let gate = PackedMatrix::apply(&self.gate_proj, p.and_then(|p| p.gate.as_ref()), x);
        let up = PackedMatrix::apply(&self.up_proj, p.and_then(|p| p.up.as_ref()), x);
        let down = p.and_then(|p| p.down.as_ref());
        PackedMatrix::apply(&self.down_proj, down, &(gate.silu() * up))
    }
}
