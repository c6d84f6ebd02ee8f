//! The prefix lock of a program: which of its prompt writers can reach the cached prefix,
//! checked into its repository and compared in CI, so that a new prefix writer, a writer the
//! agent.toml newly lets in, or an edited prefix constant is caught in review.
//!
//! The file format and the comparison are [`PrefixLock`] and [`LoadedLock::compare`]; this
//! module adds the file handling over a [`Registry`]:
//!
//! - [`check_lock`]: compare a lock file with a registry under a policy, or (in
//!   [`LockMode::Bless`]) write it; the `check --lock FILE [--bless]` command of
//!   `cli` (feature `cli`) is this function;
//! - [`assert_lock`]: the same from a plain `#[test]`, over every component linked into the
//!   test binary. It panics with one line per difference; with the environment variable
//!   `CACHELINE_LOCK=bless` (as trybuild's `TRYBUILD=overwrite`) it rewrites the lock and
//!   passes.
//!
//! ```
//! use prompt_registry::lock::{check_lock, LockMode, LockOutcome};
//! use prompt_registry::{prompt_component, Registry};
//!
//! /// Who the assistant is.
//! #[prompt_component(placement = "prefix")]
//! const HOUSE_RULES: &str = "No force pushes.";
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join(format!("prompt-registry-lock-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let lock = dir.join("prefix.lock");
//! let registry = Registry::linked()?;
//! let policy = registry.load_policy("[prompt]\nprefix_allow = [\"house_rules\"]\n", "agent.toml")?.deny_warnings()?;
//! let regenerate = "CACHELINE_LOCK=bless cargo test";
//! check_lock(&registry, &policy, &lock, LockMode::Bless, regenerate)?;
//! let outcome = check_lock(&registry, &policy, &lock, LockMode::Check, regenerate)?;
//! assert!(matches!(outcome, LockOutcome::Matches { .. }));
//! assert!(std::fs::read_to_string(&lock)?.contains("\n[writer.house_rules]\n"));
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(()) }
//! ```

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

use prompt_core::PromptPolicy;
use prompt_core::input::{self, InputError};
pub use prompt_core::lock::{
    LOCK_FORMAT_VERSION, LOCK_LIMIT, LoadedLock, LockChange, LockDifference, LockFileDiagnostic,
    LockFileErrors, LockProblem, LockedWriter, PrefixLock, default_header, header_of,
    portable_path, text_fingerprint,
};
use prompt_core::policy::LoadError;

use crate::{Registry, RegistryError};

/// The environment variable [`assert_lock`] reads: `bless` rewrites the lock; unset (or
/// empty) checks it.
pub const LOCK_ENV: &str = "CACHELINE_LOCK";

/// Whether to compare the lock or to write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Compare; the file is never written.
    Check,
    /// Write the lock from the program (keeping the file's leading comment block).
    Bless,
}

impl LockMode {
    /// The mode [`LOCK_ENV`] asks for.
    pub fn from_env() -> Result<Self, LockError> {
        Self::from_env_value(std::env::var_os(LOCK_ENV).as_deref())
    }

    /// The mode a value of [`LOCK_ENV`] asks for: `bless`, or unset or empty to check.
    /// Anything else is an error, so a misspelled `CACHELINE_LOCK=bles` never passes a
    /// check it did not run.
    pub fn from_env_value(value: Option<&OsStr>) -> Result<Self, LockError> {
        match value.map(OsStr::to_str) {
            None | Some(Some("")) => Ok(LockMode::Check),
            Some(Some("bless")) => Ok(LockMode::Bless),
            Some(other) => Err(LockError::Mode {
                value: other.map_or_else(
                    || value.unwrap_or_default().to_string_lossy().into_owned(),
                    str::to_owned,
                ),
            }),
        }
    }
}

/// What [`check_lock`] found or did.
#[derive(Debug, Clone)]
pub enum LockOutcome {
    /// The lock matches the program (and, when blessing, is already what it would write).
    Matches {
        /// Number of writers in it.
        writers: usize,
    },
    /// Differences, one per line, by writer id; the file is unchanged.
    Differs {
        /// The differences.
        differences: Vec<LockDifference>,
    },
    /// The lock was written.
    Blessed {
        /// Number of writers in it.
        writers: usize,
        /// What the file held before.
        before: Before,
    },
}

/// What a blessed lock file held before it was written.
#[derive(Debug, Clone)]
pub enum Before {
    /// There was no file.
    Missing,
    /// It could not be read as a lock.
    Malformed(LockFileErrors),
    /// A lock with these differences (none: only its layout changed).
    Differences(Vec<LockDifference>),
}

/// Why a lock could not be checked or written.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// No lock file yet, in [`LockMode::Check`].
    #[error(
        "{}: no prefix lock here yet; write it with `check --lock {} --bless` (from a test: {LOCK_ENV}=bless cargo test), then review and commit it",
        .path.display(),
        .path.display()
    )]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The file exists but cannot be read (not a regular file, too large, not UTF-8).
    #[error(transparent)]
    Input(InputError),
    /// The file is not a valid lock; every problem, positioned.
    #[error("{0}")]
    Malformed(LockFileErrors),
    /// Writing the file failed.
    #[error("{}: cannot write the prefix lock: {}", .path.display(), prompt_core::input::chain(.source))]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The agent.toml given to [`assert_lock`] could not be loaded.
    #[error(transparent)]
    Config(#[from] LoadError),
    /// The linked components do not form a registry.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// [`LOCK_ENV`] holds something other than `bless`.
    #[error("{LOCK_ENV}={value:?}: expected `bless` to rewrite the lock, or unset to check it")]
    Mode {
        /// The value (lossy).
        value: String,
    },
}

/// Compares the lock file at `path` with `registry` under `policy` ([`LockMode::Check`]),
/// or writes it ([`LockMode::Bless`]).
///
/// Blessing writes the lock of the program as it is: it keeps the existing file's leading
/// comment block, or writes [`default_header`] naming `regenerate` (the one command that
/// regenerates it); every other line is determined by the writers, so the file's diff shows
/// exactly the writers that changed. A file already as it would be written is left alone.
/// A missing file is an error when checking.
pub fn check_lock(
    registry: &Registry,
    policy: &PromptPolicy,
    path: &Path,
    mode: LockMode,
    regenerate: &str,
) -> Result<LockOutcome, LockError> {
    let origin = path.display().to_string();
    let existing = match input::read_text(path, LOCK_LIMIT) {
        Ok(text) => Some(text),
        Err(InputError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(LockError::Input(e)),
    };
    let loaded = existing
        .as_deref()
        .map(|text| PrefixLock::parse(text, &origin));
    if mode == LockMode::Check {
        return match loaded {
            None => Err(LockError::Missing {
                path: path.to_owned(),
            }),
            Some(Err(errors)) => Err(LockError::Malformed(errors)),
            Some(Ok(lock)) => {
                let differences = lock.compare(registry.components(), policy);
                Ok(if differences.is_empty() {
                    LockOutcome::Matches {
                        writers: lock.lock().len(),
                    }
                } else {
                    LockOutcome::Differs { differences }
                })
            }
        };
    }
    let current = PrefixLock::of(registry.components(), policy);
    let header = existing
        .as_deref()
        .and_then(header_of)
        .map_or_else(|| default_header(regenerate), str::to_owned);
    let text = current.render(&header);
    let before = match loaded {
        None => Before::Missing,
        Some(Err(errors)) => Before::Malformed(errors),
        Some(Ok(lock)) => Before::Differences(lock.compare(registry.components(), policy)),
    };
    if existing.as_deref() == Some(text.as_str()) {
        return Ok(LockOutcome::Matches {
            writers: current.len(),
        });
    }
    std::fs::write(path, &text).map_err(|source| LockError::Write {
        path: path.to_owned(),
        source,
    })?;
    Ok(LockOutcome::Blessed {
        writers: current.len(),
        before,
    })
}

/// [`check_lock`] over every component linked into this binary, for a plain `#[test]`:
///
/// ```no_run
/// #[test]
/// fn the_prefix_lock_is_current() {
///     prompt_registry::lock::assert_lock("prefix.lock", Some("agent.toml"));
/// }
/// ```
///
/// Relative paths are taken from the current directory, which `cargo test` sets to the
/// package's root. `config` is the agent.toml whose `[prompt]` section decides `lands`
/// (`None`: the empty policy, everything in the tail). Fails (panics, as `assert!` does)
/// with one line per difference, each at the declaration's `file:line:col`, or when the
/// lock is missing or malformed. With `CACHELINE_LOCK=bless` it writes the lock instead and
/// passes; review the file's diff and commit it.
#[track_caller]
pub fn assert_lock(lock: impl AsRef<Path>, config: Option<&str>) {
    match Registry::linked() {
        Ok(registry) => assert_registry_lock(&registry, lock, config),
        Err(e) => fail(&LockError::Registry(e).to_string()),
    }
}

/// [`assert_lock`] over a given registry (components registered at run time, a fixture).
#[track_caller]
pub fn assert_registry_lock(registry: &Registry, lock: impl AsRef<Path>, config: Option<&str>) {
    let lock = lock.as_ref();
    let regenerate = test_command();
    let outcome = LockMode::from_env()
        .and_then(|mode| verify_lock(registry, lock, config, mode, &regenerate));
    match outcome {
        Ok(LockOutcome::Matches { .. }) => {}
        Ok(LockOutcome::Blessed { writers, .. }) => {
            eprintln!(
                "{}: written, {writers} prefix writer(s); review its diff and commit it",
                lock.display()
            );
        }
        Ok(LockOutcome::Differs { differences }) => {
            let mut message = format!(
                "{}: {} difference(s) with the prompt writers linked into this test:\n",
                lock.display(),
                differences.len()
            );
            for d in &differences {
                message.push_str(&format!("{}: error: {}\n", d.position, d.change));
            }
            message.push_str(&format!("after review, accept them with: {regenerate}"));
            fail(&message);
        }
        Err(LockError::Malformed(errors)) => {
            let mut message = format!("{}: not a valid prefix lock:\n", lock.display());
            for d in &errors.0 {
                message.push_str(&format!("{}: error: {}\n", d.position, d.problem));
            }
            message.push_str(&format!("fix it, or rewrite it with: {regenerate}"));
            fail(&message);
        }
        Err(e) => fail(&error_chain(&e)),
    }
}

/// What [`assert_registry_lock`] runs, with the mode [`LOCK_ENV`] asks for: the agent.toml
/// loaded (`None`: the empty policy), then [`check_lock`].
pub fn verify_lock(
    registry: &Registry,
    lock: &Path,
    config: Option<&str>,
    mode: LockMode,
    regenerate: &str,
) -> Result<LockOutcome, LockError> {
    let policy = match config {
        // Its warnings are `check`'s business; the lock records where writers land.
        Some(path) => {
            PromptPolicy::load_agent_toml(Path::new(path), registry.components())?.ignore_warnings()
        }
        None => PromptPolicy::default(),
    };
    check_lock(registry, &policy, lock, mode, regenerate)
}

/// `CACHELINE_LOCK=bless cargo test -p <package>`: the package from the variable cargo
/// sets when it runs a test, when it is there.
fn test_command() -> String {
    match std::env::var("CARGO_PKG_NAME") {
        Ok(package) if !package.is_empty() => {
            format!("{LOCK_ENV}=bless cargo test -p {package}")
        }
        _ => format!("{LOCK_ENV}=bless cargo test"),
    }
}

/// `message: cause: cause`, each cause of the chain once, bounded
/// ([`prompt_core::input::report`]).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    prompt_core::input::report(e)
}

/// A test helper fails the way `assert!` does.
#[track_caller]
#[allow(clippy::panic)]
fn fail(message: &str) -> ! {
    panic!("{message}")
}
