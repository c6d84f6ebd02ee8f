//! OpenAI Responses events.
//!
//! `response.output_item.added` opens an output item (a message, a reasoning item, a
//! function call), deltas grow it (`response.output_text.delta`,
//! `response.reasoning_text.delta`, `response.reasoning_summary_text.delta`,
//! `response.function_call_arguments.delta`), `response.output_item.done` carries it whole,
//! and `response.completed` (or `response.incomplete`) carries the whole response, its
//! `output` included: those bytes are what is recorded. `response.failed` and `error` are the
//! provider's errors. Events name their item by `output_index` or, as llama.cpp's server
//! does, by `item_id` alone.

use std::collections::HashMap;

use prompt_core::ApiKind;

use super::{At, End, Fold, Limit, Out, StreamError, StreamEvent, json};
use crate::raw::{self, Object};
use crate::reply;

#[derive(Debug)]
struct Item {
    kind: String,
    /// Its place among the reply's tool calls (function calls).
    call: Option<usize>,
    name: String,
    /// The item as `response.output_item.done` carried it.
    done: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct Responses {
    items: Vec<Item>,
    by_id: HashMap<String, usize>,
    calls: usize,
    /// The response `response.completed` or `response.incomplete` carried.
    response: Option<String>,
}

impl Fold for Responses {
    fn on_event(&mut self, at: &At<'_>, data: &str, out: &mut Out<'_>) -> Result<(), StreamError> {
        let event = at.object(data)?;
        let Some(kind) = at.text(&event, "type", "")? else {
            // llama.cpp's server reports an error as `data: {"error": …}`.
            at.refuse_error(&event)?;
            return Err(at.malformed("type", "missing"));
        };
        let at = &At { kind: &kind, ..*at };
        if self.response.is_some() {
            return Err(at.out_of_order("an event after the response completed"));
        }
        match kind.as_ref() {
            "error" => {
                let message = event
                    .get("error")
                    .filter(|e| !raw::is_null(e))
                    .map(reply::provider_message)
                    .or_else(|| {
                        event
                            .str("message")
                            .map(|m| prompt_core::input::excerpt(&m, 512).into_owned())
                    })
                    .unwrap_or_else(|| "an error without a message".to_owned());
                Err(at.provider(message))
            }
            "response.failed" => {
                let message = at
                    .child(&event, "response", "")?
                    .and_then(|r| r.get("error").filter(|e| !raw::is_null(e)))
                    .map_or_else(|| "response.failed".to_owned(), reply::provider_message);
                Err(at.provider(message))
            }
            "response.output_item.added" => self.added(at, &event, out),
            "response.output_item.done" => self.done(at, &event, out),
            "response.function_call_arguments.delta" => {
                let item = self.locate(at, &event)?;
                let delta = at.text(&event, "delta", "")?.unwrap_or_default();
                let call = self.items[item].call.ok_or_else(|| {
                    at.out_of_order(format!("output item {item} is not a function call"))
                })?;
                if !delta.is_empty() {
                    out.push(StreamEvent::ToolCallArgumentsDelta {
                        index: call,
                        delta: delta.into_owned(),
                    });
                }
                Ok(())
            }
            "response.output_text.delta" => {
                self.locate(at, &event)?;
                out.text(&at.text(&event, "delta", "")?.unwrap_or_default());
                Ok(())
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                self.locate(at, &event)?;
                out.reasoning(&at.text(&event, "delta", "")?.unwrap_or_default());
                Ok(())
            }
            "response.completed" | "response.incomplete" => {
                let response = event
                    .get("response")
                    .filter(|r| r.get().starts_with('{'))
                    .ok_or_else(|| at.malformed("response", "missing or not an object"))?;
                let usage = Object::of(response)
                    .ok()
                    .and_then(|r| r.get("usage"))
                    .and_then(|u| {
                        reply::UsageReport::of(prompt_core::profile::Provider::OpenAi, u.get())
                    });
                self.response = Some(response.get().to_owned());
                if let Some(usage) = usage {
                    out.push(StreamEvent::Usage(usage));
                }
                Ok(())
            }
            // The rest (`response.created`, `response.in_progress`, content parts, the
            // `*.done` of texts, annotations, hosted tools' progress) adds nothing the
            // items and the completed response do not carry.
            _ => Ok(()),
        }
    }

    fn is_done(&self) -> bool {
        self.response.is_some()
    }

    /// The reply the stream amounts to: the response `response.completed` carried, read as
    /// a whole reply; its `output` made of the done items when it carried none.
    fn finish(self: Box<Self>, _ctx: &reply::Ctx, salt: u64) -> End {
        let this = *self;
        let Some(response) = this.response else {
            return End::CutOff("response.completed");
        };
        let api = ApiKind::OpenAiResponses;
        let empty = Object::parse(&response).ok().is_some_and(|r| {
            r.get("output")
                .and_then(raw::array_of)
                .is_none_or(|items| items.is_empty())
        });
        let done: Vec<&str> = this
            .items
            .iter()
            .filter_map(|i| i.done.as_deref())
            .collect();
        if empty && !done.is_empty() {
            let output = format!("[{}]", done.join(","));
            let whole = match Object::parse(&response) {
                Ok(r) => json::with_fields(&r, &[("output", &output)]),
                Err(_) => response,
            };
            return End::Reply(reply::parse(api, whole.as_bytes(), salt));
        }
        End::Reply(reply::parse(api, response.as_bytes(), salt))
    }
}

impl Responses {
    fn added(
        &mut self,
        at: &At<'_>,
        event: &Object<'_>,
        out: &mut Out<'_>,
    ) -> Result<(), StreamError> {
        let next = self.items.len();
        if let Some(found) = at.index(event, "output_index", "")?
            && usize::try_from(found).ok() != Some(next)
        {
            return Err(if found < next as u64 {
                at.out_of_order(format!("output item {found} was added before"))
            } else {
                at.jump("output item", next, found)
            });
        }
        if next >= Limit::Blocks.max() {
            return Err(at.too_many(Limit::Blocks));
        }
        let item = at
            .child(event, "item", "")?
            .ok_or_else(|| at.malformed("item", "missing"))?;
        let kind = at
            .text(&item, "type", "item")?
            .ok_or_else(|| at.malformed("item.type", "missing"))?;
        let mut call = None;
        let mut name = String::new();
        if kind == "function_call" {
            if self.calls >= Limit::ToolCalls.max() {
                return Err(at.too_many(Limit::ToolCalls));
            }
            name = at
                .text(&item, "name", "item")?
                .unwrap_or_default()
                .into_owned();
            out.push(StreamEvent::ToolCallStarted {
                index: self.calls,
                id: at.text(&item, "call_id", "item")?.map(|c| c.into_owned()),
                name: name.clone(),
            });
            let arguments = at.text(&item, "arguments", "item")?.unwrap_or_default();
            if !arguments.is_empty() {
                out.push(StreamEvent::ToolCallArgumentsDelta {
                    index: self.calls,
                    delta: arguments.into_owned(),
                });
            }
            call = Some(self.calls);
            self.calls += 1;
        }
        if let Some(id) = at.text(&item, "id", "item")? {
            self.by_id.insert(id.into_owned(), next);
        }
        self.items.push(Item {
            kind: kind.into_owned(),
            call,
            name,
            done: None,
        });
        Ok(())
    }

    fn done(
        &mut self,
        at: &At<'_>,
        event: &Object<'_>,
        out: &mut Out<'_>,
    ) -> Result<(), StreamError> {
        let raw_item = event
            .get("item")
            .filter(|i| i.get().starts_with('{'))
            .ok_or_else(|| at.malformed("item", "missing or not an object"))?;
        let item = Object::of(raw_item).map_err(|p| at.malformed("item", p.to_string()))?;
        let index = match at.index(event, "output_index", "")? {
            Some(_) => self.locate(at, event)?,
            None => {
                let id = at
                    .text(&item, "id", "item")?
                    .ok_or_else(|| at.malformed("item.id", "missing, and no output_index"))?;
                *self.by_id.get(id.as_ref()).ok_or_else(|| {
                    at.out_of_order(format!(
                        "item {} was not added",
                        prompt_core::input::excerpt(&id, 64)
                    ))
                })?
            }
        };
        let kind = at.text(&item, "type", "item")?.unwrap_or_default();
        let entry = &mut self.items[index];
        if entry.done.is_some() {
            return Err(at.out_of_order(format!("output item {index} is done twice")));
        }
        if kind != entry.kind {
            return Err(at.out_of_order(format!(
                "output item {index} was added as {}, done as {}",
                prompt_core::input::excerpt(&entry.kind, 64),
                prompt_core::input::excerpt(&kind, 64)
            )));
        }
        entry.done = Some(raw_item.get().to_owned());
        if let Some(call) = entry.call {
            let name = at
                .text(&item, "name", "item")?
                .map_or_else(|| entry.name.clone(), |n| n.into_owned());
            out.push(StreamEvent::ToolCallFinished {
                index: call,
                name,
                arguments: at
                    .text(&item, "arguments", "item")?
                    .unwrap_or_default()
                    .into_owned(),
            });
        }
        Ok(())
    }

    /// The item an event is about, by `output_index` or by `item_id`; it must be added and
    /// not done.
    fn locate(&self, at: &At<'_>, event: &Object<'_>) -> Result<usize, StreamError> {
        let index = if let Some(found) = at.index(event, "output_index", "")? {
            match usize::try_from(found) {
                Ok(index) if index < self.items.len() => index,
                _ => return Err(at.out_of_order(format!("output item {found} was not added"))),
            }
        } else {
            let id = at
                .text(event, "item_id", "")?
                .ok_or_else(|| at.malformed("item_id", "missing, and no output_index"))?;
            *self.by_id.get(id.as_ref()).ok_or_else(|| {
                at.out_of_order(format!(
                    "item {} was not added",
                    prompt_core::input::excerpt(&id, 64)
                ))
            })?
        };
        if self.items[index].done.is_some() {
            return Err(at.out_of_order(format!("output item {index} is already done")));
        }
        Ok(index)
    }
}
