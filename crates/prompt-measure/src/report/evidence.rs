//! The evidence of one request ([`Evidence`]) printed: as Markdown, a list of sections,
//! each a small function of the value (readable in a GitHub issue: headings, lists, tables;
//! excerpts as escaped inline code), and as JSON, the value's serialization. Both are
//! scrubbed once more, whole, of the credential values the bodies held.
//!
//! To add a section: a field of [`Evidence`], a function here, and its place in
//! [`SECTIONS`].

use std::fmt::Write as _;

use prompt_core::input::thousands;

use crate::catalogue::WriterFinding;
use crate::evidence::{Around, BlockRow, Evidence, Redactor, Side};

/// One section: appends its Markdown to the report.
type Section = fn(&Evidence, &mut String);

/// The sections, in order.
const SECTIONS: &[Section] = &[
    title,
    verdict,
    divergence,
    changes,
    fields,
    blocks,
    timing_and_usage,
    request,
    agent,
    writer,
    provider,
    produced_by,
];

/// The report as Markdown.
pub fn evidence_markdown(e: &Evidence) -> String {
    let mut out = String::new();
    for section in SECTIONS {
        section(e, &mut out);
    }
    e.redactor.scrub_whole(&out)
}

/// The report as JSON (pretty, one trailing newline): the value's serialization, every
/// string scrubbed once more.
pub fn evidence_json(e: &Evidence) -> Result<String, serde_json::Error> {
    let json = scrub_value(serde_json::to_value(e)?, &e.redactor);
    let mut json = serde_json::to_string_pretty(&json)?;
    json.push('\n');
    Ok(json)
}

/// `value` with every string scrubbed of the credential values: the last safety net over
/// the JSON as written.
fn scrub_value(value: serde_json::Value, r: &Redactor) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(r.scrub_whole(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(|v| scrub_value(v, r)).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (r.scrub_whole(&k), scrub_value(v, r)))
                .collect(),
        ),
        other => other,
    }
}

/// Inline code that no content can break out of: a table's `|` is escaped (as JSON
/// would), line breaks are spelled out; a single backtick is quoted by a double one
/// (`` a`b ``), a longer run escaped.
fn code(text: &str) -> String {
    let double = text.contains('`') && !text.contains("``");
    let mut s = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '`' if double => s.push('`'),
            '`' => s.push_str("\\u0060"),
            '|' => s.push_str("\\u007c"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(s, "\\u{:04x}", u32::from(c));
            }
            c => s.push(c),
        }
    }
    if double {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

/// An excerpt of a body (its JSON text as sent) in inline code; `(nothing)` when empty.
fn quoted(text: &str) -> String {
    if text.is_empty() {
        return "(nothing)".to_owned();
    }
    code(text)
}

fn earlier_line(e: &Evidence) -> String {
    e.earlier.as_ref().map_or_else(
        || "no predecessor".to_owned(),
        |s| format!("line {}", s.line),
    )
}

fn title(e: &Evidence, out: &mut String) {
    let name = std::path::Path::new(&e.log)
        .file_name()
        .map_or_else(|| e.log.clone(), |n| n.to_string_lossy().into_owned());
    let _ = writeln!(
        out,
        "## Prompt-cache evidence: line {} of {}\n",
        e.line,
        code(&name)
    );
}

fn verdict(e: &Evidence, out: &mut String) {
    match (&e.cause, &e.earlier) {
        (_, None) => {
            let _ = writeln!(
                out,
                "**Cold start**: no earlier request of its session and lane to compare with; \
                 nothing below is a difference.\n"
            );
        }
        (None, Some(p)) => {
            let _ = writeln!(
                out,
                "**No break**: it extends line {} ({} tokens expected from the cache).\n",
                p.line,
                thousands(e.expected_cached)
            );
        }
        (Some(cause), Some(p)) => {
            let at = match (
                &e.json_path,
                e.divergence.as_ref().and_then(|d| d.byte_offset),
            ) {
                (Some(path), Some(offset)) => format!(" at {}, byte {offset}", code(path)),
                (Some(path), None) => format!(" at {}", code(path)),
                _ => String::new(),
            };
            let place = e
                .place
                .as_ref()
                .map_or_else(String::new, |p| format!(" ({p})"));
            let _ = writeln!(
                out,
                "**{cause}**{at}{place} against line {}: {}; {} tokens lost.\n",
                p.line,
                e.cause_detail.as_deref().unwrap_or(""),
                thousands(e.tokens_lost)
            );
        }
    }
    let _ = writeln!(out, "Verdict: {}\n", code(&e.verdict));
}

fn side_line(label: &str, a: &Around) -> String {
    match a.byte_offset {
        Some(o) if !a.before.is_empty() || !a.from.is_empty() => format!(
            "- {label} (line {}, byte {o}): {} ▶ {}",
            a.line,
            quoted(&a.before),
            quoted(&a.from)
        ),
        _ => format!("- {label} (line {}): {}", a.line, quoted(&a.from)),
    }
}

fn divergence(e: &Evidence, out: &mut String) {
    let Some(d) = &e.divergence else {
        return;
    };
    let _ = writeln!(out, "### First divergent byte\n");
    let _ = match (d.byte_offset, d.earlier.byte_offset) {
        (Some(offset), Some(_)) => writeln!(
            out,
            "Byte {offset} of the later body; up to {} bytes before it and {} from it on, per \
             side (▶ marks it):\n",
            e.redaction.excerpt_bytes[0], e.redaction.excerpt_bytes[1]
        ),
        (Some(offset), None) => writeln!(
            out,
            "Byte {offset} of the later body; the changed value on each side, as the engine \
             quotes it:\n"
        ),
        (None, _) => writeln!(
            out,
            "Not in the body (a header); the changed value on each side, as the engine \
             quotes it:\n"
        ),
    };
    let _ = writeln!(out, "{}", side_line("earlier", &d.earlier));
    let _ = writeln!(out, "{}\n", side_line("later", &d.later));
}

fn changes(e: &Evidence, out: &mut String) {
    if e.earlier.is_none() {
        return;
    }
    let _ = writeln!(out, "### JSON-path diff\n");
    if e.changes.is_empty() {
        let _ = writeln!(out, "No change from the earlier request's elements.\n");
    } else {
        let _ = writeln!(
            out,
            "| cause | json path | place | byte |\n|---|---|---|---:|"
        );
        for c in &e.changes {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                c.cause,
                code(&c.json_path),
                c.place.replace('|', "\\|"),
                c.byte_offset
            );
        }
        let _ = writeln!(out);
    }
}

fn fields(e: &Evidence, out: &mut String) {
    if e.fields.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Top-level fields, as bytes ({} → line {}): {}\n",
        earlier_line(e),
        e.line,
        e.fields
            .iter()
            .map(|f| format!("{} {}", code(&f.name), f.status))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Rows of one status in a row longer than this are folded into one line.
const FOLD: usize = 3;

fn block_row(r: &BlockRow, first: Option<&str>) -> String {
    let name = format!("{}[{}]", r.group, r.index);
    let mark = if first == Some(name.as_str()) {
        "**first difference**"
    } else {
        r.status
    };
    let label = if r.label.is_empty() {
        String::new()
    } else {
        format!(" {}", code(&r.label))
    };
    let hash = |h: &Option<String>| h.as_deref().map_or_else(|| "—".to_owned(), code);
    format!(
        "| {name}{label} | {} | {} | {mark} |",
        hash(&r.earlier),
        hash(&r.later)
    )
}

fn blocks(e: &Evidence, out: &mut String) {
    let b = &e.blocks;
    let _ = writeln!(
        out,
        "### Element hashes\n\nEach tool, system block and message as the comparison engine \
         reads it (a hash of its compared form, first 8 hex digits); runs of more than {FOLD} \
         alike are folded.\n"
    );
    let _ = writeln!(
        out,
        "| element | {} | line {} | |\n|---|---|---|---|",
        earlier_line(e),
        e.line
    );
    let first = b.first_difference.as_deref();
    let mut i = 0;
    while i < b.rows.len() {
        let r = &b.rows[i];
        let run = b.rows[i..]
            .iter()
            .take_while(|x| x.group == r.group && x.status == r.status)
            .count();
        let folds = run > FOLD
            && !b.rows[i..i + run]
                .iter()
                .any(|x| first == Some(format!("{}[{}]", x.group, x.index).as_str()));
        if folds {
            let _ = writeln!(out, "{}", block_row(r, first));
            let _ = writeln!(out, "| … {} more {} | | | {} |", run - 2, r.group, r.status);
            let _ = writeln!(out, "{}", block_row(&b.rows[i + run - 1], first));
            i += run;
        } else {
            let _ = writeln!(out, "{}", block_row(r, first));
            i += 1;
        }
    }
    if b.unlisted > 0 {
        let _ = writeln!(out, "| … {} more, not listed | | | |", b.unlisted);
    }
    let _ = writeln!(out);
}

fn usage_cells(s: Option<&Side>) -> [String; 5] {
    match s.and_then(|s| s.usage.as_ref()) {
        Some(u) => [
            thousands(u.input),
            thousands(u.cached),
            thousands(u.written),
            thousands(u.uncached),
            u.provider.clone(),
        ],
        None => std::array::from_fn(|_| "—".to_owned()),
    }
}

fn timing_and_usage(e: &Evidence, out: &mut String) {
    let _ = writeln!(out, "### Timing and usage\n");
    let gap = e.gap_secs.map_or_else(
        || "not known (no timestamps)".to_owned(),
        |g| format!("{g:.1} s"),
    );
    if e.earlier.is_some() {
        let _ = writeln!(
            out,
            "Gap between the two requests: {gap}. Expected from the cache by the provider's \
             rule: {} tokens; lost: {} (cacheline's tokenizer).\n",
            thousands(e.expected_cached),
            thousands(e.tokens_lost)
        );
    }
    let _ = writeln!(
        out,
        "| | {} | line {} |\n|---|---:|---:|",
        earlier_line(e),
        e.line
    );
    let earlier = usage_cells(e.earlier.as_ref());
    let later = usage_cells(Some(&e.later));
    for (i, name) in [
        "input tokens (reported)",
        "read from the cache",
        "written to the cache",
        "neither",
        "usage read as",
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(out, "| {name} | {} | {} |", earlier[i], later[i]);
    }
    let tokens = |s: Option<&Side>| s.map_or_else(|| "—".to_owned(), |s| thousands(s.tokens));
    let _ = writeln!(
        out,
        "| tokens (cacheline's tokenizer) | {} | {} |\n",
        tokens(e.earlier.as_ref()),
        tokens(Some(&e.later))
    );
}

fn request(e: &Evidence, out: &mut String) {
    let _ = writeln!(out, "### Request\n");
    let _ = writeln!(
        out,
        "- model: {}; lane: {}",
        e.model.as_deref().map_or_else(|| "—".to_owned(), code),
        code(&e.lane)
    );
    let source = serde_json::to_value(e.session.source)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let _ = writeln!(out, "- session: {} (from {source})", code(&e.session.id));
    if let Some(path) = &e.later.path {
        let _ = writeln!(out, "- path: {} (query not shown)", code(path));
    }
    let _ = writeln!(out);
}

fn agent(e: &Evidence, out: &mut String) {
    let _ = writeln!(out, "### Agent\n");
    match &e.agent {
        Some(a) => {
            let _ = writeln!(
                out,
                "- {} {} (user-agent {})\n",
                code(&a.name),
                a.version.as_deref().unwrap_or("(no version)"),
                code(&a.user_agent)
            );
        }
        None => {
            let _ = writeln!(out, "- not named: the log has no user-agent for it\n");
        }
    }
}

fn writer(e: &Evidence, out: &mut String) {
    let _ = writeln!(out, "### Writer\n");
    match &e.writer {
        Some(WriterFinding::Catalogue(m)) => {
            let versions = if m.versions == "*" {
                "any version".to_owned()
            } else {
                m.versions.clone()
            };
            let _ = writeln!(
                out,
                "- {} (writer catalogue entry {}, {} {}); it varies {}",
                m.name,
                code(&m.id),
                m.agent.name,
                versions,
                m.varies
            );
            let _ = writeln!(
                out,
                "- upstream issue: {}",
                m.issue.as_deref().unwrap_or("none recorded")
            );
            let _ = writeln!(
                out,
                "- workaround: {}\n",
                m.workaround.as_deref().unwrap_or("none known")
            );
        }
        Some(WriterFinding::Learned(b)) => {
            let _ = writeln!(
                out,
                "- no catalogue entry; a learned volatile block: {} at {} changed in {} sessions\n",
                code(&b.agent),
                code(&b.path),
                b.sessions
            );
        }
        None => {
            let _ = writeln!(
                out,
                "- no writer catalogue entry matches this change (docs/catalogue.md says how to add one)\n"
            );
        }
    }
}

fn provider(e: &Evidence, out: &mut String) {
    let _ = writeln!(out, "### The provider's verdict\n");
    match &e.provider_verdict {
        Some(p) => {
            let clause = super::provider_clause(p);
            let clause = clause.trim_start_matches("; ");
            let _ = writeln!(out, "- {clause}\n");
        }
        None => {
            let _ = writeln!(
                out,
                "- none: the reply carried no cache diagnostics (`cacheline proxy --diagnose` asks for them)\n"
            );
        }
    }
}

fn produced_by(e: &Evidence, out: &mut String) {
    let r = &e.redaction;
    let _ = writeln!(
        out,
        "---\nProduced by {} with {}. Redacted: no credential header or URL query is read; \
         {} credential value(s) in the bodies hidden; excerpts at most {} + {} bytes per side{}.",
        e.produced_by.cacheline,
        code(&e.produced_by.command),
        r.credentials_hidden,
        r.excerpt_bytes[0],
        r.excerpt_bytes[1],
        if r.text_redacted {
            ", letters and digits as x and 0"
        } else {
            ""
        }
    );
}
