//! Activation checkpointing per decoder layer (what `torch.utils.checkpoint` does for each
//! block in verl's FSDP workers), written out because libtorch's C++ API has no
//! checkpoint function.
//!
//! The forward pass runs the blocks without a graph and keeps only each block's input
//! ([B, T, hidden] a layer). The final norm and everything after it are built with a graph
//! on a leaf standing for the last block's output, so the caller's `loss.backward()` stops
//! there. [`Checkpointed::backward`] then walks the blocks last to first: it recomputes a
//! block from its saved input with a graph, pushes the gradient that arrived at its output
//! through it (accumulating into the block's parameters), and hands the gradient at its
//! input to the block below; the embeddings come last. Memory is the saved inputs plus one
//! block's activations instead of every block's; the cost is a second forward of the blocks.

use tch::{nn::Module, Kind, Tensor};

use crate::{Error, Qwen3, Result};

/// A forward pass whose block activations are recomputed during the backward pass.
#[derive(Debug)]
pub struct Checkpointed<'m> {
    model: &'m Qwen3,
    /// [B, T] token ids.
    ids: Tensor,
    /// The input of every block, without graph: one [B, T, hidden] a layer.
    inputs: Vec<Tensor>,
    /// The last block's output as a leaf that requires grad: [B, T, hidden].
    top: Tensor,
}

impl Qwen3 {
    /// ids: [B, T] int64 -> a checkpointed pass; [`Checkpointed::hidden`] gives the final
    /// normed hidden states with a graph (from the last block's output on).
    pub fn hidden_checkpointed(&self, ids: &Tensor) -> Checkpointed<'_> {
        let (inputs, last) = tch::no_grad(|| {
            // 1. Token embeddings: [B, T, hidden].
            let mut x = self.embed_tokens.forward(ids);
            let table = self.rope.at(0, ids.size()[1], x.kind());
            // 2. Decoder blocks without a graph, keeping each one's input.
            let mut inputs = Vec::with_capacity(self.layers.len());
            for block in &self.layers {
                let y = block.forward(&x, &table, None);
                inputs.push(x);
                x = y;
            }
            (inputs, x)
        });
        Checkpointed {
            model: self,
            ids: ids.shallow_clone(),
            inputs,
            top: last.set_requires_grad(true),
        }
    }
}

impl Checkpointed<'_> {
    /// The final normed hidden states [B, T, hidden], differentiable down to the last
    /// block's output.
    pub fn hidden(&self) -> Tensor {
        self.model.norm.forward(&self.top)
    }

    /// Completes the backward pass below the last block. Call after the loss built on
    /// [`Checkpointed::hidden`] has been back-propagated; gradients accumulate into the
    /// parameters like a plain `backward` does.
    pub fn backward(self) -> Result<()> {
        self.backward_each(|_| Ok(()))
    }

    /// [`Checkpointed::backward`], calling `after_layer(i)` as soon as decoder layer `i`'s
    /// parameters hold their whole gradient of this pass (layers last to first, before the
    /// embeddings'): ZeRO-2 hands each layer's gradient to its owner there and frees it.
    pub fn backward_each<E: From<Error>>(
        self,
        mut after_layer: impl FnMut(usize) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut grad = self.top.grad();
        if !grad.defined() {
            return Err(Error::Generate(
                "checkpointed backward: the loss did not reach the hidden states (call backward on it first)"
                    .into(),
            )
            .into());
        }
        let kind = self.top.kind();
        let table = self.model.rope.at(0, self.ids.size()[1], kind);
        // 1. Blocks, last first: recompute with a graph from the saved input, then
        //    back-propagate sum(y * g), whose gradient at y is exactly g.
        let layers = self.model.layers.iter().zip(self.inputs).enumerate();
        for (i, (block, x)) in layers.rev() {
            let x = x.set_requires_grad(true);
            let y = block.forward(&x, &table, None);
            (y * &grad).sum(Kind::Float).backward();
            grad = x.grad();
            after_layer(i)?;
        }
        // 2. Token embeddings (with tied embeddings this adds to the LM head's gradient).
        let e = self.model.embed_tokens.forward(&self.ids);
        (e * &grad).sum(Kind::Float).backward();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::synthetic::random_checkpoint;
    use crate::Dtype;
    use crate::{layer_of, Family, Shape};
    use tch::Device;

    fn shape(tied: bool) -> Shape {
        Shape {
            hidden_size: 32,
            intermediate_size: 48,
            num_hidden_layers: 3,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            max_position_embeddings: 64,
            tie_word_embeddings: tied,
        }
    }

    /// Gradients of a checkpointed pass equal a plain pass's: untied embeddings bit for
    /// bit (every accumulation happens in the same order), tied ones to round-off (the
    /// head's and the embedding's contributions meet in the other order).
    #[test]
    fn checkpointed_gradients_equal_plain_ones() {
        for tied in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let policy =
                random_checkpoint(Family::Qwen3, dir.path(), 300, &shape(tied), Dtype::F32, 7)
                    .unwrap();
            let ids = Tensor::from_slice(&[3i64, 9, 4, 1, 7, 2, 8, 5, 6, 2, 2, 9])
                .view([2, 6])
                .to_device(Device::Cpu);
            let loss_of = |h: &Tensor| {
                let logits = policy.model.logits(h).log_softmax(-1, Kind::Float);
                logits.narrow(2, 0, 5).sum(Kind::Float) * 0.01
            };
            let grads = || -> Vec<(String, Tensor)> {
                let mut out: Vec<_> = policy
                    .vs
                    .variables()
                    .into_iter()
                    .map(|(n, t)| (n, t.grad().copy()))
                    .collect();
                out.sort_by(|a, b| a.0.cmp(&b.0));
                for (_, t) in policy.vs.variables() {
                    let mut g = t.grad();
                    let _ = g.zero_();
                }
                out
            };
            loss_of(&policy.model.hidden(&ids, None)).backward();
            let plain = grads();
            let pass = policy.model.hidden_checkpointed(&ids);
            loss_of(&pass.hidden()).backward();
            pass.backward().unwrap();
            let ckpt = grads();
            assert_eq!(plain.len(), ckpt.len());
            for ((name, a), (_, b)) in plain.iter().zip(&ckpt) {
                assert!(
                    a.abs().sum(Kind::Double).double_value(&[]) > 0.0,
                    "{name}: no gradient"
                );
                let diff = (a - b).abs().max().double_value(&[]);
                let scale = a.abs().max().double_value(&[]);
                if tied {
                    // The tied matrix sums the head's gradient and one per occurrence of a
                    // token in `ids` (at most 3), in another grouping: ≤ 3·2^-24 ≈ 1.8e-7 of
                    // the terms' sum of magnitudes; 1e-6 of the largest gradient holds
                    // while those sums stay under 5x it.
                    assert!(diff <= 1e-6 * scale, "{name}: {diff} vs {scale}");
                } else {
                    assert_eq!(diff, 0.0, "{name}");
                }
            }
        }
    }

    /// `backward_each` reports layers last to first, each once its parameters hold their
    /// whole gradient: the layer's gradients seen in the callback are final (equal to
    /// those after the pass), and no layer below it has one yet. `layer_of` maps every
    /// variable to its layer, the embeddings, norm and head to none.
    #[test]
    fn each_layer_is_reported_when_its_gradient_is_complete() {
        let dir = tempfile::tempdir().unwrap();
        let policy =
            random_checkpoint(Family::Qwen3, dir.path(), 300, &shape(false), Dtype::F32, 3)
                .unwrap();
        let vars = policy.vs.variables();
        let per_layer = |i: usize| -> Vec<(&String, &Tensor)> {
            vars.iter()
                .filter(|(n, _)| layer_of(n) == Some(i))
                .collect()
        };
        assert_eq!(
            vars.keys().filter(|n| layer_of(n).is_none()).count(),
            3,
            "embeddings, final norm, head: {:?}",
            vars.keys().collect::<Vec<_>>()
        );
        let ids = Tensor::from_slice(&[3i64, 9, 4, 1, 7, 2]).view([1, 6]);
        let pass = policy.model.hidden_checkpointed(&ids);
        policy
            .model
            .logits(&pass.hidden())
            .sum(Kind::Float)
            .backward();
        let mut seen = Vec::new();
        let mut at_report = Vec::new();
        pass.backward_each(|i| -> Result<()> {
            for later in 0..i {
                assert!(per_layer(later).iter().all(|(_, t)| !t.grad().defined()));
            }
            let grads: Vec<Tensor> = per_layer(i).iter().map(|(_, t)| t.grad().copy()).collect();
            assert!(!grads.is_empty() && grads.iter().all(Tensor::defined));
            at_report.push((i, grads));
            seen.push(i);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![2, 1, 0]);
        for (i, grads) in at_report {
            for ((name, t), g) in per_layer(i).iter().zip(&grads) {
                assert!(
                    t.grad().equal(g),
                    "{name} changed after its layer was reported"
                );
            }
        }
    }

    #[test]
    fn backward_before_the_loss_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let policy =
            random_checkpoint(Family::Qwen3, dir.path(), 300, &shape(true), Dtype::F32, 1).unwrap();
        let ids = Tensor::from_slice(&[1i64, 2, 3]).view([1, 3]);
        let err = policy
            .model
            .hidden_checkpointed(&ids)
            .backward()
            .unwrap_err();
        assert!(err.to_string().contains("did not reach"), "{err}");
    }
}
