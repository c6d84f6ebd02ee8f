//! The probe: fixed conversations rendered through a template, classified by where unique
//! marker strings land.

use std::fmt;

use prompt_core::divergence::{Divergence, Excerpt, common_prefix_len};
use prompt_core::{
    Component, ComponentId, DeliveryStyle, Extensions, Persist, Placement, PromptPolicy, Session,
    SessionContext, SessionOptions, delivery::PrefixRole, delivery::UpdateRole,
};
use serde::Serialize;
use serde_json::{Value, json};

use super::clock::Clock;
use super::limits::RenderLimits;
use super::render::{ChatTemplate, RenderError, RenderOptions};

/// The tag that wraps updates delivered as user messages.
pub const REMINDER_TAG: &str = "system-reminder";

// Unique markers: lowercase, no template keyword (`/think`, `</think>`), survive `trim`.
const HEAD: &str = "probe-head-system-q7z";
const USER1: &str = "probe-user-one-q7z";
const ASSISTANT1: &str = "probe-assistant-one-q7z";
const UPDATE1: &str = "probe-update-one-q7z";
const USER2: &str = "probe-user-two-q7z";
const ASSISTANT2: &str = "probe-assistant-two-q7z";
const REASONING2: &str = "probe-reasoning-two-q7z";
const UPDATE2: &str = "probe-update-two-q7z";
const USER3: &str = "probe-user-three-q7z";
const NEW_SYSTEM: &str = "probe-new-system-prompt-q7z";

/// Options of a probe.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ProbeOptions {
    /// What the renders see (`bos_token`, `eos_token`, the clock, extra variables) and what
    /// each may cost.
    pub render: RenderOptions,
}

impl ProbeOptions {
    /// The same options with these render options.
    pub fn with_render(mut self, render: RenderOptions) -> Self {
        self.render = render;
        self
    }
}

impl Default for ProbeOptions {
    /// The default render options with [`RenderLimits::PROBE`].
    fn default() -> Self {
        Self {
            render: RenderOptions {
                limits: RenderLimits::PROBE,
                ..RenderOptions::default()
            },
        }
    }
}

/// How the template treats a `role: "system"` message that is not the first message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MidSystem {
    /// Rendered where it stands, as a turn of its own.
    InPlace,
    /// The template rejects it with `raise_exception`.
    Raises {
        /// The template's message.
        message: String,
    },
    /// Rendered nowhere.
    Dropped,
    /// Moved to, or merged into, the head of the prompt (before the first user message).
    Hoisted {
        /// Whether the first system message is still rendered (merged) or was replaced.
        head_kept: bool,
    },
    /// Folded into another message's turn.
    Merged {
        /// Which: `previous_message`, `next_message` or `later_message`.
        into: String,
    },
    /// The engine could not render the conversation.
    RenderError {
        /// The engine's message.
        message: String,
    },
}

impl MidSystem {
    /// The label: `in_place`, `raises`, `dropped`, `hoisted`, `merged` or `render_error`.
    pub fn label(&self) -> &'static str {
        match self {
            MidSystem::InPlace => "in_place",
            MidSystem::Raises { .. } => "raises",
            MidSystem::Dropped => "dropped",
            MidSystem::Hoisted { .. } => "hoisted",
            MidSystem::Merged { .. } => "merged",
            MidSystem::RenderError { .. } => "render_error",
        }
    }
}

/// How the template treats the first message when it is a system message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HeadSystem {
    /// Rendered at the head as a block of its own.
    Rendered,
    /// Rendered at the head inside the first user turn (Gemma).
    FoldedIntoFirstUser,
    /// Rendered after the first user message (Mistral: inside the last user message).
    Moved,
    /// Rendered nowhere.
    Dropped,
    /// The template rejects a system message.
    Raises {
        /// The template's message.
        message: String,
    },
    /// The engine could not render the conversation.
    RenderError {
        /// The engine's message.
        message: String,
    },
}

impl HeadSystem {
    fn accepted(&self) -> bool {
        !matches!(
            self,
            HeadSystem::Raises { .. } | HeadSystem::RenderError { .. }
        )
    }
}

/// Where a rendered turn stops being a prefix of the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateDivergence {
    /// Where, in the rendered text: the first differing byte of the earlier render, and the
    /// text around it on each side.
    #[serde(flatten)]
    pub at: Divergence,
    /// Where that byte lies: `head`, `user_1`, `assistant_1`, `update_1`, `user_2`,
    /// `assistant_2` or `after_last_message`.
    pub region: String,
    /// Why, in a few words.
    pub reason: String,
}

/// The outcome of one prefix scenario.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ScenarioOutcome {
    /// The earlier render is a byte prefix of the later one.
    Prefix,
    /// It is not.
    Diverged(TemplateDivergence),
    /// The template did not render one of the two conversations.
    NotRendered {
        /// Why.
        error: String,
    },
}

/// One prefix scenario and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scenario {
    /// `turn`, `system_update`, `reply_reasoning_field` or `reply_reasoning_inline`.
    pub name: &'static str,
    /// What it compares.
    pub description: &'static str,
    /// The outcome.
    #[serde(flatten)]
    pub outcome: ScenarioOutcome,
}

/// Whether the template is prefix-stable across turns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PrefixStability {
    /// Every scenario that renders keeps the earlier turn as a byte prefix.
    Stable,
    /// A scenario diverges.
    Unstable {
        /// The first failing scenario.
        scenario: &'static str,
        /// Where and why.
        divergence: TemplateDivergence,
    },
    /// No scenario rendered.
    Unknown {
        /// Why.
        reason: String,
    },
}

impl PrefixStability {
    /// `Some(true)`, `Some(false)`, or `None` when unknown.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            PrefixStability::Stable => Some(true),
            PrefixStability::Unstable { .. } => Some(false),
            PrefixStability::Unknown { .. } => None,
        }
    }
}

/// The delivery the library will use for updates with this template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Delivery {
    /// This style renders and keeps every request a prefix of the next.
    Use(DeliveryStyle),
    /// No style does.
    Refuse {
        /// Why.
        reason: String,
    },
}

impl Delivery {
    /// The user-facing label: `system`, `user_reminder` or `refuse`.
    pub fn label(&self) -> &'static str {
        match self {
            Delivery::Use(style) if style.role == UpdateRole::System => "system",
            Delivery::Use(_) => "user_reminder",
            Delivery::Refuse { .. } => "refuse",
        }
    }
}

/// One delivery style tried against the template with a real [`Session`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryAttempt {
    /// How updates travel: `system`, `user_reminder` or `merged_into_user`.
    pub updates: &'static str,
    /// Where the prefix goes: `system` or `first_user`.
    pub prefix: &'static str,
    /// `None` when it works; else why not.
    pub failure: Option<String>,
}

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeReport {
    /// How a non-first system message is treated.
    pub mid_system: MidSystem,
    /// Whether the template is prefix-stable across turns.
    pub prefix_stable: PrefixStability,
    /// The delivery style chosen for updates.
    pub delivery: Delivery,
    /// How a first system message is treated.
    pub head_system: HeadSystem,
    /// Every prefix scenario.
    pub scenarios: Vec<Scenario>,
    /// Every delivery style tried, in order of preference.
    pub attempts: Vec<DeliveryAttempt>,
    /// Whether the render changes with the date (`strftime_now` or `datetime`): with a real
    /// clock the prompt then changes when the date does.
    pub clock_dependent: bool,
}

/// No delivery style keeps the prefix stable with this template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no update delivery keeps the prompt prefix-stable with this chat template: {reason}")]
pub struct DeliveryRefused {
    /// Why.
    pub reason: String,
}

impl ProbeReport {
    /// The chosen delivery style, or `None` on a refusal.
    pub fn delivery_style(&self) -> Option<DeliveryStyle> {
        match &self.delivery {
            Delivery::Use(style) => Some(style.clone()),
            Delivery::Refuse { .. } => None,
        }
    }

    /// Session options that use the chosen delivery style.
    pub fn session_options(&self) -> Result<SessionOptions, DeliveryRefused> {
        match &self.delivery {
            Delivery::Use(style) => Ok(SessionOptions::new().with_delivery(style.clone())),
            Delivery::Refuse { reason } => Err(DeliveryRefused {
                reason: reason.clone(),
            }),
        }
    }

    /// The report as JSON: `mid_system`, `prefix_stable` (`true`, `false` or `null`) and
    /// `delivery` (`system`, `user_reminder` or `refuse`) as labels, details beside them.
    pub fn to_json(&self) -> Value {
        let mid_detail = match &self.mid_system {
            MidSystem::Raises { message } | MidSystem::RenderError { message } => {
                json!({ "message": message })
            }
            MidSystem::Hoisted { head_kept } => json!({ "head_kept": head_kept }),
            MidSystem::Merged { into } => json!({ "into": into }),
            MidSystem::InPlace | MidSystem::Dropped => Value::Null,
        };
        let prefix_detail = match &self.prefix_stable {
            PrefixStability::Stable => Value::Null,
            PrefixStability::Unstable {
                scenario,
                divergence,
            } => json!({ "scenario": scenario, "divergence": divergence }),
            PrefixStability::Unknown { reason } => json!({ "reason": reason }),
        };
        let delivery_detail = match &self.delivery {
            Delivery::Use(style) => json!({
                "updates": style.role.as_str(),
                "prefix": style.prefix.as_str(),
                "tag": style.tag,
            }),
            Delivery::Refuse { reason } => json!({ "reason": reason }),
        };
        json!({
            "mid_system": self.mid_system.label(),
            "prefix_stable": self.prefix_stable.as_bool(),
            "delivery": self.delivery.label(),
            "mid_system_detail": mid_detail,
            "prefix_stable_detail": prefix_detail,
            "delivery_detail": delivery_detail,
            "head_system": self.head_system,
            "clock_dependent": self.clock_dependent,
            "scenarios": self.scenarios,
            "attempts": self.attempts,
        })
    }
}

impl TryFrom<&ProbeReport> for SessionOptions {
    type Error = DeliveryRefused;

    fn try_from(report: &ProbeReport) -> Result<Self, Self::Error> {
        report.session_options()
    }
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mid_system:    {}", self.mid_system.label())?;
        match &self.mid_system {
            MidSystem::Raises { message } | MidSystem::RenderError { message } => {
                write!(f, " ({message:?})")?
            }
            MidSystem::Hoisted { head_kept: true } => f.write_str(" (merged into the head)")?,
            MidSystem::Hoisted { head_kept: false } => {
                f.write_str(" (replaces the first system message at the head)")?
            }
            MidSystem::Merged { into } => write!(f, " (into the {})", into.replace('_', " "))?,
            MidSystem::InPlace | MidSystem::Dropped => {}
        }
        writeln!(f)?;
        match &self.prefix_stable {
            PrefixStability::Stable => writeln!(f, "prefix_stable: yes")?,
            PrefixStability::Unstable {
                scenario,
                divergence,
            } => writeln!(
                f,
                "prefix_stable: no: {scenario}: byte {} ({}): {}",
                divergence.at.byte_offset, divergence.region, divergence.reason
            )?,
            PrefixStability::Unknown { reason } => writeln!(f, "prefix_stable: unknown: {reason}")?,
        }
        match &self.delivery {
            Delivery::Use(style) => writeln!(
                f,
                "delivery:      {} (updates: {}, prefix: {})",
                self.delivery.label(),
                style.role.as_str(),
                style.prefix.as_str()
            )?,
            Delivery::Refuse { reason } => writeln!(f, "delivery:      refuse: {reason}")?,
        }
        let head = match &self.head_system {
            HeadSystem::Rendered => "rendered at the head".to_owned(),
            HeadSystem::FoldedIntoFirstUser => "folded into the first user turn".to_owned(),
            HeadSystem::Moved => "moved after the first user message".to_owned(),
            HeadSystem::Dropped => "dropped".to_owned(),
            HeadSystem::Raises { message } => format!("raises ({message:?})"),
            HeadSystem::RenderError { message } => format!("render error ({message})"),
        };
        writeln!(f, "first system message: {head}")?;
        if self.clock_dependent {
            writeln!(
                f,
                "warning: the render depends on the current date; the prompt changes when the date does"
            )?;
        }
        for s in &self.scenarios {
            let outcome = match &s.outcome {
                ScenarioOutcome::Prefix => "prefix".to_owned(),
                ScenarioOutcome::Diverged(d) => {
                    format!(
                        "diverged at byte {} ({}): {}",
                        d.at.byte_offset, d.region, d.reason
                    )
                }
                ScenarioOutcome::NotRendered { error } => format!("not rendered: {error}"),
            };
            writeln!(f, "  scenario {}: {outcome}", s.name)?;
        }
        for a in &self.attempts {
            let result = a.failure.as_deref().unwrap_or("ok");
            writeln!(
                f,
                "  delivery updates={} prefix={}: {result}",
                a.updates, a.prefix
            )?;
        }
        Ok(())
    }
}

/// Probes `source` with the default options.
///
/// ```
/// use prompt_template_probe::{probe, MidSystem};
/// // ChatML: every message rendered in place.
/// let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
///               {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
/// let report = probe(chatml);
/// assert_eq!(report.mid_system, MidSystem::InPlace);
/// assert_eq!(report.prefix_stable.as_bool(), Some(true));
/// assert_eq!(report.delivery.label(), "system");
/// ```
pub fn probe(source: &str) -> ProbeReport {
    probe_with(source, &ProbeOptions::default())
}

/// Probes `source`.
pub fn probe_with(source: &str, options: &ProbeOptions) -> ProbeReport {
    let template = match ChatTemplate::with_options(source, options.render.clone()) {
        Ok(t) => t,
        Err(e) => {
            return ProbeReport {
                mid_system: MidSystem::RenderError {
                    message: e.message.clone(),
                },
                prefix_stable: PrefixStability::Unknown {
                    reason: e.to_string(),
                },
                delivery: Delivery::Refuse {
                    reason: e.to_string(),
                },
                head_system: HeadSystem::RenderError { message: e.message },
                scenarios: Vec::new(),
                attempts: Vec::new(),
                clock_dependent: false,
            };
        }
    };
    probe_template(&template, options)
}

/// The options a session should use with this template: the probe's delivery style.
///
/// ```
/// use prompt_template_probe::session_options_for_template;
/// use prompt_core::delivery::UpdateRole;
/// // Gemma 2 style: no system role, strict alternation.
/// let gemma = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}\
///     {% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('alternate') }}{% endif %}\
///     <start_of_turn>{{ m.role }}\n{{ m.content | trim }}<end_of_turn>\n{% endfor %}";
/// let options = session_options_for_template(gemma)?;
/// assert_eq!(options.delivery().role, UpdateRole::MergedIntoUser);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn session_options_for_template(source: &str) -> Result<SessionOptions, DeliveryRefused> {
    probe(source).session_options()
}

fn sys(content: &str) -> Value {
    json!({"role": "system", "content": content})
}
fn user(content: &str) -> Value {
    json!({"role": "user", "content": content})
}
fn assistant(content: &str) -> Value {
    json!({"role": "assistant", "content": content})
}

fn conversation(head: bool, rest: &[Value]) -> Vec<Value> {
    let mut messages = Vec::with_capacity(rest.len() + 1);
    if head {
        messages.push(sys(HEAD));
    }
    messages.extend_from_slice(rest);
    messages
}

fn error_text(e: &RenderError) -> String {
    match e {
        RenderError::Raised { message } => format!("raises {message:?}"),
        other => other.to_string(),
    }
}

fn end_of(text: &str, marker: &str) -> Option<usize> {
    text.find(marker).map(|p| p + marker.len())
}

fn lcp(a: &str, b: &str) -> usize {
    common_prefix_len(a.as_bytes(), b.as_bytes())
}

fn blank(s: &str) -> bool {
    s.trim().is_empty()
}

fn probe_template(template: &ChatTemplate, options: &ProbeOptions) -> ProbeReport {
    let basic = [user(USER1), assistant(ASSISTANT1), user(USER2)];

    // 1. The first system message.
    let head_system = match template.render(&conversation(true, &basic), true) {
        Ok(text) => classify_head(&text),
        Err(RenderError::Raised { message }) => HeadSystem::Raises { message },
        Err(e) => HeadSystem::RenderError {
            message: e.to_string(),
        },
    };
    let head = head_system.accepted();
    let base = match template.render(&conversation(head, &basic), true) {
        Ok(text) => text,
        Err(e) => {
            let reason = format!(
                "the template cannot render a plain user/assistant conversation: {}",
                error_text(&e)
            );
            let mid_system = match e {
                RenderError::Raised { message } => MidSystem::Raises { message },
                other => MidSystem::RenderError {
                    message: other.to_string(),
                },
            };
            return ProbeReport {
                mid_system,
                prefix_stable: PrefixStability::Unknown {
                    reason: reason.clone(),
                },
                delivery: Delivery::Refuse { reason },
                head_system,
                scenarios: Vec::new(),
                attempts: Vec::new(),
                clock_dependent: false,
            };
        }
    };

    // 2. A system message in the middle.
    let mid_messages = conversation(
        head,
        &[
            user(USER1),
            assistant(ASSISTANT1),
            sys(UPDATE1),
            user(USER2),
        ],
    );
    let mid_system = match template.render(&mid_messages, true) {
        Ok(text) => classify_mid(&text),
        Err(RenderError::Raised { message }) => MidSystem::Raises { message },
        Err(e) => MidSystem::RenderError {
            message: e.to_string(),
        },
    };

    // 3. Prefix stability.
    let scenarios = scenarios(template, head);
    let first_diverged = scenarios.iter().find_map(|s| match &s.outcome {
        ScenarioOutcome::Diverged(d) => Some((s.name, d.clone())),
        _ => None,
    });
    let prefix_stable = match first_diverged {
        Some((scenario, divergence)) => PrefixStability::Unstable {
            scenario,
            divergence,
        },
        None if scenarios
            .iter()
            .all(|s| matches!(s.outcome, ScenarioOutcome::NotRendered { .. })) =>
        {
            PrefixStability::Unknown {
                reason: "no scenario rendered".to_owned(),
            }
        }
        None => PrefixStability::Stable,
    };

    // 4. The date.
    let mut shifted = options.render.clone();
    shifted.clock = Clock::shifted(&options.render.clock);
    let clock_dependent = ChatTemplate::with_options(template_source(template), shifted)
        .ok()
        .and_then(|t| t.render(&conversation(head, &basic), true).ok())
        .is_some_and(|other| other != base);

    // 5. Delivery, verified with a real session.
    let (delivery, attempts) = choose_delivery(template);

    ProbeReport {
        mid_system,
        prefix_stable,
        delivery,
        head_system,
        scenarios,
        attempts,
        clock_dependent,
    }
}

fn template_source(template: &ChatTemplate) -> &str {
    template.source()
}

fn classify_head(text: &str) -> HeadSystem {
    let (Some(h), Some(u)) = (text.find(HEAD), text.find(USER1)) else {
        return HeadSystem::Dropped;
    };
    if h > u {
        return HeadSystem::Moved;
    }
    if blank(&text[h + HEAD.len()..u]) {
        HeadSystem::FoldedIntoFirstUser
    } else {
        HeadSystem::Rendered
    }
}

fn classify_mid(text: &str) -> MidSystem {
    let Some(m) = text.find(UPDATE1) else {
        return MidSystem::Dropped;
    };
    let (Some(u1), Some(a1_end), Some(u2)) =
        (text.find(USER1), end_of(text, ASSISTANT1), text.find(USER2))
    else {
        // A neighbour vanished: the message was folded somewhere we cannot place.
        return MidSystem::Merged {
            into: "later_message".to_owned(),
        };
    };
    if m < u1 {
        return MidSystem::Hoisted {
            head_kept: text.contains(HEAD),
        };
    }
    if m < a1_end {
        return MidSystem::Merged {
            into: "previous_message".to_owned(),
        };
    }
    if m > u2 {
        return MidSystem::Merged {
            into: "later_message".to_owned(),
        };
    }
    let before = &text[a1_end..m];
    let after = &text[m + UPDATE1.len()..u2];
    match (blank(before), blank(after)) {
        (false, false) => MidSystem::InPlace,
        (true, _) => MidSystem::Merged {
            into: "previous_message".to_owned(),
        },
        (false, true) => MidSystem::Merged {
            into: "next_message".to_owned(),
        },
    }
}

/// How an earlier render is compared with a later one.
enum Earlier {
    /// A request ending with a user message: its stable part (the bytes shared by the
    /// renders with and without the generation prompt) must be a prefix of the next.
    Request,
    /// A finished turn (the reply rendered as the last message): it must be a prefix of the
    /// next request through the end of the reply's text.
    Reply,
}

fn scenarios(template: &ChatTemplate, head: bool) -> Vec<Scenario> {
    let turn_n = [user(USER1), assistant(ASSISTANT1), user(USER2)];
    let turn_n1 = [
        user(USER1),
        assistant(ASSISTANT1),
        user(USER2),
        assistant(ASSISTANT2),
        user(USER3),
    ];
    let upd_n = [
        user(USER1),
        assistant(ASSISTANT1),
        sys(UPDATE1),
        user(USER2),
    ];
    let upd_n1 = [
        user(USER1),
        assistant(ASSISTANT1),
        sys(UPDATE1),
        user(USER2),
        assistant(ASSISTANT2),
        sys(UPDATE2),
        user(USER3),
    ];
    let reply_field = json!({
        "role": "assistant",
        "content": ASSISTANT2,
        "reasoning_content": REASONING2,
        "thinking": REASONING2,
    });
    let inline = format!("<think>\n{REASONING2}\n</think>\n\n{ASSISTANT2}");
    let reply_inline = assistant(&inline);
    let with_reply = |reply: &Value| {
        let done = [
            user(USER1),
            assistant(ASSISTANT1),
            user(USER2),
            reply.clone(),
        ];
        let next = [
            user(USER1),
            assistant(ASSISTANT1),
            user(USER2),
            reply.clone(),
            user(USER3),
        ];
        (conversation(head, &done), conversation(head, &next))
    };
    let (field_done, field_next) = with_reply(&reply_field);
    let (inline_done, inline_next) = with_reply(&reply_inline);
    vec![
        Scenario {
            name: "turn",
            description: "turn N (system, user, assistant, user) vs turn N+1 (+ assistant, user)",
            outcome: compare(
                template,
                &conversation(head, &turn_n),
                &conversation(head, &turn_n1),
                Earlier::Request,
            ),
        },
        Scenario {
            name: "system_update",
            description: "the same with a system message before each new user message",
            outcome: compare(
                template,
                &conversation(head, &upd_n),
                &conversation(head, &upd_n1),
                Earlier::Request,
            ),
        },
        Scenario {
            name: "reply_reasoning_field",
            description: "turn N with the reply (reasoning in reasoning_content/thinking) as the last message vs turn N+1",
            outcome: compare(template, &field_done, &field_next, Earlier::Reply),
        },
        Scenario {
            name: "reply_reasoning_inline",
            description: "turn N with the reply (reasoning inline in <think> tags) as the last message vs turn N+1",
            outcome: compare(template, &inline_done, &inline_next, Earlier::Reply),
        },
    ]
}

fn compare(
    template: &ChatTemplate,
    earlier: &[Value],
    later: &[Value],
    kind: Earlier,
) -> ScenarioOutcome {
    let not_rendered = |e: RenderError| ScenarioOutcome::NotRendered {
        error: error_text(&e),
    };
    let later_text = match template.render(later, true) {
        Ok(t) => t,
        Err(e) => return not_rendered(e),
    };
    let (earlier_text, required) = match kind {
        Earlier::Request => {
            let with = match template.render(earlier, true) {
                Ok(t) => t,
                Err(e) => return not_rendered(e),
            };
            let stable = match template.render(earlier, false) {
                Ok(without) => lcp(&with, &without),
                Err(_) => with.len(),
            };
            (with, stable)
        }
        Earlier::Reply => {
            let done = match template.render(earlier, false) {
                Ok(t) => t,
                Err(e) => return not_rendered(e),
            };
            let end = end_of(&done, ASSISTANT2).unwrap_or(done.len());
            (done, end)
        }
    };
    let common = lcp(&earlier_text, &later_text);
    if common >= required {
        return ScenarioOutcome::Prefix;
    }
    let region = region_at(&earlier_text, common);
    let reason = reason_for(&kind, &region, &earlier_text, &later_text);
    ScenarioOutcome::Diverged(TemplateDivergence {
        at: Divergence {
            byte_offset: common,
            message_index: None,
            producer: None,
            excerpt: Excerpt::around(earlier_text.as_bytes(), later_text.as_bytes(), common),
        },
        region,
        reason,
    })
}

/// The message region of `text` holding byte `offset`: the first marker whose text ends
/// after it.
fn region_at(text: &str, offset: usize) -> String {
    let markers = [
        (USER1, "user_1"),
        (ASSISTANT1, "assistant_1"),
        (UPDATE1, "update_1"),
        (USER2, "user_2"),
        (ASSISTANT2, "assistant_2"),
    ];
    if text.find(USER1).is_none_or(|u| offset < u) {
        return "head".to_owned();
    }
    let mut ends: Vec<(usize, &str)> = markers
        .iter()
        .filter_map(|(m, name)| end_of(text, m).map(|e| (e, *name)))
        .collect();
    ends.sort_unstable();
    ends.iter()
        .find(|(end, _)| offset < *end)
        .map_or_else(|| "after_last_message".to_owned(), |(_, n)| (*n).to_owned())
}

fn reason_for(kind: &Earlier, region: &str, earlier: &str, later: &str) -> String {
    match (kind, region) {
        (_, "head") if later.contains(UPDATE2) && !earlier.contains(UPDATE2) => {
            "a later system message is moved into the head, which rewrites the start of the prompt"
                .to_owned()
        }
        (_, "head") => "the head of the prompt changes between turns".to_owned(),
        (Earlier::Request, "user_2") if earlier.find(HEAD) > earlier.find(USER1) => {
            "the system prompt is rendered inside the last user message, so it moves every turn"
                .to_owned()
        }
        (Earlier::Request, "user_2") => {
            "the last user message is rendered differently once it is no longer last".to_owned()
        }
        (Earlier::Request, "after_last_message") => {
            "text the template adds after the last message is not kept when the conversation grows (reuse stops at the last message)"
                .to_owned()
        }
        (Earlier::Reply, "assistant_2") if earlier.contains(REASONING2) && !later.contains(REASONING2) => {
            "earlier reasoning is stripped: the reply's reasoning is dropped once it is no longer the last message"
                .to_owned()
        }
        (Earlier::Reply, "assistant_2") => {
            "the reply is rendered differently once it is no longer the last message".to_owned()
        }
        (_, other) => format!("the {} is rendered differently when a turn is added", other.replace('_', " ")),
    }
}

/// The candidate styles, most preferred first.
fn candidates() -> Vec<DeliveryStyle> {
    vec![
        DeliveryStyle::system(),
        DeliveryStyle::user_reminder(REMINDER_TAG),
        DeliveryStyle::merged_into_user(REMINDER_TAG),
        DeliveryStyle::user_reminder(REMINDER_TAG).with_prefix(PrefixRole::FirstUser),
        DeliveryStyle::merged_into_user(REMINDER_TAG).with_prefix(PrefixRole::FirstUser),
    ]
}

fn choose_delivery(template: &ChatTemplate) -> (Delivery, Vec<DeliveryAttempt>) {
    let mut attempts = Vec::new();
    for style in candidates() {
        let failure = verify_style(template, &style).err();
        let ok = failure.is_none();
        attempts.push(DeliveryAttempt {
            updates: style.role.as_str(),
            prefix: style.prefix.as_str(),
            failure,
        });
        if ok {
            return (Delivery::Use(style), attempts);
        }
    }
    let reason = attempts
        .iter()
        .map(|a| {
            format!(
                "{}/{}: {}",
                a.updates,
                a.prefix,
                a.failure.as_deref().unwrap_or("ok")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    (Delivery::Refuse { reason }, attempts)
}

const SESSION_PREFIX: &str = "probe-session-prefix-q7z";
const SESSION_USER: [&str; 3] = [
    "probe-session-user-1-q7z",
    "probe-session-user-2-q7z",
    "probe-session-user-3-q7z",
];

fn todo_text(turn: u64) -> String {
    format!("probe-session-todo-{turn}-q7z")
}
fn plan_text(turn: u64) -> String {
    format!("probe-session-plan-{turn}-q7z")
}

fn id(text: &str) -> Result<ComponentId, String> {
    ComponentId::new(text).map_err(|e| e.to_string())
}

/// Runs a real [`Session`] in `style` for three turns (a persisting tail update every turn,
/// an ephemeral tail output, a system-prompt change before turn 3), renders every request
/// through the template, and checks that each renders, shows everything it carries, and
/// that each rendered request is a byte prefix of the next through its last user message.
pub fn verify_style(template: &ChatTemplate, style: &DeliveryStyle) -> Result<(), String> {
    let components = vec![
        Component::constant(id("probe_prefix")?, SESSION_PREFIX).placement(Placement::Prefix),
        Component::turn(id("probe_todo")?, |t| Some(todo_text(t.turn())))
            .placement(Placement::Tail),
        Component::turn(id("probe_plan")?, |t| Some(plan_text(t.turn())))
            .placement(Placement::Tail)
            .persist(Persist::Ephemeral),
    ];
    let policy = PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"probe_prefix\"]\n",
        "<probe>",
        &components,
    )
    .and_then(prompt_core::policy::LoadedPolicy::deny_warnings)
    .map_err(|e| format!("probe policy: {e:?}"))?;
    let mut session = Session::start(
        components,
        &policy,
        SessionContext::default(),
        SessionOptions::new().with_delivery(style.clone()),
    )
    .map_err(|e| e.to_string())?;

    let mut renders: Vec<String> = Vec::new();
    for (i, user_text) in SESSION_USER.iter().enumerate() {
        let turn = i as u64 + 1;
        if turn == 3 {
            session.set_system_prompt(NEW_SYSTEM);
        }
        let request = session
            .turn(Extensions::new(), *user_text)
            .map_err(|e| e.to_string())?
            .to_bytes();
        let text = template
            .render_request(&request, true)
            .map_err(|e| format!("turn {turn}: {}", error_text(&e)))?;
        let mut expected = vec![SESSION_PREFIX.to_owned(), (*user_text).to_owned()];
        expected.push(todo_text(turn));
        expected.push(plan_text(turn));
        if turn == 3 {
            expected.push(NEW_SYSTEM.to_owned());
        }
        if let Some(missing) = expected.iter().find(|m| !text.contains(m.as_str())) {
            return Err(format!("turn {turn}: {missing} is not rendered"));
        }
        if turn == 3
            && let (Some(new), Some(u1)) = (text.find(NEW_SYSTEM), text.find(SESSION_USER[0]))
            && new < u1
        {
            return Err("turn 3: the new system prompt is moved to the head".to_owned());
        }
        session
            .record_assistant(&json!({
                "role": "assistant",
                "content": format!("probe-session-assistant-{turn}-q7z"),
            }))
            .map_err(|e| e.to_string())?;
        renders.push(text);
    }
    for (k, pair) in renders.windows(2).enumerate() {
        let (earlier, later) = (&pair[0], &pair[1]);
        let needed = end_of(earlier, SESSION_USER[k]).unwrap_or(earlier.len());
        let common = lcp(earlier, later);
        if common < needed {
            return Err(format!(
                "turn {} is not a prefix of turn {} through its user message: diverges at byte {common} ({:?} vs {:?})",
                k + 1,
                k + 2,
                Excerpt::of(earlier.as_bytes(), common),
                Excerpt::of(later.as_bytes(), common)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

    #[test]
    fn chatml_is_in_place_stable_and_uses_system_updates() {
        let r = probe(CHATML);
        assert_eq!(r.mid_system, MidSystem::InPlace);
        assert_eq!(r.prefix_stable, PrefixStability::Stable);
        assert_eq!(r.delivery, Delivery::Use(DeliveryStyle::system()));
        assert_eq!(r.head_system, HeadSystem::Rendered);
        assert!(!r.clock_dependent);
        let json = r.to_json();
        assert_eq!(json["mid_system"], "in_place");
        assert_eq!(json["prefix_stable"], true);
        assert_eq!(json["delivery"], "system");
    }

    #[test]
    fn dropped_system_messages_get_user_reminders() {
        let src = "{{ messages[0].content }}|{% for m in messages if m.role != 'system' %}<{{ m.role }}>{{ m.content }}{% endfor %}";
        let r = probe(src);
        assert_eq!(r.mid_system, MidSystem::Dropped);
        assert_eq!(
            r.delivery_style().map(|s| s.role),
            Some(UpdateRole::UserReminder)
        );
    }

    #[test]
    fn last_system_message_at_the_head_is_hoisted_and_unstable() {
        let src = "{% set ns = namespace(s='') %}{% for m in messages if m.role == 'system' %}{% set ns.s = m.content %}{% endfor %}{{ ns.s }}{% for m in messages if m.role != 'system' %}<{{ m.role }}>{{ m.content }}{% endfor %}";
        let r = probe(src);
        assert_eq!(r.mid_system, MidSystem::Hoisted { head_kept: false });
        match &r.prefix_stable {
            PrefixStability::Unstable {
                scenario,
                divergence,
            } => {
                assert_eq!(*scenario, "system_update");
                assert_eq!(divergence.region, "head");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.delivery.label(), "user_reminder");
    }

    #[test]
    fn system_text_glued_to_the_next_user_message_is_merged() {
        let src = "{% set ns = namespace(p='') %}{% for m in messages %}{% if m.role == 'system' %}{% set ns.p = m.content + '\n\n' %}{% elif m.role == 'user' %}[INST]{{ ns.p }}{{ m.content }}[/INST]{% set ns.p = '' %}{% else %}{{ m.content }}</s>{% endif %}{% endfor %}";
        let r = probe(src);
        assert_eq!(
            r.mid_system,
            MidSystem::Merged {
                into: "next_message".to_owned()
            }
        );
        let src = "{% for m in messages %}{% if m.role == 'system' %}\n\n{{ m.content }}{% else %}</s><{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}";
        assert_eq!(
            probe(src).mid_system,
            MidSystem::Merged {
                into: "previous_message".to_owned()
            }
        );
    }

    #[test]
    fn a_head_that_changes_every_turn_is_refused() {
        let src = "{{ messages | length }}:{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
        let r = probe(src);
        assert_eq!(r.prefix_stable.as_bool(), Some(false));
        assert_eq!(r.delivery.label(), "refuse");
        assert!(r.session_options().is_err());
        assert_eq!(r.attempts.len(), 5);
        assert!(r.attempts.iter().all(|a| a.failure.is_some()));
        assert_eq!(r.to_json()["delivery"], "refuse");
    }

    #[test]
    fn syntax_errors_and_unrenderable_templates_are_reported() {
        let r = probe("{% for m in messages %}");
        assert_eq!(r.mid_system.label(), "render_error");
        assert_eq!(r.prefix_stable.as_bool(), None);
        assert_eq!(r.delivery.label(), "refuse");
        let r = probe("{{ messages[0].content.nonexistent_method() }}");
        assert_eq!(r.mid_system.label(), "render_error");
        assert_eq!(r.to_json()["prefix_stable"], Value::Null);
    }

    #[test]
    fn clock_dependence_is_flagged() {
        let src = format!("{{{{ strftime_now('%d %b %Y') }}}}{CHATML}");
        assert!(probe(&src).clock_dependent);
    }

    #[test]
    fn display_names_the_three_answers() {
        let text = probe(CHATML).to_string();
        assert!(text.contains("mid_system:    in_place"), "{text}");
        assert!(text.contains("prefix_stable: yes"), "{text}");
        assert!(text.contains("delivery:      system"), "{text}");
    }
}
