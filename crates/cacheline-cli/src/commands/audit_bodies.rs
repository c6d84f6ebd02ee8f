//! `cacheline audit DIR` (or `--guard FILE`): request bodies of any API, each consecutive
//! pair classified by the guard (`prompt_registry::wire::compare`).

use std::error::Error;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

use prompt_core::input;
use prompt_measure::audit::{Line, LineReader};
use prompt_registry::ApiKind;
use prompt_registry::wire::{Break, Cause, MAX_AUDIT_BODY_BYTES, Verdict, compare};
use serde::Serialize;

/// How a pair of bodies fared.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
enum Outcome {
    /// The later body extends the earlier one.
    Extends {
        #[serde(serialize_with = "prompt_registry::wire::engine::serialize_shape")]
        shape: ApiKind,
    },
    /// Only the earlier body's per-request tail is missing: the cache keeps the rest.
    TailDropped { at: Break },
    /// The later body breaks the earlier one's cache.
    Breaks { at: Break },
    /// The pair cannot be compared (different APIs, a malformed body).
    Incomparable { error: String },
}

#[derive(Debug, Serialize)]
struct Pair {
    earlier: String,
    later: String,
    #[serde(flatten)]
    outcome: Outcome,
}

#[derive(Debug, Default, Serialize)]
struct Summary {
    bodies: u64,
    pairs: u64,
    extends: u64,
    tail_dropped: u64,
    breaks: u64,
    incomparable: u64,
    unreadable: u64,
}

/// What to do with the bodies.
pub(crate) struct GuardArgs<'a> {
    pub(crate) path: &'a Path,
    pub(crate) json: bool,
    pub(crate) allow_skipped: bool,
    pub(crate) deny_breaks: bool,
    pub(crate) max_line_bytes: usize,
}

/// One body of the input: its name and bytes, or why it cannot be read.
type Body = (String, Result<Vec<u8>, String>);

/// The request body of a log line: the line, or its `request` when it wraps one (as `audit`
/// reads it); a line that is not JSON is left for the guard to refuse.
fn body_of_line(line: Vec<u8>) -> Vec<u8> {
    let Ok(text) = std::str::from_utf8(&line) else {
        return line;
    };
    match prompt_measure::logged::request_body(text) {
        Ok(std::borrow::Cow::Owned(body)) => body.into_bytes(),
        Ok(std::borrow::Cow::Borrowed(body)) if body.len() != text.len() => {
            body.as_bytes().to_vec()
        }
        _ => line,
    }
}

/// The `.json` files of `dir`, by name (`request-001.json`, `request-002.json`, …).
fn files_of(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("{}: cannot list: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: cannot list: {e}", dir.display()))?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

pub(crate) fn run(
    args: &GuardArgs<'_>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let limit = MAX_AUDIT_BODY_BYTES as u64;
    let mut bodies: Box<dyn Iterator<Item = Body>> = if args.path.is_dir() {
        let files = match files_of(args.path) {
            Ok(files) => files,
            Err(e) => {
                writeln!(err, "error: {e}")?;
                return Ok(2);
            }
        };
        if files.is_empty() {
            writeln!(
                err,
                "{}: error: no .json request bodies in the directory",
                args.path.display()
            )?;
            return Ok(2);
        }
        Box::new(files.into_iter().map(move |path| {
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into(),
            );
            let bytes = input::open(&path)
                .and_then(|file| input::read_limited(file, &path, limit))
                .map_err(|e| e.to_string());
            (name, bytes)
        }))
    } else {
        let file = match input::open(args.path) {
            Ok(file) => file,
            Err(e) => {
                prompt_registry::cli::write_error(err, None, &e);
                return Ok(2);
            }
        };
        let max = args.max_line_bytes.min(MAX_AUDIT_BODY_BYTES);
        let mut lines = LineReader::new(BufReader::with_capacity(1 << 20, file), max);
        let mut failed = false;
        Box::new(std::iter::from_fn(move || {
            loop {
                if failed {
                    return None;
                }
                let line = match lines.next_line() {
                    Ok(Some(line)) => line,
                    Ok(None) => return None,
                    Err(e) => {
                        failed = true;
                        return Some(("input".to_owned(), Err(format!("cannot read: {e}"))));
                    }
                };
                let body = match line {
                    Line::Text(text) if text.iter().all(u8::is_ascii_whitespace) => continue,
                    // Taken, not copied: a body may be 32 MiB, and the previous one is kept.
                    // A `{"request", "response"}` line (as `audit` reads it) gives its body.
                    Line::Text(_) => Ok(body_of_line(lines.take_line())),
                    Line::TooLong(len) => Err(format!(
                        "a body of {len} bytes, over the {max}-byte limit (--max-line-bytes)"
                    )),
                };
                return Some((format!("line {}", lines.line_number()), body));
            }
        }))
    };

    let mut summary = Summary::default();
    let mut previous: Option<(String, Vec<u8>)> = None;
    let mut first = true;
    if args.json {
        write!(out, "{{\"pairs\":[")?;
    }
    for (name, body) in &mut bodies {
        let bytes = match body {
            Ok(bytes) => bytes,
            Err(problem) => {
                summary.unreadable += 1;
                writeln!(
                    err,
                    "{}: warning: {name} skipped: {problem}",
                    args.path.display()
                )?;
                continue;
            }
        };
        summary.bodies += 1;
        let Some((earlier_name, earlier)) = previous.take() else {
            previous = Some((name, bytes));
            continue;
        };
        summary.pairs += 1;
        let outcome = match compare(&earlier, &bytes) {
            Ok(Verdict::Extends { shape }) => {
                summary.extends += 1;
                Outcome::Extends { shape }
            }
            Ok(Verdict::Breaks(at)) if at.cause == Cause::TailDropped => {
                summary.tail_dropped += 1;
                Outcome::TailDropped { at }
            }
            Ok(Verdict::Breaks(at)) => {
                summary.breaks += 1;
                Outcome::Breaks { at }
            }
            Err(e) => {
                summary.incomparable += 1;
                Outcome::Incomparable {
                    error: e.to_string(),
                }
            }
        };
        let pair = Pair {
            earlier: earlier_name,
            later: name.clone(),
            outcome,
        };
        if args.json {
            let sep = if std::mem::take(&mut first) { "" } else { "," };
            write!(out, "{sep}\n{}", serde_json::to_string(&pair)?)?;
        } else {
            print_pair(&pair, out)?;
        }
        previous = Some((name, bytes));
    }
    if args.json {
        writeln!(
            out,
            "\n],\"summary\":{}}}",
            serde_json::to_string_pretty(&summary)?
        )?;
    } else {
        writeln!(
            out,
            "\nsummary: {} bodies, {} pairs: {} extend, {} extend all but the earlier body's \
             per-request tail, {} break the cache, {} cannot be compared; {} unreadable",
            summary.bodies,
            summary.pairs,
            summary.extends,
            summary.tail_dropped,
            summary.breaks,
            summary.incomparable,
            summary.unreadable
        )?;
    }
    let problems = summary.unreadable + summary.incomparable;
    if problems > 0 && !args.allow_skipped {
        writeln!(
            err,
            "{}: warning: {problems} body(ies) unreadable or pair(s) not comparable; exit 1 \
             (pass --allow-skipped to exit 0)",
            args.path.display()
        )?;
        return Ok(1);
    }
    if summary.breaks > 0 && args.deny_breaks {
        writeln!(
            err,
            "{}: error: {} pair(s) break the cache (--deny-breaks)",
            args.path.display(),
            summary.breaks
        )?;
        return Ok(1);
    }
    Ok(0)
}

fn print_pair(pair: &Pair, out: &mut dyn Write) -> std::io::Result<()> {
    let Pair {
        earlier,
        later,
        outcome,
    } = pair;
    match outcome {
        Outcome::Extends { shape } => writeln!(
            out,
            "{later}: extends {earlier} ({})",
            prompt_registry::wire::engine::shape_name(*shape)
        ),
        Outcome::TailDropped { at } => writeln!(
            out,
            "{later}: extends {earlier} up to its per-request tail (from byte {} of the later \
             body)",
            at.divergence.byte_offset
        ),
        Outcome::Breaks { at } => writeln!(out, "{later}: BREAKS {earlier}: {at}"),
        Outcome::Incomparable { error } => {
            writeln!(out, "{later}: cannot be compared with {earlier}: {error}")
        }
    }
}
