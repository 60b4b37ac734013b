//! ZeRO-1's and ZeRO-2's memory, measured: two processes updating a 77 M-parameter bf16
//! model (state 1.4 GB, activations small) hold what `deltarl plan --devices 2` says, and
//! less under ZeRO-2.

use std::path::Path;

use super::{both, torchrun_n};
use crate::common::*;

/// Rank 0's resident growth over the update stage, rerun under two processes with
/// `sharded` (ZeRO-1 or ZeRO-2), and the plan's peak for it. A fixed mmap threshold makes
/// glibc return freed tensors, so resident memory tracks the live ones (as in plan.rs).
fn measured_and_planned(runs: &Path, cfg: &Path, gradients: bool) -> (f64, f64) {
    let sets = [
        "update.shard_optimizer=true".to_string(),
        format!("update.shard_gradients={gradients}"),
    ];
    let mut args = vec!["stage", "update", "--run", "r", "--iter", "1", "--force"];
    for s in &sets {
        args.extend(["--set", s.as_str()]);
    }
    let out = torchrun_n(runs, 2, &args)
        .env("MALLOC_MMAP_THRESHOLD_", "65536")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", both(&out));
    let last = last_metrics(&runs.join("r"), "update");
    let m = &last["metrics"];
    let key = |k: &str| m[format!("update/{k}")].as_f64().unwrap();
    let measured = key("rss_peak_bytes") - key("rss_start_bytes");
    let mut plan = vec![
        "plan",
        "--config",
        cfg.to_str().unwrap(),
        "--devices",
        "2",
        "--json",
    ];
    for s in &sets {
        plan.extend(["--set", s.as_str()]);
    }
    let plan: serde_json::Value = serde_json::from_slice(&ok(deltarl(runs, &plan)).stdout).unwrap();
    let planned = plan["peak"][if gradients {
        "update_zero2"
    } else {
        "update_zero1"
    }]
    .as_f64()
    .unwrap();
    (measured, planned)
}

/// The state dominates here (155 M parameters' worth would take minutes on two cores; 77 M:
/// weights 0.15 GB, gradients 0.15 + f32 sums 0.31, master 0.31, moments 0.62 GB), and the
/// gradient norm's and the step's temporaries on the 25 M-element embeddings (0.4 GB)
/// outweigh the activations. Both measured peaks are within 20 % of their plans (as the
/// one-process plans are, plan.rs; 2-3 % when this was written), and ZeRO-2's is below
/// ZeRO-1's by at least half the difference the plan predicts.
#[test]
fn zero2_holds_what_the_plan_says() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let model = dir.path().join("m");
    random_model(
        &model,
        &[
            "--vocab",
            "32768",
            "--hidden",
            "768",
            "--intermediate",
            "3072",
            "--layers",
            "6",
            "--heads",
            "6",
            "--kv-heads",
            "2",
            "--max-positions",
            "512",
        ],
    );
    let problems: Vec<String> = (0..4).map(|i| format!("What is {i} plus {i}?")).collect();
    let cfg = file_config(
        dir.path(),
        "zero2",
        &model,
        &problems,
        "dtype = \"bf16\"\nthreads = 1",
        "[rollout]\nprompts_per_iter = 4\nsamples_per_prompt = 4\nmax_new_tokens = 16\n\
         max_prompt_tokens = 16\n[score]\noverlong_buffer = 0\n[update]\nmicro_batch_rows = 4\n\
         optimizer_steps = 1\nactivation_checkpointing = true\nlr = 1e-6\n[eval]\nevery = 0\n",
    );
    ok(iterate(&runs, &cfg, "r", &["--iters", "1"]));
    let (zero1, plan1) = measured_and_planned(&runs, &cfg, false);
    let (zero2, plan2) = measured_and_planned(&runs, &cfg, true);
    eprintln!(
        "ZeRO-1 measured {:.0} MB, plan {:.0} MB; ZeRO-2 measured {:.0} MB, plan {:.0} MB",
        zero1 / 1e6,
        plan1 / 1e6,
        zero2 / 1e6,
        plan2 / 1e6
    );
    // The plans leave out what the process holds beside the model's tensors: the policy
    // loader's copy of one tensor (at most the 25.2 M-element embeddings in f32, 101 MB),
    // c10d's buffer for the tensor being reduced (again at most 101 MB), the rows and the
    // runtime (tens of MB). That is at most ~230 MB, under 20 % of either plan (1.17
    // and 1.48 GB here).
    for (name, measured, plan) in [("ZeRO-1", zero1, plan1), ("ZeRO-2", zero2, plan2)] {
        assert!(
            (measured / plan - 1.0).abs() <= 0.2,
            "{name}: measured {measured}, plan {plan}"
        );
    }
    assert!(plan2 < plan1);
    // Both runs load, sample and save alike, so their unplanned parts cancel but for the
    // collective's buffer (≤ 101 MB): ZeRO-2 saves at least (plan1 - plan2) - 101 MB, here
    // 309 - 101 = 208 MB, above the half of the planned saving (155 MB) asserted.
    assert!(
        zero1 - zero2 >= 0.5 * (plan1 - plan2),
        "ZeRO-1 {zero1}, ZeRO-2 {zero2}"
    );
}
