//! The LM head over chunks of tokens: log-probs and entropies of a pass's response tokens
//! without a `[tokens, vocabulary]` f32 buffer of the whole pass.
//!
//! At a 151,936-token vocabulary each predicted token costs ~600 kB per f32 buffer of the
//! head (logits, log-softmax, probabilities, entropy terms); a micro-batch of 20k tokens
//! would hold several of 12 GB each. Here the head runs over chunks of `chunk` tokens:
//!
//! 1. Forward, without a graph: each chunk's logits, log-softmax, chosen-token log-prob
//!    and entropy; only the `[N]` results are kept.
//! 2. The loss is built on those `[N]` results as leaves (the caller's `backward` stops
//!    there, leaving `dL/dlogprob` and `dL/dentropy`).
//! 3. [`ChunkedHead::backward`]: each chunk recomputed with a graph and back-propagated
//!    with `sum(logprob_c * dL/dlogprob_c + entropy_c * dL/dentropy_c)`, whose gradient at
//!    the chunk's outputs is exactly the upstream one; the head weight's gradient and the
//!    states' gradient accumulate chunk by chunk. Then the states' gradient goes on into
//!    the body in one backward.
//!
//! Per chunk the arithmetic is the whole pass's; only the head weight's gradient is summed
//! over chunks in another order (round-off), and the head is computed twice (once more
//! than the plain pass, as activation checkpointing recomputes the blocks).

use deltarl_model::Qwen3;
use tch::{Kind, Tensor};

/// The default budget of one `[tokens, vocabulary]` f32 buffer of the head: 256 MB.
pub const DEFAULT_HEAD_CHUNK_BYTES: u64 = 256_000_000;

/// Tokens per chunk so that one `[tokens, vocab]` f32 buffer stays within `bytes`
/// (at least one token); 0 bytes = the whole pass at once.
pub fn head_chunk_tokens(bytes: u64, vocab: usize) -> usize {
    if bytes == 0 {
        return usize::MAX;
    }
    ((bytes / (4 * vocab.max(1) as u64)) as usize).max(1)
}

/// The head's outputs for states `h` [N, H]: log-probs of `targets` [N] at `temperature`
/// and the entropies, `[N]` each, with a graph when `h` has one (the entropy only with
/// `entropy_grad`).
pub(crate) fn whole(
    model: &Qwen3,
    h: &Tensor,
    targets: &Tensor,
    temperature: f64,
    entropy_grad: bool,
) -> (Tensor, Tensor) {
    // Log-probs at the rollout temperature: [N, V] -> [N]. One expression, so the logits
    // and their f32 copy are freed as soon as the log-softmax exists.
    let logp_all =
        (model.logits(h).to_kind(Kind::Float) / temperature).log_softmax(-1, Kind::Float);
    let logprob = logp_all
        .gather(1, &targets.unsqueeze(1), false)
        .squeeze_dim(1);
    // Entropy of the next-token distribution: [N]. Without `entropy_grad` no graph, or its
    // [N, V] buffers would stay saved for a backward that never comes.
    let entropy_of = || -(logp_all.exp() * &logp_all).sum_dim_intlist(-1, false, Kind::Float);
    let entropy = if entropy_grad {
        entropy_of()
    } else {
        tch::no_grad(entropy_of)
    };
    (logprob, entropy)
}

/// A head computed chunk by chunk (step 1 above), its backward pending when the states
/// have a graph.
pub struct ChunkedHead {
    /// [N, H] the states, with their graph into the body (when they have one).
    states: Tensor,
    targets: Tensor,
    temperature: f64,
    chunk: usize,
    /// [N] leaves the loss is built on.
    pub logprob: Tensor,
    pub entropy: Tensor,
}

impl ChunkedHead {
    pub(crate) fn new(
        model: &Qwen3,
        states: &Tensor,
        targets: &Tensor,
        temperature: f64,
        chunk: usize,
        entropy_grad: bool,
    ) -> Self {
        let n = states.size()[0];
        let spans = spans(n, chunk);
        let (logprob, entropy): (Vec<Tensor>, Vec<Tensor>) = tch::no_grad(|| {
            spans
                .iter()
                .map(|&(start, len)| {
                    whole(
                        model,
                        &states.narrow(0, start, len),
                        &targets.narrow(0, start, len),
                        temperature,
                        false,
                    )
                })
                .unzip()
        });
        let graph = states.requires_grad();
        let (logprob, entropy) = (Tensor::cat(&logprob, 0), Tensor::cat(&entropy, 0));
        ChunkedHead {
            states: states.shallow_clone(),
            targets: targets.shallow_clone(),
            temperature,
            chunk,
            logprob: logprob.set_requires_grad(graph),
            entropy: entropy.set_requires_grad(graph && entropy_grad),
        }
    }

    /// Step 3: after the loss built on [`ChunkedHead::logprob`] / `entropy` has been
    /// back-propagated, recomputes each chunk with a graph and back-propagates it into the
    /// head weight and the states, then the states' gradient into the body.
    /// `after_chunk()` runs after each chunk's backward (the optimizer moves the head
    /// weight's bf16 gradient into its f32 sum there). A no-op without a graph.
    pub fn backward(&self, model: &Qwen3, after_chunk: &mut dyn FnMut()) {
        let g_logprob = self.logprob.grad();
        if !self.states.requires_grad() || !g_logprob.defined() {
            return;
        }
        let g_entropy = self.entropy.grad();
        let mut g_states = Vec::new();
        for (start, len) in spans(self.states.size()[0], self.chunk) {
            // The chunk's states as a leaf of their own: its gradient is the chunk's rows.
            let states = self
                .states
                .narrow(0, start, len)
                .detach()
                .set_requires_grad(true);
            let (logprob, entropy) = whole(
                model,
                &states,
                &self.targets.narrow(0, start, len),
                self.temperature,
                g_entropy.defined(),
            );
            let logprob_term = (logprob * g_logprob.narrow(0, start, len)).sum(Kind::Float);
            let surrogate = if g_entropy.defined() {
                logprob_term + (entropy * g_entropy.narrow(0, start, len)).sum(Kind::Float)
            } else {
                logprob_term
            };
            surrogate.backward();
            after_chunk();
            g_states.push(states.grad());
        }
        // sum(states * g) has gradient exactly g at the states.
        (&self.states * Tensor::cat(&g_states, 0))
            .sum(Kind::Float)
            .backward();
    }
}

/// (start, length) of the chunks of `n` tokens, `chunk` at a time.
fn spans(n: i64, chunk: usize) -> Vec<(i64, i64)> {
    let c = i64::try_from(chunk).unwrap_or(i64::MAX).max(1);
    (0..n)
        .step_by(c as usize)
        .map(|s| (s, c.min(n - s)))
        .collect()
}
