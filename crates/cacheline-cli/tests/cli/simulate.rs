//! `simulate`: the scripted session in tokens under each backend's rules.

use std::sync::OnceLock;

use serde_json::Value;

use crate::cacheline;

/// `cacheline simulate --json`, run once for the whole file.
fn simulate_json() -> &'static Value {
    static REPORT: OnceLock<Value> = OnceLock::new();
    REPORT.get_or_init(|| {
        let (code, out, err) = cacheline(&["simulate", "--json"]);
        assert_eq!(code, 0, "{err}");
        assert!(err.is_empty(), "nothing on stderr when piped: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    })
}

fn figure(strategy: &str, backend: &str, key: &str) -> f64 {
    simulate_json()["strategies"][strategy][backend][key]
        .as_f64()
        .unwrap_or_else(|| panic!("strategies.{strategy}.{backend}.{key} missing"))
}

const STRATEGIES: [&str; 3] = ["replace_at_head", "append_system", "cacheline"];
use super::BACKENDS;

#[test]
fn simulate_json_has_every_strategy_and_backend_with_shares_in_0_1() {
    for s in STRATEGIES {
        for b in BACKENDS {
            for key in ["cached_share", "limit_share"] {
                let x = figure(s, b, key);
                assert!((0.0..=1.0 + 1e-9).contains(&x), "{s}.{b}.{key} = {x}");
            }
        }
        assert!((figure(s, "limit", "limit_share") - 1.0).abs() < 1e-9);
    }
    assert_eq!(simulate_json()["turns"], 40);
    assert_eq!(simulate_json()["tokenizer"], "o200k_base");
}

#[test]
fn cacheline_reaches_99_5_pct_of_the_limit_under_llama_cpp_and_99_pct_under_openai() {
    let llama = figure("cacheline", "llama_cpp", "limit_share");
    let openai = figure("cacheline", "openai", "limit_share");
    assert!(llama >= 0.995, "llama.cpp: {llama}");
    assert!(openai >= 0.99, "openai: {openai}");
    // The ephemeral tail is legitimately not reusable: the limit itself is below 100%.
    let limit = figure("cacheline", "limit", "cached_share");
    assert!(limit > 0.85 && limit < 1.0, "{limit}");
}

#[test]
fn replace_at_head_and_append_system_fall_short_of_cacheline() {
    for b in ["llama_cpp", "vllm", "openai", "deepseek", "anthropic"] {
        let head = figure("replace_at_head", b, "cached_share");
        let ours = figure("cacheline", b, "cached_share");
        // Tool calls are continuations: within a turn replace-at-head keeps message 0 and
        // reuses its history, so it loses "only" every turn's history.
        assert!(
            head + 0.2 < ours,
            "{b}: replace_at_head {head} vs cacheline {ours}"
        );
        // Appending the whole system text keeps the share high but sends far more tokens.
        let append_cost = figure("append_system", b, "cost_vs_cacheline");
        assert!(append_cost > 2.0, "{b}: append_system costs {append_cost}x");
        assert!(
            figure("replace_at_head", b, "cost_vs_cacheline") > 2.0,
            "{b}"
        );
        assert!((figure("cacheline", b, "cost_vs_cacheline") - 1.0).abs() < 1e-9);
    }
    // Rewriting the head every turn leaves no breakpoint to hit from one turn to the next
    // (only a turn's continuations hit the breakpoint its first request wrote), and writes
    // cost 1.25x.
    assert!(
        figure("replace_at_head", "anthropic", "cached_share") + 0.3
            < figure("cacheline", "anthropic", "cached_share")
    );
    assert!(
        figure("replace_at_head", "anthropic", "relative_cost")
            > 2.0 * figure("cacheline", "anthropic", "relative_cost")
    );
    let tokens = |s: &str| {
        simulate_json()["strategies"][s]["tokens"]
            .as_f64()
            .unwrap_or(0.0)
    };
    assert!(tokens("append_system") > 3.0 * tokens("cacheline"));
}

#[test]
fn simulate_table_names_every_strategy_and_backend() {
    let (code, out, err) = cacheline(&["simulate", "--turns", "6"]);
    assert_eq!(code, 0, "{err}");
    for name in STRATEGIES.iter().chain(BACKENDS.iter()) {
        assert!(out.contains(name), "{name} missing:\n{out}");
    }
    assert!(out.contains("6 turns"), "{out}");
}
