//! The ranges of the keys of learning from the scored rollouts: `[features]`, `[coeffs]` and
//! `[update]`.

use super::*;

/// `[coeffs]`.
pub(super) const COEFFS: &[Range] = &[
    Range {
        key: "coeffs.ktae.alpha",
        get: |o| float(o.coeffs.ktae.alpha),
        bound: floats(0.0, 1e3),
        why: "a weight; with beta_ig it is normalised away, so only their ratio matters",
    },
    Range {
        key: "coeffs.ktae.beta_ig",
        get: |o| float(o.coeffs.ktae.beta_ig),
        bound: floats(0.0, 1e3),
        why: "as alpha; and alpha + beta_ig > 0",
    },
    Range {
        key: "coeffs.ktae.top",
        get: |o| float(o.coeffs.ktae.top),
        bound: floats(0.0, 100.0),
        why: "the largest score added to an advantage (0 = DAPO); group advantages are O(1)",
    },
    Range {
        key: "coeffs.lam_max",
        get: |o| float(o.coeffs.lam_max),
        bound: LAMBDA,
        why: "normalised coefficients within 1e6 of each other; the normalising sum finite",
    },
    Range {
        key: "coeffs.lam_min",
        get: |o| float(o.coeffs.lam_min),
        bound: LAMBDA,
        why: "as lam_max; and lam_min <= lam_max",
    },
    Range {
        key: "coeffs.oracle_value",
        get: |o| float(o.coeffs.oracle_value),
        bound: floats(0.0, 1e3),
        why: "0 removes the phrases' gradient; at most lam_max's bound relative to 1",
    },
    Range {
        key: "coeffs.refine_steps",
        get: |o| int(o.coeffs.refine_steps),
        bound: ints(0, 100),
        why: "the paper uses K = 1; each pass reads the features once more",
    },
    Range {
        key: "coeffs.top_entropy_keep",
        get: |o| float(o.coeffs.top_entropy_keep),
        bound: floats(1e-6, 1.0),
        why: "a fraction of the tokens; 1e-6 keeps one token of a million",
    },
];

/// `[features]`.
pub(super) const FEATURES: &[Range] = &[
    Range {
        key: "features.chunk_rows",
        get: |o| int(o.features.chunk_rows),
        bound: ints(1, SIZE),
        why: "responses per forward pass",
    },
    Range {
        key: "features.chunk_tokens",
        get: |o| int(o.features.chunk_tokens),
        bound: ints(0, TOKENS),
        why: "0 = no limit",
    },
    Range {
        key: "features.project_dim",
        get: |o| int(o.features.project_dim),
        bound: ints(0, SIZE),
        why: "0 = never; a model's width is smaller",
    },
    Range {
        key: "features.persist_dim",
        get: |o| int(o.features.persist_dim),
        bound: ints(1, SIZE),
        why: "the sketch's dimensions",
    },
];

/// `[update]`.
pub(super) const UPDATE: &[Range] = &[
    Range {
        key: "update.cispo_cap",
        get: |o| float(o.update.cispo_cap),
        bound: floats(1.0, 1e3),
        why: "CISPO's cap on the ratio: below 1 it would shrink on-policy tokens' gradient",
    },
    Range {
        key: "update.dual_clip",
        get: |o| float(o.update.dual_clip),
        bound: Bound::Float {
            least: 1.0,
            greatest: 1e3,
            open: Open::Below,
            zero_off: true,
        },
        why: "0 = off; the bound on -ratio x A for A < 0 must exceed 1 (the paper's 3, verl's 3)",
    },
    Range {
        key: "update.entropy_coef",
        get: |o| float(o.update.entropy_coef),
        bound: LOSS_COEF,
        why: "0 = off; a loss term's coefficient in f32",
    },
    Range {
        key: "update.eps_high",
        get: |o| o.update.eps_high.value().map(Number::Float),
        bound: floats(0.0, 10.0),
        why: "unset = 0.28 with clip-higher, else eps_low; beyond 10 the clip never binds",
    },
    Range {
        key: "update.eps_low",
        get: |o| float(o.update.eps_low),
        bound: Bound::Float {
            least: 0.0,
            greatest: 1.0,
            open: Open::Above,
            zero_off: false,
        },
        why: "the ratio's floor 1 - eps_low must stay positive",
    },
    Range {
        key: "update.fipo.clip_range",
        get: |o| float(o.update.fipo.clip_range),
        bound: Bound::Float {
            least: 0.0,
            greatest: 1.0,
            open: Open::Above,
            zero_off: false,
        },
        why: "the weight's clip [1 - r, 1 + r], 0 = none (as FIPO reads 0): below 1, > 0",
    },
    Range {
        key: "update.fipo.decay_rate",
        get: |o| float(o.update.fipo.decay_rate),
        bound: Bound::Float {
            least: 1e-2,
            greatest: 1e7,
            open: Open::Neither,
            zero_off: true,
        },
        why: "0 = off; tokens at which a later one counts half: from the next token to any length",
    },
    Range {
        key: "update.fipo.safety_threshold",
        get: |o| float(o.update.fipo.safety_threshold),
        bound: Bound::Float {
            least: 1.0,
            greatest: 1e3,
            open: Open::Neither,
            zero_off: true,
        },
        why: "0 = off; a ratio: below 1 it would clamp on-policy tokens",
    },
    Range {
        key: "update.grad_clip",
        get: |o| float(o.update.grad_clip),
        bound: off_or(1e-6, 1e6),
        why: "0 = off; the scale clip / norm stays finite in f32 for any norm above 1e-32",
    },
    Range {
        key: "update.kl_coef",
        get: |o| float(o.update.kl_coef),
        bound: LOSS_COEF,
        why: "0 = off; a loss term's coefficient in f32",
    },
    Range {
        key: "update.lr",
        get: |o| float(o.update.lr),
        bound: LR,
        why: "below 1e-12 a step is under f32's resolution of the weights",
    },
    Range {
        key: "update.micro_batch_rows",
        get: |o| int(o.update.micro_batch_rows),
        bound: ints(1, SIZE),
        why: "responses per pass",
    },
    Range {
        key: "update.micro_batch_tokens",
        get: |o| int(o.update.micro_batch_tokens),
        bound: ints(0, TOKENS),
        why: "0 = no limit",
    },
    Range {
        key: "update.optimizer_steps",
        get: |o| int(o.update.optimizer_steps),
        bound: ints(1, SIZE),
        why: "mini-batches per iteration",
    },
    Range {
        key: "update.sapo_temperature_neg",
        get: |o| float(o.update.sapo_temperature_neg),
        bound: floats(1e-2, 100.0),
        why: "SAPO's gate is sigmoid(tau (rho - 1)) 4 / tau: the papers' values are near 1",
    },
    Range {
        key: "update.sapo_temperature_pos",
        get: |o| float(o.update.sapo_temperature_pos),
        bound: floats(1e-2, 100.0),
        why: "as sapo_temperature_neg",
    },
    Range {
        key: "update.tis_cap",
        get: |o| float(o.update.tis_cap),
        bound: off_or(1.0, 1e3),
        why: "0 = off; a cap below 1 would down-weight tokens where sampler and trainer agree",
    },
    Range {
        key: "update.warmup_steps",
        get: |o| int(o.update.warmup_steps),
        bound: ints(0, 1 << 40),
        why: "optimizer steps",
    },
    Range {
        key: "update.weight_decay",
        get: |o| float(o.update.weight_decay),
        bound: floats(0.0, 1.0),
        why: "a step shrinks the weights by lr x weight_decay (AdamW's 0.01, DAPO's 0.1)",
    },
];
