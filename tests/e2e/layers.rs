//! The workspace's layering, checked on its sources: crates are listed bottom up in the
//! workspace's `Cargo.toml` and each depends only on crates listed before it; no stage
//! crate depends on another (stages are peers over the libraries); inside every
//! crate, no module names one that (through `crate::`, `super::` or a parent declaring its
//! child) leads back to it, the crate root included: a name taken from the root leads to
//! the module the root re-exports it from, or to the root when the root defines it (which
//! then closes a cycle with the root's own `mod` line). Test modules (`#[cfg(test)] mod
//! tests`) and comments are left out: the first sit below the module they test by
//! construction, the second name modules without using them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod sources;
use sources::{edges, modules, paths_after, root_imports};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn toml_at(p: &Path) -> toml::Table {
    std::fs::read_to_string(p).unwrap().parse().unwrap()
}

/// Workspace members in the order they are listed.
fn members() -> Vec<String> {
    let ws = toml_at(&root().join("Cargo.toml"));
    ws["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn each_crate_depends_only_on_crates_listed_before_it() {
    let members = members();
    assert!(members.len() > 10, "{members:?}");
    let name_of = |m: &str| -> String {
        toml_at(&root().join(m).join("Cargo.toml"))["package"]["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let names: Vec<String> = members.iter().map(|m| name_of(m)).collect();
    let mut wrong = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let manifest = toml_at(&root().join(m).join("Cargo.toml"));
        for dep in deltarl_deps(&manifest, &["dependencies", "build-dependencies"]) {
            match names.iter().position(|n| *n == dep) {
                Some(j) if j < i => {}
                _ => wrong.push(format!("{} ({m}) -> {dep}", names[i])),
            }
        }
    }
    assert_eq!(
        wrong,
        Vec::<String>::new(),
        "dependencies upward or unlisted"
    );
}

/// The `deltarl-*` crates `manifest` names in `tables`.
fn deltarl_deps(manifest: &toml::Table, tables: &[&str]) -> Vec<String> {
    tables
        .iter()
        .filter_map(|t| manifest.get(*t).and_then(|d| d.as_table()))
        .flat_map(|d| d.keys().filter(|k| k.starts_with("deltarl")).cloned())
        .collect()
}

/// Stages are peers: what two stages share lives in a library (`libs/`), so no stage
/// crate names another stage crate, in its library, its build script or its tests (a
/// check that chains two stages is a workspace test, `tests/e2e`).
#[test]
fn no_stage_crate_depends_on_another_stage_crate() {
    let stages: Vec<(String, toml::Table)> = members()
        .into_iter()
        .filter(|m| m.starts_with("stages/"))
        .map(|m| {
            let manifest = toml_at(&root().join(&m).join("Cargo.toml"));
            (m, manifest)
        })
        .collect();
    // Every stage of the iteration is a crate here (so the check below covers them all).
    assert_eq!(
        stages.len(),
        7,
        "{:?}",
        stages.iter().map(|s| &s.0).collect::<Vec<_>>()
    );
    let names: BTreeSet<String> = stages
        .iter()
        .map(|(_, m)| m["package"]["name"].as_str().unwrap().to_string())
        .collect();
    let tables = ["dependencies", "dev-dependencies", "build-dependencies"];
    let wrong: Vec<String> = stages
        .iter()
        .flat_map(|(path, manifest)| {
            deltarl_deps(manifest, &tables)
                .into_iter()
                .filter(|d| names.contains(d))
                .map(move |d| format!("{path} -> {d}"))
        })
        .collect();
    assert_eq!(
        wrong,
        Vec::<String>::new(),
        "a stage crate uses another stage"
    );
}

/// A cycle through `edges`, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(m) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|p| p == m).unwrap_or(0);
                let mut c = path[start..].to_vec();
                c.push(m.to_string());
                return Some(c);
            }
            None => {}
        }
        marks.insert(m.to_string(), Mark::Open);
        path.push(m.to_string());
        for n in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, edges, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(m.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    edges
        .keys()
        .find_map(|m| visit(m, edges, &mut marks, &mut Vec::new()))
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let e = |pairs: &[(&str, &str)]| {
        let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            m.entry(a.to_string()).or_default().insert(b.to_string());
        }
        m
    };
    assert_eq!(cycle(&e(&[("a", "b"), ("b", "c")])), None);
    assert_eq!(
        cycle(&e(&[("a", "b"), ("b", "c"), ("c", "b")])),
        Some(vec!["b".into(), "c".into(), "b".into()])
    );
    assert_eq!(
        paths_after(
            "use crate::{config::Resolved, progress};\nlet x = crate::stage::Env; xcrate::no",
            "crate::"
        ),
        ["config::Resolved", "progress", "stage::Env"]
    );
    // A crate root's names: from its own modules, or another crate's.
    let modules: BTreeMap<String, PathBuf> = ["", "a", "a::c"]
        .iter()
        .map(|m| (m.to_string(), PathBuf::new()))
        .collect();
    let uses = root_imports(
        "mod a;\npub use a::{B, c::{D as E}};\npub(crate) use other::F;\nfn g() {}",
        &modules,
    );
    assert_eq!(uses["B"], Some("a".to_string()));
    assert_eq!(uses["E"], Some("a::c".to_string()));
    assert_eq!(uses["F"], None);
    assert!(!uses.contains_key("g"));
}

#[test]
fn no_crate_has_an_import_cycle() {
    let mut found = Vec::new();
    let mut checked = 0;
    for m in members() {
        let src = root().join(&m).join("src");
        let modules = modules(&src);
        checked += modules.len();
        if let Some(c) = cycle(&edges(&modules)) {
            let c: Vec<&str> = c
                .iter()
                .map(|m| if m.is_empty() { "<root>" } else { m })
                .collect();
            found.push(format!("{m}: {}", c.join(" -> ")));
        }
    }
    assert!(checked > 100, "only {checked} modules found");
    assert_eq!(found, Vec::<String>::new());
}

/// The layers `pipeline/src/lib.rs` lists (`//! N. ... `a` ... `b``), module -> layer.
fn declared_layers(lib: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut layer = None;
    for line in lib.lines().map_while(|l| l.strip_prefix("//!")) {
        let line = line.trim();
        if let Some((n, _)) = line.split_once(". ") {
            if let Ok(n) = n.parse::<usize>() {
                layer = Some(n);
            }
        }
        let Some(n) = layer else { continue };
        // Every backticked word of the line's items: the module names.
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 1 && part.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                out.insert(part.to_string(), n);
            }
        }
    }
    out
}

#[test]
fn the_application_modules_use_only_the_layers_below_their_own() {
    let src = root().join("pipeline/src");
    let layers = declared_layers(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let edges = edges(&modules(&src));
    let top = |m: &str| m.split("::").next().unwrap_or("").to_string();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (m, targets) in &edges {
        let from = top(m);
        if from.is_empty() || from == "main" {
            continue;
        }
        let Some(&lf) = layers.get(&from) else {
            wrong.push(format!("{from} is in no layer of lib.rs"));
            continue;
        };
        // The root's own items are the cycle check's (`no_crate_has_an_import_cycle`).
        for t in targets
            .iter()
            .map(|t| top(t))
            .filter(|t| *t != from && !t.is_empty())
        {
            checked += 1;
            match layers.get(&t) {
                Some(&lt) if lt < lf => {}
                _ => wrong.push(format!("{m} (layer {lf}) uses {t} ({:?})", layers.get(&t))),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        layers.len() > 20 && checked > 30,
        "{layers:?}, {checked} uses"
    );
    assert_eq!(wrong, Vec::<String>::new());
}
