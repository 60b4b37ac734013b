//! ZeRO-1 within one process: two "ranks" with sharded state, stepped on the same gradient,
//! each own parameter moved exactly as the unsharded optimizer moves it (the broadcast of
//! the owner's weights is what `share_weights` adds; two processes: tests/e2e/ranks.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use deltarl_optim::{AdamW, AdamWSettings, Sharding};
use deltarl_schemas::Shard;
use tch::{nn, Device, Kind, Tensor};

/// The learning rate of every step.
const LR: f64 = 1e-3;

const ADAM: AdamWSettings = AdamWSettings {
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weight_decay: 0.1,
};

const SHAPES: [(&str, [i64; 2]); 4] = [
    ("a", [64, 32]),
    ("b", [8, 8]),
    ("c", [32, 32]),
    ("d", [3, 5]),
];

/// A bf16 store with the same seeded parameters every time.
fn store() -> nn::VarStore {
    tch::manual_seed(11);
    let mut vs = nn::VarStore::new(Device::Cpu);
    for (name, shape) in SHAPES {
        let _ = vs.root().var_copy(
            name,
            &(Tensor::randn(shape, (Kind::Float, Device::Cpu)) * 0.02),
        );
    }
    vs.bfloat16();
    vs
}

/// The same seeded gradient for every parameter of the store.
fn set_grads(vs: &nn::VarStore) {
    tch::manual_seed(12);
    let vars = vs.variables();
    let loss = SHAPES
        .iter()
        .map(|(name, shape)| {
            let g = Tensor::randn(*shape, (Kind::Float, Device::Cpu));
            (vars[*name].to_kind(Kind::Float) * g).sum(Kind::Float)
        })
        .reduce(|a, b| a + b)
        .unwrap();
    loss.backward();
}

fn bits(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(&t.to_kind(Kind::Float).flatten(0, -1)).unwrap()
}

#[test]
fn each_owner_takes_the_unsharded_step_and_the_state_is_divided() {
    let whole_vs = store();
    let mut whole = AdamW::new(&whole_vs, ADAM);
    let ranks: Vec<(nn::VarStore, AdamW)> = (0..2)
        .map(|rank| {
            let vs = store();
            let opt = AdamW::sharded(&vs, ADAM, Shard { rank, world: 2 }, Sharding::Optimizer);
            (vs, opt)
        })
        .collect();
    let mut ranks = ranks;
    // Two steps, so the second uses moments the first left.
    for _ in 0..2 {
        set_grads(&whole_vs);
        whole.step(LR);
        whole.zero_grad();
        for (vs, opt) in &mut ranks {
            set_grads(vs);
            opt.step(LR);
            opt.zero_grad();
        }
        // What `share_weights` does between processes: the owner's weights go to the other.
        for (name, _) in SHAPES {
            let owner = (0..2).find(|&r| ranks[r].1.master(name).is_some()).unwrap();
            let w = ranks[owner].0.variables()[name].detach();
            let mut other = ranks[1 - owner].0.variables()[name].detach();
            tch::no_grad(|| other.copy_(&w));
        }
    }
    for (name, _) in SHAPES {
        let owners: Vec<usize> = (0..2)
            .filter(|&r| ranks[r].1.master(name).is_some())
            .collect();
        assert_eq!(owners.len(), 1, "{name} has one owner: {owners:?}");
        let expect = bits(&whole_vs.variables()[name]);
        for (vs, _) in &ranks {
            assert_eq!(bits(&vs.variables()[name]), expect, "{name}");
        }
        assert_eq!(
            bits(ranks[owners[0]].1.master(name).unwrap()),
            bits(whole.master(name).unwrap()),
            "{name}'s master"
        );
    }
    // Master weights and two moments of every element, divided: a (2,048) on one rank,
    // c + b + d (1,024 + 64 + 15) on the other.
    let (r0, r1) = (ranks[0].1.state_elements(), ranks[1].1.state_elements());
    assert_eq!(r0 + r1, whole.state_elements());
    assert_eq!((r0, r1), (3 * 2048, 3 * (1024 + 64 + 15)));
    // Sharded state is saved through its process group, never half by one process.
    let dir = tempfile::tempdir().unwrap();
    let e = ranks[0].1.save(dir.path(), None).unwrap_err();
    assert!(matches!(e, deltarl_optim::Error::WithoutGroup), "{e}");
    assert!(!dir.path().join("optimizer.safetensors").exists());
}
