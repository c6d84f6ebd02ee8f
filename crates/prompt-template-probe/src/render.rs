//! Rendering a Jinja chat template the way Hugging Face `apply_chat_template` and llama.cpp
//! (`--jinja`) do, with minijinja.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use minijinja::value::{Kwargs, Value as JValue, ValueKind};
use minijinja::{Environment, Error as JError, ErrorKind, State};
use prompt_core::raw_json::SortedKeys;
use serde::Serialize;
use serde_json::Value;

use super::clock::Clock;
use super::guard::{self, ACYCLIC_GUARD, CYCLE_GUARD, GUARD, NO_CYCLE_ITEMS, STEP_GUARD};
use super::limits::{
    CappedWriter, FueledWriter, Limit, RenderLimits, guard_acyclic, guard_cycle_items,
    guard_slice_step, guard_value, in_source_chain, limit_error, limit_hit, no_cycle_items,
};

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
    /// The render exceeded one of its [`RenderLimits`] and was stopped.
    #[error("the template exceeds a render limit ({}): {message}", limit.label())]
    Limit {
        /// Which limit.
        limit: Limit,
        /// What happened, with the line when known.
        message: String,
    },
    /// The engine panicked; the panic was caught and the render abandoned.
    #[error("the template engine panicked: {message}")]
    Panicked {
        /// The panic message.
        message: String,
    },
}

/// What a render sees besides `messages` and `add_generation_prompt`.
///
/// ```
/// use prompt_template_probe::{RenderLimits, RenderOptions};
/// let options = RenderOptions::default()
///     .with_bos_token("<|begin_of_text|>")
///     .with_extra("enable_thinking", serde_json::json!(false))
///     .with_limits(RenderLimits::PROBE);
/// assert_eq!(options.limits, RenderLimits::PROBE);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
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
    /// What one render may cost.
    pub limits: RenderLimits,
}

impl RenderOptions {
    /// The same options with this `bos_token`.
    pub fn with_bos_token(mut self, token: impl Into<String>) -> Self {
        self.bos_token = token.into();
        self
    }

    /// The same options with this `eos_token`.
    pub fn with_eos_token(mut self, token: impl Into<String>) -> Self {
        self.eos_token = token.into();
        self
    }

    /// The same options with this clock.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The same options with llama.cpp's extra variables defined or not.
    pub fn with_llama_cpp_extras(mut self, on: bool) -> Self {
        self.llama_cpp_extras = on;
        self
    }

    /// The same options with one more top-level variable.
    pub fn with_extra(mut self, name: impl Into<String>, value: Value) -> Self {
        self.extra.insert(name.into(), value);
        self
    }

    /// The same options with these limits.
    pub fn with_limits(mut self, limits: RenderLimits) -> Self {
        self.limits = limits;
        self
    }
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            bos_token: "<s>".to_owned(),
            eos_token: "</s>".to_owned(),
            clock: Clock::default(),
            llama_cpp_extras: true,
            extra: serde_json::Map::new(),
            limits: RenderLimits::default(),
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
/// The template is untrusted code: every render runs within [`RenderOptions::limits`]
/// (fuel, output size, the size and nesting of values, recursion), the filters and
/// functions added here bound their arguments, and a template that exceeds a limit fails
/// with [`RenderError::Limit`]. Compiling rejects what would make minijinja itself crash
/// (a line of 65 535 characters or more, an expression chaining more than 256 operators).
/// A panic inside minijinja is caught and reported as [`RenderError::Panicked`] or a
/// [`TemplateError`]: the checks above prevent the panics known, and catching is the last
/// line of defence so that a bug in the engine costs one probe, not the process. (It cannot
/// help where Rust aborts instead of unwinding: allocation failure and stack overflow, which
/// is why those are prevented before they happen.)
///
/// ```
/// use prompt_template_probe::ChatTemplate;
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
    /// The fuel used by all renders so far (see [`RenderLimits::total_fuel`]).
    spent: AtomicU64,
    /// The fuel used when `raise_exception` was last called.
    raised_at: Arc<AtomicU64>,
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
        Self::compile(source, options, true)
    }

    /// Compiles `source`, with the guards of `guard.rs` inserted when `guarded` (always,
    /// outside the test that checks they change nothing).
    fn compile(source: &str, options: RenderOptions, guarded: bool) -> Result<Self, TemplateError> {
        if source.len() as u64 > crate::TEMPLATE_LIMIT {
            return Err(TemplateError {
                message: format!(
                    "the template is {} bytes; at most {} are supported",
                    source.len(),
                    crate::TEMPLATE_LIMIT
                ),
            });
        }
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TemplateError {
                message: describe(&e),
            })?;
        let compiled = if guarded {
            unwind(|| guard::prepare(source, NAME, &syntax)).map_err(|panic| TemplateError {
                message: format!("the template engine panicked: {panic}"),
            })??
        } else {
            source.to_owned()
        };
        let limits = options.limits;
        let mut env = Environment::new();
        env.set_syntax(syntax);
        env.set_fuel(Some(limits.fuel));
        env.set_recursion_limit(limits.recursion);
        // Not in Hugging Face's environment; it prints the whole context unbounded.
        env.remove_global("debug");
        env.set_unknown_method_callback(python_method);
        env.add_filter(GUARD, move |state: &State, value: JValue| {
            guard_value(state, value, &limits)
        });
        env.add_filter(
            ACYCLIC_GUARD,
            move |state: &State, value: JValue, targets: minijinja::value::Rest<JValue>| {
                guard_acyclic(state, value, &targets, &limits)
            },
        );
        env.add_filter(STEP_GUARD, guard_slice_step);
        env.add_filter(CYCLE_GUARD, guard_cycle_items);
        env.add_function(NO_CYCLE_ITEMS, || -> Result<JValue, JError> {
            Err(no_cycle_items())
        });
        env.add_filter("split", split_filter);
        env.add_filter("sum", sum_filter);
        env.add_filter("lines", lines_filter);
        env.add_function("range", range_function);
        let raised_at = Arc::new(AtomicU64::new(0));
        let raised_fuel = Arc::clone(&raised_at);
        env.add_function(
            "raise_exception",
            move |state: &State, message: String| -> Result<JValue, JError> {
                let used = state.fuel_levels().map_or(0, |(used, _)| used);
                raised_fuel.store(used, Ordering::Relaxed);
                let message = truncate(&message, MESSAGE_BYTES);
                Err(JError::new(ErrorKind::InvalidOperation, message.clone())
                    .with_source(Raised(message)))
            },
        );
        let clock = options.clock;
        env.add_function("strftime_now", move |fmt: String| {
            if fmt.chars().count() > STRFTIME_CHARS {
                return Err(limit_error(
                    Limit::Argument,
                    format!("strftime_now format is longer than {STRFTIME_CHARS} characters"),
                ));
            }
            Ok(clock.strftime(&fmt))
        });
        env.add_filter(
            "tojson",
            move |state: &State, value: &JValue, indent: Option<JValue>, kwargs: Kwargs| {
                tojson(state, value, indent, kwargs, limits.value_bytes)
            },
        );
        if options.llama_cpp_extras {
            env.add_global(
                "datetime",
                JValue::from(clock.strftime("%b %d %Y %H:%M:%S GMT")),
            );
            env.add_global("functions", JValue::from("[]"));
        }
        let added =
            unwind(|| env.add_template_owned(NAME, compiled)).map_err(|panic| TemplateError {
                message: format!("the template engine panicked: {panic}"),
            })?;
        added.map_err(|e| TemplateError {
            message: describe(&e),
        })?;
        Ok(Self {
            env,
            source: source.to_owned(),
            options,
            spent: AtomicU64::new(0),
            raised_at,
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
        let limits = &self.options.limits;
        if let Some(total) = limits.total_fuel
            && self.spent.load(Ordering::Relaxed) >= total
        {
            return Err(RenderError::Limit {
                limit: Limit::Fuel,
                message: format!("the template used up its fuel ({total} over all renders)"),
            });
        }
        let mut out = CappedWriter::new(limits.output_bytes);
        let rendered = unwind(|| {
            template
                .render_captured_to(JValue::from_pairs(ctx), &mut out)
                .map(|captured| captured.state().fuel_levels().map_or(0, |(used, _)| used))
        });
        let (used, result) = match rendered {
            Ok(Ok(used)) => (used, Ok(out.into_string())),
            Ok(Err(e)) => {
                let error = classify(&e, out.overflowed, limits);
                let used = match error {
                    RenderError::Raised { .. } => self.raised_at.load(Ordering::Relaxed),
                    _ => limits.fuel,
                };
                (used, Err(error))
            }
            Err(message) => (limits.fuel, Err(RenderError::Panicked { message })),
        };
        self.spent.fetch_add(used, Ordering::Relaxed);
        result
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
    in_source_chain::<Raised>(err).map(|raised| raised.0.clone())
}

/// The longest `raise_exception` message kept, in bytes.
const MESSAGE_BYTES: usize = 2048;
/// The longest `strftime_now` format accepted, in characters.
const STRFTIME_CHARS: usize = 256;
/// The widest `tojson` indent accepted (spaces, or characters of an indent string).
const MAX_INDENT: usize = 64;
/// The largest width or precision accepted in a `str.format` field.
const MAX_FORMAT_WIDTH: u64 = 4096;

fn truncate(text: &str, max: usize) -> String {
    prompt_core::input::excerpt(text, max).into_owned()
}

/// Runs `f`, turning a panic into its message.
///
/// Used around compiling and rendering only: minijinja is a large interpreter fed untrusted
/// templates, and a panic in it (an overflow check, an `unwrap`) must not take the process
/// down. The environment is not mutated by a render, so it stays usable after one.
fn unwind<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_owned()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "unknown panic".to_owned()
        }
    })
}

fn classify(err: &JError, overflowed: bool, limits: &RenderLimits) -> RenderError {
    if let Some(message) = raised_message(err) {
        return RenderError::Raised { message };
    }
    let line = match err.line() {
        Some(line) => format!(" (line {line})"),
        None => String::new(),
    };
    let (limit, message) = if overflowed {
        (
            Limit::Output,
            format!("the output exceeds {} bytes", limits.output_bytes),
        )
    } else if let Some(hit) = limit_hit(err) {
        (hit.limit, hit.message)
    } else if chain(err).any(|e| e.kind() == ErrorKind::OutOfFuel) {
        (
            Limit::Fuel,
            format!("the render ran out of fuel ({} per render)", limits.fuel),
        )
    } else if chain(err).any(|e| e.detail().is_some_and(|d| d.contains("recursion limit"))) {
        (
            Limit::Recursion,
            format!(
                "macro calls, loops and includes nest more than {} deep",
                limits.recursion
            ),
        )
    } else {
        return RenderError::Engine {
            message: describe(err),
        };
    };
    RenderError::Limit {
        limit,
        message: format!("{message}{line}"),
    }
}

/// `err` and the engine errors in its source chain.
fn chain(err: &JError) -> impl Iterator<Item = &JError> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    std::iter::from_fn(move || {
        while let Some(e) = current {
            current = e.source();
            if let Some(j) = e.downcast_ref::<JError>() {
                return Some(j);
            }
        }
        None
    })
}

/// The engine's message, with the line when known (at most 2048 characters).
pub(crate) fn describe(err: &JError) -> String {
    let mut text = match err.detail() {
        Some(detail) => format!("{}: {}", err.kind(), truncate(detail, MESSAGE_BYTES)),
        None => err.kind().to_string(),
    };
    if let Some(line) = err.line() {
        text.push_str(&format!(" (line {line})"));
    }
    text
}

/// Python string methods (minijinja-contrib `pycompat`), with the checks it lacks: the
/// widths and precisions of `str.format` are bounded (they allocate before anything is
/// charged), and `split`/`splitlines` pay for the list they build before building it.
fn python_method(
    state: &mut State,
    value: &JValue,
    method: &str,
    args: &[JValue],
) -> Result<JValue, JError> {
    if let Some(s) = value.as_str() {
        match method {
            "format" => check_format_numbers(s)?,
            "split" => {
                let sep = args.first().and_then(JValue::as_str);
                charge_split(state, s, sep)?;
            }
            "splitlines" => charge_split(state, s, Some("\n"))?,
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Refuses a `str.format` string with a number over [`MAX_FORMAT_WIDTH`] inside a field.
fn check_format_numbers(format: &str) -> Result<(), JError> {
    let mut in_field = false;
    let mut number: u64 = 0;
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if !in_field {
            if c == '{' {
                if chars.peek() == Some(&'{') {
                    chars.next();
                } else {
                    in_field = true;
                }
            }
            continue;
        }
        match c.to_digit(10) {
            Some(d) => {
                number = number.saturating_mul(10).saturating_add(u64::from(d));
                if number > MAX_FORMAT_WIDTH {
                    return Err(limit_error(
                        Limit::Argument,
                        format!("a str.format field has a number over {MAX_FORMAT_WIDTH}"),
                    ));
                }
            }
            None => {
                number = 0;
                if c == '}' {
                    in_field = false;
                }
            }
        }
    }
    Ok(())
}

/// Charges for the list splitting `s` at `sep` builds (half a fuel per item, the engine's
/// cost of a list slot) before it is built. `None` splits at whitespace.
fn charge_split(state: &State, s: &str, sep: Option<&str>) -> Result<(), JError> {
    let items = match sep {
        None => s.split_whitespace().count(),
        Some("") => s.chars().count() + 2,
        Some(sep) => s.matches(sep).count() + 1,
    };
    state.consume_fuel((items / 2) as u64)
}

/// The `split` filter, charged for its list before building it.
fn split_filter(
    state: &State,
    value: &JValue,
    sep: Option<std::sync::Arc<str>>,
    maxsplits: Option<i64>,
) -> Result<JValue, JError> {
    if let Some(s) = value.as_str() {
        charge_split(state, s, sep.as_deref())?;
    }
    minijinja::filters::split(value, sep, maxsplits)
}

/// The `lines` filter, charged for its list before building it.
fn lines_filter(state: &State, value: &JValue) -> Result<JValue, JError> {
    if let Some(s) = value.as_str() {
        charge_split(state, s, Some("\n"))?;
    }
    minijinja::filters::lines(value)
}

/// The `sum` filter, charged for the copying it does when it adds strings or lists.
///
/// minijinja's `sum` charges one item per value it adds, but adding to a string copies the
/// whole sum so far, so summing `n` strings copies about `n²/2` of them. The total is worked
/// out from the item sizes and paid before summing (the input is bounded by the guard).
fn sum_filter(
    state: &State,
    values: JValue,
    attribute: Option<&str>,
    start: Option<JValue>,
    kwargs: Kwargs,
) -> Result<JValue, JError> {
    let given_start = match &start {
        Some(start) => Some(start.clone()),
        None => kwargs.get::<Option<JValue>>("start")?,
    };
    if let Some(start) = given_start.filter(|s| !s.is_number()) {
        let size = |v: &JValue| -> u64 {
            match v.as_str() {
                Some(s) => s.len() as u64,
                None => v.len().map_or(8, |n| n as u64 * 8),
            }
        };
        let mut sum = size(&start);
        let mut copied = 0u64;
        if let Ok(items) = values.try_iter() {
            for item in items {
                copied = copied.saturating_add(sum);
                sum = sum.saturating_add(size(&item));
            }
        }
        state.consume_fuel(copied / 64)?;
    }
    minijinja::filters::sum(state, values, attribute, start, kwargs)
}

/// `range`, refusing the arguments whose length computation overflows in minijinja (a
/// negative step of `isize::MIN`, or bounds further apart than `isize` can hold).
fn range_function(
    lower: isize,
    upper: Option<isize>,
    step: Option<isize>,
) -> Result<JValue, JError> {
    if let Some(step) = step
        && step < 0
    {
        let (start, end) = match upper {
            Some(upper) => (lower, upper),
            None => (0, lower),
        };
        let span = start as i128 - end as i128 - step as i128;
        if step == isize::MIN || span > isize::MAX as i128 {
            return Err(limit_error(
                Limit::Argument,
                "range bounds and step are out of range".to_owned(),
            ));
        }
    }
    minijinja::functions::range(lower, upper, step)
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
///
/// The indent is at most [`MAX_INDENT`] spaces or characters (Python accepts any, and a
/// huge one allocated it before anything else), and the text is written through a
/// [`FueledWriter`] capped at `cap` bytes, so indentation cannot multiply a value.
fn tojson(
    state: &State,
    value: &JValue,
    indent: Option<JValue>,
    kwargs: Kwargs,
    cap: usize,
) -> Result<JValue, JError> {
    let indent: Option<JValue> = match indent {
        Some(i) => Some(i),
        None => kwargs.get::<Option<JValue>>("indent")?,
    };
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let _: Option<JValue> = kwargs.get("ensure_ascii")?;
    let _: Option<JValue> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let too_wide = || {
        limit_error(
            Limit::Argument,
            format!("tojson indent is wider than {MAX_INDENT}"),
        )
    };
    let indent = match indent {
        Some(i) if i.kind() == ValueKind::Number => match i.as_i64() {
            // Like Python, an indent of zero or less puts newlines without indentation.
            Some(n) if n <= 0 => Some(String::new()),
            Some(n) if n as u64 <= MAX_INDENT as u64 => Some(" ".repeat(n as usize)),
            Some(_) => return Err(too_wide()),
            None => None,
        },
        Some(i) if i.kind() == ValueKind::String => match i.as_str() {
            Some(s) if s.chars().count() > MAX_INDENT => return Err(too_wide()),
            other => other.map(str::to_owned),
        },
        _ => None,
    };
    let mut out = FueledWriter::new(state, cap);
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        PyFormatter {
            indent: indent.map(String::into_bytes),
            level: 0,
            has_value: false,
        },
    );
    // Maps keep the template's key order, as Python dicts do; `sort_keys` sorts them
    // whatever the program's serde_json features.
    let written = if sort_keys == Some(true) {
        SortedKeys(&to_json(value)?).serialize(&mut ser)
    } else {
        value.serialize(&mut ser)
    };
    if let Some(stopped) = out.stopped.take() {
        return Err(stopped);
    }
    written.map_err(|e| JError::new(ErrorKind::InvalidOperation, format!("tojson failed: {e}")))?;
    out.settle()?;
    Ok(JValue::from_safe_string(
        String::from_utf8_lossy(&out.out).into_owned(),
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
    fn the_guards_change_no_render_of_the_fixture_templates() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat-templates");
        let sys = |c: &str| json!({"role": "system", "content": c});
        let user = |c: &str| json!({"role": "user", "content": c});
        let assistant = |c: &str| json!({"role": "assistant", "content": c});
        let conversations = [
            vec![user("a")],
            vec![sys("s"), user("a"), assistant("b"), user("c")],
            vec![user("a"), assistant("b"), sys("u"), user("c")],
            vec![
                sys("s"),
                user("a"),
                json!({"role": "assistant", "content": "<think>\nr\n</think>\n\nb", "reasoning_content": "r"}),
                user("c"),
                assistant("d"),
            ],
        ];
        let mut compared = 0;
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{e}")) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path.extension().is_none_or(|e| e != "jinja") {
                continue;
            }
            let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
            let compile = |guarded| {
                ChatTemplate::compile(&src, RenderOptions::default(), guarded)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            };
            let (guarded, plain) = (compile(true), compile(false));
            for messages in &conversations {
                for generation in [true, false] {
                    let a = guarded.render(messages, generation);
                    let b = plain.render(messages, generation);
                    assert_eq!(a, b, "{}", path.display());
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 32 * 8);
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
