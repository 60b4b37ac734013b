//! The configuration's tests: every shipped config loads, the 8B one is the authors' run script,
//! extraction policies by name, the KV-cache budget, no correct answer penalised for length.
#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn every_shipped_config_loads_and_validates() {
    let mut n = 0;
    for e in std::fs::read_dir(shipped_configs()).unwrap() {
        let path = e.unwrap().path();
        Resolved::load(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        n += 1;
    }
    assert!(n >= 7, "{n} configs");
}

#[test]
fn the_8b_config_is_the_authors_run_script() {
    let r = Resolved::load(&shipped_configs().join("qwen3-8b-dapo-math.toml")).unwrap();
    let o = &r.opts;
    assert_eq!(o.model.dtype, deltarl_model::Dtype::Bf16);
    assert_eq!(
        (o.rollout.prompts_per_iter, o.rollout.samples_per_prompt),
        (128, 16)
    );
    assert_eq!(
        (o.rollout.max_new_tokens, o.rollout.max_prompt_tokens),
        (20480, 2048)
    );
    assert_eq!(
        (o.rollout.temperature, o.rollout.top_p, o.rollout.top_k),
        (1.0, 1.0, 0)
    );
    assert!(r.overlong_penalty && !o.score.dynamic_sampling);
    assert_eq!(
        (o.score.overlong_buffer, o.score.overlong_factor),
        (4096, 1.0)
    );
    assert_eq!(o.features.project_dim, 0, "full-width features");
    // Validation as the authors run it: every 4 iterations, T = 1, top-p 0.7, n = 1.
    assert_eq!(
        (
            o.eval.every,
            o.eval.samples,
            o.eval.temperature,
            o.eval.top_p
        ),
        (4, 1, 1.0, 0.7)
    );
    assert_eq!(o.eval.benchmarks.len(), 7);
    assert_eq!(
        (
            o.checkpoint.keep_last,
            o.checkpoint.save_every,
            o.checkpoint.keep_features
        ),
        (4, 0, 2)
    );
    assert_eq!(
        r.coeffs.estimator,
        Estimator::Delta(DeltaSettings {
            refine_steps: 1,
            lam_min: 0.8,
            lam_max: 1.2,
            scope: deltarl_coeffs::Scope::Batch,
        })
    );
    let u = &o.update;
    assert_eq!((u.eps_low, r.eps_high, u.dual_clip), (0.2, 0.28, 10.0));
    assert_eq!(
        (u.lr, u.warmup_steps, u.weight_decay, u.grad_clip),
        (1e-6, 0, 0.1, 1.0)
    );
    assert_eq!(u.optimizer_steps, 4, "mini-batches of 32 of 128 prompts");
    assert_eq!((u.kl_coef, u.entropy_coef), (0.0, 0.0));
    assert_eq!(u.old_logprobs, deltarl_update::OldLogprobs::Recompute);
    assert_eq!(r.aggregation, Aggregation::TokenMean);
    assert!(u.activation_checkpointing);
    assert_eq!(o.rollout.kv_cache_tokens, 655_360);
}

#[test]
fn extraction_policies_and_fallbacks_are_named_values() {
    let base = shipped_configs().join("tiny-arith.toml");
    let r = Resolved::load_with(&base, &["score.extract=\"lenient\"".into()]).unwrap();
    assert_eq!(r.opts.score.extract, deltarl_verify::Policy::Lenient);
    let r = Resolved::load(&base).unwrap();
    assert_eq!(r.opts.score.extract, deltarl_verify::Policy::Boxed);
    for bad in [
        "score.extract=\"loose\"",
        "score.extract_fallbacks=[\"answer-is\", \"nope\"]",
    ] {
        let err = format!(
            "{:#}",
            Resolved::load_with(&base, &[bad.into()]).unwrap_err()
        );
        let key = bad.split('=').next().unwrap();
        assert!(
            err.contains(key.trim_start_matches("score.")),
            "{bad}: {err}"
        );
    }
}

#[test]
fn a_kv_cache_budget_must_hold_one_response() {
    let base = shipped_configs().join("tiny-arith.toml");
    let err = format!(
        "{:#}",
        Resolved::load_with(&base, &["rollout.kv_cache_tokens=10".into()]).unwrap_err()
    );
    assert!(
        err.contains("rollout.kv_cache_tokens") && err.contains("41"),
        "{err}"
    );
    Resolved::load_with(&base, &["rollout.kv_cache_tokens=41".into()]).unwrap();
}

#[test]
fn an_error_a_set_caused_names_the_set_not_the_file() {
    let path = shipped_configs().join("tiny-arith.toml");
    let err = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        format!("{:#}", Resolved::load_with(&path, &sets).unwrap_err())
    };
    let e = err(&["rollout.top_k=abc"]);
    assert!(
        e.starts_with("--set rollout.top_k=abc: config key `rollout.top_k`"),
        "{e}"
    );
    let e = err(&["update.lr=nan"]);
    assert!(
        e.starts_with("--set update.lr=nan: config key `update.lr` = NaN"),
        "{e}"
    );
    // The last --set of a key is the one that counts.
    let e = err(&["rollout.top_k=1", "rollout.top_k=x"]);
    assert!(e.starts_with("--set rollout.top_k=x:"), "{e}");
    // A --set that makes a section no file has: serde names the section, not the key.
    let e = err(&["update.lr=1e-5", "optim.lr=1"]);
    assert!(
        e.starts_with("--set optim.lr=1: config key `optim`: unknown field `optim`"),
        "{e}"
    );
    // A key that only starts with the section's name is not under it.
    let e = err(&["optim.lr=1", "optimizer=1"]);
    assert!(e.starts_with("--set optim.lr=1:"), "{e}");
    // A bad value from the file still names the file.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "extends = {:?}\n[rollout]\ntop_k = \"abc\"\n",
            path.display().to_string()
        ),
    )
    .unwrap();
    let e = format!(
        "{:#}",
        Resolved::load_with(&bad, &["update.lr=1e-5".into()]).unwrap_err()
    );
    assert!(
        e.starts_with(&format!("{}: config key `rollout.top_k`", bad.display())),
        "{e}"
    );
}

#[test]
fn the_oracle_reads_its_task_from_the_data_source_and_leaves_hashes_alone() {
    let varied = shipped_configs().join("tiny-steps-varied.toml");
    let plain = Resolved::load(&varied).unwrap();
    // An oracle value at its default is not serialised: configurations without the key
    // keep their hashes.
    let zero = Resolved::load_with(&varied, &["coeffs.oracle_value=0".into()]).unwrap();
    assert_eq!(plain.hash(), zero.hash());
    let sets = [
        "coeffs.estimator=\"oracle-tokens\"".to_string(),
        "coeffs.oracle_value=0.5".into(),
    ];
    let r = Resolved::load_with(&varied, &sets).unwrap();
    assert_eq!(
        r.coeffs.estimator,
        Estimator::OracleTokens {
            task: deltarl_data::Task::Varied,
            value: 0.5
        }
    );
    assert_ne!(r.hash(), plain.hash());
    // tiny-arith has no phrases to label.
    let e =
        Resolved::load_with(&shipped_configs().join("tiny-arith.toml"), &sets[..1]).unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("coeffs.estimator") && e.contains("tiny-arith"),
        "{e}"
    );
}

#[test]
fn the_first_error_oracle_resolves_on_the_arithmetic_tasks_only() {
    let sets = ["coeffs.estimator=\"oracle-prefix\"".to_string()];
    for (file, task) in [
        ("tiny-arith.toml", deltarl_data::Task::Arith),
        ("tiny-steps.toml", deltarl_data::Task::Steps),
        ("tiny-steps-varied.toml", deltarl_data::Task::Varied),
    ] {
        let r = Resolved::load_with(&shipped_configs().join(file), &sets).unwrap();
        assert_eq!(
            r.coeffs.estimator,
            Estimator::OraclePrefix { task, value: 0.0 },
            "{file}"
        );
        assert_eq!(
            r.shown().unwrap()["coeffs"]["estimator"].as_str(),
            Some("oracle-prefix")
        );
    }
    // tiny-code's programs have no first arithmetic error to find.
    let e = Resolved::load_with(&shipped_configs().join("tiny-code.toml"), &sets).unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("coeffs.estimator") && e.contains("tiny-code"),
        "{e}"
    );
}

#[test]
fn ktae_and_fipo_resolve_by_key_and_leave_hashes_alone() {
    let arith = shipped_configs().join("tiny-arith.toml");
    let plain = Resolved::load(&arith).unwrap();
    // Their tables at their defaults are not serialised: configurations keep their hashes.
    let defaults = [
        "coeffs.ktae.top=1.0".to_string(),
        "update.fipo.decay_rate=0".into(),
        "update.fipo.clip_range=0.2".into(),
    ];
    assert_eq!(
        Resolved::load_with(&arith, &defaults).unwrap().hash(),
        plain.hash()
    );
    let sets = [
        "coeffs.estimator=\"ktae\"".to_string(),
        "coeffs.ktae.beta_ig=2".into(),
        "coeffs.ktae.tf=false".into(),
    ];
    let r = Resolved::load_with(&arith, &sets).unwrap();
    assert_eq!(
        r.coeffs.estimator,
        Estimator::Ktae(deltarl_coeffs::KtaeSettings {
            alpha: 1.0,
            beta: 2.0,
            tf: false,
            top: 1.0
        })
    );
    assert_ne!(r.hash(), plain.hash());
    let f = Resolved::load_with(&arith, &["update.fipo.decay_rate=32".into()]).unwrap();
    let u = &f.opts.update;
    let fk = u.fipo.settings(u.dual_clip).unwrap();
    // 2^(-1/32), computed the same way: exact.
    assert_eq!(fk.gamma, 2f64.powf(-1.0 / 32.0));
    assert_eq!(fk.clip, Some((1.0, 1.2)));
    assert_eq!((fk.ratio_cap, fk.safety), (Some(10.0), Some(4.0)));
    let u = &plain.opts.update;
    assert!(u.fipo.settings(u.dual_clip).is_none());
    // Bad values are refused naming the key.
    for (set, key) in [
        ("coeffs.ktae.top=-1", "coeffs.ktae.top"),
        ("coeffs.ktae.alpha=1e9", "coeffs.ktae.alpha"),
        ("update.fipo.clip_range=1", "update.fipo.clip_range"),
        ("update.fipo.decay_rate=-3", "update.fipo.decay_rate"),
        (
            "update.fipo.safety_threshold=0.5",
            "update.fipo.safety_threshold",
        ),
    ] {
        let e = Resolved::load_with(&arith, &[set.into()]).unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains(key), "{set}: {e}");
    }
    let both_zero = [
        "coeffs.ktae.alpha=0".to_string(),
        "coeffs.ktae.beta_ig=0".into(),
    ];
    let e = format!("{:#}", Resolved::load_with(&arith, &both_zero).unwrap_err());
    assert!(
        e.contains("coeffs.ktae.beta_ig") && e.contains("both be 0"),
        "{e}"
    );
}

/// ZeRO-2 without ZeRO-1 is refused naming both keys (the gradient sums live with the
/// optimizer state's owner).
#[test]
fn sharded_gradients_need_the_sharded_optimizer() {
    let arith = shipped_configs().join("tiny-arith.toml");
    let e = Resolved::load_with(&arith, &["update.shard_gradients=true".into()]).unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("update.shard_gradients") && e.contains("update.shard_optimizer = true"),
        "{e}"
    );
}

/// DAPO's overlong penalty is for answers that ramble: on every shipped config of a built-in
/// task, the longest correct answer (its largest problem, the longest wording, the end token)
/// ends before the penalty starts, so no correct answer is penalised.
#[test]
fn no_shipped_config_penalises_a_correct_answer_for_its_length() {
    use deltarl_data::{code::Linear, Problem, Task};
    let mut checked = Vec::new();
    for e in std::fs::read_dir(shipped_configs()).unwrap() {
        let path = e.unwrap().path();
        let r = Resolved::load(&path).unwrap();
        let Some(task) = r.opts.data.source.task() else {
            continue;
        };
        if !r.overlong_penalty {
            continue;
        }
        let longest = match task {
            Task::Code => Linear::LONGEST.solution(None),
            Task::Arith | Task::Steps | Task::Varied | Task::Filler | Task::Filler80 => {
                task.solution(&Problem::LONGEST, None).unwrap()
            }
        };
        // One token a character (the tiny tokenizer), and the end token.
        let tokens = longest.chars().count() + 1;
        let free = r.opts.rollout.max_new_tokens - r.opts.score.overlong_buffer;
        assert!(
            tokens <= free,
            "{}: the longest correct answer ({tokens} tokens, {longest:?}) is penalised \
             past {free} tokens",
            path.display()
        );
        checked.push(tokens);
    }
    // tiny-arith (33 tokens, the tightest), tiny-steps, -varied, -code and their comparisons.
    assert!(checked.len() >= 4 && checked.contains(&33), "{checked:?}");
}

/// Every shipped configuration's hash, pinned: a run's `run.hash` is this, and `iterate`
/// refuses to continue a run whose configuration hashes otherwise. A new option must leave
/// configurations that do not set it alone (not serialised at its default), or the change
/// says why every run of that configuration must start over. (The two Qwen3 configs
/// changed with ZeRO-2, `update.shard_gradients = true`; SmolLM2's with passes of 8 rows
/// and the shared-prompt layout; tiny-steps-filler's two with the filler after the answer,
/// `rollout.max_new_tokens = 288`; the others are those of the binary before it.)
#[test]
fn shipped_configurations_keep_their_hashes() {
    const PINNED: [(&str, &str); 18] = [
        (
            "dapo.toml",
            "6145f58cbf6f9917fd90b9df07cff6a2ac69febb3cd94bb3b417f0d13f848663",
        ),
        (
            "delta.toml",
            "825a3cfac831dcb451f769359995a20e6cb18ea3382c54cac4b616e25a61791e",
        ),
        (
            "drgrpo.toml",
            "1dbe8825902e1b5d4a87268ccb6139861d1acbcd7f49c481e3690377d58f5c5a",
        ),
        (
            "grpo.toml",
            "f2bbd8477cb9a9c7c816fde78ad73d49e8d1d42dd8cbb52d84eb2a97db0d49ff",
        ),
        (
            "qwen3-1.7b-dapo-math.toml",
            "1fcf6205add5ed75946a21e635ab6b04fc16a8fdb44e511d99769b2e494ba595",
        ),
        (
            "qwen3-8b-dapo-math.toml",
            "b785437e1fe8b5886d963ab7465591924b110912c96acd7ceabc615318eafe61",
        ),
        (
            "smollm2-math.toml",
            "efcbea371e0b5333d0fee9a632b8f8ffd1089ddca60bb67243ead663403e4ab8",
        ),
        (
            "tiny-arith-compare.toml",
            "637207bab0af695962336b5ec3042bd700c4c6fb3ad2a3a91ddcb6cb593a40b5",
        ),
        (
            "tiny-arith.toml",
            "825a3cfac831dcb451f769359995a20e6cb18ea3382c54cac4b616e25a61791e",
        ),
        (
            "tiny-code.toml",
            "f8a360baa2646a2d0f9f38e279701c008c451d59f7ed83f60112ca290bede389",
        ),
        (
            "tiny-steps-compare.toml",
            "b3b01aaf0e6bf624b2ee6d576ac9b20e52a5663a32b75409996be9bf38676751",
        ),
        (
            "tiny-steps-filler-80-compare.toml",
            "3b4a9eb90e803d8d197721646acc71bc6924ef1e6037a3ae24971554c215d7af",
        ),
        (
            "tiny-steps-filler-80.toml",
            "073fb14e3bbeae3557a2c0974a73dff7d0ac26c3c77a6d695b5607320fcc44d7",
        ),
        (
            "tiny-steps-filler-compare.toml",
            "7b578509a9f384ba758b8a55ce5577c3f99c5df7bc3dbd77d22887c584366536",
        ),
        (
            "tiny-steps-filler.toml",
            "88562cd02d5c1cbad2d279b32aa77b3d94f5b3ad0a3442d0f44da5934efd8af7",
        ),
        (
            "tiny-steps-varied-compare.toml",
            "41adc235a22e1dcbd45c9f20df45014fba511198540fa6123bda6ec9fde746ff",
        ),
        (
            "tiny-steps-varied.toml",
            "912f2153b550eb9f0fc76c8e8ab1f8a92d5a511e0ff1a2e0d3cbc77d4a1d2a4a",
        ),
        (
            "tiny-steps.toml",
            "5544a441691690411aab5d778727b74d103489f663fd65f97ae1a113f2713152",
        ),
    ];
    let mut got = Vec::new();
    for e in std::fs::read_dir(shipped_configs()).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        got.push((name, Resolved::load(&path).unwrap().hash()));
    }
    got.sort();
    let pinned: Vec<(String, String)> = PINNED
        .iter()
        .map(|(n, h)| (n.to_string(), h.to_string()))
        .collect();
    assert_eq!(got, pinned);
}
