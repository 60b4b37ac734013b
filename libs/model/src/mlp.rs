//! SwiGLU feed-forward block.

use tch::{nn, nn::Module, Tensor};

#[derive(Debug)]
pub struct Mlp {
    gate_proj: nn::Linear,
    up_proj: nn::Linear,
    down_proj: nn::Linear,
}

impl Mlp {
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
        let gate = self.gate_proj.forward(x).silu();
        self.down_proj.forward(&(gate * self.up_proj.forward(x)))
    }
}
