//! vLLM as a rollout engine.
//!
//! [`Server`] runs `python -m vllm.entrypoints.openai.api_server` on a policy folder as a
//! child process (log to a file, health-checked, stopped on drop and when this process
//! dies); [`Client`] talks to it — or to a server the user runs — through the
//! OpenAI-compatible completions API with token-id prompts, `n` samples, a seed per prompt
//! and the sampled tokens' log-probs. [`generate`] sends one request per prompt from a few
//! threads and returns, per prompt, its samples as token ids, log-probs and finish reasons.
//! A server kept across iterations reloads weights in place and proves which ones it serves
//! through vLLM's development endpoints (`dev`).

mod client;
mod dev;
mod error;
mod options;
mod server;

pub use client::{generate, Client, Completion, Prompt, Sampling};
pub use error::{Error, Result};
pub use options::VllmOptions;
pub use server::{Server, ServerSettings};
