//! Where the stores are: under a home (each agent's default place), or in a file or folder
//! given. Folders are walked without following symbolic links to folders (a link loop is
//! no loop here), to a bounded depth and number of entries.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::ImportError;
use crate::store::Agent;

/// One file or database to read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Source {
    /// Whose store it is.
    pub agent: Agent,
    /// The file.
    pub path: PathBuf,
    /// The home it was found in, when read from one.
    pub home: Option<PathBuf>,
    /// Its size when found.
    pub bytes: u64,
    /// Its modification time, seconds since the epoch, if known.
    pub modified: Option<f64>,
}

/// The deepest a walk goes below its start.
const MAX_DEPTH: usize = 16;
/// The most entries a walk looks at.
const MAX_ENTRIES: usize = 2_000_000;

/// The agent whose store `path` is, from where it lies (`.claude/projects/…`,
/// `.codex/sessions/…`, `…/chats/session-…`, `.qwen/projects/…/chats/…`,
/// `opencode.db`), else from the first bytes of the file; `None`: no store file.
pub fn classify(path: &Path) -> Option<Agent> {
    let name = path.file_name()?.to_string_lossy();
    let parts: Vec<String> = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let has = |s: &str| parts.iter().any(|p| p == s);
    if name.starts_with("opencode") && name.ends_with(".db") {
        return Some(Agent::Opencode);
    }
    if !name.ends_with(".jsonl") {
        return None;
    }
    let parent = parts.len().checked_sub(2).and_then(|i| parts.get(i));
    if has(".claude") {
        return has("projects").then_some(Agent::ClaudeCode);
    }
    if has(".codex") {
        return (has("sessions") || has("archived_sessions")).then_some(Agent::Codex);
    }
    if has(".gemini") {
        return (parent.is_some_and(|p| p == "chats")).then_some(Agent::GeminiCli);
    }
    if has(".qwen") {
        return (parent.is_some_and(|p| p == "chats")).then_some(Agent::QwenCode);
    }
    if name.starts_with("rollout-") {
        return Some(Agent::Codex);
    }
    sniff(path)
}

/// The agent whose records the first 64 KiB of a file hold.
fn sniff(path: &Path) -> Option<Agent> {
    use std::io::Read;
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut head = Vec::with_capacity(64 << 10);
    std::fs::File::open(path)
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut head)
        .ok()?;
    let has = |s: &str| memchr::memmem::find(&head, s.as_bytes()).is_some();
    if has("\"projectHash\"") {
        Some(Agent::GeminiCli)
    } else if has("\"session_meta\"") || has("\"turn_context\"") || has("\"token_usage_record\"") {
        Some(Agent::Codex)
    } else if has("\"usageMetadata\"") || has("\"ui_telemetry\"") {
        Some(Agent::QwenCode)
    } else if has("\"parentUuid\"") || has("\"queue-operation\"") {
        Some(Agent::ClaudeCode)
    } else {
        None
    }
}

fn source(agent: Agent, path: PathBuf, home: Option<&Path>) -> Option<Source> {
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let modified = meta
        .modified()
        .ok()
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64());
    Some(Source {
        agent,
        path,
        home: home.map(Path::to_owned),
        bytes: meta.len(),
        modified,
    })
}

/// Every file below `root` (not following links to folders), sorted, bounded.
fn walk(root: &Path, out: &mut Vec<PathBuf>) {
    let mut stack = vec![(root.to_owned(), 0usize)];
    let mut entries = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<PathBuf> = Vec::new();
        for entry in read.flatten() {
            entries += 1;
            if entries > MAX_ENTRIES {
                return;
            }
            names.push(entry.path());
        }
        names.sort();
        let mut dirs = Vec::new();
        for path in names {
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                if depth < MAX_DEPTH {
                    dirs.push((path, depth + 1));
                }
            } else if meta.is_file() || meta.file_type().is_symlink() {
                out.push(path);
            }
        }
        stack.extend(dirs.into_iter().rev());
    }
}

/// The stores under `home`: `.claude/projects`, `.codex/sessions` (and
/// `archived_sessions`), `.gemini/tmp`, `.qwen/projects`, `.local/share/opencode`, for the
/// agents in `agents` (all when empty).
pub fn in_home(home: &Path, agents: &[Agent]) -> Vec<Source> {
    let wanted = |a: Agent| agents.is_empty() || agents.contains(&a);
    let places: [(Agent, &[&str]); 6] = [
        (Agent::ClaudeCode, &[".claude", "projects"]),
        (Agent::Codex, &[".codex", "sessions"]),
        (Agent::Codex, &[".codex", "archived_sessions"]),
        (Agent::GeminiCli, &[".gemini", "tmp"]),
        (Agent::QwenCode, &[".qwen", "projects"]),
        (Agent::Opencode, &[".local", "share", "opencode"]),
    ];
    let mut out = Vec::new();
    for (agent, place) in places {
        if !wanted(agent) {
            continue;
        }
        let dir = place.iter().fold(home.to_owned(), |p, s| p.join(s));
        let mut files = Vec::new();
        walk(&dir, &mut files);
        for f in files {
            if classify(&f) == Some(agent)
                && let Some(s) = source(agent, f, Some(home))
            {
                out.push(s);
            }
        }
    }
    out
}

/// The stores at `path`: the file itself, or every store file below a folder (a home's
/// places included).
pub fn at_path(path: &Path, agents: &[Agent]) -> Result<Vec<Source>, ImportError> {
    let meta = std::fs::metadata(path).map_err(|source| ImportError::Io {
        path: path.to_owned(),
        line: None,
        source,
    })?;
    let wanted = |a: Agent| agents.is_empty() || agents.contains(&a);
    if meta.is_file() {
        return Ok(classify(path)
            .filter(|&a| wanted(a))
            .and_then(|a| source(a, path.to_owned(), home_of(path).as_deref()))
            .into_iter()
            .collect());
    }
    if !meta.is_dir() {
        return Err(ImportError::NotAFile {
            path: path.to_owned(),
        });
    }
    let mut files = Vec::new();
    walk(path, &mut files);
    Ok(files
        .into_iter()
        .filter_map(|f| {
            let agent = classify(&f).filter(|&a| wanted(a))?;
            let home = home_of(&f);
            source(agent, f, home.as_deref())
        })
        .collect())
}

/// The home a store file lies in (the folder holding its `.claude`, `.codex`, …).
fn home_of(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|a| {
            a.file_name().is_some_and(|n| {
                [".claude", ".codex", ".gemini", ".qwen", ".local"].contains(&&*n.to_string_lossy())
            })
        })
        .and_then(Path::parent)
        .map(Path::to_owned)
}
