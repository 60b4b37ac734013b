//! Which part of a stage's work one of several processes does.

/// Process `rank` of `world` takes every `world`-th unit of work (a generation batch, a
/// features chunk, a micro-batch), starting at its rank. Units are cut exactly as one
/// process cuts them, so each is computed as it would be alone: the merged result is the
/// single-process one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub rank: usize,
    pub world: usize,
}

impl Default for Shard {
    fn default() -> Self {
        Shard::WHOLE
    }
}

impl Shard {
    /// One process doing everything.
    pub const WHOLE: Shard = Shard { rank: 0, world: 1 };

    /// Whether unit `i` is this process's.
    pub fn owns(&self, i: usize) -> bool {
        i % self.world.max(1) == self.rank
    }

    pub fn is_whole(&self) -> bool {
        self.world <= 1
    }
}

#[cfg(test)]
mod tests {
    use super::Shard;

    #[test]
    fn every_unit_has_exactly_one_owner() {
        for world in 1..5 {
            for i in 0..11 {
                let owners = (0..world)
                    .filter(|&rank| Shard { rank, world }.owns(i))
                    .count();
                assert_eq!(owners, 1);
            }
        }
        assert!(Shard::WHOLE.owns(7) && Shard::WHOLE.is_whole());
    }
}
