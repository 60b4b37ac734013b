//! Token-coefficient estimation: DelTA (discriminative token credit assignment) and the
//! baselines that share its interface, so that an ablation changes only the coefficients.
//!
//! The math follows `docs/method.md` §4. Everything here is a pure function of (features,
//! advantages, settings); the Parquet shell is in [`shell`]. No libtorch.
//!
//! Determinism: responses are put in (`prompt_id`, `sample_idx`) order first, every sum is
//! formed per response and the per-response partials are added in that fixed order, so the
//! coefficients do not depend on row order or the rayon thread count.

mod agreement;
mod baselines;
mod delta;
mod error;
mod estimate;
pub mod ktae;
mod margins;
mod response;
mod settings;
pub mod shell;
mod summary;
mod sums;
mod vectors;
mod wire;

pub use agreement::{agreement, spearman};
pub use delta::{delta_coefficients, DeltaStats};
pub use error::{Error, Result};
pub use estimate::{estimate, estimate_sorted, fixed_order, Output};
pub use ktae::KtaeSettings;
pub use response::Response;
pub use settings::{DeltaSettings, Estimator, Scope, Settings};
pub use vectors::{Batch, InMemory, Vectors, Visit};
