//! Other programs' files are hostile input: unknown records and fields, malformed and cut
//! lines, a locked database, a file growing while read, a huge file, a symbolic link loop —
//! skipped and counted, never fatal, in bounded memory.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cacheline_import::lines::{Line, LineReader};
use cacheline_import::{Agent, Limits, Options, discover, import};
use proptest::prelude::*;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/import")
}

fn claude_2_1_197() -> PathBuf {
    fixtures().join(
        "claude-code-2.1.197/home/.claude/projects/-tmp-cacheline-capture-claude-code-project/c057b42c-8462-4623-a0dc-58b3ca0bd134.jsonl",
    )
}

fn codex() -> PathBuf {
    fixtures().join("codex-0.171.0/home/.codex/sessions/2026/12/05/rollout-2026-12-05T17-05-26-01a249be-2081-7ce0-a48f-a37b45a35bdb.jsonl")
}

/// A home in a temp dir with one Claude Code session file of `text`.
fn claude_home(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join(".claude/projects/-p");
    std::fs::create_dir_all(&project).unwrap();
    let file = project.join("s.jsonl");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

fn import_home(home: &Path, options: &Options) -> cacheline_import::Report {
    import(&discover::in_home(home, &[]), options, &mut |_| {})
}

#[test]
fn unknown_records_and_fields_are_skipped_and_counted_per_agent_and_version() {
    let mut text = std::fs::read_to_string(claude_2_1_197()).unwrap();
    text.push_str(r#"{"type":"brand-new-record","sessionId":"c057b42c-8462-4623-a0dc-58b3ca0bd134","version":"2.1.197"}"#);
    text.push('\n');
    text.push_str(r#"{"type":"brand-new-record","version":"2.1.197"}"#);
    text.push('\n');
    // One more request whose usage has a field never seen.
    text.push_str(r#"{"type":"assistant","sessionId":"c057b42c-8462-4623-a0dc-58b3ca0bd134","version":"2.1.197","timestamp":"2026-12-05T00:03:00.000Z","message":{"id":"msg_new","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":10,"cache_read_input_tokens":30000,"output_tokens":1,"quantum_tokens":5}}}"#);
    text.push('\n');
    let (dir, _) = claude_home(&text);
    let report = import_home(dir.path(), &Options::default());
    let s = &report.skipped;
    assert_eq!(
        s.unknown_records["claude-code 2.1.197"]["brand-new-record"],
        2
    );
    assert_eq!(s.unknown_fields["claude-code 2.1.197"]["quantum_tokens"], 1);
    assert_eq!(
        report.totals.requests, 7,
        "the six requests and the new one"
    );
    let text = report.text(3);
    assert!(
        text.contains("unknown records, claude-code 2.1.197: brand-new-record 2"),
        "{text}"
    );
    assert!(
        text.contains("unknown usage fields, claude-code 2.1.197: quantum_tokens 1"),
        "{text}"
    );
}

#[test]
fn malformed_and_cut_lines_are_skipped_with_file_and_line() {
    let mut text = String::new();
    for (i, line) in std::fs::read_to_string(claude_2_1_197())
        .unwrap()
        .lines()
        .enumerate()
    {
        text.push_str(line);
        text.push('\n');
        if i == 2 {
            text.push_str("{not json\n");
            text.push_str("\u{0}\u{1}binary\n");
        }
    }
    // A last line cut short, as by an agent still writing it.
    text.push_str(r#"{"type":"assistant","message":{"id":"msg_cut","usage":{"input_tok"#);
    let (dir, file) = claude_home(&text);
    let report = import_home(dir.path(), &Options::default());
    assert_eq!(report.totals.requests, 6);
    let s = &report.skipped;
    assert_eq!(s.malformed["claude-code 2.1.197"], 3);
    let lines: Vec<(u64, &str)> = s
        .lines
        .iter()
        .map(|l| (l.origin.line, l.reason.as_str()))
        .collect();
    assert_eq!(lines.len(), 3);
    assert!(s.lines.iter().all(|l| l.origin.path == file));
    assert_eq!(lines[0].0, 4);
    assert_eq!(lines[1].0, 5);
    assert!(lines[0].1.starts_with("malformed JSON"), "{lines:?}");
    assert!(lines[2].1.starts_with("cut short"), "{lines:?}");
    let text = report.text(3);
    assert!(
        text.contains(&format!("{}:4: malformed JSON", file.display())),
        "{text}"
    );
}

fn copy_opencode(dir: &Path) -> PathBuf {
    let share = dir.join(".local/share/opencode");
    std::fs::create_dir_all(&share).unwrap();
    let db = share.join("opencode.db");
    std::fs::copy(
        fixtures().join("opencode-1.18.33/home/.local/share/opencode/opencode.db"),
        &db,
    )
    .unwrap();
    db
}

fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_locked_database_is_reported_not_fatal_and_not_waited_on_for_long() {
    let dir = tempfile::tempdir().unwrap();
    let db = copy_opencode(dir.path());
    let writer = rusqlite::Connection::open(&db).unwrap();
    writer
        .execute_batch("BEGIN EXCLUSIVE; UPDATE session SET title = 'x';")
        .unwrap();
    let options = Options {
        limits: Limits {
            busy_timeout: Duration::from_millis(200),
            ..Limits::default()
        },
        ..Options::default()
    };
    let started = std::time::Instant::now();
    let report = import_home(dir.path(), &options);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(report.totals.requests, 0);
    assert_eq!(report.skipped.sources.len(), 1, "{:?}", report.skipped);
    let reason = &report.skipped.sources[0].reason;
    assert!(
        reason.contains("opencode.db") && reason.contains("locked"),
        "{reason}"
    );
    writer.execute_batch("ROLLBACK").unwrap();
    // Once the lock is gone, the same database reads whole.
    assert_eq!(import_home(dir.path(), &options).totals.requests, 6);
}

/// opencode keeps its database in WAL mode with an agent writing: rows only in the
/// write-ahead log are read, and nothing is written beside the database.
#[test]
fn a_database_in_wal_mode_is_read_with_its_log_and_nothing_is_written_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = copy_opencode(dir.path());
    let writer = rusqlite::Connection::open(&db).unwrap();
    writer.pragma_update(None, "journal_mode", "WAL").unwrap();
    writer.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    // One more assistant row, committed to the log only.
    writer
        .execute_batch(
            "INSERT INTO message (id, session_id, time_created, time_updated, data)
             SELECT 'msg_zz_wal', session_id, time_created + 1, time_updated + 1, data
             FROM message WHERE data LIKE '%\"role\":\"assistant\"%'
             ORDER BY time_created DESC LIMIT 1;",
        )
        .unwrap();
    let share = db.parent().unwrap().to_owned();
    assert!(share.join("opencode.db-wal").exists());
    let before = listing(&share);
    let report = import_home(dir.path(), &Options::default());
    assert_eq!(report.totals.requests, 7, "{:?}", report.skipped);
    assert_eq!(listing(&share), before, "files beside the database");
    drop(writer);
}

#[test]
fn a_fixture_home_is_left_as_it_was() {
    for name in [
        "opencode-1.18.33",
        "claude-code-2.1.332",
        "gemini-cli-0.61.0",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let src = fixtures().join(name).join("home");
        for f in &files_under(&src) {
            let to = home.join(f.strip_prefix(&src).unwrap());
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(f, &to).unwrap();
        }
        // Every file below the home with its bytes, in order.
        let snapshot = |home: &Path| {
            let mut all: Vec<_> = files_under(home)
                .into_iter()
                .map(|f| {
                    let bytes = std::fs::read(&f).unwrap();
                    (f, bytes)
                })
                .collect();
            all.sort();
            all
        };
        let before = snapshot(home);
        let report = import_home(home, &Options::default());
        assert_eq!(report.totals.requests, 6, "{name}");
        assert!(snapshot(home) == before, "{name}: the home changed");
    }
}

#[test]
fn a_file_growing_while_read_ends_where_it_was_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = dir.path().join(".codex/sessions/2026/12/05");
    std::fs::create_dir_all(&rollout).unwrap();
    let file = rollout.join("rollout-grow.jsonl");
    std::fs::copy(codex(), &file).unwrap();
    let original = std::fs::read_to_string(codex()).unwrap();
    let sources = discover::in_home(dir.path(), &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (file, stop, original) = (file.clone(), stop.clone(), original.clone());
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&file)
                .unwrap();
            let mut appended = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && appended < 16 << 20 {
                f.write_all(original.as_bytes()).unwrap();
                appended += original.len() as u64;
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(5));
    let report = import(&sources, &Options::default(), &mut |_| {});
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    // At least the six requests there when found; never the whole growing file's, and the
    // import ended.
    assert!(report.totals.requests >= 6, "{}", report.totals.requests);
    let grown = std::fs::metadata(&file).unwrap().len();
    assert!(report.bytes < grown || report.bytes == original.len() as u64);
}

/// A reader that yields `len` bytes of `x` and no newline, without holding them.
struct Endless {
    left: u64,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.left as usize);
        buf[..n].fill(b'x');
        self.left -= n as u64;
        Ok(n)
    }
}

#[test]
fn a_huge_line_is_skipped_in_bounded_memory() {
    let len = 64u64 << 20;
    let limit = 1 << 20;
    let mut reader = LineReader::new(Endless { left: len }.chain(&b"\n{\"a\":1}\n"[..]), limit);
    match reader.next_line().unwrap() {
        Some(Line::TooLong(n)) => assert_eq!(n, len),
        other => panic!("{other:?}"),
    }
    assert!(
        reader.held() <= limit + (256 << 10),
        "held {}",
        reader.held()
    );
    match reader.next_line().unwrap() {
        Some(Line::Text(t)) => assert_eq!(t, b"{\"a\":1}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_huge_file_is_read_with_its_long_lines_skipped() {
    let session = std::fs::read_to_string(claude_2_1_197()).unwrap();
    let mut text = String::new();
    let huge = format!(
        "{{\"type\":\"user\",\"message\":{{\"content\":\"{}\"}}}}\n",
        "y".repeat(3 << 20)
    );
    for _ in 0..4 {
        text.push_str(&huge);
        text.push_str(&session);
    }
    let (dir, _) = claude_home(&text);
    let options = Options {
        limits: Limits {
            max_line_bytes: 1 << 20,
            ..Limits::default()
        },
        ..Options::default()
    };
    let report = import_home(dir.path(), &options);
    // The same six replies four times over: counted once (deduplicated by reply id).
    assert_eq!(report.totals.requests, 6);
    assert_eq!(report.skipped.malformed_total(), 4);
    assert!(
        report.skipped.lines[0]
            .reason
            .contains("over the 1048576 byte cap")
    );
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_loop_is_no_loop() {
    let (dir, _) = claude_home(&std::fs::read_to_string(claude_2_1_197()).unwrap());
    let projects = dir.path().join(".claude/projects");
    std::os::unix::fs::symlink(&projects, projects.join("-p/loop")).unwrap();
    std::os::unix::fs::symlink(
        projects.join("-p/self.jsonl"),
        projects.join("-p/self.jsonl"),
    )
    .unwrap();
    let report = import_home(dir.path(), &Options::default());
    assert_eq!(report.totals.requests, 6);
    let found = discover::at_path(dir.path(), &[Agent::ClaudeCode]).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
}

fn fixture_lines() -> Vec<String> {
    [claude_2_1_197(), codex()]
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Fixture lines cut, spliced and mixed with bytes of any kind, in any agent's place:
    /// the import ends, counts, and never panics.
    #[test]
    fn any_session_file_is_read_without_panic(
        picks in proptest::collection::vec((0usize..200, 0usize..4000, proptest::collection::vec(any::<u8>(), 0..40)), 0..40),
        agent in 0usize..4,
    ) {
        let lines = fixture_lines();
        let mut bytes = Vec::new();
        for (i, cut, noise) in picks {
            let line = &lines[i % lines.len()];
            let cut = cut.min(line.len());
            bytes.extend_from_slice(&line.as_bytes()[..cut]);
            bytes.extend_from_slice(&noise);
            bytes.push(b'\n');
        }
        let dir = tempfile::tempdir().unwrap();
        let place = match agent {
            0 => ".claude/projects/-p/s.jsonl",
            1 => ".codex/sessions/2026/01/01/rollout-x.jsonl",
            2 => ".gemini/tmp/p/chats/session-x.jsonl",
            _ => ".qwen/projects/-p/chats/s.jsonl",
        };
        let file = dir.path().join(place);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, &bytes).unwrap();
        let report = import_home(dir.path(), &Options::default());
        let _ = report.text(3);
        let _ = cacheline_import::html::page(&report);
        prop_assert!(serde_json::to_string(&report).is_ok());
    }
}

/// Every file below `dir` (not directories), depth first.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    files
}
