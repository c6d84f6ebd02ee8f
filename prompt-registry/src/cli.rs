//! `status` and `check` over the application's own registry (feature `cli`).
//!
//! An agent's binary gets the two commands with its own name and version in `--help` and
//! `--version`:
//!
//! ```no_run
//! // In my-agent's main.rs: `my-agent status`, `my-agent check agent.toml`.
//! fn main() -> std::process::ExitCode {
//!     prompt_registry::cli::run(prompt_registry::cli_app!(), std::env::args_os())
//! }
//! ```
//!
//! Output follows one convention: results on standard output, diagnostics on standard error
//! as `file:line:col: error: message` (or `warning:`); exit status 0 (ok), 1 (`--strict` and
//! warnings) or 2 (errors, usage errors). A closed standard output (`| head`) ends the
//! program quietly with status 0. Both streams are buffered ([`with_standard_output`]): a
//! file of a hundred thousand mistakes is reported in a few hundred `write(2)` calls.

use std::cell::RefCell;
use std::error::Error;
use std::ffi::OsString;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use prompt_core::PromptPolicy;
use prompt_core::config::Diagnostics;
use prompt_core::input::{self, CONFIG_LIMIT};
use prompt_core::placement::Placement;
use prompt_core::policy::{LoadedPolicy, PolicyDiagnostic, PolicyErrors, PolicyProblem};
use prompt_core::profile::{LoadedProvider, ProviderDiagnostic, ProviderErrors, ProviderSection};
use prompt_core::tools::ToolSet;
use serde::Serialize;

use crate::lock::{self, Before, LockError, LockMode, LockOutcome, error_chain};
use crate::policy::SourcePosition;
use crate::{ProviderStatus, Registry, STATUS_SCHEMA_VERSION};

/// Who the program is: shown by `--help` and `--version`, and the built-in `agent.toml`
/// used when none is given.
#[derive(Debug, Clone, Copy)]
pub struct App {
    /// The program's name, e.g. `env!("CARGO_PKG_NAME")`.
    pub name: &'static str,
    /// Its version, e.g. `env!("CARGO_PKG_VERSION")`.
    pub version: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// The `agent.toml` used by `status` when `--config` is absent.
    pub default_config: Option<DefaultConfig>,
}

impl App {
    /// An application with this name and version, no built-in config.
    pub const fn new(name: &'static str, version: &'static str) -> Self {
        Self {
            name,
            version,
            about: "Where every prompt writer lands, and why.",
            default_config: None,
        }
    }

    /// The same application with a built-in `agent.toml`.
    pub const fn with_default_config(mut self, config: DefaultConfig) -> Self {
        self.default_config = Some(config);
        self
    }

    /// The same application with another `--help` line.
    pub const fn about(mut self, about: &'static str) -> Self {
        self.about = about;
        self
    }
}

/// [`App`] for the calling crate: its `CARGO_PKG_NAME` and `CARGO_PKG_VERSION`.
#[macro_export]
macro_rules! cli_app {
    () => {
        $crate::cli::App::new(
            ::core::env!("CARGO_PKG_NAME"),
            ::core::env!("CARGO_PKG_VERSION"),
        )
    };
}

/// A built-in agent.toml.
#[derive(Debug, Clone, Copy)]
pub struct DefaultConfig {
    /// The name shown in messages, e.g. `<built-in agent.toml>`.
    pub name: &'static str,
    /// The TOML text.
    pub text: &'static str,
}

/// Arguments of `status`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// agent.toml to read the `[prompt]` section from (default: the built-in one, if any,
    /// else an empty policy: everything in the tail). `-` reads standard input.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print JSON (schema in docs/status-json.md) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `check`.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// The agent.toml to check; `-` reads standard input.
    #[arg(default_value = "agent.toml")]
    pub file: PathBuf,
    /// Treat warnings as failures (exit 1).
    #[arg(long)]
    pub strict: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also compare the prompt writers that can reach the prefix with this lock file (see
    /// `prompt_registry::lock`); each difference is an error at its declaration.
    #[arg(long, value_name = "LOCK")]
    pub lock: Option<PathBuf>,
    /// With --lock: write (or rewrite) the lock from this program and the agent.toml,
    /// instead of comparing.
    #[arg(long, requires = "lock")]
    pub bless: bool,
}

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: RegistryCommand,
}

/// The facade's commands. A binary with more commands flattens them into its own
/// subcommands (`#[command(flatten)]`) and hands them to [`RegistryCommand::run`].
#[derive(Debug, Clone, Subcommand)]
pub enum RegistryCommand {
    /// Show every registered prompt component, where it lands and why.
    Status(StatusArgs),
    /// Validate an agent.toml's `[prompt]` section, and with --lock compare the prefix
    /// writers with a lock file. Exit 0 clean, 1 warnings with --strict, 2 errors.
    Check(CheckArgs),
}

impl RegistryCommand {
    /// Runs the command over `registry`.
    pub fn run(
        &self,
        registry: &Registry,
        default_config: Option<DefaultConfig>,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<u8, Box<dyn Error>> {
        self.run_with_tools(registry, default_config, None, out, err)
    }

    /// [`RegistryCommand::run`] for an agent that sends a tools field: `status` shows it as
    /// a row of its own.
    pub fn run_with_tools(
        &self,
        registry: &Registry,
        default_config: Option<DefaultConfig>,
        tools: Option<&ToolSet>,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<u8, Box<dyn Error>> {
        match self {
            RegistryCommand::Status(args) => {
                status_with_tools(args, registry, default_config, tools, out, err)
            }
            RegistryCommand::Check(args) => check(args, registry, out, err),
        }
    }
}

/// Parses `args` into `C` with `app`'s name, version and about line; on a usage error or
/// `--help`/`--version`, prints it and returns the exit status instead.
pub fn parse<C, I, T>(app: &App, args: I, out: &mut dyn Write, err: &mut dyn Write) -> Result<C, u8>
where
    C: CommandFactory + FromArgMatches,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    brand(C::command(), app)
        .try_get_matches_from(args)
        .and_then(|matches| C::from_arg_matches(&matches))
        .map_err(|e| print_clap_error(&e, out, err))
}

/// Applies `app`'s name, version and about line to a clap command.
pub fn brand(command: clap::Command, app: &App) -> clap::Command {
    command
        .name(app.name)
        .bin_name(app.name)
        .version(app.version)
        .about(app.about)
}

/// Parses `args` (program name first) and runs `status` or `check` over every component
/// linked into this binary.
pub fn run<I, T>(app: App, args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    ExitCode::from(with_standard_output(|out, err| match Registry::linked() {
        Ok(registry) => run_with(app, args, &registry, out, err),
        Err(e) => {
            write_error(err, None, &e);
            2
        }
    }))
}

/// Parses `args` and runs over `registry`, writing to `out` and `err`; returns the exit
/// status.
pub fn run_with<I, T>(
    app: App,
    args: I,
    registry: &Registry,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli: Cli = match parse(&app, args, out, err) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let result = cli.command.run(registry, app.default_config, out, err);
    finish(result, err)
}

/// Prints a clap error or help text where it belongs; returns its exit status.
pub fn print_clap_error(e: &clap::Error, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let text = e.render().to_string();
    if e.use_stderr() {
        let _ = err.write_all(text.as_bytes());
        2
    } else {
        // --help, --version: a closed stdout is not an error.
        let _ = out.write_all(text.as_bytes());
        0
    }
}

/// The exit status of a command's result: a closed standard output ends quietly with 0;
/// any other error is printed as `error: message: cause` with status 2.
pub fn finish(result: Result<u8, Box<dyn Error>>, err: &mut dyn Write) -> u8 {
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&*e) => 0,
        Err(e) => {
            write_error(err, None, &*e);
            2
        }
    }
}

/// Whether `e` (or a cause of it) is a write to a closed pipe.
pub fn is_broken_pipe(e: &(dyn Error + 'static)) -> bool {
    let mut current = Some(e);
    while let Some(e) = current {
        if e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        current = e.source();
    }
    false
}

/// Writes `at: error: message: cause: cause` (or `error: …` without a position): the one
/// error format of every command. Each cause of the chain is printed once.
pub fn write_error(err: &mut dyn Write, at: Option<&str>, e: &dyn Error) {
    let chain = error_chain(e);
    let _ = match at {
        Some(at) => writeln!(err, "{at}: error: {chain}"),
        None => writeln!(err, "error: {chain}"),
    };
}

/// Writes one diagnostic of a policy file: `file:line:col: error: message`.
pub fn write_diagnostic(
    err: &mut dyn Write,
    severity: Severity,
    d: &PolicyDiagnostic,
) -> io::Result<()> {
    writeln!(err, "{}: {}: {}", d.position, severity.as_str(), d.problem)
}

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Loading failed: nothing is promoted.
    Error,
    /// Loaded; worth a look (`--strict` fails on it).
    Warning,
}

impl Severity {
    /// `error` or `warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// Reads an agent.toml (at most [`CONFIG_LIMIT`] bytes, a regular file or `-`).
pub fn read_config(path: &Path) -> Result<(String, String), input::InputError> {
    let (text, name) = prompt_core::config::read_file(path, CONFIG_LIMIT)?;
    Ok((name, text))
}

/// Loads the policy `status` (and `demo`) use: `config`, else the built-in one, else the
/// empty policy. Diagnostics are printed; `None` when loading failed.
pub fn load_policy(
    config: Option<&Path>,
    registry: &Registry,
    default_config: Option<DefaultConfig>,
    err: &mut dyn Write,
) -> Result<Option<PromptPolicy>, Box<dyn Error>> {
    Ok(load_agent_toml(config, registry, default_config, err)?.map(|(policy, _)| policy))
}

/// Loads the policy and the `[provider]` section `status` (and `demo`) use, from `config`,
/// else the built-in one, else nothing (the empty policy, no section). Diagnostics of both
/// sections are printed in source order; `None` when either failed.
pub fn load_agent_toml(
    config: Option<&Path>,
    registry: &Registry,
    default_config: Option<DefaultConfig>,
    err: &mut dyn Write,
) -> Result<Option<(PromptPolicy, ProviderSection)>, Box<dyn Error>> {
    let (name, text) = match (config, default_config) {
        (Some(path), _) => match read_config(path) {
            Ok(read) => read,
            Err(e) => {
                write_error(err, None, &e);
                return Ok(None);
            }
        },
        (None, Some(d)) => (d.name.to_owned(), d.text.to_owned()),
        (None, None) => return Ok(Some((PromptPolicy::default(), ProviderSection::default()))),
    };
    let loaded = Loaded::of(registry, &text, &name);
    loaded.print(err)?;
    Ok(loaded.sections())
}

/// Both sections of one agent.toml, loaded, with every diagnostic.
struct Loaded {
    policy: Result<LoadedPolicy, PolicyErrors>,
    provider: Option<Result<LoadedProvider, ProviderErrors>>,
}

impl Loaded {
    fn of(registry: &Registry, text: &str, name: &str) -> Self {
        let policy = registry.load_policy(text, name);
        // A file that does not parse is reported once, by the `[prompt]` loader.
        let unreadable = policy.as_ref().is_err_and(|Diagnostics(errors)| {
            errors.iter().any(|e| {
                matches!(
                    e.problem,
                    PolicyProblem::Syntax(_) | PolicyProblem::TooLarge { .. }
                )
            })
        });
        let provider = (!unreadable).then(|| ProviderSection::from_agent_toml(text, name));
        Self { policy, provider }
    }

    /// Errors then warnings, each in source order: `file:line:col: severity: message`.
    fn diagnostics(&self) -> Vec<(Severity, &SourcePosition, String)> {
        let mut errors: Vec<(&SourcePosition, String)> = Vec::new();
        let mut warnings: Vec<(&SourcePosition, String)> = Vec::new();
        match &self.policy {
            Ok(loaded) => warnings.extend(policy_lines(loaded.warnings())),
            Err(Diagnostics(e)) => errors.extend(policy_lines(e)),
        }
        match &self.provider {
            Some(Ok(loaded)) => warnings.extend(provider_lines(loaded.warnings())),
            Some(Err(Diagnostics(e))) => errors.extend(provider_lines(e)),
            None => {}
        }
        let order = |(p, _): &(&SourcePosition, String)| (p.line, p.column);
        errors.sort_by_key(order);
        warnings.sort_by_key(order);
        errors
            .into_iter()
            .map(|(p, m)| (Severity::Error, p, m))
            .chain(warnings.into_iter().map(|(p, m)| (Severity::Warning, p, m)))
            .collect()
    }

    fn print(&self, err: &mut dyn Write) -> io::Result<()> {
        for (severity, position, message) in self.diagnostics() {
            writeln!(err, "{position}: {}: {message}", severity.as_str())?;
        }
        Ok(())
    }

    fn sections(self) -> Option<(PromptPolicy, ProviderSection)> {
        let policy = self.policy.ok()?.into_parts().0;
        let provider = match self.provider {
            Some(Ok(loaded)) => loaded.into_parts().0,
            Some(Err(_)) | None => return None,
        };
        Some((policy, provider))
    }
}

fn policy_lines(d: &[PolicyDiagnostic]) -> impl Iterator<Item = (&SourcePosition, String)> {
    d.iter().map(|d| (&d.position, d.problem.to_string()))
}

fn provider_lines(d: &[ProviderDiagnostic]) -> impl Iterator<Item = (&SourcePosition, String)> {
    d.iter().map(|d| (&d.position, d.problem.to_string()))
}

/// `status`: every component, where it lands and why.
pub fn status(
    args: &StatusArgs,
    registry: &Registry,
    default_config: Option<DefaultConfig>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    status_with_tools(args, registry, default_config, None, out, err)
}

/// [`status`], with the row of the tools field the agent sends.
pub fn status_with_tools(
    args: &StatusArgs,
    registry: &Registry,
    default_config: Option<DefaultConfig>,
    tools: Option<&ToolSet>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let Some((policy, provider)) =
        load_agent_toml(args.config.as_deref(), registry, default_config, err)?
    else {
        return Ok(2);
    };
    let mut report = registry.status(&policy).with_provider(&provider);
    if let Some(tools) = tools {
        report = report.with_tools(tools);
    }
    if args.json {
        writeln!(out, "{}", report.to_json())?;
    } else {
        writeln!(out, "{report}")?;
    }
    Ok(0)
}

/// One diagnostic in `check --json`.
#[derive(Debug, Serialize)]
struct JsonDiagnostic<'a> {
    severity: Severity,
    file: &'a str,
    line: usize,
    column: usize,
    message: String,
}

impl<'a> JsonDiagnostic<'a> {
    fn at(severity: Severity, position: &'a SourcePosition, message: String) -> Self {
        Self {
            severity,
            file: &position.origin,
            line: position.line,
            column: position.column,
            message,
        }
    }
}

/// `check --json`.
#[derive(Debug, Serialize)]
struct CheckReport<'a> {
    schema_version: u32,
    file: &'a str,
    ok: bool,
    diagnostics: Vec<JsonDiagnostic<'a>>,
    components: usize,
    prefix: Vec<String>,
    /// Exact `skill:`/`mcp:` entries that name no registered component: kept, checked when
    /// the component registers.
    unresolved: Vec<String>,
    /// The profile of the `[provider]` section (`null` without one).
    provider: Option<ProviderStatus>,
    /// With `--lock`: the lock's outcome (its differences are in `diagnostics`).
    #[serde(skip_serializing_if = "Option::is_none")]
    lock: Option<LockJson<'a>>,
}

/// `check --lock --json`: the `lock` object.
#[derive(Debug, Serialize)]
struct LockJson<'a> {
    file: &'a str,
    ok: bool,
    /// Writers in the lock (as checked, or as written).
    writers: Option<usize>,
    /// Whether `--bless` wrote the file.
    written: bool,
    /// Why the lock could not be checked, when no diagnostic says it.
    error: Option<String>,
}

/// The lock step of `check --lock`: what it found, kept for printing.
struct LockStep {
    file: String,
    result: Result<LockOutcome, LockError>,
}

impl LockStep {
    fn run(args: &CheckArgs, path: &Path, registry: &Registry, policy: &PromptPolicy) -> Self {
        let mode = if args.bless {
            LockMode::Bless
        } else {
            LockMode::Check
        };
        let regenerate = format!(
            "{} check {} --lock {} --bless",
            program_name(),
            shell_word(&args.file.display().to_string()),
            shell_word(&path.display().to_string())
        );
        Self {
            file: path.display().to_string(),
            result: lock::check_lock(registry, policy, path, mode, &regenerate),
        }
    }

    fn ok(&self) -> bool {
        matches!(
            self.result,
            Ok(LockOutcome::Matches { .. } | LockOutcome::Blessed { .. })
        )
    }

    /// Every positioned problem: the differences, or the malformed file's errors.
    fn diagnostics(&self) -> Vec<(&SourcePosition, String)> {
        match &self.result {
            Ok(LockOutcome::Differs { differences }) => differences
                .iter()
                .map(|d| (&d.position, d.change.to_string()))
                .collect(),
            Err(LockError::Malformed(errors)) => errors
                .0
                .iter()
                .map(|d| (&d.position, d.problem.to_string()))
                .collect(),
            _ => Vec::new(),
        }
    }

    fn json(&self) -> LockJson<'_> {
        let (writers, written) = match &self.result {
            Ok(LockOutcome::Matches { writers }) => (Some(*writers), false),
            Ok(LockOutcome::Blessed { writers, .. }) => (Some(*writers), true),
            _ => (None, false),
        };
        LockJson {
            file: &self.file,
            ok: self.ok(),
            writers,
            written,
            error: match &self.result {
                Err(e) if !matches!(e, LockError::Malformed(_)) => Some(error_chain(e)),
                _ => None,
            },
        }
    }

    fn print(&self, out: &mut dyn Write, err: &mut dyn Write) -> io::Result<()> {
        let file = &self.file;
        for (position, message) in self.diagnostics() {
            writeln!(err, "{position}: error: {message}")?;
        }
        match &self.result {
            Ok(LockOutcome::Matches { writers }) => {
                writeln!(out, "{file}: ok, {writers} prefix writer(s) as locked")
            }
            Ok(LockOutcome::Blessed { writers, before }) => {
                let was = match before {
                    Before::Missing => "a new lock".to_owned(),
                    Before::Malformed(_) => "replaced a malformed lock".to_owned(),
                    Before::Differences(d) => format!("{} difference(s) accepted", d.len()),
                };
                writeln!(
                    out,
                    "{file}: written, {writers} prefix writer(s) ({was}); review its diff and commit it"
                )
            }
            Ok(LockOutcome::Differs { differences }) => writeln!(
                err,
                "{file}: {} difference(s) with the prompt writers; after review, accept them with --bless",
                differences.len()
            ),
            Err(LockError::Malformed(errors)) => writeln!(
                err,
                "{file}: {} error(s); fix the file or rewrite it with --bless",
                errors.0.len()
            ),
            Err(e) => {
                write_error(err, None, e);
                Ok(())
            }
        }
    }
}

/// The name this program was started as, for the lock's header (`my-agent`).
fn program_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|arg0| {
            Path::new(&arg0)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "<this program>".to_owned())
}

/// `word`, quoted for a POSIX shell when it needs to be.
fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=+,@%".contains(&b))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// `check`: validates an agent.toml against the registry. Exit 0 clean, 1 warnings with
/// `--strict`, 2 errors.
///
/// Run-time components (`skill:`, `mcp:`) are not in the registry when `check` runs: an
/// exact entry naming one is a warning, and the ids it could not resolve are listed
/// (`unresolved:` on standard output, `"unresolved"` in `--json`).
///
/// With `--lock FILE`, the writers that can reach the prefix are compared with the lock
/// ([`lock::check_lock`]): each difference is an error at the writer's declaration, and a
/// missing or malformed lock fails too (status 2). `--bless` writes the lock instead.
pub fn check(
    args: &CheckArgs,
    registry: &Registry,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let (name, text) = match read_config(&args.file) {
        Ok(read) => read,
        Err(e) => {
            write_error(err, None, &e);
            return Ok(2);
        }
    };
    let loaded = Loaded::of(registry, &text, &name);
    let diagnostics = loaded.diagnostics();
    let errors = diagnostics
        .iter()
        .filter(|(s, _, _)| *s == Severity::Error)
        .count();
    let warnings = diagnostics.len() - errors;
    let policy = match (&loaded.policy, errors) {
        (Ok(policy), 0) => Some(policy),
        _ => None,
    };
    let (prefix, unresolved): (Vec<String>, Vec<String>) = match policy {
        Some(loaded) => {
            let report = registry.status(&loaded.clone().ignore_warnings());
            let prefix = report
                .prompt
                .components
                .iter()
                .filter(|c| c.placement == Placement::Prefix)
                .map(|c| c.id.clone())
                .collect();
            let unresolved = loaded
                .unresolved()
                .iter()
                .map(ToString::to_string)
                .collect();
            (prefix, unresolved)
        }
        None => (Vec::new(), Vec::new()),
    };
    let provider = match &loaded.provider {
        Some(Ok(section)) if errors == 0 => {
            let section = section.clone().ignore_warnings();
            section.is_present().then(|| ProviderStatus::of(&section))
        }
        _ => None,
    };
    let policy = policy.map(|p| p.clone().ignore_warnings());
    // The lock is compared (or written) only against a policy that loaded: a broken
    // agent.toml says nothing about who lands where.
    let lock_step = match (&policy, &args.lock) {
        (Some(policy), Some(path)) => Some(LockStep::run(args, path, registry, policy)),
        _ => None,
    };
    let code = if errors > 0 || lock_step.as_ref().is_some_and(|l| !l.ok()) {
        2
    } else if args.strict && warnings > 0 {
        1
    } else {
        0
    };
    if args.json {
        let diagnostics = diagnostics
            .iter()
            .map(|(severity, position, message)| {
                JsonDiagnostic::at(*severity, position, message.clone())
            })
            .chain(lock_step.iter().flat_map(|l| {
                l.diagnostics().into_iter().map(|(position, message)| {
                    JsonDiagnostic::at(Severity::Error, position, message)
                })
            }))
            .collect();
        let report = CheckReport {
            schema_version: STATUS_SCHEMA_VERSION,
            file: &name,
            ok: code == 0,
            diagnostics,
            components: registry.len(),
            prefix,
            unresolved,
            provider,
            lock: lock_step.as_ref().map(LockStep::json),
        };
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(code);
    }
    loaded.print(err)?;
    if errors == 0 {
        writeln!(
            out,
            "{name}: ok, {warnings} warning(s); {} components, {} in the prefix",
            registry.len(),
            prefix.len()
        )?;
        if !unresolved.is_empty() {
            writeln!(
                out,
                "unresolved: {} (run-time entries are checked when the component registers)",
                unresolved.join(", ")
            )?;
        }
        if let Some(provider) = &provider {
            writeln!(out, "provider: {}", provider.text)?;
        }
        if let Some(lock_step) = &lock_step {
            lock_step.print(out, err)?;
        }
    } else {
        writeln!(err, "{name}: {errors} error(s); nothing is promoted")?;
        if let Some(lock) = &args.lock {
            writeln!(
                err,
                "{}: not checked: the agent.toml has errors",
                lock.display()
            )?;
        }
    }
    Ok(code)
}

/// Runs a command with the process's standard output and standard error, both buffered
/// ([`buffered`]; standard error flushed at each line when it is a terminal, so a person
/// sees each diagnostic as it comes), then flushes them; returns the command's exit status.
/// A closed standard output still ends the program quietly with status 0, whether a write
/// of the command or the last flush meets it; any other failure to write the output is
/// reported with status 2.
pub fn with_standard_output(run: impl FnOnce(&mut dyn Write, &mut dyn Write) -> u8) -> u8 {
    let lines = io::stderr().is_terminal();
    let (code, flushed) = buffered(io::stdout().lock(), io::stderr().lock(), lines, run);
    match flushed {
        Ok(()) => code,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            write_error(&mut io::stderr().lock(), None, &e);
            2
        }
    }
}

/// Runs `run` with `out` and `err` buffered, then flushes them; returns what `run` returned
/// and how the last flush of `out` went. A diagnostic line goes out in one piece instead of
/// the ~20 pieces of its format, and a run of lines in one `write`. The two streams keep
/// the relative order they were written in: writing to one flushes what the other holds.
/// With `err_by_line`, `err` is also flushed at each newline.
///
/// ```
/// use std::io::Write;
/// let (mut out, mut err) = (Vec::new(), Vec::new());
/// let (code, flushed) = prompt_registry::cli::buffered(&mut out, &mut err, false, |o, e| {
///     writeln!(e, "agent.toml:2:1: error: one").ok();
///     writeln!(o, "agent.toml: 1 error(s)").ok();
///     2
/// });
/// assert_eq!((code, flushed.is_ok()), (2, true));
/// assert_eq!(out, b"agent.toml: 1 error(s)\n");
/// assert_eq!(err, b"agent.toml:2:1: error: one\n");
/// ```
pub fn buffered<O: Write, E: Write, R>(
    out: O,
    err: E,
    err_by_line: bool,
    run: impl FnOnce(&mut dyn Write, &mut dyn Write) -> R,
) -> (R, io::Result<()>) {
    let pair = RefCell::new(Pair {
        out: BufWriter::with_capacity(OUTPUT_BUFFER, out),
        err: BufWriter::with_capacity(OUTPUT_BUFFER, err),
        err_by_line,
        last: Stream::Out,
        out_failed: None,
    });
    let result = run(
        &mut Handle {
            pair: &pair,
            stream: Stream::Out,
        },
        &mut Handle {
            pair: &pair,
            stream: Stream::Err,
        },
    );
    let mut pair = pair.into_inner();
    // Standard error's own failures are ignored, as every diagnostic write does.
    let _ = pair.err.flush();
    let flushed = match pair.out_failed.take() {
        Some(e) => Err(e),
        None => pair.out.flush(),
    };
    (result, flushed)
}

/// Bytes each stream holds before it writes: a few hundred diagnostic lines.
const OUTPUT_BUFFER: usize = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Out,
    Err,
}

/// The two buffered streams of [`buffered`].
struct Pair<O: Write, E: Write> {
    out: BufWriter<O>,
    err: BufWriter<E>,
    err_by_line: bool,
    /// The stream written last.
    last: Stream,
    /// A failed flush of `out`, met when `err` was written to: the next write to `out`
    /// returns it, so the command stops as it would have.
    out_failed: Option<io::Error>,
}

impl<O: Write, E: Write> Pair<O, E> {
    /// Flushes the other stream before `stream` is written to, so the two keep their order.
    fn switch_to(&mut self, stream: Stream) {
        if self.last == stream {
            return;
        }
        match stream {
            Stream::Err => {
                if let Err(e) = self.out.flush() {
                    self.out_failed = Some(e);
                }
            }
            Stream::Out => {
                let _ = self.err.flush();
            }
        }
        self.last = stream;
    }
}

/// One of the two streams of a [`Pair`], as a writer.
struct Handle<'p, O: Write, E: Write> {
    pair: &'p RefCell<Pair<O, E>>,
    stream: Stream,
}

impl<O: Write, E: Write> Write for Handle<'_, O, E> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut pair = self.pair.borrow_mut();
        pair.switch_to(self.stream);
        match self.stream {
            Stream::Out => match pair.out_failed.take() {
                Some(e) => Err(e),
                None => pair.out.write(buf),
            },
            Stream::Err => {
                let written = pair.err.write(buf)?;
                if pair.err_by_line && buf[..written].contains(&b'\n') {
                    pair.err.flush()?;
                }
                Ok(written)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut pair = self.pair.borrow_mut();
        match self.stream {
            Stream::Out => pair.out.flush(),
            Stream::Err => pair.err.flush(),
        }
    }
}
