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

/// A crate's modules: `a::b` -> its file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            // A binary beside the library is another crate (it names the library by its
            // name, never `crate::`): the root here is the library's.
            if p == src.join("main.rs") && src.join("lib.rs").exists() {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            out.insert(parts.join("::"), p);
        }
    }
    out
}

/// The paths a source names after `prefix` (`crate::a::b`, `crate::{a, b::c}`), as
/// `::`-joined words.
fn paths_after(src: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut rest = src;
    while let Some(i) = rest.find(prefix) {
        // `xcrate::` or `my_super::` are other words.
        let before = rest[..i].chars().next_back();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item: String = item.trim().chars().take_while(|&c| word(c)).collect();
                if !item.is_empty() {
                    out.push(item);
                }
            }
        } else {
            let path: String = rest.chars().take_while(|&c| word(c)).collect();
            let path = path.trim_end_matches(':');
            // `super::*` names no module by itself.
            if !path.is_empty() {
                out.push(path.to_string());
            }
        }
    }
    out
}

/// Where each name the crate root brings in with `use` (`pub use a::{B, c::D as E};`)
/// comes from: the crate's own module (`Some("a")`, `Some("a::c")`), or None for another
/// crate's item (`pub use deltarl_sample::Plan;`). A path through the root to such a name
/// leads to that module, not to the root.
fn root_imports(
    root: &str,
    modules: &BTreeMap<String, PathBuf>,
) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for stmt in root.split(';') {
        let stmt = stmt.trim_start();
        let Some(i) = stmt.find("use ") else { continue };
        // Only a statement that is a `use` (`use`, `pub use`, `pub(crate) use`).
        if !matches!(stmt[..i].trim(), "" | "pub" | "pub(crate)") {
            continue;
        }
        let path: String = stmt[i + 4..]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let path = path
            .trim_start_matches("crate::")
            .trim_start_matches("self::");
        leaves(path, "", &mut |module, name| {
            let own = modules.contains_key(module).then(|| module.to_string());
            let own = own.filter(|m| !m.is_empty());
            out.insert(name.to_string(), own);
        });
    }
    out
}

/// The leaves of a `use` tree (`a::{b, c::{D, E as F}}`): `f(module path, name)` for each,
/// the module path `::`-joined under `prefix`.
fn leaves(tree: &str, prefix: &str, f: &mut dyn FnMut(&str, &str)) {
    let join = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_string()
        } else {
            format!("{a}::{b}")
        }
    };
    if let Some(open) = tree.find('{') {
        let head = join(prefix, tree[..open].trim_end_matches("::").trim());
        let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        // Split the group at its top-level commas.
        let (mut depth, mut start) = (0, 0);
        for (i, c) in body.char_indices().chain([(body.len(), ',')]) {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    let item = body[start..i.min(body.len())].trim();
                    if !item.is_empty() {
                        leaves(item, &head, f);
                    }
                    start = i + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim())),
        None => (tree.trim(), None),
    };
    let full = join(prefix, path);
    let (module, last) = full.rsplit_once("::").unwrap_or(("", full.as_str()));
    f(module, alias.unwrap_or(last));
}

/// Module -> the modules it names (test modules left out) and its children.
fn edges(modules: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let root_uses = match modules.get("") {
        Some(root) => root_imports(&std::fs::read_to_string(root).unwrap(), modules),
        None => BTreeMap::new(),
    };
    for (m, file) in modules {
        let text = std::fs::read_to_string(file).unwrap();
        let text = match text.find("#[cfg(test)]\nmod tests") {
            Some(i) => &text[..i],
            None => &text[..],
        };
        // Comments name modules without using them (doc links): only code counts.
        let code: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        let text = code.join("\n");
        let text = text.as_str();
        let parent: Vec<&str> = m.split("::").filter(|s| !s.is_empty()).collect();
        let parent = parent[..parent.len().saturating_sub(1)].join("::");
        let mut named: Vec<String> = paths_after(text, "crate::");
        named.extend(paths_after(text, "super::").into_iter().map(|p| {
            if parent.is_empty() {
                p
            } else {
                format!("{parent}::{p}")
            }
        }));
        let e = edges.entry(m.clone()).or_default();
        for path in named {
            let parts: Vec<&str> = path.split("::").collect();
            // The longest prefix that is a module; else an item of the crate root: the
            // module it re-exports it from, another crate's (no edge), or the root itself.
            let target = (1..=parts.len())
                .rev()
                .map(|k| parts[..k].join("::"))
                .find(|c| !c.is_empty() && modules.contains_key(c))
                .or_else(|| match root_uses.get(parts[0]) {
                    Some(from) => from.clone(),
                    None => Some(String::new()),
                });
            if let Some(target) = target.filter(|t| t != m) {
                e.insert(target);
            }
        }
        if !m.is_empty() {
            edges.entry(parent).or_default().insert(m.clone());
        }
    }
    edges
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
