//! A preallocated KV cache of decoding slots: per layer, keys and values of shape
//! [slots, kv_heads, capacity, d], allocated once per generation session and written in
//! place. Row r of a decoding step is slot r (the engine keeps its rows in slots
//! 0..R), at a position of its own, so prompts of different lengths decode in one batch
//! and no step copies the cache. A prompt's prefill grows a [`KvCache`] of its own first.

use tch::{Device, Kind, Tensor};

use crate::Qwen3Config;

/// Per-layer keys and values of a prompt's prefill, which the decoder copies into its
/// slots ([`SlotCache::fill`]).
#[derive(Debug, Default)]
pub struct KvCache {
    pub(crate) layers: Vec<Option<(Tensor, Tensor)>>,
}

impl KvCache {
    pub fn new(layers: usize) -> Self {
        KvCache {
            layers: (0..layers).map(|_| None).collect(),
        }
    }

    /// Number of cached positions.
    pub fn len(&self) -> i64 {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |(k, _)| k.size()[2])
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `b` of a batch's cache, as a one-row cache (views, no copy).
    pub fn row(&self, b: i64) -> KvCache {
        KvCache {
            layers: self
                .layers
                .iter()
                .map(|l| {
                    l.as_ref()
                        .map(|(k, v)| (k.narrow(0, b, 1), v.narrow(0, b, 1)))
                })
                .collect(),
        }
    }
}

#[derive(Debug)]
pub struct SlotCache {
    /// Per layer (keys, values): [slots, kv_heads, capacity, d].
    pub(crate) layers: Vec<(Tensor, Tensor)>,
    capacity: i64,
}

impl SlotCache {
    /// `slots` rows of `capacity` positions each for a model of config `c` whose weights
    /// are `kind` on `device`, zeroed (a position no row has written holds finite values,
    /// so a masked key contributes exactly 0 to attention).
    pub fn new(
        c: &Qwen3Config,
        (kind, device): (Kind, Device),
        slots: usize,
        capacity: usize,
    ) -> SlotCache {
        let shape = [
            slots as i64,
            c.num_key_value_heads as i64,
            capacity as i64,
            c.head_dim() as i64,
        ];
        let zeros = || Tensor::zeros(shape, (kind, device));
        SlotCache {
            layers: (0..c.num_hidden_layers)
                .map(|_| (zeros(), zeros()))
                .collect(),
            capacity: capacity as i64,
        }
    }

    /// Positions a slot holds.
    pub fn capacity(&self) -> i64 {
        self.capacity
    }

    /// Copies a prefilled prompt's cache (one row, L positions) into positions 0..L of
    /// slots `slots` (a group's samples entering together: one copy per layer for all of
    /// them).
    pub fn fill(&mut self, slots: std::ops::Range<usize>, prompt: &KvCache) {
        let (first, n) = (slots.start as i64, slots.len() as i64);
        for (dst, src) in self.layers.iter_mut().zip(&prompt.layers) {
            if let Some((k, v)) = src {
                let len = k.size()[2];
                let at = |t: &Tensor| t.narrow(0, first, n).narrow(2, 0, len);
                at(&dst.0).copy_(&k.expand([n, -1, -1, -1], false));
                at(&dst.1).copy_(&v.expand([n, -1, -1, -1], false));
            }
        }
    }

    /// Moves the first `len` positions of slot `from` to slot `to` (the engine closes the
    /// gap a finished row leaves, so its rows stay in slots 0..R).
    pub fn move_row(&mut self, from: usize, to: usize, len: i64) {
        for (k, v) in &mut self.layers {
            for t in [k, v] {
                let src = t.narrow(0, from as i64, 1).narrow(2, 0, len);
                t.narrow(0, to as i64, 1).narrow(2, 0, len).copy_(&src);
            }
        }
    }

    /// Bytes the cache holds.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|(k, v)| {
                let n = |t: &Tensor| t.numel() * t.kind().elt_size_in_bytes();
                n(k) + n(v)
            })
            .sum()
    }
}
