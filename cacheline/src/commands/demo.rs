//! `cacheline demo`: the scripted session, byte by byte, against replace-at-head.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use prompt_core::delivery::PrefixRole;
use prompt_core::input;
use prompt_reference::demo::{self, DemoOptions, DemoState, DemoTurn};
use prompt_registry::cli;
use prompt_registry::{DeliveryStyle, Registry};

use super::DEFAULT_CONFIG;
use crate::output::{pct_of, progress, write_json_error};

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// agent.toml to use (default: the built-in one); `-` reads standard input.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The last turn to play (with --resume: play on from the saved turn to this one).
    #[arg(long, default_value_t = 12)]
    turns: u64,
    /// How updates are delivered: system, user-reminder, merged (into the next user
    /// message) or first-user (merged, and the prefix in the first user message).
    #[arg(long, default_value = "system", value_parser = parse_delivery)]
    delivery: DeliveryStyle,
    /// Write the session after the last turn to FILE (resume it with --resume).
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// Go on from a session written by --save.
    #[arg(long, value_name = "FILE")]
    resume: Option<PathBuf>,
    /// Write every request exactly as it would be sent, one file per request:
    /// DIR/request-001.json, request-002.json, … (numbered across --save and --resume).
    #[arg(long, value_name = "DIR")]
    write_bodies: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The most a saved demo may hold: 256 MiB (a long session's history).
const SAVED_LIMIT: u64 = 256 << 20;

fn parse_delivery(s: &str) -> Result<DeliveryStyle, String> {
    match s {
        "system" => Ok(DeliveryStyle::system()),
        "user-reminder" => Ok(DeliveryStyle::user_reminder("system-reminder")),
        "merged" => Ok(DeliveryStyle::merged_into_user("system-reminder")),
        "first-user" => {
            Ok(DeliveryStyle::merged_into_user("system-reminder")
                .with_prefix(PrefixRole::FirstUser))
        }
        other => Err(format!(
            "unknown delivery `{other}`: expected system, user-reminder, merged or first-user"
        )),
    }
}

const LEGEND: &str = "\
Each turn's request is composed twice: by the library (a frozen prefix, an append-only
history, per-turn writers appended after it) and by the old replace-at-head composition
(every writer rewritten into message 0 each turn, constant and session writers first, its
most charitable order). A turn is a user request (`3`) and the continuations the agent
sends after each round of tool results (`3.1`, `3.2`). Columns: request B = bytes sent;
reused B = bytes shared with the previous request of the same composition (what a prefix
cache keeps); reused % = reused over sent. Lines under a request: what happened before it
(events), the history nodes new in it (+), and the messages sent at the end of this request
only (ephemeral).
";

pub(crate) fn run(
    args: &DemoArgs,
    registry: &Registry,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let Some(policy) =
        cli::load_policy(args.config.as_deref(), registry, Some(DEFAULT_CONFIG), err)?
    else {
        return Ok(2);
    };
    let resume = match &args.resume {
        None => None,
        Some(path) => {
            let text = match input::read_text(path, SAVED_LIMIT) {
                Ok(text) => text,
                Err(e) => {
                    cli::write_error(err, None, &e);
                    return Ok(2);
                }
            };
            match serde_json::from_str::<DemoState>(&text) {
                Ok(state) => Some(state),
                Err(e) => {
                    write_json_error(err, path, &e);
                    return Ok(2);
                }
            }
        }
    };
    if let Some(dir) = &args.write_bodies {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("{}: cannot create the directory: {e}", dir.display()))?;
    }
    // About three requests per turn (tool calls are continuations), twice.
    let bar = progress(
        args.turns.saturating_mul(6),
        "{spinner} composing {pos}/{len} requests {wide_bar}",
    );
    let mut on_progress = |n: u64| bar.set_position(n);
    let mut write_body = |sequence: u64, bytes: &[u8]| -> std::io::Result<()> {
        match &args.write_bodies {
            Some(dir) => std::fs::write(dir.join(format!("request-{sequence:03}.json")), bytes),
            None => Ok(()),
        }
    };
    let mut options = DemoOptions::new(args.turns);
    options.delivery = args.delivery.clone();
    options.resume = resume;
    options.progress = Some(&mut on_progress);
    options.sink = Some(&mut write_body);
    let run = demo::run_demo(registry, &policy, options)?;
    bar.finish_and_clear();
    if let Some(path) = &args.save {
        let text = serde_json::to_string(&run.state)?;
        std::fs::write(path, text).map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
    }
    let report = run.turns;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print(&report, out)?;
    }
    Ok(0)
}

fn print(turns: &[DemoTurn], out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(LEGEND.as_bytes())?;
    writeln!(out)?;
    writeln!(
        out,
        "turn   request B  reused B  reused %  | replace-at-head: request B  reused B  reused %"
    )?;
    let (mut sent, mut reused, mut head_sent, mut head_reused) = (0u64, 0u64, 0u64, 0u64);
    for t in turns {
        writeln!(
            out,
            "{:>5}  {:>9}  {:>8}  {:>8}  | {:>27}  {:>8}  {:>8}",
            t.label,
            t.request_bytes,
            t.reused_bytes,
            pct_of(t.reused_bytes as u64, t.request_bytes as u64),
            t.head_rewrite_bytes,
            t.head_rewrite_reused,
            pct_of(t.head_rewrite_reused as u64, t.head_rewrite_bytes as u64)
        )?;
        if !t.events.is_empty() {
            writeln!(out, "      events: {}", t.events.join("; "))?;
        }
        for a in &t.appended {
            writeln!(
                out,
                "      + {} ({:?}, {} B): {}",
                a.producer, a.kind, a.bytes, a.why
            )?;
        }
        if !t.ephemeral.is_empty() {
            writeln!(
                out,
                "      ephemeral (this request only): {}",
                t.ephemeral.join(", ")
            )?;
        }
        sent = sent.saturating_add(t.request_bytes as u64);
        reused = reused.saturating_add(t.reused_bytes as u64);
        head_sent = head_sent.saturating_add(t.head_rewrite_bytes as u64);
        head_reused = head_reused.saturating_add(t.head_rewrite_reused as u64);
    }
    writeln!(
        out,
        "total: cacheline reused {reused} of {sent} B ({}); replace-at-head reused {head_reused} of {head_sent} B ({})",
        pct_of(reused, sent),
        pct_of(head_reused, head_sent)
    )?;
    if let Some(first) = turns.first() {
        writeln!(
            out,
            "prefix fingerprint (prompt_cache_key): {}",
            first.fingerprint
        )?;
    }
    Ok(())
}
