//! Results as JSON lines (one per run), the resident memory of a process tree, and the
//! Markdown table made from a results file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::driver::{RunResult, percentile};

/// One line of a results file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A timed run at one rate.
    Load {
        /// The contender (`direct` is the upstream itself).
        label: String,
        /// Streamed (SSE) or whole replies.
        stream: bool,
        /// Requests per second asked for.
        rate: u32,
        /// Requests sent.
        sent: usize,
        /// Requests answered 2xx in full.
        ok: usize,
        /// The first failure, bounded.
        first_error: Option<String>,
        /// Total latency percentiles in microseconds: p50, p99.
        total_us: Option<(u64, u64)>,
        /// First-byte latency percentiles in microseconds: p50, p99.
        ttfb_us: Option<(u64, u64)>,
        /// Which repeat of the same run this is (0 for the first, and in older files).
        #[serde(default)]
        repeat: u32,
        /// The mean size of a session's first body, bytes (agents' bodies), or `None` for
        /// the synthetic ones.
        #[serde(default)]
        body_bytes: Option<usize>,
        /// What the contender's own `/metrics` said of its analysis over the run.
        #[serde(default)]
        analysis: Option<AnalysisFigures>,
    },
    /// Resident memory around opening idle sessions.
    Idle {
        /// The contender.
        label: String,
        /// Sessions opened (one request each).
        sessions: usize,
        /// Sessions opened before memory was first read (not counted).
        #[serde(default)]
        warm_up: usize,
        /// Requests answered 2xx.
        ok: usize,
        /// The first failure, bounded.
        first_error: Option<String>,
        /// VmRSS of the process tree before, KiB.
        rss_before_kib: u64,
        /// VmRSS of the process tree after, KiB.
        rss_after_kib: u64,
        /// The mean size of a session's body, bytes (agents' bodies), or `None`.
        #[serde(default)]
        body_bytes: Option<usize>,
        /// What the contender's own `/metrics` said of its analysis over the run.
        #[serde(default)]
        analysis: Option<AnalysisFigures>,
    },
    /// A contender that was not measured, and why.
    Skipped {
        /// The contender.
        label: String,
        /// Why (the error that stopped it, bounded).
        reason: String,
    },
}

/// The analysis a proxy reports in `/metrics` (`cacheline proxy`'s), over one run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct AnalysisFigures {
    /// Exchanges analysed (`cacheline_proxy_requests_total`, summed over its series).
    pub analysed: u64,
    /// Exchanges forwarded but not analysed: the queue or the memory budget was full.
    pub dropped: u64,
    /// CPU time of the analysis thread (`cacheline_proxy_analysis_cpu_seconds_total`).
    pub cpu_seconds: f64,
}

impl AnalysisFigures {
    /// The figures between two readings of `/metrics` ([`crate::proxy_bench::driver::metrics`]).
    pub fn between(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> Self {
        let delta = |name: &str| {
            after.get(name).copied().unwrap_or(0.0) - before.get(name).copied().unwrap_or(0.0)
        };
        Self {
            analysed: delta("cacheline_proxy_requests_total").max(0.0) as u64,
            dropped: delta("cacheline_proxy_analysis_dropped_total").max(0.0) as u64,
            cpu_seconds: delta("cacheline_proxy_analysis_cpu_seconds_total").max(0.0),
        }
    }

    /// CPU per analysed exchange, milliseconds.
    pub fn cpu_ms_per_request(&self) -> Option<f64> {
        (self.analysed > 0).then(|| self.cpu_seconds * 1000.0 / self.analysed as f64)
    }
}

impl Record {
    /// The record of a timed run.
    pub fn load(label: &str, stream: bool, rate: u32, result: &RunResult) -> Self {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let mut total: Vec<Duration> = result.samples.iter().map(|s| s.total).collect();
        let mut ttfb: Vec<Duration> = result.samples.iter().map(|s| s.ttfb).collect();
        let pair = |v: &mut [Duration]| Some((us(percentile(v, 0.5)?), us(percentile(v, 0.99)?)));
        Record::Load {
            label: label.to_owned(),
            stream,
            rate,
            sent: result.samples.len() + result.errors,
            ok: result.samples.len(),
            first_error: result.first_error.clone(),
            total_us: pair(&mut total),
            ttfb_us: pair(&mut ttfb),
            repeat: 0,
            body_bytes: None,
            analysis: None,
        }
    }
}

/// What reading a process tree's memory failed on.
#[derive(Debug, thiserror::Error)]
pub enum RssError {
    /// `/proc/PID/status` could not be read.
    #[error("reading /proc/{pid}/status: {source}")]
    Read {
        /// The process.
        pid: u32,
        /// The cause.
        source: std::io::Error,
    },
    /// It had no `VmRSS:` line (a zombie, or not Linux).
    #[error("/proc/{pid}/status has no VmRSS line")]
    NoRss {
        /// The process.
        pid: u32,
    },
}

/// VmRSS in KiB of `pid` plus all its descendants (a proxy that runs workers counts them all).
/// Children are found through `/proc/*/stat` parent ids; at most 256 processes are summed.
pub fn tree_rss_kib(pid: u32) -> Result<u64, RssError> {
    let mut parents: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`: comm may hold spaces and parentheses; split after the last ')'.
            let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
                continue;
            };
            if let Some(ppid) = rest
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
            {
                parents.entry(ppid).or_default().push(child);
            }
        }
    }
    let mut total = rss_kib(pid)?;
    let mut queue: Vec<u32> = parents.get(&pid).cloned().unwrap_or_default();
    let mut seen = 1;
    while let Some(child) = queue.pop() {
        seen += 1;
        if seen > 256 {
            break;
        }
        // A child that exited meanwhile counts nothing.
        total += rss_kib(child).unwrap_or(0);
        queue.extend(parents.get(&child).cloned().unwrap_or_default());
    }
    Ok(total)
}

/// VmRSS of one process, KiB.
pub fn rss_kib(pid: u32) -> Result<u64, RssError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|source| RssError::Read { pid, source })?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or(RssError::NoRss { pid })
}

/// The median of `values` (sorted here), and its range when there is more than one.
fn spread(values: &mut [f64], signed: bool) -> Option<(f64, String)> {
    values.sort_by(f64::total_cmp);
    let median = *values.get(values.len() / 2)?;
    let f = |v: f64| {
        if signed {
            format!("{v:+.3}")
        } else {
            format!("{v:.3}")
        }
    };
    let text = match (values.first(), values.last()) {
        (Some(lo), Some(hi)) if values.len() > 1 => {
            format!("{} ({}…{})", f(median), f(*lo), f(*hi))
        }
        _ => f(median),
    };
    Some((median, text))
}

/// One run of a (contender, mode, rate), as the table reads it.
struct Run<'a> {
    repeat: u32,
    sent: usize,
    ok: usize,
    first_error: Option<&'a str>,
    total: Option<(u64, u64)>,
    ttfb: Option<(u64, u64)>,
    body_bytes: Option<usize>,
    analysis: Option<AnalysisFigures>,
}

type RunKey<'a> = (&'a str, bool, u32);

/// One repeat's percentiles beside the direct run's of the same repeat, microseconds:
/// (total p50, p99), direct (total p50, p99), (first byte p50, p99), direct (first byte
/// p50, p99).
type Paired = ((u64, u64), (u64, u64), (u64, u64), (u64, u64));

/// The goal of analysis CPU per request, for a 78 KB body (issue 34).
pub const ANALYSIS_GOAL_MS_PER_78KB: f64 = 0.4;

/// The Markdown tables of a results file's records: latency (absolute and added over `direct`
/// in the same file and repeat; with repeats, the median and the range over them), the
/// analysis' CPU, idle-session memory, then whether the targets were met.
pub fn markdown(records: &[Record]) -> String {
    let mut out = String::new();
    let mut labels: Vec<&str> = Vec::new();
    let mut groups: Vec<(RunKey<'_>, Vec<Run<'_>>)> = Vec::new();
    for r in records {
        let label = match r {
            Record::Load { label, .. }
            | Record::Idle { label, .. }
            | Record::Skipped { label, .. } => label.as_str(),
        };
        if !labels.contains(&label) {
            labels.push(label);
        }
        if let Record::Load {
            label,
            stream,
            rate,
            sent,
            ok,
            first_error,
            total_us,
            ttfb_us,
            repeat,
            body_bytes,
            analysis,
        } = r
        {
            let key = (label.as_str(), *stream, *rate);
            let run = Run {
                repeat: *repeat,
                sent: *sent,
                ok: *ok,
                first_error: first_error.as_deref(),
                total: *total_us,
                ttfb: *ttfb_us,
                body_bytes: *body_bytes,
                analysis: *analysis,
            };
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, runs)) => runs.push(run),
                None => groups.push((key, vec![run])),
            }
        }
    }
    let direct = |stream: bool, rate: u32, repeat: u32| {
        groups
            .iter()
            .find(|((l, s, q), _)| *l == "direct" && *s == stream && *q == rate)
            .and_then(|(_, runs)| runs.iter().find(|r| r.repeat == repeat))
            .and_then(|r| Some((r.total?, r.ttfb?)))
    };
    let _ = writeln!(
        out,
        "Latency in ms. *added* = the contender's percentile minus the direct run's at the same rate, mode and repeat (run back to back). With several repeats, each cell is the median over them and (in brackets) their range.\n"
    );
    let _ = writeln!(
        out,
        "| contender | reply | rate/s | ok/sent | total p50 | total p99 | first byte p50 | first byte p99 | added p50 | added p99 | added first byte p50 | added first byte p99 |"
    );
    let _ = writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut worst_p99: BTreeMap<&str, f64> = BTreeMap::new();
    let mut worst_ttfb: BTreeMap<&str, f64> = BTreeMap::new();
    for label in &labels {
        for ((l, stream, rate), runs) in groups.iter().filter(|((l, _, _), _)| l == label) {
            let mode = if *stream { "stream" } else { "whole" };
            let (ok, sent) = runs.iter().fold((0, 0), |(o, s), r| (o + r.ok, s + r.sent));
            let mut cells = vec![
                l.to_string(),
                mode.into(),
                rate.to_string(),
                format!("{ok}/{sent}"),
            ];
            let measured: Vec<&Run<'_>> = runs
                .iter()
                .filter(|r| r.total.is_some() && r.ttfb.is_some())
                .collect();
            if measured.is_empty() {
                cells.extend(std::iter::repeat_n("not measured".to_string(), 8));
            } else {
                let column = |pick: &dyn Fn(&Run<'_>) -> Option<u64>| {
                    let mut v: Vec<f64> = measured
                        .iter()
                        .filter_map(|r| pick(r))
                        .map(|us| us as f64 / 1000.0)
                        .collect();
                    spread(&mut v, false).map_or("—".to_string(), |(_, t)| t)
                };
                cells.push(column(&|r| r.total.map(|t| t.0)));
                cells.push(column(&|r| r.total.map(|t| t.1)));
                cells.push(column(&|r| r.ttfb.map(|t| t.0)));
                cells.push(column(&|r| r.ttfb.map(|t| t.1)));
                if *l == "direct" {
                    cells.extend(std::iter::repeat_n("—".to_string(), 4));
                } else {
                    // Each repeat against the direct run of the same repeat.
                    let pairs: Vec<Paired> = measured
                        .iter()
                        .filter_map(|r| {
                            let (dt, df) = direct(*stream, *rate, r.repeat)?;
                            Some((r.total?, dt, r.ttfb?, df))
                        })
                        .collect();
                    let added = |pick: &dyn Fn(&Paired) -> f64| {
                        let mut v: Vec<f64> = pairs.iter().map(pick).collect();
                        spread(&mut v, true)
                    };
                    let ms_of = |a: u64, b: u64| (a as f64 - b as f64) / 1000.0;
                    let p50 = added(&|(t, dt, _, _)| ms_of(t.0, dt.0));
                    let p99 = added(&|(t, dt, _, _)| ms_of(t.1, dt.1));
                    let f50 = added(&|(_, _, f, df)| ms_of(f.0, df.0));
                    let f99 = added(&|(_, _, f, df)| ms_of(f.1, df.1));
                    for cell in [&p50, &p99, &f50, &f99] {
                        cells.push(cell.as_ref().map_or("—".to_string(), |(_, t)| t.clone()));
                    }
                    if let Some((m, _)) = p99 {
                        let w = worst_p99.entry(label).or_insert(f64::MIN);
                        *w = w.max(m);
                    }
                    if let Some((m, _)) = f99 {
                        let w = worst_ttfb.entry(label).or_insert(f64::MIN);
                        *w = w.max(m);
                    }
                }
            }
            let _ = writeln!(out, "| {} |", cells.join(" | "));
            if let Some(e) = runs
                .iter()
                .filter(|r| r.ok < r.sent)
                .find_map(|r| r.first_error)
            {
                let _ = writeln!(out, "| | first error: {e} | | | | | | | | | | |");
            }
        }
        for r in records {
            if let Record::Skipped { label: l, reason } = r
                && l == label
            {
                let _ = writeln!(
                    out,
                    "| {label} | — | — | — | not measured: {reason} | | | | | | | |"
                );
            }
        }
    }
    if groups
        .iter()
        .any(|(_, runs)| runs.iter().any(|r| r.analysis.is_some()))
    {
        let _ = writeln!(
            out,
            "\nThe analysis, as the proxy's `/metrics` counts it over each run (CPU time of its analysis thread, apart from the forwarding).\n"
        );
        let _ = writeln!(
            out,
            "| contender | reply | rate/s | first body (bytes) | analysed | dropped | analysis CPU per request (ms) |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
        for ((l, stream, rate), runs) in &groups {
            let with: Vec<(&Run<'_>, AnalysisFigures)> =
                runs.iter().filter_map(|r| Some((r, r.analysis?))).collect();
            if with.is_empty() {
                continue;
            }
            let analysed: u64 = with.iter().map(|(_, a)| a.analysed).sum();
            let dropped: u64 = with.iter().map(|(_, a)| a.dropped).sum();
            let mut cpu: Vec<f64> = with
                .iter()
                .filter_map(|(_, a)| a.cpu_ms_per_request())
                .collect();
            let body = with
                .iter()
                .find_map(|(r, _)| r.body_bytes)
                .map_or("synthetic".to_string(), |b| b.to_string());
            let _ = writeln!(
                out,
                "| {l} | {} | {rate} | {body} | {analysed} | {dropped} | {} |",
                if *stream { "stream" } else { "whole" },
                spread(&mut cpu, false).map_or("—".to_string(), |(_, t)| t)
            );
        }
    }
    let _ = writeln!(
        out,
        "\nIdle sessions: resident memory (VmRSS of the process and its children).\n"
    );
    let _ = writeln!(
        out,
        "| contender | sessions (ok) | after a warm-up of | body (bytes) | RSS before (KiB) | RSS after (KiB) | bytes per idle session | analysed / dropped | analysis CPU per request (ms) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut per_session: BTreeMap<&str, f64> = BTreeMap::new();
    let mut cpu_per_78kb: BTreeMap<&str, f64> = BTreeMap::new();
    for r in records {
        match r {
            Record::Idle {
                label,
                sessions,
                warm_up,
                ok,
                first_error,
                rss_before_kib,
                rss_after_kib,
                body_bytes,
                analysis,
            } => {
                let bytes = (*rss_after_kib as f64 - *rss_before_kib as f64) * 1024.0
                    / (*sessions).max(1) as f64;
                per_session.insert(label, bytes);
                let body = body_bytes.map_or("synthetic".to_string(), |b| b.to_string());
                let (counted, cpu) = match analysis {
                    Some(a) => (
                        format!("{} / {}", a.analysed, a.dropped),
                        a.cpu_ms_per_request()
                            .map_or("—".to_string(), |c| format!("{c:.3}")),
                    ),
                    None => ("—".to_string(), "—".to_string()),
                };
                if let (Some(a), Some(b)) = (analysis, body_bytes)
                    && let Some(c) = a.cpu_ms_per_request()
                    && *b > 0
                {
                    cpu_per_78kb.insert(label, c * 78_000.0 / *b as f64);
                }
                let _ = writeln!(
                    out,
                    "| {label} | {sessions} ({ok}) | {warm_up} | {body} | {rss_before_kib} | {rss_after_kib} | {bytes:.0} | {counted} | {cpu} |"
                );
                if ok < sessions
                    && let Some(e) = first_error
                {
                    let _ = writeln!(out, "| | first error: {e} | | | | | | | |");
                }
            }
            Record::Skipped { label, reason } => {
                let _ = writeln!(out, "| {label} | not measured: {reason} | | | | | | |");
            }
            _ => {}
        }
    }
    let _ = writeln!(
        out,
        "\nTargets (issues 24 and 34): p99 added ≤ 1 ms, first byte p99 added ≤ 0.2 ms (the median over repeats, worst over the rates and modes above), ≤ 4 KiB per idle session, analysis CPU ≤ {ANALYSIS_GOAL_MS_PER_78KB} ms per 78 KB request (the idle run's CPU per request scaled to 78,000 bytes of body).\n"
    );
    let _ = writeln!(
        out,
        "| contender | worst p99 added (ms) | worst first-byte p99 added (ms) | bytes per idle session | analysis CPU per 78 KB (ms) | targets met |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---|");
    for label in labels.iter().filter(|l| **l != "direct") {
        let (Some(p99), Some(fb)) = (worst_p99.get(label), worst_ttfb.get(label)) else {
            let _ = writeln!(
                out,
                "| {label} | not measured | not measured | not measured | not measured | not measured |"
            );
            continue;
        };
        let mem = per_session.get(label);
        let cpu = cpu_per_78kb.get(label);
        let met = *p99 <= 1.0
            && *fb <= 0.2
            && mem.is_some_and(|b| *b <= 4096.0)
            && cpu.is_none_or(|c| *c <= ANALYSIS_GOAL_MS_PER_78KB);
        let mem = mem.map_or("not measured".to_string(), |b| format!("{b:.0}"));
        let cpu = cpu.map_or("—".to_string(), |c| format!("{c:.3}"));
        let _ = writeln!(
            out,
            "| {label} | {p99:+.3} | {fb:+.3} | {mem} | {cpu} | {} |",
            if met { "yes" } else { "no" }
        );
    }
    out
}
