//! The import's report: sessions, and their sums per agent, project, day, cause and moment;
//! as text, as JSON ([`Report`] serialises to the `--json` contract) and as a page
//! ([`crate::html`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::analysis::{Moment, RequestRow, SessionReport};
use crate::store::Skips;

/// Sums over some requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Sessions.
    pub sessions: u64,
    /// Requests.
    pub requests: u64,
    /// Requests whose verdict is the audit's (rebuilt from the store).
    pub exact: u64,
    /// Requests that lost cache (a cause other than `cold_start`, or tokens lost).
    pub breaks: u64,
    /// Whole prompts.
    pub input_tokens: u64,
    /// Cache reads.
    pub cache_read_tokens: u64,
    /// Cache writes.
    pub cache_write_tokens: u64,
    /// Output.
    pub output_tokens: u64,
    /// Tokens lost to the cache.
    pub tokens_lost: u64,
    /// Prompt cost, USD (models of known price).
    pub cost: f64,
    /// Lost to the cache, USD.
    pub lost_cost: f64,
    /// Prompt cost in uncached-input-token units (every model).
    pub cost_units: f64,
    /// Lost, in those units.
    pub lost_units: f64,
}

impl Totals {
    fn add(&mut self, r: &RequestRow) {
        self.requests += 1;
        self.exact += u64::from(r.exact);
        self.breaks += u64::from(is_break(r));
        self.input_tokens = self.input_tokens.saturating_add(r.input_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(r.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(r.cache_write_tokens);
        self.output_tokens = self.output_tokens.saturating_add(r.output_tokens);
        self.tokens_lost = self.tokens_lost.saturating_add(r.tokens_lost);
        self.cost += r.cost;
        self.lost_cost += r.lost_cost;
        self.cost_units += r.cost_units;
        self.lost_units += r.lost_units;
    }

    /// The share of the prompt cost lost to the cache (units: every model counts).
    pub fn lost_share(&self) -> f64 {
        if self.cost_units > 0.0 {
            self.lost_units / self.cost_units
        } else {
            0.0
        }
    }
}

/// Whether a request lost cache: a cause other than `cold_start`, or tokens lost.
pub fn is_break(r: &RequestRow) -> bool {
    r.tokens_lost > 0 || r.cause.is_some_and(|c| c != "cold_start")
}

/// Sums for one name (an agent, a project, a day, a cause, a moment).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// The name.
    pub name: String,
    /// The sums.
    #[serde(flatten)]
    pub totals: Totals,
}

/// The whole import.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// Every session, oldest first.
    pub sessions: Vec<SessionReport>,
    /// Sums over everything.
    pub totals: Totals,
    /// Per agent (`claude-code 2.1.332`: agent and version).
    pub agents: Vec<Group>,
    /// Per project.
    pub projects: Vec<Group>,
    /// Per day (UTC).
    pub days: Vec<Group>,
    /// Per cause, over the requests that lost cache.
    pub causes: Vec<Group>,
    /// Per moment ([`Moment`]), over the requests that lost cache.
    pub moments: Vec<Group>,
    /// What was skipped.
    pub skipped: Skips,
    /// Files read, and their bytes.
    pub files: u64,
    /// Bytes read.
    pub bytes: u64,
}

fn grouped(map: BTreeMap<String, Totals>) -> Vec<Group> {
    let mut v: Vec<Group> = map
        .into_iter()
        .map(|(name, totals)| Group { name, totals })
        .collect();
    v.sort_by(|a, b| {
        b.totals
            .lost_units
            .total_cmp(&a.totals.lost_units)
            .then(b.totals.cost_units.total_cmp(&a.totals.cost_units))
            .then(a.name.cmp(&b.name))
    });
    v
}

impl Report {
    /// Sums the sessions into the groups (call once all sessions are in).
    pub fn finish(&mut self) {
        self.sessions.sort_by(|a, b| {
            let t = |s: &SessionReport| s.requests.first().and_then(|r| r.secs).unwrap_or(0.0);
            t(a).total_cmp(&t(b))
                .then(a.agent.cmp(&b.agent))
                .then(a.session.cmp(&b.session))
        });
        let (mut agents, mut projects, mut days, mut causes, mut moments) = (
            BTreeMap::<String, Totals>::new(),
            BTreeMap::<String, Totals>::new(),
            BTreeMap::<String, Totals>::new(),
            BTreeMap::<String, Totals>::new(),
            BTreeMap::<String, Totals>::new(),
        );
        let mut totals = Totals::default();
        for s in &self.sessions {
            let agent = if s.version.is_empty() {
                s.agent.name().to_owned()
            } else {
                format!("{} {}", s.agent, s.version)
            };
            totals.sessions += 1;
            agents.entry(agent.clone()).or_default().sessions += 1;
            projects.entry(s.project.clone()).or_default().sessions += 1;
            for r in &s.requests {
                totals.add(r);
                agents.entry(agent.clone()).or_default().add(r);
                projects.entry(s.project.clone()).or_default().add(r);
                let day = r
                    .secs
                    .map(crate::time::day)
                    .unwrap_or_else(|| "unknown".into());
                days.entry(day).or_default().add(r);
                if is_break(r) {
                    causes
                        .entry(r.cause.unwrap_or("unknown").to_owned())
                        .or_default()
                        .add(r);
                    moments.entry(r.at.name().to_owned()).or_default().add(r);
                }
            }
        }
        self.totals = totals;
        self.agents = grouped(agents);
        self.projects = grouped(projects);
        let mut days = grouped(days);
        days.sort_by(|a, b| a.name.cmp(&b.name));
        self.days = days;
        self.causes = grouped(causes);
        self.moments = grouped(moments);
    }

    /// The text report: totals, the causes and moments of the loss, the top `top` sessions,
    /// the days and projects, and what was skipped.
    pub fn text(&self, top: usize) -> String {
        let mut out = String::new();
        let t = &self.totals;
        let _ = writeln!(
            out,
            "cacheline import: {} session(s), {} request(s) from {} file(s) ({}); {} exact (rebuilt), {} inferred from usage",
            t.sessions,
            t.requests,
            self.files,
            bytes(self.bytes),
            t.exact,
            t.requests - t.exact
        );
        let _ = writeln!(
            out,
            "tokens: prompts {} (cache read {}, {}; cache write {}, {}), output {}",
            thousands(t.input_tokens),
            thousands(t.cache_read_tokens),
            pct(t.cache_read_tokens as f64, t.input_tokens as f64),
            thousands(t.cache_write_tokens),
            pct(t.cache_write_tokens as f64, t.input_tokens as f64),
            thousands(t.output_tokens)
        );
        let _ = writeln!(
            out,
            "cost of the prompts: {} ({:.0} units of an uncached input token); lost to the cache: {} ({:.0} units, {} of the cost), {} request(s) broke it",
            usd(t.cost),
            t.cost_units,
            usd(t.lost_cost),
            t.lost_units,
            pct(t.lost_units, t.cost_units),
            t.breaks
        );
        if !self.causes.is_empty() {
            let _ = writeln!(out, "lost by cause:");
            for g in &self.causes {
                let _ = writeln!(
                    out,
                    "  {:<24} {:>6} request(s) {:>12} tokens {:>10} {:>6} of the loss",
                    g.name,
                    g.totals.requests,
                    thousands(g.totals.tokens_lost),
                    usd(g.totals.lost_cost),
                    pct(g.totals.lost_units, t.lost_units)
                );
            }
            let _ = writeln!(out, "lost by moment:");
            for g in &self.moments {
                let _ = writeln!(
                    out,
                    "  {:<24} {:>6} request(s) {:>12} tokens {:>10} {:>6} of the loss",
                    match g.name.as_str() {
                        "resume" => "at a resume",
                        "expiry" => "after a gap (expiry)",
                        "model_switch" => "at a model switch",
                        "compaction" => "after a compaction",
                        "prompt" => "at a new prompt",
                        "turn" => "within a turn",
                        other => other,
                    },
                    g.totals.requests,
                    thousands(g.totals.tokens_lost),
                    usd(g.totals.lost_cost),
                    pct(g.totals.lost_units, t.lost_units)
                );
            }
        }
        let mut ranked: Vec<&SessionReport> = self.sessions.iter().collect();
        ranked.sort_by(|a, b| {
            b.lost_units
                .total_cmp(&a.lost_units)
                .then(a.session.cmp(&b.session))
        });
        if !ranked.is_empty() {
            let _ = writeln!(out, "top sessions (by cost lost):");
        }
        for (i, s) in ranked.iter().take(top).enumerate() {
            let breaks: Vec<String> = s
                .requests
                .iter()
                .filter(|r| is_break(r))
                .take(6)
                .map(|r| {
                    format!(
                        "#{} {}{}{}",
                        r.index,
                        r.cause.unwrap_or("unknown"),
                        if r.exact { "" } else { " (inferred)" },
                        r.writer
                            .as_ref()
                            .map(|w| format!(" — {w}"))
                            .unwrap_or_default()
                    )
                })
                .collect();
            let more = s
                .requests
                .iter()
                .filter(|r| is_break(r))
                .count()
                .saturating_sub(6);
            let _ = writeln!(
                out,
                "  {}. {} {} ({}) {} request(s), {} lost of {} ({}){}{}",
                i + 1,
                s.agent,
                s.session,
                s.project,
                s.requests.len(),
                usd(s.lost_cost),
                usd(s.cost),
                pct(s.lost_units, s.cost_units),
                if breaks.is_empty() {
                    String::new()
                } else {
                    format!("; breaks: {}", breaks.join(", "))
                },
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
        }
        for (title, groups) in [
            ("per day", &self.days),
            ("per project", &self.projects),
            ("per agent", &self.agents),
        ] {
            if groups.is_empty() {
                continue;
            }
            let _ = writeln!(out, "{title}:");
            for g in groups.iter().take(top.max(1) * 2) {
                let _ = writeln!(
                    out,
                    "  {:<40} {:>6} request(s) {:>14} prompt tokens {:>10} lost of {:>10} ({})",
                    g.name,
                    g.totals.requests,
                    thousands(g.totals.input_tokens),
                    usd(g.totals.lost_cost),
                    usd(g.totals.cost),
                    pct(g.totals.lost_units, g.totals.cost_units)
                );
            }
        }
        let s = &self.skipped;
        if s.malformed_total() > 0 {
            let per: Vec<String> = s
                .malformed
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect();
            let _ = writeln!(
                out,
                "skipped lines: {} ({})",
                s.malformed_total(),
                per.join(", ")
            );
            for l in s.lines.iter().take(5) {
                let _ = writeln!(out, "  {}: {}", l.origin, l.reason);
            }
        }
        if s.unknown_total() > 0 {
            for (k, names) in &s.unknown_records {
                let list: Vec<String> = names.iter().map(|(n, c)| format!("{n} {c}")).collect();
                let _ = writeln!(out, "unknown records, {k}: {}", list.join(", "));
            }
        }
        for (k, names) in &s.unknown_fields {
            let list: Vec<String> = names.iter().map(|(n, c)| format!("{n} {c}")).collect();
            let _ = writeln!(out, "unknown usage fields, {k}: {}", list.join(", "));
        }
        for src in &s.sources {
            let _ = writeln!(
                out,
                "not read: {}: {}",
                src.origin.path.display(),
                src.reason
            );
        }
        out
    }
}

/// `part / whole` as a percentage with one decimal, `-` when `whole` is 0.
pub(crate) fn pct(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.1}%", 100.0 * part / whole)
    } else {
        "-".to_owned()
    }
}

pub(crate) fn usd(x: f64) -> String {
    format!("${x:.4}")
}

pub(crate) use prompt_core::input::thousands;

fn bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64)
    } else if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else {
        format!("{n} B")
    }
}

/// Re-exported for the page.
pub(crate) fn moment_label(m: Moment) -> &'static str {
    match m {
        Moment::Start => "start",
        Moment::Resume => "resume",
        Moment::Compaction => "after compaction",
        Moment::ModelSwitch => "model switch",
        Moment::Expiry => "after expiry",
        Moment::Prompt => "new prompt",
        Moment::Turn => "within a turn",
    }
}
