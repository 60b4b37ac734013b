//! What changed between the settings a stage's manifest recorded and the settings now, key
//! by key (what `status` says when a configuration change makes a stage stale).

/// The settings that differ between a manifest's record and now, as `key: old -> new`
/// (dotted paths into nested settings); none when the manifest recorded no settings.
pub fn changed_keys(old: &serde_json::Value, new: &serde_json::Value) -> Vec<String> {
    fn walk(path: &str, old: &serde_json::Value, new: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value::Object;
        match (old, new) {
            (Object(a), Object(b)) => {
                let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                for k in keys {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    let null = serde_json::Value::Null;
                    walk(
                        &p,
                        a.get(k).unwrap_or(&null),
                        b.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            (a, b) if a != b => {
                let show = |v: &serde_json::Value| match v {
                    serde_json::Value::Null => "(default)".to_string(),
                    v => v.to_string(),
                };
                out.push(format!("{path}: {} -> {}", show(a), show(b)));
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if !old.is_null() {
        walk("", old, new, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::changed_keys;
    use serde_json::json;

    #[test]
    fn changed_keys_by_hand() {
        let old = json!({"lr": 3e-5, "clip": {"low": 0.2, "high": 0.28}, "gone": 1});
        let new = json!({"lr": 1e-5, "clip": {"low": 0.2, "high": 0.2}, "added": true});
        assert_eq!(
            changed_keys(&old, &new),
            [
                "added: (default) -> true",
                "clip.high: 0.28 -> 0.2",
                "gone: 1 -> (default)",
                "lr: 0.00003 -> 0.00001"
            ]
        );
        // A manifest from before settings were recorded names nothing.
        assert!(changed_keys(&serde_json::Value::Null, &new).is_empty());
    }
}
