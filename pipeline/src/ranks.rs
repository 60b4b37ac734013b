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
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use deltarl_dist::{Group, Launch};
use deltarl_schemas::{encode_piece, read_table, Shard, Stage, Table};
use tch::Device;

/// The least collective timeout: a hung peer is noticed after this long at the soonest.
const MIN_TIMEOUT_S: u64 = 1800;

/// The slowest a rank may sample, in tokens a second, before the others call it hung: far
/// below what one device sustains when it decodes its share (a CUDA device decoding an 8B
/// model's long responses with vLLM, dozens of rows at once: above 1,000 tokens a second;
/// on a CPU, a quarter of the slowest rollout measured here, SmolLM2-135M's at 16 tokens a
/// second on a busy 2-core machine), so a timeout from it fires only on a rank that stopped.
const FLOOR_TOKENS_PER_S_CUDA: u64 = 500;
const FLOOR_TOKENS_PER_S_CPU: u64 = 4;

/// How long a collective may wait for the other ranks (a rank that died is noticed at once
/// when its sockets close; this bounds a hung one), and where that came from.
///
/// Ranks part for at most one stage's share of work before they meet in a collective, and
/// the longest share is the rollout's: prompts are dealt statically, so one rank may decode
/// all of its `ceil(prompts x G / world)` samples to `max_new_tokens` while the others wait
/// to gather. The bound is that many tokens at the floor rate, and never under 30 minutes.
/// `DELTARL_DIST_TIMEOUT_S` overrides it.
pub fn collective_timeout(
    rollout: &deltarl_rollout::RolloutOptions,
    world: usize,
    cuda: bool,
    given: Option<&str>,
) -> Result<(Duration, String)> {
    if let Some(v) = given {
        let s: u64 = v.trim().parse().with_context(|| {
            format!("environment variable DELTARL_DIST_TIMEOUT_S = {v:?}: not a number of seconds")
        })?;
        if s == 0 {
            bail!(
                "environment variable DELTARL_DIST_TIMEOUT_S = {v:?}: expected at least 1 second"
            );
        }
        return Ok((
            Duration::from_secs(s),
            "set by DELTARL_DIST_TIMEOUT_S".into(),
        ));
    }
    let samples = (rollout.prompts_per_iter as u64)
        .saturating_mul(u64::from(rollout.samples_per_prompt))
        .div_ceil(world.max(1) as u64);
    let tokens = samples.saturating_mul(rollout.max_new_tokens as u64);
    let rate = if cuda {
        FLOOR_TOKENS_PER_S_CUDA
    } else {
        FLOOR_TOKENS_PER_S_CPU
    };
    let bound = tokens.div_ceil(rate);
    let origin = format!(
        "the rollout bound, {samples} samples x {} tokens a rank at {rate} tokens/s, at least \
         {MIN_TIMEOUT_S} s; DELTARL_DIST_TIMEOUT_S overrides it",
        rollout.max_new_tokens
    );
    Ok((Duration::from_secs(bound.max(MIN_TIMEOUT_S)), origin))
}

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
    /// Joins the group when the launcher asked for several processes (`WORLD_SIZE > 1`),
    /// with the collective timeout the rollout bounds ([`collective_timeout`]).
    /// `cuda`: the run's tensors live on `cuda:LOCAL_RANK` (NCCL); otherwise on the CPU
    /// (gloo).
    pub fn join(cuda: bool, rollout: &deltarl_rollout::RolloutOptions) -> Result<Option<Ranks>> {
        let Some(launch) = Launch::from_env()? else {
            return Ok(None);
        };
        let given = std::env::var("DELTARL_DIST_TIMEOUT_S").ok();
        let (timeout, origin) = collective_timeout(rollout, launch.world, cuda, given.as_deref())?;
        let group = Group::connect(&launch, timeout, cuda)?.with_timeout_origin(origin);
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
/// piece `r` = rank `r`'s rows), point to point: a rank other than 0 holds its own rows.
pub fn gather_rows<T: Table, K: Ord>(
    g: &Group,
    rows: Vec<T>,
    key: impl Fn(&T) -> K,
) -> Result<Vec<T>> {
    // Rank 0's own rows stay as they are; the others' travel encoded.
    let (mut all, own) = if g.rank() == 0 {
        (rows, Vec::new())
    } else {
        (Vec::new(), encode_piece(&rows)?)
    };
    stream_to_rank0(
        g,
        g.shard().world.max(1),
        std::iter::once(Ok(own)),
        &mut |b, what| {
            if !b.is_empty() {
                all.extend(read_table::<T, _>(b.as_slice(), what)?.0);
            }
            Ok(())
        },
    )?;
    all.sort_by_key(|r| key(r));
    Ok(all)
}

/// Every rank's samples of `prompts` (ids in the order one process lists them), merged on
/// rank 0 in that process's order: prompt by prompt, then sample. `of(row)` is the row's
/// (prompt id, sample index).
pub fn gather_samples<'a, T: Table>(
    g: &Group,
    rows: Vec<T>,
    prompts: impl Iterator<Item = &'a str>,
    of: impl Fn(&T) -> (&str, u32),
) -> Result<Vec<T>> {
    let at: std::collections::HashMap<&str, usize> =
        prompts.enumerate().map(|(i, id)| (id, i)).collect();
    gather_rows(g, rows, |r| {
        let (id, sample) = of(r);
        (at.get(id).copied(), sample)
    })
}

/// A rank's pieces of a stage, encoded as Parquet a piece as they are made and kept in a
/// file until they go to rank 0: the rank holds one piece in memory, not its whole share
/// (at the 8B setting a rank's share of the features is 86 GB decoded). The file, `.NAME`
/// beside the stage's output, is removed when the spill is dropped, and one a killed run
/// left is replaced by the next.
pub struct Spill {
    path: PathBuf,
    file: File,
    /// Each piece's place in the file: (offset, length).
    pieces: Vec<(u64, usize)>,
    end: u64,
}

impl Spill {
    /// The spill file of `rank` for the stage output `output`: `.NAME.rank-R.spill` beside it.
    fn path(output: &Path, rank: usize) -> PathBuf {
        output.with_file_name(format!(".{}.rank-{rank}.spill", file_name(output)))
    }

    /// Removes the spill files of ranks `world` and above that a killed run of more ranks
    /// left beside `output` (this run's ranks replace their own).
    pub fn remove_stale(output: &Path, world: usize) {
        let prefix = format!(".{}.rank-", file_name(output));
        let Some(Ok(entries)) = output.parent().map(std::fs::read_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rank = name
                .strip_prefix(&prefix)
                .and_then(|r| r.strip_suffix(".spill"))
                .and_then(|r| r.parse::<usize>().ok());
            if rank.is_some_and(|r| r >= world) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// A new spill of `rank`'s pieces of the stage output `output`.
    pub fn create(output: &Path, rank: usize) -> Result<Self> {
        let path = Self::path(output, rank);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .with_context(|| format!("cannot create the spill file {}", path.display()))?;
        Ok(Spill {
            path,
            file,
            pieces: Vec::new(),
            end: 0,
        })
    }

    /// Appends the next piece's rows, encoded ([`encode_piece`]).
    pub fn push<T: Table>(&mut self, rows: &[T]) -> deltarl_schemas::Result<()> {
        let bytes = encode_piece(rows)?;
        self.file
            .write_all_at(&bytes, self.end)
            .map_err(|source| deltarl_schemas::Error::Io {
                file: self.path.display().to_string(),
                source,
            })?;
        self.pieces.push((self.end, bytes.len()));
        self.end += bytes.len() as u64;
        Ok(())
    }

    /// The pieces' bytes in the order they were pushed, read back one at a time.
    pub fn pieces(&self) -> impl Iterator<Item = Result<Vec<u8>>> + '_ {
        self.pieces.iter().map(|&(at, len)| {
            let mut bytes = vec![0u8; len];
            self.file
                .read_exact_at(&mut bytes, at)
                .with_context(|| format!("cannot read the spill file {}", self.path.display()))?;
            Ok(bytes)
        })
    }
}

fn file_name(output: &Path) -> String {
    output
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned())
}

impl Drop for Spill {
    fn drop(&mut self) {
        // Only a scratch copy of what rank 0 has written (or will recompute on a rerun).
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The pieces of `chunks` pieces of work dealt out as [`Shard::owns`] deals them (piece
/// `c` to rank `c % world`), passed to `sink` on rank 0 in piece order as their encoded
/// bytes ([`encode_piece`], with a name for errors), never decoded on the way: each piece
/// goes from its owner to rank 0 alone, point to point, so rank 0 holds one piece of the
/// others' at a time and never the whole batch, and no other rank receives anything.
/// `own` gives this rank's pieces in increasing order. The others' `sink` is never
/// called.
pub fn stream_to_rank0(
    g: &Group,
    chunks: usize,
    own: impl Iterator<Item = Result<Vec<u8>>>,
    sink: &mut dyn FnMut(Vec<u8>, &str) -> Result<()>,
) -> Result<()> {
    let world = g.shard().world.max(1);
    let mut own = own;
    for c in 0..chunks {
        let owner = c % world;
        let mine = owner == g.rank();
        let piece = if mine { own.next().transpose()? } else { None };
        let piece = piece.unwrap_or_default();
        if owner == 0 {
            // Rank 0's own piece needs nothing from the others.
            if mine {
                sink(piece, &format!("piece {c} of rank 0"))?;
            }
            continue;
        }
        // From its owner to rank 0 alone; an empty piece (a rank with no work in it)
        // travels as no bytes.
        if mine {
            g.send_bytes(&piece, 0)?;
        } else if g.rank() == 0 {
            let received = g.recv_bytes(owner)?;
            sink(received, &format!("piece {c} from rank {owner}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
