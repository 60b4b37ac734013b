//! The tables' columns as declared once by their row structs: the schemas files are written
//! with (pinned, so a reordered or retyped field cannot change the files silently), enum
//! columns that refuse an unknown name or a null by file, column and row, and a row check
//! that runs on both sides.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray};
use arrow::datatypes::{Field, Schema};
use arrow::record_batch::RecordBatch;
use deltarl_schemas::*;

/// Each column as `name: type`, with `?` where it may hold nulls.
fn columns<T: Table>() -> String {
    T::fields(0)
        .iter()
        .map(|f| {
            let null = if f.is_nullable() { "?" } else { "" };
            format!("{}: {}{null}", f.name(), f.data_type())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The schemas of the files deltarl writes. A change here is a change of the file format:
/// the schema version, the readers of older files and the polars examples must follow.
#[test]
fn each_table_writes_the_columns_its_files_have() {
    let list = |t: &str| format!("List(non-null {t})");
    let (u32s, f32s, f64s) = (list("UInt32"), list("Float32"), list("Float64"));
    assert_eq!(
        columns::<PromptRow>(),
        "id: Utf8, problem: Utf8, answer: Utf8, data_source: Utf8?, system: Utf8?, \
         reward_kind: Utf8?"
    );
    assert_eq!(
        columns::<RolloutRow>(),
        format!(
            "prompt_id: Utf8, sample_idx: UInt32, prompt: Utf8, prompt_token_ids: {u32s}, \
             response_token_ids: {u32s}, response_text: Utf8, old_logprobs: {f32s}, \
             finish_reason: Utf8, policy_iter: UInt32, gold: Utf8, data_source: Utf8?, \
             reward_kind: Utf8?"
        )
    );
    assert_eq!(
        columns::<ScoreRow>(),
        "prompt_id: Utf8, sample_idx: UInt32, gold: Utf8, extracted: Utf8?, correct: Boolean, \
         reward: Float32, advantage: Float32, kept: Boolean, response_len: UInt32, \
         overlong_penalty: Float32, data_source: Utf8?, reward_kind: Utf8?, outcome: Utf8?, \
         cases_passed: UInt32?, cases_total: UInt32?, detail: Utf8?"
    );
    assert_eq!(
        columns::<CoeffRow>(),
        format!(
            "prompt_id: Utf8, sample_idx: UInt32, coeff: {f32s}, advantage: Float32, \
             shift: {f32s}?"
        )
    );
    assert_eq!(
        columns::<UpdateRow>(),
        "step: UInt32, loss: Float64, clip_frac: Float64, grad_norm: Float64, \
         entropy: Float64, tokens: UInt64, lr: Float64, kl: Float64, approx_kl_old: Float64"
    );
    assert_eq!(
        columns::<EvalRow>(),
        "benchmark: Utf8, problem_id: Utf8, sample_idx: UInt32, correct: Boolean, \
         response_len: UInt32, extracted: Utf8?, finish_reason: Utf8, data_source: Utf8?, \
         outcome: Utf8?"
    );
    assert_eq!(
        columns::<LogprobRow>(),
        format!("prompt_id: Utf8, sample_idx: UInt32, logprob: {f32s}")
    );
    assert_eq!(
        columns::<FeatureSums>(),
        format!("prompt_id: Utf8, sample_idx: UInt32, vector_sum: {f64s}")
    );
    // The columns older files may lack are the nullable ones a reader fills with nulls.
    assert_eq!(ScoreRow::ADDED.len(), 6);
    assert_eq!(RolloutRow::ADDED, ["data_source", "reward_kind"]);
    // A stage's table is named by its output file.
    assert_eq!(RolloutRow::NAME, Stage::Rollout.output());
    assert_eq!(EvalRow::NAME, Stage::Eval.output());
}

fn rollout(i: u32) -> RolloutRow {
    RolloutRow {
        prompt_id: format!("p{i}"),
        sample_idx: i,
        prompt: "1+1=".into(),
        prompt_token_ids: vec![1, 2],
        response_token_ids: vec![3, 4, 5],
        response_text: "2".into(),
        old_logprobs: vec![-0.5, -0.25, -1.0],
        finish_reason: FinishReason::Stop,
        policy_iter: 0,
        gold: "2".into(),
        data_source: None,
        reward_kind: RewardKind::Code,
    }
}

/// `batch` as a Parquet file of this schema version, written by a plain Arrow writer.
fn raw_file(batch: &RecordBatch) -> Vec<u8> {
    use parquet::file::metadata::KeyValue;
    let props = parquet::file::properties::WriterProperties::builder()
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "deltarl.schema_version".into(),
            SCHEMA_VERSION.to_string(),
        )]))
        .build();
    let mut buf = Vec::new();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    buf
}

/// `batch` with column `name` replaced by `column` (nullable as said) as a Parquet file.
fn replaced(batch: &RecordBatch, name: &str, column: ArrayRef, nullable: bool) -> Vec<u8> {
    let at = batch.schema().index_of(name).unwrap();
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| (**f).clone())
        .collect();
    let mut cols = batch.columns().to_vec();
    fields[at] = Field::new(name, column.data_type().clone(), nullable);
    cols[at] = column;
    raw_file(&RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap())
}

/// Three rollouts with one text column replaced (nullable: `values` may hold a null).
fn with_column(name: &str, values: Vec<Option<&str>>) -> Vec<u8> {
    let batch = RolloutRow::to_batch(&[rollout(0), rollout(1), rollout(2)]).unwrap();
    replaced(&batch, name, Arc::new(StringArray::from(values)), true)
}

#[test]
fn enum_columns_refuse_unknown_names_and_nulls_by_row() {
    let read = |buf: Vec<u8>| read_table::<RolloutRow, _>(buf.as_slice(), "r.parquet");
    // Every name reads back as its variant.
    let (rows, _) = read(with_column(
        "finish_reason",
        vec![Some("stop"), Some("length"), Some("stop")],
    ))
    .unwrap();
    assert_eq!(rows[1].finish_reason, FinishReason::Length);
    // An unknown name: the file, the column, the row, the value and the names expected.
    let err = read(with_column(
        "finish_reason",
        vec![Some("stop"), Some("stop"), Some("halt")],
    ))
    .unwrap_err()
    .to_string();
    for part in [
        "r.parquet",
        "`finish_reason`",
        "row 2",
        "\"halt\"",
        "stop, length",
    ] {
        assert!(err.contains(part), "{part} not in {err}");
    }
    // A null where a finish reason is required.
    let err = read(with_column(
        "finish_reason",
        vec![Some("stop"), None, Some("stop")],
    ))
    .unwrap_err();
    assert!(
        matches!(&err, Error::Null { column, row: 1, .. } if column == "finish_reason"),
        "{err}"
    );
    // A null reward kind is a file from before the column: math.
    let (rows, _) = read(with_column(
        "reward_kind",
        vec![Some("code"), None, Some("math")],
    ))
    .unwrap();
    let kinds: Vec<_> = rows.iter().map(|r| r.reward_kind).collect();
    assert_eq!(
        kinds,
        [RewardKind::Code, RewardKind::Math, RewardKind::Math]
    );
    let err = read(with_column(
        "reward_kind",
        vec![Some("code"), Some("chess"), None],
    ))
    .unwrap_err()
    .to_string();
    for part in ["`reward_kind`", "row 1", "\"chess\"", "math, code"] {
        assert!(err.contains(part), "{part} not in {err}");
    }
}

#[test]
fn a_rollout_with_a_log_prob_per_token_is_checked_when_written_and_read() {
    let mut bad = rollout(1);
    bad.old_logprobs.pop();
    let err = RolloutRow::to_batch(&[rollout(0), bad.clone()])
        .unwrap_err()
        .to_string();
    for part in [
        "rollouts.parquet",
        "row 1",
        "`old_logprobs`",
        "2 values for 3 response tokens",
    ] {
        assert!(err.contains(part), "{part} not in {err}");
    }
    // Written by another tool, the same row is refused by the reader.
    let good = RolloutRow::to_batch(&[rollout(0), rollout(1)]).unwrap();
    let logprobs: ArrayRef = Arc::new(arrow::array::ListArray::from_iter_primitive::<
        arrow::datatypes::Float32Type,
        _,
        _,
    >([
        Some(vec![Some(-0.5), Some(-0.25), Some(-1.0)]),
        Some(vec![Some(-0.5), Some(-0.25)]),
    ]));
    let err = read_table::<RolloutRow, _>(
        replaced(&good, "old_logprobs", logprobs, false).as_slice(),
        "r.parquet",
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Value { column, row: 1, .. } if column == "old_logprobs"),
        "{err}"
    );
    assert!(
        err.to_string().contains("2 values for 3 response tokens"),
        "{err}"
    );
}
