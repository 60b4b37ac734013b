"""Which tokens DelTA amplifies and suppresses, by gradient weight, in one iteration.

  python docs/coeff_tokens.py RUN_DIR ITER [TOP]

Reads the iteration's rollouts (response tokens), scores (advantages), features (each
token's gradient proxy v = (1 - p) h) and coeffs (each token's coefficient c) with polars,
and the tokenizer of the run's model (`model.source` of run.toml, or the run's base/).

A token's gradient weight is |A| * ||v||: the size of its term in the policy gradient
before DelTA reweights it. Per side (A > 0: right answers, A < 0: wrong ones) and per
decoded token it prints the tokens' total gradient weight, their weight-averaged
coefficient, and DelTA's change to their gradient, sum of |A| * ||v|| * (c - 1): the
tokens DelTA amplifies most and suppresses most, and the share of each side's gradient
weight the top tokens hold (whether shared high-frequency tokens dominate both sides).
"""

import os
import sys
import tomllib

import numpy as np
import polars as pl
from tokenizers import Tokenizer


def vectors(b, tokens, k):
    """A response's `features` bytes as a tokens x k float32 array: 4 bytes a value (f32),
    or 2 (bf16: the high half of each float32)."""
    if len(b) == 4 * tokens * k:
        a = np.frombuffer(b, "<f4")
    else:
        a = (np.frombuffer(b, "<u2").astype("<u4") << 16).view("<f4")
    return a.reshape(tokens, k)


def main():
    run, it = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    folder = os.path.join(run, f"iter-{it:04d}")
    with open(os.path.join(run, "run.toml"), "rb") as f:
        source = tomllib.load(f)["model"]["source"]
    model = os.path.join(run, "base") if source == "tiny" else os.path.expanduser(source)
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))

    key = ["prompt_id", "sample_idx"]
    rollouts = pl.read_parquet(os.path.join(folder, "rollouts.parquet"), columns=key + ["response_token_ids"])
    coeffs = pl.read_parquet(os.path.join(folder, "coeffs.parquet"))
    path = os.path.join(folder, "features.parquet")
    k = int(pl.read_parquet_metadata(path)["deltarl.k"])
    raw = pl.read_parquet(path, columns=key + ["features", "entropy"])
    norms = [np.linalg.norm(vectors(b, len(e), k), axis=1).tolist() for b, e in zip(raw["features"], raw["entropy"])]
    feats = raw.select(key).with_columns(pl.Series("norm", norms, dtype=pl.List(pl.Float64)))
    rows = rollouts.join(coeffs, on=key).join(feats, on=key)
    rows = rows.filter(pl.col("advantage") != 0)
    toks = rows.explode(["response_token_ids", "coeff", "norm"]).select(
        pl.col("response_token_ids").alias("id"),
        "coeff",
        "advantage",
        (pl.col("advantage").abs() * pl.col("norm")).alias("weight"),
    )
    ids = toks["id"].unique().to_list()
    # Special tokens (the end token) decode to nothing: show their names.
    names = [repr(tok.decode([i])) if tok.decode([i]) else tok.id_to_token(i) for i in ids]
    text = pl.DataFrame({"id": ids, "token": names},
                        schema={"id": toks["id"].dtype, "token": pl.String})
    for side, cond in (("A > 0 (right answers)", pl.col("advantage") > 0),
                       ("A < 0 (wrong answers)", pl.col("advantage") < 0)):
        t = toks.filter(cond)
        total = t["weight"].sum()
        by = (
            t.group_by("id")
            .agg(
                n=pl.len(),
                weight=pl.col("weight").sum(),
                c=(pl.col("weight") * pl.col("coeff")).sum() / pl.col("weight").sum(),
                change=(pl.col("weight") * (pl.col("coeff") - 1)).sum(),
            )
            .join(text, on="id")
            .with_columns(share=pl.col("weight") / total)
        )
        heavy = by.sort("weight", descending=True).head(top)
        print(f"\n{side}: {len(t)} tokens, gradient-weighted mean c "
              f"{(t['weight'] * t['coeff']).sum() / total:.3f}; the {top} heaviest tokens hold "
              f"{heavy['share'].sum():.1%} of the side's gradient weight")
        cols = ["token", "n", "share", "c", "change"]
        with pl.Config(tbl_rows=top, tbl_hide_dataframe_shape=True, float_precision=3,
                       tbl_formatting="MARKDOWN", tbl_hide_column_data_types=True):
            print("heaviest:")
            print(heavy.select(cols))
            print("amplified most (largest sum |A| ||v|| (c - 1)):")
            print(by.sort("change", descending=True).head(top).select(cols))
            print("suppressed most:")
            print(by.sort("change").head(top).select(cols))


if __name__ == "__main__":
    main()
