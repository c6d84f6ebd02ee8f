//! # prompt-engine
//!
//! The one comparison engine: what `cacheline audit`, `cacheline proxy`, `cacheline evidence`
//! and the guard over two bodies ([`compare`]) call, to say whether a request extends what its predecessor
//! left in the provider's cache, and if not, every change and its cause.
//!
//! A request ([`Exchange`]) is its endpoint, the headers that key a cache, its body, a
//! timestamp and, when the response said, the tokens the provider read from its cache. The
//! engine reads the body as the provider caches it ([`Canonical`]: tools, system, messages,
//! with each API's equivalences), puts it in a lane (endpoint and model: caches are per
//! model) and a session (from what agents send, or inferred), finds its predecessor (the
//! earlier request of its session and lane sharing the longest prefix of elements, through
//! an index of prefix hashes: linear in the request's elements, bounded in memory) and
//! lists every change ([`diff`]) under one closed list of causes ([`Cause`]). From the
//! predecessor and the provider's profile (`prompt_core::profile`: its minimum prefix and
//! the lifetime of its entries; Anthropic's breakpoints and lookback) it says how many
//! tokens should have been read, and names a shortfall even when some were.
//!
//! ```
//! use prompt_engine::{Cause, Engine, EngineConfig, Exchange};
//! let mut engine = Engine::new(EngineConfig::default());
//! let first = br#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}"#;
//! let second = br#"{"model":"n","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"more"}]}"#;
//! let count = &mut |_: &prompt_engine::Canonical<'_>, b: &prompt_engine::Block| b.len / 4;
//! engine.analyze(&Exchange::body(first), 1, count)?;
//! let second = engine.analyze(&Exchange::body(second), 2, count)?;
//! assert_eq!(second.cause, Some(Cause::ModelChanged));
//! # Ok::<(), prompt_engine::GuardError>(())
//! ```
//!
//! The crate, file by file (each uses only those above it; a test holds it so):
//!
//! | module | what it holds |
//! |---|---|
//! | `body` | the body reader: any API's body read once into slices ([`body_parts`], [`ApiKind`](prompt_core::ApiKind)) |
//! | [`headers`] | the one header policy: hop-by-hop, recorded, credential |
//! | `canon` | a body as the provider caches it ([`Canonical`]) |
//! | `cause` | the one closed list of causes ([`Cause`], [`CauseKind`]) |
//! | `diff` | every change between two requests ([`diff`]) |
//! | `exchange`, `session` | one request ([`Exchange`]), its session and lane |
//! | `engine` | the engine over a stream of requests ([`Engine`], [`Analysis`]) |
//! | [`compare`] | the guard: two bodies, one verdict ([`Verdict`]) |
//! | [`provider`] | the provider's own verdict read and reconciled with the engine's |
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod body;
mod canon;
mod cause;
mod compare;
mod diff;
mod engine;
mod exchange;
pub mod headers;
pub mod provider;
mod raw;
mod session;

pub use body::error::{GuardError, MAX_AUDIT_BODY_BYTES};
pub use body::parts::{BodyParts, body_parts, without_cache_control};
pub use body::shape::{Which, serialize_shape, shape_name};
/// The API a body is for, read from its keys: `prompt_core::ApiKind`, the workspace's one
/// API identity (once an enum of the engine's own).
#[deprecated(
    note = "use prompt_core::ApiKind (Shape::ChatCompletions is ApiKind::OpenAi, Shape::Responses is ApiKind::OpenAiResponses)"
)]
pub type Shape = prompt_core::ApiKind;
pub use canon::{
    Block, CacheKeyPart, CanonMessage, CanonTool, Canonical, Context, KeySource, MAX_BODY_BYTES,
    MAX_ROLES, model_in_path, shape_of_path,
};
pub use cause::{Break, Cause, CauseKind, Change, Place, ToolChange};
pub use compare::{Verdict, compare};
pub use diff::{Diff, MAX_CHANGES, diff};
pub use engine::{Analysis, Engine, EngineConfig, Held, Predecessor, RequestRecord, launch_hash};
pub use exchange::{Exchange, ReportedRead};
pub use headers::{
    CACHE_HEADERS, CREDENTIAL_NAMES, CREDENTIAL_PARTS, SESSION_HEADERS, keep_header,
    names_credential,
};
pub use session::{SessionKey, SessionSource};
