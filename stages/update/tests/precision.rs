//! Mixed precision: bf16 compute over f32 master weights. One AdamW step at lr 1e-6 moves
//! every master weight exactly as an f32 step does, and the bf16 working copy is the master
//! rounded. (A step with a non-finite gradient norm is skipped: `loss.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_update::{AdamW, AdamWSettings};
use tch::{nn, Device, Kind, Tensor};

const ADAM: AdamWSettings = AdamWSettings {
    lr: 1e-6,
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
    opt_b.step(ADAM.lr);
    opt_f.step(ADAM.lr);

    let master = values(opt_b.master("w").unwrap());
    let (before, f32_step) = (values(&init), values(&w_f));
    // Every master weight moved (a 1e-6 step is far above f32's resolution at 0.02) ...
    let moved = master.iter().zip(&before).filter(|(a, b)| a != b).count();
    assert_eq!(moved, master.len());
    // ... exactly as the f32 step moved the f32 weights (the same f32 arithmetic).
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
    opt.step(ADAM.lr);
    let dir = tempfile::tempdir().unwrap();
    opt.save(dir.path()).unwrap();
    // A fresh optimizer over a fresh bf16 copy of the saved working weights.
    let (vs2, w2) = store(&w.to_kind(Kind::Float), Kind::BFloat16);
    let mut again = AdamW::new(&vs2, ADAM);
    again.load(dir.path()).unwrap();
    assert!(again.master("w").unwrap().equal(opt.master("w").unwrap()));
    assert!(w2.equal(&w));
    assert_eq!(again.step, 1);
}
