//! A history of agent sessions for `cacheline import`'s benchmark: the fixture stores of
//! `tests/fixtures/import/` copied over and over into one home, each copy a new session (its
//! session id, file name and reply ids fresh), until the home holds the bytes asked for.

use std::io::Write;
use std::path::{Path, PathBuf};

/// One store file of a fixture: where it lies under the home, its text, the session id it
/// names (replaced in each copy).
struct Template {
    agent: &'static str,
    dir: PathBuf,
    name: String,
    text: String,
    session: String,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/import")
}

const FILES: &[(&str, &str, &str, &str)] = &[
    (
        "claude-code",
        "claude-code-2.1.197/home/.claude/projects/-tmp-cacheline-capture-claude-code-project",
        "c057b42c-8462-4623-a0dc-58b3ca0bd134.jsonl",
        "c057b42c-8462-4623-a0dc-58b3ca0bd134",
    ),
    (
        "claude-code-rebuilt",
        "claude-code-2.1.332/home/.claude/projects/-tmp-cacheline-capture-claude-code-project",
        "37d198cd-2ed5-412d-87bf-90614168a711.jsonl",
        "37d198cd-2ed5-412d-87bf-90614168a711",
    ),
    (
        "codex",
        "codex-0.171.0/home/.codex/sessions/2026/12/05",
        "rollout-2026-12-05T17-05-26-01a249be-2081-7ce0-a48f-a37b45a35bdb.jsonl",
        "01a249be-2081-7ce0-a48f-a37b45a35bdb",
    ),
    (
        "gemini-cli",
        "gemini-cli-0.61.0/home/.gemini/tmp/project/chats",
        "session-2026-12-04T23-57-14b68411.jsonl",
        "14b68411-0e7d-4840-a30e-62511d47c098",
    ),
    (
        "qwen-code",
        "qwen-code-0.24.4/home/.qwen/projects/-tmp-cacheline-capture-qwen-code-project/chats",
        "06a2d8f3-a319-4ad0-a2e0-69fc14d8c204.jsonl",
        "06a2d8f3-a319-4ad0-a2e0-69fc14d8c204",
    ),
];

fn templates(agents: &[&str]) -> std::io::Result<Vec<Template>> {
    let mut out = Vec::new();
    for (agent, dir, name, session) in FILES {
        if !agents.is_empty() && !agents.contains(agent) {
            continue;
        }
        let path = fixtures().join(dir).join(name);
        let text = std::fs::read_to_string(&path)?;
        let under_home = dir.split_once("/home/").map_or(*dir, |(_, rest)| rest);
        out.push(Template {
            agent,
            dir: PathBuf::from(under_home),
            name: (*name).to_owned(),
            text,
            session: (*session).to_owned(),
        });
    }
    Ok(out)
}

/// A fresh id of the same shape as `id` (hex digits replaced, dashes kept), copy `n`.
fn fresh(id: &str, n: u64) -> String {
    let digits = format!("{n:012x}");
    let mut d = digits.chars().rev();
    let mut out: Vec<char> = id.chars().collect();
    for c in out.iter_mut().rev() {
        if c.is_ascii_hexdigit() {
            match d.next() {
                Some(x) => *c = x,
                None => break,
            }
        }
    }
    out.into_iter().collect()
}

/// Writes copies of the fixture sessions of `agents` (all when empty; `claude-code-rebuilt`
/// names Claude Code 2.1.332's, whose requests are rebuilt and audited) under `home`, in
/// turn, until `bytes` are written; returns the bytes and files written.
pub fn write_history(home: &Path, bytes: u64, agents: &[&str]) -> std::io::Result<(u64, u64)> {
    let templates = templates(agents)?;
    if templates.is_empty() {
        return Ok((0, 0));
    }
    let (mut written, mut files) = (0u64, 0u64);
    let mut n = 0u64;
    while written < bytes {
        for t in &templates {
            n += 1;
            let session = fresh(&t.session, n);
            let text = t
                .text
                .replace(&t.session, &session)
                .replace("\"id\":\"msg_", &format!("\"id\":\"msg_{n}_"));
            let dir = home.join(&t.dir).join(format!("copy{}", n % 64));
            let dir = if t.agent == "gemini-cli" {
                home.join(".gemini/tmp")
                    .join(format!("project{}", n % 64))
                    .join("chats")
            } else if t.agent == "qwen-code" {
                home.join(".qwen/projects")
                    .join(format!("-p{}", n % 64))
                    .join("chats")
            } else if t.agent.starts_with("claude") {
                home.join(".claude/projects").join(format!("-p{}", n % 64))
            } else {
                dir
            };
            std::fs::create_dir_all(&dir)?;
            let name = t.name.replace(&t.session, &session);
            let name = if name == t.name {
                format!("{n}-{name}")
            } else {
                name
            };
            let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join(name))?);
            f.write_all(text.as_bytes())?;
            f.flush()?;
            written += text.len() as u64;
            files += 1;
            if written >= bytes {
                break;
            }
        }
    }
    Ok((written, files))
}
