//! Host memory and disk for a configuration (`deltarl plan`, below the device table):
//! what each stage holds in host memory in its process, what an iteration writes, and
//! what a run of N iterations keeps after pruning. Worst case, as the device plan: every
//! response runs to `max_new_tokens`, every prompt to `max_prompt_tokens`. File sizes are
//! uncompressed upper bounds except features, whose vectors are counted at the 2 (bf16) or
//! 4 (f32) bytes a value they take on disk (stored plain, `deltarl_schemas::VectorLayout`).
//! Wall time is estimated only for what the host does with the features file (writing it,
//! the coefficient passes over it), from rates measured on this machine or given.

use serde::Serialize;

use deltarl_model::Dtype;

/// What the arithmetic needs from the configuration and the model.
#[derive(Clone, Debug, Serialize)]
pub struct HostWorkload {
    pub dtype: Dtype,
    pub parameters: u64,
    /// The vector width of the features pass (the hidden size, or `features.project_dim`
    /// below it).
    pub vector_dim: u64,
    /// The width features.parquet stores (`features.persist`): the pass's, a sketch's, or
    /// 0. Below the pass's, the features stage holds its vectors and estimates the
    /// coefficients itself.
    pub stored_dim: u64,
    /// Responses an iteration and their longest prompt and response.
    pub responses: u64,
    pub prompt_tokens: u64,
    pub response_tokens: u64,
    /// Responses of one features pass (a rank's, under torchrun).
    pub features_rows: u64,
    /// Processes of the features stage (torchrun ranks; 1 = one process).
    pub ranks: u64,
    /// Passes the coefficient stage makes over the vectors.
    pub coeffs_passes: u64,
    pub keep_last: u32,
    pub save_every: u32,
    pub keep_features: u32,
}

/// Bytes: per stage in host memory, per file an iteration.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct HostPlan {
    pub rollout_resident: u64,
    /// One process's features stage, or under torchrun rank 0's (the largest; a rank's
    /// share of the rows waits in its spill file on disk, or is held when the stage
    /// estimates the coefficients).
    pub features_resident: u64,
    pub coeffs_resident: u64,
    pub update_resident: u64,
    pub rollouts_file: u64,
    pub scores_file: u64,
    pub features_file: u64,
    pub coeffs_file: u64,
    /// The policy's weights and the optimizer state (f32 moments, and masters in bf16).
    pub checkpoint: u64,
}

/// Decoded vectors a coeffs pass holds at once (`deltarl_coeffs::shell`).
const VECTOR_BATCH: u64 = deltarl_coeffs::shell::VECTOR_BATCH_BYTES as u64;
/// A features row group the writer holds at most.
const ROW_GROUP: u64 = deltarl_schemas::ROW_GROUP_BYTES as u64;

impl HostPlan {
    pub fn new(w: &HostWorkload) -> Self {
        let (r, lp, lr, k) = (
            w.responses,
            w.prompt_tokens,
            w.response_tokens,
            w.vector_dim,
        );
        let tokens = r * lr;
        // Rollouts: prompt and response ids (4 bytes), the sampler's log-probs (4) and the
        // text (~4 bytes a token).
        let rollouts = r * (8 * lp + 12 * lr);
        let value = if w.dtype == Dtype::Bf16 { 2 } else { 4 };
        let stored = w.stored_dim;
        // Features: the vector as stored, then probability, log-prob and entropy (f32
        // each), and a response's vector sum (f64).
        let features_file = tokens * (stored * value + 12) + r * stored * 8;
        let pass = w.features_rows.min(r) * lr * (4 * k + 12);
        // Under torchrun a rank encodes each pass into its spill file as it comes (one
        // pass's rows and their bytes), and rank 0 then holds one piece at a time as
        // Parquet bytes and as rows while it appends it: whatever the rank's share.
        let piece = w.features_rows.min(r) * lr * (stored * value + 12);
        // The estimator's per-token scalars (~36 bytes: margins, assignments, raw and final
        // coefficients) and five f64 vectors of the vector width a response.
        let estimator = tokens * 36 + 5 * r * k * 8;
        let ranks = w.ranks.max(1);
        let features_resident = if stored < k {
            // Held: the rank's share of the vectors at the model's precision and its sketch
            // in f32 (rounded up to whole responses), one batch of them widened for a pass,
            // every response's scalars, the estimator, one piece and one row group on their
            // way to the file.
            let share = r.div_ceil(ranks) * lr;
            rollouts
                + share * (value * k + 4 * stored)
                + VECTOR_BATCH
                + tokens * 12
                + estimator
                + piece
                + ROW_GROUP
        } else if ranks == 1 {
            // The rollouts, one pass's rows in f32 and one row group being written.
            rollouts + pass + ROW_GROUP
        } else {
            rollouts + pass + piece + ROW_GROUP
        };
        let master = if w.dtype == Dtype::Bf16 { 4 } else { 0 };
        let weight = if w.dtype == Dtype::Bf16 { 2 } else { 4 };
        HostPlan {
            // The whole batch of rows, written at the end.
            rollout_resident: rollouts,
            features_resident,
            // The rollouts, per token the entropy and the estimator's scalars, its f64
            // vectors (the stored sums, their copy, the initial, refit and
            // coefficient-weighted partials), and one batch of decoded vectors; when the
            // features stage estimated, the rows it wrote, read and written again.
            coeffs_resident: if stored < k {
                rollouts + 2 * (tokens * 4 + r * 32)
            } else {
                rollouts + estimator + VECTOR_BATCH
            },
            // The rollouts and, per token, old log-probs, coefficients and the joined rows.
            update_resident: rollouts + tokens * 24,
            rollouts_file: rollouts,
            scores_file: r * 64,
            features_file,
            coeffs_file: tokens * 4 + r * 32,
            checkpoint: w.parameters * (weight + master + 8),
        }
    }

    /// Bytes an iteration writes.
    pub fn per_iteration(&self) -> u64 {
        self.rollouts_file
            + self.scores_file
            + self.features_file
            + self.coeffs_file
            + self.checkpoint
    }

    /// The run's disk after `iters` iterations with the workload's pruning.
    pub fn run_disk(&self, w: &HostWorkload, iters: u32) -> u64 {
        let n = u64::from(iters);
        let kept = |keep: u32| if keep == 0 { n } else { n.min(u64::from(keep)) };
        let features = kept(w.keep_features);
        let mut checkpoints = kept(w.keep_last);
        if w.keep_last > 0 && w.save_every > 0 {
            // Every save_every-th older iteration stays too.
            let older = n.saturating_sub(u64::from(w.keep_last));
            checkpoints += older / u64::from(w.save_every);
        }
        n * (self.rollouts_file + self.scores_file + self.coeffs_file)
            + features * self.features_file
            + checkpoints * self.checkpoint
    }
}

/// Bytes a second the host moves through the features file: writing it (encoding rows to
/// Parquet) and one coefficient pass over it (reading and the estimator's arithmetic).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Rates {
    pub write: f64,
    pub pass: f64,
    /// Measured on this machine (else given on the command line).
    pub measured: bool,
}

/// Seconds of host work on the features file an iteration.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Wall {
    pub features_write_s: f64,
    pub coeffs_passes: u64,
    pub coeffs_s: f64,
}

impl HostPlan {
    /// Writing the features file once and the coefficient stage's passes over it, at
    /// `rates`.
    /// The passes are none when the features stage estimated (the file lacks the vectors;
    /// its passes run over memory, at the device's or the host memory's rate).
    pub fn wall(&self, w: &HostWorkload, rates: Rates) -> Wall {
        let bytes = self.features_file as f64;
        let passes = if w.stored_dim < w.vector_dim {
            0
        } else {
            w.coeffs_passes
        };
        Wall {
            features_write_s: bytes / rates.write,
            coeffs_passes: passes,
            coeffs_s: passes as f64 * bytes / rates.pass,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> HostWorkload {
        HostWorkload {
            dtype: Dtype::Bf16,
            parameters: 1000,
            vector_dim: 8,
            stored_dim: 8,
            responses: 10,
            prompt_tokens: 5,
            response_tokens: 20,
            features_rows: 4,
            ranks: 1,
            coeffs_passes: 3,
            keep_last: 2,
            save_every: 4,
            keep_features: 1,
        }
    }

    /// 1,000 B/s written, 2,000 B/s a pass.
    fn given_rates() -> Rates {
        Rates {
            write: 1000.0,
            pass: 2000.0,
            measured: false,
        }
    }

    /// Every number by hand for a small workload.
    #[test]
    fn host_plan_by_hand() {
        let w = workload();
        let p = HostPlan::new(&w);
        // 200 tokens; rollouts 10 x (40 + 240) = 2,800 bytes.
        assert_eq!(p.rollouts_file, 2800);
        // 200 x (8 x 2 + 12), and 10 sums of 8 f64.
        assert_eq!(p.features_file, 5600 + 640);
        assert_eq!(p.coeffs_file, 200 * 4 + 320);
        // bf16 weights 2, master 4, moments 8 bytes a parameter.
        assert_eq!(p.checkpoint, 14_000);
        assert_eq!(p.features_resident, 2800 + 4 * 20 * 44 + ROW_GROUP);
        assert_eq!(
            p.coeffs_resident,
            2800 + 200 * 36 + 5 * 10 * 8 * 8 + VECTOR_BATCH
        );
        // Two ranks: rank 0 holds a piece of 4 rows as bytes (4 x 20 x 28) and as rows
        // (4 x 20 x 44), its share spilled to disk.
        let two = HostPlan::new(&HostWorkload {
            ranks: 2,
            ..w.clone()
        });
        assert_eq!(
            two.features_resident,
            2800 + 4 * 20 * 28 + 4 * 20 * 44 + ROW_GROUP
        );
        // 6,240 bytes written at 1,000 B/s; 3 passes at 2,000 B/s.
        let wall = p.wall(&w, given_rates());
        assert_eq!((wall.features_write_s, wall.coeffs_s), (6.24, 9.36));
        // 10 iterations: 1 features file, checkpoints of the last 2 and of iterations 4
        // and 8 (older than the last 2, every 4th).
        let small = p.rollouts_file + p.scores_file + p.coeffs_file;
        assert_eq!(
            p.run_disk(&w, 10),
            10 * small + p.features_file + 4 * p.checkpoint
        );
        let all = HostWorkload {
            keep_last: 0,
            keep_features: 0,
            ..w
        };
        assert_eq!(p.run_disk(&all, 3), 3 * p.per_iteration());
    }

    /// The features stage holding the vectors (`persist` = projected, a sketch of 2), by
    /// hand.
    #[test]
    fn held_vectors_by_hand() {
        let w = HostWorkload {
            stored_dim: 2,
            ranks: 2,
            ..workload()
        };
        let p = HostPlan::new(&w);
        // 200 x (2 x 2 + 12), and 10 sums of 2 f64.
        assert_eq!(p.features_file, 3200 + 160);
        // Rank 0: 5 responses x 20 tokens of 8 bf16 values and 2 f32, and a batch of them
        // widened; 200 tokens' scalars; the estimator (200 x 36, 5 x 10 x 8 x 8); a piece
        // of 4 x 20 x (2 x 2 + 12).
        assert_eq!(
            p.features_resident,
            2800 + 100 * (16 + 8) + VECTOR_BATCH + 200 * 12 + (7200 + 3200) + 1280 + ROW_GROUP
        );
        // An f32 model's vectors take twice the bytes.
        let f32s = HostPlan::new(&HostWorkload {
            dtype: Dtype::F32,
            ..w.clone()
        });
        assert_eq!(
            f32s.features_resident - p.features_resident,
            100 * 8 * 2 + (4 * 20 * 2 * 2)
        );
        // The coeffs stage reads the rows written and writes them again.
        assert_eq!(p.coeffs_resident, 2800 + 2 * (800 + 320));
        // No pass over the file.
        let wall = p.wall(&w, given_rates());
        assert_eq!((wall.coeffs_passes, wall.coeffs_s), (0, 0.0));
        // The whole share held grows with the responses a rank computes.
        let more = HostPlan::new(&HostWorkload {
            responses: 40,
            ..w.clone()
        });
        assert!(more.features_resident - p.features_resident >= 15 * 20 * 24);
    }
}
