//! The process group's errors.

/// Errors of the process group.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("environment variable {name} = {value:?}: {message}")]
    Env {
        name: &'static str,
        value: String,
        message: String,
    },
    #[error("rank {rank} of {world}: {op} failed: {message}")]
    Collective {
        op: &'static str,
        rank: usize,
        world: usize,
        message: String,
    },
    #[error(
        "WORLD_SIZE = {0}, but this deltarl was built without gloo, c10d's CPU backend \
         (its headers were missing: apt-get install libgloo-dev, then rebuild)"
    )]
    NoGloo(usize),
    #[error("a device call of libtorch failed: {0}")]
    Device(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
