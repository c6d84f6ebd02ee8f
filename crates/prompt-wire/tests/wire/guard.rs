//! The guard over two consecutive bodies: library bodies extend each other; a bridge that
//! hoists every system message into the one system field is flagged; edits are named.

use prompt_core::ApiKind;
use prompt_wire::{
    Cause, GuardError, Place, Verdict, Which, body_parts, compare, without_cache_control,
};
use serde_json::{Value, json};

use crate::common::{APIS, play, raw_field, session, values};

fn broken(verdict: Verdict) -> prompt_wire::Break {
    match verdict {
        Verdict::Breaks(b) => b,
        Verdict::Extends { shape } => panic!("{shape:?} extends"),
    }
}

/// The shape of the bodies `api`'s wire writes.
fn shape_of(api: ApiKind) -> ApiKind {
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => ApiKind::OpenAi,
        ApiKind::OpenAiResponses => ApiKind::OpenAiResponses,
        ApiKind::Anthropic => ApiKind::Anthropic,
        ApiKind::Gemini => ApiKind::Gemini,
    }
}

#[test]
fn the_guard_says_extends_for_consecutive_library_bodies() {
    for api in APIS {
        let shape = shape_of(api);
        let sent = play(api);
        for w in sent.windows(2).filter(|w| w[0].epoch == w[1].epoch) {
            let (a, b) = (&w[0], &w[1]);
            assert_eq!(
                compare(&a.stable_body, &b.bytes).unwrap(),
                Verdict::Extends { shape },
                "{api:?} {} -> {}",
                a.label,
                b.label
            );
            // As sent, the earlier body's ephemeral tail is what is not carried over.
            let b = broken(compare(&a.bytes, &b.bytes).unwrap());
            assert_eq!(b.cause, Cause::TailDropped, "{api:?}: {b}");
            assert!(matches!(b.place, Place::Message { .. }), "{api:?}: {b}");
        }
        // Across a compaction the earlier history is gone.
        let at = sent
            .windows(2)
            .position(|w| w[0].epoch != w[1].epoch)
            .unwrap();
        assert!(
            !compare(&sent[at].stable_body, &sent[at + 1].bytes)
                .unwrap()
                .extends()
        );
    }
}

/// The messages of an OpenAI-style request (updates as system messages).
fn chat_requests() -> Vec<Vec<Value>> {
    let api = ApiKind::OpenAi;
    let mut s = session(api);
    let mut out = Vec::new();
    let r = s.turn(values("a", 1), "First question.").unwrap();
    out.push(serde_json::from_slice::<Vec<Value>>(&r.stable_bytes_json()).unwrap());
    s.record_assistant(&json!({"role": "assistant", "content": "First answer."}))
        .unwrap();
    // The todo list changes: the library appends an update at the end.
    let r = s.turn(values("b", 2), "Second question.").unwrap();
    out.push(serde_json::from_slice::<Vec<Value>>(&r.stable_bytes_json()).unwrap());
    out
}

trait StableJson {
    fn stable_bytes_json(&self) -> Vec<u8>;
}

impl StableJson for prompt_core::Request<'_> {
    /// The request without its ephemeral messages, as a JSON array.
    fn stable_bytes_json(&self) -> Vec<u8> {
        let mut bytes = self.stable_bytes();
        bytes.push(b']');
        bytes
    }
}

/// What a Jan-style bridge sends: every system message joined into the provider's single
/// system field, the rest as messages.
fn bridged(messages: &[Value], shape: ApiKind) -> Vec<u8> {
    let system: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "system")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    let system = system.join("\n\n");
    let rest: Vec<&Value> = messages.iter().filter(|m| m["role"] != "system").collect();
    let body = match shape {
        ApiKind::Anthropic => {
            json!({"model": "m", "max_tokens": 100, "system": system, "messages": rest})
        }
        ApiKind::Gemini => {
            let contents: Vec<Value> = rest
                .iter()
                .map(|m| {
                    let role = if m["role"] == "assistant" {
                        "model"
                    } else {
                        "user"
                    };
                    json!({"role": role, "parts": [{"text": m["content"]}]})
                })
                .collect();
            json!({"systemInstruction": {"parts": [{"text": system}]}, "contents": contents})
        }
        ApiKind::OpenAi | ApiKind::LlamaCpp => {
            let mut all = vec![json!({"role": "system", "content": system})];
            all.extend(rest.into_iter().cloned());
            json!({"model": "m", "messages": all})
        }
        ApiKind::OpenAiResponses => json!({"model": "m", "instructions": system, "input": rest}),
    };
    serde_json::to_vec(&body).unwrap()
}

#[test]
fn the_guard_flags_a_jan_style_bridge_as_hoisting_at_the_system_field() {
    let requests = chat_requests();
    for shape in [
        ApiKind::Anthropic,
        ApiKind::Gemini,
        ApiKind::OpenAi,
        ApiKind::OpenAiResponses,
    ] {
        let (a, b) = (bridged(&requests[0], shape), bridged(&requests[1], shape));
        let b = broken(compare(&a, &b).unwrap());
        assert_eq!(b.shape, shape);
        assert!(matches!(b.place, Place::System { .. }), "{shape:?}: {b}");
        let Cause::InsertAboveHistory {
            hoisted: Some(hoisted),
            ..
        } = &b.cause
        else {
            panic!("{shape:?}: {b}")
        };
        assert!(hoisted.contains("Open tasks: b"), "{shape:?}: {hoisted}");
        assert!(b.to_string().contains("hoisting"), "{b}");
    }
    // The same conversation through the library: the update stays where it was appended.
    for api in [ApiKind::Anthropic, ApiKind::Gemini] {
        let sent = play(api);
        assert!(
            compare(&sent[2].stable_body, &sent[3].bytes)
                .unwrap()
                .extends()
        );
    }
}

fn replace(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(text.contains(from), "{from} not in {text}");
    text.replacen(from, to, 1).into_bytes()
}

#[test]
fn the_guard_names_tools_reordering_a_message_edit_and_a_system_rewrite() {
    for api in [
        ApiKind::OpenAi,
        ApiKind::OpenAiResponses,
        ApiKind::Anthropic,
        ApiKind::Gemini,
    ] {
        let sent = play(api);
        let (a, b) = (&sent[2].stable_body, &sent[3].bytes);

        // Tools reordered.
        let tools = raw_field(b, "tools").unwrap();
        let swap = |array: &str| {
            let list: Vec<&serde_json::value::RawValue> = serde_json::from_str(array).unwrap();
            format!("[{},{}]", list[1].get(), list[0].get())
        };
        let later = if api == ApiKind::Gemini {
            let tool: Vec<&serde_json::value::RawValue> = serde_json::from_str(tools).unwrap();
            let decls = raw_field(tool[0].get().as_bytes(), "functionDeclarations").unwrap();
            replace(b, decls, &swap(decls))
        } else {
            replace(b, tools, &swap(tools))
        };
        let found = broken(compare(a, &later).unwrap());
        assert!(
            matches!(
                found.cause,
                Cause::ToolsChanged {
                    change: prompt_wire::ToolChange::Reordered,
                    ..
                }
            ),
            "{api:?}: {found}"
        );
        assert_eq!(found.place, Place::Tools { index: 0 });

        // A message edited.
        let later = replace(
            b,
            "Request 1: please look at the parser.",
            "Request 1: please look at the lexer.",
        );
        let found = broken(compare(a, &later).unwrap());
        assert_eq!(found.cause, Cause::EditInPlace, "{api:?}: {found}");
        let Place::Message { index, .. } = found.place else {
            panic!("{found}")
        };
        assert_eq!(found.divergence.message_index, Some(index));
        assert!(
            found.divergence.excerpt.later.contains("lexer"),
            "{api:?}: {:?}",
            found.divergence.excerpt
        );
        assert_eq!(
            &later[found.divergence.byte_offset..][..5],
            b"lexer",
            "{api:?}"
        );

        // The system field rewritten.
        let later = replace(
            b,
            "You are a careful coding assistant.",
            "You are a careless coding assistant.",
        );
        let found = broken(compare(a, &later).unwrap());
        assert_eq!(found.cause, Cause::SystemChanged, "{api:?}: {found}");
        assert_eq!(found.place, Place::System { block: 0 });
    }
}

#[test]
fn the_guard_names_added_removed_and_edited_tools_and_a_model_change() {
    let tool = |name: &str, d: &str| {
        format!(r#"{{"name":"{name}","description":"{d}","input_schema":{{}}}}"#)
    };
    let body = |tools: &[String], model: &str| {
        format!(
            r#"{{"model":"{model}","tools":[{}],"system":"S","messages":[{{"role":"user","content":"hi"}}]}}"#,
            tools.join(",")
        )
        .into_bytes()
    };
    let (a, b, c) = (tool("a", "A"), tool("b", "B"), tool("c", "C"));
    let earlier = body(&[a.clone(), b.clone()], "m");
    let cases = [
        (
            body(&[a.clone(), b.clone(), c.clone()], "m"),
            Cause::ToolsChanged {
                change: prompt_wire::ToolChange::Added,
                name: "c".into(),
            },
        ),
        (
            body(std::slice::from_ref(&a), "m"),
            Cause::ToolsChanged {
                change: prompt_wire::ToolChange::Removed,
                name: "b".into(),
            },
        ),
        (
            body(&[a.clone(), tool("b", "B2")], "m"),
            Cause::ToolsChanged {
                change: prompt_wire::ToolChange::Edited,
                name: "b".into(),
            },
        ),
        (body(&[a.clone(), b.clone()], "m2"), Cause::ModelChanged),
    ];
    for (later, cause) in cases {
        assert_eq!(broken(compare(&earlier, &later).unwrap()).cause, cause);
    }
}

#[test]
fn the_guard_refuses_what_it_cannot_compare_with_typed_errors() {
    let chat = br#"{"messages":[]}"#;
    let gemini = br#"{"contents":[]}"#;
    assert!(matches!(
        compare(chat, gemini),
        Err(GuardError::ShapeMismatch {
            earlier: ApiKind::OpenAi,
            later: ApiKind::Gemini
        })
    ));
    assert!(matches!(
        compare(b"[1]", chat),
        Err(GuardError::NotAnObject {
            body: Which::Earlier,
            ..
        })
    ));
    assert!(matches!(
        compare(chat, br#"{"prompt":"x"}"#),
        Err(GuardError::UnknownShape {
            body: Which::Later,
            ..
        })
    ));
    assert!(matches!(
        compare(chat, br#"{"messages":{}}"#),
        Err(GuardError::Malformed {
            body: Which::Later,
            ..
        })
    ));
    let huge = vec![b' '; prompt_wire::MAX_AUDIT_BODY_BYTES + 1];
    assert!(matches!(
        compare(&huge, chat),
        Err(GuardError::TooLarge {
            body: Which::Earlier,
            ..
        })
    ));
}

#[test]
fn bodies_with_nothing_only_anthropic_has_still_compare_without_cache_control() {
    // Found by fuzzing (fuzz/artifacts/wire_bodies/minimized-from-6f3f…): an Anthropic
    // session without prefix or tools and an empty reply. Its bodies have no field only
    // Anthropic has, so they read as Chat Completions; the rolling breakpoint moved from
    // "hi" to "next", which must not count as an edit.
    let api = ApiKind::Anthropic;
    let mut s = prompt_core::Session::start(
        Vec::new(),
        &prompt_core::PromptPolicy::default(),
        prompt_core::SessionContext::default(),
        prompt_wire::session_options(api, prompt_core::tools::ToolSet::empty()),
    )
    .unwrap();
    let mut w = crate::common::wire(api);
    let first = w
        .body(&s.turn(prompt_core::Extensions::new(), "hi").unwrap())
        .unwrap()
        .stable_body();
    w.record_reply(&mut s, br#"{"content":[]}"#).unwrap();
    let next = w
        .body(&s.turn(prompt_core::Extensions::new(), "next").unwrap())
        .unwrap()
        .to_bytes();
    assert_eq!(
        String::from_utf8_lossy(&first)
            .matches("cache_control")
            .count(),
        1
    );
    assert!(compare(&first, &next).unwrap().extends());
    // A text block that changed is still an edit.
    let edited = String::from_utf8(next).unwrap().replace("\"hi\"", "\"ho\"");
    let b = broken(compare(&first, edited.as_bytes()).unwrap());
    assert_eq!(
        (b.cause, b.place),
        (
            Cause::EditInPlace,
            Place::Message {
                index: 0,
                block: Some(0)
            }
        )
    );
}

#[test]
fn body_parts_of_every_library_body_are_its_fields_as_sent() {
    for api in APIS {
        let shape = shape_of(api);
        for sent in play(api) {
            let parts = body_parts(&sent.bytes).unwrap();
            let body: Value = serde_json::from_slice(&sent.bytes).unwrap();
            assert_eq!(parts.shape, shape, "{api:?}");
            let (system_key, messages_key) = match shape {
                ApiKind::OpenAi | ApiKind::LlamaCpp => (None, "messages"),
                ApiKind::OpenAiResponses => (Some("instructions"), "input"),
                ApiKind::Anthropic => (Some("system"), "messages"),
                ApiKind::Gemini => (Some("systemInstruction"), "contents"),
            };
            let text = std::str::from_utf8(&sent.bytes).unwrap();
            // Each part is the body's own bytes, in order.
            let parsed = |part: &str| {
                assert!(text.contains(part), "{api:?}: {part}");
                serde_json::from_str::<Value>(part).unwrap()
            };
            assert_eq!(
                parts.tools.map(parsed),
                body.get("tools").cloned(),
                "{api:?}"
            );
            assert_eq!(
                parts.system.map(parsed),
                system_key.and_then(|k| body.get(k).cloned()),
                "{api:?}"
            );
            let messages: Vec<Value> = parts.messages.iter().map(|m| parsed(m)).collect();
            assert_eq!(
                Some(Value::Array(messages)),
                body.get(messages_key).cloned(),
                "{api:?}"
            );
        }
    }
}

#[test]
fn body_parts_read_null_fields_as_absent_and_refuse_what_compare_refuses() {
    let parts =
        body_parts(br#"{"model":"m","instructions":null,"tools":null,"input":"hi"}"#).unwrap();
    assert_eq!(parts.shape, ApiKind::OpenAiResponses);
    assert_eq!((parts.tools, parts.system), (None, None));
    assert_eq!(parts.messages, [r#""hi""#]);
    assert!(matches!(
        body_parts(br#"{"model":"m","prompt":"hi"}"#),
        Err(GuardError::UnknownShape {
            body: Which::Request,
            ..
        })
    ));
    // Read whole (no evidence yet of the shape) or as sent (a system message says Chat):
    // a message that is not an object is refused the same way.
    for (body, at) in [
        (&br#"{"messages":[1]}"#[..], 0),
        (br#"{"messages":[{"role":"system","content":"s"},1]}"#, 1),
    ] {
        assert_eq!(
            body_parts(body).unwrap_err().to_string(),
            format!("the request body's messages[{at}] is a number, not an object")
        );
    }
    // Evidence of Anthropic in a later message still tells the shape.
    let anthropic = br#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{}}]}]}"#;
    assert_eq!(body_parts(anthropic).unwrap().shape, ApiKind::Anthropic);
    // compare reads null fields the same way.
    assert!(
        compare(
            br#"{"model":"m","tools":null,"messages":[{"role":"user","content":"a"}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"a"}]}"#
        )
        .unwrap()
        .extends()
    );
}

#[test]
fn without_cache_control_drops_the_breakpoints_of_parts_and_blocks_and_keeps_the_rest() {
    let tools =
        r#"[{"name":"a","input_schema":{"cache_control":1},"cache_control":{"type":"ephemeral"}}]"#;
    // A tool's own field is dropped; what its schema holds is the tool's, kept.
    assert_eq!(
        without_cache_control(tools),
        r#"[{"name":"a","input_schema":{"cache_control":1}}]"#
    );
    let message = r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]},{"type":"text","text":"y"}]}"#;
    assert_eq!(
        without_cache_control(message),
        r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"}]},{"type":"text","text":"y"}]}"#
    );
    let plain = r#"{"role":"user","content":"hi"}"#;
    assert!(matches!(
        without_cache_control(plain),
        std::borrow::Cow::Borrowed(p) if p == plain
    ));
    // Deeper than a message's blocks can be, and not JSON: left as sent, never a panic.
    let deep = format!(
        "{}{}",
        r#"{"content":["#.repeat(5000),
        r#"{"cache_control":1}"#.to_owned() + &"]}".repeat(5000)
    );
    assert!(without_cache_control(&deep).len() <= deep.len());
    assert_eq!(
        without_cache_control("[\"cache_control\""),
        "[\"cache_control\""
    );
}
