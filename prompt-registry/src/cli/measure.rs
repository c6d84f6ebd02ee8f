//! `cacheline simulate` and `cacheline audit`.

use std::io::{BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};

use crate::Registry;
use crate::measure::audit::{AuditSummary, Classification, Event, audit_reader};
use crate::measure::{AuditConfig, Auditor, O200kBase, PriceTable, RequestAudit, Rule, SimConfig};

/// Arguments of `simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Number of turns of the scripted session.
    #[arg(long, default_value_t = 40)]
    pub turns: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// JSON file overriding price multipliers, e.g. {"openai": {"read": 0.5}}.
    #[arg(long)]
    pub prices: Option<PathBuf>,
    /// Anthropic's per-model minimum cacheable prefix, in tokens.
    #[arg(long, default_value_t = 1024)]
    pub anthropic_min_tokens: usize,
}

/// Arguments of `audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// JSONL file: one chat request body (or {"request", "response"}) per line.
    pub file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Rule standing for the hit rate and the overspend when no response reports usage:
    /// llama_cpp, vllm, openai, deepseek or anthropic.
    #[arg(long, default_value = "openai", value_parser = parse_rule)]
    pub backend: Rule,
    /// Earlier requests compared exactly with each new one (the prompts a cache still holds).
    #[arg(long, default_value_t = 32)]
    pub window: usize,
    /// JSON file overriding price multipliers, e.g. {"openai": {"read": 0.5}}.
    #[arg(long)]
    pub prices: Option<PathBuf>,
    /// Anthropic's per-model minimum cacheable prefix, in tokens.
    #[arg(long, default_value_t = 1024)]
    pub anthropic_min_tokens: usize,
    /// Print only the summary (text output).
    #[arg(long)]
    pub summary_only: bool,
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

fn load_prices(path: Option<&Path>) -> Result<PriceTable, Box<dyn std::error::Error>> {
    let Some(path) = path else {
        return Ok(PriceTable::default());
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()).into())
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(crate) fn simulate(
    args: SimulateArgs,
    registry: &Registry,
    out: &mut dyn Write,
    _err: &mut dyn Write,
) -> Result<u8, Box<dyn std::error::Error>> {
    #[cfg(feature = "reference")]
    {
        use crate::scenario::Strategy;
        let prices = load_prices(args.prices.as_deref())?;
        let mut config = SimConfig::unbounded();
        config.anthropic.min_tokens = args.anthropic_min_tokens;
        let tokenizer = O200kBase::shared()?;
        let report = crate::measure::simulate(registry, args.turns, tokenizer, &prices, config)?;
        if args.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
            return Ok(0);
        }
        writeln!(
            out,
            "cacheline simulate: {} turns over the reference components; tokens by {}",
            report.turns, report.tokenizer
        )?;
        writeln!(
            out,
            "cached = tokens served from cache / input tokens; of limit = cached / physical limit's cached; cost in uncached-token units (read 0.1x, Anthropic write 1.25x unless --prices)\n"
        )?;
        writeln!(
            out,
            "{:<16} {:>13}  {:<10} {:>7} {:>9} {:>13} {:>14}",
            "strategy",
            "input tokens",
            "backend",
            "cached",
            "of limit",
            "cost/no cache",
            "cost/cacheline"
        )?;
        for strategy in Strategy::ALL {
            let Some(s) = report.strategies.get(&strategy) else {
                continue;
            };
            for (i, rule) in Rule::ALL.into_iter().enumerate() {
                let Some(r) = s.rules.get(&rule) else {
                    continue;
                };
                let (name, tokens) = if i == 0 {
                    (strategy.as_str(), thousands(s.tokens))
                } else {
                    ("", String::new())
                };
                writeln!(
                    out,
                    "{name:<16} {tokens:>13}  {:<10} {:>7} {:>9} {:>12.2}x {:>13.2}x",
                    rule.as_str(),
                    pct(r.cached_share),
                    pct(r.limit_share),
                    r.relative_cost,
                    r.cost_vs_cacheline
                )?;
            }
        }
        Ok(0)
    }
    #[cfg(not(feature = "reference"))]
    {
        let _ = (args, registry, out);
        Err("simulate needs the `reference` feature (the scripted session runs over the reference components)".into())
    }
}

fn divergence_text(r: &RequestAudit) -> String {
    let Some(d) = &r.divergence else {
        return "first request".to_owned();
    };
    let at = match (d.part, d.message_index) {
        (crate::measure::audit::Part::Tools, Some(i)) => format!("tools[{i}]"),
        (crate::measure::audit::Part::Tools, None) => "tools".to_owned(),
        (_, Some(i)) => format!(
            "message {i} ({})",
            d.earlier_role
                .as_deref()
                .or(d.role.as_deref())
                .unwrap_or("?")
        ),
        (_, None) => "messages".to_owned(),
    };
    let mut s = format!(
        "{} at {at}, byte {} vs line {}: {}",
        d.classification.as_str(),
        d.byte_offset,
        d.earlier_line,
        d.detail
    );
    if d.tokens_lost > 0 {
        s.push_str(&format!(
            "; {:?} → {:?}; {} tokens lost",
            d.excerpt.earlier,
            d.excerpt.later,
            thousands(d.tokens_lost)
        ));
    }
    s
}

fn print_summary(s: &AuditSummary, backend: Rule, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "\nsummary: {} requests, {} lines skipped, {} input tokens ({})",
        s.requests,
        s.malformed,
        thousands(s.tokens),
        s.tokenizer
    )?;
    writeln!(
        out,
        "  hit rate {} ({}); physical limit {}; overspend {:.1}% of the ideal ({backend} prices)",
        pct(s.hit_rate),
        s.hit_rate_source,
        pct(s.limit_share),
        s.overspend_pct
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
    let classes: Vec<String> = s
        .classifications
        .iter()
        .map(|(c, n)| format!("{} {n}", c.as_str()))
        .collect();
    writeln!(
        out,
        "  divergences: {}; new conversations {}",
        classes.join(", "),
        s.new_conversations
    )?;
    if s.top_breakers.is_empty() {
        writeln!(
            out,
            "no cache-breakers: every request extended an earlier one"
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "top cache-breakers (tokens an append-only client would have reused):"
    )?;
    for (i, b) in s.top_breakers.iter().enumerate() {
        let at = match (b.part, b.classification, b.message_index) {
            (crate::measure::audit::Part::Tools, _, Some(t)) => format!("tools[{t}]"),
            (crate::measure::audit::Part::Tools, _, None) => "tools".to_owned(),
            (_, Classification::HeadRewrite, Some(m)) => {
                format!("message {m} ({})", b.role.as_deref().unwrap_or("?"))
            }
            _ => format!("a {} message", b.role.as_deref().unwrap_or("?")),
        };
        writeln!(
            out,
            "  {}. {} at {at}: {} tokens lost over {} request{}, first at line {}: {}",
            i + 1,
            b.classification.as_str(),
            thousands(b.tokens_lost),
            b.requests,
            if b.requests == 1 { "" } else { "s" },
            b.first_line,
            b.detail
        )?;
    }
    Ok(())
}

pub(crate) fn audit(
    args: AuditArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn std::error::Error>> {
    let prices = load_prices(args.prices.as_deref())?;
    let mut config = AuditConfig {
        backend: args.backend,
        prices,
        ..AuditConfig::default()
    };
    config.sim.window = args.window.max(1);
    config.sim.anthropic.min_tokens = args.anthropic_min_tokens;
    let file =
        std::fs::File::open(&args.file).map_err(|source| crate::measure::AuditError::Open {
            path: args.file.clone(),
            source,
        })?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(len);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta}) {wide_bar}",
        ) {
            bar.set_style(style);
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let reader = BufReader::with_capacity(1 << 20, bar.wrap_read(file));
    let tokenizer = O200kBase::shared()?;
    let mut auditor = Auditor::new(tokenizer, config);
    let mut skipped: Vec<(u64, String)> = Vec::new();
    let mut first = true;
    if args.json {
        write!(out, "{{\"requests\":[")?;
    } else if !args.summary_only {
        writeln!(
            out,
            "{:>6} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8}  divergence",
            "line", "tokens", "llama_cpp", "vllm", "openai", "deepseek", "anthropic", "limit"
        )?;
    }
    audit_reader(reader, &args.file, &mut auditor, |event| match event {
        Event::Request(r) => {
            if args.json {
                let sep = if std::mem::take(&mut first) { "" } else { "," };
                let json = serde_json::to_string(r).map_err(std::io::Error::other)?;
                bar.suspend(|| write!(out, "{sep}\n{json}"))
            } else if args.summary_only {
                Ok(())
            } else {
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
                        divergence_text(r)
                    )
                })
            }
        }
        Event::Skipped(e) => {
            if skipped.len() < 100 {
                skipped.push((e.line, e.problem.to_string()));
            }
            bar.suspend(|| writeln!(err, "{e}"))
        }
    })?;
    bar.finish_and_clear();
    let summary = auditor.summary();
    if args.json {
        let skipped: Vec<serde_json::Value> = skipped
            .into_iter()
            .map(|(line, error)| serde_json::json!({"line": line, "error": error}))
            .collect();
        writeln!(
            out,
            "\n],\"skipped\":{},\"summary\":{}}}",
            serde_json::to_string(&skipped)?,
            serde_json::to_string_pretty(&summary)?
        )?;
    } else {
        print_summary(&summary, args.backend, out)?;
    }
    Ok(0)
}
