//! Rendering a Jinja chat template the way Hugging Face `apply_chat_template` and llama.cpp
//! (`--jinja`) do, with minijinja.

use std::fmt;

use minijinja::value::{Kwargs, Value as JValue, ValueKind};
use minijinja::{Environment, Error as JError, ErrorKind};
use serde::Serialize;
use serde_json::Value;

use super::clock::Clock;

/// The template could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the chat template does not compile: {message}")]
pub struct TemplateError {
    /// The engine's message, with the line when known.
    pub message: String,
}

/// Rendering a conversation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The template called `raise_exception(message)`: it rejects the conversation.
    #[error("the template raised: {message}")]
    Raised {
        /// The template's own message.
        message: String,
    },
    /// The engine failed (an unsupported construct, a type error, a missing variable).
    #[error("the template failed to render: {message}")]
    Engine {
        /// The engine's message, with the line when known.
        message: String,
    },
    /// The request to render is not a JSON array of message objects.
    #[error("the request is not a JSON array of messages: {message}")]
    InvalidRequest {
        /// What is wrong.
        message: String,
    },
}

/// What a render sees besides `messages` and `add_generation_prompt`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RenderOptions {
    /// `bos_token` (the tokenizer's beginning-of-sequence text).
    pub bos_token: String,
    /// `eos_token` (the tokenizer's end-of-sequence text).
    pub eos_token: String,
    /// The instant `strftime_now` formats.
    pub clock: Clock,
    /// Also define `datetime` (the clock as `%b %d %Y %H:%M:%S GMT`) and `functions` (`"[]"`),
    /// as llama.cpp does for templates that read them (FireFunction v2).
    pub llama_cpp_extras: bool,
    /// Further top-level variables (`enable_thinking`, `reasoning_effort`, `tools`…).
    pub extra: serde_json::Map<String, Value>,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            bos_token: "<s>".to_owned(),
            eos_token: "</s>".to_owned(),
            clock: Clock::default(),
            llama_cpp_extras: true,
            extra: serde_json::Map::new(),
        }
    }
}

/// Carried as the source of the error `raise_exception` returns, so the template's message
/// can be told apart from engine failures.
#[derive(Debug)]
struct Raised(String);

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// A compiled chat template.
///
/// The environment matches Hugging Face's: `trim_blocks` and `lstrip_blocks` on, Python
/// string/dict methods (minijinja-contrib `pycompat`), loop controls, `raise_exception`,
/// `strftime_now` on a fixed [`Clock`], `tojson` as Python's `json.dumps` writes it
/// (`", "` and `": "` separators, no ASCII or HTML escaping), `bos_token`, `eos_token`;
/// `tools` is left undefined.
///
/// ```
/// use prompt_templates::ChatTemplate;
/// use serde_json::json;
/// let t = ChatTemplate::new("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}")?;
/// let text = t.render(&[json!({"role": "user", "content": " hi "})], false)?;
/// assert_eq!(text, "<user>hi");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    options: RenderOptions,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source` with the default [`RenderOptions`].
    pub fn new(source: &str) -> Result<Self, TemplateError> {
        Self::with_options(source, RenderOptions::default())
    }

    /// Compiles `source` with `options`.
    pub fn with_options(source: &str, options: RenderOptions) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TemplateError {
                message: describe(&e),
            })?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<JValue, JError> {
                Err(JError::new(ErrorKind::InvalidOperation, message.clone())
                    .with_source(Raised(message)))
            },
        );
        let clock = options.clock;
        env.add_function("strftime_now", move |fmt: String| clock.strftime(&fmt));
        env.add_filter("tojson", tojson);
        if options.llama_cpp_extras {
            env.add_global(
                "datetime",
                JValue::from(clock.strftime("%b %d %Y %H:%M:%S GMT")),
            );
            env.add_global("functions", JValue::from("[]"));
        }
        env.add_template_owned(NAME, source.to_owned())
            .map_err(|e| TemplateError {
                message: describe(&e),
            })?;
        Ok(Self {
            env,
            source: source.to_owned(),
            options,
        })
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The options this template renders with.
    pub fn options(&self) -> &RenderOptions {
        &self.options
    }

    /// Renders `messages` (chat-completion message objects).
    pub fn render(
        &self,
        messages: &[Value],
        add_generation_prompt: bool,
    ) -> Result<String, RenderError> {
        self.render_value(
            messages.iter().map(to_jinja).collect(),
            add_generation_prompt,
        )
    }

    fn render_value(
        &self,
        messages: JValue,
        add_generation_prompt: bool,
    ) -> Result<String, RenderError> {
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| RenderError::Engine {
                message: describe(&e),
            })?;
        let mut ctx: Vec<(String, JValue)> = vec![
            ("messages".to_owned(), messages),
            (
                "add_generation_prompt".to_owned(),
                JValue::from(add_generation_prompt),
            ),
            (
                "bos_token".to_owned(),
                JValue::from(self.options.bos_token.as_str()),
            ),
            (
                "eos_token".to_owned(),
                JValue::from(self.options.eos_token.as_str()),
            ),
        ];
        for (key, value) in &self.options.extra {
            ctx.push((key.clone(), to_jinja(value)));
        }
        template
            .render(JValue::from_pairs(ctx))
            .map_err(|e| match raised_message(&e) {
                Some(message) => RenderError::Raised { message },
                None => RenderError::Engine {
                    message: describe(&e),
                },
            })
    }

    /// Renders a serialized request (a JSON array of messages, as
    /// [`prompt_core::Request::to_bytes`] writes it).
    pub fn render_request(
        &self,
        request: &[u8],
        add_generation_prompt: bool,
    ) -> Result<String, RenderError> {
        let messages: Vec<OrderedJson> =
            serde_json::from_slice(request).map_err(|e| RenderError::InvalidRequest {
                message: e.to_string(),
            })?;
        if let Some(bad) = messages.iter().position(|m| m.0.kind() != ValueKind::Map) {
            return Err(RenderError::InvalidRequest {
                message: format!("element {bad} is not an object"),
            });
        }
        let messages: JValue = messages.into_iter().map(|m| m.0).collect();
        self.render_value(messages, add_generation_prompt)
    }
}

fn raised_message(err: &JError) -> Option<String> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(raised) = e.downcast_ref::<Raised>() {
            return Some(raised.0.clone());
        }
        current = e.source();
    }
    None
}

fn describe(err: &JError) -> String {
    let mut text = match err.detail() {
        Some(detail) => format!("{}: {detail}", err.kind()),
        None => err.kind().to_string(),
    };
    if let Some(line) = err.line() {
        text.push_str(&format!(" (line {line})"));
    }
    text
}

/// JSON text read straight into a template value, keeping every object's key order as
/// written (a serde_json map would sort the keys; Python's dicts, which chat templates are
/// written for, keep them).
struct OrderedJson(JValue);

impl<'de> serde::Deserialize<'de> for OrderedJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = OrderedJson;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<OrderedJson, E> {
                Ok(OrderedJson(JValue::from(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<OrderedJson, E> {
                Ok(OrderedJson(JValue::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<OrderedJson, E> {
                Ok(OrderedJson(JValue::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<OrderedJson, E> {
                Ok(OrderedJson(JValue::from(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<OrderedJson, E> {
                Ok(OrderedJson(JValue::from(v)))
            }
            fn visit_unit<E>(self) -> Result<OrderedJson, E> {
                Ok(OrderedJson(JValue::from(())))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<OrderedJson, A::Error> {
                let mut items = Vec::new();
                while let Some(OrderedJson(item)) = seq.next_element()? {
                    items.push(item);
                }
                Ok(OrderedJson(JValue::from(items)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<OrderedJson, A::Error> {
                let mut pairs: Vec<(String, JValue)> = Vec::new();
                while let Some((key, OrderedJson(value))) =
                    map.next_entry::<String, OrderedJson>()?
                {
                    // A repeated key keeps its first position and its last value, as in Python.
                    match pairs.iter_mut().find(|(k, _)| *k == key) {
                        Some(slot) => slot.1 = value,
                        None => pairs.push((key, value)),
                    }
                }
                Ok(OrderedJson(JValue::from_pairs(pairs)))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// A JSON value as a template value (maps keep their key order).
pub(crate) fn to_jinja(value: &Value) -> JValue {
    match value {
        Value::Null => JValue::from(()),
        Value::Bool(b) => JValue::from(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                JValue::from(i)
            } else if let Some(u) = n.as_u64() {
                JValue::from(u)
            } else {
                JValue::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => JValue::from(s.as_str()),
        Value::Array(items) => items.iter().map(to_jinja).collect(),
        Value::Object(map) => {
            JValue::from_pairs(map.iter().map(|(k, v)| (k.as_str(), to_jinja(v))))
        }
    }
}

/// A template value as JSON (`undefined` and `none` become `null`).
fn to_json(value: &JValue) -> Result<Value, JError> {
    Ok(match value.kind() {
        ValueKind::Undefined | ValueKind::None => Value::Null,
        ValueKind::Bool => Value::Bool(value.is_true()),
        ValueKind::Number => {
            if let Some(i) = value.as_i64() {
                Value::from(i)
            } else {
                let f = f64::try_from(value.clone())?;
                serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
            }
        }
        ValueKind::String => Value::String(value.as_str().unwrap_or_default().to_owned()),
        ValueKind::Map => {
            let mut map = serde_json::Map::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                let key = match key.as_str() {
                    Some(s) => s.to_owned(),
                    None => key.to_string(),
                };
                map.insert(key, to_json(&item)?);
            }
            Value::Object(map)
        }
        ValueKind::Seq | ValueKind::Iterable => Value::Array(
            value
                .try_iter()?
                .map(|v| to_json(&v))
                .collect::<Result<_, _>>()?,
        ),
        _ => Value::String(value.to_string()),
    })
}

/// `tojson` as Hugging Face defines it: `json.dumps(x, ensure_ascii=False, indent=indent,
/// sort_keys=sort_keys)`, so `", "`/`": "` separators without indent, `","`/`": "` with.
fn tojson(value: &JValue, indent: Option<JValue>, kwargs: Kwargs) -> Result<JValue, JError> {
    let indent: Option<JValue> = match indent {
        Some(i) => Some(i),
        None => kwargs.get::<Option<JValue>>("indent")?,
    };
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let _: Option<JValue> = kwargs.get("ensure_ascii")?;
    let _: Option<JValue> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        Some(i) if i.kind() == ValueKind::Number => i
            .as_i64()
            .map(|n| " ".repeat(usize::try_from(n).unwrap_or(0))),
        Some(i) if i.kind() == ValueKind::String => i.as_str().map(str::to_owned),
        _ => None,
    };
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        PyFormatter {
            indent: indent.map(String::into_bytes),
            level: 0,
            has_value: false,
        },
    );
    // Maps keep the template's key order, as Python dicts do; `sort_keys` goes through a
    // serde_json map, which is ordered by key.
    let written = if sort_keys == Some(true) {
        to_json(value)?.serialize(&mut ser)
    } else {
        value.serialize(&mut ser)
    };
    written.map_err(|e| JError::new(ErrorKind::InvalidOperation, format!("tojson failed: {e}")))?;
    Ok(JValue::from_safe_string(
        String::from_utf8_lossy(&out).into_owned(),
    ))
}

/// Python `json.dumps` layout.
struct PyFormatter {
    indent: Option<Vec<u8>>,
    level: usize,
    has_value: bool,
}

impl PyFormatter {
    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if let Some(indent) = &self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.level {
                w.write_all(indent)?;
            }
        }
        Ok(())
    }

    fn separator<W: ?Sized + std::io::Write>(&self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(if self.indent.is_some() { b"," } else { b", " })?;
        }
        self.newline(w)
    }
}

impl serde_json::ser::Formatter for PyFormatter {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.level -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        self.has_value = true;
        w.write_all(b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.separator(w, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.level -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        self.has_value = true;
        w.write_all(b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.separator(w, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(src: &str, messages: &[Value]) -> Result<String, RenderError> {
        ChatTemplate::new(src)
            .map_err(|e| RenderError::Engine { message: e.message })?
            .render(messages, true)
    }

    #[test]
    fn tojson_writes_like_python() {
        let out = ChatTemplate::new(
            "{{ messages[0] | tojson }}|{{ messages[0] | tojson(indent=2) }}|{{ [] | tojson(indent=2) }}|{{ messages[0] | tojson(sort_keys=true) }}",
        )
        .and_then(|t| {
            t.render_request(br#"[{"b": [1, 2.5, "<x>"], "a": {}}]"#, false)
                .map_err(|e| TemplateError {
                    message: e.to_string(),
                })
        });
        // Keys in the order written (Python dicts), unless sort_keys.
        assert_eq!(
            out.map_err(|e| e.message).as_deref(),
            Ok(
                "{\"b\": [1, 2.5, \"<x>\"], \"a\": {}}|{\n  \"b\": [\n    1,\n    2.5,\n    \"<x>\"\n  ],\n  \"a\": {}\n}|[]|{\"a\": {}, \"b\": [1, 2.5, \"<x>\"]}"
            )
        );
    }

    #[test]
    fn raise_exception_carries_the_message() {
        let out = render("{{ raise_exception('no system') }}", &[]);
        assert_eq!(
            out,
            Err(RenderError::Raised {
                message: "no system".to_owned()
            })
        );
        let out = render("{{ 1 + messages }}", &[]);
        assert!(matches!(out, Err(RenderError::Engine { .. })), "{out:?}");
    }

    #[test]
    fn python_methods_and_trim_blocks() {
        let src = "{% for m in messages %}\n  {{ m.content.strip().upper() }}|{{ m.get('x', 'd') }}\n{% endfor %}";
        assert_eq!(
            render(src, &[json!({"content": " a "})]).as_deref(),
            Ok("  A|d\n")
        );
    }
}
