//! Reading a crate's sources as the layering checks need them: its modules, the paths each
//! names through `crate::` and `super::` (code only), and where a name taken from the crate
//! root comes from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's modules: `a::b` -> its file.
pub(super) fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
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
            // A test module in a file of its own (`#[cfg(test)] mod tests;`) is left out as
            // an inline one is: it sits below the module it tests by construction.
            if parts.last().is_some_and(|m| m == "tests") {
                continue;
            }
            out.insert(parts.join("::"), p);
        }
    }
    out
}

/// The paths a source names after `prefix` (`crate::a::b`, `crate::{a, b::c}`), as
/// `::`-joined words.
pub(super) fn paths_after(src: &str, prefix: &str) -> Vec<String> {
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
pub(super) fn root_imports(
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
pub(super) fn edges(modules: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
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
