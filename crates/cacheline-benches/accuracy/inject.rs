//! Turns appended and changes injected, each with the cause and place it must be named by.

use prompt_wire::engine::{CauseKind, Place};
use serde_json::{Value, json};

use super::Agent;
use prompt_core::ApiKind;

use super::synth::{self, Request, Rng, edit_text, text};

/// What an injected change must be named.
#[derive(Debug, Clone)]
pub struct Expected {
    /// The cause.
    pub kind: CauseKind,
    /// The place.
    pub place: Place,
    /// How it was made (for the findings).
    pub how: String,
}

/// The causes that can occur on an API (the others are left out of its column):
/// `prompt_cache_key` is OpenAI's; breakpoints and their lookback are Anthropic's; Gemini
/// documents no lifetime for its implicit cache, so expiry and a provider-side short read
/// cannot be told apart there (`unknown`); the Chat capture's model (qwen3-coder-plus) is
/// no provider the profile table knows, so no minimum and no lifetime are held against it.
pub fn applicable(api: ApiKind) -> Vec<CauseKind> {
    CauseKind::ALL
        .into_iter()
        .filter(|k| match k {
            CauseKind::CacheKeyChanged => matches!(api, ApiKind::OpenAiResponses | ApiKind::OpenAi),
            CauseKind::BreakpointMoved | CauseKind::LookbackExceeded => api == ApiKind::Anthropic,
            CauseKind::TtlExpired | CauseKind::ProviderSide => {
                matches!(api, ApiKind::Anthropic | ApiKind::OpenAiResponses)
            }
            CauseKind::BelowMinimum => api != ApiKind::OpenAi,
            _ => true,
        })
        .collect()
}

/// `prev` and one more turn, a few seconds later; its reply reports a full read of `prev`.
pub fn append_turn(api: ApiKind, rng: &mut Rng, prev: &Request, n: u64) -> Request {
    let mut next = prev.clone();
    next.text = None;
    let tools = synth::tool_names(api, &prev.body);
    let turn = synth::turn(api, rng, &tools, n);
    let markers = markers_of(api, prev);
    next.messages_mut(api).extend(turn);
    if api == ApiKind::Anthropic {
        synth::move_markers(next.messages_mut(api), markers);
    }
    next.ts = prev.ts.map(|t| t + rng.range(2, 120) as f64);
    next.usage = Some((next.tokens(), prev.tokens()));
    next
}

fn markers_of(api: ApiKind, r: &Request) -> usize {
    if api == ApiKind::Anthropic {
        synth::message_markers(r.messages(api)).max(1)
    } else {
        0
    }
}

/// The request `next` (one append-only turn after `prev`) with a change of `kind` injected
/// at a random place and size, the predecessor to send before it, and what it must be named.
/// `None` when the session has no place for it (too few messages).
pub fn inject(
    api: ApiKind,
    kind: CauseKind,
    rng: &mut Rng,
    prev: &Request,
    next: &Request,
    n: u64,
) -> Option<(Request, Request, Expected)> {
    let mut x = next.clone();
    let mut pred = prev.clone();
    let np = prev.messages(api).len();
    let ns = synth::system_messages(api, prev.messages(api));
    let short = |x: &mut Request, rng: &mut Rng, prev: &Request| {
        let f = rng.below(60) as u64;
        x.usage = Some((x.tokens(), prev.tokens() * f / 100));
    };
    // A break reads nothing of what changed: the reply reports no read.
    x.usage = Some((x.tokens(), 0));
    let (place, how) = match kind {
        CauseKind::ColdStart => {
            x.session = format!("new-{n}");
            (Place::Request, "a new session".to_owned())
        }
        CauseKind::ModelChanged => {
            let other = with_other_model(api, &mut x)?;
            (Place::Model, format!("model → {other}"))
        }
        CauseKind::CacheKeyChanged => {
            let key = format!("bench-{:x}", rng.next_u64());
            synth::object(&mut x.body).insert("prompt_cache_key".into(), json!(key));
            (Place::CacheKey, "another prompt_cache_key".to_owned())
        }
        CauseKind::HeaderOrParamChanged => header_or_param(api, rng, &mut x)?,
        CauseKind::ToolsChanged => tools_changed(api, rng, &mut x, n)?,
        CauseKind::SystemChanged => system_changed(api, rng, &mut x, ns)?,
        CauseKind::InsertAboveHistory => {
            let i = rng.pick(ns, np.checked_sub(1))?;
            let count = rng.range(1, 3);
            let tools = synth::tool_names(api, &x.body);
            let mut new = synth::turn(api, rng, &tools, n);
            new.extend(synth::turn(api, rng, &tools, n + 1));
            new.truncate(count);
            let m = x.messages_mut(api);
            for (k, v) in new.into_iter().enumerate() {
                m.insert(i + k, v);
            }
            (
                Place::Message {
                    index: i,
                    block: None,
                },
                format!("{count} message(s) inserted at {i}"),
            )
        }
        CauseKind::EditInPlace => {
            let mut tries = 0;
            loop {
                tries += 1;
                if tries > 20 {
                    return None;
                }
                let i = rng.pick(ns, np.checked_sub(1))?;
                let m = &mut x.messages_mut(api)[i];
                let leaves = synth::text_leaves(api, m);
                if leaves.is_empty() {
                    continue;
                }
                let (pointer, block) = leaves[rng.below(leaves.len())].clone();
                let Some(Value::String(s)) = m.pointer_mut(&pointer) else {
                    continue;
                };
                *s = edit_text(rng, s);
                break (
                    Place::Message { index: i, block },
                    format!("message {i} edited at {pointer}"),
                );
            }
        }
        CauseKind::Removed => {
            let i = rng.pick(ns, np.checked_sub(2))?;
            x.messages_mut(api).remove(i);
            (
                Place::Message {
                    index: i,
                    block: None,
                },
                format!("message {i} removed"),
            )
        }
        CauseKind::Reorder => {
            let i = rng.pick(ns, np.checked_sub(2))?;
            x.messages_mut(api).swap(i, i + 1);
            (
                Place::Message {
                    index: i,
                    block: None,
                },
                format!("messages {i} and {} swapped", i + 1),
            )
        }
        CauseKind::Compaction => {
            let s = rng.pick(ns, np.checked_sub(4))?;
            let summary = match api {
                ApiKind::Anthropic => json!({"role": "user", "content": [{"type": "text",
                    "text": format!("Summary of the conversation so far: {}", { let n = synth::size(rng); text(rng, n) })}]}),
                ApiKind::OpenAiResponses => {
                    json!({"type": "message", "role": "user", "content": [{"type": "input_text",
                    "text": format!("Summary of the conversation so far: {}", { let n = synth::size(rng); text(rng, n) })}]})
                }
                ApiKind::Gemini => json!({"role": "user", "parts": [{"text":
                    format!("Summary of the conversation so far: {}", { let n = synth::size(rng); text(rng, n) })}]}),
                ApiKind::OpenAi | ApiKind::LlamaCpp => json!({"role": "user", "content":
                    format!("Summary of the conversation so far: {}", { let n = synth::size(rng); text(rng, n) })}),
            };
            let m = x.messages_mut(api);
            m.splice(s..np, [summary]);
            if api == ApiKind::Anthropic {
                let markers = markers_of(api, prev);
                synth::move_markers(x.messages_mut(api), markers);
            }
            (
                Place::Message {
                    index: s,
                    block: None,
                },
                format!("messages {s}..{np} replaced by a summary"),
            )
        }
        CauseKind::TailDropped => {
            let d = rng.range(1, 3);
            let at = np.checked_sub(d).filter(|&a| a > ns)?;
            x.messages_mut(api).drain(at..np);
            (
                Place::Message {
                    index: at,
                    block: None,
                },
                format!("the predecessor's last {d} message(s) not carried over"),
            )
        }
        CauseKind::SerializationOnly => {
            let i = rng.pick(ns, np.checked_sub(1))?;
            let how = reserialize(api, rng, &mut x, i);
            x.usage = Some((x.tokens(), prev.tokens()));
            (
                Place::Message {
                    index: i,
                    block: None,
                },
                how,
            )
        }
        CauseKind::BreakpointMoved => {
            // The messages' breakpoints put on one earlier message than the predecessor's.
            let first = prev
                .messages(api)
                .iter()
                .position(|m| synth::message_markers(std::slice::from_ref(m)) > 0)?;
            let at = rng.below(first.max(1));
            synth::move_markers(x.messages_mut(api), 0);
            synth::mark(&mut x.messages_mut(api)[at]);
            (
                Place::Request,
                format!("the breakpoint put on message {at}"),
            )
        }
        CauseKind::LookbackExceeded => {
            let tools = synth::tool_names(api, &x.body);
            let turns = rng.range(12, 16);
            for t in 0..turns {
                let turn = synth::turn(api, rng, &tools, n * 100 + t as u64);
                x.messages_mut(api).extend(turn);
            }
            let markers = markers_of(api, prev);
            synth::move_markers(x.messages_mut(api), markers);
            x.usage = Some((x.tokens(), 0));
            (
                Place::Request,
                format!("{turns} turns appended before the next breakpoint"),
            )
        }
        CauseKind::BelowMinimum => {
            pred = small(api, rng, prev, n);
            x = append_turn(api, rng, &pred, n + 1);
            for m in x.messages_mut(api).iter_mut().skip(2) {
                cut_texts(m, 200);
            }
            x.usage = Some((x.tokens(), 0));
            (Place::Request, "a small conversation (no tools)".to_owned())
        }
        CauseKind::TtlExpired => {
            x.ts = prev.ts.map(|t| t + rng.range(3_601, 14_400) as f64);
            short(&mut x, rng, prev);
            (Place::Request, "a gap over the lifetime".to_owned())
        }
        CauseKind::ProviderSide => {
            x.ts = prev.ts.map(|t| t + rng.range(1, 250) as f64);
            short(&mut x, rng, prev);
            (
                Place::Request,
                "a short read within the lifetime".to_owned(),
            )
        }
        CauseKind::Unknown => {
            if matches!(api, ApiKind::Anthropic | ApiKind::OpenAiResponses) {
                x.ts = None;
            }
            short(&mut x, rng, prev);
            (Place::Request, "a short read, no timing to tell".to_owned())
        }
    };
    Some((pred, x, Expected { kind, place, how }))
}

fn header_or_param(api: ApiKind, rng: &mut Rng, x: &mut Request) -> Option<(Place, String)> {
    let body = synth::object(&mut x.body);
    let pick = rng.below(3);
    let param = |name: &str| Place::Parameter { name: name.into() };
    Some(match (api, pick) {
        (ApiKind::Anthropic, 0) => {
            let old = x
                .headers
                .get("anthropic-beta")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let beta = format!("bench-feature-{}", rng.range(1, 999));
            let new = if old.is_empty() {
                beta
            } else {
                format!("{old},{beta}")
            };
            x.headers.insert("anthropic-beta".into(), json!(new));
            (
                Place::Header {
                    name: "anthropic-beta".into(),
                },
                "anthropic-beta gains a flag".into(),
            )
        }
        (ApiKind::Anthropic, 1) => {
            let v = if body.get("tool_choice") == Some(&json!({"type": "any"})) {
                json!({"type": "auto"})
            } else {
                json!({"type": "any"})
            };
            body.insert("tool_choice".into(), v);
            (param("tool_choice"), "tool_choice".into())
        }
        (ApiKind::Anthropic, _) => {
            let budget = rng.range(1_024, 32_000);
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
            (param("thinking"), format!("thinking budget {budget}"))
        }
        (ApiKind::OpenAiResponses, 0) => {
            let r = synth::object(body.entry("reasoning").or_insert(json!({})));
            let v = if r.get("effort") == Some(&json!("high")) {
                "low"
            } else {
                "high"
            };
            r.insert("effort".into(), json!(v));
            (param("reasoning.effort"), format!("reasoning.effort {v}"))
        }
        (ApiKind::OpenAiResponses, 1) => {
            let t = synth::object(body.entry("text").or_insert(json!({})));
            let v = if t.get("verbosity") == Some(&json!("low")) {
                "high"
            } else {
                "low"
            };
            t.insert("verbosity".into(), json!(v));
            (param("text.verbosity"), format!("text.verbosity {v}"))
        }
        (ApiKind::OpenAiResponses, _) => {
            body.insert("service_tier".into(), json!("priority"));
            (param("service_tier"), "service_tier priority".into())
        }
        (ApiKind::OpenAi | ApiKind::LlamaCpp, 0) => {
            body.insert("tool_choice".into(), json!("required"));
            (param("tool_choice"), "tool_choice required".into())
        }
        (ApiKind::OpenAi | ApiKind::LlamaCpp, 1) => {
            body.insert("reasoning_effort".into(), json!("high"));
            (param("reasoning_effort"), "reasoning_effort high".into())
        }
        (ApiKind::OpenAi | ApiKind::LlamaCpp, _) => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
            (param("response_format"), "response_format".into())
        }
        (ApiKind::Gemini, _) => {
            let mode = ["ANY", "NONE", "VALIDATED"][pick];
            body.insert(
                "toolConfig".into(),
                json!({"functionCallingConfig": {"mode": mode}}),
            );
            (param("toolConfig"), format!("toolConfig {mode}"))
        }
    })
}

fn tools_changed(api: ApiKind, rng: &mut Rng, x: &mut Request, n: u64) -> Option<(Place, String)> {
    let names = synth::tool_names(api, &x.body);
    let tools = synth::tools_mut(api, &mut x.body)?;
    let len = tools.len();
    if len < 2 {
        return None;
    }
    fn name_of(api: ApiKind, t: &Value) -> Option<&str> {
        match api {
            ApiKind::OpenAi | ApiKind::LlamaCpp => {
                t.pointer("/function/name").and_then(Value::as_str)
            }
            _ => t.get("name").and_then(Value::as_str),
        }
    }
    Some(match rng.below(4) {
        0 => {
            let named: Vec<usize> = (0..len)
                .filter(|&i| name_of(api, &tools[i]).is_some())
                .collect();
            let mut t = tools[*named.get(rng.below(named.len()))?].clone();
            let name = format!("bench_tool_{n}");
            let desc = {
                let n = synth::size(rng);
                text(rng, n)
            };
            let o = match api {
                ApiKind::OpenAi | ApiKind::LlamaCpp => {
                    synth::object(synth::object(&mut t).entry("function").or_insert(json!({})))
                }
                _ => synth::object(&mut t),
            };
            o.insert("name".into(), json!(name));
            o.insert("description".into(), json!(desc));
            let at = rng.range(0, len);
            tools.insert(at, t);
            (Place::Tools { index: at }, format!("tool added at {at}"))
        }
        1 => {
            let at = rng.below(len);
            tools.remove(at);
            (
                Place::Tools { index: at },
                format!("tool {} removed", names[at]),
            )
        }
        2 => {
            let at = rng.below(len);
            let t = &mut tools[at];
            let o = match api {
                ApiKind::OpenAi | ApiKind::LlamaCpp => {
                    synth::object(synth::object(t).entry("function").or_insert(json!({})))
                }
                _ => synth::object(t),
            };
            let old = o
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let new = edit_text(rng, &old);
            o.insert("description".into(), json!(new));
            (
                Place::Tools { index: at },
                format!("tool {} edited", names[at]),
            )
        }
        _ => {
            let at = rng.below(len - 1);
            if names[at] == names[at + 1] {
                return None;
            }
            tools.swap(at, at + 1);
            (
                Place::Tools { index: at },
                format!("tools {at} and {} swapped", at + 1),
            )
        }
    })
}

fn system_changed(
    api: ApiKind,
    rng: &mut Rng,
    x: &mut Request,
    ns: usize,
) -> Option<(Place, String)> {
    match api {
        ApiKind::Anthropic => {
            let body = synth::object(&mut x.body);
            match body.get_mut("system")? {
                Value::String(s) => {
                    *s = edit_text(rng, s);
                    Some((Place::System { block: 0 }, "system edited".into()))
                }
                Value::Array(blocks) => {
                    let b = rng.below(blocks.len());
                    let Some(Value::String(s)) = blocks[b].get_mut("text") else {
                        return None;
                    };
                    *s = edit_text(rng, s);
                    Some((
                        Place::System { block: b },
                        format!("system block {b} edited"),
                    ))
                }
                _ => None,
            }
        }
        ApiKind::Gemini => {
            let parts = x
                .body
                .pointer_mut("/systemInstruction/parts")?
                .as_array_mut()?;
            let b = rng.below(parts.len());
            let Some(Value::String(s)) = parts[b].get_mut("text") else {
                return None;
            };
            *s = edit_text(rng, s);
            Some((
                Place::System { block: b },
                format!("system part {b} edited"),
            ))
        }
        ApiKind::OpenAiResponses | ApiKind::OpenAi | ApiKind::LlamaCpp => {
            if let Some(Value::String(s)) = x.body.get_mut("instructions") {
                *s = edit_text(rng, s);
                return Some((Place::System { block: 0 }, "instructions edited".into()));
            }
            if ns == 0 {
                return None;
            }
            let b = rng.below(ns);
            let m = &mut x.messages_mut(api)[b];
            let leaves = synth::text_leaves(api, m);
            let (pointer, _) = leaves.get(rng.below(leaves.len()))?.clone();
            let Some(Value::String(s)) = m.pointer_mut(&pointer) else {
                return None;
            };
            *s = edit_text(rng, s);
            Some((
                Place::System { block: b },
                format!("system message {b} edited"),
            ))
        }
    }
}

/// The body of `x` with message `i` sent in another form that means the same: Anthropic's
/// one text block as a string (or a string as its block), its keys in another order, or
/// other whitespace.
fn reserialize(api: ApiKind, rng: &mut Rng, x: &mut Request, i: usize) -> String {
    let key = synth::messages_key(api);
    let mut how = String::new();
    if api == ApiKind::Anthropic && rng.chance(0.4) {
        let m = &mut x.messages_mut(api)[i];
        let content = m.get("content").cloned();
        match content {
            Some(Value::String(s)) => {
                m["content"] = json!([{"type": "text", "text": s}]);
                how = format!("message {i}: its string sent as one text block");
            }
            Some(Value::Array(a))
                if a.len() == 1
                    && a[0].get("type") == Some(&json!("text"))
                    && a[0].get("cache_control").is_none()
                    && a[0].as_object().is_some_and(|o| o.len() == 2) =>
            {
                m["content"] = a[0]["text"].clone();
                how = format!("message {i}: its one text block sent as a string");
            }
            _ => {}
        }
        if !how.is_empty() {
            return how;
        }
    }
    let messages = x.messages(api).to_vec();
    let mut items: Vec<String> = messages
        .iter()
        .map(|m| serde_json::to_string(m).unwrap_or_default())
        .collect();
    if rng.chance(0.5) {
        items[i] = reversed(&messages[i]);
        how = format!("message {i}: its keys in another order");
    } else {
        items[i] = serde_json::to_string_pretty(&messages[i]).unwrap_or_default();
        how = format!("message {i}: other whitespace");
    }
    let mut body = x.body.clone();
    let placeholder = "\u{0}bench-messages\u{0}";
    synth::object(&mut body).insert(key.into(), json!(placeholder));
    let outer = serde_json::to_string(&body).unwrap_or_default();
    let quoted = serde_json::to_string(placeholder).unwrap_or_default();
    x.text = Some(outer.replacen(&quoted, &format!("[{}]", items.join(",")), 1));
    how
}

/// A message's JSON with its top-level keys in reverse order.
fn reversed(m: &Value) -> String {
    match m.as_object() {
        Some(o) => {
            let parts: Vec<String> = o
                .iter()
                .rev()
                .map(|(k, v)| {
                    format!(
                        "{}:{}",
                        serde_json::to_string(k).unwrap_or_default(),
                        serde_json::to_string(v).unwrap_or_default()
                    )
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        None => serde_json::to_string(m).unwrap_or_default(),
    }
}

/// Every string of a message cut to `max` bytes (on a character boundary).
fn cut_texts(v: &mut Value, max: usize) {
    match v {
        Value::String(s) if s.len() > max => {
            let end = prompt_core::input::head(s, max).len();
            s.truncate(end);
        }
        Value::Array(a) => a.iter_mut().for_each(|x| cut_texts(x, max)),
        Value::Object(o) => o.values_mut().for_each(|x| cut_texts(x, max)),
        _ => {}
    }
}

/// A small conversation of the same agent (its title or classifier shape): no tools, a short
/// system prompt, a first user message and one short exchange.
/// `x` sent to another model of its provider (in the body, or Gemini's path): which one.
fn with_other_model(api: ApiKind, x: &mut Request) -> Option<&'static str> {
    let other = match api {
        ApiKind::Anthropic => "claude-haiku-4-5",
        ApiKind::OpenAiResponses => "gpt-5-mini",
        ApiKind::OpenAi | ApiKind::LlamaCpp => "qwen3-coder-flash",
        ApiKind::Gemini => "gemini-2.5-pro",
    };
    if api == ApiKind::Gemini {
        let model = prompt_wire::engine::model_in_path(&x.path)?.to_owned();
        x.path = x.path.replace(&model, other);
    } else {
        synth::object(&mut x.body).insert("model".into(), json!(other));
    }
    Some(other)
}

/// A side call of `prev`'s session on another lane, as agents make them between turns (a
/// title, a classifier): a small conversation of its own, without tools, to another model.
pub fn side_call(api: ApiKind, rng: &mut Rng, prev: &Request, n: u64) -> Option<Request> {
    let mut r = small(api, rng, prev, n);
    with_other_model(api, &mut r)?;
    r.ts = prev.ts.map(|t| t + 1.0);
    Some(r)
}

fn small(api: ApiKind, rng: &mut Rng, prev: &Request, n: u64) -> Request {
    let mut r = prev.clone();
    r.text = None;
    let system = {
        let n = rng.range(40, 400);
        text(rng, n)
    };
    let body = synth::object(&mut r.body);
    body.remove("tools");
    body.remove("tool_choice");
    match api {
        ApiKind::Anthropic => {
            body.insert("system".into(), json!(system));
        }
        ApiKind::Gemini => {
            body.insert(
                "systemInstruction".into(),
                json!({"parts": [{"text": system}]}),
            );
        }
        ApiKind::OpenAiResponses | ApiKind::OpenAi | ApiKind::LlamaCpp => {
            body.remove("instructions");
        }
    }
    let first = {
        let n = rng.range(40, 1_500);
        text(rng, n)
    };
    let first = match api {
        ApiKind::Anthropic => json!({"role": "user", "content": [{"type": "text", "text": first}]}),
        ApiKind::OpenAiResponses => json!({"type": "message", "role": "user",
                                 "content": [{"type": "input_text", "text": first}]}),
        ApiKind::Gemini => json!({"role": "user", "parts": [{"text": first}]}),
        ApiKind::OpenAi | ApiKind::LlamaCpp => json!({"role": "user", "content": first}),
    };
    let mut messages = Vec::new();
    match api {
        ApiKind::OpenAiResponses => messages.push(json!({"type": "message", "role": "developer",
            "content": [{"type": "input_text", "text": system}]})),
        ApiKind::OpenAi | ApiKind::LlamaCpp => {
            messages.push(json!({"role": "system", "content": system}))
        }
        _ => {}
    }
    messages.push(first);
    let mut turn = synth::turn(api, rng, &[], n);
    for m in &mut turn {
        cut_texts(m, 200);
    }
    messages.extend(turn);
    *r.messages_mut(api) = messages;
    if api == ApiKind::Anthropic {
        synth::move_markers(r.messages_mut(api), 1);
    }
    r.usage = Some((r.tokens(), 0));
    r
}

/// One request of the concurrency set and the index of its true predecessor in the script
/// (`None`: it starts a conversation, nothing to blame).
#[derive(Debug, Clone)]
pub struct Step {
    /// What it is.
    pub kind: &'static str,
    /// The request.
    pub request: Request,
    /// Its true predecessor's index.
    pub truth: Option<usize>,
}

/// A main conversation of `agent` on one session, interleaved with a subagent (another
/// system prompt and tools, its own conversation), parallel side calls forked from the main
/// conversation, title and classifier calls (no tools, small prompts) and `count_tokens`.
pub fn concurrent_session(agent: &Agent, rng: &mut Rng, s: usize) -> Vec<Step> {
    let api = ApiKind::Anthropic;
    let base = &agent.requests[rng.below(agent.requests.len())];
    let mut main = base.clone();
    main.session = format!("{}-concurrent-{s}", agent.name);
    main.ts = Some(base.ts.unwrap_or(1.8e9) + 86_400.0 * (1_000 + s) as f64);
    let markers = synth::message_markers(main.messages(api)).max(1);
    synth::move_markers(main.messages_mut(api), markers);
    main.usage = Some((main.tokens(), 0));
    let mut steps = vec![Step {
        kind: "main conversation",
        request: main.clone(),
        truth: None,
    }];
    let mut last_main = 0usize;
    let mut sub: Option<(Request, usize)> = None;
    let mut last_count: Option<usize> = None;
    let mut n = (s as u64 + 1) * 1_000_000;
    let mut ts = main.ts.unwrap_or(0.0);
    let mut tick = |rng: &mut Rng| {
        ts += rng.range(1, 20) as f64;
        ts
    };
    for _ in 0..12 {
        n += 10;
        let mut side: Vec<Step> = Vec::new();
        match rng.below(6) {
            0 => {
                // The subagent: its own system prompt and tools, a conversation of its own.
                let (req, truth) = match sub.take() {
                    Some((prev, at)) => (append_turn(api, rng, &prev, n), Some(at)),
                    None => {
                        let mut r = small(api, rng, &main, n);
                        let tools = main.body.get("tools").cloned().unwrap_or(json!([]));
                        let keep: Vec<Value> = tools
                            .as_array()
                            .map(|a| a.iter().take(3).cloned().collect())
                            .unwrap_or_default();
                        synth::object(&mut r.body).insert("tools".into(), Value::Array(keep));
                        // Its first request: the task, no reply yet.
                        r.messages_mut(api).truncate(1);
                        synth::move_markers(r.messages_mut(api), 1);
                        (r, None)
                    }
                };
                side.push(Step {
                    kind: "subagent",
                    request: req,
                    truth,
                });
            }
            1 => {
                // Two side calls forked from the main conversation at once.
                for k in 0..2 {
                    let mut r = main.clone();
                    let q = json!({"role": "user", "content": [{"type": "text",
                        "text": format!("Side question {k}: {}", { let n = synth::size(rng); text(rng, n) })}]});
                    r.messages_mut(api).push(q);
                    synth::move_markers(r.messages_mut(api), markers);
                    // Its reply reports a full read of the main request's prefix.
                    r.usage = Some((r.tokens(), main.tokens()));
                    side.push(Step {
                        kind: "parallel side call",
                        request: r,
                        truth: Some(last_main),
                    });
                }
            }
            2 => {
                let mut r = small(api, rng, &main, n);
                r.messages_mut(api).truncate(1);
                synth::object(&mut r.body).insert("model".into(), json!("claude-haiku-4-5"));
                side.push(Step {
                    kind: "title call",
                    request: r,
                    truth: None,
                });
            }
            3 => {
                let mut r = small(api, rng, &main, n);
                r.messages_mut(api).truncate(1);
                side.push(Step {
                    kind: "classifier call",
                    request: r,
                    truth: None,
                });
            }
            4 => {
                let mut r = main.clone();
                r.path = "/v1/messages/count_tokens".into();
                let body = synth::object(&mut r.body);
                for k in ["max_tokens", "stream", "metadata", "context_management"] {
                    body.remove(k);
                }
                r.usage = None;
                side.push(Step {
                    kind: "count_tokens",
                    request: r,
                    truth: last_count,
                });
            }
            _ => {}
        }
        for mut step in side {
            step.request.session = main.session.clone();
            step.request.ts = Some(tick(rng));
            let at = steps.len();
            match step.kind {
                "subagent" => sub = Some((step.request.clone(), at)),
                "count_tokens" => last_count = Some(at),
                _ => {}
            }
            steps.push(step);
        }
        // The main conversation goes on from its own last request.
        let mut next = append_turn(api, rng, &main, n + 5);
        next.ts = Some(tick(rng));
        steps.push(Step {
            kind: "main conversation",
            request: next.clone(),
            truth: Some(last_main),
        });
        last_main = steps.len() - 1;
        main = next;
    }
    steps
}
