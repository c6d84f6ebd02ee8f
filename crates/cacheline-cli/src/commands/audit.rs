//! `cacheline audit`: a log of real requests through the provider rules, naming every
//! cache-breaker.

use std::error::Error;
use std::io::{BufReader, Write};
use std::path::PathBuf;

use prompt_core::input;
use prompt_measure::audit::{AuditSummary, DEFAULT_MAX_LINE_BYTES, Event, audit_reader};
use prompt_measure::catalogue::Catalogue;
use prompt_measure::report;
use prompt_measure::{AuditConfig, Auditor, O200kBase, Rule};

use crate::output::{load_audit_prices, pct, progress, thousands};

/// Arguments of `audit`.
#[derive(Debug, clap::Args)]
pub(crate) struct AuditArgs {
    /// JSONL file: one request body of any API (or {"request", "response"}) per line, the
    /// response whole or streamed (its server-sent events as a string); `-` reads standard
    /// input. A directory of request bodies (`*.json`, in name order, as
    /// `demo --write-bodies` writes them) is read with the guard: see --guard.
    file: PathBuf,
    /// Read FILE as request bodies of any API (OpenAI Chat Completions or Responses,
    /// Anthropic Messages, Gemini, llama.cpp), one per line, and say of each consecutive pair
    /// whether the later extends the earlier, or where and why it breaks the cache.
    #[arg(long)]
    guard: bool,
    /// With the guard: exit 1 when a pair breaks the cache (for CI).
    #[arg(long)]
    deny_breaks: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Rule standing for the hit rate and the overspend when no response reports usage:
    /// llama_cpp, vllm, openai, deepseek or anthropic.
    #[arg(long, default_value = "openai", value_parser = parse_rule)]
    backend: Rule,
    /// Earlier requests compared exactly with each new one (the prompts a cache still holds).
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// JSON file overriding price multipliers, e.g. {"openai": {"read": 0.5}}; its
    /// "lifetime" key prices the cache lifetime section: {"lifetime": {"anthropic_1h_write":
    /// 2.0, "openai_24h_write": 1.0, "input_usd_per_mtok": {"claude-sonnet-4-5": 3.0}}}.
    #[arg(long)]
    prices: Option<PathBuf>,
    /// Anthropic's per-model minimum cacheable prefix, in tokens.
    #[arg(long, default_value_t = 1024)]
    anthropic_min_tokens: usize,
    /// Print only the summary (with --json: only the summary object).
    #[arg(long)]
    summary_only: bool,
    /// Exit 0 even when some lines were skipped (by default skipped lines exit 1).
    #[arg(long)]
    allow_skipped: bool,
    /// Longest line audited, in bytes (default 32 MiB); a longer line is skipped, never held
    /// in memory whole.
    #[arg(long, default_value_t = DEFAULT_MAX_LINE_BYTES, value_name = "N")]
    max_line_bytes: usize,
    /// A writer catalogue (TOML, docs/catalogue.md) extending the built-in one: its entries
    /// override the built-in ones of the same id.
    #[arg(long, value_name = "FILE")]
    catalogue: Option<PathBuf>,
}

fn parse_rule(s: &str) -> Result<Rule, String> {
    Rule::from_key(s)
        .filter(|r| *r != Rule::Limit)
        .ok_or_else(|| {
            format!(
                "unknown backend `{s}`: expected llama_cpp, vllm, openai, deepseek or anthropic"
            )
        })
}

fn print_summary(
    s: &AuditSummary,
    backend: Rule,
    top: usize,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    if s.requests == 0 {
        return writeln!(
            out,
            "\nsummary: no requests in the log ({} lines skipped); nothing to audit",
            s.malformed
        );
    }
    writeln!(
        out,
        "\nsummary: {} requests, {} lines skipped, {} input tokens ({})",
        s.requests,
        s.malformed,
        thousands(s.tokens),
        s.tokenizer
    )?;
    let overspend = match (s.overspend_pct, s.overspend_undefined) {
        (Some(pct), _) => format!("{pct:.1}% of the ideal"),
        (None, why) => format!("undefined ({})", why.unwrap_or("no ideal")),
    };
    writeln!(
        out,
        "  hit rate {} ({}); physical limit {}; overspend {overspend} (each request at its provider's prices; {backend}'s rule without usage)",
        pct(s.hit_rate),
        s.hit_rate_source,
        pct(s.limit_share),
    )?;
    let rules: Vec<String> = s
        .backends
        .iter()
        .filter(|(r, _)| **r != Rule::Limit)
        .map(|(r, b)| {
            format!(
                "{r} {} ({} of limit)",
                pct(b.cached_share),
                pct(b.limit_share)
            )
        })
        .collect();
    writeln!(out, "  cached by rule: {}", rules.join(", "))?;
    writeln!(
        out,
        "  causes: {}; new conversations {}",
        report::causes_text(&s.causes).unwrap_or_else(|| "none".to_owned()),
        s.new_conversations
    )?;
    if let Some(line) = report::provider_verdicts_text(&s.provider_verdicts) {
        writeln!(out, "  {line}")?;
    }
    writeln!(
        out,
        "{}",
        prompt_measure::lifetime::summary_text(&s.lifetime, top)
    )?;
    for b in &s.learned_volatile {
        writeln!(
            out,
            "  learned volatile block: {} at {}, changed in {} sessions, no catalogue entry",
            prompt_core::input::escape_controls(&b.agent),
            prompt_core::input::escape_controls(&b.path),
            b.sessions
        )?;
    }
    if s.top_breakers.is_empty() {
        writeln!(
            out,
            "no cache-breakers: every request extended its predecessor"
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "top cache-breakers (tokens an append-only client would have reused):"
    )?;
    for (i, b) in s.top_breakers.iter().enumerate() {
        writeln!(
            out,
            "  {}. {} at {}: {} tokens lost over {} request{}, first at line {}: {}",
            i + 1,
            b.cause,
            prompt_core::input::escape_controls(&b.place),
            thousands(b.tokens_lost),
            b.requests,
            if b.requests == 1 { "" } else { "s" },
            b.first_line,
            prompt_core::input::escape_controls(&b.detail)
        )?;
    }
    Ok(())
}

pub(crate) fn run(
    args: &AuditArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    if args.guard || args.file.is_dir() {
        let guard = super::audit_bodies::GuardArgs {
            path: &args.file,
            json: args.json,
            allow_skipped: args.allow_skipped,
            deny_breaks: args.deny_breaks,
            max_line_bytes: args.max_line_bytes,
        };
        return super::audit_bodies::run(&guard, out, err);
    }
    let Some((prices, lifetime_prices)) = load_audit_prices(args.prices.as_deref(), err) else {
        return Ok(2);
    };
    let catalogue = match args.catalogue.as_deref().map(Catalogue::builtin_with_file) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            writeln!(err, "cacheline audit: {e}")?;
            return Ok(2);
        }
    };
    let mut config = AuditConfig::default()
        .with_backend(args.backend)
        .with_prices(prices)
        .with_max_line_bytes(args.max_line_bytes);
    config.sim.window = args.window.max(1);
    config.sim.anthropic.min_tokens = args.anthropic_min_tokens;
    let file = match input::open(&args.file) {
        Ok(file) => file,
        Err(e) => {
            prompt_registry::cli::write_error(err, None, &e);
            return Ok(2);
        }
    };
    let len = std::fs::metadata(&args.file).map(|m| m.len()).unwrap_or(0);
    let bar = progress(
        len,
        "{spinner} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta}) {wide_bar}",
    );
    let reader = BufReader::with_capacity(1 << 20, bar.wrap_read(file));
    let config_top = config.top;
    let tokenizer = O200kBase::shared()?;
    let mut auditor = Auditor::new(tokenizer, config).with_lifetime_prices(lifetime_prices);
    if let Some(c) = catalogue {
        auditor = auditor.with_catalogue(c);
    }
    let mut skipped: Vec<(u64, String)> = Vec::new();
    let mut skipped_count = 0u64;
    let mut first = true;
    let per_request = !args.summary_only;
    if args.json && per_request {
        write!(out, "{{\"requests\":[")?;
    } else if per_request {
        writeln!(
            out,
            "{:>6} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8}  divergence",
            "line", "tokens", "llama_cpp", "vllm", "openai", "deepseek", "anthropic", "limit"
        )?;
    }
    audit_reader(reader, &args.file, &mut auditor, |event| match event {
        Event::Request(r) if !per_request => {
            let _ = r;
            Ok(())
        }
        Event::Request(r) if args.json => {
            let sep = if std::mem::take(&mut first) { "" } else { "," };
            let json = serde_json::to_string(r).map_err(std::io::Error::other)?;
            bar.suspend(|| write!(out, "{sep}\n{json}"))
        }
        Event::Request(r) => {
            let c = |rule| r.cached.get(&rule).copied().unwrap_or(0);
            bar.suspend(|| {
                writeln!(
                    out,
                    "{:>6} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8}  {}",
                    r.line,
                    r.tokens,
                    c(Rule::LlamaCpp),
                    c(Rule::Vllm),
                    c(Rule::OpenAi),
                    c(Rule::DeepSeek),
                    c(Rule::Anthropic),
                    c(Rule::Limit),
                    prompt_core::input::escape_controls(&prompt_measure::audit::verdict_text(r))
                )
            })
        }
        Event::Skipped(e) => {
            skipped_count += 1;
            if skipped.len() < 100 {
                skipped.push((e.line, e.problem.to_string()));
            }
            bar.suspend(|| {
                writeln!(
                    err,
                    "{}:{}: warning: line skipped: {}",
                    e.path.display(),
                    e.line,
                    e.problem
                )
            })
        }
    })?;
    bar.finish_and_clear();
    let summary = auditor.summary();
    if args.json {
        let skipped: Vec<serde_json::Value> = skipped
            .into_iter()
            .map(|(line, error)| serde_json::json!({"line": line, "error": error}))
            .collect();
        if per_request {
            writeln!(
                out,
                "\n],\"skipped\":{},\"summary\":{}}}",
                serde_json::to_string(&skipped)?,
                serde_json::to_string_pretty(&summary)?
            )?;
        } else {
            writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
        }
    } else {
        print_summary(&summary, args.backend, config_top, out)?;
    }
    if skipped_count > 0 && !args.allow_skipped {
        writeln!(
            err,
            "{}: warning: {skipped_count} line(s) skipped; exit 1 (pass --allow-skipped to exit 0)",
            args.file.display()
        )?;
        return Ok(1);
    }
    Ok(0)
}
