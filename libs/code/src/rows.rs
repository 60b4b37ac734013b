//! Grading the code responses among a table's rows (what the score and eval stages share):
//! each code row's tests read from its gold column, the rows run on the grader's pool, the
//! verdicts put back in row order.

use deltarl_schemas::{RewardKind, RolloutRow};

use crate::grade::{Grader, Verdict};
use crate::spec::Tests;

/// Why the code rows cannot be graded.
#[derive(Debug, thiserror::Error)]
pub enum RowsError {
    #[error(
        "prompt {prompt_id:?} is graded as code but its gold column holds no test set: {message}"
    )]
    Tests { prompt_id: String, message: String },
    #[error("{count} responses are graded as code, but no sandbox was given to run them")]
    NoSandbox { count: usize },
}

/// The verdict of every code row of `rows` (`None` for the others), in row order. A grader
/// is needed only when there are code rows; `progress` is called once per code row.
pub fn grade_rows(
    rows: &[RolloutRow],
    grader: Option<&Grader>,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Option<Verdict>>, RowsError> {
    let code: Vec<(usize, Tests)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.reward_kind == RewardKind::Code)
        .map(|(i, r)| {
            Tests::parse(&r.gold)
                .map(|t| (i, t))
                .map_err(|message| RowsError::Tests {
                    prompt_id: r.prompt_id.clone(),
                    message,
                })
        })
        .collect::<Result<_, _>>()?;
    let mut out: Vec<Option<Verdict>> = vec![None; rows.len()];
    if code.is_empty() {
        return Ok(out);
    }
    let grader = grader.ok_or(RowsError::NoSandbox { count: code.len() })?;
    let jobs: Vec<(&str, &Tests)> = code
        .iter()
        .map(|(i, t)| (rows[*i].response_text.as_str(), t))
        .collect();
    for ((i, _), v) in code.iter().zip(grader.grade_all(&jobs, progress)) {
        out[*i] = Some(v);
    }
    Ok(out)
}
