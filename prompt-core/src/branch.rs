//! Branches: regenerate a reply, edit an earlier message, rewind, fork a sub-task.
//!
//! With an append-only history each of these is a new session whose history, up to the
//! fork point, is the very nodes that were sent: byte-identical, with the same ids, so its
//! next request extends the request sent at the fork point and the provider's cache serves
//! everything before it. The parent is left as it was (an app keeps it, to switch back, or
//! drops it). A branch has a session id of its own, which its wire follows, and keeps its
//! parent's routing id, so its requests go where the parent's cache lives.
//!
//! | user action | call | then |
//! |---|---|---|
//! | regenerate the last reply, retry after an error | [`Session::regenerate`] | [`Session::resend`] |
//! | edit an earlier user message and send it | [`Session::edit_user_message`] | [`Session::turn`] with the new text |
//! | edit an assistant message without regenerating | [`Session::edit_assistant_message`] | the next [`Session::turn`] |
//! | go back to request N | [`Session::rewind`] | [`Session::resend`] (a new turn is refused while request N has no reply) |
//! | fork a sub-task | [`Session::fork`] | its own turns |
//!
//! ```
//! use prompt_core::{Extensions, PrefixCheck, PromptPolicy, Session, SessionContext, SessionOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let options = SessionOptions::new().with_system_prompt("Be brief.");
//! let mut session = Session::start(vec![], &PromptPolicy::default(), SessionContext::default(), options)?;
//! let sent = session.turn(Extensions::new(), "Name a colour.")?.stable_bytes();
//! session.record_assistant(&serde_json::json!({"role": "assistant", "content": "Blue."}))?;
//!
//! // Regenerate: the same request again, on a branch without the reply.
//! let mut again = session.regenerate()?;
//! assert_eq!(again.resend(Extensions::new())?.stable_bytes(), sent);
//! // Edit the user message (node 0: the system prompt is in the prefix): everything before
//! // it is what was sent.
//! let mut edited = session.edit_user_message(0)?;
//! let next = edited.turn(Extensions::new(), "Name a fruit.")?;
//! let before = sent.len() - r#",{"role":"user","content":"Name a colour."}"#.len();
//! assert_eq!(next.extends(&sent[..before]), PrefixCheck::Prefix);
//! assert_eq!(edited.routing_id(), session.routing_id());
//! assert_ne!(edited.session_id(), session.session_id());
//! # Ok(()) }
//! ```

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::hash::NodeId;
use crate::node::{Node, NodeKind};
use crate::session::{ComposeError, Session, new_session_id};

/// Why a branch cannot be made there.
#[derive(Debug, thiserror::Error)]
pub enum BranchError {
    /// The history has no node there.
    #[error("the history has {len} nodes; there is no node {index}")]
    OutOfRange {
        /// The index asked for.
        index: usize,
        /// The history's length.
        len: usize,
    },
    /// The node is not of the kind the action edits.
    #[error("node {index} is a {found} message, not a {expected} message")]
    WrongKind {
        /// The index asked for.
        index: usize,
        /// What the action edits: `user` or `assistant`.
        expected: &'static str,
        /// What the node is.
        found: &'static str,
    },
    /// No request of the current cache epoch has this number (it was before a compaction,
    /// a removal or a refresh, or was never composed).
    #[error("no request {request} in the current cache epoch (known: {known:?})")]
    NoSuchRequest {
        /// The number asked for.
        request: u64,
        /// The numbers a branch can go back to.
        known: Vec<u64>,
    },
    /// No message shown by [`Session::shown_messages`] has this handle (a message of
    /// another branch, or one a compaction replaced), or it is not of the kind the action
    /// edits.
    #[error("no {expected} message with handle {handle} in this session's history")]
    NoSuchMessage {
        /// The handle asked for.
        handle: MessageHandle,
        /// What the action edits: `user` or `assistant`.
        expected: &'static str,
    },
    /// The edited message could not be recorded.
    #[error(transparent)]
    Record(#[from] ComposeError),
}

/// A message's handle, as an app's UI keeps it: the message's chained id
/// ([`Node::id`](crate::node::Node::id)), which stays the same while the message is in the
/// history (more messages appended, a branch made before or after it, a save and a
/// restore) and names no other message (two identical messages at different places have
/// different handles). Shown as 32 hex digits ([`MessageHandle::parse`] reads them back).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageHandle(NodeId);

impl MessageHandle {
    /// The handle shown as `text` (32 hex digits), or `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.as_bytes();
        if text.len() != 32 {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, pair) in text.chunks_exact(2).enumerate() {
            let digit = |c: u8| char::from(c).to_digit(16);
            let byte = digit(pair[0])? * 16 + digit(pair[1])?;
            bytes[i] = u8::try_from(byte).ok()?;
        }
        Some(Self(NodeId::from_bytes(bytes)))
    }

    /// The node id it stands for.
    pub fn node_id(&self) -> NodeId {
        self.0
    }
}

impl std::fmt::Display for MessageHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Debug for MessageHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl Serialize for MessageHandle {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One message of the conversation as a UI shows it ([`Session::shown_messages`]): a user,
/// assistant or tool message, with its handle.
#[derive(Debug, Clone, Copy)]
pub struct ShownMessage<'s> {
    handle: MessageHandle,
    index: usize,
    node: &'s Node,
}

impl<'s> ShownMessage<'s> {
    /// The handle to edit or regenerate it by.
    pub fn handle(&self) -> MessageHandle {
        self.handle
    }

    /// `user`, `assistant` or `tool`.
    pub fn kind(&self) -> NodeKind {
        self.node.kind()
    }

    /// Its place among the history's nodes now (updates counted): changes when a
    /// compaction rewrites the history; the handle does not.
    pub fn node_index(&self) -> usize {
        self.index
    }

    /// The message as sent (with merged delivery styles, a user message's content starts
    /// with the updates merged into it: [`ShownMessage::merged_updates`]).
    pub fn bytes(&self) -> &'s str {
        self.node.bytes()
    }

    /// The updates merged into this user message, if any.
    pub fn merged_updates(&self) -> &'s [(crate::node::Producer, Arc<str>)] {
        self.node.merged_updates()
    }

    /// The history node.
    pub fn node(&self) -> &'s Node {
        self.node
    }
}

impl Session {
    /// A branch whose history is the first `at` nodes of this one, as they were sent; what
    /// followed is not in it. The primitive the other branch methods are made of.
    ///
    /// The branch gets a new session id (its wire follows it), keeps this session's routing
    /// id, and can go back to this session's requests up to `at`. Texts waiting for the
    /// next user message, a system prompt held for open tool calls and a refresh held for
    /// the next compaction stay with this session; the tail components' last outputs are
    /// read from the kept history, so a component whose update was cut off speaks again at
    /// the branch's next request.
    pub fn branch(&self, at: usize) -> Result<Session, BranchError> {
        let len = self.history.len();
        if at > len {
            return Err(BranchError::OutOfRange { index: at, len });
        }
        let mut branch = self.clone();
        let dropped_turns = self.history.nodes()[at..]
            .iter()
            .filter(|n| n.kind() == NodeKind::User)
            .count();
        branch.history = self.history.truncated(at);
        branch.sent = self.sent.min(at);
        branch.turn = self
            .turn
            .saturating_sub(u64::try_from(dropped_turns).unwrap_or(u64::MAX));
        branch.checkpoints.retain(|c| c.nodes <= at);
        branch.pending_prompt = None;
        branch.deferred_refresh = None;
        branch.refresh_report = None;
        branch.session_id = new_session_id();
        branch.resync_tails();
        // `resync_tails` counts every kept node as sent; a branch sends from where it was.
        branch.sent = self.sent.min(at);
        branch.carry_over(self);
        Ok(branch)
    }

    /// What the session's requests must carry that the cut may have taken: the prefix text
    /// of an adopted conversation (appended after its messages, not frozen above them), and
    /// the current system prompt (the app's data, not history). Appended after the fork
    /// point, new to the provider, as adoption and `set_system_prompt` append them.
    fn carry_over(&mut self, parent: &Session) {
        if let Some(prefix) = &self.prefix
            && prefix.bytes.is_empty()
            && !prefix.text.is_empty()
            && self.history.delivery().prefix == crate::delivery::PrefixRole::System
            && !self
                .history
                .nodes()
                .iter()
                .any(|n| *n.producer() == crate::node::Producer::Prefix)
        {
            let text = prefix.text.clone();
            self.history
                .append_update(crate::node::Producer::Prefix, &text);
        }
        if let Some(prompt) = parent.settled_system_prompt()
            && self.settled_system_prompt() != Some(prompt)
        {
            let prompt = prompt.to_owned();
            self.history.set_system_prompt(&prompt);
        }
    }

    /// A branch at the last request, as it was sent: what was recorded after it (the reply,
    /// tool results) is not in it. Send it again with [`Session::resend`]: regenerating a
    /// reply, or retrying after an error, costs the provider only the generation.
    pub fn regenerate(&self) -> Result<Session, BranchError> {
        let Some(last) = self.checkpoints.last() else {
            return Err(BranchError::NoSuchRequest {
                request: self.requests,
                known: Vec::new(),
            });
        };
        self.branch(last.nodes)
    }

    /// A branch at request `request` ([`crate::Request::sequence`]), as it was sent: the
    /// history it carried and nothing after. Send it again with [`Session::resend`] (a new
    /// turn is refused while it has no reply: [`ComposeError::Unanswered`]).
    pub fn rewind(&self, request: u64) -> Result<Session, BranchError> {
        let Some(checkpoint) = self.checkpoints.iter().find(|c| c.sequence == request) else {
            return Err(BranchError::NoSuchRequest {
                request,
                known: self.checkpoints.iter().map(|c| c.sequence).collect(),
            });
        };
        self.branch(checkpoint.nodes)
    }

    /// A branch just before user message `index` (a node index, the library's updates
    /// counted; a UI edits by the handle [`Session::shown_messages`] gives instead:
    /// [`Session::edit_user_message_by`]): compose the edited message with
    /// [`Session::turn`]. Only what follows that message is new to the provider.
    pub fn edit_user_message(&self, index: usize) -> Result<Session, BranchError> {
        self.expect_kind(index, NodeKind::User, "user")?;
        self.branch(index)
    }

    /// A branch in which assistant message `index` (a node index) is replaced by
    /// `message`, without regenerating: the messages after it are not in the branch, and
    /// the next turn goes on from the edited reply.
    pub fn edit_assistant_message(
        &self,
        index: usize,
        message: &Value,
    ) -> Result<Session, BranchError> {
        self.expect_kind(index, NodeKind::Assistant, "assistant")?;
        let mut branch = self.branch(index)?;
        branch.record_assistant(message)?;
        Ok(branch)
    }

    /// The conversation as a UI shows it: the user, assistant and tool messages in order,
    /// without the library's own messages (system prompt, tail updates, compaction
    /// summaries, foreign system messages), each with a handle that stays the same while
    /// the message is in the history. Edit and regenerate by handle:
    /// [`Session::edit_user_message_by`], [`Session::edit_assistant_message_by`],
    /// [`Session::regenerate_reply`].
    pub fn shown_messages(&self) -> Vec<ShownMessage<'_>> {
        self.history
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                matches!(
                    n.kind(),
                    NodeKind::User | NodeKind::Assistant | NodeKind::Tool
                )
            })
            .map(|(index, node)| ShownMessage {
                handle: MessageHandle(node.id()),
                index,
                node,
            })
            .collect()
    }

    /// The node index of the `kind` message with `handle`.
    fn index_of(
        &self,
        handle: MessageHandle,
        kind: NodeKind,
        expected: &'static str,
    ) -> Result<usize, BranchError> {
        self.history
            .nodes()
            .iter()
            .position(|n| n.id() == handle.0 && n.kind() == kind)
            .ok_or(BranchError::NoSuchMessage { handle, expected })
    }

    /// [`Session::edit_user_message`] of the user message with `handle`
    /// ([`Session::shown_messages`]): a branch just before it; compose the edited message
    /// with [`Session::turn`].
    pub fn edit_user_message_by(&self, handle: MessageHandle) -> Result<Session, BranchError> {
        self.branch(self.index_of(handle, NodeKind::User, "user")?)
    }

    /// [`Session::edit_assistant_message`] of the assistant message with `handle`.
    pub fn edit_assistant_message_by(
        &self,
        handle: MessageHandle,
        message: &Value,
    ) -> Result<Session, BranchError> {
        let index = self.index_of(handle, NodeKind::Assistant, "assistant")?;
        let mut branch = self.branch(index)?;
        branch.record_assistant(message)?;
        Ok(branch)
    }

    /// Regenerates the assistant message with `handle`: a branch at the request that got
    /// it, without it and what followed; send it again with [`Session::resend`].
    pub fn regenerate_reply(&self, handle: MessageHandle) -> Result<Session, BranchError> {
        self.branch(self.index_of(handle, NodeKind::Assistant, "assistant")?)
    }

    /// A copy of this session with a session id of its own, for a sub-task: everything
    /// this session holds, so its next request extends this session's last one. Its
    /// requests go where this session's cache lives (the same routing id).
    pub fn fork(&self) -> Session {
        let mut fork = self.clone();
        fork.session_id = new_session_id();
        fork.deferred_refresh = None;
        fork.refresh_report = None;
        fork
    }

    /// The same branch with this session id (the app's own id for the new thread) instead
    /// of a random one. The routing id stays the parent's.
    pub fn with_session_id(mut self, id: &str) -> Session {
        self.session_id = Arc::from(id);
        self
    }

    fn expect_kind(
        &self,
        index: usize,
        kind: NodeKind,
        expected: &'static str,
    ) -> Result<(), BranchError> {
        let len = self.history.len();
        let node = self
            .history
            .nodes()
            .get(index)
            .ok_or(BranchError::OutOfRange { index, len })?;
        if node.kind() == kind {
            Ok(())
        } else {
            Err(BranchError::WrongKind {
                index,
                expected,
                found: node.kind().as_str(),
            })
        }
    }
}
