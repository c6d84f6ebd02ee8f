//! One composed request: a zero-copy view over the frozen prefix and the history.

use std::io::{self, Write};

use crate::divergence::{MessageSpan, PrefixCheck, check_prefix_with};
use crate::hash::{Digest128, Fingerprint};
use crate::id::ComponentId;
use crate::node::{Node, Producer};
use crate::prefix::FrozenPrefix;
use crate::tools::ToolSet;

/// One composed request: a zero-copy view over the frozen prefix and history nodes plus
/// this turn's ephemeral messages. Serialized, it is a JSON array of chat messages.
pub struct Request<'s> {
    pub(crate) prefix: Option<&'s FrozenPrefix>,
    pub(crate) tools: &'s ToolSet,
    pub(crate) session_id: &'s str,
    pub(crate) nodes: &'s [Node],
    pub(crate) history_bytes: usize,
    pub(crate) new_from: usize,
    pub(crate) ephemeral: Vec<(ComponentId, String)>,
    pub(crate) turn: u64,
    pub(crate) sequence: u64,
    pub(crate) epoch: u64,
}

impl std::fmt::Debug for Request<'_> {
    /// The request's place in its session and its size, not its bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("session_id", &self.session_id)
            .field("turn", &self.turn)
            .field("sequence", &self.sequence)
            .field("epoch", &self.epoch)
            .field("nodes", &self.nodes.len())
            .field("new_from", &self.new_from)
            .field("ephemeral", &self.ephemeral.len())
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// Who wrote a message of a request.
#[derive(Clone, Copy)]
enum Writer<'a> {
    Prefix,
    Node(&'a Producer),
    Ephemeral(&'a ComponentId),
}

impl<'s> Request<'s> {
    fn prefix_bytes(&self) -> Option<&'s str> {
        self.prefix.map(|p| &*p.bytes).filter(|b| !b.is_empty())
    }

    /// The messages in order, each with who wrote it. The writer is borrowed, so streaming
    /// a request allocates nothing per message.
    fn segments(&self) -> impl Iterator<Item = (&str, Writer<'_>)> + '_ {
        let prefix = self.prefix_bytes().map(|b| (b, Writer::Prefix));
        let nodes = self
            .nodes
            .iter()
            .map(|n| (n.bytes(), Writer::Node(n.producer())));
        let ephemeral = self
            .ephemeral
            .iter()
            .map(|(id, b)| (b.as_str(), Writer::Ephemeral(id)));
        prefix.into_iter().chain(nodes).chain(ephemeral)
    }

    /// Number of messages.
    pub fn message_count(&self) -> usize {
        usize::from(self.prefix_bytes().is_some()) + self.nodes.len() + self.ephemeral.len()
    }

    /// Length of the stable part: `[`, the prefix and the history with separators.
    pub fn stable_len(&self) -> usize {
        let stable_msgs = usize::from(self.prefix_bytes().is_some()) + self.nodes.len();
        1 + self.prefix_bytes().map_or(0, str::len)
            + self.history_bytes
            + stable_msgs.saturating_sub(1)
    }

    /// Length of the whole serialized request.
    pub fn len(&self) -> usize {
        let eph: usize = self.ephemeral.iter().map(|(_, b)| b.len() + 1).sum();
        let stable_msgs = usize::from(self.prefix_bytes().is_some()) + self.nodes.len();
        let eph = if stable_msgs == 0 && !self.ephemeral.is_empty() {
            eph - 1
        } else {
            eph
        };
        self.stable_len() + eph + 1
    }

    /// Always false: a request has at least its brackets.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The serialized pieces in order; their concatenation is the request. Borrowing, not
    /// copying, is what keeps a turn's cost independent of history length.
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let messages = self.segments().map(|(b, _)| b.as_bytes());
        let mut first = true;
        std::iter::once(&b"["[..])
            .chain(messages.flat_map(move |m| {
                let sep: &[u8] = if std::mem::take(&mut first) {
                    b""
                } else {
                    b","
                };
                [sep, m]
            }))
            .chain(std::iter::once(&b"]"[..]))
    }

    /// Writes the serialized request.
    pub fn write_to<W: Write>(&self, mut out: W) -> io::Result<()> {
        for chunk in self.chunks() {
            out.write_all(chunk)?;
        }
        Ok(())
    }

    /// The serialized request as one buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        for chunk in self.chunks() {
            out.extend_from_slice(chunk);
        }
        out
    }

    /// The stable part as one buffer.
    pub fn stable_bytes(&self) -> Vec<u8> {
        let mut out = self.to_bytes();
        out.truncate(self.stable_len());
        out
    }

    /// The prefix fingerprint: the tools field and the frozen prefix (the input of an
    /// OpenAI `prompt_cache_key` or a router key). It is the first 128 bits of SHA-256 over
    /// `tools\0`, the tools field as [`ToolSet::openai_json`] writes it (`[]` for none),
    /// `\0prefix\0`, and the prefix message as sent (its text, when it rides in the first
    /// user message).
    pub fn prefix_fingerprint(&self) -> Fingerprint {
        self.prefix.map_or_else(
            || crate::prefix::fingerprint(self.tools, b""),
            |p| p.fingerprint,
        )
    }

    /// The session's identity ([`crate::Session::session_id`]).
    pub fn session_id(&self) -> &'s str {
        self.session_id
    }

    /// The key that routes this session's requests to the cache holding them: OpenAI's
    /// `prompt_cache_key`, a router's routing key (`X-SMG-Routing-Key`). 128 bits of SHA-256
    /// over `route\0`, the prefix fingerprint and the session id: one key per session and
    /// frozen prefix, the same for every request of a cache epoch and after a save and
    /// restore; two sessions never share one, whatever their prefix (an empty prefix
    /// included). Why a session key and not the prefix fingerprint: `docs/fleet.md`.
    pub fn routing_key(&self) -> Digest128 {
        let fingerprint = self.prefix_fingerprint();
        Digest128::of(&[
            b"route\0",
            fingerprint.as_bytes(),
            b"\0",
            self.session_id.as_bytes(),
        ])
    }

    /// The tools sent in the request's `tools` field, frozen for the session.
    pub fn tools(&self) -> &'s ToolSet {
        self.tools
    }

    /// The frozen prefix text (the components' texts joined by a blank line); empty when
    /// no component is in the prefix. Wire formats with a system field put it there.
    pub fn prefix_text(&self) -> &'s str {
        self.prefix.map_or("", |p| &p.text)
    }

    /// The request's number in the session, counting turns and continuations from 1.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Whether this request continues after tool results (no new user message).
    pub fn is_continuation(&self) -> bool {
        self.new_nodes()
            .last()
            .is_some_and(|n| n.kind() != crate::node::NodeKind::User)
    }

    /// The turn this request belongs to, counting from 1.
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// The history cache epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The history nodes of this request, oldest first (the prefix and ephemeral messages
    /// are not nodes).
    pub fn nodes(&self) -> &'s [Node] {
        self.nodes
    }

    /// The nodes new in this request: appended since the previous request (a system-prompt
    /// update), then this turn's tail updates and user message.
    pub fn new_nodes(&self) -> &'s [Node] {
        self.nodes.get(self.new_from..).unwrap_or(&[])
    }

    /// The ephemeral messages of this request: (component, serialized message).
    pub fn ephemeral(&self) -> &[(ComponentId, String)] {
        &self.ephemeral
    }

    /// The message holding byte `offset`, with its producer. For the prefix message the
    /// producer is the component whose text holds the byte (or `prefix` for framing).
    pub fn locate(&self, offset: usize) -> Option<MessageSpan> {
        let mut at = 1;
        for (index, (bytes, producer)) in self.segments().enumerate() {
            if index > 0 {
                at += 1;
            }
            let range = at..at + bytes.len();
            if range.contains(&offset) || (offset == range.end && index + 1 == self.message_count())
            {
                let producer = match producer {
                    // Inside the prefix message: the component whose text holds the byte.
                    Writer::Prefix => self
                        .prefix
                        .and_then(|p| p.parts.iter().find(|(_, r)| r.contains(&(offset - at))))
                        .map_or_else(|| Producer::Prefix.to_string(), |(id, _)| id.to_string()),
                    Writer::Node(p) => p.to_string(),
                    Writer::Ephemeral(id) => id.to_string(),
                };
                return Some(MessageSpan {
                    index,
                    producer,
                    range,
                });
            }
            at = range.end;
        }
        None
    }

    /// Checks that `earlier` is a byte prefix of this request, ignoring `earlier`'s closing
    /// bracket. Pass a previous request's [`Request::stable_bytes`]: its ephemeral messages
    /// are by definition not carried over. On divergence, names the message and producer.
    pub fn extends(&self, earlier: &[u8]) -> PrefixCheck {
        let later = self.to_bytes();
        check_prefix_with(earlier, &later, |offset| self.locate(offset))
    }

    /// Whether any component is in the prefix.
    pub fn has_prefix(&self) -> bool {
        self.prefix_bytes().is_some()
    }

    /// Which stability classes the prefix is made of (for reports).
    pub fn prefix_components(&self) -> Vec<ComponentId> {
        self.prefix
            .map(|p| p.parts.iter().map(|(id, _)| id.clone()).collect())
            .unwrap_or_default()
    }
}
