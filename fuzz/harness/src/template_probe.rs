//! The `template_probe` target: the whole chat-template probe on arbitrary template text.
//!
//! Templates come from model files users download, so the probe must survive any text:
//! no panic (minijinja's panics are caught by `prompt-templates` and reported as an error
//! starting with "the template engine panicked"; here that is a bug too), no abort, bounded
//! time and memory (libFuzzer's `-timeout` and `-rss_limit_mb`), and a report of bounded size.

use prompt_template_probe::{HeadSystem, MidSystem, ScenarioOutcome, probe};

const PANICKED: &str = "the template engine panicked";

/// The most a report may print: its messages are bounded (engine details and
/// `raise_exception` messages at 2 048 characters, excerpts by `prompt-core`).
const REPORT_LIMIT: usize = 256 << 10;

/// Probes `data` (as UTF-8, invalid sequences replaced) and checks the report.
pub fn template_probe(data: &[u8]) {
    let source = String::from_utf8_lossy(data);
    let report = probe(&source);

    let panicked = |message: &str| message.starts_with(PANICKED);
    if let MidSystem::RenderError { message } = &report.mid_system {
        assert!(!panicked(message), "mid_system: {message}");
    }
    if let HeadSystem::RenderError { message } = &report.head_system {
        assert!(!panicked(message), "head_system: {message}");
    }
    for scenario in &report.scenarios {
        if let ScenarioOutcome::NotRendered { error } = &scenario.outcome {
            assert!(!panicked(error), "scenario {}: {error}", scenario.name);
        }
    }
    for attempt in &report.attempts {
        if let Some(failure) = &attempt.failure {
            // "turn N: <error>"; a template's own message reads `raises "..."`.
            let error = failure
                .split_once(": ")
                .map_or(failure.as_str(), |(_, e)| e);
            assert!(!panicked(error), "attempt: {failure}");
        }
    }

    // A chosen style is one that was tried and worked; a refusal means none did.
    match report.delivery_style() {
        Some(style) => assert!(report.attempts.iter().any(|a| a.failure.is_none()
            && a.updates == style.role.as_str()
            && a.prefix == style.prefix.as_str())),
        None => assert!(report.attempts.iter().all(|a| a.failure.is_some())),
    }

    let text = report.to_string();
    assert!(
        text.len() <= REPORT_LIMIT,
        "the report prints {} bytes",
        text.len()
    );
    let json = serde_json::to_string(&report.to_json());
    assert!(json.is_ok_and(|j| j.len() <= 2 * REPORT_LIMIT));
}
