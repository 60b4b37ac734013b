//! The ranges of the keys that shape generation and grading: `[rollout]`, `[score]` and
//! `[eval]`.

use super::*;

/// `[eval]`.
pub(super) const EVAL: &[Range] = &[
    Range {
        key: "eval.every",
        get: |o| int(o.eval.every),
        bound: ints(0, SIZE),
        why: "0 = never; iterations of one run",
    },
    Range {
        key: "eval.problems",
        get: |o| int(o.eval.problems),
        bound: ints(0, PROBLEMS),
        why: "0 = all",
    },
    Range {
        key: "eval.samples",
        get: |o| int(o.eval.samples),
        bound: SAMPLES,
        why: "samples per problem, as rollout.samples_per_prompt",
    },
    Range {
        key: "eval.temperature",
        get: |o| float(o.eval.temperature),
        bound: TEMPERATURE,
        why: "0 = greedy; as rollout.temperature",
    },
    Range {
        key: "eval.top_k",
        get: |o| int(o.eval.top_k),
        bound: TOP_K,
        why: "0 = off; a vocabulary is smaller",
    },
    Range {
        key: "eval.top_p",
        get: |o| float(o.eval.top_p),
        bound: TOP_P,
        why: "as rollout.top_p",
    },
];

/// `[rollout]`.
pub(super) const ROLLOUT: &[Range] = &[
    Range {
        key: "rollout.kv_cache_tokens",
        get: |o| int(o.rollout.kv_cache_tokens),
        bound: ints(0, 1 << 40),
        why: "0 = no limit; and holding one response",
    },
    Range {
        key: "rollout.max_batch_rows",
        get: |o| int(o.rollout.max_batch_rows),
        bound: BATCH_ROWS,
        why: "rows decoded together",
    },
    Range {
        key: "rollout.max_new_tokens",
        get: |o| int(o.rollout.max_new_tokens),
        bound: NEW_TOKENS,
        why: "a response's length",
    },
    Range {
        key: "rollout.max_prompt_tokens",
        get: |o| int(o.rollout.max_prompt_tokens),
        bound: ints(0, SIZE),
        why: "0 = no limit",
    },
    Range {
        key: "rollout.prompts_per_iter",
        get: |o| int(o.rollout.prompts_per_iter),
        bound: ints(1, SIZE),
        why: "and prompts x samples at most 2^24 responses",
    },
    Range {
        key: "rollout.samples_per_prompt",
        get: |o| int(o.rollout.samples_per_prompt),
        bound: SAMPLES,
        why: "the group size G",
    },
    Range {
        key: "rollout.session_rows",
        get: |o| int(o.rollout.session_rows),
        bound: ints(0, TOKENS),
        why: "0 = one session",
    },
    Range {
        key: "rollout.temperature",
        get: |o| float(o.rollout.temperature),
        bound: TEMPERATURE,
        why: "0 = greedy; below 1e-3 f32 logits / T pass 1e5 and the draw is greedy anyway; \
              above 100 it is uniform to 1 %",
    },
    Range {
        key: "rollout.top_k",
        get: |o| int(o.rollout.top_k),
        bound: TOP_K,
        why: "0 = off; a vocabulary is smaller",
    },
    Range {
        key: "rollout.top_p",
        get: |o| float(o.rollout.top_p),
        bound: TOP_P,
        why: "1 = off; below 1e-6 it keeps the top token of any vocabulary under 1e6, as 1e-6 does",
    },
    Range {
        key: "rollout.vllm.concurrency",
        get: |o| int(o.rollout.vllm.concurrency),
        bound: ints(0, SIZE),
        why: "0 = every prompt at once",
    },
    Range {
        key: "rollout.vllm.port",
        get: |o| int(o.rollout.vllm.port),
        bound: ints(0, 65535),
        why: "0 = a free one",
    },
    Range {
        key: "rollout.vllm.probe_tolerance",
        get: |o| float(o.rollout.vllm.probe_tolerance),
        bound: off_or(1e-9, 10.0),
        why: "0 = the dtype's default; a log-prob difference above 10 checks nothing",
    },
    Range {
        key: "rollout.vllm.start_timeout_s",
        get: |o| int(o.rollout.vllm.start_timeout_s),
        bound: ints(0, 86_400),
        why: "0 = 600; at most a day",
    },
];

/// `[score]`.
pub(super) const SCORE: &[Range] = &[
    Range {
        key: "score.overlong_buffer",
        get: |o| int(o.score.overlong_buffer),
        bound: ints(0, SIZE),
        why: "and smaller than rollout.max_new_tokens",
    },
    Range {
        key: "score.overlong_factor",
        get: |o| float(o.score.overlong_factor),
        bound: floats(0.0, 100.0),
        why: "DAPO uses 1, the scale of the correctness reward; past 100 the penalty alone \
              decides every advantage (at 1e308 the group's mean overflowed to NaN)",
    },
    Range {
        key: "score.code.case_timeout_s",
        get: |o| float(o.score.code.case_timeout_s),
        bound: floats(0.01, 3600.0),
        why: "seconds; no program starts in under 10 ms, so every case would time out",
    },
    Range {
        key: "score.code.memory_mb",
        get: |o| int(o.score.code.memory_mb),
        bound: ints(64, 1 << 20),
        why: "MiB; and at most this machine's memory, where the limit would never bind",
    },
    Range {
        key: "score.code.run_timeout_s",
        get: |o| float(o.score.code.run_timeout_s),
        bound: floats(0.01, 3600.0),
        why: "seconds, as case_timeout_s",
    },
    Range {
        key: "score.code.workers",
        get: |o| int(o.score.code.workers),
        bound: ints(1, deltarl_sandbox::SLOTS as u64),
        why: "the sandbox's user ids per process",
    },
];
