//! Code test sets in the layouts users bring, read into [`Tests`]:
//!
//! | layout | fields |
//! |---|---|
//! | ours | `tests` in the canonical form (an object, or its JSON as a string) |
//! | HumanEval | `prompt` (code), `test` (defines `check`), `entry_point` |
//! | MBPP | `text` or `prompt`, `test_list`, `test_setup_code` / `test_imports` |
//! | APPS, TACO | `question`, `input_output`: `{inputs, outputs, fn_name?}` (JSON text) |
//! | verl's code sets | `reward_model.ground_truth`: `{inputs, outputs, fn_name?}` or a list of `{input, output, testtype}` (JSON text or value) |
//! | LiveCodeBench | `public_test_cases` / `private_test_cases`: lists of `{input, output, testtype}`, `metadata.func_name` |
//! | open-r1 | `verification_info.test_cases`: `{input, output, type: "stdin_stdout"}` |

use serde_json::Value;

use crate::spec::{CallCase, StdioCase, Tests};

/// A code record: its tests and, when the layout's question is not a plain text field
/// (HumanEval's is code, MBPP's needs its tests shown), the question to ask.
#[derive(Clone, Debug, PartialEq)]
pub struct CodeRecord {
    pub tests: Tests,
    pub problem: Option<String>,
}

fn get<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// A value that may be JSON text (the datasets store their tests as strings).
fn decoded(v: &Value, field: &str) -> Result<Value, String> {
    match v {
        Value::String(s) => {
            serde_json::from_str(s).map_err(|e| format!("`{field}` is not JSON: {e}"))
        }
        other => Ok(other.clone()),
    }
}

/// Stdin or expected stdout: a string, or a list of lines.
fn io_text(v: &Value) -> String {
    match v {
        Value::Array(lines) => lines
            .iter()
            .map(|l| text(l).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n"),
        other => text(other).unwrap_or_default(),
    }
}

/// `{inputs, outputs, fn_name?}` (APPS, TACO, verl).
fn inputs_outputs(v: &Value, field: &str) -> Result<Tests, String> {
    let list = |k: &str| {
        v.get(k)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("`{field}` has no `{k}` list"))
    };
    let (inputs, outputs) = (list("inputs")?, list("outputs")?);
    if inputs.len() != outputs.len() {
        return Err(format!(
            "`{field}` has {} inputs but {} outputs",
            inputs.len(),
            outputs.len()
        ));
    }
    match v.get("fn_name").and_then(Value::as_str) {
        Some(name) => Ok(Tests::Call {
            fn_name: name.to_string(),
            cases: inputs
                .iter()
                .zip(outputs)
                .map(|(i, o)| CallCase {
                    args: match i {
                        Value::Array(a) => a.clone(),
                        one => vec![one.clone()],
                    },
                    output: o.clone(),
                })
                .collect(),
        }),
        None => Ok(Tests::Stdio {
            cases: inputs
                .iter()
                .zip(outputs)
                .map(|(i, o)| StdioCase {
                    input: io_text(i),
                    output: io_text(o),
                })
                .collect(),
        }),
    }
}

/// A list of `{input, output, testtype|type}` (LiveCodeBench, open-r1, some verl sets):
/// all stdin, or all functional (`input` holds one JSON argument per line) with `fn_name`.
fn case_list(list: &[Value], fn_name: Option<&str>, field: &str) -> Result<Tests, String> {
    let kind = |c: &Value| {
        c.get("testtype")
            .or_else(|| c.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("stdin")
            .to_string()
    };
    let functional = list.iter().any(|c| kind(c) == "functional");
    let field_of = |c: &Value, k: &str| {
        c.get(k)
            .map(io_text)
            .ok_or_else(|| format!("a case of `{field}` has no `{k}`"))
    };
    if !functional {
        if let Some(other) = list
            .iter()
            .map(kind)
            .find(|k| !matches!(k.as_str(), "stdin" | "stdin_stdout"))
        {
            return Err(format!(
                "`{field}` has cases of type {other:?}, which are not run"
            ));
        }
        let cases = list
            .iter()
            .map(|c| {
                Ok(StdioCase {
                    input: field_of(c, "input")?,
                    output: field_of(c, "output")?,
                })
            })
            .collect::<Result<_, String>>()?;
        return Ok(Tests::Stdio { cases });
    }
    let name = fn_name.ok_or_else(|| format!("`{field}` has functional cases but no function name (`metadata.func_name` or `fn_name`)"))?;
    let json = |s: &str| {
        serde_json::from_str::<Value>(s)
            .map_err(|e| format!("a functional case of `{field}` is not JSON ({e}): {s:?}"))
    };
    let cases = list
        .iter()
        .map(|c| {
            let args = field_of(c, "input")?
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(json)
                .collect::<Result<_, _>>()?;
            Ok(CallCase {
                args,
                output: json(&field_of(c, "output")?)?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Tests::Call {
        fn_name: name.to_string(),
        cases,
    })
}

/// Tests given as a value that is either `{inputs, outputs}`, a case list, or canonical.
fn any_form(v: &Value, fn_name: Option<&str>, field: &str) -> Result<Tests, String> {
    match v {
        Value::Array(list) => case_list(list, fn_name, field),
        Value::Object(o) if o.contains_key("inputs") => inputs_outputs(v, field),
        other => serde_json::from_value(other.clone())
            .map_err(|e| format!("`{field}` is not a test set this reader knows ({e})")),
    }
}

/// The code tests of a record, if its layout has any (see the module docs): `None` when it
/// carries no tests at all, an error naming the field when they cannot be read.
pub fn from_record(v: &Value) -> Option<Result<CodeRecord, String>> {
    let plain = |tests| {
        Ok(CodeRecord {
            tests,
            problem: None,
        })
    };
    if let Some(t) = v.get("tests") {
        return Some(
            decoded(t, "tests")
                .and_then(|t| any_form(&t, None, "tests"))
                .and_then(plain),
        );
    }
    if let (Some(test), Some(entry)) = (
        v.get("test").and_then(Value::as_str),
        v.get("entry_point").and_then(Value::as_str),
    ) {
        let prompt = v.get("prompt").and_then(Value::as_str).unwrap_or_default();
        return Some(Ok(CodeRecord {
            tests: Tests::Asserts {
                cases: vec![format!("{test}\n\ncheck({entry})\n")],
                setup: String::new(),
                prompt: Some(prompt.to_string()),
                entry_point: Some(entry.to_string()),
            },
            problem: Some(format!(
                "Complete the following Python function. Reply with the whole function in a ```python block.\n\n```python\n{prompt}```"
            )),
        }));
    }
    if let Some(list) = v.get("test_list").and_then(Value::as_array) {
        let cases: Vec<String> = list.iter().filter_map(text).collect();
        let mut setup = v.get("test_setup_code").and_then(text).unwrap_or_default();
        if let Some(imports) = v.get("test_imports").and_then(Value::as_array) {
            let imports: Vec<String> = imports.iter().filter_map(text).collect();
            setup = format!("{}\n{setup}", imports.join("\n"));
        }
        let question = v
            .get("text")
            .or_else(|| v.get("prompt"))
            .and_then(Value::as_str);
        return Some(Ok(CodeRecord {
            problem: question.map(|q| {
                format!(
                    "{q}\nYour code should pass these tests:\n\n{}\n",
                    cases.join("\n")
                )
            }),
            tests: Tests::Asserts {
                cases,
                setup: setup.trim().to_string(),
                prompt: None,
                entry_point: None,
            },
        }));
    }
    if let Some(io) = v.get("input_output") {
        return Some(
            decoded(io, "input_output")
                .and_then(|io| inputs_outputs(&io, "input_output"))
                .and_then(plain),
        );
    }
    if let Some(info) = v.get("verification_info") {
        return Some(
            decoded(info, "verification_info")
                .and_then(|info| {
                    let cases = info
                        .get("test_cases")
                        .and_then(Value::as_array)
                        .ok_or("`verification_info` has no `test_cases` list")?;
                    case_list(
                        cases,
                        info.get("fn_name").and_then(Value::as_str),
                        "verification_info.test_cases",
                    )
                })
                .and_then(plain),
        );
    }
    if v.get("public_test_cases").is_some() || v.get("private_test_cases").is_some() {
        let mut cases = Vec::new();
        for field in ["public_test_cases", "private_test_cases"] {
            if let Some(c) = v.get(field) {
                match decoded(c, field) {
                    Ok(Value::Array(list)) => cases.extend(list),
                    Ok(_) => return Some(Err(format!("`{field}` is not a list of cases"))),
                    Err(e) => return Some(Err(e)),
                }
            }
        }
        let meta = v.get("metadata").map(|m| decoded(m, "metadata"));
        let name = match meta {
            Some(Err(e)) => return Some(Err(e)),
            Some(Ok(m)) => m
                .get("func_name")
                .and_then(Value::as_str)
                .map(str::to_string),
            None => None,
        };
        return Some(case_list(&cases, name.as_deref(), "test_cases").and_then(plain));
    }
    None
}

/// Tests from a verl record's `reward_model.ground_truth` (JSON text or a value), for
/// records already known to be code.
pub fn from_ground_truth(v: &Value) -> Option<Result<Tests, String>> {
    let gt = get(v, "reward_model.ground_truth")?;
    Some(decoded(gt, "reward_model.ground_truth").and_then(|gt| {
        any_form(
            &gt,
            v.get("fn_name").and_then(Value::as_str),
            "reward_model.ground_truth",
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_layouts_by_hand() {
        let he = json!({"task_id": "HumanEval/0", "prompt": "def f(x):\n", "test": "def check(c):\n    assert c(1) == 2\n", "entry_point": "f"});
        let r = from_record(&he).unwrap().unwrap();
        assert!(
            matches!(&r.tests, Tests::Asserts { cases, entry_point: Some(e), .. } if cases[0].ends_with("check(f)\n") && e == "f")
        );
        assert!(r.problem.unwrap().contains("```python\ndef f(x):\n```"));

        let mbpp = json!({"text": "Add.", "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"], "test_setup_code": ""});
        let r = from_record(&mbpp).unwrap().unwrap();
        assert_eq!(r.tests.len(), 2);
        assert!(r.problem.unwrap().contains("assert add(0, 0) == 0"));

        let apps = json!({"question": "q", "input_output": "{\"inputs\": [\"1 2\\n\", [\"3\", \"4\"]], \"outputs\": [\"3\\n\", \"7\"]}"});
        let r = from_record(&apps).unwrap().unwrap();
        assert_eq!(
            r.tests,
            Tests::Stdio {
                cases: vec![
                    StdioCase {
                        input: "1 2\n".into(),
                        output: "3\n".into()
                    },
                    StdioCase {
                        input: "3\n4".into(),
                        output: "7".into()
                    },
                ]
            }
        );
        let taco = json!({"input_output": {"inputs": [[1, 2], [5]], "outputs": [[3], 5], "fn_name": "add"}});
        let r = from_record(&taco).unwrap().unwrap();
        assert_eq!(
            r.tests,
            Tests::Call {
                fn_name: "add".into(),
                cases: vec![
                    CallCase {
                        args: vec![json!(1), json!(2)],
                        output: json!([3])
                    },
                    CallCase {
                        args: vec![json!(5)],
                        output: json!(5)
                    },
                ]
            }
        );

        let lcb = json!({"public_test_cases": "[{\"input\": \"[1, 2]\\n3\", \"output\": \"6\", \"testtype\": \"functional\"}]", "metadata": "{\"func_name\": \"total\"}"});
        let r = from_record(&lcb).unwrap().unwrap();
        assert_eq!(
            r.tests,
            Tests::Call {
                fn_name: "total".into(),
                cases: vec![CallCase {
                    args: vec![json!([1, 2]), json!(3)],
                    output: json!(6)
                },]
            }
        );

        let r1 = json!({"verification_info": {"test_cases": [{"input": "2\n", "output": "4\n", "type": "stdin_stdout"}]}});
        assert_eq!(from_record(&r1).unwrap().unwrap().tests.len(), 1);

        let verl = json!({"reward_model": {"ground_truth": "{\"inputs\": [\"1\\n\"], \"outputs\": [\"1\\n\"]}"}});
        assert_eq!(from_ground_truth(&verl).unwrap().unwrap().len(), 1);
        assert!(from_record(&json!({"problem": "1+1", "answer": "2"})).is_none());
    }

    #[test]
    fn unreadable_tests_name_the_field() {
        let bad = json!({"input_output": "{\"inputs\": [\"1\"], \"outputs\": []}"});
        assert!(from_record(&bad)
            .unwrap()
            .unwrap_err()
            .contains("1 inputs but 0 outputs"));
        let bad = json!({"input_output": "{oops"});
        assert!(from_record(&bad)
            .unwrap()
            .unwrap_err()
            .contains("`input_output` is not JSON"));
        let bad =
            json!({"public_test_cases": [{"input": "1", "output": "1", "testtype": "functional"}]});
        assert!(from_record(&bad)
            .unwrap()
            .unwrap_err()
            .contains("no function name"));
    }
}
