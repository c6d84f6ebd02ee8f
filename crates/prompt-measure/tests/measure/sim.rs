//! The provider-rule simulator: each rule on hand-built token sequences, the property that
//! no rule serves more than the request or the physical limit, and whole arms through
//! `simulate`.

use prompt_measure::{
    Arm, CacheSim, PriceTable, Prices, RequestText, Rule, RuleOutcome, SimConfig, TokenizedRequest,
    Tokenizer, simulate,
};
use proptest::prelude::*;

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

/// An arm of `requests`: each one's messages and breakpoints.
fn arm<'a>(name: &'a str, requests: &'a [(Vec<String>, Vec<usize>)]) -> Arm<'a> {
    Arm {
        name,
        requests: requests
            .iter()
            .map(|(messages, breakpoints)| RequestText {
                messages,
                breakpoints,
            })
            .collect(),
    }
}

#[test]
fn the_tokenizer_is_a_parameter() {
    let first = vec![r#"{"role":"system","content":"Be brief."}"#.to_owned()];
    let mut second = first.clone();
    second.push(r#"{"role":"user","content":"hi"}"#.to_owned());
    let requests = [(first, vec![1]), (second, vec![1, 2])];
    let arm = arm("append_only", &requests);
    let report = simulate(
        &[arm],
        "append_only",
        2,
        &Bytes,
        &PriceTable::default(),
        SimConfig::unbounded(),
    );
    assert_eq!(report.tokenizer, "bytes");
    let bytes: usize = requests
        .iter()
        .flat_map(|(messages, _)| messages.iter().map(String::len))
        .sum();
    let arm = report
        .strategies
        .get("append_only")
        .unwrap_or_else(|| panic!("no arm"));
    assert_eq!(arm.tokens, bytes as u64);
    // One token per byte: the second request reuses the whole first one.
    assert_eq!(
        arm.rules.get(&Rule::Limit).map(|r| r.cached_tokens),
        Some(requests[0].0[0].len() as u64)
    );
    assert_eq!(
        arm.rules.get(&Rule::Limit).map(|r| r.cost_vs_reference),
        Some(1.0)
    );
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
fn deepseek_rule_hits_only_whole_prefix_units_as_its_guide_says() {
    // The guide's example 2: A + B, then A + C misses (A + C does not match the unit
    // A + B whole), but the common prefix A is persisted, so A + D hits A.
    let a = (1, 640);
    let mut sim = CacheSim::new(SimConfig::unbounded());
    sim.observe(req(&[a, (2, 300)], &[]));
    let second = sim.observe(req(&[a, (3, 300)], &[]));
    assert_eq!(second.outcome(Rule::DeepSeek).read, 0);
    // Every other rule serves the shared 640 tokens (OpenAI: below its minimum).
    assert_eq!(second.outcome(Rule::LlamaCpp).read, 640);
    assert_eq!(second.outcome(Rule::OpenAi).read, 0);
    let third = sim.observe(req(&[a, (4, 300)], &[]));
    assert_eq!(third.outcome(Rule::DeepSeek).read, 640);
    // Example 1: A + B, then A + B + C hits A + B.
    let mut sim = CacheSim::new(SimConfig::unbounded());
    sim.observe(req(&[a, (2, 300)], &[]));
    let next = sim.observe(req(&[a, (2, 300), (5, 10)], &[]));
    assert_eq!(next.outcome(Rule::DeepSeek).read, 940 / 64 * 64);
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
    let config = SimConfig::default().with_window(2);
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
    // One simulator, request after request: (segments, breakpoints, read, write, miss).
    type Step = (&'static [(u32, usize)], &'static [usize], u64, u64, u64);
    let steps: [Step; 4] = [
        // Below the 1,024-token minimum nothing is written.
        (&[(1, 900), (2, 100)], &[1, 2], 0, 0, 1000),
        (&[(1, 900), (2, 100), (3, 100)], &[1, 3], 0, 1100, 0),
        // The breakpoint written at 1,100 is found from the new breakpoint 3 blocks later.
        (
            &[(1, 900), (2, 100), (3, 100), (4, 5), (5, 5), (6, 5)],
            &[1, 6],
            1100,
            15,
            0,
        ),
        // A block with no breakpoint after it: the tail is a plain miss.
        (
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
            1115,
            0,
            40,
        ),
    ];
    for (i, (segments, breakpoints, read, write, miss)) in steps.into_iter().enumerate() {
        assert_eq!(
            sim.observe(req(segments, breakpoints))
                .outcome(Rule::Anthropic),
            RuleOutcome { read, write, miss },
            "request {i}"
        );
    }
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
            SimConfig::default().with_window(2).with_block_capacity(8).with_anthropic_capacity(2)
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

#[test]
fn profile_idle_gap_longer_than_the_ttl_costs_each_provider_what_its_lifetime_says() {
    use prompt_core::profile::{CacheTtl, GapFate, Retention};
    use prompt_measure::{gap_profiles, simulate_idle_gap};
    let tools = "t".repeat(2000);
    let prefix = "p".repeat(3000);
    let first: Vec<String> = vec![tools.clone(), prefix.clone(), "u".repeat(200)];
    let mut second = first.clone();
    second.extend(["a".repeat(100), "v".repeat(200)]);
    let requests = [(first, vec![2, 3]), (second, vec![2, 5])];
    let arm = arm("cacheline", &requests);
    let prices = PriceTable::default();
    let gap = |seconds, ttl, retention| {
        simulate_idle_gap(
            &arm,
            1,
            seconds,
            &Bytes,
            &prices,
            SimConfig::unbounded(),
            &gap_profiles(ttl, retention),
        )
        .unwrap()
    };
    let of = |report: &prompt_measure::GapReport, rule| {
        report
            .providers
            .iter()
            .find(|p| p.rule == rule)
            .cloned()
            .unwrap_or_else(|| panic!("{rule}"))
    };
    // A 10-minute pause.
    let ten = gap(600, None, None);
    assert_eq!((ten.tokens, ten.prefix_tokens), (5500, 5000));
    for rule in [Rule::LlamaCpp, Rule::Vllm] {
        let o = of(&ten, rule);
        assert_eq!(o.fate, GapFate::Kept, "{rule}: until evicted");
        assert_eq!(o.extra_cost, Some(0.0));
    }
    let openai = of(&ten, Rule::OpenAi);
    assert_eq!(openai.fate, GapFate::Expired);
    assert_eq!(openai.after_gap.map(|o| o.read), Some(0));
    assert!((openai.extra_cost.unwrap() - openai.warm.read as f64 * 0.9).abs() < 1e-9);
    let deepseek = of(&ten, Rule::DeepSeek);
    assert_eq!(
        (deepseek.fate, deepseek.extra_cost),
        (GapFate::Unknown, None)
    );
    let anthropic = of(&ten, Rule::Anthropic);
    assert_eq!(anthropic.fate, GapFate::Expired);
    let cold = anthropic.after_gap.unwrap();
    assert_eq!(
        (cold.read, cold.write),
        (0, anthropic.warm.read + anthropic.warm.write)
    );
    assert!(anthropic.extra_cost.unwrap() > 0.0);
    assert_eq!(anthropic.lifetime_premium, 0.0);
    // With the 1-hour TTL the prefix outlives the pause; the history is written again.
    let hour = gap(
        600,
        Some(CacheTtl::OneHour),
        Some(Retention::TwentyFourHours),
    );
    let anthropic_1h = of(&hour, Rule::Anthropic);
    let after = anthropic_1h.after_gap.unwrap();
    assert_eq!(after.read, 5000);
    assert!(anthropic_1h.extra_cost.unwrap() < anthropic.extra_cost.unwrap());
    assert!((anthropic_1h.lifetime_premium - 5000.0 * (2.0 - 1.25)).abs() < 1e-9);
    // OpenAI's 24-hour retention outlives it.
    assert_eq!(of(&hour, Rule::OpenAi).extra_cost, Some(0.0));
    // Four minutes: every documented cache is still there; seven: OpenAI's may be gone.
    let four = gap(240, None, None);
    assert!(
        four.providers
            .iter()
            .all(|p| p.extra_cost.is_none_or(|c| c == 0.0))
    );
    assert_eq!(
        of(&gap(420, None, None), Rule::OpenAi).fate,
        GapFate::MaybeExpired
    );
    // No such request: no report.
    assert!(
        simulate_idle_gap(&arm, 2, 600, &Bytes, &prices, SimConfig::unbounded(), &[]).is_none()
    );
}
