//! The README's snippets, run as typed on a real run.

use crate::common::{iterate, micro_config, ok, repo, run_python};

/// The polars snippet of "Inspecting an iteration in polars": it joins one iteration's
/// tables into one row per response, with no column repeated under a `_right` name.
#[test]
fn the_readme_polars_snippet_joins_without_repeated_columns() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme
        .find("```python\nimport polars as pl\n")
        .expect("the README's polars snippet");
    let body = &readme[start + "```python\n".len()..];
    let snippet = &body[..body.find("```").unwrap()];
    assert!(
        snippet.contains("d = \"runs/tiny-arith/iter-0001/\""),
        "{snippet}"
    );
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    ok(iterate(&runs, &micro_config(dir.path()), "tiny-arith", &[]));
    // The snippet runs in the folder holding `runs/`, as a user runs it in the clone.
    let script = format!(
        "import os, sys\nos.chdir(sys.argv[1])\n{snippet}\n\
         assert df.height == 32, df.height\n\
         assert not [c for c in df.columns if c.endswith('_right')], df.columns\n\
         assert {{'response_text', 'reward', 'coeff', 'outcome'}} <= set(df.columns), df.columns\n\
         assert v.shape == (n, k) and n > 0 and np.isfinite(v).all(), (v.shape, n, k)\n"
    );
    run_python(&script, &[dir.path()]);
}
