//! Token-id completions through vLLM's OpenAI-compatible API.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use deltarl_schemas::FinishReason;
use serde_json::{json, Value};

use crate::{Error, Result};

/// A connection to one server and the model it serves.
#[derive(Clone, Debug)]
pub struct Client {
    url: String,
    agent: ureq::Agent,
    /// The served model's name (what requests must say).
    model: String,
    /// Where the server loaded it from (`root` in /v1/models), when it says.
    root: Option<String>,
}

/// One prompt: its token ids and the seed of its samples.
#[derive(Clone, Debug)]
pub struct Prompt {
    pub ids: Vec<u32>,
    pub seed: u64,
}

/// Sampling parameters of every request.
#[derive(Clone, Debug)]
pub struct Sampling {
    /// 0 = greedy.
    pub temperature: f64,
    pub top_p: f64,
    /// 0 = off.
    pub top_k: usize,
    pub max_tokens: usize,
    /// Tokens that end a response (kept as its last token).
    pub stop_token_ids: Vec<u32>,
    /// Strings that end a response (kept in it).
    pub stop: Vec<String>,
    /// Generate exactly `max_tokens` whatever is sampled (benchmarks).
    pub ignore_eos: bool,
}

/// One sample as the server generated it.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    pub tokens: Vec<u32>,
    /// The sampled tokens' log-probabilities (at the sampling temperature).
    pub logprobs: Vec<f32>,
    pub finish: FinishReason,
}

impl Client {
    /// Connects to the server at `url` and asks what it serves.
    pub fn connect(url: &str) -> Result<Client> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            // Long responses take long; a dead server closes the connection.
            .timeout_global(Some(Duration::from_secs(24 * 3600)))
            .http_status_as_error(false)
            .build()
            .into();
        let url = url.trim_end_matches('/').to_string();
        let err = |message: String| Error::Server {
            url: url.clone(),
            message,
        };
        let mut resp = agent
            .get(format!("{url}/v1/models"))
            .call()
            .map_err(|e| err(format!("GET /v1/models: {e}")))?;
        let body: Value = resp
            .body_mut()
            .read_json()
            .map_err(|e| err(format!("GET /v1/models: {e}")))?;
        let first = &body["data"][0];
        let model = first["id"]
            .as_str()
            .ok_or_else(|| err(format!("GET /v1/models names no model: {body}")))?
            .to_string();
        Ok(Client {
            root: first["root"].as_str().map(str::to_string),
            url,
            agent,
            model,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn agent(&self) -> &ureq::Agent {
        &self.agent
    }

    /// The served model: its name and, when the server says, the folder it came from.
    pub fn served(&self) -> (&str, Option<&str>) {
        (&self.model, self.root.as_deref())
    }

    /// `n` samples of one prompt. Greedy samples are all the same one, and vLLM takes
    /// `n = 1` only for them: one is asked for and repeated.
    pub fn complete(
        &self,
        prompt: &Prompt,
        n: u32,
        s: &Sampling,
    ) -> Result<Vec<Completion>, String> {
        let greedy = s.temperature == 0.0;
        let asked = if greedy { 1 } else { n };
        let body = json!({
            "model": self.model,
            "prompt": prompt.ids,
            "n": asked,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": if s.top_k == 0 { -1 } else { s.top_k as i64 },
            "max_tokens": s.max_tokens,
            // vLLM takes a signed 64-bit seed.
            "seed": prompt.seed >> 1,
            "logprobs": 0,
            "return_tokens_as_token_ids": true,
            "stop_token_ids": s.stop_token_ids,
            "stop": s.stop,
            "include_stop_str_in_output": true,
            "skip_special_tokens": false,
            "ignore_eos": s.ignore_eos,
        });
        let mut resp = self
            .agent
            .post(format!("{}/v1/completions", self.url))
            .send_json(&body)
            .map_err(|e| format!("POST /v1/completions: {e}"))?;
        let status = resp.status();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| format!("POST /v1/completions: reading the answer: {e}"))?;
        if status != 200 {
            return Err(format!("POST /v1/completions: HTTP {status}: {text}"));
        }
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| format!("POST /v1/completions: not JSON ({e}): {text}"))?;
        let mut out = parse_choices(&v, asked as usize)?;
        if greedy {
            let one = out.pop().ok_or("no choice")?;
            out = vec![one; n as usize];
        }
        Ok(out)
    }
}

/// The `n` choices of a completions answer, in index order.
fn parse_choices(v: &Value, n: usize) -> Result<Vec<Completion>, String> {
    let choices = v["choices"]
        .as_array()
        .ok_or_else(|| format!("no choices in {v}"))?;
    let mut out: Vec<Option<Completion>> = vec![None; n];
    for c in choices {
        let index = c["index"].as_u64().unwrap_or(0) as usize;
        let finish = match c["finish_reason"].as_str() {
            Some("stop") => FinishReason::Stop,
            Some("length") => FinishReason::Length,
            other => return Err(format!("choice {index}: finish reason {other:?}")),
        };
        let lp = &c["logprobs"];
        let tokens = lp["tokens"]
            .as_array()
            .ok_or_else(|| format!("choice {index}: no logprobs.tokens"))?
            .iter()
            .map(|t| {
                t.as_str()
                    .and_then(|s| s.strip_prefix("token_id:"))
                    .and_then(|s| s.parse::<u32>().ok())
                    .ok_or_else(|| format!("choice {index}: token {t} is not `token_id:N`"))
            })
            .collect::<Result<Vec<u32>, String>>()?;
        let logprobs = lp["token_logprobs"]
            .as_array()
            .ok_or_else(|| format!("choice {index}: no logprobs.token_logprobs"))?
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32).unwrap_or(f32::NEG_INFINITY))
            .collect::<Vec<f32>>();
        if logprobs.len() != tokens.len() {
            return Err(format!(
                "choice {index}: {} tokens but {} log-probs",
                tokens.len(),
                logprobs.len()
            ));
        }
        let slot = out
            .get_mut(index)
            .ok_or_else(|| format!("choice index {index} of n = {n}"))?;
        *slot = Some(Completion {
            tokens,
            logprobs,
            finish,
        });
    }
    out.into_iter()
        .enumerate()
        .map(|(i, c)| c.ok_or_else(|| format!("choice {i} missing")))
        .collect()
}

/// Samples `n` completions of every prompt, `concurrency` requests at a time; results in
/// prompt order. `progress(k)` is told each finished prompt's sample count.
pub fn generate(
    client: &Client,
    prompts: &[Prompt],
    n: u32,
    s: &Sampling,
    concurrency: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Vec<Completion>>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Vec<Completion>>>> = Mutex::new(vec![None; prompts.len()]);
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..concurrency.max(1).min(prompts.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= prompts.len() || failure.lock().map_or(true, |f| f.is_some()) {
                    return;
                }
                match client.complete(&prompts[i], n, s) {
                    Ok(c) => {
                        progress(c.len());
                        if let Ok(mut r) = results.lock() {
                            r[i] = Some(c);
                        }
                    }
                    Err(message) => {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(Error::Request { prompt: i, message });
                        }
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    let results = results
        .into_inner()
        .map_err(|_| Error::Setup("a request thread panicked".into()))?;
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.ok_or(Error::Request {
                prompt: i,
                message: "no answer".into(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn choices_come_back_in_index_order_with_token_ids() {
        let v = json!({"choices": [
            {"index": 1, "finish_reason": "length", "logprobs": {
                "tokens": ["token_id:7", "token_id:8"], "token_logprobs": [-0.5, -1.0]}},
            {"index": 0, "finish_reason": "stop", "logprobs": {
                "tokens": ["token_id:3"], "token_logprobs": [-0.25]}},
        ]});
        let c = parse_choices(&v, 2).unwrap();
        assert_eq!(c[0].tokens, vec![3]);
        assert_eq!(c[0].finish, FinishReason::Stop);
        assert_eq!(c[1].tokens, vec![7, 8]);
        assert_eq!(c[1].logprobs, vec![-0.5, -1.0]);
        assert_eq!(c[1].finish, FinishReason::Length);
    }

    #[test]
    fn malformed_answers_are_named() {
        let v = json!({"choices": [{"index": 0, "finish_reason": "abort", "logprobs": {}}]});
        assert!(parse_choices(&v, 1).unwrap_err().contains("abort"));
        let v = json!({"choices": [{"index": 0, "finish_reason": "stop",
            "logprobs": {"tokens": ["hello"], "token_logprobs": [-1.0]}}]});
        assert!(parse_choices(&v, 1).unwrap_err().contains("token_id"));
        let v = json!({"choices": []});
        assert!(parse_choices(&v, 1)
            .unwrap_err()
            .contains("choice 0 missing"));
    }
}
