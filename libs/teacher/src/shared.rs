//! The shared-prompt layout ([`crate::Layout::SharedPrompt`]): consecutive rows with the
//! same prompt form a group that computes the prompt once; its responses are padded into
//! [G, R] or packed into one row, whichever takes fewer multiply-adds ([`packs`]).

use deltarl_model::{Continuations, Qwen3, Qwen3Config};
use tch::{Device, Tensor};

/// One prompt's rows of a pass.
pub(crate) struct Group {
    /// [1, P] int64.
    prompt: Tensor,
    continuations: Continuations,
}

/// The groups of `rows` (every prompt at least one token), in order. For each response
/// token, pushes its target and the index of the state predicting it in [`hidden`]'s
/// output: a group contributes its prompt's last state (which predicts every response's
/// first token) and then one state per continuation column, `[1 + B x R]` in all.
pub(crate) fn groups(
    rows: &[(&[u32], &[u32])],
    config: &Qwen3Config,
    device: Device,
    gather: &mut Vec<i64>,
    targets: &mut Vec<i64>,
) -> Vec<Group> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    let mut start = 0;
    while start < rows.len() {
        let prompt = rows[start].0;
        let end = start
            + rows[start..]
                .iter()
                .take_while(|(p, _)| *p == prompt)
                .count();
        let responses: Vec<&[u32]> = rows[start..end].iter().map(|(_, r)| *r).collect();
        let lens: Vec<usize> = responses.iter().map(|r| r.len()).collect();
        let p = prompt.len() as i64;
        let continuations = if packs(config, prompt.len(), &lens) {
            // Token j of response g: the prompt's last state for j = 0, else packed column
            // (its response's start) + j - 1.
            let mut at = 0i64;
            for r in &responses {
                for (j, &t) in r.iter().enumerate() {
                    gather.push(offset + if j == 0 { 0 } else { 1 + at + j as i64 - 1 });
                    targets.push(i64::from(t));
                }
                at += r.len() as i64;
            }
            let nonempty: Vec<&[u32]> = responses
                .iter()
                .copied()
                .filter(|r| !r.is_empty())
                .collect();
            offset += 1 + at;
            Continuations::packed(&nonempty, p, device)
        } else {
            // Response g right-padded to R columns: token j > 0 at column g * R + j - 1.
            let r_max = lens.iter().copied().max().unwrap_or(0).max(1);
            let mut ids = vec![0i64; responses.len() * r_max];
            for (g, r) in responses.iter().enumerate() {
                for (j, &t) in r.iter().enumerate() {
                    ids[g * r_max + j] = i64::from(t);
                    let col = (g * r_max + j) as i64;
                    gather.push(offset + if j == 0 { 0 } else { col });
                    targets.push(i64::from(t));
                }
            }
            offset += 1 + ids.len() as i64;
            let ids = Tensor::from_slice(&ids)
                .view([responses.len() as i64, r_max as i64])
                .to_device(device);
            Continuations::padded(ids, p)
        };
        let ids: Vec<i64> = prompt.iter().map(|&t| i64::from(t)).collect();
        out.push(Group {
            prompt: Tensor::from_slice(&ids).to_device(device).unsqueeze(0),
            continuations,
        });
        start = end;
    }
    out
}

/// The groups' states in the order [`groups`] indexes them: per group its prompt's last
/// state, then its continuation columns row by row; [1, M, H].
pub(crate) fn hidden(model: &Qwen3, groups: &[Group]) -> Tensor {
    let parts: Vec<Tensor> = groups
        .iter()
        .map(|g| {
            let (hp, hr) = model.hidden_shared(&g.prompt, &g.continuations);
            let h = hr.size()[2];
            let p = hp.size()[1];
            Tensor::cat(
                &[hp.narrow(1, p - 1, 1).reshape([1, h]), hr.reshape([-1, h])],
                0,
            )
        })
        .collect();
    Tensor::cat(&parts, 0).unsqueeze(0)
}

/// Whether G responses of lengths `lens` after a P-token prompt take fewer multiply-adds
/// packed into one row (no padding; each token's attention runs over the prompt and all
/// G responses' columns, masked) than padded to the longest (attention over the prompt
/// and the row's R columns). Per token and layer the projections and MLP cost
/// `dense` = hidden x (2 x heads + 2 x kv_heads) x head_dim + 3 x hidden x intermediate,
/// and each key 2 x heads x head_dim (scores and values). Ties pad.
pub fn packs(config: &Qwen3Config, prompt: usize, lens: &[usize]) -> bool {
    let (h, d) = (config.hidden_size as u128, config.head_dim() as u128);
    let (heads, kv) = (
        config.num_attention_heads as u128,
        config.num_key_value_heads as u128,
    );
    let dense = h * (2 * heads + 2 * kv) * d + 3 * h * config.intermediate_size as u128;
    let per_key = 2 * heads * d;
    let cost = |tokens: u128, keys: u128| tokens * (dense + per_key * keys);
    let (p, g) = (prompt as u128, lens.len() as u128);
    let longest = lens.iter().copied().max().unwrap_or(0) as u128;
    let total: u128 = lens.iter().map(|&n| n as u128).sum();
    cost(total, p + total) < cost(g * longest, p + longest)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config() -> Qwen3Config {
        // SmolLM2-135M's shape.
        serde_json::from_value(serde_json::json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
            "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
            "max_position_embeddings": 8192, "tie_word_embeddings": true,
        }))
        .unwrap()
    }

    #[test]
    fn responses_pack_when_padding_costs_more_than_the_longer_attention() {
        let c = config();
        // Short answers of uneven lengths: padding wastes more than half the columns.
        assert!(packs(&c, 64, &[6, 14, 21, 96, 12, 37, 30, 16]));
        // Equal lengths: nothing to save, and packed attention is longer.
        assert!(!packs(&c, 64, &[40; 8]));
        // One row: the same work either way, so padded.
        assert!(!packs(&c, 64, &[50]));
        // Long uneven answers: attention over 8 x ~2,000 packed columns costs more than
        // the padding it saves.
        assert!(!packs(
            &c,
            64,
            &[2048, 1500, 1800, 2000, 1900, 1700, 2048, 1600]
        ));
    }
}
