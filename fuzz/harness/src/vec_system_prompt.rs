//! `vec_system_prompt`: `set_system_prompt` over an arbitrary `Vec<Value>` conversation.

use prompt_core::history::SystemPromptChange;
use prompt_core::messages::current_system_prompt;
use prompt_core::{DeliveryStyle, set_system_prompt};
use serde_json::Value;

/// The bytes are a JSON array of messages (anything else is skipped), then, after a NUL, a
/// prompt. Invariants: no earlier index ever changes, the prompt reads back as set, and
/// setting it again is a no-op.
pub fn vec_system_prompt(data: &[u8]) {
    let (conversation, prompt) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b"Be brief."[..]),
    };
    let Ok(mut messages) = serde_json::from_slice::<Vec<Value>>(conversation) else {
        return;
    };
    let prompt = String::from_utf8_lossy(prompt);
    for style in [
        DeliveryStyle::system(),
        DeliveryStyle::user_reminder("system-reminder"),
        DeliveryStyle::merged_into_user("system-reminder"),
    ] {
        let before = messages.clone();
        let change = set_system_prompt(&mut messages, &prompt, &style);
        assert_eq!(&messages[..before.len()], &before[..], "{change:?}");
        assert_eq!(
            current_system_prompt(&messages, &style).as_deref(),
            Some(prompt.as_ref()),
            "{change:?}"
        );
        let again = messages.clone();
        assert_eq!(
            set_system_prompt(&mut messages, &prompt, &style),
            SystemPromptChange::Unchanged
        );
        assert_eq!(messages, again);
    }
}
