//! The sandbox against the escapes and abuses a model's program might try: each must end
//! inside the limits and leave the host untouched. Needs bubblewrap (`make sandbox`).

use std::path::Path;
use std::time::Duration;

use deltarl_sandbox::{Exit, Limits, Sandbox};

const PY: &str = "/usr/bin/python3";

fn sandbox() -> Sandbox {
    Sandbox::detect().expect("bubblewrap must be installed for these tests (make sandbox)")
}

fn python(sb: &Sandbox, code: &str, limits: &Limits) -> deltarl_sandbox::Output {
    sb.run(
        &[Path::new(PY), Path::new("-c"), Path::new(code)],
        b"",
        limits,
    )
    .expect("the sandbox starts")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn short() -> Limits {
    Limits {
        wall: Duration::from_secs(3),
        cpu_seconds: 3,
        ..Limits::default()
    }
}

#[test]
fn runs_a_program_and_reads_its_stdin() {
    let sb = sandbox();
    let out = sb
        .run(
            &[
                Path::new(PY),
                Path::new("-c"),
                Path::new("print(input()[::-1])"),
            ],
            b"abc\n",
            &short(),
        )
        .unwrap();
    assert_eq!(
        (out.exit, text(&out.stdout).as_str()),
        (Exit::Code(0), "cba\n")
    );
    let err = python(&sb, "raise SystemExit(3)", &short());
    assert_eq!(err.exit, Exit::Code(3));
}

#[test]
fn no_network_and_no_host_files() {
    let sb = sandbox();
    // A server on the host's loopback, which the program tries to reach.
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let run_dir = tempfile::tempdir().unwrap();
    // A file in the host's /tmp: the program's /tmp is its own, so it neither sees nor
    // changes it.
    let host_tmp = std::env::temp_dir().join(format!("deltarl-sandbox-probe-{port}"));
    std::fs::write(&host_tmp, "host").unwrap();
    let code = format!(
        r#"
import socket, os
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=1); print("net reached")
except OSError: print("net refused")
print("sees host tmp" if os.path.exists({tmp:?}) else "own tmp")
for p in [{run:?} + "/x", {home:?} + "/x", "/usr/x", "/x", "/dev/x"]:
    try:
        open(p, "w").write("x"); print("wrote", p)
    except OSError: print("blocked")
print(sorted(os.listdir("/")))
"#,
        run = run_dir.path().display().to_string(),
        tmp = host_tmp.display().to_string(),
        home = home,
    );
    let out = python(&sb, &code, &short());
    let lines = text(&out.stdout);
    assert_eq!(out.exit, Exit::Code(0), "{}", text(&out.stderr));
    assert!(lines.starts_with("net refused\nown tmp\n"), "{lines}");
    assert_eq!(lines.matches("blocked").count(), 5, "{lines}");
    assert!(!lines.contains("wrote"), "{lines}");
    assert!(
        !lines.contains("'root'") && !lines.contains("'work'"),
        "{lines}"
    );
    assert_eq!(std::fs::read_dir(run_dir.path()).unwrap().count(), 0);
    assert_eq!(std::fs::read_to_string(&host_tmp).unwrap(), "host");
    std::fs::remove_file(&host_tmp).unwrap();
    // The server saw no connection.
    server.set_nonblocking(true).unwrap();
    assert!(server.accept().is_err());
}

#[test]
fn a_fork_bomb_stops_at_the_process_limit_and_dies_with_the_sandbox() {
    let sb = sandbox();
    let code = r#"
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60); os._exit(0)
        n += 1
except OSError:
    print("stopped after", n, flush=True)
time.sleep(60)
"#;
    let out = python(&sb, code, &short());
    assert_eq!(out.exit, Exit::WallTimeout);
    let said = text(&out.stdout);
    let n: u64 = said
        .trim()
        .strip_prefix("stopped after ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{said:?} {}", text(&out.stderr)));
    assert!(n < short().processes, "{n}");
    if sb.drops_privileges() {
        // Nothing alive is left; bubblewrap's outer process exits without reaping its
        // namespace's first process, which the host's init reaps soon after.
        let alive = deltarl_sandbox::processes_of(out.uid, false);
        assert!(
            alive.is_empty(),
            "processes survived the sandbox: {alive:?}"
        );
        let waited = std::time::Instant::now();
        while !deltarl_sandbox::processes_of(out.uid, true).is_empty() {
            assert!(
                waited.elapsed() < Duration::from_secs(10),
                "zombies never reaped"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn memory_disk_time_and_output_are_bounded() {
    let sb = sandbox();
    let limits = short();
    // 50 GB in one allocation.
    let out = python(&sb, "bytearray(50 << 30)", &limits);
    assert!(
        text(&out.stderr).contains("MemoryError"),
        "{}",
        text(&out.stderr)
    );
    // A 10 GB file: past the file-size limit the write fails.
    let code = "f = open('/tmp/big', 'wb')\nfor _ in range(10 << 10): f.write(b'0' * (1 << 20))";
    let out = python(&sb, code, &limits);
    assert!(
        text(&out.stderr).contains("File too large"),
        "{}",
        text(&out.stderr)
    );
    // Busy forever: killed by the wall clock (or the CPU limit, whichever is first).
    let out = python(&sb, "while True: pass", &limits);
    assert!(
        matches!(
            out.exit,
            Exit::WallTimeout | Exit::Code(137) | Exit::Code(152)
        ),
        "{:?}",
        out.exit
    );
    assert!(out.elapsed < Duration::from_secs(6), "{:?}", out.elapsed);
    // A flood of output: drained and capped, not blocking, not held in memory.
    let out = python(
        &sb,
        "import sys\nwhile True: sys.stdout.write('y' * 65536)",
        &limits,
    );
    assert_eq!(out.exit, Exit::WallTimeout);
    assert!(out.stdout_truncated && out.stdout.len() == limits.stdout_bytes);
    // Closing stdout and killing its parent end the program, not us.
    let out = python(
        &sb,
        "import os\nos.close(1)\nos.kill(os.getppid(), 9)\nprint('x')",
        &limits,
    );
    assert!(
        matches!(out.exit, Exit::Code(c) if c != 0),
        "{:?}",
        out.exit
    );
}

#[test]
fn runs_see_neither_each_other_nor_earlier_runs() {
    let sb = sandbox();
    let first = python(
        &sb,
        "open('/tmp/secret', 'w').write('s'); import os; print(os.listdir('/tmp'))",
        &short(),
    );
    assert_eq!(text(&first.stdout).trim(), "['secret']");
    let second = python(&sb, "import os; print(os.listdir('/tmp'))", &short());
    assert_eq!(text(&second.stdout).trim(), "[]");
}

#[test]
fn an_interpreter_outside_the_sandbox_is_refused_by_name() {
    let sb = sandbox();
    let err = sb
        .check_visible(Path::new("/root/.venv/bin/python"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/root/.venv/bin/python") && err.contains("/usr"),
        "{err}"
    );
    sb.check_visible(Path::new(PY)).unwrap();
}

/// Every run leaves no process of its uid behind, zombies included, so a slot runs any
/// number of programs in a row: more than the process limit (64) of them, which would fail
/// to fork if the namespaces' first processes waited for the host's init to reap them.
#[test]
fn runs_in_a_row_leave_no_zombies_against_the_process_limit() {
    let sb = sandbox();
    let limits = short();
    assert!(limits.processes < 100);
    for i in 0..100 {
        let out = sb
            .run(&[Path::new("/usr/bin/true")], b"", &limits)
            .expect("the sandbox starts");
        assert_eq!(out.exit, Exit::Code(0), "run {i}: {}", text(&out.stderr));
        if sb.drops_privileges() {
            let left = deltarl_sandbox::processes_of(out.uid, true);
            assert!(left.is_empty(), "run {i} left {left:?} of uid {}", out.uid);
        }
    }
}
