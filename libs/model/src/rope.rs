//! Rotary position embeddings in transformers' "rotate half" layout.

use tch::{Device, Kind, Tensor};

use crate::config::Llama3Rope;

/// Llama 3's frequency-dependent scaling of `inv_freq` (f32, as transformers computes it):
/// wavelengths longer than `original / low_freq_factor` are slowed by `factor`, shorter than
/// `original / high_freq_factor` kept, and interpolated in between.
fn llama3_scaled(inv_freq: &Tensor, s: &Llama3Rope) -> Tensor {
    let low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    let high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    let wavelen = inv_freq.reciprocal() * (2.0 * std::f64::consts::PI);
    // 1. Long wavelengths (low frequencies) divided by the factor.
    let scaled = inv_freq.where_self(&wavelen.le(low_wavelen), &(inv_freq / s.factor));
    // 2. The medium band: a blend of the divided and the kept frequency.
    let smooth = (wavelen.reciprocal() * s.original_max_position_embeddings - s.low_freq_factor)
        / (s.high_freq_factor - s.low_freq_factor);
    let smoothed = (smooth.ones_like() - &smooth) * &scaled / s.factor + &smooth * &scaled;
    let medium = wavelen
        .ge(high_wavelen)
        .logical_and(&wavelen.le(low_wavelen));
    smoothed.where_self(&medium, &scaled)
}

#[derive(Debug)]
pub struct Rope {
    /// [max_pos, head_dim]
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    pub fn new(
        head_dim: i64,
        max_pos: i64,
        theta: f64,
        llama3: Option<&Llama3Rope>,
        device: Device,
    ) -> Self {
        // inv_freq[i] = theta^(-2i / d), computed in f32 as transformers does.
        let idx =
            Tensor::arange_start_step(0, head_dim, 2, (Kind::Int64, device)).to_kind(Kind::Float);
        let mut inv_freq = (idx * (-(theta.ln()) / head_dim as f64)).exp();
        if let Some(s) = llama3 {
            inv_freq = llama3_scaled(&inv_freq, s);
        }
        let t = Tensor::arange(max_pos, (Kind::Float, device));
        let freqs = t.outer(&inv_freq); // [max_pos, d/2]
        let emb = Tensor::cat(&[&freqs, &freqs], -1); // [max_pos, d]
        Rope {
            cos: emb.cos(),
            sin: emb.sin(),
        }
    }

    pub fn max_positions(&self) -> i64 {
        self.cos.size()[0]
    }

    fn rotate_half(x: &Tensor) -> Tensor {
        let half = x.size()[x.dim() - 1] / 2;
        let x1 = x.narrow(-1, 0, half);
        let x2 = x.narrow(-1, half, half);
        Tensor::cat(&[&x2.neg(), &x1], -1)
    }

    /// The tables for positions `start..start+len` in `kind`, computed once per forward
    /// pass and shared by every layer.
    pub fn at(&self, start: i64, len: i64, kind: Kind) -> (Tensor, Tensor) {
        let cos = self.cos.narrow(0, start, len);
        let sin = self.sin.narrow(0, start, len);
        if kind == Kind::Float {
            (cos, sin)
        } else {
            (cos.to_kind(kind), sin.to_kind(kind))
        }
    }

    /// The tables of positions `pos` (int64 [T]) in `kind`, [T, d]: a pass whose T columns
    /// sit at positions of their own.
    pub fn at_positions(&self, pos: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let pick = |t: &Tensor| {
            let t = t.index_select(0, pos);
            if kind == Kind::Float {
                t
            } else {
                t.to_kind(kind)
            }
        };
        (pick(&self.cos), pick(&self.sin))
    }

    /// The tables of one position per row (`pos`: int64 [R]) in `kind`, shaped [R, 1, 1, d]
    /// to broadcast over a decoding step's [R, heads, 1, d].
    pub fn at_rows(&self, pos: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let d = self.cos.size()[1];
        let pick = |t: &Tensor| {
            let t = t.index_select(0, pos).view([-1, 1, 1, d]);
            if kind == Kind::Float {
                t
            } else {
                t.to_kind(kind)
            }
        };
        (pick(&self.cos), pick(&self.sin))
    }

    /// x: [B, heads, T, d] with the tables of its positions ([T, d]) -> [B, heads, T, d]
    pub fn apply(x: &Tensor, table: &(Tensor, Tensor)) -> Tensor {
        x * &table.0 + Self::rotate_half(x) * &table.1
    }
}
