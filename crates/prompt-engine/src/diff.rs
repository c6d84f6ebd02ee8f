//! Every change between a request and its predecessor, in the provider's cache order.

use std::collections::{HashMap, HashSet};

use prompt_core::divergence::{Divergence, Excerpt, common_prefix_len};
use prompt_core::input::{EXCERPT_BYTES, excerpt};

use crate::body::element::Form;
use crate::canon::{Block, CanonMessage, Canonical, KeySource};
use crate::cause::{Cause, Change, Place, ToolChange};
use prompt_core::ApiKind;

/// At most this many changes are listed for one pair (the first one always).
pub const MAX_CHANGES: usize = 32;

/// Bytes of hoisted text quoted in [`Cause::InsertAboveHistory`].
const HOISTED_EXCERPT: usize = 120;

/// Earlier messages lost at once, from the first change on, that make a shorter history a
/// compaction rather than a dropped tail.
const COMPACTION_MESSAGES: usize = 4;

/// What [`diff`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    /// Every change, in the provider's order (model, cache key, headers, tools, system,
    /// parameters, messages), at most [`MAX_CHANGES`]. A [`Cause::SerializationOnly`] note
    /// may stand among them; it loses nothing.
    pub changes: Vec<Change>,
    /// Chain elements ([`Canonical::chain_blocks`]) the two share from the start; 0 when
    /// the model or another cache-keying value changed (nothing is reusable).
    pub common: usize,
    /// The later request extends the earlier one: no change but serialization.
    pub extends: bool,
}

impl Diff {
    /// The first change that loses tokens.
    pub fn first_break(&self) -> Option<&Change> {
        self.changes
            .iter()
            .find(|c| c.cause != Cause::SerializationOnly)
    }
}

/// One side of a change: the request and its element.
type Side<'c> = Option<(&'c Canonical<'c>, &'c Block)>;

fn text_of<'c>(side: Side<'c>) -> std::borrow::Cow<'c, str> {
    match side {
        Some((c, b)) => c.compared_text(b),
        None => std::borrow::Cow::Borrowed(""),
    }
}

/// The position in the later body and both sides' bytes around it.
fn divergence(
    earlier: Side<'_>,
    later: Side<'_>,
    fallback: u32,
    message_index: Option<usize>,
    producer: Option<String>,
) -> Divergence {
    let e = text_of(earlier);
    let l = text_of(later);
    let common = common_prefix_len(e.as_bytes(), l.as_bytes());
    let byte_offset = match later {
        Some((c, b)) => {
            let start = b.start as usize;
            match c.body() {
                Some(body) if b.bytes(body) == l.as_ref() => start + common,
                Some(body) => {
                    // Compared in another form (a string content as a text block, a block
                    // without its `cache_control`): the offset from the bytes as sent.
                    let sent = earlier
                        .and_then(|(ec, eb)| ec.body().map(|t| eb.bytes(t)))
                        .unwrap_or("");
                    start + common_prefix_len(sent.as_bytes(), b.bytes(body).as_bytes())
                }
                None => start,
            }
        }
        None => fallback as usize,
    };
    Divergence {
        byte_offset,
        message_index,
        producer,
        excerpt: Excerpt::around(e.as_bytes(), l.as_bytes(), common),
    }
}

struct Pair<'c> {
    e: &'c Canonical<'c>,
    l: &'c Canonical<'c>,
    changes: Vec<Change>,
}

impl<'c> Pair<'c> {
    fn push(&mut self, cause: Cause, place: Place, json_path: String, divergence: Divergence) {
        if self.changes.len() < MAX_CHANGES {
            self.changes.push(Change {
                cause,
                place,
                json_path,
                divergence,
            });
        }
    }

    fn full(&self) -> bool {
        self.changes.len() >= MAX_CHANGES
    }

    fn keys(&mut self) {
        let (e, l) = (self.e, self.l);
        if let (Some(a), Some(b)) = (&e.model, &l.model)
            && a != b
        {
            let d = key_divergence(a, b, 0, "model");
            self.push(Cause::ModelChanged, Place::Model, "model".into(), d);
        }
        // The cache key and the headers first, as the provider routes on them; parameters
        // after the system field ([`Pair::params`]).
        self.key_changes(|name, source| name == "prompt_cache_key" || source == KeySource::Header);
    }

    fn params(&mut self) {
        self.key_changes(|name, source| name != "prompt_cache_key" && source != KeySource::Header);
    }

    fn key_changes(&mut self, which: impl Fn(&str, KeySource) -> bool) {
        let (e, l) = (self.e, self.l);
        let earlier: HashMap<&str, _> = e.keys.iter().map(|k| (k.name.as_ref(), k)).collect();
        let later: HashMap<&str, _> = l.keys.iter().map(|k| (k.name.as_ref(), k)).collect();
        let mut names: Vec<&str> = earlier.keys().chain(later.keys()).copied().collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let (a, b) = (earlier.get(name), later.get(name));
            let source = a.or(b).map_or(KeySource::Body, |k| k.source);
            if !which(name, source) || a.map(|k| k.hash) == b.map(|k| k.hash) {
                continue;
            }
            let at = b.and_then(|k| k.start).unwrap_or(0);
            let d = key_divergence(
                a.map_or("", |k| &k.value),
                b.map_or("", |k| &k.value),
                at,
                name,
            );
            let (cause, place, path) = match (name, source) {
                ("prompt_cache_key", _) => (
                    Cause::CacheKeyChanged,
                    Place::CacheKey,
                    "prompt_cache_key".to_owned(),
                ),
                (_, KeySource::Header) => {
                    let header = name.trim_start_matches("header:").to_owned();
                    (
                        Cause::HeaderOrParamChanged {
                            name: name.to_owned(),
                        },
                        Place::Header {
                            name: header.clone(),
                        },
                        format!("headers.{header}"),
                    )
                }
                _ => (
                    Cause::HeaderOrParamChanged {
                        name: name.to_owned(),
                    },
                    Place::Parameter {
                        name: name.to_owned(),
                    },
                    name.to_owned(),
                ),
            };
            self.push(cause, place, path, d);
        }
    }

    fn tools(&mut self) {
        let (e, l) = (self.e, self.l);
        let Some(at) = (0..e.tools.len().max(l.tools.len())).find(|&i| {
            match (e.tools.get(i), l.tools.get(i)) {
                (Some(a), Some(b)) => a.block.hash != b.block.hash,
                _ => true,
            }
        }) else {
            return;
        };
        let earlier_names: HashMap<&str, u64> = e
            .tools
            .iter()
            .map(|t| (t.name.as_ref(), t.block.hash))
            .collect();
        let later_names: HashSet<&str> = l.tools.iter().map(|t| t.name.as_ref()).collect();
        let (a, b) = (e.tools.get(at), l.tools.get(at));
        let first = match (a, b) {
            (Some(a), Some(b)) if a.name == b.name => (ToolChange::Edited, &b.name),
            (_, Some(b)) if !earlier_names.contains_key(b.name.as_ref()) => {
                (ToolChange::Added, &b.name)
            }
            (Some(a), _) if !later_names.contains(a.name.as_ref()) => {
                (ToolChange::Removed, &a.name)
            }
            (_, Some(b)) => (ToolChange::Reordered, &b.name),
            (Some(a), None) => (ToolChange::Removed, &a.name),
            (None, None) => return,
        };
        let tool_change = |pair: &mut Self, change: ToolChange, index: usize, name: &str| {
            let (x, y) = (
                e.tools.get(index).map(|t| (e, &t.block)),
                l.tools.get(index).map(|t| (l, &t.block)),
            );
            let (x, y) = match change {
                ToolChange::Removed => (x, None),
                ToolChange::Added => (
                    e.tools
                        .iter()
                        .find(|t| t.name.as_ref() == name)
                        .map(|t| (e, &t.block)),
                    y,
                ),
                ToolChange::Edited => (
                    e.tools
                        .iter()
                        .find(|t| t.name.as_ref() == name)
                        .map(|t| (e, &t.block))
                        .or(x),
                    y,
                ),
                ToolChange::Reordered => (x, y),
            };
            let d = divergence(x, y, l.tools_end, None, Some(format!("tool `{name}`")));
            // A removed tool is where the earlier request had it.
            let path = if change == ToolChange::Removed || index >= l.tools.len() {
                e.tool_path(index)
            } else {
                l.tool_path(index)
            };
            pair.push(
                Cause::ToolsChanged {
                    change,
                    name: name.to_owned(),
                },
                Place::Tools { index },
                path,
                d,
            );
        };
        tool_change(self, first.0, at, first.1);
        // Every other tool that changed, by name: added, edited, removed.
        for (i, t) in l.tools.iter().enumerate().skip(at + 1) {
            if self.full() {
                return;
            }
            let change = match earlier_names.get(t.name.as_ref()) {
                None => ToolChange::Added,
                Some(&hash) if hash != t.block.hash => ToolChange::Edited,
                Some(_) => continue,
            };
            tool_change(self, change, i, &t.name);
        }
        for (i, t) in e.tools.iter().enumerate() {
            if self.full() {
                return;
            }
            let told_first = first.0 == ToolChange::Removed && first.1 == &t.name;
            if !(later_names.contains(t.name.as_ref()) || told_first) {
                tool_change(self, ToolChange::Removed, i, &t.name);
            }
        }
    }

    fn system(&mut self) {
        let (e, l) = (self.e, self.l);
        let Some(at) = (0..e.system.len().max(l.system.len())).find(|&i| {
            match (e.system.get(i), l.system.get(i)) {
                (Some(a), Some(b)) => a.hash != b.hash,
                _ => true,
            }
        }) else {
            return;
        };
        let flat = matches!(e.shape, ApiKind::OpenAi | ApiKind::OpenAiResponses);
        // System messages appended to a body that has nothing else are appended in place.
        if flat && at == e.system.len() && e.messages.is_empty() {
            return;
        }
        // Hoisting grows the system field and keeps the messages; a compaction (a summary
        // put in the system field) also drops the earlier messages: a rewrite.
        let messages_kept = e.messages.first().is_none_or(|m| {
            l.messages
                .first()
                .is_some_and(|x| x.block.hash == m.block.hash)
        });
        // The texts are read only now, at a change.
        let texts = if messages_kept {
            e.system_text().zip(l.system_text())
        } else {
            None
        };
        let hoisted = texts.and_then(|(before, after)| {
            (after.len() > before.len() && after.starts_with(before.as_str()))
                .then(|| excerpt(&after[before.len()..], HOISTED_EXCERPT).into_owned())
        });
        let side = |c: &'c Canonical<'c>, i: usize| c.system.get(i).map(|b| (c, b));
        if let Some(hoisted) = hoisted {
            let d = divergence(
                side(e, at),
                side(l, at),
                l.system_end,
                None,
                Some("system".into()),
            );
            self.push(
                Cause::InsertAboveHistory {
                    count: 0,
                    hoisted: Some(hoisted),
                },
                Place::System { block: at },
                system_path(e, l, at),
                d,
            );
            return;
        }
        for i in at..e.system.len().max(l.system.len()) {
            if self.full() {
                return;
            }
            if let (Some(a), Some(b)) = (e.system.get(i), l.system.get(i))
                && a.hash == b.hash
            {
                continue;
            }
            let d = divergence(
                side(e, i),
                side(l, i),
                l.system_end,
                None,
                Some("system".into()),
            );
            self.push(
                Cause::SystemChanged,
                Place::System { block: i },
                system_path(e, l, i),
                d,
            );
        }
    }

    fn messages(&mut self) {
        let (e, l) = (self.e, self.l);
        let Some(last) = e.messages.len().checked_sub(1) else {
            return;
        };
        for (i, a) in e.messages.iter().enumerate() {
            let Some(b) = l.messages.get(i) else {
                self.message_change(i, None, Cause::TailDropped);
                return;
            };
            if same(a, b) {
                continue;
            }
            let same_message =
                e.role(a) == l.role(b) && e.rest_of(a).is_some_and(|x| Some(x) == l.rest_of(b));
            let (a_content, b_content) = (e.content_of(a), l.content_of(b));
            // The first block where they differ (or the earlier one's end).
            let j = (0..a_content.len())
                .find(|&j| b_content.get(j).is_none_or(|x| x.hash != a_content[j].hash))
                .unwrap_or(a_content.len());
            if same_message && j == a_content.len() && i == last {
                // The last message goes on with more blocks (a merged user message).
                continue;
            }
            let cause = self.classify(i);
            if resent_at_end(e, l, i) {
                self.message_change(i, None, cause);
                return;
            }
            if same_message && matches!(cause, Cause::EditInPlace | Cause::TailDropped) {
                // Told at the block: the blocks before it are kept.
                let later_blocks: HashSet<u64> = b_content.iter().map(|x| x.hash).collect();
                let tail_gone = a_content[j..]
                    .iter()
                    .all(|x| !later_blocks.contains(&x.hash));
                // Blocks of the last message kept, the rest gone: its per-request tail. Its
                // first block changed: an edit.
                let cause = if i == last && tail_gone && 0 < j && j < a_content.len() {
                    Cause::TailDropped
                } else {
                    Cause::EditInPlace
                };
                let edit = cause == Cause::EditInPlace;
                self.message_change(i, Some(j), cause);
                if edit {
                    self.more_edits(i);
                }
                return;
            }
            let edit = cause == Cause::EditInPlace;
            self.message_change(i, None, cause);
            if edit {
                self.more_edits(i);
            }
            return;
        }
    }

    /// After an edit in place at `i`: every later message edited at the same index.
    fn more_edits(&mut self, i: usize) {
        let (e, l) = (self.e, self.l);
        let end = e.messages.len().min(l.messages.len());
        for k in i + 1..end {
            if self.full() {
                return;
            }
            if !same(&e.messages[k], &l.messages[k]) {
                self.message_change(k, None, Cause::EditInPlace);
            }
        }
    }

    /// Why message `i` of the earlier request differs from message `i` of the later one.
    fn classify(&self, i: usize) -> Cause {
        let (e, l) = (self.e, self.l);
        if l.compacted && !e.compacted {
            return Cause::Compaction;
        }
        if resent_at_end(e, l, i) {
            return Cause::TailDropped;
        }
        let (em, lm) = (&e.messages, &l.messages);
        let mut later_at: HashMap<u64, usize> = HashMap::new();
        for (k, m) in lm.iter().enumerate().skip(i) {
            later_at.entry(m.block.hash).or_insert(k);
        }
        let find = |m: &CanonMessage| later_at.get(&m.block.hash).copied();
        if let Some(k) = find(&em[i]) {
            let rest = em.len() - i;
            let moved_whole =
                lm.len() >= k + rest && em[i..].iter().zip(&lm[k..]).all(|(a, b)| same(a, b));
            return if moved_whole {
                Cause::InsertAboveHistory {
                    count: k - i,
                    hoisted: None,
                }
            } else {
                Cause::Reorder
            };
        }
        if em
            .get(i + 1)
            .is_some_and(|n| lm.get(i + 1).is_some_and(|m| same(m, n)))
        {
            return Cause::EditInPlace;
        }
        if em.get(i + 1).is_some_and(|n| same(&lm[i], n)) {
            return Cause::Removed;
        }
        if em[i..].iter().all(|m| find(m).is_none()) {
            let lost = em.len() - i;
            if lost >= COMPACTION_MESSAGES && lm.len() < em.len() {
                return Cause::Compaction;
            }
            return Cause::TailDropped;
        }
        Cause::EditInPlace
    }

    fn message_change(&mut self, i: usize, block: Option<usize>, cause: Cause) {
        let (e, l) = (self.e, self.l);
        let a = e.messages.get(i);
        let b = l.messages.get(i);
        let (a_block, b_block) = match block {
            Some(j) => (
                a.and_then(|m| e.content_of(m).get(j).copied()),
                b.and_then(|m| l.content_of(m).get(j).copied()),
            ),
            None => (a.map(|m| m.block), b.map(|m| m.block)),
        };
        let x: Side<'_> = a_block.as_ref().map(|b| (e, b));
        let y: Side<'_> = b_block.as_ref().map(|b| (l, b));
        let fallback = b.map_or(l.messages_end, |m| {
            m.block.start.saturating_add(m.block.len)
        });
        let index = b.map_or_else(|| a.map_or(i, |m| m.index as usize), |m| m.index as usize);
        let producer = match (a, b) {
            (Some(m), _) => Some(excerpt(e.role(m), EXCERPT_BYTES).into_owned()),
            (None, Some(m)) => Some(excerpt(l.role(m), EXCERPT_BYTES).into_owned()),
            (None, None) => None,
        };
        let key = l.messages_key();
        let content = if l.shape == ApiKind::Gemini {
            "parts"
        } else {
            "content"
        };
        // A content sent as a string is one text block, at the content itself.
        let string_content = b_block.or(a_block).is_some_and(|b| b.form == Form::Text);
        let path = match block {
            Some(_) if string_content => format!("{key}[{index}].{content}"),
            Some(j) => format!("{key}[{index}].{content}[{j}]"),
            None => format!("{key}[{index}]"),
        };
        let d = divergence(x, y, fallback, Some(index), producer);
        self.push(cause, Place::Message { index, block }, path, d);
    }

    /// Elements with the same meaning and other bytes, before any change: a note that the
    /// bytes differ while the provider's prompt does not.
    fn serialization(&mut self) {
        let (e, l) = (self.e, self.l);
        let pairs = e.chain_blocks().zip(l.chain_blocks());
        for (index, (a, b)) in pairs.enumerate() {
            if a.hash != b.hash {
                return;
            }
            if a.raw_hash != b.raw_hash {
                let place = self.chain_place(index);
                let d = divergence(Some((e, a)), Some((l, b)), b.start, None, None);
                let path = match &place {
                    Place::Tools { index } => l.tool_path(*index),
                    Place::System { block } => l.system_path(*block),
                    Place::Message { index, .. } => format!("{}[{index}]", l.messages_key()),
                    other => other.to_string(),
                };
                self.changes.insert(
                    0,
                    Change {
                        cause: Cause::SerializationOnly,
                        place,
                        json_path: path,
                        divergence: d,
                    },
                );
                self.changes.truncate(MAX_CHANGES);
                return;
            }
        }
    }

    fn chain_place(&self, index: usize) -> Place {
        let l = self.l;
        let (t, s) = (l.tools.len(), l.system.len());
        if index < t {
            Place::Tools { index }
        } else if index < t + s {
            Place::System { block: index - t }
        } else {
            Place::Message {
                index: l
                    .messages
                    .get(index - t - s)
                    .map_or(0, |m| m.index as usize),
                block: None,
            }
        }
    }
}

/// The JSON path of system block `i`: the later request's, or the earlier one's for a block
/// only it has ([`Canonical::system_path`]).
fn system_path(e: &Canonical<'_>, l: &Canonical<'_>, i: usize) -> String {
    if i < l.system.len() {
        l.system_path(i)
    } else {
        e.system_path(i)
    }
}

fn key_divergence(earlier: &str, later: &str, at: u32, name: &str) -> Divergence {
    let common = common_prefix_len(earlier.as_bytes(), later.as_bytes());
    Divergence {
        byte_offset: at as usize + common,
        message_index: None,
        producer: Some(name.to_owned()),
        excerpt: Excerpt::around(earlier.as_bytes(), later.as_bytes(), common),
    }
}

fn same(a: &CanonMessage, b: &CanonMessage) -> bool {
    a.block.hash == b.block.hash
}

/// Whether the earlier request's messages from `i` on are the later request's last
/// messages, after new ones: a per-request tail sent again at the end.
fn resent_at_end(e: &Canonical<'_>, l: &Canonical<'_>, i: usize) -> bool {
    let rest = e.messages.len().saturating_sub(i);
    let Some(k) = l.messages.len().checked_sub(rest) else {
        return false;
    };
    k > i
        && e.messages[i..]
            .iter()
            .zip(&l.messages[k..])
            .all(|(a, b)| same(a, b))
}

/// Every change from `earlier` to `later`, in the provider's cache order. Linear in the
/// requests' elements (an excerpt is computed per listed change, at most [`MAX_CHANGES`]).
pub fn diff(earlier: &Canonical<'_>, later: &Canonical<'_>) -> Diff {
    let mut pair = Pair {
        e: earlier,
        l: later,
        changes: Vec::new(),
    };
    pair.keys();
    let keyed = !pair.changes.is_empty();
    pair.tools();
    pair.system();
    pair.params();
    let params = pair
        .changes
        .iter()
        .any(|c| matches!(c.place, Place::Parameter { .. }));
    pair.messages();
    pair.serialization();
    let extends = pair
        .changes
        .iter()
        .all(|c| c.cause == Cause::SerializationOnly);
    let common = if keyed || params {
        0
    } else {
        earlier
            .chain_blocks()
            .zip(later.chain_blocks())
            .take_while(|(a, b)| a.hash == b.hash)
            .count()
    };
    Diff {
        changes: pair.changes,
        common,
        extends,
    }
}
