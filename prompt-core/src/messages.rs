//! A drop-in `set_system_prompt` for agents that keep OpenAI chat messages in a
//! `Vec<serde_json::Value>`.
//!
//! It replaces the cache-breaking idiom
//! `messages.retain(|m| m["role"] != "system"); messages.insert(0, new_system)`, which
//! rewrites byte 0 and deletes every system message, compaction summaries included.

use std::borrow::Cow;

use serde_json::Value;

use crate::delivery::DeliveryStyle;
use crate::history::SystemPromptChange;
use crate::node::Producer;

/// The current system prompt of a message list: the newest update this module appended,
/// else the text of a leading system message.
///
/// An update is recognised only where this module writes one: a message after the first,
/// in the style's own update role (`system`, or `user` for the user-reminder styles), whose
/// whole content is the style's wrapper from `system_prompt`. A tool result or (with the
/// system style) a user message quoting the wrapper is not an update. The leading system
/// message is read as it is, never unwrapped: a prompt that itself looks like a wrapper is
/// still that prompt. Content may be a string or an array of text parts (joined as they
/// are), as agents that store OpenAI content parts have it.
pub fn current_system_prompt<'m>(
    messages: &'m [Value],
    style: &DeliveryStyle,
) -> Option<Cow<'m, str>> {
    let update_role = style.update_role();
    let from_update = messages.iter().skip(1).rev().find_map(|m| {
        if m.get("role")?.as_str()? != update_role {
            return None;
        }
        let content = content_text(m.get("content")?)?;
        match content {
            Cow::Borrowed(content) => style
                .unwrap(&Producer::SystemPrompt, content)
                .map(Cow::Borrowed),
            Cow::Owned(content) => style
                .unwrap(&Producer::SystemPrompt, &content)
                .map(|text| Cow::Owned(text.to_owned())),
        }
    });
    from_update.or_else(|| {
        let first = messages.first()?;
        (first.get("role")?.as_str()? == "system")
            .then(|| content_text(first.get("content")?))
            .flatten()
    })
}

/// The text of a message content: a string, or an array of text parts joined as they are.
fn content_text(content: &Value) -> Option<Cow<'_, str>> {
    match content {
        Value::String(text) => Some(Cow::Borrowed(text)),
        Value::Array(parts) => parts
            .iter()
            .map(
                |part| match (part.get("type")?.as_str()?, part.get("text")?.as_str()) {
                    ("text", Some(text)) => Some(text),
                    _ => None,
                },
            )
            .collect::<Option<Vec<&str>>>()
            .map(|texts| Cow::Owned(texts.concat())),
        _ => None,
    }
}

/// Sets the system prompt of `messages` without rewriting any message already there.
///
/// - unchanged prompt → no mutation, [`SystemPromptChange::Unchanged`];
/// - empty conversation → the prompt is placed first, [`SystemPromptChange::Placed`];
/// - changed → appended as an update in `style`; every earlier index is untouched.
///
/// Nothing is ever removed, so a compaction summary stored as `role: "system"` survives.
/// A plain `Vec` holds no pending state, so with [`UpdateRole::MergedIntoUser`](crate::delivery::UpdateRole::MergedIntoUser) the
/// update is appended as a user message of its own rather than merged into the next one.
///
/// ```
/// use prompt_core::{set_system_prompt, DeliveryStyle, history::SystemPromptChange};
/// use serde_json::json;
/// let style = DeliveryStyle::system();
/// let mut messages = vec![];
/// assert_eq!(set_system_prompt(&mut messages, "Be brief.", &style), SystemPromptChange::Placed);
/// messages.push(json!({"role": "system", "content": "Summary of earlier turns: ..."}));
/// messages.push(json!({"role": "user", "content": "hi"}));
/// let before = messages.clone();
/// assert_eq!(set_system_prompt(&mut messages, "Be brief.", &style), SystemPromptChange::Unchanged);
/// assert_eq!(messages, before);
/// assert_eq!(set_system_prompt(&mut messages, "Be terse.", &style), SystemPromptChange::Appended(3));
/// assert_eq!(&messages[..3], &before[..]);
/// ```
pub fn set_system_prompt(
    messages: &mut Vec<Value>,
    prompt: &str,
    style: &DeliveryStyle,
) -> SystemPromptChange {
    if current_system_prompt(messages, style).as_deref() == Some(prompt) {
        return SystemPromptChange::Unchanged;
    }
    if messages.is_empty() {
        messages.push(serde_json::json!({"role": "system", "content": prompt}));
        return SystemPromptChange::Placed;
    }
    messages.push(style.message(&Producer::SystemPrompt, prompt));
    SystemPromptChange::Appended(messages.len() - 1)
}
