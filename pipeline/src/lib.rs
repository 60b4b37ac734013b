//! deltarl: configuration, run directory, stage graph, resume, and the CLI's commands.
//!
//! Layers, bottom up (a module only uses the ones above it in this list):
//! `config` (options and their validation), `failure` (how an error is shown), `progress`, `data` and `chat` (prompts),
//! `rundir` and `hashcache` (the run's files), `metrics` (metrics.jsonl, TensorBoard), `eval` (sampling and grading of benchmarks),
//! `stage` (one module per stage), `context` (an opened run), `runner` (completion, resume),
//! `cli` (one module per command).

pub mod chat;
pub mod cli;
pub mod config;
pub mod context;
pub mod data;
pub mod eval;
pub mod failure;
mod hashcache;
pub mod memory;
pub mod metrics;
pub mod paired;
pub mod plan;
pub mod progress;
pub mod prune;
pub mod pruned;
pub mod ranks;
pub mod rundir;
pub mod runner;
pub mod stage;
pub mod vllm;
