//! How responses are sampled: the settings every decoder reads, and their builder.

/// Sampling settings, validated by the caller's configuration layer.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SampleSettings {
    /// 0 means greedy.
    pub temperature: f64,
    /// 1.0 disables nucleus sampling.
    pub top_p: f64,
    /// 0 disables top-k.
    pub top_k: usize,
    pub max_new_tokens: usize,
    /// Token ids that end a response (kept as its last token).
    pub eos_ids: Vec<u32>,
    /// Strings that end a response once they appear in its decoded text.
    pub stop_strings: Vec<String>,
    /// Rows decoded together at most (the slots of a session).
    pub max_batch_rows: usize,
    /// Positions the KV cache may hold at once, over all slots (None = no limit). A
    /// session whose longest prompt has L tokens gets at most this / (L + max_new_tokens)
    /// slots, so its cache, allocated once, never outgrows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cache_tokens: Option<usize>,
    /// Samples a session decodes at most (None = every sample in one session). Sessions
    /// are the unit processes share out, so several processes need several sessions;
    /// within a session, a finished row's slot goes to the next waiting sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_rows: Option<usize>,
}

impl SampleSettings {
    /// Sampling at `temperature` (0 = greedy) from the whole distribution (top-p 1, top-k
    /// off), ending at `eos_ids` or after `max_new_tokens`, one row at a time, with no
    /// stop strings and no cache or session limit: the builder's start.
    pub fn plain(temperature: f64, max_new_tokens: usize, eos_ids: Vec<u32>) -> Self {
        SampleSettings {
            temperature,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens,
            eos_ids,
            stop_strings: Vec::new(),
            max_batch_rows: 1,
            max_cache_tokens: None,
            session_rows: None,
        }
    }

    /// Nucleus (`top_p`, 1 = off) and top-k (0 = off) truncation.
    pub fn truncated(self, top_p: f64, top_k: usize) -> Self {
        SampleSettings {
            top_p,
            top_k,
            ..self
        }
    }

    /// Strings that end a response.
    pub fn stopping_at(self, stop_strings: Vec<String>) -> Self {
        SampleSettings {
            stop_strings,
            ..self
        }
    }

    /// Rows decoded together, the KV cache's budget in positions and the samples of a
    /// session (None = no limit).
    pub fn batched(
        self,
        max_batch_rows: usize,
        max_cache_tokens: Option<usize>,
        session_rows: Option<usize>,
    ) -> Self {
        SampleSettings {
            max_batch_rows,
            max_cache_tokens,
            session_rows,
            ..self
        }
    }
}
