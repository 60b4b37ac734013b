use std::path::PathBuf;

use anyhow::{bail, Result};
use deltarl_model::Dtype;
use deltarl_schemas::Engine;

use super::plan_inputs::{check_shape, host_workload, model_shape, workload};
use crate::config::Resolved;
use crate::host_plan::HostPlan;
use crate::plan::{human, parse_bytes, Plan, Workload};

/// Memory per device for a configuration: weights, master weights, gradients, AdamW
/// moments, activations (with and without checkpointing) and the KV cache.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file.
    #[arg(long)]
    config: PathBuf,
    /// Change one key (repeatable), as `iterate --set` does.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    sets: Vec<String>,
    /// Data-parallel devices: each takes 1/N of the rollout and update rows.
    #[arg(long, default_value_t = 1)]
    devices: u64,
    /// Device memory to check against (141GB, 80GiB, ...).
    #[arg(long, value_parser = parse_bytes)]
    memory: Option<u64>,
    /// The model's config.json, when model.source is not on this machine.
    #[arg(long)]
    model_config: Option<PathBuf>,
    /// Instead: a model whose published shape deltarl knows (`Qwen/Qwen3-8B-Base`,
    /// `qwen2.5-7b`, `meta-llama/Llama-3.1-8B`; Qwen3 0.6B-14B, Qwen2.5 0.5B-14B, Llama 3).
    /// Without either, a model.source whose last path part names one is planned as it.
    #[arg(long, conflicts_with = "model_config")]
    model: Option<String>,
    /// The longest prompt in tokens (default: rollout.max_prompt_tokens).
    #[arg(long)]
    prompt_tokens: Option<u64>,
    /// Iterations of the run whose disk (after `[checkpoint]` pruning) is printed.
    #[arg(long, default_value_t = 100)]
    iters: u32,
    /// Bytes a second at which this host writes the features file (GB/s), instead of
    /// measuring it here on a sample.
    #[arg(long, value_name = "GB/S", requires = "pass_rate")]
    write_rate: Option<f64>,
    /// Bytes of the features file a second one coefficient pass reads and computes on
    /// (GB/s), instead of measuring it here on a sample.
    #[arg(long, value_name = "GB/S", requires = "write_rate")]
    pass_rate: Option<f64>,
    /// Print the numbers as JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    pub fn run(self) -> Result<()> {
        // Sizes past these are no machine's: refused rather than overflowing into "fits".
        if self.devices == 0 || self.devices > 1 << 20 {
            bail!("--devices {}: expected 1 to {}", self.devices, 1 << 20);
        }
        if self.memory == Some(0) {
            bail!("--memory: a device with no memory fits nothing; give its size (141GB, 80GiB)");
        }
        if let Some(n) = self.prompt_tokens.filter(|&n| n == 0 || n > 1 << 24) {
            bail!("--prompt-tokens {n}: expected 1 to {}", 1 << 24);
        }
        let cfg = Resolved::load_with(&self.config, &self.sets)?;
        let shape = model_shape(&cfg, self.model_config.as_deref(), self.model.as_deref())?;
        check_shape(&shape)?;
        let w = workload(&cfg, self.devices, self.prompt_tokens)?;
        let plan = Plan::new(&shape, &w);
        let ckpt = w.activation_checkpointing;
        let n = self.devices;
        // Fully sharded (FSDP / ZeRO-3, the authors' layout under verl): the training
        // state divides over the devices; activations and the cache do not.
        let sharded_state = (plan.weights + plan.master + plan.grads + plan.moments).div_ceil(n);
        let act = if ckpt {
            plan.activations_checkpointed
        } else {
            plan.activations_full
        };
        // ZeRO-1 (`update.shard_optimizer`, what deltarl does under torchrun): weights and
        // gradients whole on every device, master weights and moments divided.
        let zero1 = plan.update_peak_zero1(n, ckpt);
        let zero1_on = n > 1 && cfg.opts.update.shard_optimizer;
        // ZeRO-2 (`update.shard_gradients` as well): the f32 gradient sums divided too.
        let zero2 = plan.update_peak_zero2(n, ckpt);
        let zero2_on = zero1_on && cfg.opts.update.shard_gradients;
        let update_peak = match (zero1_on, zero2_on) {
            (_, true) => zero2,
            (true, false) => zero1,
            (false, false) => plan.update_peak(ckpt),
        };
        let hw = host_workload(&cfg, &shape, &w, n);
        let host = HostPlan::new(&hw);
        let rates = match (self.write_rate, self.pass_rate) {
            (Some(write), Some(pass)) => crate::cli::plan_rates::given(write, pass)?,
            _ => crate::cli::plan_rates::measure(
                hw.vector_dim,
                cfg.stages.features.pass.precision(),
                hw.response_tokens,
                &cfg.coeffs,
            )?,
        };
        let wall = host.wall(&hw, rates);
        let vllm = (cfg.opts.rollout.engine == Engine::Vllm).then(|| vllm_plan(&cfg, &w));
        let peaks = [
            ("update", update_peak),
            ("features", plan.features_peak()),
            ("rollout", plan.rollout_peak()),
        ];
        if self.json {
            let v = serde_json::json!({
                "shape": shape,
                "workload": w,
                "plan": plan,
                "peak": {
                    "update": plan.update_peak(ckpt),
                    "update_without_checkpointing": plan.update_peak(false),
                    "update_with_checkpointing": plan.update_peak(true),
                    "features": plan.features_peak(),
                    "rollout": plan.rollout_peak(),
                    "update_sharded": sharded_state + act,
                    "update_zero1": zero1,
                    "update_zero2": zero2,
                },
                "host": host,
                "host_workload": hw,
                "rates": rates,
                "wall": wall,
                "per_iteration": host.per_iteration(),
                "run_disk": {"iterations": self.iters, "bytes": host.run_disk(&hw, self.iters)},
            });
            return crate::cli::stdout::print_stdout(&format!(
                "{}\n",
                serde_json::to_string_pretty(&v)?
            ));
        }
        let dtype = w.dtype.name();
        let mut t = String::new();
        let mut line = |k: &str, v: String| t.push_str(&format!("  {k:<44} {v}\n"));
        println!(
            "{}: {} parameters, {dtype}, {n} device(s)",
            self.config.display(),
            count(plan.parameters)
        );
        println!(
            "  sequences of {} prompt + {} response tokens; per device an update pass of {} \
             row(s), a features pass of {}, {} row(s) decoded together\n",
            w.prompt_tokens, w.response_tokens, w.update_rows, w.features_rows, w.decode_rows
        );
        line(&format!("weights ({dtype})"), human(plan.weights));
        line("master weights (f32)", human(plan.master));
        let sums = if w.dtype == Dtype::F32 {
            ""
        } else {
            " + f32 sums"
        };
        line(&format!("gradients ({dtype}{sums})"), human(plan.grads));
        line("AdamW moments (f32)", human(plan.moments));
        line(
            "activations, checkpointing off",
            human(plan.activations_full),
        );
        line(
            "activations, checkpointing on",
            human(plan.activations_checkpointed),
        );
        line(
            &format!(
                "update peak (checkpointing {})",
                if ckpt { "on" } else { "off" }
            ),
            human(plan.update_peak(ckpt)),
        );
        if n > 1 {
            line(
                "update peak, ZeRO-1 sharded optimizer",
                format!(
                    "{} (update.shard_optimizer = {})",
                    human(zero1),
                    cfg.opts.update.shard_optimizer
                ),
            );
            line(
                "update peak, ZeRO-2 sharded gradients too",
                format!(
                    "{} (update.shard_gradients = {})",
                    human(zero2),
                    cfg.opts.update.shard_gradients
                ),
            );
            line(
                "update peak, FSDP / ZeRO-3 (all sharded)",
                format!("{} (not in deltarl yet)", human(sharded_state + act)),
            );
        }
        line("features peak", human(plan.features_peak()));
        // With vLLM these are what the native engine would take (`--set rollout.engine`).
        let native = if vllm.is_some() {
            ", native engine"
        } else {
            ""
        };
        line(
            &format!("KV cache ({} positions{native})", w.kv_cache_tokens),
            human(plan.kv_cache),
        );
        line(
            &format!("rollout peak{native} (weights, cache, logits)"),
            human(plan.rollout_peak()),
        );
        match &vllm {
            None => line(
                "rollout engine",
                "native (deltarl's decoder: the KV cache above)".into(),
            ),
            Some(v) => {
                line(
                    "rollout engine",
                    "vLLM, a server a rank, kept across iterations".into(),
                );
                line(
                    "  --max-model-len",
                    format!(
                        "{} ({} + {} rounded up to a power of two, at most the model's context)",
                        v.max_model_len, w.prompt_tokens, w.response_tokens
                    ),
                );
                line(
                    "  --gpu-memory-utilization",
                    format!(
                        "{} of the device{}",
                        v.utilization,
                        if v.given { "" } else { " (vLLM's default)" }
                    ),
                );
                line(
                    "  device hand-over",
                    "asleep (level 2) while the trainer has the device; libtorch's cache \
                     emptied before it wakes"
                        .into(),
                );
            }
        }
        let how = match (cfg.opts.rollout.engine, cfg.opts.rollout.session_rows) {
            (Engine::Vllm, _) => {
                "through each rank's vLLM server (the rollout's, reloaded with the new \
                 policy and probed), the problems shared over the ranks"
                    .to_string()
            }
            (Engine::Native, 0) => {
                "on rank 0 alone (rollout.session_rows = 0: one session), with the native \
                 engine"
                    .to_string()
            }
            (Engine::Native, s) => {
                format!("shared over the ranks in sessions of {s} samples, with the native engine")
            }
        };
        line(
            "eval",
            format!("every {} iterations, {how}", cfg.opts.eval.every),
        );
        line("host, rollout process", human(host.rollout_resident));
        line(
            &if n > 1 {
                format!("host, features process (rank 0 of {n})")
            } else {
                "host, features process".to_string()
            },
            human(host.features_resident),
        );
        line("host, coeffs process", human(host.coeffs_resident));
        line(
            "host, update process (besides the model)",
            human(host.update_resident),
        );
        line("written an iteration: rollouts", human(host.rollouts_file));
        line(
            &format!(
                "  features ({} values of {} bytes a token)",
                hw.stored_dim,
                if hw.dtype == Dtype::Bf16 { 2 } else { 4 }
            ),
            human(host.features_file),
        );
        line(
            "  coeffs and scores",
            human(host.coeffs_file + host.scores_file),
        );
        line("  policy and optimizer state", human(host.checkpoint));
        line("  in all", human(host.per_iteration()));
        let c = &cfg.opts.checkpoint;
        line(
            &format!(
                "disk after {} iterations (keep_last {}, save_every {}, keep_features {})",
                self.iters, c.keep_last, c.save_every, c.keep_features
            ),
            human(host.run_disk(&hw, self.iters)),
        );
        let how = if rates.measured {
            "measured here on a sample"
        } else {
            "as given"
        };
        line(
            &format!(
                "host time: features file written at {:.2} GB/s",
                rates.write / 1e9
            ),
            format!("{} ({how})", seconds(wall.features_write_s)),
        );
        line(
            &format!(
                "  coeffs: {} passes over it at {:.2} GB/s",
                wall.coeffs_passes,
                rates.pass / 1e9
            ),
            format!("{} ({how}; from the page cache)", seconds(wall.coeffs_s)),
        );
        print!("{t}");
        if let Some(mem) = self.memory {
            println!("\nagainst {} a device:", human(mem));
            for (stage, peak) in peaks {
                if let (Some(v), "rollout") = (&vllm, stage) {
                    // vLLM takes its share of the device whatever the batch; its KV cache
                    // is what the share leaves after the weights (activations aside).
                    let share = (v.utilization * mem as f64) as u64;
                    let kv = share.saturating_sub(plan.weights);
                    let positions = kv
                        / shape
                            .kv_bytes_per_token(if w.dtype == Dtype::F32 { 4 } else { 2 })
                            .max(1);
                    let seq = w.prompt_tokens + w.response_tokens;
                    let verdict = if positions >= seq {
                        "fits"
                    } else {
                        "does NOT fit"
                    };
                    println!(
                        "  {stage:<9} {verdict} (vLLM takes {} = {:.0} % of it: {} of KV cache \
                         beyond its weights, {positions} positions, {} rows of {seq} at once)",
                        human(share),
                        100.0 * v.utilization,
                        human(kv),
                        positions / seq
                    );
                    continue;
                }
                let verdict = if peak <= mem { "fits" } else { "does NOT fit" };
                println!(
                    "  {stage:<9} {verdict} ({} = {:.0} % of it)",
                    human(peak),
                    100.0 * peak as f64 / mem as f64
                );
            }
            if n > 1 && !zero1_on && zero1 <= mem && update_peak > mem {
                println!(
                    "  the update would fit with its optimizer state sharded over {n} devices \
                     (update.shard_optimizer = true)"
                );
            } else if n > 1 && !zero2_on && zero2 <= mem && update_peak > mem {
                println!(
                    "  the update would fit with its optimizer state and gradient sums sharded \
                     over {n} devices (update.shard_optimizer = true, update.shard_gradients = true)"
                );
            } else if n > 1 && sharded_state + act <= mem && update_peak > mem {
                println!(
                    "  the update would fit only with all its state sharded over {n} devices \
                     (FSDP / ZeRO-3, not in deltarl yet)"
                );
            }
        }
        Ok(())
    }
}

/// What the plan says of a vLLM rollout.
struct VllmPlan {
    max_model_len: u64,
    utilization: f64,
    /// Whether `--gpu-memory-utilization` is given in `rollout.vllm.extra_args`.
    given: bool,
}

fn vllm_plan(cfg: &Resolved, w: &Workload) -> VllmPlan {
    let args = &cfg.opts.rollout.vllm.extra_args;
    let given = crate::vllm::server_arg(args, &["--gpu-memory-utilization"])
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|u| *u > 0.0 && *u <= 1.0);
    let max_model_len = crate::vllm::server_arg(args, &["--max-model-len"])
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| {
            crate::vllm::max_model_len(
                w.prompt_tokens as usize,
                w.response_tokens as usize,
                usize::MAX,
            ) as u64
        });
    VllmPlan {
        max_model_len,
        utilization: given.unwrap_or(crate::vllm::DEFAULT_GPU_MEMORY_UTILIZATION),
        given: given.is_some(),
    }
}

/// A parameter count as people say it: `8.19 B`, `989.3 K`, `512`.
/// Seconds as `2 h 05 min`, `3 min 20 s` or `12.3 s`.
fn seconds(s: f64) -> String {
    if s >= 3600.0 {
        let m = (s / 60.0).round() as u64;
        format!("{} h {:02} min", m / 60, m % 60)
    } else if s >= 60.0 {
        let r = s.round() as u64;
        format!("{} min {:02} s", r / 60, r % 60)
    } else {
        format!("{s:.1} s")
    }
}

fn count(n: u64) -> String {
    let x = n as f64;
    match n {
        1_000_000_000.. => format!("{:.2} B", x / 1e9),
        1_000_000.. => format!("{:.2} M", x / 1e6),
        1_000.. => format!("{:.1} K", x / 1e3),
        _ => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parameter_counts_by_hand() {
        assert_eq!(super::count(8_190_735_360), "8.19 B");
        assert_eq!(super::count(989_312), "989.3 K");
        assert_eq!(super::count(1_500_000), "1.50 M");
        assert_eq!(super::count(512), "512");
    }
}
