//! The teacher-forced pass the features stage, the update and the warm start share: rows of
//! prompt and response in one right-padded batch, or each prompt once with its responses
//! attending to it ([`Layout`]), and for every response token its final
//! normed hidden state, log-probability and entropy at a temperature ([`token_stats`]),
//! the LM head over chunks of tokens so no `[tokens, vocabulary]` f32 buffer of a whole
//! pass is ever held ([`ChunkedHead`]), in passes bounded by rows and by tokens
//! ([`budget_chunks`]).

mod batching;
mod head;
mod shared;
pub use batching::budget_chunks;
pub use head::{head_chunk_tokens, ChunkedHead, DEFAULT_HEAD_CHUNK_BYTES};
pub use shared::packs;

use deltarl_model::Qwen3;
use tch::{Device, Tensor};

/// How a teacher-forced pass lays out its rows. The results are the same up to round-off
/// (matrix products of other shapes sum in other orders).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Every row's prompt and response, right-padded into one `[B, T]` batch.
    #[default]
    Padded,
    /// The rows of one prompt (consecutive rows with the same prompt tokens) compute the
    /// prompt once and their responses attend to its keys ([`Qwen3::hidden_shared`]): G
    /// samples of a P-token prompt cost P + G x R positions, not G x (P + R).
    SharedPrompt,
}

impl Layout {
    /// Whether this is the default (left out of serialised settings, so files and hashes
    /// from before the setting existed stay the same).
    pub fn is_padded(&self) -> bool {
        *self == Layout::Padded
    }
}

/// Whether a head chunk budget is the default (left out of serialised settings, so files
/// and hashes from before the setting existed stay the same).
pub fn is_default_head_chunk(bytes: &u64) -> bool {
    *bytes == DEFAULT_HEAD_CHUNK_BYTES
}
/// Per-token outputs of one teacher-forced pass over a chunk of responses.
pub struct TokenStats {
    /// [N, H] final normed hidden states predicting each response token.
    pub hidden: Tensor,
    /// [N] log-probabilities at the temperature, with grad when the model has it.
    pub logprob: Tensor,
    /// [N] entropy of the next-token distribution at the temperature.
    pub entropy: Tensor,
    /// Number of response tokens per row.
    pub lengths: Vec<usize>,
    /// When the head ran in chunks: its pending backward ([`TokenStats::backward_head`]).
    head: Option<ChunkedHead>,
}

impl TokenStats {
    /// Call after back-propagating a loss built on `logprob` / `entropy`: when the head
    /// ran in chunks, their backward ([`ChunkedHead::backward`]), `after_chunk()` after
    /// each; when it ran whole, the loss's backward already went through it (a no-op).
    pub fn backward_head(&self, model: &Qwen3, after_chunk: &mut dyn FnMut()) {
        if let Some(head) = &self.head {
            head.backward(model, after_chunk);
        }
    }
}

/// One teacher-forced batch in a [`Layout`], and for every response token the position
/// whose state predicts it.
pub struct TeacherForced {
    input: Input,
    /// [N] flat positions of the states predicting each response token, in the layout
    /// [`TeacherForced::hidden`] returns.
    gather: Tensor,
    /// [N] the response tokens.
    targets: Tensor,
    /// Number of response tokens per row.
    pub lengths: Vec<usize>,
}

/// The token ids of a pass.
enum Input {
    /// [B, T] int64, prompt + response right-padded (causal attention means padding never
    /// reaches a real position).
    Padded(Tensor),
    /// Per prompt: its tokens and its rows' responses, padded or packed.
    Shared(Vec<shared::Group>),
}

impl TeacherForced {
    /// Rows of prompt and response in `layout` for `model` (whose shape decides how the
    /// shared-prompt layout lays out each group). Every prompt has at least one token.
    pub fn new(model: &Qwen3, rows: &[(&[u32], &[u32])], layout: Layout, device: Device) -> Self {
        let mut gather = Vec::new();
        let mut targets = Vec::new();
        let lengths: Vec<usize> = rows.iter().map(|(_, r)| r.len()).collect();
        let input = match layout {
            Layout::Padded => {
                let lens: Vec<usize> = rows.iter().map(|(p, r)| p.len() + r.len()).collect();
                let t_max = lens.iter().copied().max().unwrap_or(1).max(1);
                let mut batch = vec![0i64; rows.len() * t_max];
                for (b, (prompt, response)) in rows.iter().enumerate() {
                    for (t, &tok) in prompt.iter().chain(response.iter()).enumerate() {
                        batch[b * t_max + t] = i64::from(tok);
                    }
                    // The state at position lp + j - 1 predicts response token j.
                    let lp = prompt.len();
                    for (j, &tok) in response.iter().enumerate() {
                        gather.push((b * t_max + lp + j - 1) as i64);
                        targets.push(i64::from(tok));
                    }
                }
                Input::Padded(
                    Tensor::from_slice(&batch)
                        .view([rows.len() as i64, t_max as i64])
                        .to_device(device),
                )
            }
            Layout::SharedPrompt => Input::Shared(shared::groups(
                rows,
                &model.config,
                device,
                &mut gather,
                &mut targets,
            )),
        };
        TeacherForced {
            input,
            gather: Tensor::from_slice(&gather).to_device(device),
            targets: Tensor::from_slice(&targets).to_device(device),
            lengths,
        }
    }

    /// The padded batch [B, T] int64 (what a checkpointed pass runs on), or None in the
    /// shared-prompt layout.
    pub fn padded(&self) -> Option<&Tensor> {
        match &self.input {
            Input::Padded(ids) => Some(ids),
            Input::Shared(_) => None,
        }
    }

    /// The plain pass: the final normed hidden states [`TeacherForced::stats`] reads, with a
    /// graph when grad is on. Padded: [B, T, H]. Shared: per prompt, its last state and
    /// its continuation columns ([`shared::hidden`]), joined: [1, M, H].
    pub fn hidden(&self, model: &Qwen3) -> Tensor {
        match &self.input {
            Input::Padded(ids) => model.hidden(ids, None),
            Input::Shared(groups) => shared::hidden(model, groups),
        }
    }

    /// The per-token statistics from the final normed hidden states [B, T, H] of
    /// [`TeacherForced::input`] (a plain or a checkpointed pass), the head computed over
    /// chunks of at most `chunk` tokens ([`head_chunk_tokens`]; a pass that fits runs
    /// whole, as one graph). The entropy gets a graph only with `entropy_grad`.
    pub fn stats(
        &self,
        model: &Qwen3,
        hidden: &Tensor,
        temperature: f64,
        entropy_grad: bool,
        chunk: usize,
    ) -> TokenStats {
        // 1. The predicting positions: [B, T, H] -> [N, H].
        let hdim = hidden.size()[2];
        let h = hidden.view([-1, hdim]).index_select(0, &self.gather);
        // 2. Log-probs at the rollout temperature and entropies: [N] each.
        let n = self.lengths.iter().sum::<usize>();
        let (logprob, entropy, head) = if n <= chunk {
            let (lp, ent) = head::whole(model, &h, &self.targets, temperature, entropy_grad);
            (lp, ent, None)
        } else {
            let head = ChunkedHead::new(model, &h, &self.targets, temperature, chunk, entropy_grad);
            (
                head.logprob.shallow_clone(),
                head.entropy.shallow_clone(),
                Some(head),
            )
        };
        TokenStats {
            hidden: h,
            logprob,
            entropy,
            lengths: self.lengths.clone(),
            head,
        }
    }
}

/// Teacher-forced forward over `rows` in `layout` (see [`TeacherForced`]), the head over
/// chunks of at most `chunk` tokens; the entropy without graph.
pub fn token_stats(
    model: &Qwen3,
    rows: &[(&[u32], &[u32])],
    layout: Layout,
    temperature: f64,
    chunk: usize,
    device: Device,
) -> TokenStats {
    let batch = TeacherForced::new(model, rows, layout, device);
    let hidden = batch.hidden(model);
    batch.stats(model, &hidden, temperature, false, chunk)
}
