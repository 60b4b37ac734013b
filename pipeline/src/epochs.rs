//! The prompts of each iteration: epochs over the training prompts, each a seeded
//! permutation cut into batches of `rollout.prompts_per_iter` (the remainder dropped, as
//! verl's sampler does), so the draw depends only on (seed, iteration).

use deltarl_schemas::seed::{seed_for, Rng};
use deltarl_schemas::PromptRow;

/// Where an iteration's batch lies in the epochs over the training prompts (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochPos {
    pub epoch: u32,
    pub batch: u32,
    /// Batches an epoch has.
    pub batches: u32,
}

/// Batches of `per_iter` prompts an epoch over `n` prompts gives: the remainder is dropped
/// (verl's sampler, `drop_last=True`), and fewer prompts than a batch make one batch of
/// them all. 0 without prompts.
pub fn batches_per_epoch(n: usize, per_iter: usize) -> u32 {
    if n == 0 {
        return 0;
    }
    u32::try_from((n / per_iter.max(1)).max(1)).unwrap_or(u32::MAX)
}

/// The epoch and batch of iteration `iter` (1-based); None without prompts.
pub fn epoch_of(n: usize, per_iter: usize, iter: u32) -> Option<EpochPos> {
    let batches = batches_per_epoch(n, per_iter);
    let k = iter.checked_sub(1)?;
    (batches > 0).then(|| EpochPos {
        epoch: k / batches + 1,
        batch: k % batches + 1,
        batches,
    })
}

/// The prompts of iteration `iter` (1-based): batch b of epoch e is the b-th slice of
/// `per_iter` prompts of epoch e's seeded permutation, so an epoch visits each prompt at
/// most once (every prompt when `per_iter` divides the dataset), a batch never straddles
/// two epochs, and the draw depends only on (seed, iteration), never on sharding.
pub fn draw(prompts: &[PromptRow], per_iter: usize, seed: u64, iter: u32) -> Vec<PromptRow> {
    let n = prompts.len();
    let Some(at) = epoch_of(n, per_iter, iter) else {
        return Vec::new();
    };
    let mut perm: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(seed_for(seed, at.epoch - 1, "prompts", "", 0));
    for i in (1..n).rev() {
        perm.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let size = per_iter.min(n);
    let start = (at.batch - 1) as usize * size;
    perm[start..start + size]
        .iter()
        .map(|&i| prompts[i].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The built-in task's first `n` training prompts (`data.source = "tiny-arith"`).
    fn arith(n: usize) -> Vec<PromptRow> {
        deltarl_data::Task::Arith.train_prompts(n)
    }

    /// One epoch visits every prompt exactly once when the batch divides the dataset; the
    /// next epoch is another permutation; with a remainder, it is dropped (no batch
    /// straddles two epochs) and the epoch still repeats nothing.
    #[test]
    fn epochs_visit_each_prompt_once_in_a_new_order() {
        let prompts = arith(100);
        let ids = |it: u32, per: usize| -> Vec<String> {
            draw(&prompts, per, 3, it)
                .into_iter()
                .map(|p| p.id)
                .collect()
        };
        let epoch = |e: u32, per: usize| -> Vec<String> {
            let b = batches_per_epoch(100, per);
            ((e - 1) * b + 1..=e * b)
                .flat_map(|it| ids(it, per))
                .collect()
        };
        let (one, two) = (epoch(1, 20), epoch(2, 20));
        let all: std::collections::BTreeSet<String> =
            prompts.iter().map(|p| p.id.clone()).collect();
        for e in [&one, &two] {
            assert_eq!(e.len(), 100);
            assert_eq!(
                e.iter().cloned().collect::<std::collections::BTreeSet<_>>(),
                all
            );
        }
        assert_ne!(one, two, "the second epoch is another permutation");
        // 100 prompts in batches of 30: three batches an epoch, 10 prompts left out.
        assert_eq!(batches_per_epoch(100, 30), 3);
        let first = epoch(1, 30);
        assert_eq!(first.len(), 90);
        assert_eq!(
            first
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            90
        );
        assert_eq!(
            epoch_of(100, 30, 4),
            Some(EpochPos {
                epoch: 2,
                batch: 1,
                batches: 3
            })
        );
        // Fewer prompts than a batch: each epoch is one batch of them all.
        assert_eq!(draw(&prompts[..7], 20, 3, 1).len(), 7);
        assert_eq!(epoch_of(7, 20, 2).map(|p| p.epoch), Some(2));
        assert_eq!(epoch_of(0, 20, 1), None);
    }

    #[test]
    fn draws_cover_an_epoch_without_repeats() {
        let prompts = arith(100);
        let mut seen = std::collections::HashSet::new();
        for it in 1..=5 {
            for p in draw(&prompts, 20, 3, it) {
                assert!(seen.insert(p.id));
            }
        }
        assert_eq!(seen.len(), 100);
        assert_eq!(draw(&prompts, 20, 3, 2), draw(&prompts, 20, 3, 2));
        assert_ne!(draw(&prompts, 20, 3, 2), draw(&prompts, 20, 4, 2));
    }
}
