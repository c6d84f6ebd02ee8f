//! Refreshing what was frozen, deliberately.
//!
//! An MCP server connects mid-session and brings tools and guidance; a skill file is edited;
//! the operator edits `agent.toml`. The frozen prefix and tools never change by themselves:
//! [`Session::refresh`] re-renders them from the components, policy and tools given, and
//! either reports [`Refresh::Unchanged`] without touching anything, or installs them in a
//! new cache epoch and says exactly what changed. [`Session::refresh_at_next_compaction`]
//! is the cache-friendly alternative: the new prefix waits for the next compaction, which
//! starts a new epoch anyway (announce what is new meanwhile as a tail update).

use std::sync::Arc;

use crate::Component;
use crate::context::SessionContext;
use crate::delivery::PrefixRole;
use crate::history::Framing;
use crate::node::Producer;
use crate::policy::PromptPolicy;
use crate::prefix::freeze_prefix;
use crate::session::{ComposeError, Session, SessionOptions};
use crate::snapshot::PrefixChanges;
use crate::tools::ToolSet;

/// What a refresh did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refresh {
    /// The components, policy and tools produce the frozen prefix: nothing was touched.
    Unchanged,
    /// The prefix or the tools changed: installed in a new cache epoch.
    NewEpoch(Box<PrefixChanges>),
    /// Held until the next compaction ([`Session::refresh_at_next_compaction`]).
    Deferred,
}

/// What a refresh installs: the session's writers, policy and tools, anew.
#[derive(Clone)]
pub(crate) struct Replacement {
    pub(crate) session: Session,
}

impl Session {
    /// Re-renders the frozen prefix and tools from `components`, `policy` and `tools` (and
    /// `context`, when given; else the session's). Unchanged: no mutation of the prefix, the
    /// tools or the history (new tail writers join, and speak at the next request). Changed:
    /// the new prefix and tools are installed, the history stays, and a new cache epoch
    /// starts; the result names every component and tool that changed and both
    /// fingerprints, for the agent's log.
    pub fn refresh(
        &mut self,
        components: Vec<Component>,
        policy: &PromptPolicy,
        tools: ToolSet,
        context: Option<SessionContext>,
    ) -> Result<Refresh, ComposeError> {
        let replacement = self.replacement(components, policy, tools, context)?;
        Ok(self.install(replacement))
    }

    /// Holds the refresh until the next [`Session::compact`], which starts a new cache epoch
    /// anyway: the cheap way to take in an MCP server that connected mid-session (announce
    /// its guidance as a tail update meanwhile). `compact` then reports what changed through
    /// [`Session::take_refresh_report`].
    pub fn refresh_at_next_compaction(
        &mut self,
        components: Vec<Component>,
        policy: &PromptPolicy,
        tools: ToolSet,
        context: Option<SessionContext>,
    ) -> Result<Refresh, ComposeError> {
        let replacement = self.replacement(components, policy, tools, context)?;
        self.deferred_refresh = Some(Box::new(replacement));
        Ok(Refresh::Deferred)
    }

    /// The outcome of a refresh that a compaction applied, once.
    pub fn take_refresh_report(&mut self) -> Option<Refresh> {
        self.refresh_report.take()
    }

    fn replacement(
        &self,
        components: Vec<Component>,
        policy: &PromptPolicy,
        tools: ToolSet,
        context: Option<SessionContext>,
    ) -> Result<Replacement, ComposeError> {
        let context = context.map_or_else(|| Arc::clone(&self.context), Arc::new);
        let options = SessionOptions::new()
            .with_delivery(self.history.delivery().clone())
            .with_tools(tools)
            .with_session_id(self.session_id.to_string());
        let session = Session::start_shared(components, policy, context, options)?;
        Ok(Replacement { session })
    }

    /// Installs a replacement: `Unchanged` when it freezes the same prefix and tools.
    pub(crate) fn install(&mut self, replacement: Replacement) -> Refresh {
        let mut new = replacement.session;
        // Turn components in the prefix keep their frozen text.
        for part in &mut new.prefix_parts {
            if part.rendered.is_none()
                && let Some(old) = self
                    .prefix_parts
                    .iter()
                    .find(|o| o.component.id() == part.component.id())
            {
                part.rendered = old.rendered.clone();
            }
        }
        let role = self.history.delivery().prefix;
        let old_parts = self.saved_parts();
        let new_parts = new.saved_parts();
        let same = old_parts == new_parts && new.tools == self.tools;
        if same {
            // The prefix and tools stand: new tail writers join without touching the cache.
            self.take_writers(new);
            return Refresh::Unchanged;
        }
        let Some(old_prefix) = self.prefix.as_ref() else {
            // Nothing was sent yet: nothing to lose.
            self.take_writers(new);
            return Refresh::NewEpoch(Box::new(PrefixChanges::between(
                &old_parts,
                &new_parts,
                &self.tools,
                &self.tools,
                crate::prefix::fingerprint(&self.tools, b""),
                crate::prefix::fingerprint(&self.tools, b""),
            )));
        };
        let frozen = freeze_prefix(&new.prefix_parts, role, &new.tools);
        let changes = PrefixChanges::between(
            &old_parts,
            &new_parts,
            &self.tools,
            &new.tools,
            old_prefix.fingerprint,
            frozen.fingerprint,
        );
        if role == PrefixRole::FirstUser && !frozen.text.is_empty() {
            // The prefix rides in a user message: the new one rides in the next.
            self.history
                .defer_first(Producer::Prefix, &frozen.text, Framing::Verbatim);
        }
        self.take_writers(new);
        self.prefix = Some(frozen);
        self.history.start_epoch();
        Refresh::NewEpoch(Box::new(changes))
    }

    /// Takes the new session's writers, policy outcome and tools; tail components keep the
    /// last output they appended.
    fn take_writers(&mut self, new: Session) {
        let old_tails = std::mem::take(&mut self.tails);
        self.tails = new.tails;
        for slot in &mut self.tails {
            slot.last = old_tails
                .iter()
                .find(|o| o.component.id() == slot.component.id())
                .and_then(|o| o.last.clone());
        }
        self.prefix_parts = new.prefix_parts;
        self.resolutions = new.resolutions;
        self.tools = new.tools;
        self.context = Arc::clone(&new.context);
    }
}
