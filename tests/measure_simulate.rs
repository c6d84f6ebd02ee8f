//! The provider-rule simulator: each rule on hand-built token sequences, the property that
//! no rule serves more than the request or the physical limit, and `cacheline simulate` over
//! the scripted session under the three strategies.

use std::sync::OnceLock;

use prompt_core::check_prefix;
use prompt_registry::Registry;
use prompt_registry::cli::{DefaultConfig, run_with};
use prompt_registry::measure::{
    self, CacheSim, PriceTable, Prices, Rule, RuleOutcome, SimConfig, TokenizedRequest, Tokenizer,
};
use prompt_registry::reference::DEFAULT_AGENT_TOML;
use prompt_registry::scenario::{self, Strategy as Composition};
use proptest::prelude::*;
use serde_json::Value;

fn run(args: &[&str]) -> (u8, String, String) {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let default = DefaultConfig {
        name: "<built-in agent.toml>",
        text: DEFAULT_AGENT_TOML,
    };
    let argv = std::iter::once("cacheline").chain(args.iter().copied());
    let code = run_with(argv, &registry, Some(default), &mut out, &mut err);
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

/// `cacheline simulate --json`, run once for the whole file.
fn simulate_json() -> &'static Value {
    static REPORT: OnceLock<Value> = OnceLock::new();
    REPORT.get_or_init(|| {
        let (code, out, err) = run(&["simulate", "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    })
}

fn figure(strategy: &str, backend: &str, key: &str) -> f64 {
    simulate_json()["strategies"][strategy][backend][key]
        .as_f64()
        .unwrap_or_else(|| panic!("strategies.{strategy}.{backend}.{key} missing"))
}

const STRATEGIES: [&str; 3] = ["replace_at_head", "append_system", "cacheline"];
const BACKENDS: [&str; 6] = [
    "llama_cpp",
    "vllm",
    "openai",
    "deepseek",
    "anthropic",
    "limit",
];

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
        assert!(
            head + 0.3 < ours,
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
    // Rewriting the head every turn leaves no breakpoint to hit, and writes cost 1.25x.
    assert!(figure("replace_at_head", "anthropic", "cached_share") < 0.01);
    assert!(figure("replace_at_head", "anthropic", "relative_cost") > 1.0);
    let tokens = |s: &str| {
        simulate_json()["strategies"][s]["tokens"]
            .as_f64()
            .unwrap_or(0.0)
    };
    assert!(tokens("append_system") > 3.0 * tokens("cacheline"));
}

#[test]
fn simulate_table_names_every_strategy_and_backend() {
    let (code, out, err) = run(&["simulate", "--turns", "6"]);
    assert_eq!(code, 0, "{err}");
    for name in STRATEGIES.iter().chain(BACKENDS.iter()) {
        assert!(out.contains(name), "{name} missing:\n{out}");
    }
    assert!(out.contains("6 turns"), "{out}");
}

#[test]
fn the_cacheline_strategy_never_rewrites_a_sent_byte_and_the_baseline_does() {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let array = |messages: &[String]| format!("[{}]", messages.join(","));
    let requests =
        scenario::compose(Composition::Cacheline, &registry, 30).unwrap_or_else(|e| panic!("{e}"));
    let compactions: Vec<u64> = requests
        .iter()
        .map(|r| r.turn)
        .filter(|t| scenario::script(*t).compaction.is_some())
        .collect();
    assert_eq!(compactions, [10, 24]);
    for pair in requests.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert_eq!(
            a.messages[0], b.messages[0],
            "the prefix moved at turn {}",
            b.turn
        );
        let stable = a.breakpoints[1];
        let earlier = array(&a.messages[..stable]);
        // A turn that follows a compaction (10, 24) starts a new cache epoch.
        if scenario::script(b.turn).compaction.is_none() {
            assert!(
                check_prefix(earlier.as_bytes(), array(&b.messages).as_bytes()).is_prefix(),
                "turn {} rewrote bytes of turn {}",
                b.turn,
                a.turn
            );
        }
    }
    let head = scenario::compose(Composition::ReplaceAtHead, &registry, 5)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        head.windows(2)
            .all(|p| p[0].messages[0] != p[1].messages[0])
    );
}

/// One token per byte: the simulator takes any tokenizer.
struct Bytes;

impl Tokenizer for Bytes {
    fn name(&self) -> &str {
        "bytes"
    }
    fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }
}

#[test]
fn the_tokenizer_is_a_parameter() {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let report = measure::simulate(
        &registry,
        5,
        &Bytes,
        &PriceTable::default(),
        SimConfig::unbounded(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.tokenizer, "bytes");
    let requests =
        scenario::compose(Composition::Cacheline, &registry, 5).unwrap_or_else(|e| panic!("{e}"));
    let bytes: usize = requests
        .iter()
        .flat_map(|r| r.messages.iter().map(String::len))
        .sum();
    let cacheline = report
        .strategies
        .get(&Composition::Cacheline)
        .unwrap_or_else(|| panic!("no cacheline"));
    assert_eq!(cacheline.tokens, bytes as u64);
}

fn req(segments: &[(u32, usize)], breakpoints: &[usize]) -> TokenizedRequest {
    TokenizedRequest::from_token_segments(
        segments.iter().map(|&(t, n)| vec![t; n]).collect(),
        breakpoints.to_vec(),
    )
}

fn read(sim: &mut CacheSim, r: TokenizedRequest, rule: Rule) -> u64 {
    sim.observe(r).outcome(rule).read
}

#[test]
fn openai_rule_caches_nothing_below_1024_tokens_then_128_token_increments() {
    let mut sim = CacheSim::new(SimConfig::unbounded());
    sim.observe(req(&[(1, 1000), (2, 500)], &[]));
    // 1,000 shared tokens: below the minimum.
    assert_eq!(
        read(&mut sim, req(&[(1, 1000), (3, 500)], &[]), Rule::OpenAi),
        0
    );
    // 1,500 shared: 1,024 + 3 × 128.
    assert_eq!(
        read(
            &mut sim,
            req(&[(1, 1000), (2, 500), (4, 9)], &[]),
            Rule::OpenAi
        ),
        1408
    );
    // 1,151 shared: 1,024 + 0 × 128 (127 short of the next increment).
    let mut sim = CacheSim::new(SimConfig::unbounded());
    sim.observe(req(&[(1, 1151)], &[]));
    assert_eq!(
        read(&mut sim, req(&[(1, 1151), (2, 10)], &[]), Rule::OpenAi),
        1024
    );
}

#[test]
fn vllm_rule_serves_whole_16_token_blocks_and_never_the_last_token() {
    let mut sim = CacheSim::new(SimConfig::unbounded());
    sim.observe(req(&[(1, 100)], &[]));
    assert_eq!(
        read(&mut sim, req(&[(1, 100), (2, 50)], &[]), Rule::Vllm),
        96
    );
    // An identical 96-token request: at most 95 tokens may come from cache → 5 blocks.
    let mut sim = CacheSim::new(SimConfig::unbounded());
    sim.observe(req(&[(1, 96)], &[]));
    assert_eq!(read(&mut sim, req(&[(1, 96)], &[]), Rule::Vllm), 80);
    assert_eq!(read(&mut sim, req(&[(1, 96)], &[]), Rule::LlamaCpp), 96);
}

#[test]
fn deepseek_rule_serves_64_token_units() {
    let mut sim = CacheSim::new(SimConfig::unbounded());
    sim.observe(req(&[(1, 200)], &[]));
    assert_eq!(
        read(&mut sim, req(&[(1, 200), (2, 5)], &[]), Rule::DeepSeek),
        192
    );
    assert_eq!(
        read(&mut sim, req(&[(1, 63), (3, 5)], &[]), Rule::DeepSeek),
        0
    );
}

#[test]
fn llama_cpp_rule_is_the_exact_prefix_against_requests_still_cached() {
    let config = SimConfig {
        window: 2,
        ..SimConfig::default()
    };
    let mut sim = CacheSim::new(config);
    sim.observe(req(&[(1, 300), (2, 77)], &[]));
    sim.observe(req(&[(9, 10)], &[]));
    // The first request is still cached (window of 2): exact to the token.
    assert_eq!(
        read(
            &mut sim,
            req(&[(1, 300), (2, 77), (5, 1)], &[]),
            Rule::LlamaCpp
        ),
        377
    );
    // Two unrelated requests push both out of the window: llama.cpp has nothing left, while
    // the block store still knows their 16-token blocks (the limit beyond the window).
    sim.observe(req(&[(8, 10)], &[]));
    sim.observe(req(&[(7, 10)], &[]));
    let seen = sim.observe(req(&[(1, 300), (2, 70), (6, 1)], &[]));
    assert_eq!(seen.outcome(Rule::LlamaCpp).read, 0);
    assert_eq!(seen.outcome(Rule::Vllm).read, 368);
    assert_eq!(seen.outcome(Rule::Limit).read, 368);
}

#[test]
fn anthropic_rule_reads_written_breakpoints_within_20_blocks_above_the_model_minimum() {
    let mut sim = CacheSim::new(SimConfig::unbounded());
    // Below the 1,024-token minimum nothing is written.
    let first = sim.observe(req(&[(1, 900), (2, 100)], &[1, 2]));
    assert_eq!(
        first.outcome(Rule::Anthropic),
        RuleOutcome {
            read: 0,
            write: 0,
            miss: 1000
        }
    );
    let second = sim.observe(req(&[(1, 900), (2, 100), (3, 100)], &[1, 3]));
    assert_eq!(
        second.outcome(Rule::Anthropic),
        RuleOutcome {
            read: 0,
            write: 1100,
            miss: 0
        }
    );
    // The breakpoint written at 1,100 is found from the new breakpoint 3 blocks later.
    let third = sim.observe(req(
        &[(1, 900), (2, 100), (3, 100), (4, 5), (5, 5), (6, 5)],
        &[1, 6],
    ));
    assert_eq!(
        third.outcome(Rule::Anthropic),
        RuleOutcome {
            read: 1100,
            write: 15,
            miss: 0
        }
    );
    // A block with no breakpoint after it: the tail is a plain miss.
    let fourth = sim.observe(req(
        &[
            (1, 900),
            (2, 100),
            (3, 100),
            (4, 5),
            (5, 5),
            (6, 5),
            (7, 40),
        ],
        &[1, 6],
    ));
    assert_eq!(
        fourth.outcome(Rule::Anthropic),
        RuleOutcome {
            read: 1115,
            write: 0,
            miss: 40
        }
    );
    // The minimum is a parameter (Haiku: 2,048).
    let mut config = SimConfig::unbounded();
    config.anthropic.min_tokens = 2048;
    let mut sim = CacheSim::new(config);
    sim.observe(req(&[(1, 1500)], &[1]));
    assert_eq!(
        read(
            &mut sim,
            req(&[(1, 1500), (2, 10)], &[1, 2]),
            Rule::Anthropic
        ),
        0
    );
    // At most four breakpoints: the first of five is dropped.
    let mut sim = CacheSim::new(SimConfig::unbounded());
    let five = sim.observe(req(
        &[(1, 1100), (2, 1100), (3, 1), (4, 1), (5, 1)],
        &[1, 2, 3, 4, 5],
    ));
    assert_eq!(five.outcome(Rule::Anthropic).write, 2203);
    assert_eq!(
        read(&mut sim, req(&[(1, 1100), (9, 1)], &[1]), Rule::Anthropic),
        0
    );
}

#[test]
fn limit_counts_a_prefix_of_any_earlier_request_not_only_the_last() {
    let mut sim = CacheSim::new(SimConfig::unbounded());
    sim.observe(req(&[(1, 2000), (2, 500)], &[]));
    sim.observe(req(&[(7, 50)], &[]));
    let seen = sim.observe(req(&[(1, 2000), (2, 400), (3, 9)], &[]));
    assert_eq!(seen.outcome(Rule::Limit).read, 2400);
    let best = seen
        .best
        .unwrap_or_else(|| panic!("no best earlier request"));
    assert_eq!(best.common.tokens, 2400);
    assert_eq!(best.earlier.len(), 2500);
}

#[test]
fn prices_weight_misses_reads_and_writes() {
    let p = Prices::default();
    let o = RuleOutcome {
        read: 1000,
        write: 200,
        miss: 100,
    };
    assert!((p.cost(&o) - (100.0 + 0.1 * 1000.0 + 1.25 * 200.0)).abs() < 1e-9);
    let table: PriceTable =
        serde_json::from_str(r#"{"openai": {"read": 0.5}}"#).unwrap_or_else(|e| panic!("{e}"));
    assert!((table.openai.read - 0.5).abs() < 1e-12);
    assert!((table.anthropic.write - 1.25).abs() < 1e-12);
    assert!(serde_json::from_str::<PriceTable>(r#"{"opanai": {}}"#).is_err());
}

/// The longest prefix of `tokens` shared with any earlier request: the physical limit,
/// computed the obvious way.
fn brute_limit(earlier: &[Vec<u32>], tokens: &[u32]) -> u64 {
    earlier
        .iter()
        .map(|e| e.iter().zip(tokens).take_while(|(a, b)| a == b).count())
        .max()
        .unwrap_or(0) as u64
}

fn arb_requests() -> impl Strategy<Value = Vec<(Vec<Vec<u32>>, Vec<usize>)>> {
    // Segments from a small pool (so prefixes are shared), lengths around the thresholds.
    let segment = (0u32..6, prop_oneof![1usize..40, 100usize..700]).prop_map(|(t, n)| {
        (0..n)
            .map(|i| t * 1000 + (i as u32 % 7))
            .collect::<Vec<u32>>()
    });
    let request = (
        proptest::collection::vec(segment, 1..8),
        proptest::collection::vec(0usize..9, 0..6),
    );
    proptest::collection::vec(request, 1..12)
}

proptest! {
    #[test]
    fn simulator_never_exceeds_the_requests_tokens_nor_the_physical_limit(
        requests in arb_requests(),
        bounded in any::<bool>(),
    ) {
        let config = if bounded {
            SimConfig { window: 2, block_capacity: 8, anthropic_capacity: 2, ..SimConfig::default() }
        } else {
            SimConfig::unbounded()
        };
        let mut sim = CacheSim::new(config);
        let mut earlier: Vec<Vec<u32>> = Vec::new();
        for (segments, breakpoints) in requests {
            let tokens: Vec<u32> = segments.iter().flatten().copied().collect();
            let seen = sim.observe(TokenizedRequest::from_token_segments(segments, breakpoints));
            let n = tokens.len() as u64;
            prop_assert_eq!(seen.tokens as u64, n);
            let limit = seen.outcome(Rule::Limit).read;
            let truth = brute_limit(&earlier, &tokens);
            prop_assert!(limit <= truth, "limit {} above the true shared prefix {}", limit, truth);
            if !bounded {
                prop_assert_eq!(limit, truth);
            }
            for (rule, o) in seen.outcomes() {
                prop_assert_eq!(o.tokens(), n, "{}", rule);
                prop_assert!(o.read + o.write <= n, "{}", rule);
                prop_assert!(o.read <= limit, "{} read {} above the limit {}", rule, o.read, limit);
            }
            earlier.push(tokens);
        }
    }
}
