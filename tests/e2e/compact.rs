//! Compact features of a bf16 model: the vectors stored at bf16 precision cost 2 bytes a
//! value on disk (2 H a token, beside the token's three f32 scalars and a bounded overhead a
//! response and a file), and the DelTA coefficients from them are no farther from
//! the coefficients of an f32 file of the same pass than the reference's own coefficients
//! (its hidden state is bf16) are from those of an f32 model with the same weights. (Two
//! stages in one process, the features stage's output read by the coefficients' estimator:
//! a check across stages lives here, not in a stage crate.)

use deltarl_coeffs::{estimate, DeltaSettings, Estimator, Response, Settings};
use deltarl_features::{run, writer, Proxy, Stored};
use deltarl_model::synthetic::random_checkpoint;
use deltarl_model::Dtype;
use deltarl_model::{Family, Shape};
use deltarl_schemas::{FeatureRow, FileMeta, FinishReason, RolloutRow};

const HIDDEN: usize = 512;

fn shape() -> Shape {
    Shape {
        hidden_size: HIDDEN,
        intermediate_size: 1024,
        num_hidden_layers: 2,
        num_attention_heads: 8,
        num_key_value_heads: 4,
        max_position_embeddings: 128,
        tie_word_embeddings: false,
    }
}

/// Eight responses of 40..=61 tokens to four prompts.
fn rollouts() -> Vec<RolloutRow> {
    (0..8u32)
        .map(|i| {
            let n = 40 + 3 * i as usize;
            RolloutRow {
                prompt_id: format!("p{}", i / 2),
                sample_idx: i % 2,
                prompt: String::new(),
                prompt_token_ids: vec![3, 4 + i, 5, 6],
                response_token_ids: (0..n)
                    .map(|k| 7 + ((k * 13 + i as usize * 7) % 280) as u32)
                    .collect(),
                response_text: String::new(),
                old_logprobs: vec![0.0; n],
                finish_reason: FinishReason::Length,
                policy_iter: 0,
                gold: String::new(),
                data_source: None,
                reward_kind: Default::default(),
            }
        })
        .collect()
}

fn features(dtype: Dtype, bf16_vectors: bool) -> Vec<FeatureRow> {
    let dir = tempfile::tempdir().unwrap();
    // The same seed gives the same weights; in bf16 they are those weights rounded.
    let p = random_checkpoint(Family::Qwen3, dir.path(), 300, &shape(), Dtype::F32, 5).unwrap();
    let p = if dtype == Dtype::Bf16 {
        deltarl_model::load(dir.path(), tch::Device::Cpu, Dtype::Bf16).unwrap()
    } else {
        p
    };
    let job = deltarl_features::Job::whole(1);
    run(
        &settings(bf16_vectors),
        job,
        &p.model,
        &rollouts(),
        &mut |_| {},
    )
    .unwrap()
}

fn settings(bf16_vectors: bool) -> deltarl_features::Settings {
    deltarl_features::Settings {
        proxy: Proxy::LmHeadRow,
        project_dim: None,
        seed: 0,
        temperature: 1.0,
        chunk_rows: 8,
        chunk_tokens: None,
        head_chunk_bytes: deltarl_teacher::DEFAULT_HEAD_CHUNK_BYTES,
        layout: deltarl_teacher::Layout::Padded,
        // The vectors are stored at bf16 precision for a bf16 setting, whatever the model
        // given to `run` (here: a bf16 model's vectors kept in f32 too, for comparison).
        dtype: if bf16_vectors {
            Dtype::Bf16
        } else {
            Dtype::F32
        },
    }
}

/// The bytes the file's vector column takes (its column chunks, page headers included).
fn vector_bytes(rows: &[FeatureRow], bf16_vectors: bool) -> usize {
    let s = settings(bf16_vectors);
    let mut w = writer(
        &s,
        1,
        HIDDEN,
        Stored::Full,
        Vec::new(),
        FileMeta::new("features", ""),
    );
    w.append(deltarl_schemas::encode_piece(rows).unwrap(), "rows")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("features.parquet");
    std::fs::write(&path, w.finish().unwrap()).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(file).unwrap();
    let meta = parquet::file::reader::FileReader::metadata(&reader);
    meta.row_groups()
        .iter()
        .flat_map(|g| g.columns())
        .filter(|c| c.column_path().string() == "features")
        .map(|c| c.compressed_size() as usize)
        .sum()
}

/// DelTA coefficients of the rows (advantages +1 / -1 alternating by prompt).
fn coefficients(rows: &[FeatureRow]) -> Vec<f32> {
    let rs: Vec<Response<'_>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| Response {
            prompt_id: &r.prompt_id,
            sample_idx: r.sample_idx,
            advantage: if i % 3 == 0 { 1.0 } else { -0.5 },
            reward: 0.0,
            token_ids: &[],
            kept: true,
            features: &r.features,
            entropy: &r.entropy,
            token_prob: &r.token_prob,
            shared: &[],
        })
        .collect();
    let s = Settings::new(Estimator::Delta(DeltaSettings::default())).unwrap();
    estimate(&s, HIDDEN, &rs).unwrap().coeffs.concat()
}

fn max_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max)
}

#[test]
fn compact_features_cost_two_bytes_a_value_and_keep_the_coefficients() {
    tch::set_num_threads(1);
    let f32_file = features(Dtype::Bf16, false);
    let compact = features(Dtype::Bf16, true);
    let f32_model = features(Dtype::F32, false);
    let tokens: usize = compact.iter().map(FeatureRow::tokens).sum();
    // Every stored value is a bf16 value: its low 16 bits are zero.
    assert!(compact
        .iter()
        .flat_map(|r| &r.features)
        .all(|x| x.to_bits() & 0xffff == 0));
    let (full, small) = (vector_bytes(&f32_file, false), vector_bytes(&compact, true));
    // The values, 2 bytes each and stored as they are, a 4-byte length a response, and the
    // data pages' headers (under 64 bytes each; at most a page a response).
    let rows = compact.len();
    let bound = 2 * HIDDEN * tokens + rows * (4 + 64);
    eprintln!(
        "{tokens} tokens of dim {HIDDEN} in {rows} responses: the vectors take {:.1} bytes a \
         token in an f32 file, {:.1} in a compact one (bound {:.1})",
        full as f64 / tokens as f64,
        small as f64 / tokens as f64,
        bound as f64 / tokens as f64
    );
    assert!(
        small >= 2 * HIDDEN * tokens && small <= bound,
        "{small} bytes, bound {bound}"
    );
    assert!(
        full >= 4 * HIDDEN * tokens && full <= 2 * bound,
        "{full} bytes"
    );

    let (c_f32, c_compact, c_model) = (
        coefficients(&f32_file),
        coefficients(&compact),
        coefficients(&f32_model),
    );
    let ours = max_diff(&c_compact, &c_f32);
    let reference = max_diff(&c_f32, &c_model);
    eprintln!(
        "coefficients: compact vs f32 file of the same pass {ours:.2e}; the bf16 pass vs an \
         f32 model with the same weights (the reference's own distance) {reference:.2e}"
    );
    assert!(ours > 0.0, "the compact file rounds");
    assert!(ours <= reference, "{ours} > {reference}");
}
