//! Mixed precision: bf16 compute over f32 master weights. One AdamW step at lr 1e-6 moves
//! every master weight exactly as an f32 step does, and the bf16 working copy is the master
//! rounded. (A step with a non-finite gradient norm is skipped: `loss.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use deltarl_optim::{AdamW, AdamWSettings};
use tch::{nn, Device, Kind, Tensor};

/// The learning rate of the tiny step.
const LR: f64 = 1e-6;

const ADAM: AdamWSettings = AdamWSettings {
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weight_decay: 0.1,
};

/// A store with one parameter `w` holding `init`, in `kind`.
fn store(init: &Tensor, kind: Kind) -> (nn::VarStore, Tensor) {
    let mut vs = nn::VarStore::new(Device::Cpu);
    let _ = vs.root().var_copy("w", init);
    if kind == Kind::BFloat16 {
        vs.bfloat16();
    }
    let w = vs.variables()["w"].shallow_clone();
    (vs, w)
}

/// Gives `w` the gradient `g` (through a linear loss, in w's own dtype).
fn set_grad(w: &Tensor, g: &Tensor) {
    (w.to_kind(Kind::Float) * g).sum(Kind::Float).backward();
}

fn values(t: &Tensor) -> Vec<f32> {
    let t = t.to_kind(Kind::Float).flatten(0, -1);
    Vec::<f32>::try_from(&t).unwrap()
}

#[test]
fn a_tiny_step_moves_every_master_weight_as_in_f32() {
    tch::manual_seed(3);
    // N(0, 0.02) weights, representable in bf16, so both stores start from the same values.
    let init = (Tensor::randn([64, 64], (Kind::Float, Device::Cpu)) * 0.02)
        .to_kind(Kind::BFloat16)
        .to_kind(Kind::Float);
    let g = Tensor::randn([64, 64], (Kind::Float, Device::Cpu))
        .to_kind(Kind::BFloat16)
        .to_kind(Kind::Float);
    let (vs_b, w_b) = store(&init, Kind::BFloat16);
    let (vs_f, w_f) = store(&init, Kind::Float);
    assert_eq!(w_b.kind(), Kind::BFloat16);
    let mut opt_b = AdamW::new(&vs_b, ADAM);
    let mut opt_f = AdamW::new(&vs_f, ADAM);
    assert!(
        opt_f.master("w").is_none(),
        "f32 parameters need no master copy"
    );
    set_grad(&w_b, &g);
    set_grad(&w_f, &g);
    opt_b.step(LR);
    opt_f.step(LR);

    let master = values(opt_b.master("w").unwrap());
    let (before, f32_step) = (values(&init), values(&w_f));
    // Every master weight moved (a 1e-6 step is far above f32's resolution at 0.02) ...
    let moved = master.iter().zip(&before).filter(|(a, b)| a != b).count();
    assert_eq!(moved, master.len());
    // ... exactly as the f32 step moved the f32 weights (the same f32 arithmetic).
    // Below half an f32 ulp at 0.02 (ulp 1.9e-9): the same bits.
    assert_eq!(master.len(), f32_step.len());
    for (m, f) in master.iter().zip(&f32_step) {
        assert!((m - f).abs() <= 1e-9, "{m} vs {f}");
    }
    // The working copy is the master rounded to bf16.
    let rounded = opt_b.master("w").unwrap().to_kind(Kind::BFloat16);
    assert!(w_b.equal(&rounded));
    // Which is why the master is needed: rounded to bf16, most weights did not move.
    let unchanged = values(&w_b)
        .iter()
        .zip(&before)
        .filter(|(a, b)| a == b)
        .count();
    assert!(
        unchanged * 2 > master.len(),
        "{unchanged} of {} unchanged",
        master.len()
    );
}

#[test]
fn the_master_round_trips_through_the_optimizer_state() {
    tch::manual_seed(4);
    let init = (Tensor::randn([8, 8], (Kind::Float, Device::Cpu)) * 0.02)
        .to_kind(Kind::BFloat16)
        .to_kind(Kind::Float);
    let (vs, w) = store(&init, Kind::BFloat16);
    let mut opt = AdamW::new(&vs, ADAM);
    set_grad(&w, &Tensor::ones([8, 8], (Kind::Float, Device::Cpu)));
    opt.step(LR);
    let dir = tempfile::tempdir().unwrap();
    opt.save(dir.path(), None).unwrap();
    // A fresh optimizer over a fresh bf16 copy of the saved working weights.
    let (vs2, w2) = store(&w.to_kind(Kind::Float), Kind::BFloat16);
    let mut again = AdamW::new(&vs2, ADAM);
    again.load(dir.path()).unwrap();
    assert!(again.master("w").unwrap().equal(opt.master("w").unwrap()));
    assert!(w2.equal(&w));
    assert_eq!(again.step, 1);
}

/// `copies` copies of one 9-token response, each its own prompt group.
fn copies(copies: usize) -> Vec<deltarl_update::TrainRow> {
    (0..copies)
        .map(|i| deltarl_update::TrainRow {
            prompt_id: format!("p{i}"),
            prompt_ids: vec![3, 4, 5],
            response_ids: vec![6, 9, 12, 7, 20, 8, 11, 6, 15],
            old_logprobs: vec![-3.0; 9],
            advantage: 0.7,
            coeff: vec![1.0; 9],
            shift: Vec::new(),
        })
        .collect()
}

/// The f32 gradient of every parameter after one update of the bf16 policy saved in
/// `folder` on `rows`, one response a forward/backward pass (no clipping).
fn gradients(folder: &std::path::Path, rows: &[deltarl_update::TrainRow]) -> Vec<(String, Tensor)> {
    let p = deltarl_model::load(folder, Device::Cpu, deltarl_model::Dtype::Bf16).unwrap();
    let mut opt = AdamW::new(&p.vs, ADAM);
    // The shared settings are one step, one response a pass, no clipping: only the dual
    // clip and the seed are this test's own.
    let base = common::settings();
    let s = deltarl_update::Settings {
        loss: deltarl_update::LossSettings {
            surrogate: Default::default(),
            ratio: Default::default(),
            dual_clip: Some(3.0),
            ..base.loss
        },
        lr: LR,
        seed: 2,
        ..base
    };
    deltarl_update::run(&s, 1, &p, &mut opt, None, rows, None, &mut |_| {}).unwrap();
    let mut names: Vec<String> = p.vs.variables().into_keys().collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let g = opt.grad(&n).expect("every parameter has a gradient");
            assert_eq!(g.kind(), Kind::Float, "{n}");
            // The bf16 `.grad` was moved into the f32 sum after each pass.
            let pending = p.vs.variables()[&n].grad();
            assert_eq!(pending.abs().max().double_value(&[]), 0.0, "{n}");
            (n, g)
        })
        .collect()
}

/// Micro-batch gradients of bf16 parameters are summed in f32 (the master's gradient, as
/// FSDP reduces f32 gradients). Eight passes over eight copies of one response, each
/// weighted 1/8 by the token mean, give each pass the bf16 gradient G/8 of one pass over
/// the response alone (a power-of-two scale, exact); their f32 sum is G bit for bit. In
/// bf16 the running sum 3G/8 already needs more than bf16's 8 significant bits.
#[test]
fn bf16_micro_batch_gradients_are_summed_in_f32() {
    tch::set_num_threads(1);
    // One policy, saved and loaded for each run: libtorch's generator is process-wide and
    // the other tests of this file draw from it, so two fresh random policies could differ.
    let (dir, p) = common::tiny_policy();
    deltarl_model::save(&p, dir.path()).unwrap();
    let alone = gradients(dir.path(), &copies(1));
    let eight = gradients(dir.path(), &copies(8));
    assert_eq!(alone.len(), eight.len());
    for ((name, a), (other, b)) in alone.iter().zip(&eight) {
        assert_eq!(name, other);
        assert!(
            a.abs().max().double_value(&[]) > 0.0,
            "{name} has no gradient"
        );
        assert!(
            a.equal(b),
            "{name}: the f32 sum of eight passes is not the one-pass gradient"
        );
    }
}

/// A small gradient next to a large one, by hand: pass 1 gives every weight the gradient
/// 1, passes 2-8 give 2^-9 each. bf16 (8 significant bits) keeps none of them (1 + 2^-9
/// rounds to 1); the f32 sum keeps all seven: 1 + 7 * 2^-9, and the norm and the step
/// read that sum.
#[test]
fn small_micro_batch_gradients_survive_a_large_one() {
    let init = Tensor::full([4, 4], 0.5, (Kind::Float, Device::Cpu));
    let (vs, w) = store(&init, Kind::BFloat16);
    let mut opt = AdamW::new(&vs, ADAM);
    let small = 2f64.powi(-9);
    for pass in 0..8 {
        let g = if pass == 0 { 1.0 } else { small };
        set_grad(&w, &Tensor::full([4, 4], g, (Kind::Float, Device::Cpu)));
        opt.accumulate();
    }
    let want = 1.0 + 7.0 * small;
    let sum = values(&opt.grad("w").unwrap());
    assert!(sum.iter().all(|&g| f64::from(g) == want), "{sum:?}");
    assert_eq!(opt.grad_norm(), want * 4.0);
    // Summed where the gradient lives, the small passes vanish.
    let bf16 = (0..7).fold(Tensor::from(1.0f32).to_kind(Kind::BFloat16), |acc, _| {
        acc + Tensor::from(small as f32).to_kind(Kind::BFloat16)
    });
    assert_eq!(bf16.double_value(&[]), 1.0);
}

/// Against PyTorch (`precision.py`): a bf16 two-layer network, three steps of eight
/// micro-batches (one large, seven small), clipped, AdamW on f32 masters. Our
/// accumulate / clip / step gives PyTorch's f32-accumulated masters to 1e-6 relative; the
/// same run with the gradients summed in bf16 lands measurably elsewhere (so the check
/// can tell the two apart).
#[test]
fn f32_accumulation_matches_a_pytorch_replica() {
    tch::set_num_threads(1);
    let dir = tempfile::tempdir().unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/precision.py");
    let python = std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(dir.path())
        .output()
        .expect("python with torch");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |name: &str| -> std::collections::HashMap<String, Tensor> {
        Tensor::read_safetensors(dir.path().join(name))
            .unwrap()
            .into_iter()
            .collect()
    };
    let (data, reference) = (read("inputs.safetensors"), read("reference.safetensors"));
    let mut vs = nn::VarStore::new(Device::Cpu);
    let _ = vs.root().var_copy("w1", &data["w1"]);
    let _ = vs.root().var_copy("w2", &data["w2"]);
    vs.bfloat16();
    let w = vs.variables();
    // precision.py's optimizer.
    let lr = 1e-3;
    let adam = AdamWSettings {
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
    };
    let mut opt = AdamW::new(&vs, adam);
    let (steps, micro) = (3, 8);
    for step in 0..steps {
        opt.zero_grad();
        for k in step * micro..(step + 1) * micro {
            let x = data["x"].get(k).to_kind(Kind::BFloat16);
            let loss = x
                .matmul(&w["w1"])
                .tanh()
                .matmul(&w["w2"])
                .to_kind(Kind::Float);
            let loss = loss.pow_tensor_scalar(2).mean(Kind::Float) * data["scale"].get(k);
            loss.backward();
            opt.accumulate();
        }
        assert!(
            opt.clip_grad_norm(0.5) > 0.5,
            "clipping is part of the check"
        );
        opt.step(lr);
    }
    let rel = |a: &Tensor, b: &Tensor| {
        let scale = b.abs().max().double_value(&[]);
        (a - b).abs().max().double_value(&[]) / scale
    };
    for name in ["w1", "w2"] {
        let ours = opt.master(name).unwrap();
        let f32 = rel(ours, &reference[name]);
        let bf16 = rel(ours, &reference[&format!("bf16_{name}")]);
        eprintln!("{name}: {f32:e} from PyTorch's f32 accumulation, {bf16:e} from bf16's");
        // The same bf16 gradients summed in f32 in the same order on both sides, then a
        // few AdamW steps of ~10 roundings each (≤ 10·2^-24 ≈ 6e-7 relative a step, but
        // the step is lr-sized: its error is ~6e-7·lr ≪ 1e-6 of a weight): under 1e-6.
        assert!(
            f32 < 1e-6,
            "{name}: {f32:e} from PyTorch's f32 accumulation"
        );
        // bf16 partial sums round to 2^-8 relative: far above 1e-5 of the weights.
        assert!(bf16 > 1e-5, "{name}: only {bf16:e} from bf16 accumulation");
    }
}
