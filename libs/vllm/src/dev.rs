//! The endpoints a server kept across RL iterations needs, which vLLM exposes only with
//! `VLLM_SERVER_DEV_MODE=1` ([`crate::ServerSettings::dev_mode`]): an in-place weight
//! reload through `/collective_rpc` (each worker's `reload_weights(weights_path=...)`), a
//! prefix-cache reset (cached KV blocks were computed by the old weights), sleep and wake
//! (CUDA only: the server frees its device memory while the trainer runs), and the
//! log-probs the server assigns to a prompt's own tokens (to check which weights it serves).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{Client, Error, Result};

/// How long a cache reset may take.
const QUICK: Duration = Duration::from_secs(30);
/// How long sleeping, waking or one short prompt may take (moving a large model's memory).
const SLOW: Duration = Duration::from_secs(300);

impl Client {
    /// POSTs `body` to `path` and waits at most `within` for the answer: its JSON (null
    /// when empty) or an error naming the endpoint and what the server said (a server that
    /// does not answer in time is wedged). A 404 means the server lacks the dev endpoints.
    fn post_dev(&self, path: &str, body: &Value, within: Duration) -> Result<Value> {
        let err = |message: String| Error::Server {
            url: self.url().to_string(),
            message,
        };
        let mut resp = self
            .agent()
            .post(format!("{}{path}", self.url()))
            .config()
            .timeout_global(Some(within))
            .build()
            .send_json(body)
            .map_err(|e| {
                err(format!(
                    "POST {path} (waiting at most {} s): {e}",
                    within.as_secs()
                ))
            })?;
        let status = resp.status();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| err(format!("POST {path}: reading the answer: {e}")))?;
        if status == 404 {
            return Err(err(format!(
                "POST {path}: HTTP 404: the server has no development endpoints (start it \
                 with VLLM_SERVER_DEV_MODE=1)"
            )));
        }
        if status != 200 {
            return Err(err(format!("POST {path}: HTTP {status}: {text}")));
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| err(format!("POST {path}: not JSON ({e}): {text}")))
    }

    /// Loads the weights of the Hugging Face folder `folder` into the served model in
    /// place (every worker reads them from disk), without a restart, within `within`.
    pub fn reload_weights(&self, folder: &Path, within: Duration) -> Result<()> {
        self.post_dev(
            "/collective_rpc",
            &json!({
                "method": "reload_weights",
                "kwargs": { "weights_path": folder.display().to_string() },
            }),
            within,
        )?;
        Ok(())
    }

    /// Drops every cached KV block. vLLM refuses while blocks are held by running
    /// requests; between rollouts none run, so a refusal is retried for a few seconds and
    /// then reported.
    pub fn reset_prefix_cache(&self) -> Result<()> {
        let start = Instant::now();
        loop {
            let v = self.post_dev("/reset_prefix_cache", &json!({}), QUICK)?;
            if v["success"].as_bool() == Some(true) {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err(Error::Server {
                    url: self.url().to_string(),
                    message: format!("POST /reset_prefix_cache did not succeed: {v}"),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Frees the server's device memory (CUDA; the server must run with
    /// `--enable-sleep-mode`). Level 2 discards the weights too: the next rollout reloads
    /// them from the new policy anyway.
    pub fn sleep(&self, level: u8) -> Result<()> {
        self.post_dev(&format!("/sleep?level={level}"), &json!({}), SLOW)?;
        Ok(())
    }

    /// Takes the memory [`Client::sleep`] freed back.
    pub fn wake_up(&self) -> Result<()> {
        self.post_dev("/wake_up", &json!({}), SLOW)?;
        Ok(())
    }

    /// log p(ids[t] | ids[..t]) for t = 1.. as the server computes it (`prompt_logprobs`:
    /// the model's own log-softmax, no sampling transform), one value per token after the
    /// first.
    pub fn prompt_logprobs(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let v = self.post_dev(
            "/v1/completions",
            &json!({
                "model": self.served().0,
                "prompt": ids,
                "max_tokens": 1,
                "temperature": 1.0,
                "prompt_logprobs": 0,
            }),
            SLOW,
        )?;
        parse_prompt_logprobs(&v, ids).map_err(|message| Error::Server {
            url: self.url().to_string(),
            message: format!("prompt log-probs: {message}"),
        })
    }
}

/// The prompt tokens' log-probs of a completions answer: entry t (t ≥ 1) maps the token
/// id `ids[t]` (as a string key) to its log-prob; entry 0 is null.
fn parse_prompt_logprobs(v: &Value, ids: &[u32]) -> Result<Vec<f32>, String> {
    let entries = v["choices"][0]["prompt_logprobs"]
        .as_array()
        .ok_or_else(|| format!("no choices[0].prompt_logprobs in {v}"))?;
    if entries.len() != ids.len() {
        return Err(format!(
            "{} entries for a prompt of {} tokens",
            entries.len(),
            ids.len()
        ));
    }
    entries
        .iter()
        .zip(ids)
        .skip(1)
        .enumerate()
        .map(|(t, (e, id))| {
            e[id.to_string()]["logprob"]
                .as_f64()
                .map(|x| x as f32)
                .ok_or_else(|| format!("entry {} has no log-prob of token {id}: {e}", t + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn prompt_logprobs_are_read_per_token_after_the_first() {
        let v = json!({"choices": [{"prompt_logprobs": [
            null,
            {"6": {"logprob": -6.5, "rank": 4}},
            {"9": {"logprob": -0.25, "rank": 1}, "2": {"logprob": -1.0}},
        ]}]});
        assert_eq!(
            parse_prompt_logprobs(&v, &[5, 6, 9]).unwrap(),
            vec![-6.5, -0.25]
        );
        // Another token's entry, or a length that does not match, is named.
        let e = parse_prompt_logprobs(&v, &[5, 7, 9]).unwrap_err();
        assert!(e.contains("entry 1") && e.contains("token 7"), "{e}");
        let e = parse_prompt_logprobs(&v, &[5, 6]).unwrap_err();
        assert!(e.contains("3 entries for a prompt of 2 tokens"), "{e}");
    }
}
