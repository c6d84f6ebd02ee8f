//! OpenAI Chat Completions chunks (`chat.completion.chunk`), also llama.cpp's server's.
//!
//! Each event is a chunk whose `choices[0].delta` carries a piece of the message: `role`,
//! `content`, `reasoning_content` (llama.cpp, DeepSeek), `refusal`, `tool_calls[]` joined by
//! their `index` (a call's `id` and `function.name` come with its first piece, its
//! `function.arguments` in fragments, appended). `finish_reason` ends the choice; with
//! `stream_options.include_usage` a last chunk with no choices carries `usage` (llama.cpp
//! adds `timings`); `data: [DONE]` ends the stream.

use prompt_core::ApiKind;

use super::{At, End, Fold, Limit, Out, StreamError, StreamEvent, capped};
use crate::raw::push_quoted;
use crate::reply::{self, Ctx, UsageReport};
use prompt_core::profile::Provider;

/// Which server's whole reply the message is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// OpenAI's chat completion object.
    OpenAi,
    /// llama.cpp's `common_chat_msg::to_json_oaicompat`.
    LlamaCpp,
}

#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
    /// Whether `ToolCallStarted` was shown (once the name is known).
    started: bool,
}

#[derive(Debug)]
pub(crate) struct Chat {
    dialect: Dialect,
    /// `None` until a string `content` came.
    content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    annotations: Vec<String>,
    calls: Vec<Call>,
    finish_reason: Option<String>,
    usage: Option<String>,
    timings: Option<String>,
    done: bool,
    /// The chunks' `id`, as the whole reply's.
    id: Option<String>,
}

impl Fold for Chat {
    fn on_event(&mut self, at: &At<'_>, data: &str, out: &mut Out<'_>) -> Result<(), StreamError> {
        if self.done {
            return Err(at.out_of_order("an event after [DONE]"));
        }
        if data == "[DONE]" {
            if self.finish_reason.is_none() {
                return Err(at.out_of_order("[DONE] before any finish_reason"));
            }
            self.done = true;
            return Ok(());
        }
        let chunk = at.object(data)?;
        at.refuse_error(&chunk)?;
        if self.id.is_none() {
            self.id = chunk.str("id").map(|id| id.into_owned());
        }
        for (i, choice) in at.elements(&chunk, "choices", "")?.into_iter().enumerate() {
            let path = format!("choices[{i}]");
            let choice =
                crate::raw::Object::of(choice).map_err(|p| at.malformed(&path, p.to_string()))?;
            // The whole reply records `choices[0]`, the choice of index 0.
            if at.index(&choice, "index", &path)?.is_some_and(|n| n != 0) {
                continue;
            }
            if let Some(delta) = at.child(&choice, "delta", &path)? {
                self.delta(at, &delta, &format!("{path}.delta"), out)?;
            }
            if let Some(reason) = at.text(&choice, "finish_reason", &path)? {
                if self.finish_reason.is_some() {
                    return Err(at.out_of_order("a second finish_reason"));
                }
                self.finish_reason = Some(reason.into_owned());
                for (index, call) in self.calls.iter().enumerate() {
                    out.push(StreamEvent::ToolCallFinished {
                        index,
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                    });
                }
            }
        }
        let mut usage_changed = false;
        if let Some(usage) = chunk.get("usage").filter(|u| !crate::raw::is_null(u)) {
            self.usage = Some(usage.get().to_owned());
            usage_changed = true;
        }
        if self.dialect == Dialect::LlamaCpp
            && let Some(timings) = chunk.get("timings").filter(|t| !crate::raw::is_null(t))
        {
            self.timings = Some(timings.get().to_owned());
            usage_changed = true;
        }
        if usage_changed && let Some(report) = self.usage_report() {
            out.push(StreamEvent::Usage(report));
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    /// The reply the stream amounts to: its message written as the whole reply's.
    fn finish(self: Box<Self>, ctx: &Ctx, _salt: u64) -> End {
        let this = *self;
        if !this.done {
            return End::CutOff("data: [DONE]");
        }
        let usage = this.usage_report();
        let message = match this.dialect {
            Dialect::OpenAi => this.openai_message(),
            Dialect::LlamaCpp => this.llama_cpp_message(),
        };
        let id = this.id;
        End::Reply(
            capped(ctx, message)
                .and_then(|m| reply::chat_reply(ctx, &m, this.finish_reason, usage))
                .map(|mut r| {
                    r.id = id;
                    r
                }),
        )
    }
}

impl Chat {
    pub(crate) fn new(api: ApiKind) -> Self {
        Self {
            dialect: if api == ApiKind::LlamaCpp {
                Dialect::LlamaCpp
            } else {
                Dialect::OpenAi
            },
            content: None,
            reasoning: None,
            refusal: None,
            annotations: Vec::new(),
            calls: Vec::new(),
            finish_reason: None,
            usage: None,
            timings: None,
            done: false,
            id: None,
        }
    }

    fn usage_report(&self) -> Option<UsageReport> {
        let timings = match self.dialect {
            Dialect::LlamaCpp => self.timings.as_deref(),
            Dialect::OpenAi => None,
        };
        timings
            .and_then(|t| UsageReport::of(Provider::LlamaCpp, t))
            .or_else(|| {
                self.usage
                    .as_deref()
                    .and_then(|u| UsageReport::of(Provider::OpenAi, u))
            })
    }

    fn delta(
        &mut self,
        at: &At<'_>,
        delta: &crate::raw::Object<'_>,
        path: &str,
        out: &mut Out<'_>,
    ) -> Result<(), StreamError> {
        let late = |what: &str| at.out_of_order(format!("{what} after the finish_reason"));
        if let Some(role) = at.text(delta, "role", path)?
            && role != "assistant"
        {
            return Err(at.malformed(
                format!("{path}.role"),
                format!(
                    "\"{}\", not \"assistant\"",
                    prompt_core::input::excerpt(&role, 64)
                ),
            ));
        }
        if let Some(text) = at.text(delta, "content", path)? {
            if self.finish_reason.is_some() && !text.is_empty() {
                return Err(late("content"));
            }
            self.content.get_or_insert_default().push_str(&text);
            out.text(&text);
        }
        if let Some(text) = at.text(delta, "reasoning_content", path)? {
            if self.finish_reason.is_some() && !text.is_empty() {
                return Err(late("reasoning_content"));
            }
            self.reasoning.get_or_insert_default().push_str(&text);
            out.reasoning(&text);
        }
        if self.dialect == Dialect::OpenAi {
            if let Some(text) = at.text(delta, "refusal", path)? {
                self.refusal.get_or_insert_default().push_str(&text);
            }
            for annotation in at.elements(delta, "annotations", path)? {
                self.annotations.push(annotation.get().to_owned());
            }
        }
        let calls = at.elements(delta, "tool_calls", path)?;
        if !calls.is_empty() && self.finish_reason.is_some() {
            return Err(late("tool_calls"));
        }
        for (i, call) in calls.into_iter().enumerate() {
            let path = format!("{path}.tool_calls[{i}]");
            let call =
                crate::raw::Object::of(call).map_err(|p| at.malformed(&path, p.to_string()))?;
            self.call(at, &call, &path, out)?;
        }
        Ok(())
    }

    fn call(
        &mut self,
        at: &At<'_>,
        piece: &crate::raw::Object<'_>,
        path: &str,
        out: &mut Out<'_>,
    ) -> Result<(), StreamError> {
        let found = at
            .index(piece, "index", path)?
            .ok_or_else(|| at.malformed(format!("{path}.index"), "missing"))?;
        let next = self.calls.len();
        let index = match usize::try_from(found) {
            Ok(index) if index < next => index,
            Ok(index) if index == next => {
                if next >= Limit::ToolCalls.max() {
                    return Err(at.too_many(Limit::ToolCalls));
                }
                self.calls.push(Call::default());
                index
            }
            _ => return Err(at.jump("tool call", next, found)),
        };
        let call = &mut self.calls[index];
        // llama.cpp sends a call's id and name again, whole, when its parser sees them grow.
        if let Some(id) = at.text(piece, "id", path)?.filter(|id| !id.is_empty()) {
            call.id = id.into_owned();
        }
        let mut fragment = String::new();
        if let Some(function) = at.child(piece, "function", path)? {
            let path = format!("{path}.function");
            if let Some(name) = at.text(&function, "name", &path)?.filter(|n| !n.is_empty()) {
                call.name = name.into_owned();
            }
            if let Some(arguments) = at.text(&function, "arguments", &path)? {
                call.arguments.push_str(&arguments);
                fragment = arguments.into_owned();
            }
        }
        if !call.started && !call.name.is_empty() {
            call.started = true;
            out.push(StreamEvent::ToolCallStarted {
                index,
                id: (!call.id.is_empty()).then(|| call.id.clone()),
                name: call.name.clone(),
            });
            // What came before the name, at once.
            fragment = call.arguments.clone();
        }
        if call.started && !fragment.is_empty() {
            out.push(StreamEvent::ToolCallArgumentsDelta {
                index,
                delta: fragment,
            });
        }
        Ok(())
    }

    /// The message of OpenAI's chat completion object: `role`, `content` (null without
    /// text), `reasoning_content` when streamed, `tool_calls` when any, `refusal`,
    /// `annotations`.
    fn openai_message(&self) -> String {
        let mut out = String::from(r#"{"role":"assistant","content":"#);
        push_optional(&mut out, self.content.as_deref());
        self.push_reasoning_and_calls(&mut out, self.reasoning.as_deref(), |out, call| {
            reply::push_openai_call(out, &call.id, &call.name, &call.arguments);
        });
        out.push_str(r#","refusal":"#);
        push_optional(&mut out, self.refusal.as_deref());
        out.push_str(r#","annotations":["#);
        out.push_str(&self.annotations.join(","));
        out.push_str("]}");
        out
    }

    /// llama.cpp's message (`to_json_oaicompat` in its `common/chat.cpp`): `role`,
    /// `content` (`""` without text, never null), `reasoning_content` when not empty,
    /// `tool_calls` when any, each `type`, `function`, then `id` when it has one.
    fn llama_cpp_message(&self) -> String {
        let mut out = String::from(r#"{"role":"assistant","content":"#);
        push_quoted(&mut out, self.content.as_deref().unwrap_or_default());
        let reasoning = self.reasoning.as_deref().filter(|r| !r.is_empty());
        self.push_reasoning_and_calls(&mut out, reasoning, |out, call| {
            out.push_str(r#"{"type":"function","function":{"name":"#);
            push_quoted(out, &call.name);
            out.push_str(r#","arguments":"#);
            push_quoted(out, &call.arguments);
            out.push('}');
            if !call.id.is_empty() {
                out.push_str(r#","id":"#);
                push_quoted(out, &call.id);
            }
            out.push('}');
        });
        out.push('}');
        out
    }

    /// Both dialects' `,"reasoning_content":…` where there is `reasoning`, then
    /// `,"tool_calls":[…]` when there are calls, each written by `call`.
    fn push_reasoning_and_calls(
        &self,
        out: &mut String,
        reasoning: Option<&str>,
        call: fn(&mut String, &Call),
    ) {
        if let Some(reasoning) = reasoning {
            out.push_str(r#","reasoning_content":"#);
            push_quoted(out, reasoning);
        }
        if !self.calls.is_empty() {
            out.push_str(r#","tool_calls":["#);
            for (i, c) in self.calls.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                call(out, c);
            }
            out.push(']');
        }
    }
}

fn push_optional(out: &mut String, text: Option<&str>) {
    match text {
        Some(text) => push_quoted(out, text),
        None => out.push_str("null"),
    }
}
