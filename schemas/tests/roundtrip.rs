//! Every table round-trips through `Vec<u8>`; bad files give errors naming file and column.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use deltarl_schemas::*;

fn prompts() -> Vec<PromptRow> {
    vec![
        PromptRow {
            id: "a".into(),
            problem: "1+2*3=?".into(),
            answer: "7".into(),
            data_source: Some("tiny".into()),
            system: None,
            reward_kind: Default::default(),
        },
        PromptRow {
            id: "b".into(),
            problem: "x".into(),
            answer: "\\frac{1}{2}".into(),
            data_source: None,
            system: Some("Answer briefly.".into()),
            reward_kind: Default::default(),
        },
    ]
}

fn rollouts() -> Vec<RolloutRow> {
    (0..3)
        .map(|i| RolloutRow {
            prompt_id: format!("p{}", i / 2),
            sample_idx: i % 2,
            prompt: "Q: 1+2*3=?\nA: ".into(),
            prompt_token_ids: vec![1, 2, 3],
            response_token_ids: (0..i + 1).collect(),
            response_text: "x".repeat(i as usize + 1),
            old_logprobs: (0..i + 1).map(|k| -(k as f32) * 0.5).collect(),
            finish_reason: if i == 2 {
                FinishReason::Length
            } else {
                FinishReason::Stop
            },
            policy_iter: 0,
            gold: "7".into(),
            data_source: None,
            reward_kind: Default::default(),
        })
        .collect()
}

fn scores() -> Vec<ScoreRow> {
    vec![ScoreRow {
        prompt_id: "p0".into(),
        sample_idx: 0,
        gold: "7".into(),
        extracted: None,
        correct: false,
        reward: -0.5,
        advantage: -1.2,
        kept: true,
        response_len: 12,
        overlong_penalty: -0.5,
        data_source: None,
        reward_kind: Default::default(),
        outcome: None,
        cases_passed: None,
        cases_total: None,
        detail: None,
    }]
}

fn features() -> Vec<FeatureRow> {
    vec![
        FeatureRow {
            prompt_id: "p0".into(),
            sample_idx: 0,
            dim: 3,
            precision: Precision::F32,
            features: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            token_prob: vec![0.5, 0.25],
            logprob: vec![-0.69, -1.38],
            entropy: vec![1.0, 0.5],
        },
        FeatureRow {
            prompt_id: "p0".into(),
            sample_idx: 1,
            dim: 3,
            precision: Precision::F32,
            features: vec![],
            token_prob: vec![],
            logprob: vec![],
            entropy: vec![],
        },
    ]
}

fn coeffs() -> Vec<CoeffRow> {
    vec![
        CoeffRow {
            prompt_id: "p0".into(),
            sample_idx: 0,
            coeff: vec![0.9, 1.1],
            advantage: 1.0,
            shift: None,
        },
        CoeffRow {
            prompt_id: "p0".into(),
            sample_idx: 1,
            coeff: vec![1.0, 1.0, 0.0],
            advantage: -0.5,
            shift: Some(vec![0.25, -0.125, 0.0]),
        },
    ]
}

fn updates() -> Vec<UpdateRow> {
    vec![UpdateRow {
        step: 1,
        loss: 0.1,
        clip_frac: 0.01,
        grad_norm: 2.0,
        entropy: 0.7,
        tokens: 1234,
        lr: 1e-6,
        kl: 0.0,
        approx_kl_old: 0.001,
    }]
}

fn evals() -> Vec<EvalRow> {
    vec![EvalRow {
        benchmark: "aime24".into(),
        problem_id: "1".into(),
        sample_idx: 0,
        correct: true,
        response_len: 100,
        extracted: Some("42".into()),
        finish_reason: FinishReason::Stop,
        data_source: None,
        outcome: None,
    }]
}

fn roundtrip<T: Table + PartialEq + std::fmt::Debug>(rows: Vec<T>) {
    let meta = FileMeta::new("test", "abc").with("settings", "{\"k\":1}");
    let mut buf = Vec::new();
    write_table(&mut buf, &rows, &meta).unwrap();
    let (back, m) = read_table::<T, _>(buf.as_slice(), "mem.parquet").unwrap();
    assert_eq!(back, rows);
    assert_eq!(m.stage, "test");
    assert_eq!(m.config_hash, "abc");
    assert_eq!(
        m.extra.get("settings").map(String::as_str),
        Some("{\"k\":1}")
    );
    // Writing is deterministic: same rows, same bytes.
    let mut again = Vec::new();
    write_table(&mut again, &rows, &meta).unwrap();
    assert_eq!(buf, again);
}

#[test]
fn every_table_round_trips() {
    roundtrip(prompts());
    roundtrip(rollouts());
    roundtrip(scores());
    roundtrip(features());
    roundtrip(coeffs());
    roundtrip(updates());
    roundtrip(evals());
    roundtrip(Vec::<RolloutRow>::new());
}

#[test]
fn truncated_file_is_a_clear_error() {
    let mut buf = Vec::new();
    write_table(&mut buf, &rollouts(), &FileMeta::new("rollout", "h")).unwrap();
    buf.truncate(buf.len() / 2);
    let err = read_table::<RolloutRow, _>(buf.as_slice(), "runs/x/rollouts.parquet").unwrap_err();
    assert!(matches!(err, Error::Parquet { .. }), "{err}");
    assert!(
        err.to_string().starts_with("runs/x/rollouts.parquet:"),
        "{err}"
    );
    let err = read_path::<RolloutRow>(&PathBuf::from("/nonexistent/rollouts.parquet")).unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/rollouts.parquet"),
        "{err}"
    );
}

#[test]
fn missing_column_is_named() {
    let mut buf = Vec::new();
    write_table(&mut buf, &coeffs(), &FileMeta::new("coeffs", "h")).unwrap();
    let err = read_table::<ScoreRow, _>(buf.as_slice(), "scores.parquet").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("scores.parquet") && msg.contains("`gold`"),
        "{msg}"
    );
}

#[test]
fn wrong_version_is_refused() {
    use arrow::array::{ArrayRef, StringArray};
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::KeyValue;
    use parquet::file::properties::WriterProperties;
    use std::sync::Arc;
    let col: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
    let batch = RecordBatch::try_from_iter([("prompt_id", col)]).unwrap();
    let props = WriterProperties::builder()
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "deltarl.schema_version".into(),
            "999".to_string(),
        )]))
        .build();
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let err = read_table::<CoeffRow, _>(buf.as_slice(), "coeffs.parquet").unwrap_err();
    assert!(
        err.to_string().contains("schema version Some(\"999\")"),
        "{err}"
    );
}

#[test]
fn atomic_write_failure_keeps_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scores.parquet");
    write_path(&path, &scores(), &FileMeta::new("score", "h")).unwrap();
    let before = std::fs::read(&path).unwrap();
    let res = atomic_write(&path, |_| {
        Err(Error::Build {
            table: "x".into(),
            message: "simulated failure".into(),
        })
    });
    assert!(res.is_err());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "temporary file left behind");
}

fn python() -> String {
    std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn every_table_opens_in_polars() {
    let dir = tempfile::tempdir().unwrap();
    let m = |s: &str| FileMeta::new(s, "h");
    write_path(
        &dir.path().join("prompts.parquet"),
        &prompts(),
        &m("prompts"),
    )
    .unwrap();
    write_path(
        &dir.path().join("rollouts.parquet"),
        &rollouts(),
        &m("rollout"),
    )
    .unwrap();
    write_path(&dir.path().join("scores.parquet"), &scores(), &m("score")).unwrap();
    write_path(
        &dir.path().join("features.parquet"),
        &features(),
        &m("features").with("k", "3"),
    )
    .unwrap();
    write_path(&dir.path().join("coeffs.parquet"), &coeffs(), &m("coeffs")).unwrap();
    write_path(&dir.path().join("update.parquet"), &updates(), &m("update")).unwrap();
    write_path(&dir.path().join("eval.parquet"), &evals(), &m("eval")).unwrap();
    let script = r#"
import sys, numpy as np, polars as pl
d = sys.argv[1]
n = {t: pl.read_parquet(f"{d}/{t}.parquet").height for t in
     ["prompts", "rollouts", "scores", "features", "coeffs", "update", "eval"]}
assert n == {"prompts": 2, "rollouts": 3, "scores": 1, "features": 2, "coeffs": 2, "update": 1, "eval": 1}, n
c = pl.read_parquet(f"{d}/coeffs.parquet")
assert c["shift"].to_list() == [None, [0.25, -0.125, 0.0]], c["shift"]
assert c["shift"].dtype == pl.List(pl.Float32), c["shift"].dtype
f = pl.read_parquet(f"{d}/features.parquet")
assert f["features"].dtype == pl.Binary, f["features"].dtype
k = int(pl.read_parquet_metadata(f"{d}/features.parquet")["deltarl.k"])
v = np.frombuffer(f["features"][0], "<f4").reshape(-1, k)
assert v.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], v
j = pl.read_parquet(f"{d}/rollouts.parquet").join(
    pl.read_parquet(f"{d}/scores.parquet"), on=["prompt_id", "sample_idx"])
assert j.height == 1 and j["reward"][0] == -0.5
assert pl.read_parquet(f"{d}/rollouts.parquet")["prompt_token_ids"].dtype == pl.List(pl.UInt32)
print("polars ok")
"#;
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(dir.path())
        .output()
        .expect("python (set DELTARL_PYTHON to the venv's python; `make test` does)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A scores file written before `data_source` existed (the column absent) still reads, as
/// nulls; a column every version writes stays required (`missing_column_is_named`).
#[test]
fn a_file_from_before_data_source_reads_as_null_sources() {
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::KeyValue;
    use parquet::file::properties::WriterProperties;
    let mut rows = scores();
    rows[0].data_source = Some("gsm8k".into());
    let mut batch = ScoreRow::to_batch(&rows).unwrap();
    let at = batch.schema().index_of("data_source").unwrap();
    batch.remove_column(at);
    let props = WriterProperties::builder()
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "deltarl.schema_version".into(),
            deltarl_schemas::SCHEMA_VERSION.to_string(),
        )]))
        .build();
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let (back, _) = read_table::<ScoreRow, _>(buf.as_slice(), "scores.parquet").unwrap();
    assert_eq!(back.len(), rows.len());
    assert!(back.iter().all(|r| r.data_source.is_none()));
    // Written now, the source round-trips.
    let mut buf = Vec::new();
    write_table(&mut buf, &rows, &FileMeta::new("score", "h")).unwrap();
    let (back, _) = read_table::<ScoreRow, _>(buf.as_slice(), "scores.parquet").unwrap();
    assert_eq!(back[0].data_source.as_deref(), Some("gsm8k"));
}

/// Written batch by batch (batches of 1, 3 and the rest) the file is the one a single call
/// writes; read back a batch at a time it is the same rows, in batches of the asked size.
#[test]
fn streamed_writes_and_reads_equal_whole_ones() {
    let rows: Vec<FeatureRow> = (0..40u32)
        .map(|i| FeatureRow {
            prompt_id: format!("p{}", i / 4),
            sample_idx: i % 4,
            dim: 2,
            precision: Precision::F32,
            features: (0..2 * (i as usize % 5))
                .map(|k| k as f32 + i as f32)
                .collect(),
            token_prob: vec![0.5; i as usize % 5],
            logprob: vec![-0.7; i as usize % 5],
            entropy: vec![1.0; i as usize % 5],
        })
        .collect();
    let meta = FileMeta::new("features", "h");
    let mut whole = Vec::new();
    write_table(&mut whole, &rows, &meta).unwrap();
    let mut w = TableWriter::new(Vec::new(), &meta);
    w.write(&rows[..1]).unwrap();
    w.write(&rows[1..4]).unwrap();
    w.write_owned(rows[4..].to_vec()).unwrap();
    assert_eq!(w.rows(), 40);
    assert_eq!(w.finish().unwrap(), whole);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("features.parquet");
    std::fs::write(&path, &whole).unwrap();
    let reader = TableReader::<FeatureRow>::open(&path, 7).unwrap();
    assert_eq!(
        (reader.rows(), reader.meta().stage.as_str()),
        (40, "features")
    );
    let batches: Vec<Vec<FeatureRow>> = reader.map(|b| b.unwrap()).collect();
    assert_eq!(
        batches.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![7, 7, 7, 7, 7, 5]
    );
    assert_eq!(batches.concat(), rows);
    // A view reads its one column.
    let lp: Vec<LogprobRow> = TableReader::<LogprobRow>::open(&path, 100)
        .unwrap()
        .flat_map(|b| b.unwrap())
        .collect();
    assert_eq!(lp.len(), 40);
    assert!(lp.iter().zip(&rows).all(|(a, b)| a.logprob == b.logprob));
}

/// Vectors at bf16 cost two bytes a value on disk, stored plain and uncompressed, and read
/// back as the same f32 values; a value bf16 cannot hold is refused naming the response.
#[test]
fn bf16_vectors_cost_two_bytes_a_value_and_read_back_exactly() {
    let tokens = 300;
    let dim = 64;
    let mut x = 0x2545_f491_u32;
    let rows: Vec<FeatureRow> = (0..4u32)
        .map(|i| FeatureRow {
            prompt_id: format!("p{i}"),
            sample_idx: i,
            dim: dim as u32,
            precision: Precision::Bf16,
            // Random bits with the low half cleared: every bf16 value, signs and exponents.
            features: (0..tokens * dim)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let v = f32::from_bits(x & 0xffff_0000);
                    if v.is_finite() {
                        v
                    } else {
                        1.0
                    }
                })
                .collect(),
            token_prob: vec![0.5; tokens],
            logprob: vec![-0.7; tokens],
            entropy: vec![1.0; tokens],
        })
        .collect();
    let mut bytes = Vec::new();
    write_table(&mut bytes, &rows, &FileMeta::new("features", "")).unwrap();
    let meta = parquet::file::reader::FileReader::metadata(
        &parquet::file::serialized_reader::SerializedFileReader::new(bytes::Bytes::from(
            bytes.clone(),
        ))
        .unwrap(),
    )
    .clone();
    let col = meta
        .row_group(0)
        .columns()
        .iter()
        .find(|c| c.column_path().string() == "features")
        .unwrap();
    assert_eq!(col.compression(), parquet::basic::Compression::UNCOMPRESSED);
    // The values themselves plus at most 4 bytes of length a response and a page header
    // a page (pages of at most 1 MiB: under 64 bytes a page here).
    let values = 4 * tokens * dim * 2;
    let stored = col.compressed_size() as usize;
    assert!(
        stored >= values && stored < values + 4 * 4 + 64 * (values / (1 << 20) + 4),
        "{stored} bytes for {values}"
    );
    let (back, _) = read_table::<FeatureRow, _>(bytes.as_slice(), "f").unwrap();
    assert_eq!(back, rows);
    let (view, _) = read_table::<FeatureVectors, _>(bytes.as_slice(), "f").unwrap();
    assert!(view
        .iter()
        .zip(&rows)
        .all(|(a, b)| a.features == b.features && a.precision == Precision::Bf16));

    let mut bad = rows[..1].to_vec();
    bad[0].features[5] = 1.0 + 1.0 / 1024.0;
    let err = write_table(Vec::new(), &bad, &FileMeta::new("features", "")).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("prompt_id \"p0\"") && msg.contains("value 5") && msg.contains("bf16"),
        "{msg}"
    );
}

/// A features file in the nested layout of earlier versions is refused naming the file
/// and the column, never misread.
#[test]
fn nested_vectors_of_earlier_versions_are_refused_by_name() {
    use arrow::array::{
        Array, FixedSizeListArray, Float32Array, ListArray, StringArray, UInt32Array,
    };
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let item = |dt| Arc::new(Field::new("item", dt, false));
    let inner = FixedSizeListArray::new(
        item(DataType::Float32),
        2,
        Arc::new(Float32Array::from(vec![1.0f32, 2.0])),
        None,
    );
    let vectors = ListArray::new(
        item(DataType::FixedSizeList(item(DataType::Float32), 2)),
        arrow::buffer::OffsetBuffer::from_lengths([1]),
        Arc::new(inner),
        None,
    );
    let scalars = || {
        Arc::new(ListArray::new(
            item(DataType::Float32),
            arrow::buffer::OffsetBuffer::from_lengths([1]),
            Arc::new(Float32Array::from(vec![0.5f32])),
            None,
        ))
    };
    let schema = Schema::new(vec![
        Field::new("prompt_id", DataType::Utf8, false),
        Field::new("sample_idx", DataType::UInt32, false),
        Field::new("features", vectors.data_type().clone(), false),
        Field::new("token_prob", scalars().data_type().clone(), false),
        Field::new("logprob", scalars().data_type().clone(), false),
        Field::new("entropy", scalars().data_type().clone(), false),
    ]);
    let batch = arrow::record_batch::RecordBatch::try_new(
        Arc::new(schema.clone()),
        vec![
            Arc::new(StringArray::from(vec!["p0"])),
            Arc::new(UInt32Array::from(vec![0u32])),
            Arc::new(vectors),
            scalars(),
            scalars(),
            scalars(),
        ],
    )
    .unwrap();
    let mut bytes = Vec::new();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
            "deltarl.schema_version".into(),
            SCHEMA_VERSION.to_string(),
        )]))
        .build();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(&mut bytes, Arc::new(schema), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    for err in [
        read_table::<FeatureRow, _>(bytes.as_slice(), "old/features.parquet").unwrap_err(),
        read_table::<FeatureVectors, _>(bytes.as_slice(), "old/features.parquet").unwrap_err(),
    ] {
        let msg = err.to_string();
        assert!(
            msg.contains("old/features.parquet") && msg.contains("features"),
            "{msg}"
        );
    }
    // Its scalars still read.
    assert_eq!(
        read_table::<LogprobRow, _>(bytes.as_slice(), "f")
            .unwrap()
            .0[0]
            .logprob,
        vec![0.5]
    );
}

/// Row groups close at the byte budget: each is at most the budget plus one row, so a
/// reader or writer never holds more than one group.
#[test]
fn row_groups_are_bounded_by_bytes() {
    let rows: Vec<FeatureRow> = (0..10u32)
        .map(|i| FeatureRow {
            prompt_id: format!("p{i}"),
            sample_idx: 0,
            dim: 4,
            precision: Precision::F32,
            features: vec![i as f32; 4 * 100],
            token_prob: vec![0.5; 100],
            logprob: vec![-0.7; 100],
            entropy: vec![1.0; 100],
        })
        .collect();
    // 2,834 bytes a row (its vector sum: 4 f64): a 6,000-byte budget closes a group every
    // third row.
    assert_eq!(rows[0].heap_bytes(), 4 * (400 + 300) + 8 * 4 + 2);
    let mut w = TableWriter::with_limits(Vec::new(), &FileMeta::new("features", ""), 2048, 6000);
    w.write(&rows).unwrap();
    let bytes = w.finish().unwrap();
    let meta = parquet::file::reader::FileReader::metadata(
        &parquet::file::serialized_reader::SerializedFileReader::new(bytes::Bytes::from(
            bytes.clone(),
        ))
        .unwrap(),
    )
    .clone();
    let groups: Vec<i64> = meta.row_groups().iter().map(|g| g.num_rows()).collect();
    assert_eq!(groups, vec![3, 3, 3, 1]);
    assert_eq!(
        read_table::<FeatureRow, _>(bytes.as_slice(), "f")
            .unwrap()
            .0,
        rows
    );
}

/// The vectors read pass by pass: straight from the bytes in the features writer's layout
/// (rows of every length, the empty one included, over several row groups and pages), and
/// through Arrow from the same table rewritten compressed by another writer; both give
/// every row's values exactly, in file order, in batches bounded by the byte budget.
#[test]
fn vector_passes_read_every_row_exactly_directly_or_through_arrow() {
    let rows: Vec<FeatureRow> = (0..23u32)
        .map(|i| {
            let n = (i as usize * 37) % 90;
            FeatureRow {
                prompt_id: format!("p{}", i / 4),
                sample_idx: i % 4,
                dim: 6,
                precision: Precision::Bf16,
                features: (0..n * 6)
                    .map(|k| f32::from_bits(((k as u32 * 2_654_435_761) ^ i) & 0x3fff_0000))
                    .collect(),
                token_prob: vec![0.5; n],
                logprob: vec![-0.7; n],
                entropy: vec![1.0; n],
            }
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("features.parquet");
    // Row groups of at most 4,000 bytes of row data: several groups, several rows each.
    let mut w = TableWriter::with_limits(Vec::new(), &FileMeta::new("features", ""), 2048, 4000);
    w.write(&rows).unwrap();
    std::fs::write(&ours, w.finish().unwrap()).unwrap();

    // The same batches rewritten by a plain Arrow writer: zstd, dictionary, statistics.
    let other = dir.path().join("rewritten.parquet");
    rewrite(&ours, &other, Some(zstd()), |b| b);

    for (path, direct) in [(&ours, true), (&other, false)] {
        let mut f = VectorFile::open(path).unwrap();
        assert_eq!(f.is_direct(), direct, "{}", path.display());
        assert_eq!(f.layout().dim, 6);
        assert_eq!(f.layout().precision, Precision::Bf16);
        let keys: Vec<(String, u32)> = rows
            .iter()
            .map(|r| (r.prompt_id.clone(), r.sample_idx))
            .collect();
        assert_eq!(f.keys(), keys.as_slice());
        // The stored sums: each coordinate's values added in token order, by hand.
        let sums = f.sums().expect("the writer stores vector sums");
        assert_eq!(sums.len(), rows.len());
        for (r, sum) in rows.iter().zip(sums) {
            let mut by_hand = vec![0.0f64; 6];
            for t in 0..r.tokens() {
                for (j, acc) in by_hand.iter_mut().enumerate() {
                    *acc += f64::from(r.features[t * 6 + j]);
                }
            }
            assert_eq!(sum, &by_hand);
        }
        for _ in 0..2 {
            let mut seen: Vec<(usize, Vec<f32>)> = Vec::new();
            let mut batches = 0;
            f.pass(1000, &mut |batch: &VectorBatch<'_>| -> Result<()> {
                batches += 1;
                let floats: usize = batch.iter().map(|(_, v)| v.len()).sum();
                // At most the budget, unless one row alone is larger.
                assert!(
                    floats * 4 <= 1000 || batch.len() == 1 || !direct,
                    "{floats} floats"
                );
                seen.extend(batch.iter().map(|&(r, v)| (r, v.to_vec())));
                Ok(())
            })
            .unwrap();
            assert_eq!(seen.len(), rows.len());
            for (k, (row, v)) in seen.iter().enumerate() {
                assert_eq!(*row, k);
                assert_eq!(v, &rows[k].features, "row {k}");
            }
            assert!(batches > 1);
        }
    }
}

/// A features file whose `vector_sum` column does not fit its vectors (a value short, or
/// not finite) is refused naming the file, the column and the row; a file without the
/// column reads with no sums.
#[test]
fn vector_sums_that_do_not_fit_are_refused_and_absent_ones_are_none() {
    use arrow::array::{Array, Float64Array, ListArray, RecordBatch};
    use std::sync::Arc;
    let rows: Vec<FeatureRow> = (0..3u32)
        .map(|i| FeatureRow {
            prompt_id: "p".into(),
            sample_idx: i,
            dim: 3,
            precision: Precision::F32,
            features: vec![0.25 * i as f32; 3 * 2],
            token_prob: vec![0.5; 2],
            logprob: vec![-0.7; 2],
            entropy: vec![1.0; 2],
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("features.parquet");
    write_path(&good, &rows, &FileMeta::new("features", "")).unwrap();
    // Rewrites the file with `vector_sum` replaced (None: the column dropped).
    let rewrite = |name: &str, sums: Option<Vec<Vec<f64>>>| {
        let path = dir.path().join(name);
        rewrite(&good, &path, None, |batch| {
            let at = batch.schema().index_of(VECTOR_SUM).unwrap();
            let Some(sums) = &sums else {
                let mut b = batch;
                b.remove_column(at);
                return b;
            };
            let old = batch
                .column(at)
                .as_any()
                .downcast_ref::<ListArray>()
                .unwrap();
            let arrow::datatypes::DataType::List(item) = old.data_type() else {
                unreachable!()
            };
            let list = ListArray::new(
                item.clone(),
                arrow::buffer::OffsetBuffer::from_lengths(sums.iter().map(Vec::len)),
                Arc::new(Float64Array::from_iter_values(
                    sums.iter().flatten().copied(),
                )),
                None,
            );
            let mut cols = batch.columns().to_vec();
            cols[at] = Arc::new(list);
            RecordBatch::try_new(batch.schema(), cols).unwrap()
        });
        path
    };
    let sums = |i: u32| vec![0.5 * i as f64; 3];
    assert_eq!(
        VectorFile::open(&good).unwrap().sums().unwrap(),
        &[sums(0), sums(1), sums(2)][..]
    );
    let none = rewrite("no-sums.parquet", None);
    assert!(VectorFile::open(&none).unwrap().sums().is_none());
    for (name, bad, what) in [
        (
            "short.parquet",
            vec![sums(0), vec![0.5, 0.5], sums(2)],
            "2 values",
        ),
        (
            "nan.parquet",
            vec![sums(0), sums(1), vec![1.0, f64::NAN, 1.0]],
            "coordinate 1 is NaN",
        ),
    ] {
        let path = rewrite(name, Some(bad));
        let Err(err) = VectorFile::open(&path) else {
            panic!("{name} opened");
        };
        let msg = err.to_string();
        assert!(
            msg.contains(name) && msg.contains(VECTOR_SUM) && msg.contains(what),
            "{msg}"
        );
    }
}

fn zstd() -> parquet::basic::Compression {
    parquet::basic::Compression::ZSTD(Default::default())
}

/// `src` rewritten to `dst` by a plain Arrow writer (its key-value metadata kept, `compression`
/// or the writer's default), each record batch passed through `edit`.
fn rewrite(
    src: &std::path::Path,
    dst: &std::path::Path,
    compression: Option<parquet::basic::Compression>,
    edit: impl Fn(arrow::array::RecordBatch) -> arrow::array::RecordBatch,
) {
    let file = std::fs::File::open(src).unwrap();
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let kv = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .cloned();
    let mut props =
        parquet::file::properties::WriterProperties::builder().set_key_value_metadata(kv);
    if let Some(c) = compression {
        props = props.set_compression(c);
    }
    let batches: Vec<_> = reader.build().unwrap().map(|b| edit(b.unwrap())).collect();
    let schema = batches[0].schema();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(dst).unwrap(),
        schema,
        Some(props.build()),
    )
    .unwrap();
    for b in &batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
}
