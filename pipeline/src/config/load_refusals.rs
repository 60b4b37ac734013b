//! Refusals at load that name their cause: an `extends` cycle or a parent that cannot be
//! read, an empty stop string.
#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn an_extends_cycle_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.toml"), dir.path().join("b.toml"));
    std::fs::write(&a, "extends = \"b.toml\"\n").unwrap();
    std::fs::write(&b, "extends = \"a.toml\"\n").unwrap();
    let err = format!("{:#}", Resolved::load_with(&a, &[]).unwrap_err());
    let (a, b) = (a.canonicalize().unwrap(), b.canonicalize().unwrap());
    let want = format!(
        "`extends` cycle: {} -> {} -> {}",
        a.display(),
        b.display(),
        a.display()
    );
    assert!(err.contains(&want), "{err}");
    let selfish = dir.path().join("self.toml");
    std::fs::write(&selfish, "extends = \"./self.toml\"\n").unwrap();
    let err = format!("{:#}", Resolved::load_with(&selfish, &[]).unwrap_err());
    assert!(err.contains("`extends` cycle"), "{err}");
    // Ten distinct files in a line are too deep, and not a cycle.
    for i in 0..10 {
        let text = format!("extends = \"c{}.toml\"\n", i + 1);
        std::fs::write(dir.path().join(format!("c{i}.toml")), text).unwrap();
    }
    let err = format!(
        "{:#}",
        Resolved::load_with(&dir.path().join("c0.toml"), &[]).unwrap_err()
    );
    assert!(
        err.contains("chain deeper than 8") && !err.contains("cycle"),
        "{err}"
    );
}

#[test]
fn an_unreadable_parent_names_the_file_that_extends_it() {
    let dir = tempfile::tempdir().unwrap();
    for (rel, cause) in [("", "Is a directory"), ("absent.toml", "No such file")] {
        let child = dir.path().join("child.toml");
        std::fs::write(&child, format!("extends = {rel:?}\n")).unwrap();
        let err = format!("{:#}", Resolved::load_with(&child, &[]).unwrap_err());
        let want = format!("{}: `extends` = {rel:?}", child.display());
        assert!(err.contains(&want) && err.contains(cause), "{err}");
    }
}

#[test]
fn an_empty_stop_string_is_refused_by_entry() {
    let base = shipped_configs().join("tiny-arith.toml");
    let err = format!(
        "{:#}",
        Resolved::load_with(&base, &["rollout.stop=[\"\\n\\n\", \"\"]".into()]).unwrap_err()
    );
    assert!(
        err.contains("`rollout.stop` entry 2: the empty string"),
        "{err}"
    );
    Resolved::load_with(&base, &["rollout.stop=[\"\\n\\n\"]".into()]).unwrap();
}
