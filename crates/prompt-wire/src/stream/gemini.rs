//! Gemini `streamGenerateContent?alt=sse`: each event is a `GenerateContentResponse` whose
//! first candidate carries the next parts of the reply; the one with a `finishReason` ends
//! it; `usageMetadata` grows as it goes.
//!
//! The whole reply's parts are the streamed ones merged as `generateContent` returns them:
//! consecutive text parts of the same kind (thought or not) are one part, their texts
//! joined, their other fields (`thoughtSignature`) kept in the order they first came; a part
//! that carries a `thoughtSignature` ends its text part. Any other part (`functionCall`,
//! code, data) is kept as it came.

use super::{At, End, Fold, Limit, Out, StreamError, StreamEvent, capped, json};
use crate::error::WireError;
use crate::raw::{Object, quote};
use crate::reply::{self, Ctx, UsageReport};
use prompt_core::profile::Provider;

#[derive(Debug)]
enum Part {
    Text {
        /// The first piece, as it came (its `text` is replaced by the joined texts).
        first: String,
        /// The first piece's keys.
        keys: Vec<String>,
        text: String,
        thought: bool,
        /// Fields of later pieces the first did not have, in order.
        later: Vec<(String, String)>,
        /// A `thoughtSignature` came: the next text starts a new part.
        sealed: bool,
    },
    Other(String),
}

impl Part {
    fn whole(&self) -> String {
        match self {
            Part::Other(raw) => raw.clone(),
            Part::Text {
                first, text, later, ..
            } => {
                let text = quote(text);
                let mut fields: Vec<(&str, &str)> = vec![("text", &text)];
                fields.extend(later.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                match Object::parse(first) {
                    Ok(o) => json::with_fields(&o, &fields),
                    Err(_) => first.clone(),
                }
            }
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Gemini {
    parts: Vec<Part>,
    calls: usize,
    finish: Option<String>,
    usage: Option<String>,
    blocked: Option<String>,
    /// The chunks' `responseId`, as the whole reply's.
    id: Option<String>,
}

impl Fold for Gemini {
    fn on_event(&mut self, at: &At<'_>, data: &str, out: &mut Out<'_>) -> Result<(), StreamError> {
        let chunk = at.object(data)?;
        at.refuse_error(&chunk)?;
        if self.id.is_none() {
            self.id = chunk.str("responseId").map(|id| id.into_owned());
        }
        if let Some(feedback) = at.child(&chunk, "promptFeedback", "")?
            && let Some(reason) = at.text(&feedback, "blockReason", "promptFeedback")?
        {
            self.blocked = Some(prompt_core::input::excerpt(&reason, 64).into_owned());
        }
        let candidates = at.elements(&chunk, "candidates", "")?;
        if let Some(first) = candidates.first() {
            let candidate =
                Object::of(first).map_err(|p| at.malformed("candidates[0]", p.to_string()))?;
            let path = "candidates[0]";
            if let Some(content) = at.child(&candidate, "content", path)? {
                let path = "candidates[0].content";
                let parts = at.elements(&content, "parts", path)?;
                if !parts.is_empty() && self.finish.is_some() {
                    return Err(at.out_of_order("parts after the finishReason"));
                }
                for (i, part) in parts.into_iter().enumerate() {
                    self.part(at, part, &format!("{path}.parts[{i}]"), out)?;
                }
            }
            if let Some(reason) = at.text(&candidate, "finishReason", path)? {
                if self.finish.is_some() {
                    return Err(at.out_of_order("a second finishReason"));
                }
                self.finish = Some(reason.into_owned());
            }
        }
        if let Some(usage) = chunk
            .get("usageMetadata")
            .filter(|u| u.get().starts_with('{'))
        {
            self.usage = Some(usage.get().to_owned());
            if let Some(report) = UsageReport::of(Provider::Gemini, usage.get()) {
                out.push(StreamEvent::Usage(report));
            }
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.finish.is_some()
    }

    /// The reply the stream amounts to: the merged parts, read as the whole reply's.
    fn finish(self: Box<Self>, ctx: &Ctx, salt: u64) -> End {
        let this = *self;
        if this.parts.is_empty() {
            let reason = match (&this.blocked, &this.finish) {
                (Some(blocked), _) => format!("prompt blocked: {blocked}"),
                (None, Some(finish)) => format!(
                    "a candidate without parts (finishReason {})",
                    prompt_core::input::excerpt(finish, 64)
                ),
                (None, None) if this.usage.is_none() => return End::CutOff("a candidate"),
                (None, None) => "no candidates".to_owned(),
            };
            return End::Reply(Err(WireError::NoMessage {
                api: ctx.api,
                reason,
            }));
        }
        if this.finish.is_none() {
            return End::CutOff("a chunk with a finishReason");
        }
        let parts: Vec<String> = this.parts.iter().map(Part::whole).collect();
        let usage = this
            .usage
            .as_deref()
            .and_then(|u| UsageReport::of(Provider::Gemini, u));
        let id = this.id;
        End::Reply(
            capped(ctx, format!("[{}]", parts.join(",")))
                .and_then(|p| reply::gemini_reply(ctx, &p, this.finish, usage, salt))
                .map(|mut r| {
                    r.id = id;
                    r
                }),
        )
    }
}

impl Gemini {
    fn part(
        &mut self,
        at: &At<'_>,
        raw_part: &serde_json::value::RawValue,
        path: &str,
        out: &mut Out<'_>,
    ) -> Result<(), StreamError> {
        let part = Object::of(raw_part).map_err(|p| at.malformed(path, p.to_string()))?;
        // A part with a call is a call, as the whole reply's reader takes it.
        if let Some(call) = at.child(&part, "functionCall", path)? {
            let path = format!("{path}.functionCall");
            let name = at
                .text(&call, "name", &path)?
                .ok_or_else(|| at.malformed(format!("{path}.name"), "missing"))?
                .into_owned();
            if self.calls >= Limit::ToolCalls.max() {
                return Err(at.too_many(Limit::ToolCalls));
            }
            let index = self.calls;
            let arguments = call
                .get("args")
                .map_or_else(|| "{}".to_owned(), |a| a.get().to_owned());
            out.push(StreamEvent::ToolCallStarted {
                index,
                id: at.text(&call, "id", &path)?.map(|i| i.into_owned()),
                name: name.clone(),
            });
            out.push(StreamEvent::ToolCallArgumentsDelta {
                index,
                delta: arguments.clone(),
            });
            out.push(StreamEvent::ToolCallFinished {
                index,
                name,
                arguments,
            });
            self.calls += 1;
            return self.push(at, Part::Other(raw_part.get().to_owned()));
        }
        if let Some(text) = at.text(&part, "text", path)? {
            let thought = part.get("thought").is_some_and(|t| t.get() == "true");
            if thought {
                out.reasoning(&text);
            } else {
                out.text(&text);
            }
            let signs = part.has("thoughtSignature");
            if let Some(Part::Text {
                keys,
                text: joined,
                thought: was,
                later,
                sealed,
                ..
            }) = self.parts.last_mut()
                && *was == thought
                && !*sealed
            {
                joined.push_str(&text);
                for (key, value) in part.fields.iter().filter(|(k, _)| k != "text") {
                    let known = keys.iter().any(|k| k == key);
                    match later.iter_mut().find(|(k, _)| k == key) {
                        Some(entry) => value.get().clone_into(&mut entry.1),
                        None if !known => later.push((key.to_string(), value.get().to_owned())),
                        None => {}
                    }
                }
                *sealed = signs;
                return Ok(());
            }
            return self.push(
                at,
                Part::Text {
                    first: raw_part.get().to_owned(),
                    keys: part.fields.iter().map(|(k, _)| k.to_string()).collect(),
                    text: text.into_owned(),
                    thought,
                    later: Vec::new(),
                    sealed: signs,
                },
            );
        }
        self.push(at, Part::Other(raw_part.get().to_owned()))
    }

    fn push(&mut self, at: &At<'_>, part: Part) -> Result<(), StreamError> {
        if self.parts.len() >= Limit::Blocks.max() {
            return Err(at.too_many(Limit::Blocks));
        }
        self.parts.push(part);
        Ok(())
    }
}
