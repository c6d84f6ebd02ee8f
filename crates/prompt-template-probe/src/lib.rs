//! # prompt-templates
//!
//! Chat-template probe: how a Jinja chat template treats appended updates.
//!
//! An update appended after the history is only worth something if the backend shows it to
//! the model and the rendered request stays a byte prefix of the next one. Chat templates
//! differ: some render a later `role: "system"` message in place, some raise, drop it, move
//! it to the head, or fold it into another turn; some are not prefix-stable at all. The
//! probe renders fixed conversations through a template (minijinja, with the Hugging Face
//! conventions) and reports:
//!
//! - [`MidSystem`]: how a non-first system message is treated;
//! - [`PrefixStability`]: whether turn N renders as a byte prefix of turn N+1;
//! - [`Delivery`]: the update delivery style the library uses with this template, verified
//!   by rendering the requests of a real [`prompt_core::Session`] through it, or a refusal.
//!
//! ```
//! use prompt_template_probe::probe;
//! use prompt_core::delivery::{PrefixRole, UpdateRole};
//! // Gemma 2: no system role at all, strict user/assistant alternation.
//! let gemma2 = "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}\
//!     {% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\
//!     {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}\
//!     {{ '<start_of_turn>' + message['role'] + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}\
//!     {% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";
//! let report = probe(gemma2);
//! assert_eq!(report.mid_system.label(), "raises");
//! assert_eq!(report.delivery.label(), "user_reminder");
//! let style = report.delivery_style().unwrap();
//! assert_eq!((style.role, style.prefix), (UpdateRole::MergedIntoUser, PrefixRole::FirstUser));
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

/// The most a chat template file may hold: 1 MiB. Real templates are a few KiB to a few
/// tens of KiB.
pub const TEMPLATE_LIMIT: u64 = 1 << 20;

mod clock;
mod guard;
mod limits;
mod probe;
mod render;

pub use clock::Clock;
pub use limits::{Limit, RenderLimits};
pub use probe::{
    Delivery, DeliveryAttempt, DeliveryRefused, HeadSystem, MidSystem, PrefixStability,
    ProbeOptions, ProbeReport, REMINDER_TAG, Scenario, ScenarioOutcome, TemplateDivergence, probe,
    probe_with, session_options_for_template, verify_style,
};
pub use render::{ChatTemplate, RenderError, RenderOptions, TemplateError};
