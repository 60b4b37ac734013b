//! The process group on c10d: the collectives, the byte messages and the store.

use std::time::Duration;

use tch::{Kind, Tensor};

use crate::error::{Error, Result};
use crate::ffi;
use crate::launch::Launch;

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
