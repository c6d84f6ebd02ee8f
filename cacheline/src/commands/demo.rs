//! `cacheline demo`: the scripted session, byte by byte, against replace-at-head.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use prompt_reference::demo::{self, DemoTurn};
use prompt_registry::Registry;
use prompt_registry::cli;

use super::DEFAULT_CONFIG;
use crate::output::{pct_of, progress};

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// agent.toml to use (default: the built-in one); `-` reads standard input.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Number of turns.
    #[arg(long, default_value_t = 12)]
    turns: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
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
    let bar = progress(
        args.turns.saturating_mul(2),
        "{spinner} composing {pos}/{len} requests {wide_bar}",
    );
    let report = demo::run_with_progress(registry, &policy, args.turns, |n| bar.set_position(n))?;
    bar.finish_and_clear();
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
