//! A prompt and continuations of it in one pass, the prompt computed once: the teacher-
//! forced pass of a prompt's G samples without computing the prompt G times.
//!
//! The continuations come in one of two layouts ([`Continuations`]): right-padded rows
//! [G, R] (every column at the same position in every row), or packed into one row
//! [1, R1 + ... + RG] with no padding (each token at its own position, seeing only its own
//! continuation's earlier tokens). Either way each continuation token sees every prompt
//! key and its own continuation's keys up to itself, as in a pass over prompt +
//! continuation.

use tch::{nn::Module, Device, Kind, Tensor};

use crate::Qwen3;

/// Continuations of one P-token prompt, laid out for [`Qwen3::hidden_shared`].
#[derive(Debug)]
pub struct Continuations {
    /// [B, R] int64 token ids.
    pub ids: Tensor,
    /// [R] int64: each column's position (the same in every row).
    pub positions: Tensor,
    /// [R, P + R] bool: which keys column i sees (the prompt's P, then its row's R).
    pub mask: Tensor,
}

impl Continuations {
    /// G continuations right-padded into `ids` [G, R]: column i at position P + i sees the
    /// prompt and columns 0..=i (padding after a row's end never reaches its tokens).
    pub fn padded(ids: Tensor, prompt_len: i64) -> Continuations {
        let (r, device) = (ids.size()[1], ids.device());
        let cols = Tensor::arange(r, (Kind::Int64, device));
        // Key k is visible to column i iff k <= P + i.
        let mask = Tensor::arange(prompt_len + r, (Kind::Int64, device))
            .unsqueeze(0)
            .le_tensor(&(cols.unsqueeze(1) + prompt_len));
        Continuations {
            ids,
            positions: cols + prompt_len,
            mask,
        }
    }

    /// Continuations `rows` packed one after another into one row [1, sum of lengths]:
    /// token j of a continuation at position P + j sees the prompt and that continuation's
    /// tokens 0..=j. Every continuation has at least one token.
    pub fn packed(rows: &[&[u32]], prompt_len: i64, device: Device) -> Continuations {
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut owner = Vec::new();
        for (g, row) in rows.iter().enumerate() {
            for (j, &t) in row.iter().enumerate() {
                ids.push(i64::from(t));
                positions.push(prompt_len + j as i64);
                owner.push(g as i64);
            }
        }
        let n = ids.len() as i64;
        let owner = Tensor::from_slice(&owner).to_device(device);
        let at = Tensor::arange(n, (Kind::Int64, device));
        // Own keys: the same continuation, at or before the token ([n, n]); every prompt
        // key ([n, P]).
        let own = owner
            .unsqueeze(1)
            .eq_tensor(&owner.unsqueeze(0))
            .logical_and(&at.unsqueeze(1).ge_tensor(&at.unsqueeze(0)));
        let prompt = Tensor::ones([n, prompt_len], (Kind::Bool, device));
        Continuations {
            ids: Tensor::from_slice(&ids).to_device(device).unsqueeze(0),
            positions: Tensor::from_slice(&positions).to_device(device),
            mask: Tensor::cat(&[prompt, own], 1),
        }
    }
}

impl Qwen3 {
    /// A prompt [1, P] int64 at positions 0..P and continuations of it, the prompt
    /// computed once. Returns the final normed hidden states [1, P, hidden] and
    /// [B, R, hidden]: those [`Qwen3::hidden`] gives each row prompt + continuation, to
    /// round-off (the products run on other shapes).
    pub fn hidden_shared(&self, prompt: &Tensor, c: &Continuations) -> (Tensor, Tensor) {
        let p = prompt.size()[1];
        // 1. Token embeddings: [1, P, hidden] and [B, R, hidden].
        let mut xp = self.embed_tokens.forward(prompt);
        let mut xr = self.embed_tokens.forward(&c.ids);
        // 2. Rotary tables of positions 0..P and of the continuations' columns, shared by
        //    every layer.
        let rope_p = self.rope.at(0, p, xp.kind());
        let rope_r = self.rope.at_positions(&c.positions, xr.kind());
        // 3. Decoder blocks.
        for block in &self.layers {
            (xp, xr) = block.forward_shared(&xp, &xr, [&rope_p, &rope_r], &c.mask);
        }
        // 4. Final RMSNorm.
        (self.norm.forward(&xp), self.norm.forward(&xr))
    }
}
