//! How updates reach the model: the role they travel as, the tag that wraps them, and
//! where the frozen prefix goes.

use serde::Serialize;
use serde_json::Value;

use crate::json;
use crate::node::Producer;

/// How update nodes are delivered to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateRole {
    /// As a `role: "system"` message of its own: OpenAI-style APIs and ChatML templates that
    /// render a later system message in place.
    #[default]
    System,
    /// As a `role: "user"` message of its own: APIs with a single system field (Anthropic,
    /// Gemini) and templates that reject or hoist a later system message.
    UserReminder,
    /// Prepended to the content of the next user message, so no message is added: templates
    /// that demand strict user/assistant alternation. The update is then stored inside that
    /// user message (ephemeral tail output too: there is no other place for it).
    MergedIntoUser,
}

impl UpdateRole {
    /// The serde name: `system`, `user_reminder` or `merged_into_user`.
    pub fn as_str(self) -> &'static str {
        match self {
            UpdateRole::System => "system",
            UpdateRole::UserReminder => "user_reminder",
            UpdateRole::MergedIntoUser => "merged_into_user",
        }
    }
}

/// Where the session's frozen prefix goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefixRole {
    /// A system message at the head.
    #[default]
    System,
    /// Prepended to the session's first user message: templates that accept no system role.
    FirstUser,
}

impl PrefixRole {
    /// The serde name: `system` or `first_user`.
    pub fn as_str(self) -> &'static str {
        match self {
            PrefixRole::System => "system",
            PrefixRole::FirstUser => "first_user",
        }
    }
}

/// The session setting for update delivery: the role, the tag that wraps update text, and
/// where the prefix goes.
///
/// An update reads `<tag from="producer">\ntext\n</tag>`, so the model can tell which
/// writer changed, and so a `Vec<Value>` conversation can recognise its own updates without
/// any extra field in the message.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct DeliveryStyle {
    /// The role updates travel as.
    pub role: UpdateRole,
    /// The wrapping tag name.
    pub tag: String,
    /// Where the prefix goes.
    pub prefix: PrefixRole,
}

impl Default for DeliveryStyle {
    fn default() -> Self {
        Self::system()
    }
}

impl DeliveryStyle {
    /// The default tag.
    pub const DEFAULT_TAG: &'static str = "system-update";

    /// The tag of user reminders (Anthropic, Gemini, and the providers whose profile sends
    /// updates as user messages): `system-reminder`, the wrapper the proxies in front of
    /// DeepSeek use for the system messages they turn into user messages.
    pub const REMINDER_TAG: &'static str = "system-reminder";

    /// Updates as system messages.
    pub fn system() -> Self {
        Self {
            role: UpdateRole::System,
            tag: Self::DEFAULT_TAG.to_owned(),
            prefix: PrefixRole::System,
        }
    }

    /// Updates as user messages wrapped in `tag`.
    pub fn user_reminder(tag: impl Into<String>) -> Self {
        Self {
            role: UpdateRole::UserReminder,
            tag: tag.into(),
            prefix: PrefixRole::System,
        }
    }

    /// Updates wrapped in `tag` and prepended to the next user message.
    pub fn merged_into_user(tag: impl Into<String>) -> Self {
        Self {
            role: UpdateRole::MergedIntoUser,
            tag: tag.into(),
            prefix: PrefixRole::System,
        }
    }

    /// The same style with the prefix placed as given.
    pub fn with_prefix(mut self, prefix: PrefixRole) -> Self {
        self.prefix = prefix;
        self
    }

    /// The wrapped text of an update.
    pub fn wrap(&self, producer: &Producer, text: &str) -> String {
        format!(
            "<{tag} from=\"{producer}\">\n{text}\n</{tag}>",
            tag = self.tag
        )
    }

    /// The text inside a wrapper from `producer`, if `content` is one.
    pub fn unwrap<'c>(&self, producer: &Producer, content: &'c str) -> Option<&'c str> {
        let open = format!("<{} from=\"{producer}\">\n", self.tag);
        let close = format!("\n</{}>", self.tag);
        content.strip_prefix(&open)?.strip_suffix(&close)
    }

    /// The update message for `text` from `producer`, as a message of its own. With
    /// [`UpdateRole::MergedIntoUser`] this is the user message it would be merged into.
    pub fn message(&self, producer: &Producer, text: &str) -> Value {
        serde_json::json!({ "role": self.update_role(), "content": self.wrap(producer, text) })
    }

    /// [`DeliveryStyle::message`], serialized as the library stores it (`role` first).
    pub(crate) fn message_json(&self, producer: &Producer, text: &str) -> String {
        json::text_message(self.update_role(), &self.wrap(producer, text))
    }

    /// The role of an update message of its own: `system` or `user`.
    pub fn update_role(&self) -> &'static str {
        match self.role {
            UpdateRole::System => "system",
            UpdateRole::UserReminder | UpdateRole::MergedIntoUser => "user",
        }
    }
}

/// The kind of API or engine a session talks to; it picks the delivery style. The
/// workspace's one API identity: the wire writes bodies of it, the engine reads a body as
/// one of it, the proxy and the benchmarks name APIs by it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ApiKind {
    /// OpenAI Chat Completions and compatible APIs: a later system message is kept in place.
    #[serde(rename = "openai")]
    OpenAi,
    /// OpenAI Responses: the frozen prefix in `instructions`, updates as `system` input
    /// messages, kept in place like Chat Completions' system messages.
    #[serde(rename = "openai_responses")]
    OpenAiResponses,
    /// Anthropic Messages: one `system` field; every system message is hoisted there.
    Anthropic,
    /// Gemini: one `systemInstruction`; same as Anthropic.
    Gemini,
    /// llama.cpp's server: depends on the model's chat template (probe it); system by default.
    LlamaCpp,
}

impl ApiKind {
    /// Every API, in declaration order.
    pub const ALL: [ApiKind; 5] = [
        ApiKind::OpenAi,
        ApiKind::OpenAiResponses,
        ApiKind::Anthropic,
        ApiKind::Gemini,
        ApiKind::LlamaCpp,
    ];

    /// The API's name in messages: `OpenAI Chat Completions`, `OpenAI Responses`,
    /// `Anthropic Messages`, `Gemini generateContent`, `llama.cpp server`.
    pub fn name(self) -> &'static str {
        match self {
            ApiKind::OpenAi => "OpenAI Chat Completions",
            ApiKind::OpenAiResponses => "OpenAI Responses",
            ApiKind::Anthropic => "Anthropic Messages",
            ApiKind::Gemini => "Gemini generateContent",
            ApiKind::LlamaCpp => "llama.cpp server",
        }
    }

    /// The delivery style for this API.
    pub fn delivery(self) -> DeliveryStyle {
        match self {
            ApiKind::OpenAi | ApiKind::OpenAiResponses | ApiKind::LlamaCpp => {
                DeliveryStyle::system()
            }
            ApiKind::Anthropic | ApiKind::Gemini => {
                DeliveryStyle::user_reminder(DeliveryStyle::REMINDER_TAG)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_responses_delivers_updates_as_system_messages_and_reads_its_serde_name() {
        assert_eq!(ApiKind::OpenAiResponses.delivery(), DeliveryStyle::system());
        let kind: ApiKind = serde_json::from_str("\"openai_responses\"").unwrap();
        assert_eq!(kind, ApiKind::OpenAiResponses);
        assert_eq!(
            serde_json::to_string(&ApiKind::OpenAiResponses).unwrap(),
            "\"openai_responses\""
        );
    }
}
