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
    },
    /// Resident memory around opening idle sessions.
    Idle {
        /// The contender.
        label: String,
        /// Sessions opened (one request each).
        sessions: usize,
        /// Requests answered 2xx.
        ok: usize,
        /// The first failure, bounded.
        first_error: Option<String>,
        /// VmRSS of the process tree before, KiB.
        rss_before_kib: u64,
        /// VmRSS of the process tree after, KiB.
        rss_after_kib: u64,
    },
    /// A contender that was not measured, and why.
    Skipped {
        /// The contender.
        label: String,
        /// Why (the error that stopped it, bounded).
        reason: String,
    },
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

fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

fn added(proxy: u64, direct: u64) -> String {
    format!("{:+.3}", (proxy as f64 - direct as f64) / 1000.0)
}

/// The Markdown tables of a results file's records: latency (absolute and added over `direct`
/// in the same file) and idle-session memory, then whether the targets were met.
pub fn markdown(records: &[Record]) -> String {
    let mut out = String::new();
    let mut labels: Vec<&str> = Vec::new();
    for r in records {
        let label = match r {
            Record::Load { label, .. }
            | Record::Idle { label, .. }
            | Record::Skipped { label, .. } => label.as_str(),
        };
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    let direct = |stream: bool, rate: u32| {
        records.iter().find_map(|r| match r {
            Record::Load {
                label,
                stream: s,
                rate: q,
                total_us: Some(t),
                ttfb_us: Some(f),
                ..
            } if label == "direct" && *s == stream && *q == rate => Some((*t, *f)),
            _ => None,
        })
    };
    let _ = writeln!(
        out,
        "Latency in ms. *added* = the contender's percentile minus the direct run's at the same rate and mode.\n"
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
        for r in records {
            match r {
                Record::Load {
                    label: l,
                    stream,
                    rate,
                    sent,
                    ok,
                    first_error,
                    total_us,
                    ttfb_us,
                } if l == label => {
                    let mode = if *stream { "stream" } else { "whole" };
                    let mut cells = vec![
                        label.to_string(),
                        mode.into(),
                        rate.to_string(),
                        format!("{ok}/{sent}"),
                    ];
                    match (total_us, ttfb_us) {
                        (Some(t), Some(f)) => {
                            cells.extend([ms(t.0), ms(t.1), ms(f.0), ms(f.1)]);
                            match direct(*stream, *rate) {
                                Some((dt, df)) if *label != "direct" => {
                                    cells.extend([
                                        added(t.0, dt.0),
                                        added(t.1, dt.1),
                                        added(f.0, df.0),
                                        added(f.1, df.1),
                                    ]);
                                    let p99 = (t.1 as f64 - dt.1 as f64) / 1000.0;
                                    let fb = (f.1 as f64 - df.1 as f64) / 1000.0;
                                    let w = worst_p99.entry(label).or_insert(f64::MIN);
                                    *w = w.max(p99);
                                    let w = worst_ttfb.entry(label).or_insert(f64::MIN);
                                    *w = w.max(fb);
                                }
                                _ => cells.extend(["—".into(), "—".into(), "—".into(), "—".into()]),
                            }
                        }
                        _ => cells.extend(std::iter::repeat_n("not measured".to_string(), 8)),
                    }
                    let _ = writeln!(out, "| {} |", cells.join(" | "));
                    if ok < sent
                        && let Some(e) = first_error
                    {
                        let _ = writeln!(out, "| | first error: {e} | | | | | | | | | | |");
                    }
                }
                Record::Skipped { label: l, reason } if l == label => {
                    let _ = writeln!(
                        out,
                        "| {label} | — | — | — | not measured: {reason} | | | | | | | |"
                    );
                }
                _ => {}
            }
        }
    }
    let _ = writeln!(
        out,
        "\nIdle sessions: resident memory (VmRSS of the process and its children).\n"
    );
    let _ = writeln!(
        out,
        "| contender | sessions (ok) | RSS before (KiB) | RSS after (KiB) | bytes per idle session |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    let mut per_session: BTreeMap<&str, f64> = BTreeMap::new();
    for r in records {
        match r {
            Record::Idle {
                label,
                sessions,
                ok,
                first_error,
                rss_before_kib,
                rss_after_kib,
            } => {
                let bytes = (*rss_after_kib as f64 - *rss_before_kib as f64) * 1024.0
                    / (*sessions).max(1) as f64;
                per_session.insert(label, bytes);
                let _ = writeln!(
                    out,
                    "| {label} | {sessions} ({ok}) | {rss_before_kib} | {rss_after_kib} | {bytes:.0} |"
                );
                if ok < sessions
                    && let Some(e) = first_error
                {
                    let _ = writeln!(out, "| | first error: {e} | | | |");
                }
            }
            Record::Skipped { label, reason } => {
                let _ = writeln!(out, "| {label} | not measured: {reason} | | | |");
            }
            _ => {}
        }
    }
    let _ = writeln!(
        out,
        "\nTargets (issue 24): p99 added ≤ 1 ms, first byte p99 added ≤ 0.2 ms, ≤ 4 KiB per idle session; worst case over the rates and modes above.\n"
    );
    let _ = writeln!(
        out,
        "| contender | worst p99 added (ms) | worst first-byte p99 added (ms) | bytes per idle session | targets met |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---|");
    for label in labels.iter().filter(|l| **l != "direct") {
        let (Some(p99), Some(fb)) = (worst_p99.get(label), worst_ttfb.get(label)) else {
            let _ = writeln!(
                out,
                "| {label} | not measured | not measured | not measured | not measured |"
            );
            continue;
        };
        let mem = per_session.get(label);
        let met = *p99 <= 1.0 && *fb <= 0.2 && mem.is_some_and(|b| *b <= 4096.0);
        let mem = mem.map_or("not measured".to_string(), |b| format!("{b:.0}"));
        let _ = writeln!(
            out,
            "| {label} | {p99:+.3} | {fb:+.3} | {mem} | {} |",
            if met { "yes" } else { "no" }
        );
    }
    out
}
