//! One conversation value: a session and its wire, composed, recorded, saved and restored
//! together.
//!
//! An app that keeps a [`Session`] and a [`Wire`] side by side has two values to keep in
//! step and two to persist (the session's snapshot and the wire's resume point). A
//! [`Conversation`] holds both: its calls compose the body for the API directly, record the
//! reply into the session, and [`Conversation::save`] writes one document, sealed, that
//! [`Conversation::restore`] reads back into the same bytes. Branches (regenerate, edit,
//! rewind, fork) are conversations too, each with a wire that follows it.
//!
//! ```
//! use prompt_core::{ApiKind, Extensions, PromptPolicy, RestoreMode, SessionContext, SessionOptions};
//! use prompt_wire::{Conversation, ConversationSnapshot, WireOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let options = || SessionOptions::for_api(ApiKind::OpenAi).with_system_prompt("Be brief.");
//! let wire = || WireOptions::new("gpt-4.1");
//! let mut chat = Conversation::start(vec![], &PromptPolicy::default(), SessionContext::default(),
//!     options(), ApiKind::OpenAi, wire())?;
//! let first = chat.turn(Extensions::new(), "hi")?.stable_bytes();
//! chat.record_reply(br#"{"choices":[{"message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}]}"#)?;
//!
//! // Closing the app: one document. Starting again: the same conversation.
//! let file = chat.save().to_json();
//! let saved = ConversationSnapshot::from_json(file.as_bytes())?;
//! let mut again = Conversation::restore(&saved, vec![], &PromptPolicy::default(),
//!     SessionContext::default(), options(), wire(), RestoreMode::Strict)?.conversation;
//! let next = again.turn(Extensions::new(), "and now?")?.to_bytes();
//! assert!(next.starts_with(&first)); // the server's cache serves all of the first body
//! assert_eq!(again.session().session_id(), chat.session().session_id());
//! # Ok(()) }
//! ```

use prompt_core::adopt::{AdoptError, AdoptOptions, AdoptReport};
use prompt_core::branch::{BranchError, MessageHandle, ShownMessage};
use prompt_core::hash::Digest128;
use prompt_core::history::SystemPromptChange;
use prompt_core::session::{ToolResult, UserInput};
use prompt_core::snapshot::{MAX_SNAPSHOT_BYTES, PrefixChanges, RestoreError};
use prompt_core::{
    ApiKind, Component, ComposeError, Extensions, PromptPolicy, RestoreMode, Session,
    SessionContext, SessionOptions, SessionSnapshot,
};
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::WireError;
use crate::options::WireOptions;
use crate::reply::Reply;
use crate::wire::{Body, ResumePoint, Wire};
use prompt_engine::{GuardError, body_parts, without_cache_control};

/// The `format` of a saved conversation.
pub const CONVERSATION_FORMAT: &str = "cacheline-conversation";

/// The version of the saved-conversation format.
pub const CONVERSATION_VERSION: u32 = 1;

/// Why a conversation cannot be started, composed, restored or branched.
#[derive(Debug, thiserror::Error)]
pub enum ConversationError {
    /// Composing the request.
    #[error(transparent)]
    Compose(#[from] ComposeError),
    /// Writing the body, or reading a reply.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// Reading the saved session.
    #[error(transparent)]
    Restore(#[from] RestoreError),
    /// Adopting an existing conversation.
    #[error(transparent)]
    Adopt(#[from] AdoptError),
    /// Making a branch.
    #[error(transparent)]
    Branch(#[from] BranchError),
    /// The last body given to [`Conversation::continue_from`] cannot be read.
    #[error("the last body sent cannot be read: {0}")]
    LastBody(GuardError),
    /// [`Conversation::continue_from`]: the last body is not of the conversation's API.
    #[error(
        "the last body sent is a {} body; {api} sends {} bodies",
        prompt_engine::shape_name(*.shape),
        prompt_engine::shape_name(*.expected)
    )]
    LastBodyShape {
        /// The API of the conversation.
        api: &'static str,
        /// The body's shape.
        shape: ApiKind,
        /// The shape the API sends.
        expected: ApiKind,
    },
    /// [`Conversation::continue_from`] for an API it does not continue.
    #[error(
        "continuing from a last body works for Chat Completions, llama.cpp and Anthropic Messages, not {api}; adopt with Conversation::adopt (the first request re-processes the history once)"
    )]
    ContinueUnsupported {
        /// The API of the conversation.
        api: &'static str,
    },
    /// [`Conversation::continue_from`]: the last body names another model than the wire's
    /// options (caches are per model: the first request would miss whole).
    #[error("the last body sent is for model {sent:?}, the wire's options for {configured:?}")]
    LastBodyModel {
        /// The model of the last body (at most 64 bytes of it).
        sent: String,
        /// The wire's model (at most 64 bytes of it).
        configured: String,
    },
    /// Not a saved conversation of a version this library reads.
    #[error(
        "not a cacheline conversation of version {CONVERSATION_VERSION}: format {format:?}, version {version}"
    )]
    Format {
        /// The format found (at most 64 bytes of it).
        format: String,
        /// The version found.
        version: u32,
    },
    /// The document is not JSON of the saved-conversation shape.
    #[error("the saved conversation does not parse: {}", prompt_core::input::chain(.0))]
    Json(#[source] serde_json::Error),
    /// Larger than [`MAX_SNAPSHOT_BYTES`].
    #[error("the saved conversation is {len} bytes; at most {max} are read")]
    TooLarge {
        /// Its size in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The saved API, wire point or session does not match the conversation's seal.
    #[error("the saved conversation was edited or damaged: {field} does not match its seal")]
    Edited {
        /// `api`, `wire` or `session`.
        field: &'static str,
    },
}

/// A saved conversation: the session's snapshot, the API and the wire's resume point, under
/// one seal. Serialize it with serde_json.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationSnapshot {
    format: String,
    version: u32,
    api: ApiKind,
    wire: SavedWire,
    session: SessionSnapshot,
    seals: ConversationSeals,
}

/// The wire's own state: where its last body's stable part ended (Anthropic's second
/// rolling breakpoint), and the last reply's id (Anthropic's cache diagnostics name it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedWire {
    resume_point: Option<ResumePoint>,
    previous_message_id: Option<String>,
    /// The app's own `prompt_cache_key` ([`Wire::keep_cache_key`]); absent (as in documents
    /// saved before it existed) when the session's routing key is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kept_cache_key: Option<KeptCacheKey>,
    /// The app's own tools field ([`Wire::keep_tools_field`]); absent when none is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kept_tools: Option<String>,
    /// Parameters as the app sent them ([`Wire::keep_parameters`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    kept_parameters: Vec<(String, String)>,
}

/// The kept key: `key` null when the app sent none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeptCacheKey {
    key: Option<String>,
}

/// One seal per part: the API, the wire's point, the session (its own seals).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConversationSeals {
    api: String,
    wire: String,
    session: String,
}

impl ConversationSnapshot {
    /// Reads a saved conversation from JSON, at most
    /// [`MAX_SNAPSHOT_BYTES`](prompt_core::snapshot::MAX_SNAPSHOT_BYTES), as
    /// [`SessionSnapshot::from_json`] reads a session. ([`Conversation::restore`] checks the
    /// document whichever way it was read.)
    pub fn from_json(bytes: &[u8]) -> Result<Self, ConversationError> {
        if bytes.len() > MAX_SNAPSHOT_BYTES {
            return Err(ConversationError::TooLarge {
                len: bytes.len(),
                max: MAX_SNAPSHOT_BYTES,
            });
        }
        serde_json::from_slice(bytes).map_err(ConversationError::Json)
    }

    /// The document as JSON.
    pub fn to_json(&self) -> String {
        // Strings, numbers and lists: serializing it cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The saved session.
    pub fn session(&self) -> &SessionSnapshot {
        &self.session
    }

    /// The API the conversation talks to.
    pub fn api(&self) -> ApiKind {
        self.api
    }

    fn expected_seals(&self) -> ConversationSeals {
        let seal = |part: &str, value: &str| {
            let len = |s: &str| u64::try_from(s.len()).unwrap_or(u64::MAX).to_le_bytes();
            Digest128::of(&[
                CONVERSATION_FORMAT.as_bytes(),
                &u64::from(CONVERSATION_VERSION).to_le_bytes(),
                &len(part),
                part.as_bytes(),
                &len(value),
                value.as_bytes(),
            ])
            .to_string()
        };
        // A struct of plain fields: serializing it cannot fail.
        let api = serde_json::to_string(&self.api).unwrap_or_default();
        let wire = serde_json::to_string(&self.wire).unwrap_or_default();
        ConversationSeals {
            api: seal("api", &api),
            wire: seal("wire", &wire),
            session: seal("session", &self.session.seal()),
        }
    }
}

/// A restored conversation, and what the restore changed.
#[derive(Debug)]
#[non_exhaustive]
pub struct RestoredConversation {
    /// The conversation, ready for its next request.
    pub conversation: Conversation,
    /// With [`RestoreMode::NewEpoch`]: what changed in the prefix, when it did.
    pub changes: Option<PrefixChanges>,
    /// How a system prompt the user edited while the app was closed was taken in.
    pub system_prompt: Option<SystemPromptChange>,
}

/// What a conversation sends next: a user turn, the continuation after tool results, or the
/// last request again. [`Conversation::compose`] writes its body; an HTTP client that owns
/// the conversation while it sends takes one of these instead of a body that borrows it.
#[derive(Debug)]
pub enum Next {
    /// A user turn ([`Conversation::turn`]).
    Turn {
        /// The turn's values.
        values: Extensions,
        /// The user's message.
        user: UserInput,
    },
    /// The continuation after tool results ([`Conversation::continuation`]).
    Continuation {
        /// The turn's values.
        values: Extensions,
    },
    /// The last request again ([`Conversation::resend`]).
    Resend {
        /// The turn's values.
        values: Extensions,
    },
}

impl Next {
    /// A user turn. After a failed send, [`Next::resend`] instead: the turn is refused while
    /// the last request has no reply.
    pub fn turn(values: Extensions, user: impl Into<UserInput>) -> Self {
        Next::Turn {
            values,
            user: user.into(),
        }
    }

    /// The continuation after tool results.
    pub fn continuation(values: Extensions) -> Self {
        Next::Continuation { values }
    }

    /// The last request again.
    pub fn resend(values: Extensions) -> Self {
        Next::Resend { values }
    }
}

/// A session and the wire that writes its bodies, as one value.
#[derive(Debug)]
pub struct Conversation {
    session: Session,
    wire: Wire,
}

impl Conversation {
    /// A conversation of `session` over `wire` (a wire that has not served another session).
    pub fn new(session: Session, wire: Wire) -> Self {
        Self { session, wire }
    }

    /// Starts a session and its wire to `api`.
    pub fn start(
        components: Vec<Component>,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        api: ApiKind,
        wire: WireOptions,
    ) -> Result<Self, ConversationError> {
        let wire = Wire::new(api, wire)?;
        let session = Session::start(components, policy, context, options)?;
        Ok(Self::new(session, wire))
    }

    /// Adopts an existing conversation (a JSON array of messages, each kept byte-for-byte;
    /// see [`Session::adopt`]) and the wire to `api` it goes on over.
    #[allow(clippy::too_many_arguments)]
    pub fn adopt(
        components: Vec<Component>,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        api: ApiKind,
        wire: WireOptions,
        conversation: &str,
        adopt: &AdoptOptions,
    ) -> Result<(Self, AdoptReport), ConversationError> {
        let wire = Wire::new(api, wire)?;
        let (session, report) =
            Session::adopt(components, policy, context, options, conversation, adopt)?;
        Ok((Self::new(session, wire), report))
    }

    /// Adopts the conversation an app has been sending itself, from `last_body`, the last
    /// request body it sent (its bytes as sent), and `last_reply`, the provider's reply to it
    /// (a whole reply's body, as [`Conversation::record_reply`] reads it), so that the
    /// first request extends `last_body` as the provider caches it and re-processes only the
    /// reply and what is new.
    ///
    /// [`Conversation::adopt`] takes the messages the app keeps; the bodies the app sent
    /// were written its own way, and the first body written by the library then differs
    /// from the last one the app sent: the server re-processes the whole adopted history
    /// once. Here the messages are read from `last_body` itself (each kept byte-for-byte;
    /// Anthropic's `cache_control` markers taken off, since the wire places its own
    /// breakpoints and the cache does not key on them; Anthropic's `system` field read as
    /// the leading system message), and its `prompt_cache_key` is kept
    /// ([`Wire::keep_cache_key`], no key when it sent none), so requests go to the cache
    /// that holds the conversation, and so are its tools field's bytes while they hold the
    /// session's tools ([`Wire::keep_tools_field`]: give the same definitions in the
    /// session options). The model must be the wire's
    /// ([`ConversationError::LastBodyModel`]). Check the first body with [`Body::extends`].
    ///
    /// For OpenAI Chat Completions, llama.cpp and Anthropic Messages
    /// ([`ConversationError::ContinueUnsupported`] otherwise; a body of another shape:
    /// [`ConversationError::LastBodyShape`]). What the first request costs
    /// when a part cannot be kept: `docs/lifecycle.md`, "Adopting an existing conversation".
    #[allow(clippy::too_many_arguments)]
    pub fn continue_from(
        components: Vec<Component>,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        api: ApiKind,
        wire: WireOptions,
        last_body: &[u8],
        last_reply: Option<&[u8]>,
        adopt: &AdoptOptions,
    ) -> Result<(Self, AdoptReport), ConversationError> {
        let parts = body_parts(last_body).map_err(ConversationError::LastBody)?;
        let expected = match api {
            ApiKind::OpenAi | ApiKind::LlamaCpp => ApiKind::OpenAi,
            ApiKind::Anthropic => ApiKind::Anthropic,
            ApiKind::OpenAiResponses | ApiKind::Gemini => {
                return Err(ConversationError::ContinueUnsupported {
                    api: crate::api_name(api),
                });
            }
        };
        if parts.shape != expected {
            return Err(ConversationError::LastBodyShape {
                api: crate::api_name(api),
                shape: parts.shape,
                expected,
            });
        }
        // `body_parts` has read it as one object of unique keys.
        let malformed = |at: &str, e: serde_json::Error| {
            ConversationError::LastBody(GuardError::Malformed {
                body: prompt_engine::Which::Request,
                at: at.to_owned(),
                problem: prompt_core::input::excerpt(&e.to_string(), 120).into_owned(),
            })
        };
        let top: BTreeMap<String, &RawValue> =
            serde_json::from_slice(last_body).map_err(|e| malformed("the top level", e))?;
        let string = |key: &str| -> Result<Option<String>, ConversationError> {
            top.get(key)
                .map(|raw| serde_json::from_str(raw.get()).map_err(|e| malformed(key, e)))
                .transpose()
        };
        let model = string("model")?;
        let bounded = |s: &str| prompt_core::input::head(s, 64).to_owned();
        if model.as_deref() != Some(wire.model()) {
            return Err(ConversationError::LastBodyModel {
                sent: bounded(model.as_deref().unwrap_or_default()),
                configured: bounded(wire.model()),
            });
        }
        let cache_key = string("prompt_cache_key")?;
        // The parameters of the options the app sent too, as it sent them.
        let sent: Vec<(String, String)> = wire
            .params()
            .filter_map(|(key, _)| Some((key.to_owned(), top.get(key)?.get().to_owned())))
            .collect();
        let mut list = String::with_capacity(last_body.len());
        list.push('[');
        let mut first = true;
        let mut push = |message: &str| {
            if !first {
                list.push(',');
            }
            first = false;
            list.push_str(message);
        };
        if api == ApiKind::Anthropic
            && let Some(system) = parts.system
        {
            push(&format!(
                r#"{{"role":"system","content":{}}}"#,
                without_cache_control(system)
            ));
        }
        for message in &parts.messages {
            if api == ApiKind::Anthropic {
                push(&without_cache_control(message));
            } else {
                push(message);
            }
        }
        list.push(']');
        let mut wire = Wire::new(api, wire)?;
        if api != ApiKind::Anthropic {
            wire.keep_cache_key(cache_key.as_deref())?;
        }
        wire.keep_tools_field(parts.tools);
        wire.keep_parameters(sent.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let (mut session, report) =
            Session::adopt(components, policy, context, options, &list, adopt)?;
        if let Some(reply) = last_reply {
            wire.record_reply(&mut session, reply)?;
        }
        Ok((Self::new(session, wire), report))
    }

    /// Everything that decides the next body, as one sealed document.
    pub fn save(&self) -> ConversationSnapshot {
        let mut snapshot = ConversationSnapshot {
            format: CONVERSATION_FORMAT.to_owned(),
            version: CONVERSATION_VERSION,
            api: self.wire.api(),
            wire: SavedWire {
                resume_point: self.wire.resume_point(),
                previous_message_id: self.wire.previous_message_id(),
                kept_cache_key: self.wire.kept_cache_key().map(|key| KeptCacheKey {
                    key: key.map(str::to_owned),
                }),
                kept_tools: self.wire.kept_tools_field().map(str::to_owned),
                kept_parameters: self
                    .wire
                    .kept_parameters()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            },
            session: self.session.save(),
            seals: ConversationSeals {
                api: String::new(),
                wire: String::new(),
                session: String::new(),
            },
        };
        snapshot.seals = snapshot.expected_seals();
        snapshot
    }

    /// Resumes a saved conversation with the program's components, policy, options and wire
    /// options: the next body is byte-identical to the one the saved conversation would
    /// have sent (see [`Session::restore`] for what is checked and what a changed prefix or
    /// an edited system prompt does).
    pub fn restore(
        snapshot: &ConversationSnapshot,
        components: Vec<Component>,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        wire: WireOptions,
        mode: RestoreMode,
    ) -> Result<RestoredConversation, ConversationError> {
        if snapshot.format != CONVERSATION_FORMAT || snapshot.version != CONVERSATION_VERSION {
            return Err(ConversationError::Format {
                format: prompt_core::input::head(&snapshot.format, 64).to_owned(),
                version: snapshot.version,
            });
        }
        let expected = snapshot.expected_seals();
        for (field, saved, now) in [
            ("api", &snapshot.seals.api, &expected.api),
            ("wire", &snapshot.seals.wire, &expected.wire),
            ("session", &snapshot.seals.session, &expected.session),
        ] {
            if saved != now {
                return Err(ConversationError::Edited { field });
            }
        }
        let restored = Session::restore(
            &snapshot.session,
            components,
            policy,
            context,
            options,
            mode,
        )?;
        let mut wire = Wire::new(snapshot.api, wire)?;
        wire.set_previous_message_id(snapshot.wire.previous_message_id.as_deref());
        if let Some(kept) = &snapshot.wire.kept_cache_key {
            wire.keep_cache_key(kept.key.as_deref())?;
        }
        if let Some(tools) = &snapshot.wire.kept_tools {
            wire.keep_tools_field(Some(tools));
        }
        if !snapshot.wire.kept_parameters.is_empty() {
            wire.keep_parameters(
                snapshot
                    .wire
                    .kept_parameters
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            );
        }
        if let Some(point) = snapshot.wire.resume_point {
            wire.resume_from(point);
        }
        Ok(RestoredConversation {
            conversation: Self::new(restored.session, wire),
            changes: restored.changes,
            system_prompt: restored.system_prompt,
        })
    }

    /// The session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The session, for the calls this type does not wrap (compaction, refresh, removal).
    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// The wire.
    pub fn wire(&self) -> &Wire {
        &self.wire
    }

    /// The session and the wire, apart again.
    pub fn into_parts(self) -> (Session, Wire) {
        (self.session, self.wire)
    }

    /// The body for a user turn ([`Session::turn`]). Refused while the last request has no
    /// reply ([`ComposeError::Unanswered`](prompt_core::ComposeError::Unanswered)): a failed
    /// send is retried with [`Conversation::resend`], so a turn is never composed twice.
    pub fn turn(
        &mut self,
        values: Extensions,
        user: impl Into<UserInput>,
    ) -> Result<Body<'_>, ConversationError> {
        let request = self.session.turn(values, user)?;
        Ok(self.wire.body(&request)?)
    }

    /// The body after tool results ([`Session::continuation`]).
    pub fn continuation(&mut self, values: Extensions) -> Result<Body<'_>, ConversationError> {
        let request = self.session.continuation(values)?;
        Ok(self.wire.body(&request)?)
    }

    /// The last body again ([`Session::resend`]): a retry after an error, or the first body
    /// of a branch made by [`Conversation::regenerate`] or [`Conversation::rewind`].
    pub fn resend(&mut self, values: Extensions) -> Result<Body<'_>, ConversationError> {
        let request = self.session.resend(values)?;
        Ok(self.wire.body(&request)?)
    }

    /// The body of `next`: [`Conversation::turn`], [`Conversation::continuation`] or
    /// [`Conversation::resend`].
    pub fn compose(&mut self, next: Next) -> Result<Body<'_>, ConversationError> {
        match next {
            Next::Turn { values, user } => self.turn(values, user),
            Next::Continuation { values } => self.continuation(values),
            Next::Resend { values } => self.resend(values),
        }
    }

    /// Reads the provider's reply and records it ([`Wire::record_reply`]).
    pub fn record_reply(&mut self, body: &[u8]) -> Result<Reply, WireError> {
        self.wire.record_reply(&mut self.session, body)
    }

    /// Ends a streamed reply and records it ([`Wire::finish_stream`]).
    pub fn finish_stream(
        &mut self,
        reader: crate::stream::StreamReader,
    ) -> Result<Reply, crate::stream::StreamError> {
        self.wire.finish_stream(reader, &mut self.session)
    }

    /// Records a tool result ([`Session::record_tool`]).
    pub fn record_tool(&mut self, result: &ToolResult) -> Result<(), ComposeError> {
        self.session.record_tool(result)
    }

    /// Sets the system prompt the app owns ([`Session::set_system_prompt`]): the same text
    /// changes nothing, an edit is appended once.
    pub fn set_system_prompt(&mut self, prompt: &str) -> SystemPromptChange {
        self.session.set_system_prompt(prompt)
    }

    /// The routing header and its value for this conversation's requests
    /// ([`Wire::routing_header`]), once the first body has been composed.
    pub fn routing_header(&self) -> Option<(&str, String)> {
        let key = self.session.routing_key()?;
        Some((self.wire.options().routing_header_name(), key.to_string()))
    }

    fn branch_of(&self, session: Session) -> Self {
        let wire = self.wire.fork_for(session.session_id());
        Self::new(session, wire)
    }

    /// A branch at the last request, without its reply: send it again with
    /// [`Conversation::resend`] ([`Session::regenerate`]).
    pub fn regenerate(&self) -> Result<Self, ConversationError> {
        Ok(self.branch_of(self.session.regenerate()?))
    }

    /// A branch at request `request` ([`Session::rewind`]).
    pub fn rewind(&self, request: u64) -> Result<Self, ConversationError> {
        Ok(self.branch_of(self.session.rewind(request)?))
    }

    /// A branch just before user message `index` (a history node index, updates counted;
    /// a UI edits by handle instead: [`Conversation::edit_user_message_by`]): compose the
    /// edited message with [`Conversation::turn`] ([`Session::edit_user_message`]).
    pub fn edit_user_message(&self, index: usize) -> Result<Self, ConversationError> {
        Ok(self.branch_of(self.session.edit_user_message(index)?))
    }

    /// A branch in which assistant message `index` is replaced by `message`
    /// ([`Session::edit_assistant_message`]).
    pub fn edit_assistant_message(
        &self,
        index: usize,
        message: &serde_json::Value,
    ) -> Result<Self, ConversationError> {
        Ok(self.branch_of(self.session.edit_assistant_message(index, message)?))
    }

    /// The conversation as a UI shows it ([`Session::shown_messages`]): user, assistant
    /// and tool messages, each with a handle to edit or regenerate it by.
    pub fn shown_messages(&self) -> Vec<ShownMessage<'_>> {
        self.session.shown_messages()
    }

    /// A branch just before the user message with `handle`: compose the edited message
    /// with [`Conversation::turn`] ([`Session::edit_user_message_by`]).
    pub fn edit_user_message_by(&self, handle: MessageHandle) -> Result<Self, ConversationError> {
        Ok(self.branch_of(self.session.edit_user_message_by(handle)?))
    }

    /// A branch in which the assistant message with `handle` is replaced by `message`
    /// ([`Session::edit_assistant_message_by`]).
    pub fn edit_assistant_message_by(
        &self,
        handle: MessageHandle,
        message: &serde_json::Value,
    ) -> Result<Self, ConversationError> {
        Ok(self.branch_of(self.session.edit_assistant_message_by(handle, message)?))
    }

    /// A branch at the request that got the assistant message with `handle`, without it:
    /// send it again with [`Conversation::resend`] ([`Session::regenerate_reply`]).
    pub fn regenerate_reply(&self, handle: MessageHandle) -> Result<Self, ConversationError> {
        Ok(self.branch_of(self.session.regenerate_reply(handle)?))
    }

    /// A copy with a session id of its own, for a sub-task ([`Session::fork`]).
    pub fn fork(&self) -> Self {
        self.branch_of(self.session.fork())
    }
}
