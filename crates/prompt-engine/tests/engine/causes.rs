//! Each cause of the engine's closed list produced from a documented provider shape, and
//! the predecessor rules (side calls, re-sorted tools, breakpoints, lifetimes, minimums).

use prompt_engine::{
    Block, Canonical, Cause, CauseKind, Engine, EngineConfig, Exchange, ReportedRead, ToolChange,
};

use crate::json_path::resolve;

/// A Chat Completions body of model `m` with these (role, content) messages.
fn chat(messages: &[(&str, &str)]) -> String {
    let messages: Vec<_> = messages
        .iter()
        .map(|(role, content)| serde_json::json!({"role": role, "content": content}))
        .collect();
    serde_json::json!({"model": "m", "messages": messages}).to_string()
}

/// One engine over a list of requests: the verdicts.
fn engine_run(requests: &[Exchange<'_>]) -> Vec<prompt_engine::Analysis> {
    let mut engine = Engine::new(EngineConfig::default());
    let count = &mut |c: &Canonical<'_>, b: &Block| {
        u32::try_from(c.compared_text(b).len() / 4).unwrap_or(u32::MAX)
    };
    requests
        .iter()
        .enumerate()
        .map(|(i, x)| {
            engine
                .analyze(x, i as u64 + 1, count)
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

/// A long Anthropic request (documented shape: `tools`, `system` blocks, `messages` of
/// content blocks) of `turns` user/assistant pairs, with `cache_control` on the listed
/// messages.
fn anthropic(system: &str, turns: usize, marked: &[usize]) -> String {
    let filler = "lorem ipsum dolor sit amet ".repeat(400);
    let mut messages = Vec::new();
    for t in 0..turns {
        for (k, role) in [(2 * t, "user"), (2 * t + 1, "assistant")] {
            let mut block =
                serde_json::json!({"type": "text", "text": format!("{role} {t}: {filler}")});
            if marked.contains(&k) {
                block["cache_control"] = serde_json::json!({"type": "ephemeral"});
            }
            messages.push(serde_json::json!({"role": role, "content": [block]}));
        }
    }
    // The question of the next turn: the next request keeps it where it is.
    messages
        .push(serde_json::json!({"role": "user", "content": format!("user {turns}: {filler}")}));
    serde_json::json!({
        "model": "claude-sonnet-4-5",
        "tools": [{"name": "read", "description": "Read a file.", "input_schema": {"type": "object"}}],
        "system": [{"type": "text", "text": system}],
        "messages": messages,
    })
    .to_string()
}

/// A request of session `s` at `path` (none: known by its body).
fn at<'a>(body: &'a str, path: Option<&'a str>) -> Exchange<'a> {
    Exchange {
        path,
        session: Some("s"),
        ..Exchange::body(body.as_bytes())
    }
}

fn exchange(body: &str) -> Exchange<'_> {
    Exchange {
        path: Some("/v1/messages"),
        session: Some("s"),
        ..Exchange::body(body.as_bytes())
    }
}

#[test]
fn a_model_switch_with_an_identical_history_is_a_break_naming_the_model() {
    let e = anthropic("S", 3, &[5]);
    let l = e.replace("claude-sonnet-4-5", "claude-opus-4-8");
    let v = engine_run(&[exchange(&e), exchange(&l)]);
    assert_eq!(v[1].cause, Some(Cause::ModelChanged));
    let p = v[1].predecessor.as_ref().unwrap_or_else(|| panic!());
    assert!(!p.same_lane);
    // Lost: what Anthropic would have read of an append-only continuation, the predecessor
    // up to its last breakpoint (message 5), not the question after it.
    assert!(
        v[1].tokens_lost > 0 && v[1].tokens_lost < v[0].tokens,
        "{} of {}",
        v[1].tokens_lost,
        v[0].tokens
    );
    assert_eq!(v[1].changes[0].json_path, "model");
}

#[test]
fn an_edited_tool_and_a_rewritten_system_prompt_are_both_listed() {
    let e = anthropic("S", 2, &[3]);
    let l = anthropic("T", 2, &[3]).replace("Read a file.", "Read any file.");
    let v = engine_run(&[exchange(&e), exchange(&l)]);
    let kinds: Vec<CauseKind> = v[1].changes.iter().map(|c| c.cause.kind()).collect();
    assert_eq!(kinds, [CauseKind::ToolsChanged, CauseKind::SystemChanged]);
    assert_eq!(
        v[1].changes[0].cause,
        Cause::ToolsChanged {
            change: ToolChange::Edited,
            name: "read".into()
        }
    );
}

#[test]
fn codex_s_additional_tools_item_is_read_as_tools() {
    let body = |description: &str| {
        serde_json::json!({
            "model": "gpt-5-codex",
            "instructions": "You are Codex.",
            "input": [
                {"type": "additional_tools", "tools": [{"type": "function", "name": "shell", "description": description, "parameters": {}}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
            ],
        })
        .to_string()
    };
    let (e, l) = (body("Run a command."), body("Run a shell command."));
    let v = engine_run(&[at(&e, Some("/v1/responses")), at(&l, Some("/v1/responses"))]);
    assert_eq!(
        v[1].cause,
        Some(Cause::ToolsChanged {
            change: ToolChange::Edited,
            name: "shell".into()
        })
    );
    // The tool is where the item has it.
    assert_eq!(v[1].changes[0].json_path, "input[0].tools[0]");
    // The item is not a message.
    assert_eq!(v[0].messages, 2);
}

/// Codex's tools item as Codex sends it (a "responses lite" body: no `instructions`, no
/// `tools`): `{"type": "additional_tools", "role": "developer", "tools": [...]}` first in
/// `input`, its tools namespaces (`clock`, `collaboration`) of functions, then the developer
/// message with the instructions.
fn codex_lite(clock: &str, instructions: &str) -> String {
    serde_json::json!({
        "model": "gpt-5.6-codex",
        "input": [
            {"type": "additional_tools", "role": "developer", "tools": [
                {"type": "namespace", "name": "clock", "description": "Time and timers.", "tools": [
                    {"type": "function", "name": "now", "description": clock, "strict": false,
                     "parameters": {"type": "object", "properties": {}}},
                ]},
                {"type": "namespace", "name": "collaboration", "description": "Work with other agents.", "tools": [
                    {"type": "function", "name": "followup_task", "strict": false,
                     "parameters": {"type": "object", "properties": {}}},
                ]},
            ]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": instructions}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What time is it?"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Noon."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks."}]},
        ],
        "reasoning": {"effort": "medium"},
        "stream": true,
    })
    .to_string()
}

#[test]
fn codex_s_additional_tools_item_as_codex_sends_it_is_read_as_tools() {
    let instructions = "You are Codex, a coding agent. ".repeat(200);
    let e = codex_lite("The current time.", &instructions);
    // A namespaced tool's description edited: a tool changed, at the item's tool.
    let l = codex_lite("The current time, in UTC.", &instructions);
    let v = engine_run(&[at(&e, Some("/v1/responses")), at(&l, Some("/v1/responses"))]);
    assert_eq!(
        v[1].cause,
        Some(Cause::ToolsChanged {
            change: ToolChange::Edited,
            name: "clock".into()
        }),
        "{:?}",
        v[1].changes
    );
    assert_eq!(v[1].changes[0].json_path, "input[0].tools[0]");
    assert!(
        v[1].changes
            .iter()
            .all(|c| c.cause.kind() != CauseKind::SystemChanged),
        "{:?}",
        v[1].changes
    );
    // The item is tools, the developer message the system field: three messages left.
    assert_eq!(v[0].messages, 3);
    // The developer message edited: the system changed, at that item (the body has no
    // `instructions` field).
    let l = codex_lite("The current time.", &format!("Be brief. {instructions}"));
    let v = engine_run(&[at(&e, Some("/v1/responses")), at(&l, Some("/v1/responses"))]);
    assert_eq!(v[1].cause, Some(Cause::SystemChanged), "{:?}", v[1].changes);
    assert_eq!(v[1].changes[0].json_path, "input[1]");
    // The same bytes again: it extends.
    let v = engine_run(&[at(&e, Some("/v1/responses")), at(&e, Some("/v1/responses"))]);
    assert_eq!(v[1].cause, None, "{:?}", v[1].changes);
}

#[test]
fn every_json_path_a_change_names_exists_in_the_body_it_describes() {
    let j = |v: serde_json::Value| v.to_string();
    let long = "Follow the house style carefully. ".repeat(40);
    let gemini = |decl: &str, system_key: &str, text: &str| {
        let mut body = serde_json::json!({
            "contents": [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [{"text": "hello"}]},
                {"role": "user", "parts": [{"text": text}]},
            ],
            "tools": [
                {"googleSearch": {}},
                {"functionDeclarations": [
                    {"name": "read", "description": "Read a file."},
                    {"name": "list", "description": decl},
                ]},
            ],
        });
        body[system_key] =
            serde_json::json!({"parts": [{"text": long.clone()}, {"text": "Be kind."}]});
        body.to_string()
    };
    let chat = |system: &str, first: &str| {
        j(serde_json::json!({"model": "m", "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": first},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "more"},
        ]}))
    };
    let anthropic = |system: serde_json::Value, tools: serde_json::Value| {
        j(
            serde_json::json!({"model": "claude-sonnet-4-5", "system": system, "tools": tools,
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"},
                         {"role": "user", "content": "more"}]}),
        )
    };
    let responses = |instructions: &str, effort: &str| {
        j(
            serde_json::json!({"model": "gpt-5-codex", "instructions": instructions,
            "input": [{"role": "developer", "content": "Sandbox: none."},
                      {"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}],
            "reasoning": {"effort": effort}}),
        )
    };
    let read = serde_json::json!({"name": "read", "description": "Read.", "input_schema": {}});
    let write = serde_json::json!({"name": "write", "description": "Write.", "input_schema": {}});
    let pairs: Vec<(&str, String, String, &str)> = vec![
        // (what, earlier, later, path)
        (
            "anthropic: a string system edited",
            anthropic(long.clone().into(), serde_json::json!([read])),
            anthropic(format!("{long}!").into(), serde_json::json!([read])),
            "/v1/messages",
        ),
        (
            "anthropic: a system block removed",
            anthropic(
                serde_json::json!([{"type": "text", "text": long}, {"type": "text", "text": "x"}]),
                serde_json::json!([read]),
            ),
            anthropic(
                serde_json::json!([{"type": "text", "text": long}]),
                serde_json::json!([read]),
            ),
            "/v1/messages",
        ),
        (
            "anthropic: a tool removed",
            anthropic(long.clone().into(), serde_json::json!([read, write])),
            anthropic(long.clone().into(), serde_json::json!([read])),
            "/v1/messages",
        ),
        (
            "gemini: a function declaration edited",
            gemini("List files.", "systemInstruction", "more"),
            gemini("List the files.", "systemInstruction", "more"),
            "/v1beta/models/gemini-2.5-flash:generateContent",
        ),
        (
            "gemini: system_instruction",
            gemini("List files.", "system_instruction", "more"),
            gemini("List files.", "system_instruction", "more").replace("Be kind.", "Be brief."),
            "/v1beta/models/gemini-2.5-flash:generateContent",
        ),
        (
            "chat: a string content edited in place",
            chat(&long, "first question"),
            chat(&long, "first questions"),
            "/v1/chat/completions",
        ),
        (
            "chat: a leading system message edited",
            chat(&long, "q"),
            chat(&format!("{long}?"), "q"),
            "/v1/chat/completions",
        ),
        (
            "responses: instructions edited",
            responses(&long, "low"),
            responses(&format!("{long}."), "low"),
            "/v1/responses",
        ),
        (
            "responses: a leading developer item edited",
            responses(&long, "low"),
            responses(&long, "low").replace("Sandbox: none.", "Sandbox: all."),
            "/v1/responses",
        ),
        (
            "responses: a parameter",
            responses(&long, "low"),
            responses(&long, "high"),
            "/v1/responses",
        ),
        (
            "codex: a namespaced tool edited",
            codex_lite("Now.", &long),
            codex_lite("Now, in UTC.", &long),
            "/v1/responses",
        ),
        (
            "codex: its developer message edited",
            codex_lite("Now.", &long),
            codex_lite("Now.", &format!("{long}.")),
            "/v1/responses",
        ),
    ];
    // Where the first change is, pair by pair: the element itself, as each body has it.
    let first = [
        "system",
        "system[1]",
        "tools[1]",
        "tools[1].functionDeclarations[1]",
        "system_instruction.parts[1]",
        "messages[1].content",
        "messages[0]",
        "instructions",
        "input[0]",
        "reasoning.effort",
        "input[0].tools[0]",
        "input[1]",
    ];
    assert_eq!(first.len(), pairs.len());
    let mut problems = Vec::new();
    for ((what, e, l, path), first) in pairs.iter().zip(first) {
        let v = engine_run(&[at(e, Some(path)), at(l, Some(path))]);
        let (ev, lv): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(e).unwrap_or_else(|x| panic!("{x}")),
            serde_json::from_str(l).unwrap_or_else(|x| panic!("{x}")),
        );
        assert!(!v[1].changes.is_empty(), "{what}: no change");
        if v[1].changes[0].json_path != first {
            problems.push(format!(
                "{what}: the first change is named at `{}`, not `{first}`",
                v[1].changes[0].json_path
            ));
        }
        for c in &v[1].changes {
            if resolve(&lv, &c.json_path).is_none() && resolve(&ev, &c.json_path).is_none() {
                problems.push(format!(
                    "{what}: {} names `{}`, in neither body",
                    c.cause.kind(),
                    c.json_path
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn headers_parameters_and_the_cache_key_are_causes_of_their_own() {
    let e = anthropic("S", 2, &[3]);
    let (h1, h2) = (
        [("anthropic-beta".to_owned(), "a".to_owned())],
        [("anthropic-beta".to_owned(), "b".to_owned())],
    );
    let v = engine_run(&[
        Exchange {
            headers: &h1,
            ..exchange(&e)
        },
        Exchange {
            headers: &h2,
            ..exchange(&e)
        },
    ]);
    assert_eq!(
        v[1].cause,
        Some(Cause::HeaderOrParamChanged {
            name: "header:anthropic-beta".into()
        })
    );
    assert_eq!(v[1].changes[0].json_path, "headers.anthropic-beta");
    // OpenAI's reasons: the reasoning effort and the prompt_cache_key.
    let responses = |effort: &str, key: &str| {
        serde_json::json!({"model": "gpt-5", "prompt_cache_key": key, "reasoning": {"effort": effort},
            "input": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
        .to_string()
    };
    let (a, b, c) = (
        responses("low", "k"),
        responses("high", "k"),
        responses("high", "k2"),
    );
    let r = Some("/v1/responses");
    let v = engine_run(&[at(&a, r), at(&b, r), at(&c, r)]);
    assert_eq!(
        v[1].cause,
        Some(Cause::HeaderOrParamChanged {
            name: "reasoning.effort".into()
        })
    );
    assert_eq!(v[2].cause, Some(Cause::CacheKeyChanged));
}

#[test]
fn message_causes_are_told_apart() {
    let m = |xs: &[&str]| {
        // An answered question first: the requests continue a conversation.
        let mut v: Vec<(&str, &str)> = vec![("system", "S"), ("user", "q"), ("assistant", "r")];
        v.extend(xs.iter().map(|x| ("user", *x)));
        chat(&v)
    };
    let cases: [(&[&str], &[&str], CauseKind); 6] = [
        (
            &["a", "b", "c"],
            &["a", "B", "c", "d"],
            CauseKind::EditInPlace,
        ),
        (&["a", "b", "c"], &["a", "c", "d"], CauseKind::Removed),
        (
            &["a", "b", "c"],
            &["a", "x", "b", "c", "d"],
            CauseKind::InsertAboveHistory,
        ),
        (&["a", "b", "c"], &["a", "c", "b", "d"], CauseKind::Reorder),
        (
            &["a", "b", "c", "d", "e", "f", "g"],
            &["summary", "h"],
            CauseKind::Compaction,
        ),
        (&["a", "b", "eph"], &["a", "b"], CauseKind::TailDropped),
    ];
    for (e, l, want) in cases {
        let (e, l) = (m(e), m(l));
        let v = engine_run(&[at(&e, None), at(&l, None)]);
        assert_eq!(
            v[1].cause.as_ref().map(Cause::kind),
            Some(want),
            "{e} → {l}"
        );
    }
}

#[test]
fn a_gap_longer_than_the_asked_lifetime_is_ttl_expired_from_the_logged_timestamps() {
    let body = anthropic("S", 3, &[5]);
    let later = anthropic("S", 4, &[7]);
    fn timed(b: &str, ts: f64) -> Exchange<'_> {
        Exchange {
            ts: Some(ts),
            ..exchange(b)
        }
    }
    // Anthropic's default lifetime is 5 minutes: 299 s is within it, 301 s is not.
    let v = engine_run(&[timed(&body, 1000.0), timed(&later, 1299.0)]);
    assert_eq!(v[1].cause, None, "{:?}", v[1]);
    assert!(v[1].expected_cached > 0);
    let v = engine_run(&[timed(&body, 1000.0), timed(&later, 1301.0)]);
    assert_eq!(v[1].cause, Some(Cause::TtlExpired));
    assert_eq!(v[1].tokens_lost, v[1].expected_cached);
    // A marker asking for an hour holds the entry past five minutes.
    let hour = body.replace(r#""type":"ephemeral""#, r#""type":"ephemeral","ttl":"1h""#);
    let v = engine_run(&[timed(&hour, 1000.0), timed(&later, 1301.0)]);
    assert_eq!(v[1].cause, None, "{:?}", v[1]);
}

#[test]
fn a_provider_that_reads_less_than_the_unchanged_prefix_is_named_even_when_some_was_read() {
    let (body, later) = (anthropic("S", 3, &[5]), anthropic("S", 4, &[7]));
    fn with(b: &str, ts: Option<f64>, cached: u64) -> Exchange<'_> {
        Exchange {
            ts,
            reported: Some(ReportedRead {
                input: 10_000,
                cached,
            }),
            ..exchange(b)
        }
    }
    // Within the lifetime, the tools and system read (a floor) and the history billed again.
    let v = engine_run(&[with(&body, Some(0.0), 0), with(&later, Some(10.0), 300)]);
    assert_eq!(v[1].cause, Some(Cause::ProviderSide));
    assert!(v[1].shortfall.unwrap_or(0) > 5_000, "{:?}", v[1]);
    // Without timestamps, expiry cannot be told from the provider's side.
    let v = engine_run(&[with(&body, None, 0), with(&later, None, 300)]);
    assert_eq!(v[1].cause, Some(Cause::Unknown));
    // Read what was expected: nothing to say.
    let full = v[1].expected_cached * 10_000 / v[1].tokens;
    let v = engine_run(&[with(&body, Some(0.0), 0), with(&later, Some(10.0), full)]);
    assert_eq!(v[1].cause, None, "{:?}", v[1]);
}

#[test]
fn anthropic_breakpoints_that_do_not_reach_back_are_named() {
    // The predecessor wrote its cache at message 5; the next request marks message 7 (two
    // messages on, within the 20-block lookback), none, or only one 22 messages on.
    let body = anthropic("S", 3, &[5]);
    let reach = anthropic("S", 4, &[7]);
    let none = anthropic("S", 4, &[]);
    let far = anthropic("S", 15, &[27]);
    for (later, want) in [
        (reach, None),
        (none, Some(Cause::BreakpointMoved)),
        (far, Some(Cause::LookbackExceeded)),
    ] {
        let v = engine_run(&[exchange(&body), exchange(&later)]);
        assert_eq!(v[1].cause, want, "{:?}", v[1].breakpoints);
    }
}

#[test]
fn a_prefix_below_the_provider_s_minimum_is_below_minimum() {
    // OpenAI's model (the profile table's minimum: 1,024 tokens).
    let openai = |b: String| b.replacen(r#""model":"m""#, r#""model":"gpt-4.1""#, 1);
    let e = openai(chat(&[("system", "S"), ("user", "hi")]));
    let l = openai(chat(&[
        ("system", "S"),
        ("user", "hi"),
        ("assistant", "yo"),
        ("user", "more"),
    ]));
    let v = engine_run(&[at(&e, None), at(&l, None)]);
    assert_eq!(v[0].cause, Some(Cause::ColdStart));
    assert_eq!(v[1].cause, Some(Cause::BelowMinimum));
    assert_eq!(v[1].tokens_lost, 0);
}

#[test]
fn every_cause_of_the_enum_is_produced_by_a_test_here() {
    // A new cause fails here until a test of this file asserts it: each kind's name must
    // stand in this file as `Cause::Name` or `CauseKind::Name` (this test names none).
    let body = include_str!("causes.rs");
    for kind in CauseKind::ALL {
        let name = format!("{kind:?}");
        assert!(
            body.contains(&format!("Cause::{name}"))
                || body.contains(&format!("CauseKind::{name}")),
            "no test of causes.rs produces {name}"
        );
    }
}

#[test]
fn a_conversation_whose_tools_were_re_sorted_is_compared_with_its_own_history_not_an_older_head() {
    // One inferred session: an older conversation that happened to send the tools in the
    // new order, then the conversation that re-sorts them.
    let body = |tools: [&str; 2], messages: &[(&str, &str)]| {
        let tools: Vec<serde_json::Value> = tools
            .iter()
            .map(|n| serde_json::json!({"type": "function", "function": {"name": n, "parameters": {}}}))
            .collect();
        let messages: Vec<serde_json::Value> = messages
            .iter()
            .map(|(r, c)| serde_json::json!({"role": r, "content": c}))
            .collect();
        serde_json::json!({"model": "gpt-4.1", "tools": tools, "messages": messages}).to_string()
    };
    let older = body(["b", "a"], &[("user", "x"), ("assistant", "y")]);
    let first = body(["a", "b"], &[("user", "u1"), ("assistant", "a1")]);
    let resorted = body(
        ["b", "a"],
        &[("user", "u1"), ("assistant", "a1"), ("user", "u2")],
    );
    let v = engine_run(&[
        Exchange::body(older.as_bytes()),
        Exchange::body(first.as_bytes()),
        Exchange::body(resorted.as_bytes()),
    ]);
    assert_eq!(
        v[2].predecessor.as_ref().map(|p| p.tag),
        Some(2),
        "{:?}",
        v[2]
    );
    assert_eq!(
        v[2].cause.as_ref().map(Cause::kind),
        Some(CauseKind::ToolsChanged)
    );
}

#[test]
fn parallel_side_calls_forked_from_one_request_are_compared_with_it_not_with_each_other() {
    // Found by the accuracy benchmark's concurrency set: two side calls forked from the main
    // conversation at once, then the main conversation going on. Each extends the main
    // request; none continues the side call logged just before it.
    let head = [
        ("system", "S"),
        ("user", "q"),
        ("assistant", "r"),
        ("user", "a"),
    ];
    let with = |more: &[(&'static str, &'static str)]| {
        let mut v = head.to_vec();
        v.extend_from_slice(more);
        chat(&v)
    };
    let main = with(&[]);
    let side = with(&[("user", "side question")]);
    let next = with(&[("assistant", "b"), ("user", "c")]);
    let v = engine_run(&[at(&main, None), at(&side, None), at(&next, None)]);
    for (i, r) in v.iter().enumerate().skip(1) {
        assert_eq!(r.predecessor.as_ref().map(|p| p.tag), Some(1), "{i}: {r:?}");
        assert_eq!(r.cause, None, "{i}: {r:?}");
    }
    // A second side call after the first goes on with a message of the same role: by the
    // bytes, an edit of the first one's question (a retry), and compared with it.
    let side_2 = with(&[("user", "another side question")]);
    let v = engine_run(&[at(&main, None), at(&side, None), at(&side_2, None)]);
    assert_eq!(v[2].predecessor.as_ref().map(|p| p.tag), Some(2));
}

#[test]
fn anthropic_breakpoints_that_do_not_reach_back_are_named_when_the_system_is_marked_apart() {
    // Found by the accuracy benchmark: Claude Code and opencode mark the system prompt apart
    // from the messages. Its entry is still read when the messages' breakpoint moves back or
    // past the lookback, but the messages the predecessor wrote are not: that is the break.
    // A system prompt over the minimum cacheable prefix, so that its own entry counts.
    let text = "You are a coding agent. ".repeat(400);
    let plain = format!(r#""system":[{{"text":"{text}","type":"text"}}]"#);
    let marked = format!(
        r#""system":[{{"cache_control":{{"type":"ephemeral"}},"text":"{text}","type":"text"}}]"#
    );
    let system = |b: String| b.replacen(&plain, &marked, 1);
    let body = system(anthropic(&text, 3, &[5]));
    assert!(body.contains(r#""cache_control":{"type":"ephemeral"},"text":"You are"#));
    let reach = system(anthropic(&text, 4, &[7]));
    let back = system(anthropic(&text, 4, &[1]));
    let far = system(anthropic(&text, 15, &[27]));
    for (later, want) in [
        (reach, None),
        (back, Some(Cause::BreakpointMoved)),
        (far, Some(Cause::LookbackExceeded)),
    ] {
        let v = engine_run(&[exchange(&body), exchange(&later)]);
        assert_eq!(v[1].cause, want, "{:?}", v[1].breakpoints);
        if want.is_some() {
            // The system's entry is still read; the messages after it are lost.
            assert!(v[1].tokens_lost > 0 && v[1].tokens_lost < v[1].common_tokens);
        }
    }
}

#[test]
fn a_message_re_sent_with_other_whitespace_is_serialization_only() {
    // Found by the accuracy benchmark: a message re-sent pretty-printed (another JSON writer)
    // is the same message to the provider, which parses it; only a string's own spacing
    // counts. Here an assistant message's tool call, an object inside the message.
    let call = r#"{"role":"assistant","content":"r","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]}"#;
    let spaced = r#"{"role": "assistant", "content": "r", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    ]}"#;
    let body = |m: &str, more: &str| {
        format!(
            r#"{{"model":"m","messages":[{{"role":"system","content":"S"}},{{"role":"user","content":"q"}},{m},{{"role":"tool","tool_call_id":"c1","content":"ok"}}{more}]}}"#
        )
    };
    let e = body(call, "");
    let l = body(spaced, r#",{"role":"assistant","content":"done"}"#);
    let v = engine_run(&[at(&e, None), at(&l, None)]);
    assert_eq!(v[1].cause, None, "{:?}", v[1]);
    assert_eq!(
        v[1].changes.first().map(|c| c.cause.kind()),
        Some(CauseKind::SerializationOnly)
    );
    // Spacing inside a string is the text: an edit.
    let edited = l.replace(r#""content": "r""#, r#""content": "r ""#);
    let v = engine_run(&[at(&e, None), at(&edited, None)]);
    assert_eq!(v[1].cause, Some(Cause::EditInPlace), "{:?}", v[1]);
}

/// A Chat Completions body of model `m` with these tools (name, description) and messages.
fn chat_with_tools(tools: &[(&str, &str)], messages: &[(&str, &str)]) -> String {
    let tools: Vec<_> = tools
        .iter()
        .map(|(name, description)| {
            serde_json::json!({"type": "function", "function": {"name": name, "description": description, "parameters": {"type": "object"}}})
        })
        .collect();
    let mut body: serde_json::Value = serde_json::from_str(&chat(messages)).unwrap_or_default();
    body["tools"] = serde_json::Value::Array(tools);
    body.to_string()
}

#[test]
fn a_tool_removed_at_the_end_loses_what_follows_it_not_what_precedes_it() {
    let read = ("read", &*"Read a file. ".repeat(200));
    let grep = ("grep", &*"Search files. ".repeat(200));
    let turns = [
        ("system", "Be brief."),
        ("user", "list the files"),
        ("assistant", "src, tests"),
        ("user", "and in src?"),
    ];
    let e = chat_with_tools(&[read, grep], &turns);
    let l = chat_with_tools(&[read], &turns);
    let path = Some("/v1/chat/completions");
    let v = engine_run(&[at(&e, path), at(&l, path)]);
    assert_eq!(
        v[1].cause.as_ref().map(Cause::kind),
        Some(CauseKind::ToolsChanged)
    );
    // The first tool is still read: lost is the rest, not the whole request (a change of
    // the model or a parameter would lose it all).
    assert!(
        v[1].tokens_lost > 0 && v[1].tokens_lost < v[0].tokens,
        "{} of {}",
        v[1].tokens_lost,
        v[0].tokens
    );
    assert!(v[1].expected_cached > 0, "{:?}", v[1]);
}

#[test]
fn a_tool_moved_and_edited_reads_nothing_of_the_tool_that_took_its_place() {
    let read = ("read", &*"Read a file. ".repeat(200));
    let grep = ("grep", &*"Search files. ".repeat(200));
    let grep_edited = ("grep", &*"Search files. ".repeat(201));
    let turns = [
        ("system", "Be brief."),
        ("user", "list the files"),
        ("assistant", "src, tests"),
        ("user", "and in src?"),
    ];
    let e = chat_with_tools(&[read, grep], &turns);
    // `grep` edited and moved first: the earlier first tool was `read`, so the provider
    // shares nothing of the tools field past its opening bytes.
    let l = chat_with_tools(&[grep_edited, read], &turns);
    let path = Some("/v1/chat/completions");
    let v = engine_run(&[at(&e, path), at(&l, path)]);
    assert_eq!(
        v[1].cause.as_ref().map(Cause::kind),
        Some(CauseKind::ToolsChanged)
    );
    assert_eq!(v[1].tokens_lost, v[0].tokens, "{:?}", v[1]);
}
