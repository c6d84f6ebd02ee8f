//! `--stabilize`: an agent's volatile writer delivered by appending, so its cache survives.
//!
//! For a catalogue entry marked `repair` (a date line an agent rewrites above its history),
//! the proxy keeps the element as the provider first saw it (the **frozen** element: its
//! text, keyed by the agent, the entry and the element with the changed line masked) and,
//! when a later request carries the same element with another line, sends the frozen text
//! in its place and delivers the new line as an update message inserted after the history
//! the provider saw, in the API's delivery style (the same wrapped text the library writes:
//! `<system-reminder from="date">…`). Each insertion is remembered with the messages on
//! either side of it (their hashes), so the session's later requests, which keep the new
//! line at their head, get the same insertion at the same place and extend what was sent.
//!
//! Never when unsure: a body that is not one JSON object of a known API, a compressed or
//! unread body, two repairable elements changed at once, an element changed beyond its
//! entry's line, an insertion that would put Anthropic's next breakpoint past its 20-block
//! lookback: the request is forwarded unchanged and the verdict says why. Everything but
//! the frozen element's string and the inserted message is forwarded byte for byte (the
//! body is spliced, never re-serialized).
//!
//! The state is bounded ([`MAX_FROZEN`] elements of at most [`MAX_ELEMENT_BYTES`],
//! [`MAX_INSERTIONS`] insertions each, least recently used dropped first) and kept in the
//! state directory's [`STATE_FILE`], so a resumed agent's next launch maps its requests the
//! same way.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use prompt_core::ApiKind;
use prompt_core::hash::Digest128;
use prompt_core::node::Producer;
use prompt_core::profile::ANTHROPIC_LOOKBACK_BLOCKS;
use prompt_core::raw_json::{Object, array_of, canonical, offset_in, string_of};
use prompt_measure::catalogue::{AgentId, Writer};
pub use prompt_measure::logged::{RepairNote, RepairOutcome};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::sync::Mutex;

/// The most frozen elements kept; past it the least recently used is dropped.
pub const MAX_FROZEN: usize = 256;

/// The longest element frozen: a longer one is not repaired.
pub const MAX_ELEMENT_BYTES: usize = 256 << 10;

/// The most insertions kept for one frozen element (one a date change of a conversation).
pub const MAX_INSERTIONS: usize = 32;

/// The repair state's file in the state directory.
pub const STATE_FILE: &str = "stabilize.json";

/// The state file's format.
const STATE_VERSION: u32 = 1;

/// The most bytes the state file is read from (a larger one is set aside).
const MAX_STATE_BYTES: u64 = 96 << 20;

/// One catalogue entry the proxy may repair.
#[derive(Debug, Clone)]
pub struct Repairable {
    writer: Writer,
    producer: Producer,
}

impl Repairable {
    /// The entry's id.
    pub fn id(&self) -> &str {
        &self.writer.id
    }
}

/// Which entries `--stabilize` repairs: every entry marked `repair` (plain `--stabilize`),
/// or the named ones (`--stabilize=ID,…`), each of which must be marked `repair`.
pub fn repairable(
    writers: &[Writer],
    chosen: Option<&[String]>,
) -> Result<Vec<Repairable>, String> {
    let of = |w: &Writer| -> Option<Repairable> {
        Some(Repairable {
            producer: Producer::Component(w.repair.clone()?),
            writer: w.clone(),
        })
    };
    match chosen {
        None => Ok(writers.iter().filter_map(of).collect()),
        Some(ids) => ids
            .iter()
            .map(|id| {
                let w = writers
                    .iter()
                    .find(|w| w.id == *id)
                    .ok_or_else(|| format!("--stabilize: no catalogue entry {id:?}"))?;
                of(w).ok_or_else(|| {
                    format!("--stabilize: the catalogue entry {id:?} is not marked `repair`")
                })
            })
            .collect(),
    }
}

/// The decision on one request.
#[derive(Debug)]
pub enum Decision {
    /// Nothing to repair: forwarded as it came, nothing noted.
    Untouched,
    /// Sent upstream instead of the agent's body.
    Repaired {
        /// The body sent.
        body: Vec<u8>,
        /// What was done.
        note: RepairNote,
    },
    /// Forwarded unchanged, for the reason the note gives.
    Refused(RepairNote),
}

/// One frozen element.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Frozen {
    /// The agent, the entry and the element with its line masked, hashed.
    key: String,
    /// The agent, the entry and the element's text before the pattern, hashed: a later
    /// element with this and another key changed beyond its line.
    head: String,
    entry: String,
    /// The element's text as the provider first saw it.
    sent: String,
    insertions: Vec<Insertion>,
    /// Hashes of the latest messages of the requests sent with the frozen text (at most
    /// [`MAX_SEEN`]): a request continues a conversation the provider saw with it only when
    /// one of its messages is here.
    #[serde(default)]
    seen: Vec<String>,
    /// When it was last used (seconds since the Unix epoch).
    used: u64,
}

impl Frozen {
    /// Remembers the latest [`RECORDED`] messages of a request sent with the frozen text.
    fn record(&mut self, hashes: &MessageHashes<'_>) {
        let n = hashes.list.len();
        for i in n.saturating_sub(RECORDED)..n {
            let h = hashes.of(i);
            if !self.seen.contains(&h) {
                self.seen.push(h);
            }
        }
        let over = self.seen.len().saturating_sub(MAX_SEEN);
        self.seen.drain(..over);
    }

    /// Whether one of the [`RECORDED`] messages before `index` (and after `from`) was sent
    /// with the frozen text: the request continues a conversation the provider saw with it.
    fn continued_by(&self, hashes: &MessageHashes<'_>, from: usize, index: usize) -> bool {
        (from..index)
            .rev()
            .take(RECORDED)
            .any(|i| self.seen.contains(&hashes.of(i)))
    }
}

/// Messages of a request remembered or looked up, from its end.
const RECORDED: usize = 16;

/// The most message hashes a frozen element keeps.
const MAX_SEEN: usize = 256;

/// The hashes of one request's messages ([`message_hash`]), each computed once.
struct MessageHashes<'a> {
    list: &'a [&'a RawValue],
    memo: std::cell::RefCell<HashMap<usize, String>>,
}

impl<'a> MessageHashes<'a> {
    fn new(list: &'a [&'a RawValue]) -> Self {
        MessageHashes {
            list,
            memo: std::cell::RefCell::new(HashMap::new()),
        }
    }

    /// The hash of message `i` (of an absent one: empty, which no hash equals).
    fn of(&self, i: usize) -> String {
        let Some(m) = self.list.get(i) else {
            return String::new();
        };
        self.memo
            .borrow_mut()
            .entry(i)
            .or_insert_with(|| message_hash(m))
            .clone()
    }
}

/// One update inserted into a conversation's message list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Insertion {
    /// Its index in the list it was inserted into (the agent's messages before it).
    index: usize,
    /// The hash of the agent's message before it, if any.
    before: Option<String>,
    /// The hash of the agent's message after it, when there was one.
    after: Option<String>,
    /// The line delivered.
    value: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    frozen: Vec<Frozen>,
}

/// The frozen elements of every session, by key.
#[derive(Debug, Default)]
pub struct RepairState {
    frozen: HashMap<String, Frozen>,
    /// Whether something changed since last saved.
    dirty: bool,
    /// Whether an element was frozen or an update inserted since last saved: saved at once
    /// (the messages seen are saved at most every [`SAVE_EVERY`], and when the proxy stops).
    urgent: bool,
}

/// How often the messages seen with a frozen element are saved at most.
const SAVE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

impl RepairState {
    /// How many elements are frozen.
    pub fn len(&self) -> usize {
        self.frozen.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.frozen.is_empty()
    }

    /// Reads the state from `dir`'s [`STATE_FILE`] (none there: empty). A file that cannot
    /// be read as one is set aside (renamed `.damaged`), and the error says so.
    pub fn load(dir: &Path) -> Result<RepairState, String> {
        let path = dir.join(STATE_FILE);
        let text = match std::fs::File::open(&path) {
            Ok(f) => {
                use std::io::Read as _;
                let mut text = String::new();
                match f.take(MAX_STATE_BYTES).read_to_string(&mut text) {
                    Ok(_) => text,
                    Err(e) => return Err(set_aside(&path, &e.to_string())),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RepairState::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let file: StateFile = match serde_json::from_str(&text) {
            Ok(f) => f,
            Err(e) => return Err(set_aside(&path, &e.to_string())),
        };
        if file.version != STATE_VERSION {
            return Err(set_aside(
                &path,
                &format!("format {} (this proxy reads {STATE_VERSION})", file.version),
            ));
        }
        let mut state = RepairState::default();
        for f in file.frozen {
            state.keep(f);
        }
        state.dirty = false;
        state.urgent = false;
        Ok(state)
    }

    /// Writes the state to `dir`'s [`STATE_FILE`] (a temporary file renamed over it, so a
    /// crash leaves the old one or the new one), merged with what another launch wrote
    /// there meanwhile (its elements kept where this one has none of the same key).
    pub fn save(&mut self, dir: &Path) -> std::io::Result<()> {
        if !self.dirty {
            return Ok(());
        }
        if let Ok(theirs) = RepairState::load(dir) {
            for (key, f) in theirs.frozen {
                if !self.frozen.contains_key(&key) {
                    self.keep(f);
                }
            }
        }
        let mut frozen: Vec<Frozen> = self.frozen.values().cloned().collect();
        frozen.sort_by(|a, b| a.key.cmp(&b.key));
        let file = StateFile {
            version: STATE_VERSION,
            frozen,
        };
        let json = serde_json::to_vec(&file).map_err(std::io::Error::other)?;
        // The session journal may not have made the directory yet.
        std::fs::create_dir_all(dir)?;
        let path = dir.join(STATE_FILE);
        let tmp: PathBuf = dir.join(format!("{STATE_FILE}.{}.tmp", std::process::id()));
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&json)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        self.dirty = false;
        self.urgent = false;
        Ok(())
    }

    fn keep(&mut self, f: Frozen) {
        // What a state file holds is read as untrusted: an element past the bounds, or an
        // update longer than a line a repair delivers, is not kept.
        if f.sent.len() > MAX_ELEMENT_BYTES
            || f.insertions.len() > MAX_INSERTIONS
            || f.insertions.iter().any(|i| i.value.len() > MAX_LINE_BYTES)
            || f.seen.len() > MAX_SEEN
        {
            return;
        }
        if !self.frozen.contains_key(&f.key) && self.frozen.len() >= MAX_FROZEN {
            // The least recently used goes.
            if let Some(oldest) = self
                .frozen
                .values()
                .min_by_key(|f| (f.used, f.key.clone()))
                .map(|f| f.key.clone())
            {
                self.frozen.remove(&oldest);
            }
        }
        self.frozen.insert(f.key.clone(), f);
        self.dirty = true;
        self.urgent = true;
    }

    /// The decision on one request body of `api` from `agent`, by `entries`; `now` in
    /// seconds since the Unix epoch (the least recently used element is dropped first).
    pub fn decide(
        &mut self,
        entries: &[Repairable],
        api: ApiKind,
        agent: Option<&AgentId>,
        body: &[u8],
        now: u64,
    ) -> Decision {
        let Some(agent) = agent else {
            return Decision::Untouched;
        };
        let mine: Vec<&Repairable> = entries
            .iter()
            .filter(|r| r.writer.agent == agent.name && r.writer.applies_to(agent.version))
            .collect();
        let Some(first) = mine.first() else {
            return Decision::Untouched;
        };
        let Some(list_key) = list_key(api) else {
            return Decision::Refused(RepairNote::refused(
                first.id(),
                format!("{} bodies are not repaired", api.name()),
            ));
        };
        let Ok(text) = std::str::from_utf8(body) else {
            return Decision::Refused(RepairNote::refused(first.id(), "the body is not UTF-8"));
        };
        let top = match Object::parse(text) {
            Ok(top) => top,
            Err(e) => {
                return Decision::Refused(RepairNote::refused(
                    first.id(),
                    format!(
                        "the body is not one JSON object: {}",
                        prompt_core::input::head(&e.to_string(), 120)
                    ),
                ));
            }
        };
        // No message list: nothing a repair could append to.
        let Some(list) = top.get(list_key).and_then(array_of) else {
            return Decision::Untouched;
        };
        // The elements the entries name, with what their keys say.
        struct Seen<'a, 'b> {
            repairable: &'b Repairable,
            element: Element<'a>,
            key: String,
            head: String,
            line: (usize, usize),
        }
        let mut seen: Vec<Seen<'_, '_>> = Vec::new();
        // Only the elements some entry's path names are decoded.
        let named = |path: &str| mine.iter().any(|r| r.writer.path.matches(path));
        let candidates = elements(api, &top, &list, &named);
        for r in &mine {
            let found = candidates
                .iter()
                .find(|e| r.writer.path.matches(&e.path) && e.text.contains(&r.writer.pattern));
            let Some(element) = found.cloned() else {
                continue;
            };
            if element.text.len() > MAX_ELEMENT_BYTES {
                continue;
            }
            let Some((at, end)) = line_span(&element.text, &r.writer.pattern) else {
                continue;
            };
            let name = agent.name.as_bytes();
            let id = r.id().as_bytes();
            let key = Digest128::of(&[
                name,
                b"\0",
                id,
                b"\0",
                &element.text.as_bytes()[..at],
                b"\0",
                &element.text.as_bytes()[end..],
            ])
            .to_string();
            let head = Digest128::of(&[name, b"\0", id, b"\0", &element.text.as_bytes()[..at]])
                .to_string();
            seen.push(Seen {
                repairable: r,
                element,
                key,
                head,
                line: (at, end),
            });
        }
        if seen.is_empty() {
            return Decision::Untouched;
        }
        let hashes = MessageHashes::new(&list);
        // Which of them changed since the provider saw them; an unknown one is frozen now.
        let mut changed = Vec::new();
        for (i, s) in seen.iter().enumerate() {
            match self.frozen.get_mut(&s.key) {
                Some(f) => {
                    f.used = now;
                    let applies = f.insertions.iter().any(|ins| ins.applies(&hashes));
                    if f.sent != s.element.text || applies {
                        changed.push(i);
                    } else {
                        // Sent as it came, with the frozen text.
                        f.record(&hashes);
                        self.dirty = true;
                    }
                }
                None => {
                    let beyond = self
                        .frozen
                        .values()
                        .any(|f| f.head == s.head && f.entry == s.repairable.id());
                    let mut frozen = Frozen {
                        key: s.key.clone(),
                        head: s.head.clone(),
                        entry: s.repairable.id().to_owned(),
                        sent: s.element.text.clone(),
                        insertions: Vec::new(),
                        seen: Vec::new(),
                        used: now,
                    };
                    frozen.record(&hashes);
                    self.keep(frozen);
                    if beyond {
                        return Decision::Refused(RepairNote::refused(
                            s.repairable.id(),
                            format!(
                                "{} changed beyond the entry's line (past byte {} of {})",
                                s.repairable.writer.name, s.line.1, s.element.path
                            ),
                        ));
                    }
                }
            }
        }
        let [index] = changed[..] else {
            return if changed.is_empty() {
                Decision::Untouched
            } else {
                let ids: Vec<&str> = changed.iter().map(|&i| seen[i].repairable.id()).collect();
                Decision::Refused(RepairNote::refused(
                    ids[0],
                    format!("two writers changed at once ({})", ids.join(", ")),
                ))
            };
        };
        let s = &seen[index];
        let id = s.repairable.id();
        let Some(frozen) = self.frozen.get(&s.key) else {
            return Decision::Untouched;
        };
        let current = s.element.text[s.line.0..s.line.1].to_owned();
        let mut plan: Vec<Insertion> = frozen
            .insertions
            .iter()
            .filter(|ins| ins.applies(&hashes))
            .cloned()
            .collect();
        plan.sort_by_key(|i| i.index);
        plan.dedup_by_key(|i| i.index);
        let told = plan.last().map_or_else(
            || frozen_line(&frozen.sent, &s.repairable.writer.pattern),
            |i| i.value.clone(),
        );
        let mut new = None;
        if current != told {
            // After the history the provider saw: before the request's last message (the new
            // prompt, or the tool results), and after the element's own message.
            let after_element = s.element.message.map_or(0, |m| m + 1);
            let index = if list.len() >= 2 && list.len() > after_element {
                list.len() - 1
            } else {
                list.len()
            };
            // Only a conversation the provider saw with the frozen text is repaired: one
            // it never saw with it (a new one, or one begun before the proxy froze the
            // element) keeps what the agent sends.
            if !frozen.continued_by(&hashes, after_element, index) {
                return Decision::Untouched;
            }
            if plan.last().is_some_and(|last| last.index >= index) {
                return Decision::Refused(RepairNote::refused(
                    id,
                    "the history was rewritten before the earlier update",
                ));
            }
            if frozen.insertions.len() >= MAX_INSERTIONS {
                return Decision::Refused(RepairNote::refused(
                    id,
                    format!("more than {MAX_INSERTIONS} updates in this element's sessions"),
                ));
            }
            let ins = Insertion {
                index,
                before: index.checked_sub(1).map(|b| hashes.of(b)),
                after: (index < list.len()).then(|| hashes.of(index)),
                value: current.clone(),
            };
            plan.push(ins.clone());
            new = Some(ins);
        }
        if frozen.sent == s.element.text && plan.is_empty() {
            return Decision::Untouched;
        }
        let style = api.delivery();
        let producer = &s.repairable.producer;
        // Anthropic reads a breakpoint's cache from at most 20 blocks back: an inserted block
        // must not push the request's first breakpoint after it out of reach.
        if api == ApiKind::Anthropic
            && let Some(ins) = new.as_ref()
            && let Some(blocks) = blocks_to_breakpoint(&list, ins.index)
            && blocks + 1 > ANTHROPIC_LOOKBACK_BLOCKS
        {
            return Decision::Refused(RepairNote::refused(
                id,
                format!(
                    "the update would put the next cache_control breakpoint {} blocks past the history (Anthropic looks back {ANTHROPIC_LOOKBACK_BLOCKS})",
                    blocks + 1
                ),
            ));
        }
        // The splices, in the body's byte order.
        let mut splices: Vec<(usize, usize, String)> = Vec::new();
        if frozen.sent != s.element.text {
            let Some(at) = offset_in(text, s.element.raw.get()) else {
                return Decision::Refused(RepairNote::refused(
                    id,
                    "the element is not in the body",
                ));
            };
            let sent = match serde_json::to_string(&frozen.sent) {
                Ok(sent) => sent,
                Err(e) => return Decision::Refused(RepairNote::refused(id, e.to_string())),
            };
            splices.push((at, at + s.element.raw.get().len(), sent));
        }
        for ins in &plan {
            let message = update_message(api, &style.wrap(producer, &ins.value));
            match list.get(ins.index) {
                Some(next) => {
                    let Some(at) = offset_in(text, next.get()) else {
                        return Decision::Refused(RepairNote::refused(
                            id,
                            "a message is not in the body",
                        ));
                    };
                    splices.push((at, at, format!("{message},")));
                }
                None => {
                    let Some(last) = list.last() else {
                        return Decision::Refused(RepairNote::refused(id, "no message to follow"));
                    };
                    let Some(at) = offset_in(text, last.get()) else {
                        return Decision::Refused(RepairNote::refused(
                            id,
                            "a message is not in the body",
                        ));
                    };
                    let at = at + last.get().len();
                    splices.push((at, at, format!(",{message}")));
                }
            }
        }
        splices.sort_by_key(|(start, _, _)| *start);
        let mut out =
            Vec::with_capacity(body.len() + splices.iter().map(|s| s.2.len()).sum::<usize>());
        let mut from = 0;
        for (start, end, with) in &splices {
            if *start < from {
                return Decision::Refused(RepairNote::refused(id, "overlapping edits"));
            }
            out.extend_from_slice(&body[from..*start]);
            out.extend_from_slice(with.as_bytes());
            from = *end;
        }
        out.extend_from_slice(&body[from..]);
        if let Some(f) = self.frozen.get_mut(&s.key) {
            self.urgent |= new.is_some();
            f.insertions.extend(new);
            f.record(&hashes);
            self.dirty = true;
        }
        Decision::Repaired {
            body: out,
            note: RepairNote {
                entry: id.to_owned(),
                outcome: RepairOutcome::Repaired,
                reason: None,
                update: plan.last().map(|i| i.value.clone()),
            },
        }
    }
}

impl Insertion {
    /// Whether `list` (the agent's messages) has the messages this insertion went between.
    fn applies(&self, hashes: &MessageHashes<'_>) -> bool {
        let n = hashes.list.len();
        let before_holds = match (&self.before, self.index.checked_sub(1)) {
            (Some(h), Some(b)) => b < n && hashes.of(b) == *h,
            (None, None) => true,
            _ => false,
        };
        let after_holds = match &self.after {
            Some(h) => self.index < n && hashes.of(self.index) == *h,
            None => n >= self.index,
        };
        before_holds && after_holds && (self.before.is_some() || self.after.is_some())
    }
}

/// The longest line a repair delivers: a longer one is not repaired.
const MAX_LINE_BYTES: usize = 512;

/// The line the pattern starts in `text` (with the next line too when the pattern's line
/// holds nothing else, as Claude Code's `# currentDate` heading does): its byte range.
fn line_span(text: &str, pattern: &str) -> Option<(usize, usize)> {
    let at = text.find(pattern)?;
    let eol = |from: usize| text[from..].find('\n').map_or(text.len(), |n| from + n);
    let mut end = eol(at);
    if text[at..end].trim() == pattern.trim() && end < text.len() {
        end = eol(end + 1);
    }
    (end - at <= MAX_LINE_BYTES).then_some((at, end))
}

/// The line the pattern starts in `text` ([`line_span`]).
fn frozen_line(text: &str, pattern: &str) -> String {
    line_span(text, pattern).map_or_else(String::new, |(at, end)| text[at..end].to_owned())
}

/// A message's hash as the provider reads it: keys in order, without `cache_control`
/// markers (an agent moves them to its latest messages), a string content as its one text
/// block (some agents re-send one as the other).
fn message_hash(m: &RawValue) -> String {
    match serde_json::from_str::<serde_json::Value>(m.get()) {
        Ok(mut v) => {
            as_provider_reads(&mut v);
            Digest128::of(&[canonical(&v).as_bytes()]).to_string()
        }
        Err(_) => Digest128::of(&[m.get().as_bytes()]).to_string(),
    }
}

fn as_provider_reads(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            map.remove("cache_control");
            if let Some(Value::String(text)) = map.get("content") {
                let block = serde_json::json!([{"type": "text", "text": text}]);
                map.insert("content".to_owned(), block);
            }
            map.values_mut().for_each(as_provider_reads);
        }
        Value::Array(items) => items.iter_mut().for_each(as_provider_reads),
        _ => {}
    }
}

/// The key of the message list a repair inserts into.
fn list_key(api: ApiKind) -> Option<&'static str> {
    match api {
        ApiKind::Anthropic | ApiKind::OpenAi | ApiKind::LlamaCpp => Some("messages"),
        ApiKind::Gemini => Some("contents"),
        ApiKind::OpenAiResponses => None,
    }
}

/// The update message, as the API's delivery style has it: its role, the wrapped text.
fn update_message(api: ApiKind, wrapped: &str) -> String {
    let text = serde_json::Value::String(wrapped.to_owned()).to_string();
    let role = api.delivery().update_role();
    match api {
        ApiKind::Gemini => format!(r#"{{"role":"user","parts":[{{"text":{text}}}]}}"#),
        _ => format!(r#"{{"role":"{role}","content":{text}}}"#),
    }
}

/// Content blocks from message `from` to the first one that carries a `cache_control`
/// breakpoint, that one included; `None` when none does.
fn blocks_to_breakpoint(list: &[&RawValue], from: usize) -> Option<usize> {
    let mut blocks = 0;
    for m in list.iter().skip(from) {
        let content = Object::of(m).ok()?.get("content")?;
        blocks += array_of(content).map_or(1, |items| items.len());
        if m.get().contains("\"cache_control\"") {
            return Some(blocks);
        }
    }
    None
}

/// A text element of a request: where it is, its JSON string and its text.
#[derive(Clone)]
struct Element<'a> {
    path: String,
    /// Its message's index in the message list, when it is in one.
    message: Option<usize>,
    raw: &'a RawValue,
    text: String,
}

/// The text elements of the fields a repairable entry may name: the system field and each
/// message's content (a string, or the text of each block or part).
fn elements<'a>(
    api: ApiKind,
    top: &Object<'a>,
    list: &[&'a RawValue],
    named: &dyn Fn(&str) -> bool,
) -> Vec<Element<'a>> {
    let mut out = Vec::new();
    let mut push = |path: String, message: Option<usize>, raw: &'a RawValue| {
        if !named(&path) {
            return;
        }
        let raw = match Object::of(raw) {
            Ok(obj) => match obj.get("text") {
                Some(t) => t,
                None => return,
            },
            Err(_) => raw,
        };
        if let Some(text) = string_of(raw).map(Cow::into_owned) {
            out.push(Element {
                path,
                message,
                raw,
                text,
            });
        }
    };
    if api == ApiKind::Anthropic
        && let Some(system) = top.get("system")
    {
        match array_of(system) {
            Some(blocks) => {
                for (i, b) in blocks.into_iter().enumerate() {
                    push(format!("system[{i}]"), None, b);
                }
            }
            None => push("system".to_owned(), None, system),
        }
    }
    let (name, content) = match api {
        ApiKind::Gemini => ("contents", "parts"),
        _ => ("messages", "content"),
    };
    for (i, m) in list.iter().enumerate() {
        let Ok(fields) = Object::of(m) else {
            continue;
        };
        let Some(c) = fields.get(content) else {
            continue;
        };
        match array_of(c) {
            Some(blocks) => {
                for (j, b) in blocks.into_iter().enumerate() {
                    push(format!("{name}[{i}].{content}[{j}]"), Some(i), b);
                }
            }
            None => push(format!("{name}[{i}].{content}"), Some(i), c),
        }
    }
    out
}

/// Sets a state file that cannot be read aside, and says so.
fn set_aside(path: &Path, why: &str) -> String {
    let aside = path.with_extension("json.damaged");
    match std::fs::rename(path, &aside) {
        Ok(()) => format!(
            "{}: {why}; set aside as {}, repairs start afresh",
            path.display(),
            aside.display()
        ),
        Err(e) => format!("{}: {why}; could not be set aside: {e}", path.display()),
    }
}

/// `--stabilize` in a running proxy: the entries it repairs, the state, where the state is
/// kept, and what it did.
#[derive(Debug)]
pub struct Stabilizer {
    entries: Vec<Repairable>,
    state: Mutex<Kept>,
    counts: Mutex<StabilizeCounts>,
}

#[derive(Debug)]
struct Kept {
    state: RepairState,
    dir: Option<PathBuf>,
    /// The state file's modification time when last read or written: another launch's
    /// write is merged before the next decision.
    seen: Option<std::time::SystemTime>,
    /// A save that failed, said once.
    warned: bool,
    /// When it was last saved.
    saved: Option<std::time::Instant>,
}

impl Kept {
    /// Saves the state when it has a directory (a save that fails is said once on standard
    /// error; repairs go on in memory).
    fn save(&mut self) {
        let Some(dir) = self.dir.clone() else {
            return;
        };
        self.saved = Some(std::time::Instant::now());
        match self.state.save(&dir) {
            Ok(()) => self.seen = modified(&dir),
            Err(e) if !self.warned => {
                self.warned = true;
                eprintln!(
                    "cacheline proxy: --stabilize: the repair state could not be saved in {}: {e} (repairs go on for this launch only)",
                    dir.display()
                );
            }
            Err(_) => {}
        }
    }
}

impl Drop for Stabilizer {
    /// What was not saved yet (the messages seen since the last save) is saved when the
    /// proxy stops.
    fn drop(&mut self) {
        let kept = self
            .state
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.state.dirty {
            kept.save();
        }
    }
}

/// What `--stabilize` did in one launch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StabilizeCounts {
    /// Requests sent repaired.
    pub repaired: u64,
    /// Requests forwarded unchanged that an entry named, with the reason in their verdict.
    pub refused: u64,
}

impl Stabilizer {
    /// Repairs by `entries`, the state kept in `dir` when given ([`STATE_FILE`]); a state
    /// file that could not be read is set aside, and the warning returned.
    pub fn new(entries: Vec<Repairable>, dir: Option<PathBuf>) -> (Stabilizer, Option<String>) {
        let (state, warning) = match &dir {
            Some(d) => match RepairState::load(d) {
                Ok(s) => (s, None),
                Err(w) => (RepairState::default(), Some(w)),
            },
            None => (RepairState::default(), None),
        };
        let seen = dir.as_ref().and_then(|d| modified(d));
        (
            Stabilizer {
                entries,
                state: Mutex::new(Kept {
                    state,
                    dir,
                    seen,
                    warned: false,
                    saved: None,
                }),
                counts: Mutex::new(StabilizeCounts::default()),
            },
            warning,
        )
    }

    /// The entries it repairs.
    pub fn entries(&self) -> &[Repairable] {
        &self.entries
    }

    /// The first entry that may apply to a request of `agent`, if any: only such requests
    /// are read whole before they are forwarded.
    pub fn watches(&self, agent: Option<&AgentId>) -> Option<&str> {
        let agent = agent?;
        self.entries
            .iter()
            .find(|r| r.writer.agent == agent.name && r.writer.applies_to(agent.version))
            .map(Repairable::id)
    }

    /// Takes in what another launch saved since last looked, and saves the state when an
    /// element was frozen or an update inserted since the last save, or the messages seen
    /// changed and 5 s passed: off the forwarding path (the proxy calls it on a
    /// blocking thread after each [`Stabilizer::decide`]). A save that fails is said once on
    /// standard error; repairs go on in memory.
    pub fn save_if_due(&self) {
        let mut kept = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = &mut *kept;
        if let Some(dir) = &kept.dir {
            let now_seen = modified(dir);
            if now_seen.is_some() && now_seen != kept.seen {
                if let Ok(theirs) = RepairState::load(dir) {
                    let (dirty, urgent) = (kept.state.dirty, kept.state.urgent);
                    for (key, f) in theirs.frozen {
                        match kept.state.frozen.get(&key) {
                            Some(mine) if mine.insertions.len() >= f.insertions.len() => {}
                            _ => kept.state.keep(f),
                        }
                    }
                    (kept.state.dirty, kept.state.urgent) = (dirty, urgent);
                }
                kept.seen = now_seen;
            }
        }
        let due = kept.saved.is_none_or(|at| at.elapsed() >= SAVE_EVERY);
        if kept.state.urgent || (kept.state.dirty && due) {
            kept.save();
        }
    }

    /// The decision on one request body ([`RepairState::decide`]), in memory; the state is
    /// saved, and another launch's taken in, by [`Stabilizer::save_if_due`].
    pub fn decide(&self, api: ApiKind, agent: Option<&AgentId>, body: &[u8]) -> Decision {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut kept = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let decision = kept.state.decide(&self.entries, api, agent, body, now);
        drop(kept);
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &decision {
            Decision::Repaired { .. } => counts.repaired += 1,
            Decision::Refused(_) => counts.refused += 1,
            Decision::Untouched => {}
        }
        decision
    }

    /// A request an entry may apply to, forwarded unchanged for `reason` before its body
    /// could be looked at (compressed, over the copy cap).
    pub fn refuse(&self, entry: &str, reason: &str) -> RepairNote {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.refused += 1;
        RepairNote::refused(entry, reason)
    }

    /// What it did so far.
    pub fn counts(&self) -> StabilizeCounts {
        *self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn modified(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(dir.join(STATE_FILE))
        .ok()?
        .modified()
        .ok()
}

#[cfg(test)]
mod tests {
    use prompt_measure::catalogue::Catalogue;
    use proptest::prelude::*;

    use super::*;

    fn opencode() -> AgentId {
        AgentId::from_user_agent("opencode/1.18.33 ai-sdk/provider-utils/4.0.46 runtime/bun/1.3.14")
            .unwrap_or_else(|| panic!("opencode's user-agent"))
    }

    fn builtin() -> Vec<Repairable> {
        let catalogue = Catalogue::builtin().unwrap_or_else(|e| panic!("{e}"));
        repairable(catalogue.writers(), None).unwrap_or_else(|e| panic!("{e}"))
    }

    /// An opencode-like Anthropic body: the system prompt with its `<env>` date and a skills
    /// listing, then `messages` (each a JSON message).
    fn body(date: &str, skills: &str, messages: &[String]) -> Vec<u8> {
        let system = format!(
            "You are opencode.\n<env>\n  Platform: linux\n  Today's date: {date}\n</env>\nSkills: {skills}"
        );
        format!(
            r#"{{"model":"claude-sonnet-4-5","system":[{{"type":"text","text":{}}}],"messages":[{}]}}"#,
            serde_json::Value::String(system),
            messages.join(",")
        )
        .into_bytes()
    }

    fn user(text: &str) -> String {
        format!(
            r#"{{"role":"user","content":{}}}"#,
            serde_json::Value::String(text.to_owned())
        )
    }

    fn assistant(text: &str) -> String {
        format!(
            r#"{{"role":"assistant","content":{}}}"#,
            serde_json::Value::String(text.to_owned())
        )
    }

    fn decide(state: &mut RepairState, entries: &[Repairable], body: &[u8]) -> Decision {
        state.decide(entries, ApiKind::Anthropic, Some(&opencode()), body, 1)
    }

    /// Why `later` is refused after the first day's opencode request was seen.
    fn refusal_after_the_first_day(later: &[u8]) -> String {
        let entries = builtin();
        let mut state = RepairState::default();
        let first = body("Fri Dec 04 2026", "a", &[user("hi")]);
        decide(&mut state, &entries, &first);
        match decide(&mut state, &entries, later) {
            Decision::Refused(note) => note.reason.unwrap_or_default(),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_rolled_date_is_sent_as_first_seen_and_told_in_an_update_before_the_new_prompt() {
        let entries = builtin();
        let mut state = RepairState::default();
        let day1 = body("Fri Dec 04 2026", "a", &[user("hi")]);
        assert!(matches!(
            decide(&mut state, &entries, &day1),
            Decision::Untouched
        ));
        let messages = [user("hi"), assistant("hello"), user("and now?")];
        let day2 = body("Sat Dec 05 2026", "a", &messages);
        let Decision::Repaired { body: sent, note } = decide(&mut state, &entries, &day2) else {
            panic!("not repaired");
        };
        assert_eq!(note.entry, "opencode-env-date");
        assert_eq!(
            note.update.as_deref(),
            Some("Today's date: Sat Dec 05 2026")
        );
        let sent: serde_json::Value =
            serde_json::from_slice(&sent).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            sent["system"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("Fri Dec 04 2026"))
        );
        let m = sent["messages"].as_array().map_or(0, Vec::len);
        assert_eq!(m, 4, "{sent}");
        assert_eq!(
            sent["messages"][2]["content"],
            "<system-reminder from=\"date\">\nToday's date: Sat Dec 05 2026\n</system-reminder>"
        );
        assert_eq!(sent["messages"][3]["content"], "and now?");
    }

    #[test]
    fn a_conversation_the_provider_never_saw_with_the_first_date_is_left_as_it_is() {
        let entries = builtin();
        let mut state = RepairState::default();
        decide(
            &mut state,
            &entries,
            &body("Fri Dec 04 2026", "a", &[user("hi")]),
        );
        // Another conversation, begun the next day: nothing of it was sent with the first
        // date, so its requests go as the agent sends them, now and later.
        for messages in [
            vec![user("new task")],
            vec![user("new task"), assistant("ok"), user("go on")],
        ] {
            let b = body("Sat Dec 05 2026", "a", &messages);
            assert!(matches!(
                decide(&mut state, &entries, &b),
                Decision::Untouched
            ));
        }
        // The first conversation, continued that day, is repaired.
        let later = body(
            "Sat Dec 05 2026",
            "a",
            &[user("hi"), assistant("x"), user("y")],
        );
        assert!(matches!(
            decide(&mut state, &entries, &later),
            Decision::Repaired { .. }
        ));
    }

    #[test]
    fn an_element_changed_beyond_its_line_is_forwarded_unchanged_with_its_reason() {
        let later = body(
            "Sat Dec 05 2026",
            "b",
            &[user("hi"), assistant("x"), user("y")],
        );
        let why = refusal_after_the_first_day(&later);
        assert!(why.contains("changed beyond the entry's line"), "{why}");
    }

    #[test]
    fn two_writers_changed_at_once_are_forwarded_unchanged_with_their_names() {
        let file = r#"
version = 1
[[writer]]
id = "env-date"
agent = "opencode"
versions = "*"
cause = "system_changed"
path = "system[*]"
pattern = "Today's date:"
within = 64
repair = "date"
name = "a date"
varies = "per day"

[[writer]]
id = "env-zone"
agent = "opencode"
versions = "*"
cause = "system_changed"
path = "system[*]"
pattern = "Zone:"
within = 64
repair = "zone"
name = "a zone"
varies = "per trip"
"#;
        let catalogue = Catalogue::parse(file, "test").unwrap_or_else(|e| panic!("{e}"));
        let entries = repairable(catalogue.writers(), None).unwrap_or_else(|e| panic!("{e}"));
        let two = |date: &str, zone: &str, messages: &[String]| {
            format!(
                r#"{{"model":"m","system":[{{"type":"text","text":"Today's date: {date}"}},{{"type":"text","text":"Zone: {zone}"}}],"messages":[{}]}}"#,
                messages.join(",")
            )
            .into_bytes()
        };
        let mut state = RepairState::default();
        decide(&mut state, &entries, &two("Fri", "UTC", &[user("hi")]));
        let later = two("Sat", "CET", &[user("hi"), assistant("x"), user("y")]);
        let Decision::Refused(note) = decide(&mut state, &entries, &later) else {
            panic!("two writers repaired at once");
        };
        assert_eq!(
            note.reason.as_deref(),
            Some("two writers changed at once (env-date, env-zone)")
        );
        // One of them alone is repaired.
        let one = two("Sat", "UTC", &[user("hi"), assistant("x"), user("y")]);
        assert!(matches!(
            decide(&mut state, &entries, &one),
            Decision::Repaired { .. }
        ));
    }

    #[test]
    fn an_update_that_would_put_a_breakpoint_past_anthropic_s_lookback_is_refused() {
        let blocks: Vec<String> = (0..25)
            .map(|i| {
                let marker = if i == 24 {
                    r#","cache_control":{"type":"ephemeral"}"#
                } else {
                    ""
                };
                format!(r#"{{"type":"text","text":"part {i}"{marker}}}"#)
            })
            .collect();
        let last = format!(r#"{{"role":"user","content":[{}]}}"#, blocks.join(","));
        let later = body("Sat Dec 05 2026", "a", &[user("hi"), assistant("x"), last]);
        let why = refusal_after_the_first_day(&later);
        assert!(why.contains("26 blocks past the history"), "{why}");
    }

    #[test]
    fn a_body_that_is_not_one_json_object_is_forwarded_unchanged_with_its_reason() {
        let entries = builtin();
        let mut state = RepairState::default();
        for (bad, says) in [
            (&b"{\"system\":"[..], "the body is not one JSON object"),
            (b"\xff\xfe", "the body is not UTF-8"),
            (
                br#"{"messages":[],"messages":[]}"#,
                "the key \"messages\" is given twice",
            ),
        ] {
            let Decision::Refused(note) = decide(&mut state, &entries, bad) else {
                panic!("{bad:?}");
            };
            assert!(
                note.reason.as_deref().is_some_and(|r| r.contains(says)),
                "{note:?}"
            );
        }
        // Another agent's request is not looked at.
        let other =
            AgentId::from_user_agent("codex_exec/0.171.0").unwrap_or_else(|| panic!("codex"));
        assert!(matches!(
            state.decide(&entries, ApiKind::Anthropic, Some(&other), b"{", 1),
            Decision::Untouched
        ));
    }

    #[test]
    fn the_state_is_bounded_and_survives_a_save_and_a_damaged_file_is_set_aside() {
        let entries = builtin();
        let mut state = RepairState::default();
        for i in 0..(MAX_FROZEN + 5) {
            let b = body("Fri Dec 04 2026", &format!("skills {i}"), &[user("hi")]);
            state.decide(
                &entries,
                ApiKind::Anthropic,
                Some(&opencode()),
                &b,
                i as u64,
            );
        }
        assert_eq!(state.len(), MAX_FROZEN);
        let dir =
            std::env::temp_dir().join(format!("cacheline-stabilize-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        state.save(&dir).unwrap_or_else(|e| panic!("{e}"));
        let loaded = RepairState::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(loaded.len(), MAX_FROZEN);
        std::fs::write(dir.join(STATE_FILE), b"{\"version\":1,\"frozen\":[{")
            .unwrap_or_else(|e| panic!("{e}"));
        let (s, warning) = Stabilizer::new(entries, Some(dir.clone()));
        assert!(warning.is_some_and(|w| w.contains("set aside")));
        assert_eq!(s.state.lock().map(|k| k.state.len()).unwrap_or(1), 0);
        assert!(dir.join("stabilize.json.damaged").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the bytes (a real body cut, spliced or garbled), the decision comes
        /// without a panic, and a repaired body is one JSON object that keeps every byte of
        /// the agent's after the last splice.
        #[test]
        fn any_body_is_decided_and_a_repair_is_json(
            cut in 0usize..2000,
            insert in proptest::collection::vec(any::<u8>(), 0..8),
            at in 0usize..2000,
        ) {
            let entries = builtin();
            let mut state = RepairState::default();
            decide(&mut state, &entries, &body("Fri Dec 04 2026", "a", &[user("hi")]));
            let mut b = body("Sat Dec 05 2026", "a", &[user("hi"), assistant("x"), user("y")]);
            let at = at.min(b.len());
            b.splice(at..at, insert);
            b.truncate(b.len().saturating_sub(cut % 64));
            if let Decision::Repaired { body: sent, .. } = decide(&mut state, &entries, &b) {
                prop_assert!(serde_json::from_slice::<serde_json::Value>(&sent).is_ok());
                let tail = &b[b.len().saturating_sub(6)..];
                prop_assert!(sent.ends_with(tail));
            }
        }
    }
}
