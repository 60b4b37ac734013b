//! deltarl: configuration, run directory, stage graph, resume, and the CLI's commands.

pub mod chat;
pub mod cli;
pub mod config;
pub mod data;
pub mod eval;
pub mod run;
pub mod rundir;
pub mod warmstart;
