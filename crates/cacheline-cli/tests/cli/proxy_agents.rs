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

/// The five agents, as the script names them.
use prompt_measure::report::KNOWN_AGENTS as AGENTS;

#[test]
fn five_agents_through_the_launcher_bytes_verdicts_and_exit_codes_hold() {
    let agents = AGENTS;
    let expected: Vec<(&str, &str)> = agents.iter().map(|a| (*a, "")).collect();
    assert_agents_pass("scripted", &[], &agents, &expected, "= audit");
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
    assert_agents_pass(
        "llama",
        &[("PROXY_UPSTREAM", &url), ("PROXY_MODEL", "smollm2")],
        &["qwen-code"],
        &[("qwen-code", "")],
        "= audit",
    );
}

/// Runs `scripts/proxy-agents.sh ARGS…` in a work directory named after `work` and asserts
/// each `(agent, check)` has its `PASS agent (check):` line (`PASS agent:` for the check `""`)
/// saying the bytes were equal and `verdicts` (or, off CI, the agent a SKIPPED line); `env`
/// for the script.
fn assert_agents_pass(
    work: &str,
    env: &[(&str, &str)],
    args: &[&str],
    expected: &[(&str, &str)],
    verdicts: &str,
) {
    let (code, stdout, stderr) = proxy_agents(work, env, args);
    let tail: String = stderr.lines().rev().take(40).collect::<Vec<_>>().join("\n");
    assert_eq!(
        code, 0,
        "{stdout}\n--- stderr (last lines, reversed):\n{tail}"
    );
    for (agent, check) in expected {
        let pass = if check.is_empty() {
            format!("PASS {agent}:")
        } else {
            format!("PASS {agent} ({check}):")
        };
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&pass) || l.starts_with(&format!("SKIPPED: {agent}:")))
            .unwrap_or_else(|| panic!("no {check} outcome for {agent}:\n{stdout}"));
        if line.starts_with("PASS") {
            assert!(
                line.contains("bytes equal") && line.contains(verdicts),
                "{line}"
            );
        }
    }
}

/// [`assert_agents_pass`] for a mode of one launch per turn: the verdicts those print.
fn assert_launches_pass(mode: &[&str], expected: &[(&str, &str)]) {
    let work = mode[0].trim_start_matches('-');
    assert_agents_pass(work, &[], mode, expected, "= audit of the shared log");
}

/// Each turn of each agent its own launch (`cacheline proxy -- AGENT …` per turn, the resumes
/// as each agent resumes), all sharing one `--log` and one `--state`: every request
/// forwarded byte for byte, every printed verdict the audit's of the shared log, no resumed
/// request taken for a cold start, every launch exiting 0, no state warning.
#[test]
fn each_turn_its_own_launch_resumed_requests_are_compared_across_launches() {
    let agents = AGENTS;
    let mut mode = vec!["--per-launch"];
    mode.extend(agents);
    let expected: Vec<(&str, &str)> = agents.iter().map(|a| (*a, "per-launch")).collect();
    assert_launches_pass(&mode, &expected);
}

/// Two agents at once, as in two terminals, each turn its own launch, one state and one log
/// for all: each launch sees the other's requests in the shared log's order.
#[test]
fn two_agents_at_once_each_turn_its_own_launch_share_one_state() {
    assert_launches_pass(
        &["--concurrent", "claude-code", "qwen-code"],
        &[("claude-code", "concurrent"), ("qwen-code", "concurrent")],
    );
}

/// One agent's three launches with its state damaged between turns (a torn last entry), of
/// another version (set aside: that one request is printed as its session's first), and
/// full (a 4 KiB cap, compacted at every append): every launch forwards and exits 0, each
/// warning is printed once where it arises.
#[test]
fn a_damaged_foreign_or_full_state_never_stops_a_launch_and_is_warned_of_once() {
    assert_launches_pass(
        &["--damaged", "codex"],
        &[
            ("codex", "torn-state"),
            ("codex", "other-version"),
            ("codex", "full-state"),
        ],
    );
}
