//! A verdict as metric labels: the agent (a closed set), the model (as given; the metrics
//! bound how many), the cause (the engine's closed kinds).

use crate::catalogue::AgentId;

use super::row::RequestRow;

/// The five coding agents the workspace captures, catalogues and runs through the proxy.
pub const KNOWN_AGENTS: [&str; 5] = [
    "claude-code",
    "codex",
    "gemini-cli",
    "qwen-code",
    "opencode",
];

/// The agents a `user-agent` is normalised to: [`KNOWN_AGENTS`], and `other` for anything else.
pub const AGENTS: [&str; 6] = {
    let mut all = ["other"; 6];
    let mut i = 0;
    while i < KNOWN_AGENTS.len() {
        all[i] = KNOWN_AGENTS[i];
        i += 1;
    }
    all
};

/// The agent label of a `user-agent` header: one of [`AGENTS`], from the agent the audit
/// reads ([`AgentId`]: one reading of an agent, in one place); an agent outside the closed
/// set is `other`.
pub fn agent_label(user_agent: Option<&str>) -> &'static str {
    let Some(agent) = user_agent.and_then(AgentId::from_user_agent) else {
        return "other";
    };
    AGENTS
        .iter()
        .copied()
        .find(|&label| label != "other" && label == agent.name)
        .unwrap_or("other")
}

/// The labels a row is counted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricLabels<'r> {
    /// One of [`AGENTS`].
    pub agent: &'static str,
    /// The model as read (`None`: unknown), for the metrics to bound.
    pub model: Option<&'r str>,
    /// The cause's name, `none` when the request extends its predecessor or was not
    /// analysed.
    pub cause: &'static str,
}

impl RequestRow {
    /// The labels this row is counted under.
    pub fn metric_labels(&self) -> MetricLabels<'_> {
        MetricLabels {
            agent: agent_label(self.agent.as_deref()),
            model: self.model.as_deref().filter(|m| !m.is_empty()),
            cause: self.cause.map_or("none", |c| c.as_str()),
        }
    }
}
