//! `stabilize_body`: `cacheline proxy --stabilize`'s decision on hostile request bodies. The
//! first byte picks the agent and API; the rest is an earlier body, a NUL, a later one (sent
//! twice: the repair, then the same request mapped again). No input may panic; a repaired
//! body of a JSON body is JSON, and grows by at most the frozen element and the updates.

use cacheline_proxy::stabilize::{
    Decision, MAX_ELEMENT_BYTES, MAX_INSERTIONS, RepairState, repairable,
};
use prompt_core::ApiKind;
use prompt_measure::catalogue::{AgentId, Catalogue};
use serde::de::IgnoredAny;

const AGENTS: [(&str, ApiKind); 4] = [
    (
        "opencode/1.18.33 ai-sdk/provider-utils/4.0.46 runtime/bun/1.3.14",
        ApiKind::Anthropic,
    ),
    ("QwenCode/0.15.10 (linux; x64)", ApiKind::OpenAi),
    (
        "GeminiCLI-tui/0.61.0/gemini-2.5-flash (linux; x64; terminal)",
        ApiKind::Gemini,
    ),
    ("claude-cli/2.1.197 (external, cli)", ApiKind::Anthropic),
];

/// The fuzz target's body.
pub fn stabilize_body(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (ua, api) = AGENTS[usize::from(mode) % AGENTS.len()];
    let Ok(catalogue) = Catalogue::builtin() else {
        return;
    };
    let Ok(entries) = repairable(catalogue.writers(), None) else {
        return;
    };
    let agent = AgentId::from_user_agent(ua);
    let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let earlier = &rest[..split];
    let later = rest.get(split + 1..).unwrap_or_default();
    let mut state = RepairState::default();
    for (i, body) in [earlier, later, later].into_iter().enumerate() {
        if let Decision::Repaired { body: sent, .. } =
            state.decide(&entries, api, agent.as_ref(), body, i as u64)
        {
            if serde_json::from_slice::<IgnoredAny>(body).is_ok() {
                assert!(
                    serde_json::from_slice::<IgnoredAny>(&sent).is_ok(),
                    "a repair of a JSON body is not JSON"
                );
            }
            assert!(
                sent.len() <= body.len() + 2 * MAX_ELEMENT_BYTES + MAX_INSERTIONS * 2048,
                "a repair grew the body by {} bytes",
                sent.len() - body.len()
            );
        }
    }
}
