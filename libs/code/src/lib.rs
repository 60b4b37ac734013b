//! Code rewards: the program a response writes ([`program`]), the tests of a prompt in one
//! canonical form ([`Tests`], read from the field's layouts by [`from_record`]), and
//! grading in the sandbox ([`Grader`]): a test harness in Python runs the program against
//! the cases inside bubblewrap and reports each case's outcome.

mod extract;
mod grade;
mod layouts;
mod options;
mod rows;
mod spec;

pub use deltarl_schemas::CodeOutcome;
pub use extract::program;
pub use grade::{Error, Grader, PassReward, Settings, Verdict};
pub use layouts::{from_ground_truth, from_record, CodeRecord};
pub use options::CodeOptions;
pub use rows::{grade_rows, RowsError};
pub use spec::{CallCase, StdioCase, Tests};
