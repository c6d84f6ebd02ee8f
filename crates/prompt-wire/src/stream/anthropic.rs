//! Anthropic Messages events.
//!
//! `message_start` opens the message (with its first usage); `content_block_start` opens a
//! block at the next index, with the block's first form; `content_block_delta` grows it
//! (`text_delta`, `thinking_delta`, `signature_delta`, `input_json_delta`,
//! `citations_delta`); `content_block_stop` closes it; `message_delta` gives the stop reason
//! and the final usage; `message_stop` ends the stream. `ping` is nothing, `error` is the
//! provider's error. Anthropic closes each block before the next opens; llama.cpp's server
//! keeps every block open until the end (and sends a `tool_use` start again when its parser
//! sees the name grow), so blocks are addressed by index and any open one may grow.

use super::{At, End, Fold, Limit, Out, StreamError, StreamEvent, capped, json};
use crate::raw::{self, Object, quote};
use crate::reply::{self, Ctx, UsageReport};
use prompt_core::profile::Provider;

#[derive(Debug)]
struct Block {
    /// The block as `content_block_start` carried it.
    start: String,
    kind: String,
    text: String,
    thinking: String,
    signature: Option<String>,
    /// The `partial_json` fragments, appended.
    input: Option<String>,
    citations: Vec<String>,
    open: bool,
    /// Its place among the reply's tool calls (`tool_use` blocks).
    call: Option<usize>,
    name: String,
}

impl Block {
    fn is_tool(&self) -> bool {
        self.kind.ends_with("tool_use")
    }

    /// The `input` the whole reply carries: the fragments as one compact JSON value (`{}`
    /// when they are not JSON, as llama.cpp's server writes it), or the start's when no
    /// fragment came.
    fn input(&self) -> String {
        match &self.input {
            Some(fragments) => json::compact(fragments).unwrap_or_else(|| "{}".to_owned()),
            None => Object::parse(&self.start)
                .ok()
                .and_then(|s| s.get("input").map(|i| i.get().to_owned()))
                .unwrap_or_else(|| "{}".to_owned()),
        }
    }

    /// The block as the whole reply carries it: its start with the streamed fields set.
    fn whole(&self) -> String {
        let text;
        let thinking;
        let signature;
        let input;
        let citations;
        let mut fields: Vec<(&str, &str)> = Vec::new();
        match self.kind.as_str() {
            "text" => {
                text = quote(&self.text);
                fields.push(("text", &text));
                if !self.citations.is_empty() {
                    citations = format!("[{}]", self.citations.join(","));
                    fields.push(("citations", &citations));
                }
            }
            "thinking" => {
                thinking = quote(&self.thinking);
                fields.push(("thinking", &thinking));
                if let Some(s) = &self.signature {
                    signature = quote(s);
                    fields.push(("signature", &signature));
                }
            }
            _ if self.is_tool() => {
                input = self.input();
                fields.push(("input", &input));
            }
            _ => return self.start.clone(),
        }
        match Object::parse(&self.start) {
            Ok(start) => json::with_fields(&start, &fields),
            Err(_) => self.start.clone(),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Anthropic {
    started: bool,
    /// `message_start`'s usage with `message_delta`'s fields set over it.
    usage: Option<String>,
    blocks: Vec<Block>,
    calls: usize,
    stop_reason: Option<String>,
    stopped: bool,
    /// `message_start`'s message `id`, as the whole reply's `id`.
    id: Option<String>,
    /// The cache diagnostics `message_start`'s message (or `message_delta`) carried, raw.
    diagnostics: Option<String>,
}

impl Fold for Anthropic {
    fn on_event(&mut self, at: &At<'_>, data: &str, out: &mut Out<'_>) -> Result<(), StreamError> {
        let event = at.object(data)?;
        let kind = at
            .text(&event, "type", "")?
            .ok_or_else(|| at.malformed("type", "missing"))?;
        let at = &At { kind: &kind, ..*at };
        if self.stopped {
            return Err(at.out_of_order("an event after message_stop"));
        }
        match kind.as_ref() {
            "ping" => return Ok(()),
            "error" => {
                let message = event.get("error").filter(|e| !raw::is_null(e)).map_or_else(
                    || "an error without a message".to_owned(),
                    reply::provider_message,
                );
                return Err(at.provider(message));
            }
            "message_start" => {
                if self.started {
                    return Err(at.out_of_order("a second message_start"));
                }
                let message = at
                    .child(&event, "message", "")?
                    .ok_or_else(|| at.malformed("message", "missing"))?;
                if let Some(role) = at.text(&message, "role", "message")?
                    && role != "assistant"
                {
                    return Err(at.malformed("message.role", "not \"assistant\""));
                }
                self.started = true;
                self.id = message.str("id").map(|id| id.into_owned());
                self.diagnostics = diagnostics_of(&message).or(self.diagnostics.take());
                if let Some(usage) = message.get("usage").filter(|u| u.get().starts_with('{')) {
                    self.usage = Some(usage.get().to_owned());
                    self.push_usage(out);
                }
                return Ok(());
            }
            _ => {}
        }
        if !self.started {
            return Err(at.out_of_order("an event before message_start"));
        }
        match kind.as_ref() {
            "content_block_start" => self.start(at, &event, out),
            "content_block_delta" => self.delta(at, &event, out),
            "content_block_stop" => {
                let index = self.open_block(at, &event)?;
                let block = &mut self.blocks[index];
                block.open = false;
                if let Some(call) = block.call {
                    out.push(StreamEvent::ToolCallFinished {
                        index: call,
                        name: block.name.clone(),
                        arguments: block.input(),
                    });
                }
                Ok(())
            }
            "message_delta" => {
                if let Some(diagnostics) = diagnostics_of(&event) {
                    self.diagnostics = Some(diagnostics);
                }
                if let Some(delta) = at.child(&event, "delta", "")?
                    && let Some(reason) = at.text(&delta, "stop_reason", "delta")?
                {
                    self.stop_reason = Some(reason.into_owned());
                }
                if let Some(usage) = at.child(&event, "usage", "")? {
                    let merged = match self.usage.as_deref().map(Object::parse) {
                        Some(Ok(start)) => {
                            let fields: Vec<(&str, &str)> = usage
                                .fields
                                .iter()
                                .map(|(k, v)| (k.as_ref(), v.get()))
                                .collect();
                            json::with_fields(&start, &fields)
                        }
                        _ => event
                            .get("usage")
                            .map(|u| u.get().to_owned())
                            .unwrap_or_default(),
                    };
                    self.usage = Some(merged);
                    self.push_usage(out);
                }
                Ok(())
            }
            "message_stop" => {
                if let Some(open) = self.blocks.iter().position(|b| b.open) {
                    return Err(at.out_of_order(format!("message_stop while block {open} is open")));
                }
                self.stopped = true;
                Ok(())
            }
            // Anthropic may add event types; unknown ones carry nothing the reply records.
            _ => Ok(()),
        }
    }

    fn is_done(&self) -> bool {
        self.stopped
    }

    /// The reply the stream amounts to: its blocks, each written as the whole reply's.
    fn finish(self: Box<Self>, ctx: &Ctx, _salt: u64) -> End {
        let this = *self;
        if !this.stopped {
            return End::CutOff("message_stop");
        }
        let blocks: Vec<String> = this.blocks.iter().map(Block::whole).collect();
        let content = format!("[{}]", blocks.join(","));
        let usage = this
            .usage
            .as_deref()
            .and_then(|u| UsageReport::of(Provider::Anthropic, u));
        let (id, diagnostics) = (this.id, this.diagnostics);
        End::Reply(
            capped(ctx, content)
                .and_then(|c| reply::anthropic_reply(ctx, &c, this.stop_reason, usage))
                .map(|mut r| {
                    (r.id, r.diagnostics) = (id, diagnostics);
                    r
                }),
        )
    }
}

impl Anthropic {
    fn push_usage(&self, out: &mut Out<'_>) {
        if let Some(usage) = self
            .usage
            .as_deref()
            .and_then(|u| UsageReport::of(Provider::Anthropic, u))
        {
            out.push(StreamEvent::Usage(usage));
        }
    }

    fn start(
        &mut self,
        at: &At<'_>,
        event: &Object<'_>,
        out: &mut Out<'_>,
    ) -> Result<(), StreamError> {
        let found = at
            .index(event, "index", "")?
            .ok_or_else(|| at.malformed("index", "missing"))?;
        let raw_block = event
            .get("content_block")
            .filter(|b| b.get().starts_with('{'))
            .ok_or_else(|| at.malformed("content_block", "missing or not an object"))?;
        let block =
            Object::of(raw_block).map_err(|p| at.malformed("content_block", p.to_string()))?;
        let kind = at
            .text(&block, "type", "content_block")?
            .ok_or_else(|| at.malformed("content_block.type", "missing"))?;
        let next = self.blocks.len();
        let index = usize::try_from(found).unwrap_or(usize::MAX);
        if index < next {
            let earlier = &mut self.blocks[index];
            // llama.cpp starts a tool_use block again when the call's name grows.
            if earlier.open && earlier.is_tool() && earlier.kind == kind {
                earlier.start = raw_block.get().to_owned();
                if let Some(name) = at.text(&block, "name", "content_block")? {
                    earlier.name = name.into_owned();
                }
                return Ok(());
            }
            return Err(at.out_of_order(format!("block {index} was started before")));
        }
        if index > next {
            return Err(at.jump("content block", next, found));
        }
        if next >= Limit::Blocks.max() {
            return Err(at.too_many(Limit::Blocks));
        }
        let text = at
            .text(&block, "text", "content_block")?
            .unwrap_or_default();
        let thinking = at
            .text(&block, "thinking", "content_block")?
            .unwrap_or_default();
        let mut entry = Block {
            start: raw_block.get().to_owned(),
            kind: kind.into_owned(),
            text: text.into_owned(),
            thinking: thinking.into_owned(),
            signature: at
                .text(&block, "signature", "content_block")?
                .map(|s| s.into_owned()),
            input: None,
            citations: Vec::new(),
            open: true,
            call: None,
            name: at
                .text(&block, "name", "content_block")?
                .unwrap_or_default()
                .into_owned(),
        };
        match entry.kind.as_str() {
            "text" => out.text(&entry.text),
            "thinking" => out.reasoning(&entry.thinking),
            "tool_use" => {
                if self.calls >= Limit::ToolCalls.max() {
                    return Err(at.too_many(Limit::ToolCalls));
                }
                entry.call = Some(self.calls);
                out.push(StreamEvent::ToolCallStarted {
                    index: self.calls,
                    id: at
                        .text(&block, "id", "content_block")?
                        .map(|i| i.into_owned()),
                    name: entry.name.clone(),
                });
                self.calls += 1;
            }
            _ => {}
        }
        self.blocks.push(entry);
        Ok(())
    }

    /// The open block an event names by its `index`.
    fn open_block(&self, at: &At<'_>, event: &Object<'_>) -> Result<usize, StreamError> {
        let found = at
            .index(event, "index", "")?
            .ok_or_else(|| at.malformed("index", "missing"))?;
        match usize::try_from(found)
            .ok()
            .and_then(|i| self.blocks.get(i).map(|b| (i, b)))
        {
            Some((index, block)) if block.open => Ok(index),
            Some((index, _)) => Err(at.out_of_order(format!("block {index} was stopped"))),
            None => Err(at.out_of_order(format!("block {found} was not started"))),
        }
    }

    fn delta(
        &mut self,
        at: &At<'_>,
        event: &Object<'_>,
        out: &mut Out<'_>,
    ) -> Result<(), StreamError> {
        let index = self.open_block(at, event)?;
        let delta = at
            .child(event, "delta", "")?
            .ok_or_else(|| at.malformed("delta", "missing"))?;
        let kind = at
            .text(&delta, "type", "delta")?
            .ok_or_else(|| at.malformed("delta.type", "missing"))?;
        let block = &mut self.blocks[index];
        let expects = |wanted: bool, block_kind: &str| {
            if wanted {
                Ok(())
            } else {
                Err(at.out_of_order(format!(
                    "a {} for block {index}, a {} block",
                    prompt_core::input::excerpt(&kind, 64),
                    prompt_core::input::excerpt(block_kind, 64)
                )))
            }
        };
        let field = |key: &str| -> Result<String, StreamError> {
            Ok(at
                .text(&delta, key, "delta")?
                .unwrap_or_default()
                .into_owned())
        };
        match kind.as_ref() {
            "text_delta" => {
                expects(block.kind == "text", &block.kind)?;
                let text = field("text")?;
                block.text.push_str(&text);
                out.text(&text);
            }
            "thinking_delta" => {
                expects(block.kind == "thinking", &block.kind)?;
                let text = field("thinking")?;
                block.thinking.push_str(&text);
                out.reasoning(&text);
            }
            "signature_delta" => {
                expects(block.kind == "thinking", &block.kind)?;
                block
                    .signature
                    .get_or_insert_default()
                    .push_str(&field("signature")?);
            }
            "input_json_delta" => {
                expects(block.is_tool(), &block.kind)?;
                let fragment = field("partial_json")?;
                block.input.get_or_insert_default().push_str(&fragment);
                if let Some(call) = block.call
                    && !fragment.is_empty()
                {
                    out.push(StreamEvent::ToolCallArgumentsDelta {
                        index: call,
                        delta: fragment,
                    });
                }
            }
            "citations_delta" => {
                expects(block.kind == "text", &block.kind)?;
                let citation = delta
                    .get("citation")
                    .ok_or_else(|| at.malformed("delta.citation", "missing"))?;
                block.citations.push(citation.get().to_owned());
            }
            // A delta this reader does not know would be lost from the recorded block.
            _ => return Err(at.malformed("delta.type", "a delta type this reader does not know")),
        }
        Ok(())
    }
}

/// A `diagnostics` object of `holder`, raw (Anthropic's cache diagnostics).
fn diagnostics_of(holder: &Object<'_>) -> Option<String> {
    holder
        .get("diagnostics")
        .filter(|d| d.get().starts_with('{'))
        .map(|d| d.get().to_owned())
}
