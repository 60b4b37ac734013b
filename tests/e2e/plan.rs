//! `deltarl plan` against memory measured on CPU, and on the paper's 8B setting.

use std::path::Path;
use std::process::Command;

use crate::common::*;

/// The plan of `config` (with `sets`) as JSON.
fn plan(config: &Path, sets: &[&str]) -> serde_json::Value {
    let mut args = vec!["plan", "--config", config.to_str().unwrap(), "--json"];
    for s in sets {
        args.extend(["--set", s]);
    }
    let out = ok(deltarl(Path::new("unused"), &args));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Reruns `stage` of iteration 1 in a fresh process and returns its resident-memory growth
/// from metrics.jsonl. glibc's malloc keeps freed blocks below its (adaptive) mmap
/// threshold for reuse, which makes resident memory exceed what is live by up to half
/// here; a fixed threshold makes it track the live tensors, which is what the plan counts.
fn measured(runs: &Path, run: &str, stage: &str, sets: &[&str]) -> f64 {
    let mut cmd = Command::new(bin());
    cmd.env("DELTARL_RUNS", runs)
        .env("DELTARL_NO_PROGRESS", "1")
        .env("MALLOC_MMAP_THRESHOLD_", "65536")
        .args(["stage", stage, "--run", run, "--iter", "1", "--force"]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    ok(cmd.output().unwrap());
    let last = last_metrics(&runs.join(run), stage);
    let m = &last["metrics"];
    let key = |k: &str| m[format!("{stage}/{k}")].as_f64().unwrap();
    key("rss_peak_bytes") - key("rss_start_bytes")
}

/// A small Qwen3 shape (4 layers, width 256, vocabulary 4096) where activations and the LM
/// head dominate, with 32 responses of up to 128 tokens (a random model rarely samples one
/// of its 3 end tokens, so most run to the limit the plan assumes): the plan's update peak
/// (f32 and bf16, with and without activation checkpointing) and features peak, plus the
/// stage's fixed cost, are within 20 % of the measured ones.
///
/// The plan counts tensors. A process also grows by what no tensor holds: the libraries'
/// code paged in as the stage first calls it, MKL's per-thread buffers, the allocator's
/// small-block arenas. That cost depends on the machine (on one 2-core machine here it was
/// 25-60 MB: MKL sizes its buffers by the caches it finds), not on the workload, so the
/// test measures it on this machine as the same stage's growth beyond its plan on a run of
/// one-token responses (the same model and rows: 16 + 1 positions a row against 16 +
/// 128) and adds it to the plan.
#[test]
fn the_plan_matches_measured_peak_memory_on_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let model = dir.path().join("m");
    random_model(
        &model,
        &[
            "--vocab",
            "4096",
            "--hidden",
            "256",
            "--intermediate",
            "768",
            "--layers",
            "4",
            "--max-positions",
            "1024",
        ],
    );
    // Prompts longer than max_prompt_tokens, so each is cut to exactly that.
    let problems: Vec<String> = (0..4)
        .map(|i| {
            let q: Vec<String> = (0..12).map(|j| format!("What is {i} plus {j}?")).collect();
            q.join(" ")
        })
        .collect();
    let cfg = file_config(
        dir.path(),
        "mem",
        &model,
        &problems,
        "threads = 2",
        r#"[rollout]
prompts_per_iter = 4
samples_per_prompt = 8
max_new_tokens = 128
max_prompt_tokens = 16
[score]
overlong_buffer = 0
[features]
chunk_rows = 32
[update]
micro_batch_rows = 32
optimizer_steps = 1
lr = 1e-6
[eval]
every = 0
"#,
    );
    // (what, measured, plan, the stage's fixed cost measured on one-token responses).
    let mut report = Vec::new();
    for (run, dtype) in [
        ("f32", "model.dtype=\"f32\""),
        ("bf16", "model.dtype=\"bf16\""),
    ] {
        let short = format!("{run}-short");
        let one = "rollout.max_new_tokens=1";
        ok(iterate(&runs, &cfg, run, &["--iters", "1", "--set", dtype]));
        ok(iterate(
            &runs,
            &cfg,
            &short,
            &["--iters", "1", "--set", dtype, "--set", one],
        ));
        // The stage's growth beyond its plan on the short run (never below 0).
        let fixed = |stage: &str, sets: &[&str]| {
            let mut with_one = sets.to_vec();
            with_one.push(one);
            let m = measured(&runs, &short, stage, &with_one);
            let p = plan(&cfg, &with_one)["peak"][stage].as_f64().unwrap();
            (m - p).max(0.0)
        };
        for ckpt in ["false", "true"] {
            let c = format!("update.activation_checkpointing={ckpt}");
            let sets = [dtype, c.as_str()];
            let m = measured(&runs, run, "update", &sets);
            let p = plan(&cfg, &sets)["peak"]["update"].as_f64().unwrap();
            let f = fixed("update", &sets);
            report.push((format!("update {run} checkpointing {ckpt}"), m, p, f));
        }
        let m = measured(&runs, run, "features", &[dtype]);
        let p = plan(&cfg, &[dtype])["peak"]["features"].as_f64().unwrap();
        let f = fixed("features", &[dtype]);
        report.push((format!("features {run}"), m, p, f));
    }
    for (what, m, p, f) in &report {
        eprintln!(
            "{what}: measured {:.1} MB, plan {:.1} MB + fixed {:.1} MB",
            m / 1e6,
            p / 1e6,
            f / 1e6
        );
    }
    for (what, m, p, f) in &report {
        assert!(
            ((p + f) / m - 1.0).abs() <= 0.2,
            "{what}: measured {m}, plan {p} + fixed {f}"
        );
    }
    // Checkpointing is what the plan says it is: a large saving here.
    assert!(report[1].1 < 0.6 * report[0].1, "{report:?}");
}

/// The authors' 8B setting on 141 GB devices: the rollout fits, the replicated update
/// does not, with its optimizer state sharded over 8 devices (ZeRO-1) it does, and with
/// its gradient sums sharded too (ZeRO-2, the config's choice) in at most 60 GB.
#[test]
fn the_8b_plan_names_what_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let mc = dir.path().join("config.json");
    std::fs::write(
        &mc,
        r#"{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
            "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "max_position_embeddings": 40960, "rope_theta": 1000000, "tie_word_embeddings": false}"#,
    )
    .unwrap();
    let cfg = repo().join("configs/qwen3-8b-dapo-math.toml");
    let plan = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--config",
            cfg.to_str().unwrap(),
            "--model-config",
            mc.to_str().unwrap(),
            "--memory",
            "141GB",
            "--devices",
            "8",
            // Given, so that the text is the same on every machine.
            "--write-rate",
            "0.5",
            "--pass-rate",
            "1",
        ];
        args.extend_from_slice(extra);
        String::from_utf8_lossy(&ok(deltarl(Path::new("unused"), &args)).stdout).to_string()
    };
    // ZeRO-2: weights 16.38 + (master 32.76 + moments 65.53 + f32 gradient sums 32.76) / 8
    // + bf16 gradients of one layer (193.0 M parameters: 0.39) and of the embeddings and
    // head (2 x 622.3 M: 2.49) + two f32 copies of the embeddings in flight 4.98 +
    // activations 12.41 GB (checkpointed, the LM head in chunks of 421 tokens) = 53.03 GB.
    let text = plan(&[]);
    eprintln!("{text}");
    assert!(text.contains("update    fits (53.03 GB"), "{text}");
    assert!(
        text.contains("update peak, ZeRO-2 sharded gradients too    53.03 GB"),
        "{text}"
    );
    // ZeRO-1: weights 16.38 + gradients 16.38 and their f32 sums 32.76 + (master 32.76 +
    // moments 65.53) / 8 + activations 12.41 GB.
    let text = plan(&["--set", "update.shard_gradients=false"]);
    assert!(text.contains("update    fits (90.23 GB"), "{text}");
    assert!(
        text.contains("update peak, ZeRO-1 sharded optimizer        90.23 GB"),
        "{text}"
    );
    assert!(
        text.contains("activations, checkpointing on                12.41 GB"),
        "{text}"
    );
    assert!(
        text.contains("features peak                                21.92 GB"),
        "{text}"
    );
    // The features stage estimating where the vectors are (persist = "none"): rank 0
    // holds its share, 256 responses x 20,480 tokens x 4,096 bf16 values (42.95 GB), a
    // batch of them widened for a pass (0.02), every token's scalars (0.50), the
    // estimator's (1.51 per token, 0.34 per response), the rollouts (0.54), a piece and a
    // row group (0.13) = 45.99 GB; the file keeps no vectors and the coefficient stage
    // makes no pass over it.
    let text = plan(&["--set", "features.persist=\"none\""]);
    let line = |text: &str, what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line(&text, "host, features process (rank 0 of 8)").ends_with(" 45.99 GB"),
        "{text}"
    );
    assert!(
        line(&text, "features (0 values").ends_with(" 503.3 MB"),
        "{text}"
    );
    assert!(
        line(&text, "coeffs: 0 passes").contains(" 0.0 s "),
        "{text}"
    );
    // The whole head: its [20,480, 151,936] f32 buffers dominate both passes.
    let text = plan(&["--set", "model.head_chunk_mb=0"]);
    eprintln!("{text}");
    assert!(
        text.contains("activations, checkpointing on                50.93 GB"),
        "{text}"
    );
    assert!(
        text.contains("features peak                                104."),
        "{text}"
    );
    let text = plan(&[
        "--set",
        "update.shard_optimizer=false",
        "--set",
        "update.shard_gradients=false",
    ]);
    eprintln!("{text}");
    assert!(text.contains("8.19 B parameters, bf16"), "{text}");
    assert!(
        text.contains("master weights (f32)                         32.76 GB"),
        "{text}"
    );
    assert!(text.contains("update    does NOT fit"), "{text}");
    assert!(text.contains("rollout   fits"), "{text}");
    assert!(
        text.contains("would fit with its optimizer state sharded over 8 devices"),
        "{text}"
    );
    // Without the model's config.json, a source named like a known model plans with its
    // published shape: the same numbers as its config.json gives.
    let by_name = |args: &[&str]| {
        let mut all = vec![
            "plan",
            "--config",
            cfg.to_str().unwrap(),
            "--memory",
            "141GB",
            "--devices",
            "8",
            "--write-rate",
            "0.5",
            "--pass-rate",
            "1",
        ];
        all.extend_from_slice(args);
        String::from_utf8_lossy(&ok(deltarl(Path::new("unused"), &all)).stdout).to_string()
    };
    assert_eq!(by_name(&[]), plan(&[]));
    assert_eq!(by_name(&["--model", "Qwen/Qwen3-8B-Base"]), plan(&[]));
    // A source nobody knows: the error says what to pass.
    let out = deltarl(
        Path::new("unused"),
        &[
            "plan",
            "--config",
            cfg.to_str().unwrap(),
            "--set",
            "model.source=\"/models/mine\"",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/models/mine") && err.contains("--model-config") && err.contains("qwen3-8b"),
        "{err}"
    );
    let out = deltarl(
        Path::new("unused"),
        &[
            "plan",
            "--config",
            cfg.to_str().unwrap(),
            "--memory",
            "lots",
        ],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a size"));
    // Impossible sizes are refused, never "fits".
    let zeros = dir.path().join("zeros.json");
    std::fs::write(
        &zeros,
        r#"{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 0,
            "hidden_size": 0, "intermediate_size": 0, "num_hidden_layers": 0,
            "num_attention_heads": 0, "num_key_value_heads": 0, "head_dim": 0,
            "max_position_embeddings": 0, "rope_theta": 1, "tie_word_embeddings": false}"#,
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    for (args, says) in [
        (
            vec!["--model-config", zeros.to_str().unwrap()],
            "`vocab_size` is 0",
        ),
        (vec!["--memory", "0GB"], "no memory"),
        (
            vec!["--write-rate", "0", "--pass-rate", "1"],
            "--write-rate 0: expected GB/s",
        ),
        (
            vec!["--write-rate", "1", "--pass-rate", "NaN"],
            "--pass-rate NaN: expected GB/s",
        ),
        (vec!["--write-rate", "1"], "--pass-rate"),
        (
            vec!["--prompt-tokens", "18446744073709551615"],
            "--prompt-tokens 18446744073709551615",
        ),
    ] {
        let mut all = vec!["plan", "--config", c];
        all.extend(args);
        let out = deltarl(Path::new("unused"), &all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{err}");
    }
}

/// The host's time on the features file: written once at the write rate, and read
/// `K + 2` times by the coefficient stage at the pass rate (given here, so exactly; by
/// default measured on a sample, positive and finite); under torchrun rank 0's features
/// process holds a piece besides its pass, not its share of the rows.
#[test]
fn the_plan_times_the_features_file_and_bounds_a_rank() {
    let cfg = repo().join("configs/qwen3-8b-dapo-math.toml");
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["plan", "--config", cfg.to_str().unwrap(), "--json"];
        args.extend_from_slice(extra);
        serde_json::from_slice(&ok(deltarl(Path::new("unused"), &args)).stdout).unwrap()
    };
    let given = ["--write-rate", "0.5", "--pass-rate", "2"];
    for (k, passes) in [("1", 3), ("3", 5)] {
        let refine = format!("coeffs.refine_steps={k}");
        let mut args = given.to_vec();
        args.extend(["--set", &refine]);
        let v = json(&args);
        let bytes = v["host"]["features_file"].as_f64().unwrap();
        assert_eq!(v["wall"]["coeffs_passes"], passes);
        let close = |a: &serde_json::Value, b: f64| (a.as_f64().unwrap() - b).abs() <= 1e-9 * b;
        assert!(close(&v["wall"]["features_write_s"], bytes / 0.5e9), "{v}");
        assert!(
            close(&v["wall"]["coeffs_s"], passes as f64 * bytes / 2e9),
            "{v}"
        );
        assert_eq!(v["rates"]["measured"], false);
    }
    let one = json(&given);
    let eight = json(&[&given[..], &["--devices", "8"]].concat());
    let resident = |v: &serde_json::Value| v["host"]["features_resident"].as_u64().unwrap();
    // Worst case, 128 x 16 responses of 20,480 tokens: a rank's share, 256 responses of
    // 20,480 x (4 x 4,096 + 12) bytes (decoded, f32), is 85.96 GB; it waits on disk, and
    // rank 0 holds one piece of 2 responses besides its own pass (a few GB).
    assert_eq!(eight["host_workload"]["responses"], 2048);
    let share = 256u64 * 20_480 * (4 * 4096 + 12);
    let pass = 2 * 20_480 * (4 * 4096 + 12);
    assert!(resident(&eight) > resident(&one), "{eight}");
    assert!(resident(&eight) < resident(&one) + pass, "{eight}");
    assert!(resident(&eight) < share / 16, "{eight}");
    // Measured: rates of this machine, positive and finite (a tiny model: a quick sample).
    let tiny = repo().join("configs/tiny-arith.toml");
    let out = ok(deltarl(
        Path::new("unused"),
        &[
            "plan",
            "--config",
            tiny.to_str().unwrap(),
            "--prompt-tokens",
            "64",
            "--json",
        ],
    ));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rates"]["measured"], true);
    for key in ["write", "pass"] {
        let r = v["rates"][key].as_f64().unwrap();
        assert!(r.is_finite() && r > 0.0, "{v}");
    }
}
