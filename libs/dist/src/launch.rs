//! What the launcher (`torchrun`, or `srun` around it) tells each process.

use crate::error::{Error, Result};

/// What the launcher told this process (`torchrun` sets all of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub rank: usize,
    pub world: usize,
    pub local_rank: usize,
    /// Processes on this machine (`LOCAL_WORLD_SIZE`; 1 when not set).
    pub local_world: usize,
    pub master_addr: String,
    pub master_port: u16,
    /// torchrun's agent serves the store (`TORCHELASTIC_USE_AGENT_STORE=True`): every rank
    /// connects as a client. Otherwise rank 0 serves it.
    pub agent_store: bool,
    /// torchrun's restart count: keys of an earlier attempt are not seen by this one.
    pub attempt: u32,
}

fn var(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn parse<T: std::str::FromStr>(name: &'static str, value: &str) -> Result<T> {
    value.trim().parse().map_err(|_| Error::Env {
        name,
        value: value.to_string(),
        message: "not a non-negative integer".into(),
    })
}

impl Launch {
    /// Reads `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`. `None` when
    /// `WORLD_SIZE` is unset or 1: one process, as without a launcher.
    pub fn from_env() -> Result<Option<Launch>> {
        Self::from_vars(&|n| var(n))
    }

    /// [`Launch::from_env`] over any variable source (tests).
    pub fn from_vars(get: &dyn Fn(&'static str) -> Option<String>) -> Result<Option<Launch>> {
        let Some(world) = get("WORLD_SIZE") else {
            return Ok(None);
        };
        let world: usize = parse("WORLD_SIZE", &world)?;
        if world <= 1 {
            return Ok(None);
        }
        let need = |name: &'static str| {
            get(name).ok_or(Error::Env {
                name,
                value: String::new(),
                message: format!("must be set when WORLD_SIZE = {world} (torchrun sets it)"),
            })
        };
        let rank: usize = parse("RANK", &need("RANK")?)?;
        if rank >= world {
            return Err(Error::Env {
                name: "RANK",
                value: rank.to_string(),
                message: format!("must be below WORLD_SIZE = {world}"),
            });
        }
        let local_rank = match get("LOCAL_RANK") {
            Some(v) => parse("LOCAL_RANK", &v)?,
            None => rank,
        };
        let local_world = match get("LOCAL_WORLD_SIZE") {
            Some(v) => parse::<usize>("LOCAL_WORLD_SIZE", &v)?.max(1),
            None => 1,
        };
        Ok(Some(Launch {
            rank,
            world,
            local_rank,
            local_world,
            master_addr: need("MASTER_ADDR")?,
            master_port: parse("MASTER_PORT", &need("MASTER_PORT")?)?,
            agent_store: get("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v == "True"),
            attempt: match get("TORCHELASTIC_RESTART_COUNT") {
                Some(v) => parse("TORCHELASTIC_RESTART_COUNT", &v)?,
                None => 0,
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(
        pairs: &'a [(&'static str, &'a str)],
    ) -> impl Fn(&'static str) -> Option<String> + 'a {
        move |n| pairs.iter().find(|p| p.0 == n).map(|p| p.1.to_string())
    }

    #[test]
    fn no_world_size_means_one_process() {
        assert_eq!(Launch::from_vars(&vars(&[])).unwrap(), None);
        assert_eq!(
            Launch::from_vars(&vars(&[("WORLD_SIZE", "1")])).unwrap(),
            None
        );
    }

    #[test]
    fn torchrun_variables_are_read() {
        let l = Launch::from_vars(&vars(&[
            ("WORLD_SIZE", "2"),
            ("RANK", "1"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (l.rank, l.world, l.local_rank, l.master_port),
            (1, 2, 1, 29500)
        );
        assert!(l.agent_store);
        assert_eq!((l.attempt, l.local_world), (2, 2));
    }

    #[test]
    fn bad_variables_are_named() {
        let e = Launch::from_vars(&vars(&[("WORLD_SIZE", "2"), ("RANK", "2")])).unwrap_err();
        assert!(e.to_string().contains("RANK = \"2\""), "{e}");
        let e = Launch::from_vars(&vars(&[("WORLD_SIZE", "two")])).unwrap_err();
        assert!(e.to_string().contains("WORLD_SIZE = \"two\""), "{e}");
        let e = Launch::from_vars(&vars(&[("WORLD_SIZE", "2"), ("RANK", "0")])).unwrap_err();
        assert!(e.to_string().contains("MASTER_ADDR"), "{e}");
    }
}
