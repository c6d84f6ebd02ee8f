//! `cacheline proxy -- CMD`: a child that talks to the proxy, a real upstream on a socket,
//! verdict lines as they come, the summary, the child's exit code, and `cacheline audit`
//! on the proxy's log saying what the proxy printed.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An upstream answering every request with an Anthropic reply, on its own thread.
fn upstream() -> String {
    recording_upstream(Arc::new(Mutex::new(Vec::new())))
}

/// The same, keeping every request it received in `received`.
fn recording_upstream(received: Arc<Mutex<Vec<String>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut got = Vec::new();
            let mut buf = [0u8; 8192];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if got.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            received
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&got).into_owned());
            let body = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"model":"claude-sonnet-4-5","stop_reason":"end_turn","usage":{"input_tokens":50,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,"output_tokens":1}}"#;
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
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
    let dir = std::env::temp_dir().join(format!("cacheline-cli-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("proxy.jsonl");
    let _ = std::fs::remove_file(&log);
    let long = "Follow the house style. ".repeat(60);
    let b1 = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":9,"system":"{long} Today is 2026-12-04.","messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let b2 = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":9,"system":"{long} Today is 2026-12-05.","messages":[{{"role":"user","content":"hi"}},{{"role":"assistant","content":"ok"}},{{"role":"user","content":"more"}}]}}"#
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_cacheline"))
        .args(["proxy", "--upstream"])
        .arg(format!("anthropic={}", upstream()))
        .arg("--log")
        .arg(&log)
        .args(["--", "bash", "-c", CHILD])
        .env("B1", &b1)
        .env("B2", &b2)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A proxy that never returns (as one that printed from a thread while the command
    // held standard error's lock did) fails here rather than hanging the suite.
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("cacheline proxy did not exit after its child");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(5), "{stderr}");
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
fn with_diagnose_the_upstream_is_asked_for_its_verdict_and_the_audit_shows_it() {
    let dir = std::env::temp_dir().join(format!("cacheline-cli-diagnose-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("proxy.jsonl");
    let _ = std::fs::remove_file(&log);
    let long = "Follow the house style. ".repeat(60);
    let b1 = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":9,"system":"{long} Today is 2026-12-04.","messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let b2 = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":9,"system":"{long} Today is 2026-12-05.","messages":[{{"role":"user","content":"hi"}},{{"role":"assistant","content":"ok"}},{{"role":"user","content":"more"}}]}}"#
    );
    let received = Arc::new(Mutex::new(Vec::new()));
    let out = Command::new(env!("CARGO_BIN_EXE_cacheline"))
        .args(["proxy", "--diagnose", "--upstream"])
        .arg(format!(
            "anthropic={}",
            recording_upstream(received.clone())
        ))
        .arg("--log")
        .arg(&log)
        .args(["--", "bash", "-c", CHILD])
        .env("B1", &b1)
        .env("B2", &b2)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    let got = received.lock().unwrap().clone();
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
