//! One prompt from one record of a dataset, in the layouts users bring (ours, verl's, TRL's,
//! the code sets'), with every field of the wrong type or shape refused by name.

use deltarl_schemas::PromptRow;
use serde_json::Value;

use crate::rewards::Routing;

fn json_str(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Where the answer may be, in order: the simple layout's and TRL's usual columns, verl's,
/// then a worked `solution` whose last `\boxed{}` is the answer (NuminaMath and the like).
const ANSWER_FIELDS: &str = "`answer` (or `reward_model.ground_truth`, `ground_truth`, `solution`)";

/// One prompt from one record, in any of the layouts users bring:
/// * simple: `problem`, `answer`, optional `id`, `data_source`, `system`;
/// * verl's RL data: `prompt` as a list of `{role, content}` (the question is the last user
///   message; system turns are kept for the chat template), `reward_model.ground_truth`,
///   `data_source`, `extra_info.index`;
/// * TRL's: `prompt` as a string or a message list, the answer in `answer`,
///   `ground_truth` or `solution`.
///
/// * code sets (see `deltarl_code::from_record`): the question in `question` (APPS) or
///   made from the layout (HumanEval's code prompt, MBPP's tests); the answer is the tests.
///
/// Without an `id` (or HumanEval's `task_id`, or verl's `extra_info.index`) the id is a
/// hash of the question and the answer: stable under reordering, and every later table is
/// keyed by it.
pub fn prompt_row(v: &Value, routing: &Routing) -> Result<PromptRow, String> {
    if !v.is_object() {
        return Err(format!(
            "the record is {}, expected a JSON object of fields",
            kind(v)
        ));
    }
    let (reward_kind, code) = routing.decide(v)?;
    let field = |path: &str| -> Option<String> {
        path.split('.')
            .try_fold(v, |v, k| v.get(k))
            .and_then(json_str)
    };
    let given = code.as_ref().and_then(|c| c.problem.clone());
    let (problem, system) = if let Some(p) = given.or(text_field(v, "problem")?) {
        (p, text_field(v, "system")?)
    } else if let Some(q) = text_field(v, "question")? {
        (q, text_field(v, "system")?)
    } else {
        match v.get("prompt") {
            Some(Value::String(s)) => (s.clone(), text_field(v, "system")?),
            Some(Value::Array(messages)) => messages_prompt(messages)?,
            Some(other) => {
                return Err(format!(
                    "field `prompt` is {other}, expected a string or a list of {{role, content}}"
                ))
            }
            None => return Err("missing field `problem` (or `prompt`)".into()),
        }
    };
    if problem.trim().is_empty() {
        return Err("the question is empty".into());
    }
    let answer = match &code {
        Some(c) => c.tests.to_gold(),
        None => math_gold(v)?,
    };
    // An empty gold matches no answer, so every response would score 0.
    if answer.trim().is_empty() {
        return Err("the answer is empty (no response could match it)".into());
    }
    let data_source = field("data_source");
    let index = match v.get("extra_info").and_then(|e| e.get("index")) {
        None | Some(Value::Null) => None,
        Some(i) => Some(json_str(i).ok_or_else(|| {
            format!("field `extra_info.index` is {i}, expected a number or a string")
        })?),
    };
    let id = match (
        field("id").or_else(|| field("task_id")),
        &data_source,
        index,
    ) {
        (Some(id), _, _) => id,
        (None, Some(s), Some(k)) => format!("{s}-{k}"),
        (None, None, Some(k)) => k,
        (None, _, None) => {
            let h = deltarl_schemas::sha256_hex(format!("{problem}\u{0}{answer}").as_bytes());
            format!("h{}", &h[..16])
        }
    };
    Ok(PromptRow {
        id,
        problem,
        answer,
        data_source,
        system,
        reward_kind,
    })
}

/// A math record's gold: the first of the answer fields present (GSM8K's `#### N` ending
/// read off), else the last `\boxed{}` of a worked `solution`. A gold field present but
/// neither text nor a number is refused by name, not read as absent; null is absent.
fn math_gold(v: &Value) -> Result<String, String> {
    for path in ["answer", "reward_model.ground_truth", "ground_truth"] {
        match path.split('.').try_fold(v, |v, k| v.get(k)) {
            None | Some(Value::Null) => {}
            Some(x) => {
                return json_str(x)
                    .map(|a| final_answer(&a))
                    .ok_or_else(|| format!("field `{path}` is {x}, expected a string or a number"))
            }
        }
    }
    match v.get("solution") {
        None | Some(Value::Null) => Err(format!("missing field {ANSWER_FIELDS}")),
        Some(x) => {
            let s =
                json_str(x).ok_or_else(|| format!("field `solution` is {x}, expected a string"))?;
            let boxed = deltarl_verify::extract(&s, &deltarl_verify::Policy::Boxed.options());
            boxed.map(|b| b.answer).ok_or_else(|| {
                "field `solution` has no \\boxed{} answer (give the answer in `answer`)".to_string()
            })
        }
    }
}

/// GSM8K's answers are worked solutions ending `#### 72`: the gold is what follows the
/// last `####`. Any other answer is kept as it is.
fn final_answer(answer: &str) -> String {
    match answer.rsplit_once("####") {
        Some((work, last)) if !work.trim().is_empty() && !last.trim().is_empty() => {
            last.trim().to_string()
        }
        _ => answer.to_string(),
    }
}

/// A JSON value's kind, for a message.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A text field: a string or a number; absent or null is `None`; anything else is refused.
fn text_field(v: &Value, name: &str) -> Result<Option<String>, String> {
    match v.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => json_str(x)
            .map(Some)
            .ok_or_else(|| format!("field `{name}` is {x}, expected a string")),
    }
}

/// The question and system turns of a chat-format prompt: every message a `{role,
/// content}` of strings, the question the last user message.
fn messages_prompt(messages: &[Value]) -> Result<(String, Option<String>), String> {
    let mut turns = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let part = |k: &str| match m.get(k) {
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(other) => Err(format!(
                "`prompt` message {}: `{k}` is {other}, expected a string",
                i + 1
            )),
            None => Err(format!("`prompt` message {}: no `{k}`", i + 1)),
        };
        turns.push((part("role")?, part("content")?));
    }
    let question = turns
        .iter()
        .rev()
        .find(|(role, _)| *role == "user")
        .map(|(_, content)| content.to_string())
        .ok_or("`prompt` has no user message")?;
    let system: Vec<&str> = turns
        .iter()
        .filter(|(role, _)| *role == "system")
        .map(|(_, content)| *content)
        .collect();
    Ok((question, (!system.is_empty()).then(|| system.join("\n\n"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refusal(v: Value) -> String {
        prompt_row(&v, &Routing::default()).unwrap_err()
    }

    /// Records whose nested fields have the wrong type or shape are refused by field.
    #[test]
    fn wrong_shapes_are_refused_by_field() {
        let user = |c: Value| json!({"prompt": [{"role": "user", "content": c}], "answer": "1"});
        assert!(refusal(user(json!(5))).contains("message 1: `content` is 5"));
        let no_role = json!({"prompt": [{"content": "hi"}], "answer": "1"});
        assert!(refusal(no_role).contains("message 1: no `role`"));
        let int_role = json!({"prompt": [{"role": 1, "content": "hi"}], "answer": "1"});
        assert!(refusal(int_role).contains("`role` is 1"));
        let no_user = json!({"prompt": [{"role": "system", "content": "be brief"}], "answer": "1"});
        assert!(refusal(no_user).contains("no user message"));
        assert!(refusal(user(json!("  "))).contains("the question is empty"));
        assert!(refusal(json!({"prompt": "", "answer": "1"})).contains("the question is empty"));
        let index = json!({"problem": "x", "answer": "1", "extra_info": {"index": {"a": 1}}});
        assert!(refusal(index).contains("`extra_info.index` is {\"a\":1}"));
        let unboxed = json!({"prompt": "2+2?", "solution": "it is four"});
        assert!(refusal(unboxed).contains("`solution` has no \\boxed{} answer"));
        assert!(refusal(json!({"problem": ["x"], "answer": "1"}))
            .contains("field `problem` is [\"x\"]"));
        assert!(refusal(json!({"problem": "x", "answer": [1]}))
            .contains("field `answer` is [1], expected a string or a number"));
        let verl_gold = json!({"prompt": "x", "reward_model": {"ground_truth": {"a": 1}}});
        assert!(refusal(verl_gold).contains("field `reward_model.ground_truth` is {\"a\":1}"));
        for empty in ["", "  \n"] {
            assert!(
                refusal(json!({"problem": "x", "answer": empty})).contains("the answer is empty")
            );
        }
        assert!(refusal(json!([{"problem": "x", "answer": "1"}]))
            .contains("the record is an array, expected a JSON object"));
        assert!(refusal(json!(7)).contains("the record is a number"));
        assert!(refusal(json!({"problem": "x", "solution": ["a"]}))
            .contains("field `solution` is [\"a\"], expected a string"));
        // A null gold is an absent one: the next field is read.
        let row = prompt_row(
            &json!({"problem": "x", "answer": null, "ground_truth": 3}),
            &Routing::default(),
        );
        assert_eq!(row.map(|r| r.answer), Ok("3".to_string()));
    }

    #[test]
    fn final_answers_by_hand() {
        assert_eq!(final_answer("so 3 + 4 = 7\n#### 7"), "7");
        assert_eq!(final_answer("#### 5"), "#### 5");
        assert_eq!(final_answer("\\frac{1}{2}"), "\\frac{1}{2}");
    }
}
