//! Several `cacheline proxy` instances behind haproxy keyed on the session header: the
//! haproxy configuration of docs/proxy.md ("Several proxies behind haproxy"), with its
//! ports replaced by free ones, in front of two proxies that forward to the scripted
//! upstream (scripts/agents/upstream.py). Every session's requests land on one proxy, so
//! its state stays there. Without haproxy or python3 the test says it is skipped; under
//! `CI=true` it fails instead.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// Kills and reaps its process when dropped, so a failing assertion leaves nothing behind.
struct Reaped(Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The haproxy block of docs/proxy.md.
fn documented_config() -> String {
    let doc = root().join("docs/proxy.md");
    let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let start = text
        .find("```haproxy\n")
        .unwrap_or_else(|| panic!("docs/proxy.md has no haproxy block"));
    let body = &text[start + "```haproxy\n".len()..];
    let end = body
        .find("```")
        .unwrap_or_else(|| panic!("unclosed haproxy block"));
    body[..end].to_owned()
}

/// POSTs `body` to `port` with the Claude Code session header; returns the status line.
fn post(port: u16, session: &str, body: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         x-api-key: sk-test-0000\r\nx-claude-code-session-id: {session}\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn proxies_behind_haproxy_keep_each_session_on_one_proxy() {
    let have = |cmd: &str, arg: &str| {
        Command::new(cmd)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    for (cmd, arg) in [("haproxy", "-v"), ("python3", "--version")] {
        if !have(cmd, arg) {
            assert!(!in_ci(), "CI=true and no {cmd}");
            eprintln!("SKIPPED proxies_behind_haproxy_keep_each_session_on_one_proxy: no {cmd}");
            return;
        }
    }
    let dir = std::env::temp_dir().join(format!("cacheline-proxy-haproxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // The scripted upstream.
    let port_file = dir.join("upstream.port");
    let _upstream = Reaped(
        Command::new("python3")
            .arg(root().join("scripts/agents/upstream.py"))
            .arg("--log")
            .arg(dir.join("upstream.jsonl"))
            .arg("--port-file")
            .arg(&port_file)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("upstream.py: {e}")),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let upstream_port = loop {
        if let Ok(p) = std::fs::read_to_string(&port_file)
            && let Ok(p) = p.trim().parse::<u16>()
        {
            break p;
        }
        assert!(Instant::now() < deadline, "the upstream wrote no port");
        std::thread::sleep(Duration::from_millis(50));
    };
    let upstream = format!("http://127.0.0.1:{upstream_port}");

    // Two proxies, each with its own log.
    let ports = [free_port(), free_port()];
    let mut proxies = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cacheline"));
        cmd.args(["proxy", "--listen", &format!("127.0.0.1:{port}")]);
        for api in ["anthropic", "openai", "gemini"] {
            cmd.arg("--upstream").arg(format!("{api}={upstream}"));
        }
        cmd.arg("--log").arg(dir.join(format!("proxy-{i}.jsonl")));
        cmd.arg("--state").arg(dir.join(format!("state-{i}")));
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cacheline proxy: {e}"));
        // Read its standard error (the verdict lines) to the end, so it never blocks.
        let stderr = child.stderr.take().unwrap();
        let lines = std::thread::spawn(move || {
            BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        proxies.push((Reaped(child), lines));
        wait_for_port(*port, "cacheline proxy");
    }

    // haproxy with the documented configuration, on free ports.
    let front = free_port();
    let config = documented_config()
        .replace("127.0.0.1:8790", &format!("127.0.0.1:{front}"))
        .replace("127.0.0.1:8791", &format!("127.0.0.1:{}", ports[0]))
        .replace("127.0.0.1:8792", &format!("127.0.0.1:{}", ports[1]));
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(&cfg, &config).unwrap();
    let _haproxy = Reaped(
        Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("haproxy: {e}")),
    );
    wait_for_port(front, "haproxy");

    // Five sessions, three turns each, interleaved (an odd number: round robin would move
    // every session to the other proxy on its next turn).
    let sessions: Vec<String> = (0..5)
        .map(|i| format!("session-{i}-haproxy-test"))
        .collect();
    for turn in 0..3 {
        for s in &sessions {
            let mut messages = Vec::new();
            for t in 0..=turn {
                messages.push(format!(
                    r#"{{"role":"user","content":"{s} turn {t}: list the files"}}"#
                ));
                if t < turn {
                    messages.push(format!(r#"{{"role":"assistant","content":"answer {t}"}}"#));
                }
            }
            let body = format!(
                r#"{{"model":"claude-sonnet-4-5","max_tokens":64,"system":"You are a test agent.","messages":[{}]}}"#,
                messages.join(",")
            );
            let status = post(front, s, &body);
            assert!(status.contains(" 200 "), "{s} turn {turn}: {status}");
        }
    }

    // Stop the proxies (SIGTERM: they flush their logs and print their summaries).
    let mut printed = Vec::new();
    for (child, lines) in proxies {
        let pid = child.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        printed.push(lines.join().unwrap_or_default());
        drop(child);
    }

    // Which proxy logged each session's requests.
    let mut where_: std::collections::BTreeMap<String, Vec<usize>> = Default::default();
    for i in 0..2 {
        let log = std::fs::read_to_string(dir.join(format!("proxy-{i}.jsonl"))).unwrap_or_default();
        for line in log.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let s = v["headers"]["x-claude-code-session-id"]
                .as_str()
                .unwrap_or("-")
                .to_owned();
            where_.entry(s).or_default().push(i);
        }
    }
    for s in &sessions {
        let on = where_.get(s).cloned().unwrap_or_default();
        assert_eq!(
            on.len(),
            3,
            "{s}: {on:?} (proxy of each request)\n{where_:?}"
        );
        assert!(
            on.iter().all(|p| *p == on[0]),
            "{s} was split across proxies: {on:?}"
        );
    }
    let used: std::collections::BTreeSet<usize> = where_.values().flatten().copied().collect();
    assert_eq!(used.len(), 2, "both proxies serve sessions: {where_:?}");
    // Each proxy judged its sessions' later turns against their earlier ones: no verdict
    // says a session is new on a second or third turn.
    for (i, lines) in printed.iter().enumerate() {
        let verdicts: Vec<&String> = lines.iter().filter(|l| l.contains(" #")).collect();
        assert!(
            !verdicts.is_empty(),
            "proxy {i} printed no verdicts: {lines:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
