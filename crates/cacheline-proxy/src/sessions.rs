//! Sessions that survive each launch: what the engine keeps of each analysed request (its
//! elements' hashes and tokens, its session, lane, time and reply id; no body, no header, no
//! credential: [`RequestRecord`]) appended to a journal in the state directory, and read back
//! by the next launch, or by another launch running at the same time, before it analyses.
//!
//! **One journal, one lock.** `sessions.journal` holds a header line (its format and
//! version) and one line per request: a checksum of the entry, then the entry as JSON. A
//! launch takes `sessions.lock` (an exclusive `flock`) for each exchange it analyses: it
//! reads what other launches appended since it last looked, numbers and writes its log line,
//! analyses, and appends its own entry; so two agents in two terminals, each through its own
//! launcher, see each other's requests in the order the shared log has them, as
//! `cacheline audit` of that log does. Forwarding never waits on the lock: only the analysis
//! thread takes it.
//!
//! **Damage is set aside, never fatal.** A journal written by another version is renamed
//! aside; an entry whose checksum or JSON does not hold ends what is read (a damaged tail is
//! dropped), and the journal is rewritten without it; each says so in one warning line. A
//! journal past its cap is compacted: the latest request of each session and lane is kept,
//! the least recently active sessions past the cap are dropped and counted.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use prompt_core::hash::Digest128;
use prompt_engine::RequestRecord;
use serde::{Deserialize, Serialize};

/// The journal's first line begins with its format and version, then a space and its
/// generation (20 digits, bumped by each compaction, so a launch knows to read it afresh). A
/// journal of another version is set aside, not read.
pub const JOURNAL_HEADER: &str = "cacheline-sessions 1";

/// The header line of generation `generation`.
fn header(generation: u64) -> String {
    format!("{JOURNAL_HEADER} {generation:020}\n")
}

/// The header line's length.
const HEADER_LEN: u64 = (JOURNAL_HEADER.len() + 1 + 20 + 1) as u64;

/// Entries remembered as applied (by launch and tag), so a journal read afresh after a
/// compaction does not hold a request twice; past this the memory is cleared.
const MAX_APPLIED: usize = 1 << 20;

/// The journal's file name in the state directory.
pub const JOURNAL_FILE: &str = "sessions.journal";

/// The lock file's name in the state directory.
const LOCK_FILE: &str = "sessions.lock";

/// The largest journal kept by default: past it, the journal is compacted.
pub const DEFAULT_MAX_JOURNAL_BYTES: u64 = 64 << 20;

/// The smallest cap a journal is given (a smaller one is raised to it): below it, compaction
/// keeps nothing but the latest entry.
pub const MIN_JOURNAL_BYTES: u64 = 4 << 10;

/// The longest journal line read (an entry of a request with a very long history is
/// skipped past it, and counted).
const MAX_ENTRY_BYTES: usize = 16 << 20;

/// One request an earlier (or concurrent) launch analysed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// The log it was written to (its path as given), when there was one.
    pub log: Option<PathBuf>,
    /// Its line in that log.
    pub line: Option<u64>,
    /// Where that line starts in the log, in bytes.
    pub offset: Option<u64>,
    /// What the engine keeps of it.
    pub record: RequestRecord,
}

/// Why the state directory could not be used (the proxy then runs without it, and says so).
#[derive(Debug, thiserror::Error)]
#[error("the session state in {}: {source}", dir.display())]
pub struct StateError {
    /// The state directory.
    pub dir: PathBuf,
    /// What failed.
    #[source]
    pub source: io::Error,
}

/// The journal of one state directory, opened by one launch.
#[derive(Debug)]
pub struct SessionStore {
    dir: PathBuf,
    journal: File,
    lock: File,
    /// Bytes of the journal this launch has read (its own appends included).
    read_to: u64,
    /// The journal's generation when this launch last read it.
    generation: Option<u64>,
    /// Entries read (launch, tag): a journal read again after a compaction skips them.
    applied: std::collections::HashSet<(u64, u64)>,
    /// This launch's id, hashed as the engine hashes it (its own entries are not read back).
    launch_hash: u64,
    max_bytes: u64,
    max_sessions: usize,
    /// Warnings not yet handed to the caller.
    warnings: Vec<String>,
    /// The kinds of warning given already: each is said once per launch.
    warned: std::collections::HashSet<&'static str>,
}

/// The lock held while one exchange is analysed.
#[derive(Debug)]
pub struct Locked<'s> {
    store: &'s mut SessionStore,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // An unlock that fails leaves the lock to the file's close: never fatal.
        let _ = self.store.lock.unlock();
    }
}

fn checksum(json: &str) -> String {
    let digest = Digest128::of(&[json.as_bytes()]).to_string();
    digest[..16.min(digest.len())].to_owned()
}

/// The line of an entry: its checksum, a space, its JSON.
fn entry_line(entry: &Entry) -> io::Result<String> {
    let json = serde_json::to_string(entry).map_err(io::Error::other)?;
    Ok(format!("{} {json}\n", checksum(&json)))
}

/// Reads one entry line (without its newline): `None` when it does not hold.
fn parse_line(line: &str) -> Option<Entry> {
    let (sum, json) = line.split_once(' ')?;
    (checksum(json) == sum)
        .then(|| serde_json::from_str(json).ok())
        .flatten()
}

impl SessionStore {
    /// Opens (or creates) the state directory `dir` for the launch `launch`: a journal of
    /// another version is set aside, a damaged tail dropped, a journal past `max_bytes`
    /// compacted to at most `max_sessions` sessions ([`SessionStore::take_warnings`] says
    /// what was done).
    pub fn open(
        dir: &Path,
        launch: &str,
        max_bytes: u64,
        max_sessions: usize,
    ) -> Result<SessionStore, StateError> {
        let err = |source| StateError {
            dir: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(err)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))
            .map_err(err)?;
        let journal = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(dir.join(JOURNAL_FILE))
            .map_err(err)?;
        let mut store = SessionStore {
            dir: dir.to_owned(),
            journal,
            lock,
            read_to: 0,
            generation: None,
            applied: std::collections::HashSet::new(),
            launch_hash: launch_hash(launch),
            max_bytes: max_bytes.max(MIN_JOURNAL_BYTES),
            max_sessions: max_sessions.max(1),
            warnings: Vec::new(),
            warned: std::collections::HashSet::new(),
        };
        {
            let _held = store.lock().map_err(err)?;
        }
        Ok(store)
    }

    /// Takes the lock for one exchange (blocking while another launch holds it), and
    /// checks the journal's header: a new journal gets one, another version's is set aside.
    pub fn lock(&mut self) -> io::Result<Locked<'_>> {
        self.lock.lock()?;
        let locked = Locked { store: self };
        locked.store.check_header()?;
        Ok(locked)
    }

    /// What went wrong with the journal since last asked, one line each; each kind (set
    /// aside, damaged, at its cap) once per launch, however often it happens again.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Keeps `warning` for the caller, unless one of its `kind` was given already.
    fn warn_once(&mut self, kind: &'static str, warning: String) {
        if self.warned.insert(kind) {
            self.warnings.push(warning);
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.join(JOURNAL_FILE)
    }

    /// Reopens the journal when another launch replaced the file this one holds open.
    fn follow_path(&mut self) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let held = self.journal.metadata()?;
        let same = std::fs::metadata(self.path())
            .is_ok_and(|now| now.ino() == held.ino() && now.dev() == held.dev());
        if !same {
            self.journal = OpenOptions::new()
                .create(true)
                .read(true)
                .append(true)
                .open(self.path())?;
            self.generation = None;
        }
        Ok(())
    }

    /// A new journal gets its header; one of another version (or not a journal) is renamed
    /// aside and a new one begun; one compacted since this launch read it is read afresh.
    fn check_header(&mut self) -> io::Result<()> {
        self.follow_path()?;
        let len = self.journal.metadata()?.len();
        if len == 0 {
            self.journal.write_all(header(0).as_bytes())?;
            self.generation = Some(0);
            self.read_to = HEADER_LEN;
            return Ok(());
        }
        let mut head = Vec::with_capacity(HEADER_LEN as usize);
        self.journal.seek(SeekFrom::Start(0))?;
        (&self.journal).take(HEADER_LEN).read_to_end(&mut head)?;
        let generation = std::str::from_utf8(&head)
            .ok()
            .and_then(|h| h.strip_prefix(JOURNAL_HEADER)?.strip_prefix(' '))
            .and_then(|rest| rest.strip_suffix('\n'))
            .filter(|digits| digits.len() == 20)
            .and_then(|digits| digits.parse::<u64>().ok());
        match generation {
            Some(g) if self.generation == Some(g) => Ok(()),
            Some(g) => {
                // New to this launch, or compacted since: read from the first entry.
                self.generation = Some(g);
                self.read_to = HEADER_LEN;
                Ok(())
            }
            None => self.set_aside(),
        }
    }

    /// Renames a journal this version cannot read aside and begins a new one.
    fn set_aside(&mut self) -> io::Result<()> {
        let aside = self.dir.join(format!(
            "{JOURNAL_FILE}.{}.set-aside",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        ));
        std::fs::rename(self.path(), &aside)?;
        let warning = format!(
            "the session state {} was written by another version (or is no journal): set aside as {}, starting afresh",
            self.path().display(),
            aside.display()
        );
        self.warn_once("set aside", warning);
        self.journal = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(self.path())?;
        self.journal.write_all(header(0).as_bytes())?;
        self.generation = Some(0);
        self.read_to = HEADER_LEN;
        Ok(())
    }
}

impl Locked<'_> {
    /// The entries other launches appended since this launch last looked (at the first
    /// call, every entry the journal holds), oldest first. A line that does not hold ends
    /// what is read: the journal is rewritten without it and what followed.
    pub fn catch_up(&mut self) -> io::Result<Vec<Entry>> {
        let store = &mut *self.store;
        let len = store.journal.metadata()?.len();
        if len <= store.read_to {
            return Ok(Vec::new());
        }
        store.journal.seek(SeekFrom::Start(store.read_to))?;
        let mut reader = BufReader::new((&store.journal).take(len - store.read_to));
        let mut entries = Vec::new();
        let mut line = Vec::new();
        let mut at = store.read_to;
        let mut damaged = false;
        loop {
            line.clear();
            let n = (&mut reader)
                .take(MAX_ENTRY_BYTES as u64 + 1)
                .read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            let whole = line.last() == Some(&b'\n');
            let entry = whole
                .then(|| std::str::from_utf8(&line[..line.len() - 1]).ok())
                .flatten()
                .and_then(parse_line);
            match entry {
                Some(e) => {
                    at += n as u64;
                    let key = (e.record.launch, e.record.tag);
                    if store.applied.len() >= MAX_APPLIED {
                        store.applied.clear();
                    }
                    if e.record.launch != store.launch_hash && store.applied.insert(key) {
                        entries.push(e);
                    }
                }
                None => {
                    damaged = true;
                    break;
                }
            }
        }
        store.read_to = at;
        if damaged {
            let warning = format!(
                "the session state {} has a damaged entry at byte {at}: it and what follows are dropped",
                store.path().display()
            );
            store.warn_once("damaged", warning);
            // Keep what holds: the journal is cut where it stopped holding.
            store.journal.set_len(at)?;
        }
        Ok(entries)
    }

    /// Appends this launch's entry; compacts the journal first when it is past its cap.
    pub fn append(&mut self, entry: &Entry) -> io::Result<()> {
        let line = entry_line(entry)?;
        let store = &mut *self.store;
        let mut len = store.journal.metadata()?.len();
        if len.saturating_add(line.len() as u64) > store.max_bytes {
            self.compact()?;
            len = self.store.journal.metadata()?.len();
        }
        let store = &mut *self.store;
        store.journal.write_all(line.as_bytes())?;
        // Under the lock no other launch writes: the journal ends where this line does,
        // without asking the file system again.
        store.read_to = len.saturating_add(line.len() as u64);
        Ok(())
    }

    /// Rewrites the journal with the latest entry of each session and lane, at most
    /// `max_sessions` sessions (the most recently active), and at most half the cap.
    fn compact(&mut self) -> io::Result<()> {
        let store = &mut *self.store;
        store.journal.seek(SeekFrom::Start(HEADER_LEN))?;
        let mut reader = BufReader::new(&store.journal);
        let mut latest: HashMap<(String, String), (usize, String)> = HashMap::new();
        let mut order = 0usize;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = (&mut reader)
                .take(MAX_ENTRY_BYTES as u64 + 1)
                .read_until(b'\n', &mut line)?;
            if n == 0 || line.last() != Some(&b'\n') {
                break;
            }
            let Ok(text) = std::str::from_utf8(&line[..line.len() - 1]) else {
                break;
            };
            let Some(entry) = parse_line(text) else {
                break;
            };
            order += 1;
            let key = (entry.record.session.id.clone(), entry.record.lane.clone());
            latest.insert(key, (order, text.to_owned()));
        }
        // The most recently active sessions first; each session's lanes together.
        let mut sessions: HashMap<String, usize> = HashMap::new();
        for ((session, _), (at, _)) in &latest {
            let last = sessions.entry(session.clone()).or_default();
            *last = (*last).max(*at);
        }
        let mut ranked: Vec<(String, usize)> = sessions.into_iter().collect();
        ranked.sort_by_key(|r| std::cmp::Reverse(r.1));
        let budget = store.max_bytes / 2;
        let mut kept_sessions = std::collections::HashSet::new();
        let mut bytes = HEADER_LEN;
        let mut dropped = 0usize;
        for (session, _) in &ranked {
            let size: u64 = latest
                .iter()
                .filter(|((s, _), _)| s == session)
                .map(|(_, (_, l))| l.len() as u64 + 1)
                .sum();
            if kept_sessions.len() < store.max_sessions && bytes + size <= budget {
                bytes += size;
                kept_sessions.insert(session.clone());
            } else {
                dropped += 1;
            }
        }
        let mut kept: Vec<&(usize, String)> = latest
            .iter()
            .filter(|((s, _), _)| kept_sessions.contains(s))
            .map(|(_, v)| v)
            .collect();
        kept.sort_by_key(|(at, _)| *at);
        // Rewritten in place, under the lock, with the next generation: every launch holds
        // this one file open, and reads it afresh when it sees the generation move. A crash
        // in between leaves a journal that does not hold, set aside at the next start.
        let generation = store.generation.unwrap_or(0).wrapping_add(1);
        let mut text = header(generation);
        for (_, l) in kept {
            text.push_str(l);
            text.push('\n');
        }
        store.journal.set_len(0)?;
        store.journal.write_all(text.as_bytes())?;
        store.journal.sync_data()?;
        store.generation = Some(generation);
        store.read_to = store.journal.metadata()?.len();
        if dropped > 0 {
            let warning = format!(
                "the session state {} reached its cap: {dropped} least recently active sessions dropped (said once: later compactions drop more)",
                store.path().display()
            );
            store.warn_once("cap", warning);
        }
        Ok(())
    }
}

/// A launch's id hashed as the engine hashes it ([`prompt_engine::Exchange::launch`]).
fn launch_hash(launch: &str) -> u64 {
    prompt_engine::launch_hash(Some(launch))
}

/// The default state directory: `$XDG_STATE_HOME/cacheline`, else
/// `$HOME/.local/state/cacheline`; `None` when neither variable is set.
pub fn default_state_dir() -> Option<PathBuf> {
    let non_empty = |v: std::ffi::OsString| (!v.is_empty()).then(|| PathBuf::from(v));
    std::env::var_os("XDG_STATE_HOME")
        .and_then(non_empty)
        .map(|d| d.join("cacheline"))
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(non_empty)
                .map(|h| h.join(".local/state/cacheline"))
        })
}

/// Where sessions carry over, and the state's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateConfig {
    /// The state directory (`--state`; by default [`default_state_dir`]).
    pub dir: PathBuf,
    /// The journal's cap in bytes ([`DEFAULT_MAX_JOURNAL_BYTES`]).
    pub max_bytes: u64,
    /// The most sessions kept when the journal is compacted.
    pub max_sessions: usize,
}

impl StateConfig {
    /// The state in `dir`, with the default bounds.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            max_bytes: DEFAULT_MAX_JOURNAL_BYTES,
            max_sessions: 10_000,
        }
    }
}

/// Bodies read back from the log for the latest entries restored (as many as the engine
/// keeps bodies of): their excerpts and writers are named as the audit of the log names them.
const BODIES_READ_BACK: usize = 64;

/// The analysis thread's hold on the state: the journal, and the tags given to requests
/// restored without a line of this launch's log.
#[derive(Debug)]
pub(crate) struct Carried {
    store: SessionStore,
    /// The next tag for a request restored from another log or none: counted down from
    /// the top, where no log line reaches.
    synthetic: u64,
}

/// The lock held for one exchange, with what restoring needs.
#[derive(Debug)]
pub(crate) struct Held<'s> {
    locked: Locked<'s>,
    synthetic: &'s mut u64,
}

fn report_warnings(store: &mut SessionStore, warn: &dyn Fn(String)) {
    for w in store.take_warnings() {
        warn(w);
    }
}

/// Holds each entry in the auditor's engine: by its line when it was written to this
/// launch's log (the latest with their bodies, read back from it), else by a tag of its own.
fn restore(
    auditor: &mut prompt_measure::Auditor<'_>,
    entries: Vec<Entry>,
    log: Option<&crate::log::ExchangeLog>,
    synthetic: &mut u64,
) {
    let with_bodies = entries.len().saturating_sub(BODIES_READ_BACK);
    for (i, entry) in entries.into_iter().enumerate() {
        let ours = log.filter(|l| entry.log.as_deref() == Some(l.path()));
        match (ours, entry.line) {
            (Some(log), Some(line)) => {
                let body = entry
                    .offset
                    .filter(|_| i >= with_bodies)
                    .and_then(|at| log.request_at(at));
                auditor.restore(entry.record, line, true, body.as_deref());
            }
            _ => {
                *synthetic = synthetic.saturating_sub(1);
                auditor.restore(entry.record, *synthetic, false, None);
            }
        }
    }
}

impl Carried {
    /// Opens the state; a state that cannot be used is said once, and the launch goes on
    /// without it.
    pub(crate) fn open(config: &StateConfig, launch: &str, warn: &dyn Fn(String)) -> Option<Self> {
        match SessionStore::open(&config.dir, launch, config.max_bytes, config.max_sessions) {
            Ok(mut store) => {
                report_warnings(&mut store, warn);
                Some(Carried {
                    store,
                    synthetic: u64::MAX,
                })
            }
            Err(e) => {
                warn(format!(
                    "{e}; sessions do not carry over from or to this launch"
                ));
                None
            }
        }
    }

    /// Takes the lock for one exchange.
    pub(crate) fn lock(&mut self, warn: &dyn Fn(String)) -> Option<Held<'_>> {
        let synthetic = &mut self.synthetic;
        match self.store.lock() {
            Ok(locked) => Some(Held { locked, synthetic }),
            Err(e) => {
                warn(format!(
                    "the session state could not be locked ({e}); this request is not kept"
                ));
                None
            }
        }
    }

    /// Holds what other launches kept since this one last looked (under the lock).
    pub(crate) fn catch_up(
        &mut self,
        auditor: &mut prompt_measure::Auditor<'_>,
        log: Option<&crate::log::ExchangeLog>,
        warn: &dyn Fn(String),
    ) {
        if let Some(mut held) = self.lock(warn) {
            held.catch_up(auditor, log, warn);
        }
        report_warnings(&mut self.store, warn);
    }
}

impl Held<'_> {
    /// Holds what other launches kept since this one last looked.
    pub(crate) fn catch_up(
        &mut self,
        auditor: &mut prompt_measure::Auditor<'_>,
        log: Option<&crate::log::ExchangeLog>,
        warn: &dyn Fn(String),
    ) {
        match self.locked.catch_up() {
            Ok(entries) => restore(auditor, entries, log, self.synthetic),
            Err(e) => warn(format!("the session state could not be read: {e}")),
        }
        report_warnings(self.locked.store, warn);
    }

    /// Keeps the request just audited for later launches.
    pub(crate) fn keep(
        &mut self,
        auditor: &prompt_measure::Auditor<'_>,
        audit: &prompt_measure::audit::RequestAudit,
        log: Option<PathBuf>,
        offset: Option<u64>,
        warn: &dyn Fn(String),
    ) {
        let Some(record) = auditor.last_record(audit) else {
            return;
        };
        let entry = Entry {
            line: log.is_some().then_some(audit.line),
            log,
            offset,
            record,
        };
        if let Err(e) = self.locked.append(&entry) {
            warn(format!("the session state could not be written: {e}"));
        }
        report_warnings(self.locked.store, warn);
    }
}
