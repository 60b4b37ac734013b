//! Running stages: completion checks (a stage is done when its own record matches and every
//! stage it depends on is done), atomic outputs with the manifest written last, and the
//! resume loop of `iterate`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use deltarl_schemas::seed::seed_for;
use deltarl_schemas::{Manifest, PolicyUse, Stage, TOOL_VERSION};

use crate::context::Ctx;
use crate::ranks::Command;
use crate::readiness::{check_inputs, where_};
use crate::rundir::{
    clean_temporaries, invalidate_downstream, stage_state, RunLock, StageState, Stale,
};
use crate::stage::{self, policy_before, Env, Prepared};

/// How far `iterate` goes.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// This many iterations (an incomplete earlier one counts).
    Count(u32),
    /// Until this iteration is complete.
    Iteration(u32),
}

/// What happened to a stage.
#[derive(Debug)]
pub enum Outcome {
    /// Complete already (or, for the warm start, not needed: the base is a model folder).
    Skipped,
    Ran(Box<Manifest>),
}

/// Runs the stages of one opened run.
pub struct Runner<'a> {
    pub ctx: &'a Ctx,
    base: PathBuf,
    /// Whether (iteration, stage) is done, remembered until a stage runs.
    done: RefCell<HashMap<(u32, Stage), bool>>,
    /// Each stage's settings under the run's configuration, resolved once.
    prepared: RefCell<HashMap<Stage, Rc<Prepared>>>,
    /// The vLLM server kept from one rollout to the next (stopped when the runner drops).
    kept: crate::vllm::Kept,
}

impl<'a> Runner<'a> {
    pub fn new(ctx: &'a Ctx) -> Self {
        Runner {
            ctx,
            base: ctx.base_dir(),
            done: RefCell::default(),
            prepared: RefCell::default(),
            kept: crate::vllm::Kept::default(),
        }
    }

    /// A stage's settings under the run's configuration.
    fn prepared(&self, stage: Stage) -> Result<Rc<Prepared>> {
        if let Some(p) = self.prepared.borrow().get(&stage) {
            return Ok(Rc::clone(p));
        }
        let p = Rc::new(stage::prepare(stage, &self.ctx.cfg)?);
        self.prepared.borrow_mut().insert(stage, Rc::clone(&p));
        Ok(p)
    }

    fn env(&self, iter: u32, stage: Stage) -> Result<Env<'_>> {
        Ok(Env {
            run: &self.ctx.run,
            device: self.ctx.device,
            iter,
            base: &self.base,
            hash: self.prepared(stage)?.hash.clone(),
            stage,
            ranks: self
                .ctx
                .ranks
                .as_ref()
                .filter(|_| stage::shared(stage))
                .map(|r| &r.group),
            launch: self.ctx.ranks.as_ref().map(|r| &r.launch),
            kept: &self.kept,
        })
    }

    /// The weights file of a policy folder: the one there (or pruned from there), a
    /// sharded checkpoint's index before a single file; before the folder is written, the
    /// one its writer will most likely make (a single file for a tiny model).
    fn weights(&self, dir: PathBuf) -> Result<PathBuf> {
        let run = &self.ctx.run;
        let (single, index) = (
            dir.join("model.safetensors"),
            dir.join("model.safetensors.index.json"),
        );
        Ok(if index.exists() || run.is_pruned(&index)? {
            index
        } else if single.exists() || run.is_pruned(&single)? || self.ctx.tiny() {
            single
        } else {
            index
        })
    }

    /// The files a stage reads.
    fn inputs(&self, iter: u32, stage: Stage, env: &Env) -> Result<Vec<PathBuf>> {
        let run = &self.ctx.run;
        let mut v: Vec<PathBuf> = stage
            .upstream()
            .iter()
            .map(|&u| run.output(iter, u))
            .collect();
        match stage.policy() {
            Some(PolicyUse::Previous) => {
                v.push(self.weights(policy_before(run, &self.base, iter))?)
            }
            Some(PolicyUse::This) => v.push(self.weights(env.this_policy())?),
            None => {}
        }
        v.extend(self.prepared(stage)?.extra_inputs(env)?);
        Ok(v)
    }

    /// The stages whose outputs this one reads: its upstream stages, and the stage that
    /// wrote the policy it runs.
    fn dependencies(&self, iter: u32, stage: Stage) -> Vec<(u32, Stage)> {
        let mut d: Vec<(u32, Stage)> = stage.upstream().iter().map(|&u| (iter, u)).collect();
        match stage.policy() {
            Some(PolicyUse::Previous) if iter <= 1 => d.push((0, Stage::Warmstart)),
            Some(PolicyUse::Previous) => d.push((iter - 1, Stage::Update)),
            Some(PolicyUse::This) => d.push((iter, Stage::Update)),
            None => {}
        }
        d
    }

    /// The state of a stage: its own record, then the stages it depends on, so that a
    /// rebuilt base makes every iteration after it stale.
    pub fn state(&self, iter: u32, stage: Stage) -> Result<StageState> {
        if stage == Stage::Warmstart && !self.ctx.tiny() {
            return Ok(StageState::External(self.base.clone()));
        }
        let env = self.env(iter, stage)?;
        let inputs = self.inputs(iter, stage, &env)?;
        let settings = &self.prepared(stage)?.json;
        let own = stage_state(&self.ctx.run, iter, stage, (&env.hash, settings), &inputs);
        self.ctx.run.save_hashes();
        let own = own?;
        if !matches!(own, StageState::Done(_)) {
            return Ok(own);
        }
        for (i, dep) in self.dependencies(iter, stage) {
            if !self.is_done(i, dep)? {
                let at = if dep == Stage::Warmstart {
                    "the base".to_string()
                } else {
                    format!("{dep} of iteration {i}")
                };
                // A dependency that finished once will rerun; one that never did is not done.
                let why = match self.state(i, dep)? {
                    StageState::Stale(_) => Stale::DependencyStale(at),
                    _ => Stale::DependencyNotDone(at),
                };
                return Ok(StageState::Stale(why));
            }
        }
        Ok(own)
    }

    fn is_done(&self, iter: u32, stage: Stage) -> Result<bool> {
        if let Some(&d) = self.done.borrow().get(&(iter, stage)) {
            return Ok(d);
        }
        let d = matches!(
            self.state(iter, stage)?,
            StageState::Done(_) | StageState::External(_)
        );
        self.done.borrow_mut().insert((iter, stage), d);
        Ok(d)
    }

    /// The stages `iterate` runs for an iteration.
    pub fn stages_of(&self, iter: u32) -> Vec<Stage> {
        Stage::iteration()
            .iter()
            .copied()
            .filter(|&s| s != Stage::Eval || self.ctx.eval_due(iter))
            .collect()
    }

    /// Runs one stage unless it is complete (or `force`). Outputs are committed
    /// atomically, then the manifest is written last.
    pub fn run_stage(&self, iter: u32, stage: Stage, force: bool) -> Result<Outcome> {
        if stage == Stage::Warmstart {
            if !self.ctx.tiny() {
                return Ok(Outcome::Skipped);
            }
        } else if iter == 0 {
            bail!("iterations start at 1");
        }
        let iter = if stage == Stage::Warmstart { 0 } else { iter };
        if !force && self.is_done(iter, stage)? {
            return Ok(Outcome::Skipped);
        }
        let env = self.env(iter, stage)?;
        let inputs = self.inputs(iter, stage, &env)?;
        check_inputs(
            &self.ctx.run,
            &self.ctx.cfg.opts.checkpoint,
            iter,
            stage,
            &inputs,
        )?;
        // A stage reads what the stages it depends on wrote: one of them stale (or never
        // finished) would hand it files of another configuration or of an upstream rerun.
        for (i, dep) in self.dependencies(iter, stage) {
            if !self.is_done(i, dep)? {
                let (what, state) = match self.state(i, dep)? {
                    StageState::Stale(why) => ("stale", why.to_string()),
                    _ => ("not done", "it has not finished".to_string()),
                };
                let dep_at = match dep {
                    Stage::Warmstart => "the base".to_string(),
                    _ => format!("{dep} of iteration {i}"),
                };
                bail!(
                    "stage {stage} of {} reads what {dep_at} wrote, which is {what} ({state}): \
                     run it first, or `deltarl iterate`, which runs every stage in order",
                    where_(iter, stage)
                );
            }
        }
        let run = &self.ctx.run;
        let dir = run.stage_dir(iter, stage);
        if stage != Stage::Warmstart {
            std::fs::create_dir_all(dir.join("manifest"))
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clean_temporaries(&dir);
        }
        self.done.borrow_mut().clear();
        let input_hashes = run.hash_inputs(&inputs)?;
        if let Some(r) = &self.ctx.ranks {
            if stage::shared(stage) {
                r.announce(Command::Run { iter, stage })?;
            }
        }
        let processes = self.ctx.ranks.as_ref().map_or(1, |r| r.group.world());
        let start = Instant::now();
        let mem = crate::memory::start();
        let prepared = self.prepared(stage)?;
        let ran = prepared
            .run(&env)
            .with_context(|| format!("stage {stage} of {}", where_(iter, stage)))?
            .with_context(|| {
                format!(
                    "stage {stage} of {}: rank 0 wrote nothing",
                    where_(iter, stage)
                )
            })?;
        let mut measured = ran.measured;
        // Each process's memory over a stage they shared (rank 0's own is measured below,
        // with the manifest's writing).
        if let Some(r) = self.ctx.ranks.as_ref().filter(|_| stage::shared(stage)) {
            let all = crate::memory::gather(&r.group, crate::memory::finish(mem))?;
            measured.extend(crate::memory::by_rank(&all));
        }
        let mut outputs = ran.outputs;
        outputs.push(run.output(iter, stage));
        let mut out_hashes = std::collections::BTreeMap::new();
        for p in outputs {
            out_hashes.insert(run.rel(&p), run.hash(&p)?);
        }
        let m = Manifest {
            stage,
            iter,
            config_hash: env.hash.clone(),
            seed: seed_for(self.ctx.cfg.opts.seed, iter, stage.name(), "", 0),
            inputs: input_hashes,
            outputs: out_hashes,
            rows: ran.rows as u64,
            seconds: start.elapsed().as_secs_f64(),
            version: TOOL_VERSION.to_string(),
            summary: ran.summary,
            settings: prepared.json.clone(),
            // A stage rank 0 runs alone (the others waiting) was computed by one process.
            compute: Some(crate::compute::now(if stage::shared(stage) {
                processes
            } else {
                1
            })),
        };
        m.write(&run.manifest_path(iter, stage))?;
        run.save_hashes();
        // The stage is done; its metrics are a log beside it, so failing to append them
        // (a full disk) is reported, not fatal.
        let mem = crate::memory::finish(mem);
        if let Err(e) = crate::metrics::record(&run.root, stage, &m, mem, &measured, processes) {
            eprintln!("warning: metrics of stage {stage} not recorded: {e:#}");
        }
        let _ = std::fs::remove_file(run.stale_path(iter, stage));
        // Only now, with this stage's new outputs in place, is anything downstream no longer
        // known to match them. (A failed run leaves the earlier outputs and their records.)
        invalidate_downstream(run, iter, stage)?;
        self.done.borrow_mut().clear();
        Ok(Outcome::Ran(Box::new(m)))
    }

    /// The first iteration that is not complete (1 when there is none).
    pub fn next_iteration(&self) -> Result<u32> {
        let mut next = 1;
        for i in self.ctx.run.iterations() {
            for s in self.stages_of(i) {
                if !self.is_done(i, s)? {
                    return Ok(i);
                }
            }
            next = i + 1;
        }
        Ok(next)
    }

    /// Runs iterations from the first incomplete stage, warm-starting the base first when
    /// it is missing or stale: `Count(k)` runs k iterations (repairs included),
    /// `Until(n)` runs until iteration n is complete. Needs the run's lock.
    pub fn iterate(&self, _lock: &RunLock, until: Until) -> Result<()> {
        // Leftovers of a killed process (never final names) go first.
        clean_temporaries(&self.ctx.run.root);
        self.ensure_base()?;
        let (mut ran, mut last) = (0, None);
        loop {
            let it = self.next_iteration()?;
            if last == Some(it) {
                bail!("iteration {it} is still incomplete after running its stages");
            }
            last = Some(it);
            match until {
                Until::Count(k) if ran >= k => break,
                Until::Iteration(n) if it > n => break,
                _ => ran += 1,
            }
            match &self.ctx.ranks {
                Some(r) => eprintln!(
                    "iteration {it} ({}, {} processes)",
                    self.ctx.run.root.display(),
                    r.group.world()
                ),
                None => eprintln!("iteration {it} ({})", self.ctx.run.root.display()),
            }
            for stage in self.stages_of(it) {
                let outcome = self.run_stage(it, stage, false)?;
                eprintln!("{}", summary_line(stage, &outcome));
            }
            let pruned = crate::prune::prune(&self.ctx.run, it, &self.ctx.cfg.opts.checkpoint)?;
            if !pruned.is_empty() {
                eprintln!(
                    "  pruned {} checkpoint and features files of earlier iterations",
                    pruned.len()
                );
            }
        }
        Ok(())
    }

    /// Runs `lead` alone, or, among several processes, on rank 0 while the others follow
    /// its commands ([`crate::ranks`]). A failing rank shows its error and tells the others
    /// before returning it ([`crate::ranks::Ranks::fail`]).
    pub fn lead_or_follow(&self, lead: impl FnOnce(&Self) -> Result<()>) -> Result<()> {
        let Some(r) = &self.ctx.ranks else {
            return lead(self);
        };
        let result = if r.is_leader() {
            lead(self).and_then(|()| r.announce(Command::End))
        } else {
            self.follow()
        };
        result.map_err(|e| {
            r.fail(e.context(format!("rank {} of {}", r.group.rank(), r.group.world())))
        })
    }

    /// A follower's loop: run its share of each stage rank 0 announces, until `end`.
    fn follow(&self) -> Result<()> {
        let Some(r) = &self.ctx.ranks else {
            return Ok(());
        };
        loop {
            match r.receive()? {
                Command::End => return Ok(()),
                Command::Run { iter, stage } => {
                    let env = self.env(iter, stage)?;
                    let mem = crate::memory::start();
                    self.prepared(stage)?
                        .run(&env)
                        .with_context(|| format!("stage {stage} of {}", where_(iter, stage)))?;
                    // This process's memory over the stage, for rank 0's metrics.
                    crate::memory::gather(&r.group, crate::memory::finish(mem))?;
                }
            }
        }
    }

    /// Warm-starts the base when the run builds its own and it is missing or stale.
    pub fn ensure_base(&self) -> Result<()> {
        let outcome = self.run_stage(0, Stage::Warmstart, false)?;
        if let Outcome::Ran(_) = outcome {
            eprintln!("{}", summary_line(Stage::Warmstart, &outcome));
        }
        Ok(())
    }
}

/// The one-line summary of a stage.
pub fn summary_line(stage: Stage, o: &Outcome) -> String {
    let Outcome::Ran(m) = o else {
        return format!("  {stage:<9} done already (skipped)");
    };
    format!(
        "  {stage:<9} {:>6} rows {:>7.2} s  {}",
        m.rows,
        m.seconds,
        // A manifest this build cannot read as its stage's summary says so in its line.
        stage::line(m).unwrap_or_else(|e| format!("({e})"))
    )
}
