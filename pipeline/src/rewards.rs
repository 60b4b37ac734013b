//! Which reward grades a prompt, decided once when its record is read: the record's own
//! `reward_kind`, then `data.rewards` by `data_source`, then verl's `ability` (when math or
//! code), then whether the record carries code tests, then `data.default_reward`. A code
//! record's tests become its answer, in the canonical form the score stage reads.

use std::collections::BTreeMap;

use deltarl_schemas::{PromptRow, RewardKind};
use serde_json::Value;

/// A grader for these prompts when some are code (the sandbox checked now; the error says
/// what to install); none when all are math. `settings` is `score.code`'s, resolved.
pub fn grader_for(
    prompts: &[PromptRow],
    settings: Result<deltarl_code::Settings, String>,
) -> anyhow::Result<Option<deltarl_code::Grader>> {
    if prompts.iter().all(|p| p.reward_kind == RewardKind::Math) {
        return Ok(None);
    }
    let settings = settings.map_err(anyhow::Error::msg)?;
    Ok(Some(deltarl_code::Grader::new(settings)?))
}

/// The routing of records to rewards (`[data] rewards` and `default_reward`).
#[derive(Clone, Debug, Default)]
pub struct Routing {
    pub by_source: BTreeMap<String, RewardKind>,
    pub default: RewardKind,
}

impl Routing {
    /// The routing the `[data]` table asks for.
    pub fn of(data: &deltarl_rollout::DataOptions) -> Self {
        Routing {
            by_source: data.rewards.clone(),
            default: data.default_reward,
        }
    }

    /// The reward kind of a record, and its code tests when they are read here; the error
    /// says why the record cannot be graded.
    pub fn decide(
        &self,
        v: &Value,
    ) -> Result<(RewardKind, Option<deltarl_code::CodeRecord>), String> {
        let layout = deltarl_code::from_record(v).transpose()?;
        let named = |field: &str| -> Result<Option<RewardKind>, String> {
            match v.get(field).and_then(Value::as_str) {
                None => Ok(None),
                Some(name) => RewardKind::from_name(name)
                    .map(Some)
                    .ok_or_else(|| format!("field `{field}` = {name:?}: expected math or code")),
            }
        };
        let source = v.get("data_source").and_then(Value::as_str);
        let ability = v
            .get("ability")
            .and_then(Value::as_str)
            .and_then(RewardKind::from_name);
        let kind = match named("reward_kind")? {
            Some(k) => k,
            None => source
                .and_then(|s| self.by_source.get(s).copied())
                .or(ability)
                .or(layout.as_ref().map(|_| RewardKind::Code))
                .unwrap_or(self.default),
        };
        match kind {
            RewardKind::Math => Ok((RewardKind::Math, None)),
            RewardKind::Code => {
                let record = match layout {
                    Some(r) => r,
                    None => code_answer(v)?,
                };
                Ok((RewardKind::Code, Some(record)))
            }
        }
    }
}

/// The tests of a code record whose layout has no test fields of its own: verl's
/// `reward_model.ground_truth`, or `answer` / `ground_truth` holding a test set.
fn code_answer(v: &Value) -> Result<deltarl_code::CodeRecord, String> {
    let tests = deltarl_code::from_ground_truth(v)
        .or_else(|| {
            ["answer", "ground_truth"].iter().find_map(|f| {
                let t = v.get(*f)?;
                let text = t.as_str().map_or_else(|| t.to_string(), str::to_string);
                Some(deltarl_code::Tests::parse(&text).map_err(|e| format!("`{f}`: {e}")))
            })
        })
        .ok_or("the record is graded as code but has no tests (`tests`, `test` + `entry_point`, `test_list`, `input_output`, `verification_info`, `public_test_cases`, or a test set in `reward_model.ground_truth` / `answer`)")??;
    Ok(deltarl_code::CodeRecord {
        tests,
        problem: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_order_of_the_decision() {
        let mut r = Routing::default();
        r.by_source.insert("apps".into(), RewardKind::Code);
        let io = r#"{"inputs": ["1\n"], "outputs": ["1\n"]}"#;
        // The map routes by source; the tests come from verl's ground truth.
        let verl = json!({"data_source": "apps", "reward_model": {"ground_truth": io}});
        assert_eq!(r.decide(&verl).unwrap().0, RewardKind::Code);
        // The record's own field beats the map.
        let own = json!({"data_source": "apps", "reward_kind": "math", "answer": "3"});
        assert_eq!(r.decide(&own).unwrap().0, RewardKind::Math);
        // verl's ability, then the layout, then the default.
        let ability = json!({"ability": "code", "answer": {"stdio": {"cases": [{"input": "", "output": "1"}]}}});
        assert_eq!(r.decide(&ability).unwrap().0, RewardKind::Code);
        let he = json!({"prompt": "def f():\n", "test": "def check(c): pass", "entry_point": "f"});
        assert_eq!(r.decide(&he).unwrap().0, RewardKind::Code);
        assert_eq!(
            r.decide(&json!({"answer": "2"})).unwrap().0,
            RewardKind::Math
        );
        // Refusals say why.
        let err = r.decide(&json!({"reward_kind": "chess"})).unwrap_err();
        assert!(err.contains("`reward_kind` = \"chess\""), "{err}");
        let err = r
            .decide(&json!({"data_source": "apps", "answer": "3"}))
            .unwrap_err();
        assert!(
            err.contains("`answer`") && err.contains("not a code test set"),
            "{err}"
        );
        let err = r.decide(&json!({"data_source": "apps"})).unwrap_err();
        assert!(err.contains("has no tests"), "{err}");
    }
}
