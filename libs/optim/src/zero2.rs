//! ZeRO-2's two steps over the process group: each pass's gradients summed into their
//! owners' f32 sums as soon as they are complete, and the global gradient norm from the
//! owners' shares.
//!
//! The pass's gradient of a parameter leaves this process as an f32 tensor (its bf16
//! `.grad` widened exactly, plus what a chunked head moved out early), is summed over the
//! processes into the owner's copy (c10d `reduce`), added to the owner's sum, and the
//! `.grad` is freed: between passes no process holds a gradient it does not own, and
//! during one the gradients of the layers not yet reduced (one layer's, with activation
//! checkpointing) plus one f32 tensor in flight.
//!
//! Order of the f32 additions: the owner's sum is `(0 + R_0) + R_1 + …`, `R_j` the sum
//! over processes of round j's passes (one per process). With one pass a process a step
//! that is the all-reduce's `g_0 + g_1` of ZeRO-1 and of one process, bit for bit; with
//! more, the groupings differ from both (one process: `((g_0 + g_1) + g_2) + g_3`; ZeRO-2
//! on two processes: `(g_0 + g_1) + (g_2 + g_3)`).

use deltarl_dist::{free_grad, Group};
use tch::{Kind, Tensor};

use crate::adamw::Sharding;
use crate::{AdamW, Error, Result};

impl AdamW {
    /// Hands this process's gradients of the parameters `which` selects (by name) to their
    /// owners: summed over the processes into the owner's f32 sum, then freed here. Every
    /// process of `g` calls it with the same `which`, in the same order, once per round of
    /// passes, whether it ran a pass this round or not (a process without one sends zeros).
    pub fn reduce_grads(&mut self, g: &Group, which: &dyn Fn(&str) -> bool) -> Result<()> {
        if self.sharding != Sharding::Gradients {
            return Err(Error::Sharding(
                "reduce_grads without ZeRO-2: the gradients are summed whole (all_reduce_grads)",
            ));
        }
        let me = g.rank();
        for s in self.params.iter_mut().filter(|s| which(&s.name)) {
            let grad = s.param.grad();
            // This pass's f32 gradient here: what moved out early plus what is left.
            let mut part = match (s.pending.take(), grad.defined()) {
                (Some(mut sum), true) => tch::no_grad(|| sum.g_add_(&grad.to_kind(Kind::Float))),
                (Some(sum), false) => sum,
                (None, true) => grad.to_kind(Kind::Float),
                (None, false) => Tensor::zeros(s.param.size(), (Kind::Float, s.param.device())),
            };
            drop(grad);
            free_grad(&mut s.param)?;
            g.reduce_sum(&mut part, s.owner)?;
            if s.owner == me {
                let sum = s.grad32.as_mut().ok_or(Error::Sharding(
                    "ZeRO-2: an owned parameter without its gradient sum",
                ))?;
                let _ = tch::no_grad(|| sum.g_add_(&part));
            }
        }
        Ok(())
    }

    /// The global gradient norm, then clipping to `max_norm` as [`AdamW::clip_grad_norm`]
    /// does. Under ZeRO-2 each process holds its parameters' sums only: the per-parameter
    /// squared norms are summed over `ranks` (each entry is one owner's value plus zeros,
    /// so exact) and added in parameter order, the very sum one process computes.
    pub fn clip_global_grad_norm(&mut self, max_norm: f64, ranks: Option<&Group>) -> Result<f64> {
        let squares = self.squared_norms();
        let squares = match (ranks, self.sharding) {
            (Some(g), Sharding::Gradients) => {
                let mut t = Tensor::from_slice(&squares);
                g.all_reduce_sum(&mut t)?;
                Vec::<f64>::try_from(&t)?
            }
            _ => squares,
        };
        let norm = squares.iter().sum::<f64>().sqrt();
        self.clip_to(norm, max_norm);
        Ok(norm)
    }
}
