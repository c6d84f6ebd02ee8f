//! `cacheline proxy -- CMD`: a child that talks to the proxy, a real upstream on a socket,
//! verdict lines as they come, the summary, the child's exit code, and `cacheline audit`
//! on the proxy's log saying what the proxy printed.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cacheline_upstream::{Upstream, always, whole};

/// An upstream answering every request with an Anthropic reply, on its own thread; it
/// keeps every request it received.
fn upstream() -> Upstream {
    let body = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"model":"claude-sonnet-4-5","stop_reason":"end_turn","usage":{"input_tokens":50,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,"output_tokens":1}}"#;
    let headers = [
        ("Content-Type", "application/json"),
        ("Connection", "close"),
    ];
    Upstream::start_on_thread(always(whole("200 OK", &headers, body.as_bytes()))).unwrap()
}

/// A fresh log file in a directory of its own, `name`d.
fn fresh_log(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("proxy.jsonl");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_dir_all(dir.join("state"));
    (dir, log)
}

/// Two turns of one Anthropic session whose system prompt changes its date between them.
fn two_turns() -> (String, String) {
    let long = "Follow the house style. ".repeat(60);
    let b1 = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":9,"system":"{long} Today is 2026-12-04.","messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let b2 = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":9,"system":"{long} Today is 2026-12-05.","messages":[{{"role":"user","content":"hi"}},{{"role":"assistant","content":"ok"}},{{"role":"user","content":"more"}}]}}"#
    );
    (b1, b2)
}

/// The child: two requests over bash's /dev/tcp to the port in ANTHROPIC_BASE_URL.
const CHILD: &str = r#"
port=${ANTHROPIC_BASE_URL##*:}
send() {
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: SECRET-key\r\nx-claude-code-session-id: s-9\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "${#1}" "$1" >&3
  cat <&3 >/dev/null
  exec 3<&-
}
send "$B1"
send "$B2"
exit 5
"#;

#[test]
fn the_launcher_prints_each_verdict_and_the_audit_of_its_log_agrees() {
    let (dir, log) = fresh_log("cacheline-cli-proxy");
    let (b1, b2) = two_turns();
    let up = upstream();
    let anthropic = format!("anthropic={}", up.url());
    let (log_arg, state) = (log.to_string_lossy(), dir.join("state"));
    let (code, _, stderr) = launch(
        &[
            "--upstream",
            &anthropic,
            "--log",
            &log_arg,
            "--state",
            &state.to_string_lossy(),
        ],
        CHILD,
        &[("B1", &b1), ("B2", &b2)],
    );
    assert_eq!(code, Some(5), "{stderr}");
    let verdicts: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("cacheline proxy: s-9 #"))
        .filter_map(|l| l.split_once("status=200: ").map(|(_, v)| v))
        .collect();
    assert_eq!(verdicts.len(), 2, "{stderr}");
    assert!(verdicts[1].starts_with("system_changed"), "{stderr}");
    assert!(
        stderr.contains("2 requests forwarded, 2 analysed"),
        "{stderr}"
    );
    let written = std::fs::read_to_string(&log).unwrap();
    assert!(!written.contains("SECRET") && !stderr.contains("SECRET"));
    let (code, audit, err) = super::cacheline(&["audit", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for v in verdicts {
        assert!(audit.contains(v), "audit does not say {v:?}:\n{audit}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn proxy_refuses_a_malformed_writer_catalogue_naming_the_entry_and_field() {
    let dir =
        std::env::temp_dir().join(format!("cacheline-proxy-catalogue-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let user = dir.join("writers.toml");
    std::fs::write(
        &user,
        "version = 1\n[[writer]]\nid = \"mine\"\nagent = \"codex\"\nversions = \"*\"\ncause = \"edited\"\npath = \"input[0]\"\npattern = \"x\"\nname = \"n\"\nvaries = \"v\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let path = user.to_string_lossy().into_owned();
    let (code, _, err) =
        crate::cacheline(&["proxy", "--listen", "127.0.0.1:0", "--catalogue", &path]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("writer mine: field `cause`"), "{err}");
    let missing = dir.join("absent.toml").to_string_lossy().into_owned();
    let (code, _, err) =
        crate::cacheline(&["proxy", "--listen", "127.0.0.1:0", "--catalogue", &missing]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot read the writer catalogue"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn proxy_refuses_a_stabilize_entry_it_cannot_repair_and_stabilize_with_diagnose() {
    let (code, _, err) = crate::cacheline(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--stabilize=opencode-skills-listing",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the catalogue entry \"opencode-skills-listing\" is not marked `repair`"),
        "{err}"
    );
    let (code, _, err) =
        crate::cacheline(&["proxy", "--listen", "127.0.0.1:0", "--stabilize=nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no catalogue entry \"nope\""), "{err}");
    let (code, _, err) = crate::cacheline(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--stabilize",
        "--diagnose",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn with_diagnose_the_upstream_is_asked_for_its_verdict_and_the_audit_shows_it() {
    let (dir, log) = fresh_log("cacheline-cli-diagnose");
    let (b1, b2) = two_turns();
    let up = upstream();
    let out = Command::new(env!("CARGO_BIN_EXE_cacheline"))
        .args(["proxy", "--diagnose", "--upstream"])
        .arg(format!("anthropic={}", up.url()))
        .arg("--log")
        .arg(&log)
        .arg("--state")
        .arg(dir.join("state"))
        .args(["--", "bash", "-c", CHILD])
        .env("B1", &b1)
        .env("B2", &b2)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    let got: Vec<String> = up
        .received()
        .iter()
        .map(|request| String::from_utf8_lossy(request).into_owned())
        .collect();
    assert_eq!(got.len(), 2, "{stderr}");
    assert!(
        got[0].ends_with(r#","diagnostics":{"previous_message_id":null}}"#),
        "{}",
        got[0]
    );
    assert!(
        got[1].ends_with(r#","diagnostics":{"previous_message_id":"msg_1"}}"#),
        "{}",
        got[1]
    );
    assert!(
        got[1]
            .to_ascii_lowercase()
            .contains("anthropic-beta: cache-diagnosis-2026-04-07\r\n"),
        "{}",
        got[1]
    );
    assert!(
        stderr.contains("--diagnose: field added to 2 requests"),
        "{stderr}"
    );
    // The reply carries no `diagnostics`: Anthropic's "no divergence", beside the engine's
    // rewritten system prompt.
    assert!(
        stderr.contains("; provider: no change — we say system_changed (disagrees)"),
        "{stderr}"
    );
    let (code, audit, err) = super::cacheline(&["audit", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        audit.contains(
            "provider verdicts: 0 agree, 1 disagree, 0 provider_side, 0 provider_only, 0 other"
        ),
        "{audit}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_launcher_exits_127_for_a_command_not_found_and_126_for_one_not_executable() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, _) = fresh_log("cacheline-cli-proxy-exit");
    let script = dir.join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let script = script.to_str().unwrap();
    let dir_path = dir.to_str().unwrap();
    for (command, code, shell_says) in [
        ("cacheline-no-such-command-0d1f", 127, "command not found"),
        (script, 126, "Permission denied"),
        (dir_path, 126, "Is a directory"),
    ] {
        let (got, _, stderr) = super::cacheline(&["proxy", "--", command]);
        assert_eq!(got, code, "{command}: {stderr}");
        assert!(
            stderr.contains(&format!("cacheline proxy: the command `{command}`: ")),
            "{command}: {stderr}"
        );
        // The shell's own status for the same command, for comparison.
        let shell = Command::new("sh")
            .args(["-c", &format!("'{command}'")])
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(shell.status.code(), Some(code), "sh: {shell_says}");
        // The proxy still stopped cleanly: its summary line.
        assert!(stderr.contains("requests forwarded"), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `cacheline proxy ARGS -- bash -c CHILD` with `env`, bounded in time: its exit code,
/// standard output and standard error.
fn launch(args: &[&str], child: &str, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cacheline"));
    cmd.arg("proxy")
        .args(args)
        .args(["--", "bash", "-c", child])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut proc = cmd.spawn().unwrap();
    let start = Instant::now();
    while proc.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            proc.kill().unwrap();
            panic!("cacheline proxy did not exit after its child");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = proc.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_failing_log_is_reported_on_stderr_once_when_it_fails() {
    let (b1, b2) = two_turns();
    let up = upstream();
    let anthropic = format!("anthropic={}", up.url());
    // Every write to /dev/full fails as on a full disk (ENOSPC).
    let (code, _, stderr) = launch(
        &["--upstream", &anthropic, "--log", "/dev/full"],
        CHILD,
        &[("B1", &b1), ("B2", &b2)],
    );
    assert_eq!(code, Some(5), "{stderr}");
    let warned: Vec<usize> = stderr
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            l.starts_with("cacheline proxy: warning: writing the log /dev/full failed")
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(warned.len(), 1, "warned of once, when it failed:\n{stderr}");
    let summary = stderr
        .lines()
        .position(|l| l.contains("requests forwarded"))
        .unwrap_or_else(|| panic!("no summary:\n{stderr}"));
    assert!(warned[0] < summary, "before the summary:\n{stderr}");
    assert!(
        stderr.contains("the log has no line for 2 requests"),
        "{stderr}"
    );
}

#[test]
fn a_forged_model_or_session_prints_as_one_escaped_verdict_line() {
    // JSON escapes: the body is plain ASCII on the wire, the model and session hold a
    // newline, ESC sequences (clear the screen, retitle the terminal) and a BEL.
    let body = r#"{"model":"claude-sonnet-4-5\ncacheline proxy: forged #1 anthropic m input=1 cached=1 expected=1 status=200: extends line 1\u001b[2J","max_tokens":9,"metadata":{"user_id":"user_x_account_y_session_z\u001b]0;pwned\u0007"},"messages":[{"role":"user","content":"hi"}]}"#;
    let up = upstream();
    let anthropic = format!("anthropic={}", up.url());
    let (code, _, stderr) = launch(
        &["--upstream", &anthropic],
        CHILD,
        &[("B1", body), ("B2", body)],
    );
    assert_eq!(code, Some(5), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\u{7}'),
        "{stderr:?}"
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.starts_with("cacheline proxy: forged")),
        "{stderr}"
    );
    let verdicts = stderr
        .lines()
        .filter(|l| l.contains("claude-sonnet-4-5\\ncacheline proxy: forged"))
        .count();
    assert_eq!(verdicts, 2, "{stderr}");
}

#[test]
fn with_allow_remote_the_proxys_own_routes_need_the_token_printed_at_start() {
    // The child asks for /metrics without the token and prints the status line; the token
    // is printed on the proxy's standard error.
    let child = r#"
port=${ANTHROPIC_BASE_URL##*:}
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
head -n 1 <&3
exec 3<&-
"#;
    let (code, stdout, stderr) = launch(&["--allow-remote"], child, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("HTTP/1.1 401"), "{stdout}");
    let line = stderr
        .lines()
        .find(|l| l.contains("its own routes need this token"))
        .unwrap_or_else(|| panic!("no token printed:\n{stderr}"));
    let token = line.rsplit("?token=").next().unwrap_or_default();
    assert_eq!(token.len(), 32, "{line}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{line}");
}
