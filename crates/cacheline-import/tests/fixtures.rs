//! The fixture homes of `tests/fixtures/import/`: what import reads from each agent's store
//! against the scripted upstream's log of the same run (`capture.jsonl`), audited as
//! `cacheline audit` and the proxy audit it.

use std::path::{Path, PathBuf};

use cacheline_import::{Options, Report, discover, import};
use prompt_measure::{AuditConfig, Auditor, O200kBase};

const FIXTURES: &[&str] = &[
    "claude-code-2.1.197",
    "claude-code-2.1.332",
    "codex-0.171.0",
    "gemini-cli-0.61.0",
    "opencode-1.18.33",
    "qwen-code-0.15.10",
    "qwen-code-0.24.4",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/import")
        .join(name)
}

fn imported(name: &str) -> Report {
    let sources = discover::in_home(&fixture(name).join("home"), &[]);
    assert!(!sources.is_empty(), "{name}: no store found");
    import(&sources, &Options::default(), &mut |_| {})
}

/// One model request of the capture as the audit reads it: its line, usage, cause, tokens
/// lost.
#[derive(Debug)]
struct Upstream {
    line: u64,
    usage: (u64, u64, u64, u64),
    cause: Option<&'static str>,
    tokens_lost: u64,
}

/// The capture's model requests, audited as `cacheline audit` does: lines that are no
/// model request (Claude Code's `HEAD /` preflights) are skipped by the audit itself;
/// opencode's title call (a request without tools) is not in its store and is left out.
fn upstream(name: &str) -> Vec<Upstream> {
    let text = std::fs::read_to_string(fixture(name).join("capture.jsonl")).unwrap();
    let tokenizer = O200kBase::shared().unwrap();
    let mut auditor = Auditor::new(tokenizer, AuditConfig::default());
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i as u64 + 1;
        let Ok(Some(audit)) = auditor.push_line(line_no, line) else {
            continue;
        };
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let request = value["request"].as_str().unwrap_or_default();
        if name.starts_with("opencode") && !request.contains("\"tools\"") {
            continue;
        }
        let reported = audit.reported.as_ref().expect("usage in the reply").usage;
        out.push(Upstream {
            line: line_no,
            usage: (
                reported.input(),
                reported.cache_read,
                reported.cache_write,
                reported.output,
            ),
            cause: audit.verdict.cause.as_ref().map(|c| c.kind().as_str()),
            tokens_lost: audit.verdict.tokens_lost,
        });
    }
    out
}

#[test]
fn imported_usage_equals_the_upstreams_request_by_request() {
    for name in FIXTURES {
        let report = imported(name);
        assert_eq!(report.sessions.len(), 1, "{name}: one session");
        let rows = &report.sessions[0].requests;
        let up = upstream(name);
        assert_eq!(rows.len(), up.len(), "{name}: requests");
        for (row, up) in rows.iter().zip(&up) {
            assert_eq!(
                (
                    row.input_tokens,
                    row.cache_read_tokens,
                    row.cache_write_tokens,
                    row.output_tokens
                ),
                up.usage,
                "{name}: request {} (capture line {})",
                row.index,
                up.line
            );
        }
        let t = &report.totals;
        let sum = up.iter().fold((0, 0, 0, 0), |a, u| {
            (
                a.0 + u.usage.0,
                a.1 + u.usage.1,
                a.2 + u.usage.2,
                a.3 + u.usage.3,
            )
        });
        assert_eq!(
            (
                t.input_tokens,
                t.cache_read_tokens,
                t.cache_write_tokens,
                t.output_tokens
            ),
            sum,
            "{name}: totals"
        );
        assert_eq!(
            report.skipped.malformed_total(),
            0,
            "{name}: {:?}",
            report.skipped
        );
        assert_eq!(
            report.skipped.unknown_total(),
            0,
            "{name}: {:?}",
            report.skipped
        );
    }
}

/// The requests import calls breaks are the ones the audit of the capture calls breaks;
/// where import rebuilt the request (Claude Code 2.1.332) its verdict is the audit's, cause
/// and tokens lost; where it inferred from usage it claims no cause the bytes would be
/// needed for.
#[test]
fn breaks_equal_the_audit_of_the_capture() {
    let inferred_causes = [
        "cold_start",
        "unknown",
        "ttl_expired",
        "model_changed",
        "compaction",
    ];
    for name in FIXTURES {
        let report = imported(name);
        let rows = &report.sessions[0].requests;
        let up = upstream(name);
        assert_eq!(rows.len(), up.len(), "{name}");
        for (row, up) in rows.iter().zip(&up) {
            let upstream_break = up.tokens_lost > 0 || up.cause.is_some_and(|c| c != "cold_start");
            assert_eq!(
                cacheline_import::report::is_break(row),
                upstream_break,
                "{name}: request {} (capture line {}): import {:?}, audit {:?}",
                row.index,
                up.line,
                row.cause,
                up.cause
            );
            if row.exact {
                assert_eq!(row.cause, up.cause, "{name}: request {}", row.index);
                assert_eq!(
                    row.tokens_lost, up.tokens_lost,
                    "{name}: request {}",
                    row.index
                );
            } else {
                let cause = row.cause.unwrap_or("none");
                assert!(
                    row.cause.is_none() || inferred_causes.contains(&cause),
                    "{name}: request {} inferred {cause}",
                    row.index
                );
                if up.cause == Some("cold_start") {
                    assert_eq!(
                        row.cause,
                        Some("cold_start"),
                        "{name}: request {}",
                        row.index
                    );
                }
            }
        }
        let exact = rows.iter().filter(|r| r.exact).count();
        if *name == "claude-code-2.1.332" {
            assert_eq!(exact, rows.len(), "every 2.1.332 request is rebuilt");
        } else {
            assert_eq!(exact, 0, "{name}: no other store holds the request");
        }
    }
}

/// Resumes show where the store marks a new process: Claude Code (a new queue operation or
/// an api-request without base), Codex (`thread_settings_applied`), Gemini CLI (`$set` of
/// the session id); turns 2 and 3 were `--continue`/`--resume` processes.
#[test]
fn resumes_are_named_where_the_store_marks_a_new_process() {
    for name in [
        "claude-code-2.1.197",
        "claude-code-2.1.332",
        "codex-0.171.0",
        "gemini-cli-0.61.0",
    ] {
        let report = imported(name);
        let at: Vec<&str> = report.sessions[0]
            .requests
            .iter()
            .map(|r| r.at.name())
            .collect();
        assert_eq!(at[0], "start", "{name}");
        assert_eq!(at[2], "resume", "{name}: {at:?}");
        assert_eq!(at[4], "resume", "{name}: {at:?}");
        assert!(
            !at[1].contains("resume") && !at[3].contains("resume") && !at[5].contains("resume"),
            "{name}: {at:?}"
        );
    }
}
