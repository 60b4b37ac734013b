//! `[eval]`: held-out evaluation inside `iterate` (the built-in task's test split and
//! benchmark files).

use serde::{Deserialize, Serialize};

use deltarl_schemas::skip::{is_one, is_zero};

fn one() -> f64 {
    1.0
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EvalOptions {
    /// Evaluate every this many iterations (0 = never inside iterate).
    pub every: u32,
    /// Held-out problems (tiny-arith) evaluated.
    pub problems: usize,
    /// Samples per problem.
    pub samples: u32,
    /// Sampling temperature (0 = greedy).
    pub temperature: f64,
    /// Nucleus sampling: only the most probable tokens whose mass reaches top_p are drawn
    /// from (1 = off). The authors validate at temperature 1.0, top_p 0.7, one sample.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub top_p: f64,
    /// Only the k most probable tokens are drawn from (0 = off).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub top_k: usize,
    /// Benchmark files (JSONL or Parquet, in any layout `data.source` accepts) evaluated in
    /// the loop with the policy each update writes, `samples` answers a problem at
    /// `temperature`, graded strictly like rewards: avg@k and pass@k per benchmark (and per
    /// `data_source` within one) go to eval.parquet, metrics.jsonl and TensorBoard. With the
    /// built-in task they come besides its held-out split; with a file dataset they are
    /// what `every` evaluates. Each file's name (without extension) names its benchmark.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub benchmarks: Vec<String>,
}
