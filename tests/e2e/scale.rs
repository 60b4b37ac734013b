//! A real vocabulary size in bf16.

use crate::common::*;

/// The realistic shape on CPU: Qwen3's 151,936-token vocabulary with a byte-level BPE of
/// that size, bf16 compute over f32 master weights, 256-token responses, one iteration
/// through every stage.
#[test]
fn a_real_vocabulary_in_bf16_runs_every_stage() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let model = dir.path().join("q152k");
    let out = ok(deltarl(
        &runs,
        &[
            "random-model",
            "--out",
            model.to_str().unwrap(),
            "--dtype",
            "bf16",
            "--max-positions",
            "512",
        ],
    ));
    assert!(String::from_utf8_lossy(&out.stderr).contains("vocabulary 151936"));
    let problems: Vec<String> = (0..4)
        .map(|i| format!("What is {i} + {i}? Think step by step."))
        .collect();
    let cfg = file_config(
        dir.path(),
        "real",
        &model,
        &problems,
        "dtype = \"bf16\"",
        r#"[rollout]
prompts_per_iter = 2
samples_per_prompt = 4
max_new_tokens = 256
# A random model never answers right: a stop string and a penalty over the whole length
# give its responses different lengths and rewards, so the update has a real gradient.
stop = ["a"]
[score]
overlong_buffer = 255
[features]
chunk_rows = 4
[update]
micro_batch_rows = 4
optimizer_steps = 2
lr = 1e-6
[eval]
every = 0
"#,
    );
    // Shards of at most 40 MB: the 78 MB bf16 embedding gets one of its own.
    let out = ok(iterate(
        &runs,
        &cfg,
        "real",
        &["--iters", "1", "--set", "checkpoint.shard_mb=40"],
    ));
    let log = String::from_utf8_lossy(&out.stderr);
    eprintln!("{log}");
    let it = runs.join("real/iter-0001");
    let (rollouts, _) =
        deltarl_schemas::read_path::<deltarl_schemas::RolloutRow>(&it.join("rollouts.parquet"))
            .unwrap();
    assert_eq!(rollouts.len(), 8);
    assert!(rollouts.iter().all(|r| r.response_token_ids.len() <= 256));
    let lens: std::collections::BTreeSet<usize> = rollouts
        .iter()
        .map(|r| r.response_token_ids.len())
        .collect();
    assert!(lens.len() > 1, "{lens:?}");
    assert!(rollouts
        .iter()
        .flat_map(|r| &r.response_token_ids)
        .any(|&t| t > 70_000));
    // A bf16 model's features are stored at bf16 precision (2 bytes a value, the column's
    // metadata says so), and polars reads them as bytes that numpy widens to f32.
    let layout = deltarl_schemas::vector_layout(&it.join("features.parquet"), "features")
        .unwrap()
        .unwrap();
    assert_eq!(layout.precision, deltarl_schemas::Precision::Bf16);
    run_python(
        r#"
import sys, numpy as np, polars as pl
f = pl.read_parquet(sys.argv[1])
k = int(pl.read_parquet_metadata(sys.argv[1])["deltarl.k"])
b = np.frombuffer(b"".join(f["features"]), "<u2")
v = (b.astype("<u4") << 16).view("<f4").reshape(-1, k)
assert v.shape[0] == f["entropy"].list.len().sum(), (v.shape, f["entropy"].list.len().sum())
assert v.size > 0 and np.isfinite(v).all()
"#,
        &[&it.join("features.parquet")],
    );
    // bf16 sampler and bf16 trainer disagree more than f32 ones, but boundedly.
    let u: UpdateSummary = summary_of(&runs.join("real"), 1);
    assert!(u.mismatch.tokens > 0 && u.mismatch.max_abs.is_finite());
    assert_eq!(u.skipped_steps, 0);
    let grad_norm = u.grad_norm.unwrap();
    assert!(grad_norm > 0.0 && grad_norm.is_finite(), "{u:?}");
    // The new policy is saved in bf16 with f32 master weights in the optimizer state.
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(it.join("policy/config.json")).unwrap()).unwrap();
    assert_eq!(config["torch_dtype"], "bfloat16");
    let opt = std::fs::read(it.join("optimizer/optimizer.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(opt[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8_lossy(&opt[8..8 + header_len]);
    assert!(
        header.contains("\"master.model.embed_tokens.weight\""),
        "{header}"
    );
    // Sharded as transformers writes it; the run is complete with its shards recorded, and
    // the next iteration samples from the sharded policy.
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(it.join("policy/model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    let files: std::collections::BTreeSet<&str> = index["weight_map"]
        .as_object()
        .unwrap()
        .values()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(files.len() >= 2, "{files:?}");
    assert!(!it.join("policy/model.safetensors").exists());
    let status = ok(deltarl(&runs, &["status", "--run", "real", "--verify"]));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        !text.contains("stale") && !text.contains("missing"),
        "{text}"
    );
    ok(deltarl(
        &runs,
        &["stage", "rollout", "--run", "real", "--iter", "2"],
    ));
}

/// A verl user's first run: a verl-format RL Parquet (message-list prompts with a system
/// turn, `reward_model.ground_truth`, `data_source`) and a random Qwen2.5-shaped model
/// (q/k/v biases, no q/k norm) through every stage; the policy it writes opens in
/// transformers.
#[test]
fn a_verl_dataset_on_a_qwen2_model_runs_every_stage() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let model = dir.path().join("qwen2");
    small_random_model(
        &model,
        &[
            "--family",
            "qwen2",
            "--vocab",
            "2048",
            "--max-positions",
            "256",
        ],
    );
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["model_type"], "qwen2");
    let data = dir.path().join("train.parquet");
    run_python(
        r#"
import sys, polars as pl
n = 4
pl.DataFrame({
    "data_source": ["openai/gsm8k"] * n,
    "prompt": [[{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": f"What is {i} + {i}?"}] for i in range(n)],
    "ability": ["math"] * n,
    "reward_model": [{"style": "rule", "ground_truth": str(2 * i)} for i in range(n)],
    "extra_info": [{"index": i, "split": "train"} for i in range(n)],
}).write_parquet(sys.argv[1])
"#,
        &[&data],
    );
    let base = repo()
        .join("configs/tiny-arith.toml")
        .canonicalize()
        .unwrap();
    let config = dir.path().join("verl.toml");
    std::fs::write(
        &config,
        format!(
            r#"extends = {:?}
[model]
source = {:?}
[data]
source = {:?}
template = "User:\n{{question}}\nAssistant:\n"
[rollout]
prompts_per_iter = 2
samples_per_prompt = 4
max_new_tokens = 32
stop = ["a"]
[score]
overlong_buffer = 31
[eval]
every = 0
"#,
            base.display().to_string(),
            model.display().to_string(),
            data.display().to_string()
        ),
    )
    .unwrap();
    ok(iterate(&runs, &config, "verl", &["--iters", "1"]));
    let it = runs.join("verl/iter-0001");
    for f in ["rollouts", "scores", "features", "coeffs", "update"] {
        assert!(it.join(format!("{f}.parquet")).exists(), "{f}");
    }
    // The trained policy is a Qwen2 folder transformers loads.
    run_python(
        r#"
import sys, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
assert type(m).__name__ == "Qwen2ForCausalLM", type(m)
assert m.model.layers[0].self_attn.q_proj.bias is not None
"#,
        &[&it.join("policy")],
    );
}
