//! The writer catalogue: every entry named on a captured or reconstructed request pair, no
//! writer named for another agent or a version out of range, malformed catalogues refused
//! with the entry and field named, and learned volatile blocks.
//!
//! Reconstructed pairs are built from a captured body of the agent
//! (`tests/fixtures/agents/<agent>/capture.jsonl`) with the change the cited report describes,
//! in the same API shape; where no capture of the agent exists (goose), from Anthropic's
//! documented Messages shape (<https://docs.anthropic.com/en/api/messages>).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use prompt_measure::AuditConfig;
use prompt_measure::audit::{RequestAudit, verdict_text};
use prompt_measure::catalogue::{
    AgentId, Catalogue, CatalogueError, LEARNED_SESSIONS, PathGlob, Version, VersionRange, When,
    WriterFinding, normalised_path,
};
use serde_json::{Value, json};

use super::audit::{Audited, audit_bytes};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// The folder of a capture: `tests/fixtures/<name>` for a name with a folder
/// (`agents-newest/qwen-code`: an agent's newest release), else `tests/fixtures/agents/<name>`
/// (an agent's plain session), else `tests/fixtures/agent-paths/<name>` (one path of an agent:
/// MCP, compaction).
fn fixture_dir(name: &str) -> PathBuf {
    let fixtures = fixtures();
    if name.contains('/') {
        return fixtures.join(name);
    }
    let agent = fixtures.join("agents").join(name);
    if agent.is_dir() {
        agent
    } else {
        fixtures.join("agent-paths").join(name)
    }
}

/// The names of the captures in `tests/fixtures/<folder>/*`, sorted.
fn captures_in(folder: &str) -> Vec<String> {
    let dir = fixtures().join(folder);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap_or_else(|e| panic!("{e}")))
        .filter(|e| e.path().join("capture.jsonl").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The names of the agent-path captures, `tests/fixtures/agent-paths/*`, sorted.
fn agent_paths() -> Vec<String> {
    captures_in("agent-paths")
}

/// The newest releases' captures, as `agents-newest/<agent>`, sorted.
fn newest() -> Vec<String> {
    captures_in("agents-newest")
        .into_iter()
        .map(|a| format!("agents-newest/{a}"))
        .collect()
}

fn capture(agent: &str) -> Vec<Value> {
    let path = fixture_dir(agent).join("capture.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{agent}: {e}")))
        .collect()
}

/// The line of the capture at log line `n` (from 1).
fn line(agent: &str, n: usize) -> Value {
    capture(agent)[n - 1].clone()
}

fn body(line: &Value) -> Value {
    match &line["request"] {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}")),
        other => other.clone(),
    }
}

/// `line` with `body` as its request, no response, sent `dt` seconds after it was.
fn with_body(line: &Value, body: &Value, dt: f64) -> Value {
    let mut l = line.clone();
    l["request"] = Value::String(body.to_string());
    if let Some(o) = l.as_object_mut() {
        o.remove("response");
    }
    let ts = l["ts"].as_f64().unwrap_or(0.0);
    l["ts"] = json!(ts + dt);
    l
}

fn with_user_agent(mut line: Value, ua: &str) -> Value {
    line["headers"]["user-agent"] = Value::String(ua.to_owned());
    line
}

/// `lines` as one launch per turn wrote them (a proxy launched for each run of the agent):
/// a turn begins at each line of `turns` (from 1), and its lines carry that launch's id.
fn launched(lines: Vec<Value>, turns: &[usize]) -> Vec<Value> {
    lines
        .into_iter()
        .enumerate()
        .map(|(i, mut l)| {
            let turn = turns.iter().filter(|&&t| t <= i + 1).count();
            l["launch"] = Value::String(format!("launch-{turn}"));
            l
        })
        .collect()
}

fn log(lines: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

fn audit_lines(name: &str, lines: &[Value]) -> Audited {
    audit_bytes(name, &log(lines), AuditConfig::default())
}

fn at(a: &Audited, n: u64) -> &RequestAudit {
    a.requests
        .iter()
        .find(|r| r.line == n)
        .unwrap_or_else(|| panic!("no request at line {n}"))
}

fn writer_id(r: &RequestAudit) -> Option<String> {
    match &r.writer {
        Some(WriterFinding::Catalogue(m)) => Some(m.id.clone()),
        _ => None,
    }
}

fn text_of(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_owned()
}

/// One case: the entry it covers, the log, the line whose verdict names the entry.
struct Case {
    id: &'static str,
    log: Vec<Value>,
    line: u64,
}

fn captured(id: &'static str, agent: &str, line: u64) -> Case {
    Case {
        id,
        log: capture(agent),
        line,
    }
}

/// A captured line of an entry about resumes: the capture as one launch per turn wrote it
/// (the turns beginning at `turns`), so the resumed request's predecessor is another
/// launch's.
fn captured_launched(id: &'static str, agent: &str, turns: &[usize], line: u64) -> Case {
    Case {
        id,
        log: launched(capture(agent), turns),
        line,
    }
}

/// Claude Code `--resume`: messages[1], the role:system session-start context with its
/// `# Environment` block, sent as one text block with a 1-hour breakpoint, is replayed as a
/// plain string; the provider reads only the tools and system (anthropics/claude-code#93490).
/// The second request is the resumed run's: another launch's.
fn claude_code_resume_session_context() -> Case {
    let base = line("claude-code", 2);
    let context = "SessionStart hook additional context: project notes.\n# Environment\nWorking directory: /tmp/cacheline-capture/claude-code/project\nPlatform: linux\n".repeat(40);
    let mut earlier = body(&base);
    let messages = earlier["messages"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("no messages"));
    messages.insert(
        1,
        json!({"role": "system", "content": [{"type": "text", "text": context, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}),
    );
    let mut later = earlier.clone();
    let messages = later["messages"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("no messages"));
    messages[1] = json!({"role": "system", "content": context});
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Done."}]}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "And now?", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}));
    let mut second = with_body(&base, &later, 30.0);
    // The provider read the tools and system only: its reply's usage (Anthropic's documented
    // `usage` of a whole Messages reply).
    second["response"] = json!({
        "id": "msg_resume", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "cache_creation_input_tokens": 6000, "cache_read_input_tokens": 2000, "output_tokens": 2}
    });
    Case {
        id: "claude-code-resume-session-context",
        log: launched(vec![with_body(&base, &earlier, 0.0), second], &[1, 2]),
        line: 2,
    }
}

/// opencode: `git init` while the session runs turns the workspace root from `/` into the
/// project and the git repo flag from `no` to `yes` (anomalyco/opencode#29672).
fn opencode_git_repo_flag() -> Case {
    let base = line("opencode", 5);
    let later = body(&base);
    let mut earlier = later.clone();
    let text = text_of(&earlier["system"][0]["text"]);
    let from = "Workspace root folder: /tmp/cacheline-capture/opencode/project\n  Is directory a git repo: yes";
    assert!(text.contains(from), "the captured <env> block changed");
    earlier["system"][0]["text"] = Value::String(text.replace(
        from,
        "Workspace root folder: /\n  Is directory a git repo: no",
    ));
    Case {
        id: "opencode-git-repo-flag",
        log: vec![
            with_body(&base, &earlier, 0.0),
            with_body(&base, &later, 20.0),
        ],
        line: 2,
    }
}

/// opencode: a skill found mid-session is added to the `<available_skills>` listing in the
/// system prompt (anomalyco/opencode#31363).
fn opencode_skills_listing() -> Case {
    let base = line("opencode", 5);
    let earlier = body(&base);
    let mut later = earlier.clone();
    let text = text_of(&later["system"][0]["text"]);
    assert!(text.contains("<available_skills>\n"));
    later["system"][0]["text"] = Value::String(text.replace(
        "<available_skills>\n",
        "<available_skills>\n  <skill>\n    <name>release-notes</name>\n    <description>Write release notes from the git log.</description>\n    <location>.opencode/skills/release-notes/SKILL.md</location>\n  </skill>\n",
    ));
    Case {
        id: "opencode-skills-listing",
        log: vec![
            with_body(&base, &earlier, 0.0),
            with_body(&base, &later, 20.0),
        ],
        line: 2,
    }
}

/// goose 1.0.18: the system prompt's `The current date is {{current_date_time}}.` to the
/// second (block/goose#2431). No goose capture: an Anthropic Messages body of the documented
/// shape, its system a text block with a breakpoint.
fn goose_system_timestamp() -> Case {
    let system = |time: &str| {
        json!([{"type": "text", "text": format!(
            "You are a general-purpose AI agent called Goose, created by Block.\n\nThe current date is 2025-05-03 {time}.\n\n{}",
            "# Extensions\nThe developer extension runs shell commands and edits files.\n".repeat(60)
        ), "cache_control": {"type": "ephemeral"}}])
    };
    let messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "list the files"}]}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "README.md, src/"}]}),
    ];
    let first = json!({"model": "claude-3-5-sonnet-latest", "max_tokens": 4096, "system": system("10:11:12"), "messages": messages});
    let mut more = messages.clone();
    more.push(json!({"role": "user", "content": [{"type": "text", "text": "open README.md"}]}));
    let second = json!({"model": "claude-3-5-sonnet-latest", "max_tokens": 4096, "system": system("10:11:40"), "messages": more});
    let wrap = |b: &Value, ts: f64| json!({"ts": ts, "path": "/v1/messages", "headers": {"user-agent": "goose/1.0.18", "anthropic-version": "2023-06-01"}, "request": b.to_string()});
    Case {
        id: "goose-system-timestamp",
        log: vec![
            wrap(&first, 1_746_267_072.0),
            wrap(&second, 1_746_267_100.0),
        ],
        line: 2,
    }
}

/// oh-my-pi: the skills listing in the first system block changes when the skills are
/// re-discovered (can1357/oh-my-pi#8870). No oh-my-pi capture: an Anthropic Messages body of
/// the documented shape, its user-agent `omp/<version>` as omp prints its version.
fn oh_my_pi_skills_listing() -> Case {
    let system = |skills: &str| {
        json!([{"type": "text", "text": format!(
            "You are omp, a coding agent.\n\n# Skills & Rules\n<skills>\n{skills}</skills>\n\n{}",
            "# Tools\nread, edit, bash: use them to inspect and change the workspace.\n".repeat(60)
        ), "cache_control": {"type": "ephemeral"}}])
    };
    let messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "write a skill for release notes"}]}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "Created .omp/skills/release-notes/SKILL.md"}]}),
    ];
    let first = json!({"model": "claude-sonnet-4-6", "max_tokens": 4096, "system": system("- review: review a diff\n"), "messages": messages});
    let mut more = messages.clone();
    more.push(json!({"role": "user", "content": [{"type": "text", "text": "use it"}]}));
    let second = json!({"model": "claude-sonnet-4-6", "max_tokens": 4096, "system": system("- release-notes: write release notes\n- review: review a diff\n"), "messages": more});
    let wrap = |b: &Value, ts: f64| json!({"ts": ts, "path": "/v1/messages", "headers": {"user-agent": "omp/17.3.5", "anthropic-version": "2023-06-01"}, "request": b.to_string()});
    Case {
        id: "oh-my-pi-skills-listing",
        log: vec![
            wrap(&first, 1_787_000_000.0),
            wrap(&second, 1_787_000_030.0),
        ],
        line: 2,
    }
}

fn cases() -> Vec<Case> {
    vec![
        captured("claude-code-current-date", "claude-code", 8),
        captured("gemini-cli-session-date", "gemini-cli", 5),
        // An entry about resumes: the capture as one launch per turn (turns at lines 1, 3, 5).
        captured_launched(
            "gemini-cli-resume-thought-signature",
            "gemini-cli",
            &[1, 3, 5],
            3,
        ),
        captured("qwen-code-session-date", "qwen-code", 5),
        // Qwen Code 0.24.4's same-day --continue drops turn 1's date reminder.
        captured_launched(
            "qwen-code-resume-date-reminder",
            "agents-newest/qwen-code",
            &[1, 3, 5],
            3,
        ),
        captured("opencode-env-date", "opencode", 6),
        // turn 2's --continue without the MCP server: its tools leave `tools`.
        captured("claude-code-mcp-tools", "claude-code-mcp", 5),
        // the first turn after /compact: message 0 is the summary, the fingerprint changed.
        captured("claude-code-billing-fingerprint", "claude-code-compact", 13),
        claude_code_resume_session_context(),
        opencode_git_repo_flag(),
        opencode_skills_listing(),
        goose_system_timestamp(),
        oh_my_pi_skills_listing(),
    ]
}

fn builtin() -> &'static Catalogue {
    Catalogue::builtin().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_catalogue_entry_is_named_on_its_request_pair() {
    let mut covered = BTreeSet::new();
    for case in cases() {
        let a = audit_lines(case.id, &case.log);
        let r = at(&a, case.line);
        assert_eq!(
            writer_id(r).as_deref(),
            Some(case.id),
            "{}: {}",
            case.id,
            verdict_text(r)
        );
        let entry = builtin()
            .writers()
            .iter()
            .find(|w| w.id == case.id)
            .unwrap_or_else(|| panic!("{}: no such entry", case.id));
        // The verdict line ends with the one writer clause.
        let text = verdict_text(r);
        assert!(
            text.contains(&format!(" — {} (", entry.name)),
            "{}: {text}",
            case.id
        );
        assert!(
            text.ends_with(&format!(
                "— fix: {}",
                entry.workaround.as_deref().unwrap_or("none known")
            )),
            "{}: {text}",
            case.id
        );
        println!("{}: {text}", case.id);
        assert!(covered.insert(case.id), "{} has two cases", case.id);
    }
    let ids: BTreeSet<&str> = builtin().writers().iter().map(|w| w.id.as_str()).collect();
    assert_eq!(
        covered, ids,
        "every catalogue entry needs a case, and every case an entry"
    );
}

#[test]
fn the_verdict_line_names_the_writer_the_issue_and_the_workaround() {
    let case = opencode_skills_listing();
    let a = audit_lines(case.id, &case.log);
    let text = verdict_text(at(&a, 2));
    assert!(
        text.starts_with("system_changed at system[0], byte "),
        "{text}"
    );
    assert!(
        text.ends_with(
            " — the <available_skills> listing of skill discovery (opencode >=1.16.0) — anomalyco/opencode#31363 — fix: opencode.json: \"agent\": {\"build\": {\"tools\": {\"skill\": false}}, \"plan\": {\"tools\": {\"skill\": false}}}, then restart"
        ),
        "{text}"
    );
}

#[test]
fn no_writer_is_named_for_another_agent_or_a_version_out_of_range() {
    let log = capture("claude-code");
    for (ua, why) in [
        (
            "claude-cli/2.2.0 (external, sdk-cli)",
            "a version past the one the writer is gone in (2.1.332)",
        ),
        (
            "claude-cli/2.1.332 (external, sdk-cli)",
            "the version the writer is gone in",
        ),
        (
            "claude-cli/2.0.9 (external, sdk-cli)",
            "a version before the range",
        ),
        (
            "opencode/1.18.33 ai-sdk/provider-utils/4.0.46",
            "another agent",
        ),
        ("curl/8.0", "an unknown agent"),
    ] {
        let lines: Vec<Value> = log.iter().map(|l| with_user_agent(l.clone(), ua)).collect();
        let a = audit_lines("claude-code", &lines);
        let r = at(&a, 8);
        // The same change, still found.
        assert_eq!(
            r.verdict.changes.first().map(|c| c.json_path.as_str()),
            Some("messages[0].content[2]")
        );
        assert_eq!(r.writer, None, "{why}: {}", verdict_text(r));
    }
    // No headers at all: no agent, no writer.
    let lines: Vec<Value> = log
        .iter()
        .map(|l| {
            let mut l = l.clone();
            l["headers"] = json!({"x-claude-code-session-id": "s"});
            l
        })
        .collect();
    let a = audit_lines("claude-code", &lines);
    assert_eq!(at(&a, 8).agent, None);
    assert_eq!(at(&a, 8).writer, None);
    // The skills listing on a version before the block existed.
    let case = opencode_skills_listing();
    let lines: Vec<Value> = case
        .log
        .into_iter()
        .map(|l| with_user_agent(l, "opencode/1.15.9"))
        .collect();
    let a = audit_lines("opencode", &lines);
    assert_eq!(writer_id(at(&a, 2)), None);
}

#[test]
fn a_pattern_must_occur_in_the_changed_element() {
    // The currentDate edit, with the reminder's heading renamed in both requests: the
    // agent, version, cause and path still match, the pattern does not.
    let lines: Vec<Value> = capture("claude-code")
        .into_iter()
        .map(|mut l| {
            if let Value::String(s) = &l["request"] {
                l["request"] = Value::String(s.replace("# currentDate", "# today"));
            }
            l
        })
        .collect();
    let a = audit_lines("claude-code", &lines);
    let r = at(&a, 8);
    assert_eq!(
        r.verdict.cause.as_ref().map(|c| c.kind().as_str()),
        Some("edit_in_place")
    );
    assert_eq!(r.writer, None, "{}", verdict_text(r));
}

#[test]
fn the_agent_is_read_from_the_captured_user_agents() {
    let cases = [
        (
            "claude-cli/2.1.197 (external, sdk-cli)",
            "claude-code",
            "2.1.197",
        ),
        (
            "codex_exec/0.171.0 (Debian 12.0.0; x86_64) dumb (codex_exec; 0.171.0)",
            "codex",
            "0.171.0",
        ),
        (
            "GeminiCLI-tui/0.61.0/gemini-2.5-flash (linux; x64; terminal)",
            "gemini-cli",
            "0.61.0",
        ),
        ("QwenCode/0.15.10 (linux; x64)", "qwen-code", "0.15.10"),
        (
            "opencode/1.18.33 ai-sdk/provider-utils/4.0.46 runtime/bun/1.3.14",
            "opencode",
            "1.18.33",
        ),
    ];
    for (ua, name, version) in cases {
        let a = AgentId::from_user_agent(ua).unwrap_or_else(|| panic!("{ua}"));
        assert_eq!(a.name, name, "{ua}");
        assert_eq!(a.version, Version::parse(version), "{ua}");
    }
    for agent in [
        "claude-code",
        "codex",
        "gemini-cli",
        "qwen-code",
        "opencode",
    ] {
        let a = audit_lines(agent, &capture(agent));
        assert!(
            a.requests
                .iter()
                .all(|r| r.agent.as_ref().is_some_and(|x| x.name == agent)),
            "{agent}"
        );
    }
    // Codex's `originator` when there is no user-agent.
    let headers = vec![("originator".to_owned(), "codex_exec".to_owned())];
    assert_eq!(
        AgentId::from_headers(&headers).map(|a| a.name),
        Some("codex".to_owned())
    );
    // A hostile header is bounded.
    let long = format!("{}/1.0", "x".repeat(100_000));
    let a = AgentId::from_user_agent(&long).unwrap_or_else(|| panic!());
    assert!(a.name.len() <= 32);
    assert_eq!(AgentId::from_user_agent("  "), None);
}

#[test]
fn versions_and_paths_match_as_documented() {
    let r = VersionRange::parse(">=2.1.0, <2.2.0").unwrap_or_else(|e| panic!("{e}"));
    assert!(r.contains(Version::parse("2.1.197")));
    assert!(!r.contains(Version::parse("2.2.0")));
    assert!(!r.contains(Version::parse("2.0.99")));
    assert!(!r.contains(None));
    let all = VersionRange::parse("*").unwrap_or_else(|e| panic!("{e}"));
    assert!(all.contains(None));
    assert!(
        VersionRange::parse("=1.0.18")
            .unwrap_or_else(|e| panic!("{e}"))
            .contains(Version::parse("1.0.18"))
    );
    assert!(VersionRange::parse(">= two").is_err());
    // The version a range was checked up to, and what is newer than it.
    let r = VersionRange::parse(">=0.15.0, <=0.24.4").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.upper(), Version::parse("0.24.4"));
    assert!(r.is_newer(Version::parse("0.25.0")));
    assert!(!r.is_newer(Version::parse("0.24.4")));
    assert!(!r.is_newer(Version::parse("0.14.9")));
    assert!(!r.is_newer(None));
    let below = VersionRange::parse("<2.2.0").unwrap_or_else(|e| panic!("{e}"));
    assert!(below.is_newer(Version::parse("2.2.0")));
    assert!(!below.is_newer(Version::parse("2.1.9")));
    assert!(
        VersionRange::parse("=1.0.18")
            .unwrap_or_else(|e| panic!("{e}"))
            .is_newer(Version::parse("1.0.19"))
    );
    for open in ["*", ">=1.16.0"] {
        let r = VersionRange::parse(open).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.upper(), None, "{open}");
        assert!(!r.is_newer(Version::parse("99.0.0")), "{open}");
    }

    let g = PathGlob::parse("messages[0].content[*]").unwrap_or_else(|e| panic!("{e}"));
    assert!(g.matches("messages[0].content[2]"));
    assert!(!g.matches("messages[1].content[2]"));
    assert!(!g.matches("messages[0]"));
    assert!(!g.matches("messages[0].content[2].text"));
    assert!(
        PathGlob::parse("tools[*]")
            .unwrap_or_else(|e| panic!("{e}"))
            .matches("tools[12]")
    );
    assert!(PathGlob::parse("tools[x]").is_err());
    assert!(PathGlob::parse("").is_err());

    assert_eq!(
        normalised_path("messages[7].content[1]"),
        "messages[*].content[1]"
    );
    assert_eq!(
        normalised_path("messages[0].content[2]"),
        "messages[0].content[2]"
    );
    assert_eq!(normalised_path("tools[3]"), "tools[3]");
    assert_eq!(
        normalised_path("contents[4].parts[0]"),
        "contents[*].parts[0]"
    );
}

fn entry(fields: &str) -> String {
    format!("version = 1\n[[writer]]\n{fields}\n")
}

const GOOD: &str = "id = \"x\"\nagent = \"claude-code\"\nversions = \"*\"\ncause = \"edit_in_place\"\npath = \"messages[0]\"\npattern = \"p\"\nname = \"n\"\nvaries = \"v\"";

#[test]
fn a_malformed_catalogue_is_refused_naming_the_entry_and_the_field() {
    assert!(Catalogue::parse(&entry(GOOD), "t.toml").is_ok());
    let cases: Vec<(String, &str)> = vec![
        (
            entry(&GOOD.replace("edit_in_place", "edited")),
            "writer x: field `cause`",
        ),
        (
            entry(&GOOD.replace("versions = \"*\"", "versions = \"two\"")),
            "writer x: field `versions`",
        ),
        (
            entry(&GOOD.replace("messages[0]", "messages[a]")),
            "writer x: field `path`",
        ),
        (
            entry(&GOOD.replace("pattern = \"p\"", "pattern = \"\"")),
            "writer x: field `pattern`",
        ),
        (
            entry(&GOOD.replace(
                "pattern = \"p\"",
                &format!("pattern = \"{}\"", "p".repeat(300)),
            )),
            "writer x: field `pattern`",
        ),
        (
            entry(&GOOD.replace("name = \"n\"", "name = \"\"")),
            "writer x: field `name`",
        ),
        (
            entry(&GOOD.replace("id = \"x\"", "id = \"\"")),
            "writer #1: field `id`",
        ),
        (
            format!("{}\n[[writer]]\n{GOOD}\n", entry(GOOD)),
            "writer x: field `id`: the same id is used twice",
        ),
        (
            entry(&format!("{GOOD}\ncolour = \"red\"")),
            "unknown field `colour`",
        ),
        (
            entry(GOOD).replace("version = 1", "version = 2"),
            "catalogue version 2",
        ),
        (
            entry(&GOOD.replace("cause = \"edit_in_place\"", "cause = 3")),
            "not a writer catalogue",
        ),
        ("not toml [".to_owned(), "not a writer catalogue"),
        (
            entry(&format!("{GOOD}\nwithin = 0")),
            "writer x: field `within`",
        ),
        (
            entry(&format!("{GOOD}\nwhen = \"often\"")),
            "writer x: field `when`",
        ),
        (
            entry(&format!("{GOOD}\ngone = \"soon\"")),
            "writer x: field `gone`",
        ),
        (
            entry(&format!(
                "{}\ngone = \"1.5.0\"",
                GOOD.replace("versions = \"*\"", "versions = \">=1.0.0, <=2.0.0\"")
            )),
            "writer x: field `gone`: 1.5.0 is not past the versions checked (up to 2.0.0)",
        ),
    ];
    for (text, expected) in cases {
        let e = Catalogue::parse(&text, "t.toml").map(|_| ()).unwrap_err();
        let shown = e.to_string();
        assert!(shown.starts_with("t.toml: "), "{shown}");
        assert!(shown.contains(expected), "{expected}: {shown}");
        assert!(shown.len() < 1024, "{shown}");
    }
    let many: String = (0..300)
        .map(|i| {
            format!(
                "[[writer]]\n{}\n",
                GOOD.replace("id = \"x\"", &format!("id = \"x{i}\""))
            )
        })
        .collect();
    let e = Catalogue::parse(&format!("version = 1\n{many}"), "t.toml")
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(e, CatalogueError::TooMany { count: 300, .. }),
        "{e}"
    );
}

#[test]
fn a_user_catalogue_extends_and_overrides_the_built_in_one_by_id() {
    let mut c = builtin().clone();
    let n = c.writers().len();
    let user = Catalogue::parse(
        &format!(
            "{}\n[[writer]]\n{}\n",
            entry(
                &GOOD
                    .replace("id = \"x\"", "id = \"claude-code-current-date\"")
                    .replace("name = \"n\"", "name = \"my reminder\"")
                    .replace("pattern = \"p\"", "pattern = \"# currentDate\"")
                    .replace("messages[0]", "messages[0].content[*]")
            ),
            GOOD
        ),
        "user.toml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    c.extend(user).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.writers().len(), n + 1);
    assert_eq!(c.writers()[0].name, "my reminder");
    assert_eq!(c.writers()[n].id, "x");
}

#[test]
fn a_block_changing_in_three_sessions_without_an_entry_is_a_learned_volatile_block() {
    // Three sessions of a Claude Code version no entry covers, each resumed the next day:
    // the currentDate edit in each, reconstructed from the capture's lines 6 and 8.
    let base = capture("claude-code");
    let mut lines = Vec::new();
    for s in ["a", "b", "c"] {
        for n in [6, 8] {
            let mut l = with_user_agent(base[n - 1].clone(), "claude-cli/3.0.0 (external, cli)");
            l["headers"]["x-claude-code-session-id"] = Value::String(format!("session-{s}"));
            lines.push(l);
        }
    }
    let a = audit_lines("claude-code", &lines);
    assert_eq!(a.requests.len(), 6);
    // Lines 2 and 4 are the first two sessions' edits: not learned yet.
    for n in [2, 4] {
        assert_eq!(at(&a, n).writer, None, "{}", verdict_text(at(&a, n)));
    }
    let third = at(&a, 6);
    match &third.writer {
        Some(WriterFinding::Learned(b)) => {
            assert_eq!(b.sessions, LEARNED_SESSIONS);
            assert_eq!(b.agent, "claude-code");
            assert_eq!(b.path, "messages[0].content[2]");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        verdict_text(third)
            .ends_with(" — a learned volatile block: changed in 3 sessions, no catalogue entry"),
        "{}",
        verdict_text(third)
    );
    assert_eq!(a.summary.learned_volatile.len(), 1);
    assert_eq!(a.summary.learned_volatile[0].sessions, 3);
    // The same three sessions on a version the catalogue knows: named, never learned.
    let known: Vec<Value> = lines
        .into_iter()
        .map(|l| with_user_agent(l, "claude-cli/2.1.197 (external, sdk-cli)"))
        .collect();
    let a = audit_lines("claude-code", &known);
    assert!(a.summary.learned_volatile.is_empty());
    assert_eq!(
        writer_id(at(&a, 6)).as_deref(),
        Some("claude-code-current-date")
    );
}

#[test]
fn the_verdicts_on_the_captured_fixtures_name_the_writer_where_an_entry_matches() {
    let mut named = 0;
    let mut names: Vec<String> = [
        "claude-code",
        "codex",
        "gemini-cli",
        "qwen-code",
        "opencode",
    ]
    .map(String::from)
    .to_vec();
    names.extend(agent_paths());
    names.extend(newest());
    for agent in &names {
        let agent = agent.as_str();
        let path = fixture_dir(agent).join("verdicts.tsv");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // (line, writer) from the sixth column of `verdicts.tsv`.
        let expected: Vec<(u64, String)> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                assert_eq!(f.len(), 6, "{agent}: {l}");
                (
                    f[0].parse().unwrap_or_else(|e| panic!("{agent}: {e}")),
                    f[5].to_owned(),
                )
            })
            .collect();
        let a = audit_lines(agent, &capture(agent));
        for (n, writer) in expected {
            let got = a
                .requests
                .iter()
                .find(|r| r.line == n)
                .map_or("-".to_owned(), |r| {
                    writer_id(r).unwrap_or_else(|| "-".to_owned())
                });
            assert_eq!(got, writer, "{agent} line {n}");
            if writer != "-" {
                named += 1;
                let r = at(&a, n);
                assert!(verdict_text(r).contains(" — fix: "), "{}", verdict_text(r));
            }
        }
    }
    assert_eq!(
        named, 7,
        "four captured verdicts of the agents' sessions (gemini-cli's resume entry needs launch ids, which a capture has not), two of their MCP and compaction paths and one of the newest releases name their writer"
    );
}

fn docs() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/catalogue.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A catalogue entry as a row of docs/catalogue.md's table.
fn row(w: &prompt_measure::catalogue::Writer) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('<', "\\<");
    let causes: Vec<&str> = w.causes.iter().map(|c| c.as_str()).collect();
    let gone = w.gone.map_or(String::new(), |g| format!(", gone in {g}"));
    let on = match w.when {
        When::Any => "every request",
        When::Resume => "resumed requests",
    };
    format!(
        "| `{}` | {} | `{}`{gone} | {on} | {} | `{}` | {} | {} | {} |",
        w.id,
        w.agent,
        w.versions,
        causes.join(", "),
        w.path,
        cell(&w.name),
        w.issue.as_deref().map_or("—".to_owned(), cell),
        cell(w.workaround.as_deref().unwrap_or("none known")),
    )
}

#[test]
fn the_docs_list_every_catalogue_entry() {
    let text = docs();
    let start = text
        .find("<!-- catalogue table")
        .unwrap_or_else(|| panic!("docs/catalogue.md has no catalogue table"));
    let end = text
        .find("<!-- end catalogue table -->")
        .unwrap_or_else(|| panic!("docs/catalogue.md: the table has no end marker"));
    let rows: Vec<&str> = text[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .collect();
    let expected: Vec<String> = builtin().writers().iter().map(row).collect();
    assert_eq!(
        rows,
        expected,
        "docs/catalogue.md's table is not the catalogue's; its rows are:\n{}",
        expected.join("\n")
    );
}

#[test]
fn the_docs_show_the_verdict_the_audit_prints() {
    let text = docs();
    let marker = "<!-- verdict: opencode 6 -->\n```text\n";
    let from = text
        .find(marker)
        .unwrap_or_else(|| panic!("docs/catalogue.md has no verdict example"));
    let shown = text[from + marker.len()..]
        .lines()
        .next()
        .unwrap_or_default();
    let a = audit_lines("opencode", &capture("opencode"));
    assert_eq!(shown, verdict_text(at(&a, 6)));
}

#[test]
fn the_docs_describe_the_fields_the_parser_reads() {
    // Every field of an entry is in the docs' field table, and an entry written with all of
    // them parses.
    let text = docs();
    for field in [
        "id",
        "agent",
        "versions",
        "cause",
        "path",
        "pattern",
        "within",
        "when",
        "gone",
        "name",
        "varies",
        "issue",
        "workaround",
        "source",
    ] {
        assert!(text.contains(&format!("| `{field}` |")), "{field}");
    }
    let all = format!(
        "{GOOD}\nwithin = 10\nwhen = \"resume\"\ngone = \"1.0\"\nissue = \"o/r#1\"\nworkaround = \"w\"\nsource = \"s\""
    );
    assert!(Catalogue::parse(&entry(&all), "t.toml").is_ok());
}

#[test]
fn what_the_catalogue_reads_and_learns_is_bounded() {
    use prompt_measure::catalogue::{
        Element, MAX_ELEMENT_BYTES, MAX_LEARNED_LISTED, MAX_SESSIONS_COUNTED, VolatileBlocks,
    };
    use prompt_wire::engine::CauseKind;
    let agent = AgentId::from_user_agent("claude-cli/2.1.197").unwrap_or_else(|| panic!());
    // A pattern past the bytes read of an element is not seen.
    let mut text = "x".repeat(MAX_ELEMENT_BYTES);
    text.push_str("# currentDate");
    let far = [Element {
        text: &text,
        change_at: None,
    }];
    let near = [Element {
        text: "# currentDate\nToday",
        change_at: Some(14),
    }];
    let path = "messages[0].content[2]";
    assert!(
        builtin()
            .find(&agent, CauseKind::EditInPlace, path, &far, false)
            .is_none()
    );
    assert!(
        builtin()
            .find(&agent, CauseKind::EditInPlace, path, &near, false)
            .is_some()
    );
    // `within`: a change far past the pattern is not the entry's.
    let past = "# currentDate\n".to_owned() + &"y".repeat(100);
    let past = [Element {
        text: &past,
        change_at: Some(110),
    }];
    assert!(
        builtin()
            .find(&agent, CauseKind::EditInPlace, path, &past, false)
            .is_none()
    );

    let mut v = VolatileBlocks::default();
    for s in 0..(MAX_SESSIONS_COUNTED as u64 + 50) {
        v.record("a", "tools[0]", s);
    }
    for block in 0..2_000 {
        for s in 0..3 {
            v.record("b", &format!("tools[{block}]"), s);
        }
    }
    let learned = v.learned();
    assert_eq!(learned.len(), MAX_LEARNED_LISTED);
    assert_eq!(learned[0].sessions, MAX_SESSIONS_COUNTED as u64);
    assert_eq!(learned[0].agent, "a");
    // Blocks past the tracked bound are not counted: the learned ones are among the first.
    assert!(
        learned
            .iter()
            .skip(1)
            .all(|b| b.sessions == LEARNED_SESSIONS)
    );
}

/// The writer id of line `n` of `lines` as the audit names it (`None`: none).
fn named_at(name: &str, lines: &[Value], n: u64) -> (Option<String>, String) {
    let a = audit_lines(name, lines);
    let r = at(&a, n);
    (writer_id(r), verdict_text(r))
}

#[test]
fn an_entry_about_resumes_is_named_on_resumed_requests_only() {
    // Claude Code's session context re-sent as a string: on the second request of one run
    // (one launch, or a log without launch ids) it is no resume, and the entry is not named.
    let case = claude_code_resume_session_context();
    let one_launch: Vec<Value> = case
        .log
        .iter()
        .map(|l| {
            let mut l = l.clone();
            l["launch"] = Value::String("launch-1".into());
            l
        })
        .collect();
    let no_launch: Vec<Value> = case
        .log
        .iter()
        .map(|l| {
            let mut l = l.clone();
            if let Some(o) = l.as_object_mut() {
                o.remove("launch");
            }
            l
        })
        .collect();
    for (what, lines) in [("one launch", &one_launch), ("no launch ids", &no_launch)] {
        let (id, text) = named_at("claude-code", lines, 2);
        assert_eq!(id, None, "{what}: {text}");
        assert!(text.starts_with("provider_side"), "{what}: {text}");
    }
    let (id, _) = named_at("claude-code", &case.log, 2);
    assert_eq!(id.as_deref(), Some("claude-code-resume-session-context"));

    // Qwen Code 0.24.4's dropped date reminder, line 3 of its newest capture: a plain
    // capture has no launch ids, so the same edit is named only as one launch per turn.
    let qwen = capture("agents-newest/qwen-code");
    let (id, text) = named_at("qwen-code", &qwen, 3);
    assert_eq!(id, None, "{text}");
    assert!(
        text.starts_with("edit_in_place at messages[1].content[3]"),
        "{text}"
    );
    let (id, text) = named_at("qwen-code", &launched(qwen.clone(), &[1, 3, 5]), 3);
    assert_eq!(
        id.as_deref(),
        Some("qwen-code-resume-date-reminder"),
        "{text}"
    );
    // Within one launch (every turn in one process) the same bytes are no resume.
    let (id, text) = named_at("qwen-code", &launched(qwen.clone(), &[1]), 3);
    assert_eq!(id, None, "{text}");
    // Line 5 (the next day's --continue) is named by its first change, the setup
    // context's date line, resumed or not.
    for lines in [qwen.clone(), launched(qwen, &[1, 3, 5])] {
        let (id, text) = named_at("qwen-code", &lines, 5);
        assert_eq!(id.as_deref(), Some("qwen-code-session-date"), "{text}");
    }

    // Gemini CLI's thoughtSignature dropped by --resume, line 3 of its capture.
    let gemini = capture("gemini-cli");
    let (id, _) = named_at("gemini-cli", &gemini, 3);
    assert_eq!(id, None);
    let (id, _) = named_at("gemini-cli", &launched(gemini, &[1, 3, 5]), 3);
    assert_eq!(id.as_deref(), Some("gemini-cli-resume-thought-signature"));
}

#[test]
fn an_agent_newer_than_an_entry_was_checked_on_is_named_saying_checked_up_to() {
    // Qwen Code's setup-context date, checked up to 0.24.4: on 0.24.4 named with its range,
    // on 0.25.0 named with "(checked up to 0.24.4)", on 0.14.0 (older) not named.
    let newest = capture("agents-newest/qwen-code");
    let (id, text) = named_at("qwen-code", &newest, 5);
    assert_eq!(id.as_deref(), Some("qwen-code-session-date"), "{text}");
    assert!(
        text.contains(" — the setup context's date line (qwen-code >=0.15.0, <=0.24.4) — fix: "),
        "{text}"
    );
    assert!(!text.contains("checked up to"), "{text}");
    let as_version = |ua: &str| -> Vec<Value> {
        newest
            .iter()
            .map(|l| with_user_agent(l.clone(), ua))
            .collect()
    };
    let a = audit_lines("qwen-code", &as_version("QwenCode/0.25.0 (linux; x64)"));
    let r = at(&a, 5);
    match &r.writer {
        Some(WriterFinding::Catalogue(m)) => {
            assert_eq!(m.id, "qwen-code-session-date");
            assert_eq!(m.checked_up_to, Version::parse("0.24.4"));
        }
        other => panic!("{other:?}: {}", verdict_text(r)),
    }
    assert!(
        verdict_text(r).contains(
            " — the setup context's date line (qwen-code 0.25.0) (checked up to 0.24.4) — fix: none known"
        ),
        "{}",
        verdict_text(r)
    );
    let (id, text) = named_at("qwen-code", &as_version("QwenCode/0.14.0 (linux; x64)"), 5);
    assert_eq!(id, None, "an older version than the range: {text}");

    // Claude Code's currentDate reminder, checked up to 2.1.197 and gone in 2.1.332: named
    // on 2.1.250 saying so, not on 2.1.332.
    let pinned = capture("claude-code");
    let on = |ua: &str| -> Vec<Value> {
        pinned
            .iter()
            .map(|l| with_user_agent(l.clone(), ua))
            .collect()
    };
    let (id, text) = named_at("claude-code", &on("claude-cli/2.1.250 (external, cli)"), 8);
    assert_eq!(id.as_deref(), Some("claude-code-current-date"), "{text}");
    assert!(
        text.contains("the currentDate reminder (claude-code 2.1.250) (checked up to 2.1.197)"),
        "{text}"
    );
    let (id, text) = named_at("claude-code", &on("claude-cli/2.1.332 (external, cli)"), 8);
    assert_eq!(id, None, "retired in 2.1.332: {text}");
}

/// `(agent, pinned package variable)` of scripts/capture-agents.sh, and the fixture folder
/// each agent's plain session is captured into.
const PINNED: [(&str, &str); 5] = [
    ("claude-code", "CLAUDE_PKG"),
    ("codex", "CODEX_PKG"),
    ("gemini-cli", "GEMINI_PKG"),
    ("qwen-code", "QWEN_PKG"),
    ("opencode", "OPENCODE_PKG"),
];

/// The version of `var="pkg@version"` in scripts/capture-agents.sh.
fn pinned_version(script: &str, var: &str) -> Version {
    let prefix = format!("{var}=\"");
    let line = script
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("scripts/capture-agents.sh pins no {var}"));
    let pkg = line[prefix.len()..].trim_end_matches('"');
    let (_, version) = pkg
        .rsplit_once('@')
        .unwrap_or_else(|| panic!("{var}: {pkg} has no @version"));
    Version::parse(version).unwrap_or_else(|| panic!("{var}: {version} is no version"))
}

/// Every request of the capture in `dir` that names `agent` in its headers names it at
/// `version`, and there is one; its README and hand-checked verdicts are beside it.
fn check_capture(dir: &Path, agent: &str, version: Version) -> Result<usize, String> {
    let path = dir.join("capture.jsonl");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    for file in ["README.md", "verdicts.tsv"] {
        if !dir.join(file).is_file() {
            return Err(format!("{}: no {file}", dir.display()));
        }
    }
    let mut requests = 0;
    for (i, l) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(l)
            .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?;
        let headers: Vec<(String, String)> = v["headers"]
            .as_object()
            .map(|h| {
                h.iter()
                    .filter_map(|(k, v)| Some((k.to_ascii_lowercase(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        // A line the agent's runtime sent (Claude Code 2.1.197's `HEAD /` by Bun) names no
        // agent version to check.
        let Some(id) = AgentId::from_headers(&headers).filter(|id| id.name == agent) else {
            continue;
        };
        requests += 1;
        if id.version != Some(version) {
            return Err(format!(
                "{} line {}: sent by {id}, not {agent} {version}",
                path.display(),
                i + 1
            ));
        }
    }
    if requests == 0 {
        return Err(format!("{}: no request names its agent", path.display()));
    }
    Ok(requests)
}

#[test]
fn every_pinned_agent_version_has_its_capture() {
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/capture-agents.sh");
    let script = std::fs::read_to_string(&script_path)
        .unwrap_or_else(|e| panic!("{}: {e}", script_path.display()));
    let mut problems = Vec::new();
    let mut newer = BTreeSet::new();
    for (agent, var) in PINNED {
        let pinned = pinned_version(&script, var);
        let newest = pinned_version(&script, &format!("NEWEST_{var}"));
        // The pinned version's capture, and the newest one's: its own folder when it is
        // newer than the pinned one, else the pinned capture.
        let mut wanted = vec![(fixtures().join("agents").join(agent), pinned)];
        if newest != pinned {
            newer.insert(agent.to_owned());
            wanted.push((fixtures().join("agents-newest").join(agent), newest));
        }
        for (dir, version) in wanted {
            if let Err(e) = check_capture(&dir, agent, version) {
                problems.push(e);
            }
        }
    }
    // No newest capture is left behind by a pin that moved on.
    let folders: BTreeSet<String> = captures_in("agents-newest").into_iter().collect();
    for stale in folders.difference(&newer) {
        problems.push(format!(
            "tests/fixtures/agents-newest/{stale}: no NEWEST_* pin newer than the pinned version names it"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
