//! The log-probs a model gives a sequence's own tokens (teacher forcing), for checks that
//! compare another engine's numbers with ours on a short sequence.

use tch::{Device, Kind, Tensor};

use crate::{Error, Qwen3, Result};

impl Qwen3 {
    /// log p(ids[t] | ids[..t]) for t = 1..len, in f32: one value per token after the
    /// first. The sequence must fit the model's context.
    pub fn sequence_logprobs(&self, ids: &[u32], device: Device) -> Result<Vec<f32>> {
        let n = ids.len() as i64;
        if n < 2 || n > self.max_positions() {
            return Err(Error::Generate(format!(
                "a sequence of {n} tokens: teacher-forced log-probs need 2 to {} tokens",
                self.max_positions()
            )));
        }
        let ids: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        tch::no_grad(|| {
            // 1. Logits of every position: [1, n, vocab], as f32.
            let t = Tensor::from_slice(&ids).to_device(device).unsqueeze(0);
            let logits = self.forward(&t).to_kind(Kind::Float);
            // 2. Position t - 1 predicts token t: [n - 1, vocab] against [n - 1].
            let lp = logits
                .narrow(1, 0, n - 1)
                .squeeze_dim(0)
                .log_softmax(-1, Kind::Float);
            let next = t.narrow(1, 1, n - 1).squeeze_dim(0).unsqueeze(1);
            let picked = lp
                .gather(1, &next, false)
                .squeeze_dim(1)
                .to_device(Device::Cpu);
            Ok(Vec::<f32>::try_from(&picked)?)
        })
    }
}
