//! The five npm coding agents run through `cacheline proxy`'s launcher
//! (`scripts/proxy-agents.sh`): against the scripted upstream, every request's bytes as the
//! upstream received them equal the bytes the proxy received from the agent, streamed and
//! whole; `cacheline audit` of the proxy's log gives every verdict it printed; the proxy
//! exits with the child's code. Without node or an installed agent the script says
//! `SKIPPED: reason`; under `CI=true` it fails instead (and installs the pinned agents).

use std::path::Path;
use std::process::Command;

/// Runs scripts/proxy-agents.sh with `env` for `agents` in a work directory named after
/// `label`; returns (status, stdout, stderr).
pub fn proxy_agents(label: &str, env: &[(&str, &str)], agents: &[&str]) -> (i32, String, String) {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let work = std::env::temp_dir().join(format!(
        "cacheline-proxy-agents-{label}-{}",
        std::process::id()
    ));
    let out = Command::new("bash")
        .arg(root.join("scripts/proxy-agents.sh"))
        .args(agents)
        .env("CACHELINE_BIN", env!("CARGO_BIN_EXE_cacheline"))
        .env("PROXY_AGENTS_WORK", &work)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("bash scripts/proxy-agents.sh: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // The outcome lines, visible in a plain `cargo test` run (SKIPPED ones included).
    eprintln!("{stdout}");
    if out.status.success() {
        let _ = std::fs::remove_dir_all(&work);
    }
    (out.status.code().unwrap_or(-1), stdout, stderr)
}

#[test]
fn five_agents_through_the_launcher_bytes_verdicts_and_exit_codes_hold() {
    let agents = [
        "claude-code",
        "codex",
        "gemini-cli",
        "qwen-code",
        "opencode",
    ];
    let (code, stdout, stderr) = proxy_agents("scripted", &[], &agents);
    let tail: String = stderr.lines().rev().take(40).collect::<Vec<_>>().join("\n");
    assert_eq!(
        code, 0,
        "{stdout}\n--- stderr (last lines, reversed):\n{tail}"
    );
    for agent in agents {
        let line = stdout
            .lines()
            .find(|l| {
                l.starts_with(&format!("PASS {agent}:"))
                    || l.starts_with(&format!("SKIPPED: {agent}:"))
            })
            .unwrap_or_else(|| panic!("no outcome for {agent}:\n{stdout}"));
        if line.starts_with("PASS") {
            assert!(
                line.contains("bytes equal") && line.contains("= audit"),
                "{line}"
            );
        }
    }
}

/// Qwen Code (Chat Completions) through the launcher to the real llama.cpp server the live
/// tests use (located the same way: `CACHELINE_LLAMA_URL`, else the script's URL file),
/// behind `scripts/agents/relay.py`, which records the bytes llama-server is sent. The
/// agent's prompts exceed SmolLM2's context, so llama-server answers them `400`; the
/// whole request is answered. Bytes, verdicts and exit codes are asserted, not answers.
#[test]
fn qwen_code_through_the_launcher_to_llama_server_bytes_and_verdicts_hold() {
    let test = "qwen_code_through_the_launcher_to_llama_server_bytes_and_verdicts_hold";
    let ci = matches!(std::env::var("CI").as_deref(), Ok("true" | "1"));
    let url = match prompt_llama::locate_server() {
        Ok(prompt_llama::ServerLocation::Found { url, .. }) => url,
        Ok(prompt_llama::ServerLocation::Absent { reason }) => {
            assert!(
                !ci,
                "{test}: CI=true and no live llama.cpp server: {reason}"
            );
            eprintln!("SKIPPED {test}: no live llama.cpp server: {reason}");
            return;
        }
        Err(e) => panic!("{test}: {e}"),
    };
    let (code, stdout, stderr) = proxy_agents(
        "llama",
        &[("PROXY_UPSTREAM", &url), ("PROXY_MODEL", "smollm2")],
        &["qwen-code"],
    );
    let tail: String = stderr.lines().rev().take(40).collect::<Vec<_>>().join("\n");
    assert_eq!(
        code, 0,
        "{stdout}\n--- stderr (last lines, reversed):\n{tail}"
    );
    if let Some(line) = stdout.lines().find(|l| l.starts_with("PASS qwen-code:")) {
        assert!(
            line.contains("bytes equal") && line.contains("= audit"),
            "{line}"
        );
    } else {
        assert!(stdout.contains("SKIPPED: qwen-code:"), "{stdout}");
    }
}
