//! `/metrics`: the proxy's counters in Prometheus' text exposition format 0.0.4.
//!
//! Written by hand rather than with `prometheus-client`: the format is a few fixed lines, the
//! label sets are closed or capped here (agent: six values; model: [`MAX_MODELS`]
//! then `other`; cause: the engine's closed kinds), and the proxy keeps its one lock per
//! analysed row instead of a registry of atomics on the hot path. The output is checked
//! with a real parser (the `prometheus-parse` crate) in the tests.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::Mutex;

use prompt_measure::report::RequestRow;

use crate::counts::{Counts, Totals};

pub use prompt_measure::report::{AGENTS, agent_label};

/// Distinct model labels kept; later models are counted as `other`.
pub const MAX_MODELS: usize = 32;

/// Upper bounds (seconds) of the added-latency histogram's buckets, fine from 50 µs to 10 ms.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.000_75, 0.001, 0.002, 0.003_5, 0.005, 0.007_5, 0.01,
    0.05,
];

#[derive(Default)]
struct Inner {
    series: BTreeMap<(&'static str, String, &'static str), Counts>,
    models: BTreeSet<String>,
    buckets: [u64; LATENCY_BUCKETS.len()],
    latency_sum: f64,
    latency_count: u64,
}

/// Counters by agent, model and cause, and the added-latency histogram.
#[derive(Default)]
pub(crate) struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    /// The longest model label, in bytes.
    const MODEL_BYTES: usize = 96;

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts one row.
    pub(crate) fn observe(&self, row: &RequestRow) {
        let labels = row.metric_labels();
        let mut inner = self.lock();
        let model = match labels.model {
            None => "unknown".to_owned(),
            Some(m) => {
                let m = &m[..m.floor_char_boundary(Self::MODEL_BYTES)];
                if inner.models.contains(m) {
                    m.to_owned()
                } else if inner.models.len() < MAX_MODELS {
                    inner.models.insert(m.to_owned());
                    m.to_owned()
                } else {
                    "other".to_owned()
                }
            }
        };
        inner
            .series
            .entry((labels.agent, model, labels.cause))
            .or_default()
            .add(row);
        let secs = row.added_latency.as_secs_f64();
        for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
            if secs <= *le {
                inner.buckets[i] = inner.buckets[i].saturating_add(1);
            }
        }
        inner.latency_sum += secs;
        inner.latency_count = inner.latency_count.saturating_add(1);
    }

    /// The exposition text, with the proxy-wide `totals`.
    pub(crate) fn render(&self, totals: &Totals, held: u64) -> String {
        let inner = self.lock();
        let mut out = String::with_capacity(4096);
        type Pick = fn(&Counts) -> u64;
        let families: [(&str, &str, Pick); 5] = [
            (
                "cacheline_proxy_requests_total",
                "Requests whose exchange reached the analysis, by agent (from user-agent), model and the verdict's cause (none: extends its predecessor, or not analysed).",
                |c| c.requests,
            ),
            (
                "cacheline_proxy_input_tokens_total",
                "Input tokens of those requests, by the audit's tokenizer (OTel GenAI: gen_ai.usage.input_tokens).",
                |c| c.input,
            ),
            (
                "cacheline_proxy_cached_tokens_total",
                "Input tokens the provider reported read from its cache.",
                |c| c.cached,
            ),
            (
                "cacheline_proxy_reprocessed_tokens_total",
                "Input tokens processed again that an append-only request would have reused.",
                |c| c.reprocessed,
            ),
            (
                "cacheline_proxy_expected_cached_tokens_total",
                "Input tokens the provider's caching rule says should have been read from its cache.",
                |c| c.expected_cached,
            ),
        ];
        for (name, help, pick) in families {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for ((agent, model, cause), c) in &inner.series {
                let _ = writeln!(
                    out,
                    "{name}{{agent=\"{agent}\",model=\"{}\",cause=\"{cause}\"}} {}",
                    escape_label(model),
                    pick(c)
                );
            }
        }
        let h = "cacheline_proxy_added_latency_seconds";
        let _ = writeln!(
            out,
            "# HELP {h} The proxy's own time on a request's path (before sending upstream and after the reply's head), not the upstream's."
        );
        let _ = writeln!(out, "# TYPE {h} histogram");
        for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{h}_bucket{{le=\"{le}\"}} {}", inner.buckets[i]);
        }
        let _ = writeln!(out, "{h}_bucket{{le=\"+Inf\"}} {}", inner.latency_count);
        let _ = writeln!(out, "{h}_sum {}", inner.latency_sum);
        let _ = writeln!(out, "{h}_count {}", inner.latency_count);
        drop(inner);
        let scalars: [(&str, &str, &str, u64); 9] = [
            (
                "cacheline_proxy_forwarded_total",
                "counter",
                "Requests forwarded upstream (analysed or not).",
                totals.forwarded,
            ),
            (
                "cacheline_proxy_analysis_dropped_total",
                "counter",
                "Exchanges forwarded but not analysed because the analysis queue or its memory budget was full.",
                totals.analysis_dropped,
            ),
            (
                "cacheline_proxy_analysis_over_budget_total",
                "counter",
                "Of those, the exchanges dropped because the analysis' memory budget was full.",
                totals.analysis_over_budget,
            ),
            (
                "cacheline_proxy_analysis_held_bytes",
                "gauge",
                "Bytes of body copies held for the analysis now, in flight and queued.",
                held,
            ),
            (
                "cacheline_proxy_log_write_failures_total",
                "counter",
                "Writes to the --log file that failed (nothing more is written after one).",
                totals.log_failures,
            ),
            (
                "cacheline_proxy_log_lines_not_written_total",
                "counter",
                "Exchanges the --log file has no line for, because a write failed.",
                totals.log_lines_not_written,
            ),
            (
                "cacheline_proxy_sessions_dropped_total",
                "counter",
                "Sessions dropped from the state, least recently used first.",
                totals.sessions_dropped,
            ),
            (
                "cacheline_proxy_not_analysed_total",
                "counter",
                "Requests not analysed: a body over the copy cap, or a copy that could not be read.",
                totals.not_analysed,
            ),
            (
                "cacheline_proxy_sessions",
                "gauge",
                "Sessions held now.",
                totals.sessions,
            ),
        ];
        for (name, kind, help, v) in scalars {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {v}");
        }
        let name = "cacheline_proxy_analysis_cpu_seconds_total";
        let _ = writeln!(
            out,
            "# HELP {name} CPU time the analysis thread spent on exchanges (apart from forwarding)."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name} {}", totals.analysis_cpu_micros as f64 / 1e6);
        out
    }
}

/// A label value escaped as the format requires (`\`, `"`, newline).
fn escape_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agents_map_to_the_six_agents() {
        assert_eq!(
            agent_label(Some("claude-cli/1.0.83 (external, cli)")),
            "claude-code"
        );
        assert_eq!(agent_label(Some("codex_cli_rs/0.20.0 (Debian)")), "codex");
        assert_eq!(
            agent_label(Some("GeminiCLI/0.1.5 (linux; x64)")),
            "gemini-cli"
        );
        assert_eq!(
            agent_label(Some("QwenCode/0.0.9 (linux; x64)")),
            "qwen-code"
        );
        assert_eq!(agent_label(Some("opencode/0.4.1")), "opencode");
        assert_eq!(agent_label(Some("curl/8.0")), "other");
        // The captured agents' own values, and agents the audit knows outside the closed set.
        assert_eq!(
            agent_label(Some("codex_exec/0.171.0 (Debian 12.0.0; x86_64)")),
            "codex"
        );
        assert_eq!(
            agent_label(Some("GeminiCLI-tui/0.61.0/gemini-2.5-flash (linux; x64)")),
            "gemini-cli"
        );
        assert_eq!(agent_label(Some("goose/1.0.18")), "other");
        assert_eq!(agent_label(None), "other");
    }

    #[test]
    fn model_labels_are_capped_then_other() {
        let m = Metrics::default();
        for i in 0..(MAX_MODELS + 8) {
            m.observe(&RequestRow {
                request: i as u64,
                line: Some(i as u64),
                session: "s".to_owned(),
                model: Some(format!("model-{i}\"\n")),
                status: 200,
                input: 1,
                new: 1,
                added_latency: std::time::Duration::from_micros(70),
                ..RequestRow::default()
            });
        }
        let text = m.render(&Totals::default(), 0);
        let requests: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("cacheline_proxy_requests_total{"))
            .collect();
        assert_eq!(requests.len(), MAX_MODELS + 1);
        assert!(text.contains("model=\"other\",cause=\"none\"} 8"), "{text}");
        assert!(text.contains("model=\"model-0\\\"\\n\""), "{text}");
        assert!(text.contains("cacheline_proxy_added_latency_seconds_bucket{le=\"0.0001\"} 40"));
        assert!(text.contains("cacheline_proxy_added_latency_seconds_bucket{le=\"0.00005\"} 0"));
    }

    #[test]
    fn a_hostile_model_label_is_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
