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
    let prompts = dir.path().join("prompts.jsonl");
    let lines: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "{{\"id\": \"q{i}\", \"problem\": \"What is {i} + {i}? Think step by step.\", \"answer\": \"{}\"}}",
                2 * i
            )
        })
        .collect();
    std::fs::write(&prompts, lines.join("\n")).unwrap();
    let base = repo()
        .join("configs/tiny-arith.toml")
        .canonicalize()
        .unwrap();
    let cfg = dir.path().join("real.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"extends = {:?}
[model]
source = {:?}
dtype = "bf16"
[data]
source = {:?}
template = "User:\n{{question}}\nAssistant:\n"
[rollout]
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
            base.display().to_string(),
            model.display().to_string(),
            prompts.display().to_string()
        ),
    )
    .unwrap();
    let out = ok(iterate(&runs, &cfg, "real", &["--iters", "1"]));
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
    // bf16 sampler and bf16 trainer disagree more than f32 ones, but boundedly.
    let m = deltarl_schemas::Manifest::read(&it.join("manifest/update.json"))
        .unwrap()
        .unwrap();
    let mm = &m.summary["mismatch"];
    assert!(mm["tokens"].as_u64().unwrap() > 0 && mm["max_abs"].as_f64().unwrap().is_finite());
    assert_eq!(m.summary["skipped_steps"].as_u64(), Some(0));
    let grad_norm = m.summary["grad_norm"].as_f64().unwrap();
    assert!(grad_norm > 0.0 && grad_norm.is_finite(), "{}", m.summary);
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
}
