//! End-to-end tests of the `deltarl` binary on a micro configuration: iterations, polars
//! readability and joins, byte-identical reruns, crash safety, bad input, and one run at a
//! real vocabulary size; and the workspace's layering, read from its sources. They belong
//! to the `deltarl` package (see its Cargo.toml), so cargo builds the binary they run
//! first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod code;
mod common;
mod compact;
mod compare;
mod config;
mod data_prepare;
mod disks;
mod layers;
mod persist;
mod plan;
mod preflight;
mod ranks;
mod readme;
mod readme_commands;
mod real_model;
mod refusals;
mod resume;
mod runs;
mod scale;
mod tasks;
mod vllm;
mod vllm_eval;
mod vllm_kept;
mod wheel;
