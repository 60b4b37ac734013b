//! Seeding (`docs/method.md` §6): every random draw is seeded from (run seed, iteration, stage,
//! prompt id, sample index), so results do not depend on sharding or batch composition.

/// SplitMix64 finaliser: a strong 64-bit mix.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a of a string, then mixed: a stable hash that does not depend on the Rust version.
pub fn hash_str(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

/// The seed of one random draw.
pub fn seed_for(run_seed: u64, iter: u32, stage: &str, prompt_id: &str, sample: u32) -> u64 {
    let mut h = mix(run_seed);
    h = mix(h ^ u64::from(iter));
    h = mix(h ^ hash_str(stage));
    h = mix(h ^ hash_str(prompt_id));
    mix(h ^ u64::from(sample))
}

/// A small deterministic generator (SplitMix64) for draws that need no cryptographic
/// quality: prompt selection, synthetic data, projections.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0.wrapping_sub(0x9e37_79b9_7f4a_7c15))
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
        }
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(f64::MIN_POSITIVE);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_by_every_component() {
        let base = seed_for(1, 2, "rollout", "p1", 3);
        assert_eq!(base, seed_for(1, 2, "rollout", "p1", 3));
        for other in [
            seed_for(2, 2, "rollout", "p1", 3),
            seed_for(1, 3, "rollout", "p1", 3),
            seed_for(1, 2, "features", "p1", 3),
            seed_for(1, 2, "rollout", "p2", 3),
            seed_for(1, 2, "rollout", "p1", 4),
        ] {
            assert_ne!(base, other);
        }
        let mut r = Rng::new(7);
        let xs: Vec<u64> = (0..1000).map(|_| r.below(10)).collect();
        assert!((0..10).all(|k| xs.contains(&k)));
    }
}
