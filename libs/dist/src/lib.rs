//! Many processes, one iteration: the launch environment `torchrun` (or `srun` around it)
//! gives each process, and a process group on libtorch's c10d with the four collectives
//! deltarl needs (sum all-reduce and reduce, broadcast, all-gather of bytes, barrier) plus the store's
//! key/value pairs for failure reports.
//!
//! Tensors on the CPU go through gloo, CUDA tensors through NCCL (with the `nccl` feature).
//! Without `WORLD_SIZE` (or with `WORLD_SIZE=1`) there is no group and nothing changes.
//!
//! The same C++ shim also reaches two things of libtorch's that tch does not expose
//! ([`device`]): emptying the device memory cache, and dropping a tensor's gradient.

mod device;
mod ffi;
pub mod testing;

pub use device::{empty_device_cache, free_grad, CacheRelease};

use std::time::Duration;

use tch::{Kind, Tensor};

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

/// A process group of `world` ranks. Every collective must be called by every rank, in
/// the same order.
pub struct Group {
    raw: ffi::Raw,
    rank: usize,
    world: usize,
    timeout: Duration,
    /// Where the timeout came from, named in every collective's error.
    timeout_origin: String,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Group(rank {} of {})", self.rank, self.world)
    }
}

/// Whether this build can make a group on the CPU (gloo) and on CUDA (NCCL).
pub fn backends() -> (bool, bool) {
    (ffi::has_gloo(), ffi::has_nccl())
}

impl Group {
    /// Rendezvous through the launcher's TCPStore and builds the gloo group (and the NCCL
    /// one when `cuda`). `timeout` bounds every collective: a rank that died is noticed
    /// (its sockets close at once; a hung one after `timeout`).
    pub fn connect(l: &Launch, timeout: Duration, cuda: bool) -> Result<Group> {
        if !ffi::has_gloo() {
            return Err(Error::NoGloo(l.world));
        }
        // torchrun's own rendezvous prefix, so a restarted attempt never reads stale keys.
        let prefix = format!("/deltarl/attempt_{}", l.attempt);
        let raw = ffi::new(
            &l.master_addr,
            l.master_port,
            l.rank == 0 && !l.agent_store,
            &prefix,
            l.rank,
            l.world,
            i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX),
            cuda,
        )
        .map_err(|message| Error::Collective {
            op: "rendezvous",
            rank: l.rank,
            world: l.world,
            message: format!("{message} (store at {}:{})", l.master_addr, l.master_port),
        })?;
        Ok(Group {
            raw,
            rank: l.rank,
            world: l.world,
            timeout,
            timeout_origin: String::new(),
        })
    }

    /// Says where the collective timeout came from (a configuration's bound, an override),
    /// so that a collective that fails names the timeout in force and how to change it.
    pub fn with_timeout_origin(mut self, origin: impl Into<String>) -> Group {
        self.timeout_origin = origin.into();
        self
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// The bound on every collective, given to [`Group::connect`].
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// This process's share of work cut into units (every `world`-th, from its rank).
    pub fn shard(&self) -> deltarl_schemas::Shard {
        deltarl_schemas::Shard {
            rank: self.rank,
            world: self.world,
        }
    }

    fn err(&self, op: &'static str) -> impl Fn(String) -> Error + '_ {
        move |message| {
            // A collective fails when a peer is gone: name it if it said why.
            let peers = self.failures();
            let mut message = if peers.is_empty() {
                message
            } else {
                let said: Vec<String> = peers
                    .iter()
                    .map(|(r, m)| format!("rank {r} failed: {m}"))
                    .collect();
                format!("{message}; {}", said.join("; "))
            };
            // Every collective is bounded by the timeout: say which was in force, so a
            // rank that was only slower than it is told apart from a hung one.
            message.push_str(&format!(
                " (collective timeout {} s{}{})",
                self.timeout.as_secs(),
                if self.timeout_origin.is_empty() {
                    ""
                } else {
                    ": "
                },
                self.timeout_origin
            ));
            Error::Collective {
                op,
                rank: self.rank,
                world: self.world,
                message,
            }
        }
    }

    /// Sums `t` over the ranks in place (every rank gets the same bits: gloo's ring
    /// reduces each chunk once and passes the result on).
    pub fn all_reduce_sum(&self, t: &mut Tensor) -> Result<()> {
        ffi::all_reduce_sum(&self.raw, t).map_err(self.err("all-reduce"))
    }

    /// Sums `t` over the ranks into rank `dst`'s copy; the others' copies are left with
    /// partial sums, to be discarded. Half an all-reduce's traffic: what ZeRO-2 uses to
    /// hand each gradient to the one rank that keeps it.
    pub fn reduce_sum(&self, t: &mut Tensor, dst: usize) -> Result<()> {
        ffi::reduce_sum(&self.raw, t, dst).map_err(self.err("reduce"))
    }

    /// Overwrites `t` with rank `root`'s.
    pub fn broadcast(&self, t: &mut Tensor, root: usize) -> Result<()> {
        ffi::broadcast(&self.raw, t, root).map_err(self.err("broadcast"))
    }

    pub fn barrier(&self) -> Result<()> {
        ffi::barrier(&self.raw).map_err(self.err("barrier"))
    }

    /// Sends `bytes` to rank `dst` alone, which takes them with [`Group::recv_bytes`]: the
    /// length, then the payload. Messages between two ranks arrive in the order sent.
    pub fn send_bytes(&self, bytes: &[u8], dst: usize) -> Result<()> {
        let mut len = Tensor::from_slice(&[bytes.len() as i64]);
        ffi::send(&self.raw, &mut len, dst).map_err(self.err("send"))?;
        if !bytes.is_empty() {
            let mut payload = Tensor::from_slice(bytes);
            ffi::send(&self.raw, &mut payload, dst).map_err(self.err("send"))?;
        }
        Ok(())
    }

    /// The bytes rank `src` sends with [`Group::send_bytes`].
    pub fn recv_bytes(&self, src: usize) -> Result<Vec<u8>> {
        let mut len = Tensor::zeros([1], (Kind::Int64, tch::Device::Cpu));
        ffi::recv(&self.raw, &mut len, src).map_err(self.err("receive"))?;
        let n = len.int64_value(&[0]).max(0) as usize;
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut payload = Tensor::zeros([n as i64], (Kind::Uint8, tch::Device::Cpu));
        ffi::recv(&self.raw, &mut payload, src).map_err(self.err("receive"))?;
        let mut v = vec![0u8; n];
        payload.copy_data_u8(&mut v, n);
        Ok(v)
    }

    /// Every rank's bytes, in rank order.
    pub fn all_gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        // Lengths first, then payloads padded to the longest (all-gather moves equal shapes).
        let mut len = Tensor::from_slice(&[bytes.len() as i64]);
        let mut lens: Vec<Tensor> = (0..self.world)
            .map(|_| Tensor::zeros([1], (Kind::Int64, tch::Device::Cpu)))
            .collect();
        ffi::all_gather(&self.raw, &mut len, &mut lens).map_err(self.err("all-gather"))?;
        let lens: Vec<usize> = lens
            .iter()
            .map(|t| t.int64_value(&[0]).max(0) as usize)
            .collect();
        let longest = lens.iter().copied().max().unwrap_or(0).max(1);
        let mut padded = bytes.to_vec();
        padded.resize(longest, 0);
        let mut input = Tensor::from_slice(&padded);
        let mut outs: Vec<Tensor> = (0..self.world)
            .map(|_| Tensor::zeros([longest as i64], (Kind::Uint8, tch::Device::Cpu)))
            .collect();
        ffi::all_gather(&self.raw, &mut input, &mut outs).map_err(self.err("all-gather"))?;
        Ok(outs
            .iter()
            .zip(lens)
            .map(|(t, n)| {
                let mut v = vec![0u8; longest];
                t.copy_data_u8(&mut v, longest);
                v.truncate(n);
                v
            })
            .collect())
    }

    /// Tells the other ranks, through the store, why this one is failing, then closes its
    /// collective connections: a peer blocked in a collective with this rank fails at once
    /// (not after the timeout), and its error names this report, which is in the store
    /// before the connections close. The group takes no collective after this.
    pub fn report_failure(&self, message: &str) {
        let _ = ffi::store_set(
            &self.raw,
            &format!("failed/{}", self.rank),
            message.as_bytes(),
        );
        let _ = ffi::abort(&self.raw);
    }

    /// Waits, at most `grace`, until every other rank has reported a failure too; returns
    /// the ranks that had not when it ran out.
    ///
    /// A failing rank calls this after [`Group::report_failure`] and before it exits. The
    /// launcher (torchrun) stops every rank as soon as one exits, while a peer learns of the
    /// failure only when its own collective (or wait) fails: a failing rank that exited at
    /// once could cut a peer short before the peer had said why it stopped. Each rank
    /// prints its error before it reports, so when this returns every rank has spoken.
    pub fn await_reports(&self, grace: Duration) -> Vec<usize> {
        let start = std::time::Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            let reported: Vec<usize> = self.failures().into_iter().map(|(r, _)| r).collect();
            let silent: Vec<usize> = (0..self.world)
                .filter(|r| *r != self.rank && !reported.contains(r))
                .collect();
            if silent.is_empty() || start.elapsed() >= grace {
                return silent;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// The ranks that reported a failure, with their messages.
    pub fn failures(&self) -> Vec<(usize, String)> {
        (0..self.world)
            .filter_map(|r| {
                ffi::store_try_get(&self.raw, &format!("failed/{r}"))
                    .ok()
                    .flatten()
                    .map(|v| (r, String::from_utf8_lossy(&v).into_owned()))
            })
            .collect()
    }

    /// Publishes `value` under `key` (for ranks that wait on rank 0 with [`Group::wait_key`]).
    pub fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        ffi::store_set(&self.raw, key, value).map_err(self.err("store set"))
    }

    /// Waits until `key` is set and returns it, polling; a failure any rank reports ends
    /// the wait with its message. No time limit: a rank that dies without reporting is
    /// noticed by the launcher (torchrun stops every rank), or by the store going away.
    pub fn wait_key(&self, key: &str) -> Result<Vec<u8>> {
        let mut pause = Duration::from_millis(5);
        loop {
            if let Some(v) = ffi::store_try_get(&self.raw, key).map_err(self.err("store get"))? {
                return Ok(v);
            }
            if let Some((r, m)) = self.failures().into_iter().next() {
                return Err(Error::Collective {
                    op: "waiting",
                    rank: self.rank,
                    world: self.world,
                    message: format!("rank {r} failed: {m}"),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
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
