//! deltarl: configuration, run directory, stage graph, resume, and the CLI's commands.
//!
//! Layers, bottom up: a module uses only modules of the layers before its own (the
//! workspace's layering test finds any cycle; this list is kept by hand).
//! 1. leaves: `chat`, `epochs` (the per-iteration draw), `progress`, `failure` (how an
//!    error is shown), `hashcache`, `pruned` (the record of pruned files), `memory`,
//!    `plan` and `host_plan` (device and host memory, disk), `paired` (statistics),
//!    `rewards` (which reward grades a prompt), `settings_diff`, `compute` (the threads
//!    and processes a stage computed with), `mechanism` (DelTA's coefficients read
//!    against a task's labels);
//! 2. `record` (a dataset record), `plan_models` (published model shapes), `metrics`
//!    (metrics.jsonl, TensorBoard), `ranks` (several processes), `rundir` (the run's
//!    files), `strata` (a paired difference over several bases, and the equivalence
//!    test);
//! 3. `data` (prompts and benchmarks from files or the built-in tasks);
//! 4. `config` (options, validated once into `Resolved`);
//! 5. `vllm` (the rollout's vLLM engine), `prune` (checkpoint pruning), `readiness`
//!    (whether the files a stage reads are there), `context` (an opened run);
//! 6. `stage` (one module per stage: its settings from the config, and its run);
//! 7. `runner` (completion, resume);
//! 8. `cli` (one module per command).

pub mod chat;
pub mod cli;
pub mod compute;
pub mod config;
pub mod context;
pub mod data;
pub mod epochs;
pub mod failure;
mod hashcache;
pub mod host_plan;
pub mod mechanism;
pub mod memory;
pub mod metrics;
pub mod paired;
pub mod plan;
pub mod plan_models;
pub mod progress;
pub mod prune;
pub mod pruned;
pub mod ranks;
pub mod readiness;
pub mod record;
pub mod rewards;
pub mod rundir;
pub mod runner;
pub mod settings_diff;
pub mod stage;
pub mod strata;
pub mod vllm;
