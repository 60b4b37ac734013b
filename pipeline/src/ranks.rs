//! Several processes under `torchrun`: joining the process group, the leader/follower
//! protocol of the runner, and merging the parts of a stage's rows.
//!
//! Rank 0 leads: it alone takes the run lock, checks what is done, runs the stages that
//! need no parallelism (score, coeffs, eval, the warm start) and writes every file and
//! manifest. For a stage the ranks share (rollout with our engine, features, update) it
//! first publishes a command in the launcher's store (`cmd/N = "run ITER STAGE"`); the
//! followers wait for commands, run their share and give their rows (or gradients) to the
//! collectives, and stop at `end`. Any rank that fails prints its error, writes
//! `failed/RANK` with it and closes its connections, so the others' errors name it, and
//! exits only once every rank has reported (see [`Ranks::fail`]).

use std::cell::Cell;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use deltarl_dist::{Group, Launch};
use deltarl_schemas::{read_table, write_table, FileMeta, Shard, Stage, Table};
use tch::Device;

/// How long a collective may wait for the other ranks (a rank that died is noticed at once
/// when its sockets close; this bounds a hung one). `DELTARL_DIST_TIMEOUT_S` overrides it.
const DEFAULT_TIMEOUT_S: u64 = 1800;

/// This process's place among the ranks, when launched as one of several.
pub struct Ranks {
    pub group: Group,
    pub launch: Launch,
    /// The next command number (leader: to publish; follower: to wait for).
    next: Cell<u64>,
}

/// What the leader tells the followers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Run { iter: u32, stage: Stage },
    End,
}

impl Command {
    fn encode(self) -> String {
        match self {
            Command::Run { iter, stage } => format!("run {iter} {}", stage.name()),
            Command::End => "end".into(),
        }
    }

    fn decode(s: &str) -> Result<Command> {
        let parts: Vec<&str> = s.split(' ').collect();
        match parts.as_slice() {
            ["end"] => Ok(Command::End),
            ["run", iter, stage] => Ok(Command::Run {
                iter: iter.parse().with_context(|| format!("command {s:?}"))?,
                stage: Stage::ALL
                    .into_iter()
                    .find(|x| x.name() == *stage)
                    .with_context(|| format!("command {s:?}: no such stage"))?,
            }),
            _ => bail!("unknown command {s:?} from rank 0"),
        }
    }
}

impl Ranks {
    /// Joins the group when the launcher asked for several processes (`WORLD_SIZE > 1`).
    /// `cuda`: the run's tensors live on `cuda:LOCAL_RANK` (NCCL); otherwise on the CPU
    /// (gloo).
    pub fn join(cuda: bool) -> Result<Option<Ranks>> {
        let Some(launch) = Launch::from_env()? else {
            return Ok(None);
        };
        let timeout = match std::env::var("DELTARL_DIST_TIMEOUT_S") {
            Ok(v) => v.trim().parse().with_context(|| {
                format!(
                    "environment variable DELTARL_DIST_TIMEOUT_S = {v:?}: not a number of seconds"
                )
            })?,
            Err(_) => DEFAULT_TIMEOUT_S,
        };
        let group = Group::connect(&launch, Duration::from_secs(timeout), cuda)?;
        Ok(Some(Ranks {
            group,
            launch,
            next: Cell::new(0),
        }))
    }

    pub fn is_leader(&self) -> bool {
        self.group.rank() == 0
    }

    /// The device of this rank when the configuration asks for CUDA.
    pub fn cuda_device(&self) -> Device {
        Device::Cuda(self.launch.local_rank)
    }

    /// Leader: tells the followers what to do next.
    pub fn announce(&self, c: Command) -> Result<()> {
        let n = self.next.get();
        self.next.set(n + 1);
        self.group.set(&format!("cmd/{n}"), c.encode().as_bytes())?;
        Ok(())
    }

    /// Follower: waits for the leader's next command (a failure any rank reports ends the
    /// wait with its message).
    pub fn receive(&self) -> Result<Command> {
        let n = self.next.get();
        self.next.set(n + 1);
        let v = self.group.wait_key(&format!("cmd/{n}"))?;
        Command::decode(&String::from_utf8_lossy(&v))
    }

    /// A failing rank's last words: shows `e`, tells the others (which also ends any
    /// collective they wait in with this rank), then waits until they have reported too, at
    /// most the collective timeout, the bound the ranks already give a hung peer. Returns
    /// `e` marked as shown.
    pub fn fail(&self, e: anyhow::Error) -> anyhow::Error {
        crate::failure::show(&e);
        self.group.report_failure(&format!("{e:#}"));
        let silent = self.group.await_reports(self.group.timeout());
        if !silent.is_empty() {
            eprintln!("ranks {silent:?} did not report within the collective timeout");
        }
        e.context(crate::failure::Shown)
    }
}

/// The share of a group's process (the whole work without one).
pub fn shard(group: Option<&Group>) -> Shard {
    group.map_or(Shard::WHOLE, Group::shard)
}

/// Every rank's rows, merged in `key` order on rank 0, which writes them; the other ranks
/// get no rows back. The parts go to rank 0 one rank at a time ([`stream_to_rank0`] with
/// piece `r` = rank `r`'s rows), never to every rank at once: a rank other than 0 holds its
/// own rows and, while it passes, one other rank's part.
pub fn gather_rows<T: Table, K: Ord>(
    g: &Group,
    rows: Vec<T>,
    key: impl Fn(&T) -> K,
) -> Result<Vec<T>> {
    let mut all = Vec::new();
    stream_to_rank0(g, g.shard().world.max(1), vec![rows], &mut |part| {
        all.extend(part);
        Ok(())
    })?;
    all.sort_by_key(|r| key(r));
    Ok(all)
}

/// The rows of `chunks` pieces of work dealt out as [`Shard::owns`] deals them (piece `c`
/// to rank `c % world`), passed to `sink` on rank 0 in piece order: each piece goes from
/// its owner to the others (a broadcast of its Parquet bytes) and rank 0 keeps it, so rank
/// 0 holds one piece of the others' at a time and never the whole batch. `own` are this
/// rank's pieces in increasing order. The others' `sink` is never called.
pub fn stream_to_rank0<T: Table>(
    g: &Group,
    chunks: usize,
    own: Vec<Vec<T>>,
    sink: &mut dyn FnMut(Vec<T>) -> Result<()>,
) -> Result<()> {
    let world = g.shard().world.max(1);
    let mut own = own.into_iter();
    for c in 0..chunks {
        let owner = c % world;
        let mine = owner == g.rank();
        let rows = if mine {
            own.next().unwrap_or_default()
        } else {
            Vec::new()
        };
        if owner == 0 {
            // Rank 0's own piece needs nothing from the others.
            if mine {
                sink(rows)?;
            }
            continue;
        }
        // An empty piece (a rank with no work in it) travels as no bytes.
        let mut bytes = Vec::new();
        if mine && !rows.is_empty() {
            write_table(&mut bytes, &rows, &FileMeta::new("part", ""))?;
        }
        let received = g.broadcast_bytes(&bytes, owner)?;
        if g.rank() == 0 {
            if received.is_empty() {
                sink(Vec::new())?;
            } else {
                let file = format!("piece {c} from rank {owner}");
                sink(read_table::<T, _>(received.as_slice(), &file)?.0)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn commands_round_trip() {
        for c in [
            Command::End,
            Command::Run {
                iter: 3,
                stage: Stage::Features,
            },
        ] {
            assert_eq!(Command::decode(&c.encode()).unwrap(), c);
        }
        assert!(Command::decode("jump 3").is_err());
    }
}
