//! Parity with transformers on small random Qwen3, Qwen2 (Qwen2.5's architecture) and
//! Llama 3 (llama3 rotary scaling) checkpoints made by `hf_reference.py`: logits within
//! the f32 round-off bound (`deltarl_model::roundoff`), the same greedy decoding of 32
//! tokens up to any near-tie, and checkpoints we save open in transformers with the same
//! logits. Tied and untied embeddings, and kv_heads < heads, are covered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use deltarl_model::generate::{generate, Request, SampleSettings};
use deltarl_model::{load, save, save_sharded, Dtype};
use tch::{Device, Kind, Tensor};

fn python() -> String {
    std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/hf_reference.py")
        .display()
        .to_string()
}

fn py(args: &[&str]) -> String {
    let out = Command::new(python())
        .arg(script())
        .args(args)
        .output()
        .expect("python with transformers");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// transformers' logits for the ids, from a model folder.
fn transformers_logits(folder: &Path, ids: &[Vec<i64>]) -> Vec<f64> {
    let text = py(&[
        "logits",
        folder.to_str().unwrap(),
        &serde_json::to_string(ids).unwrap(),
    ]);
    serde_json::from_str(text.trim()).unwrap()
}

fn max_diff(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "logits of other shapes");
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - y).abs())
        .fold(0.0, f64::max)
}

fn check(tied: u32, kv: u32, family: &str) {
    tch::set_num_threads(2);
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("hf");
    py(&[
        "make",
        folder.to_str().unwrap(),
        &tied.to_string(),
        &kv.to_string(),
        family,
    ]);
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("reference.json")).unwrap())
            .unwrap();
    let ids: Vec<Vec<i64>> = serde_json::from_value(reference["ids"].clone()).unwrap();
    let want: Vec<f64> = serde_json::from_value(reference["logits"].clone()).unwrap();
    let greedy: Vec<u32> = serde_json::from_value(reference["greedy"].clone()).unwrap();
    let gaps: Vec<f64> = serde_json::from_value(reference["greedy_gaps"].clone()).unwrap();
    assert_eq!(gaps.len(), greedy.len());

    // 1. Logits.
    let policy = load(&folder, Device::Cpu, Dtype::F32).unwrap();
    let flat: Vec<i64> = ids.concat();
    let input = Tensor::from_slice(&flat).view([ids.len() as i64, ids[0].len() as i64]);
    let logits = tch::no_grad(|| policy.model.forward(&input));
    let got = Vec::<f32>::try_from(logits.to_kind(Kind::Float).view([-1])).unwrap();
    // Two f32 evaluations summing in other orders (transformers' kernels vs ours): the
    // worst-case round-off bound of `deltarl_model::roundoff` for this shape and weights.
    let tol = policy.model.f32_logit_tolerance(ids[0].len());
    let d = max_diff(&got, &want);
    eprintln!(
        "tied={tied} kv={kv} {family}: max |logit diff| {d:e}, bound {tol:e} (scale {:.3})",
        policy.model.logit_scale()
    );
    assert!(
        d <= tol,
        "tied={tied} kv={kv}: max |logit diff| {d} > {tol}"
    );

    // 2. Greedy decoding of 32 tokens.
    let s = SampleSettings {
        temperature: 0.0,
        top_p: 1.0,
        top_k: 0,
        max_new_tokens: 32,
        eos_ids: Vec::new(),
        stop_strings: Vec::new(),
        max_batch_rows: 8,
        max_cache_tokens: None,
        session_rows: None,
    };
    let prompt: Vec<u32> = ids[0].iter().map(|&x| x as u32).collect();
    let out = generate(
        &policy.model,
        &policy.tokenizer,
        &[Request {
            prompt_ids: prompt,
            seeds: vec![0],
        }],
        &s,
        &mut |_, _| {},
    )
    .unwrap();
    // Greedy picks agree until the first step whose two largest logits lie within twice
    // what two evaluations differ by (either may win there). The worst case `tol` is
    // thousands of times what they differ by, and these random models' margins are often
    // below it, so the statistical size of the round-off is used, its premise checked on
    // the logits above: they differ by less than it.
    let typical = policy
        .model
        .f32_logit_statistical(ids[0].len() + greedy.len());
    assert!(
        d <= typical,
        "tied={tied} kv={kv}: logits differ by {d:e} > {typical:e}"
    );
    let sure = gaps
        .iter()
        .position(|&g| g <= 2.0 * typical)
        .unwrap_or(gaps.len());
    assert!(
        sure >= 24,
        "tied={tied} kv={kv}: a near-tie at step {sure}: {gaps:?}"
    );
    assert_eq!(out[0][0].tokens.len(), greedy.len());
    assert_eq!(
        out[0][0].tokens[..sure],
        greedy[..sure],
        "tied={tied} kv={kv}: greedy decoding differs"
    );

    // 3. What we save opens in transformers with the same logits.
    let saved = dir.path().join("saved");
    save(&policy, &saved).unwrap();
    let d = max_diff(&got, &transformers_logits(&saved, &ids));
    assert!(
        d <= tol,
        "tied={tied} kv={kv}: saved checkpoint differs in transformers by {d} > {tol}"
    );
    // And reloads here bit for bit.
    let again = load(&saved, Device::Cpu, Dtype::F32).unwrap();
    let l2 = tch::no_grad(|| again.model.forward(&input));
    assert!(l2.equal(&logits));

    // 4. Sharded (shards of at most 20 kB here): an index and several files, read by
    //    transformers and by us alike.
    let sharded = dir.path().join("sharded");
    let files = save_sharded(&policy, &sharded, 20_000).unwrap();
    assert!(files.len() > 2, "{files:?}");
    assert!(sharded.join("model.safetensors.index.json").exists());
    assert!(!sharded.join("model.safetensors").exists());
    assert!(
        max_diff(&got, &transformers_logits(&sharded, &ids)) <= tol,
        "sharded checkpoint differs in transformers"
    );
    let again = load(&sharded, Device::Cpu, Dtype::F32).unwrap();
    assert!(tch::no_grad(|| again.model.forward(&input)).equal(&logits));
}

#[test]
fn untied_gqa_matches_transformers() {
    check(0, 2, "qwen3");
}

#[test]
fn tied_mha_matches_transformers() {
    check(1, 4, "qwen3");
}

/// Qwen2 / Qwen2.5 (model_type "qwen2"): q/k/v biases, no q/k norm.
#[test]
fn qwen2_matches_transformers() {
    check(1, 2, "qwen2");
    check(0, 4, "qwen2");
}

/// Llama 3 (model_type "llama") with its llama3 rotary scaling.
#[test]
fn llama3_matches_transformers() {
    check(0, 2, "llama3");
}

#[test]
fn bad_folders_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let err = load(dir.path(), Device::Cpu, Dtype::F32)
        .unwrap_err()
        .to_string();
    assert!(err.contains("config.json"), "{err}");
    let folder = dir.path().join("hf");
    py(&["make", folder.to_str().unwrap(), "0", "2"]);
    // Unsupported architecture.
    let cfg_path = folder.join("config.json");
    let cfg = std::fs::read_to_string(&cfg_path).unwrap();
    std::fs::write(&cfg_path, cfg.replace("\"qwen3\"", "\"mistral\"")).unwrap();
    let err = load(&folder, Device::Cpu, Dtype::F32)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("mistral") && err.contains("qwen2") && err.contains("llama"),
        "{err}"
    );
    // A Qwen3 folder that says it is Qwen2: the architecture does not match the family.
    std::fs::write(&cfg_path, cfg.replace("\"qwen3\"", "\"qwen2\"")).unwrap();
    let err = load(&folder, Device::Cpu, Dtype::F32)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Qwen3ForCausalLM") && err.contains("Qwen2ForCausalLM"),
        "{err}"
    );
    // Shapes that do not match the config name the tensor.
    std::fs::write(
        &cfg_path,
        cfg.replace("\"intermediate_size\": 96", "\"intermediate_size\": 80"),
    )
    .unwrap();
    let err = load(&folder, Device::Cpu, Dtype::F32)
        .unwrap_err()
        .to_string();
    assert!(err.contains("mlp") && err.contains("shape"), "{err}");
    // A tokenizer larger than the vocabulary.
    std::fs::write(
        &cfg_path,
        cfg.replace("\"vocab_size\": 67", "\"vocab_size\": 10"),
    )
    .unwrap();
    let err = load(&folder, Device::Cpu, Dtype::F32)
        .unwrap_err()
        .to_string();
    assert!(err.contains("vocab_size") || err.contains("shape"), "{err}");
}
