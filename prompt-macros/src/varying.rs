//! A prefix writer's body must not read a source of variation: the clock, a random number
//! generator, the process environment or the file system. Its text is rendered when the
//! session starts and again when it is restored, and must be the same bytes both times; such
//! a value is read once at session start by the agent and frozen into the `SessionContext`.
//!
//! The check is syntactic: it matches the paths written in the body (as a run of segments
//! anywhere in the path, so `SystemTime::now`, `std::time::SystemTime::now` and
//! `::std::time::SystemTime::now::<>` all match), in closures, nested blocks and macro
//! arguments, but not in nested `fn` items, `impl`s, traits or modules, which are other fns.
//! A path renamed by a `use` (`use std::time::SystemTime as T; T::now()`), a function
//! imported alone (`use std::env::var; var("X")`), a method on a value (`UNIX_EPOCH.elapsed()`)
//! and a call into another fn that reads the clock are not seen.

use proc_macro2::{Spacing, TokenStream, TokenTree};
use quote::ToTokens;
use syn::visit::{self, Visit};
use syn::{Block, ExprPath, Ident, Item, Macro, Type};

use crate::ctxt::Ctxt;

/// At most this many reads are reported one by one; the rest are counted in one more error.
const MAX_REPORTED: usize = 16;

/// At most this many characters of a path are quoted in a message.
const MAX_PATH_CHARS: usize = 120;

/// What a matched path reads.
#[derive(Clone, Copy)]
enum Family {
    Clock,
    Random,
    Environment,
    Files,
}

impl Family {
    fn reads(self) -> &'static str {
        match self {
            Family::Clock => "reads the clock",
            Family::Random => "draws random numbers",
            Family::Environment => "reads the process environment",
            Family::Files => "reads the file system",
        }
    }
}

/// A known source: a run of path segments (`*` is any one segment).
struct Source {
    segments: &'static [&'static str],
    family: Family,
}

const fn source(segments: &'static [&'static str], family: Family) -> Source {
    Source { segments, family }
}

/// The known sources. Each run names its crate or type, so that a user's own `now` or `var`
/// is not taken for one.
const SOURCES: &[Source] = &[
    // std, chrono, time, jiff.
    source(&["SystemTime", "now"], Family::Clock),
    source(&["Instant", "now"], Family::Clock),
    source(&["Utc", "now"], Family::Clock),
    source(&["Local", "now"], Family::Clock),
    source(&["Utc", "today"], Family::Clock),
    source(&["Local", "today"], Family::Clock),
    source(&["OffsetDateTime", "now_utc"], Family::Clock),
    source(&["OffsetDateTime", "now_local"], Family::Clock),
    source(&["Timestamp", "now"], Family::Clock),
    source(&["Zoned", "now"], Family::Clock),
    source(&["Uuid", "now_v1"], Family::Clock),
    source(&["Uuid", "now_v6"], Family::Clock),
    source(&["Uuid", "now_v7"], Family::Clock),
    // rand, fastrand, getrandom, uuid.
    source(&["rand", "random"], Family::Random),
    source(&["rand", "random_range"], Family::Random),
    source(&["rand", "random_bool"], Family::Random),
    source(&["rand", "random_ratio"], Family::Random),
    source(&["rand", "random_iter"], Family::Random),
    source(&["rand", "rng"], Family::Random),
    source(&["thread_rng"], Family::Random),
    source(&["OsRng"], Family::Random),
    source(&["from_entropy"], Family::Random),
    source(&["from_os_rng"], Family::Random),
    source(&["fastrand", "*"], Family::Random),
    source(&["getrandom", "*"], Family::Random),
    source(&["Uuid", "new_v4"], Family::Random),
    // std::env.
    source(&["env", "var"], Family::Environment),
    source(&["env", "var_os"], Family::Environment),
    source(&["env", "vars"], Family::Environment),
    source(&["env", "vars_os"], Family::Environment),
    source(&["env", "args"], Family::Environment),
    source(&["env", "args_os"], Family::Environment),
    source(&["env", "current_dir"], Family::Environment),
    source(&["env", "current_exe"], Family::Environment),
    source(&["env", "home_dir"], Family::Environment),
    source(&["env", "temp_dir"], Family::Environment),
    // std::fs, tokio::fs.
    source(&["fs", "read_to_string"], Family::Files),
    source(&["fs", "read"], Family::Files),
    source(&["fs", "read_dir"], Family::Files),
    source(&["fs", "read_link"], Family::Files),
    source(&["fs", "metadata"], Family::Files),
    source(&["fs", "symlink_metadata"], Family::Files),
    source(&["fs", "canonicalize"], Family::Files),
    source(&["fs", "exists"], Family::Files),
    source(&["File", "open"], Family::Files),
    source(&["File", "open_buffered"], Family::Files),
    source(&["OpenOptions", "new"], Family::Files),
];

/// Paths under a matched run that are not a source: a generator with a fixed seed.
const DETERMINISTIC: &[&str] = &["with_seed"];

/// The family of the source `segments` names, if any.
fn family(segments: &[String]) -> Option<Family> {
    if segments
        .iter()
        .any(|segment| DETERMINISTIC.contains(&segment.as_str()))
    {
        return None;
    }
    SOURCES.iter().find_map(|source| {
        let run = source.segments;
        let matches = segments.windows(run.len()).any(|window| {
            window
                .iter()
                .zip(run)
                .all(|(segment, want)| *want == "*" || segment == want)
        });
        matches.then_some(source.family)
    })
}

/// Reports every read of a source of variation in `body`, the body of the prefix writer
/// `ident`.
pub(crate) fn check_prefix_body(cx: &Ctxt, ident: &Ident, body: &Block) {
    let mut finder = Finder::default();
    finder.visit_block(body);
    for read in finder.found {
        cx.error_spanned_by(read.tokens, message(&read.path, read.family));
    }
    let more = finder.more;
    if more > 0 {
        cx.error_at(
            ident.span(),
            format!(
                "and {more} more reads of the clock, random numbers, the environment or files in \
                 the prefix writer `{ident}`; freeze those values into the `SessionContext` too"
            ),
        );
    }
}

fn message(path: &str, family: Family) -> String {
    let reads = family.reads();
    format!(
        "a prefix writer cannot use `{path}`, which {reads}: the prefix must be the same bytes \
         every time the session starts or is restored (a restored session whose prefix changed \
         is refused); read the value once at session start, freeze it into the \
         `SessionContext`, and get it here with `session.get::<T>()`; or declare \
         `placement = \"tail\"`"
    )
}

/// A read found in the body.
struct Read {
    /// The path's tokens, for the span.
    tokens: TokenStream,
    /// The path as written, bounded.
    path: String,
    family: Family,
}

#[derive(Default)]
struct Finder {
    /// The first [`MAX_REPORTED`] reads.
    found: Vec<Read>,
    /// How many more there are.
    more: usize,
}

impl Finder {
    fn check(&mut self, segments: &[String], tokens: TokenStream) {
        let Some(family) = family(segments) else {
            return;
        };
        if self.found.len() >= MAX_REPORTED {
            self.more = self.more.saturating_add(1);
        } else {
            self.found.push(Read {
                tokens,
                path: bounded(&segments.join("::")),
                family,
            });
        }
    }

    /// The paths in a macro's arguments, which syn does not parse: each run of identifiers
    /// joined by `::` (with or without a leading `::`), in every group.
    fn scan(&mut self, tokens: TokenStream) {
        let mut path = TokenPath::default();
        for token in tokens {
            match (&token, path.state) {
                (TokenTree::Ident(ident), State::AfterSeparator) => path.push_ident(ident, &token),
                (TokenTree::Ident(ident), _) => {
                    self.end(&mut path);
                    path.push_ident(ident, &token);
                }
                (TokenTree::Punct(punct), State::Start | State::AfterIdent)
                    if punct.as_char() == ':' && punct.spacing() == Spacing::Joint =>
                {
                    path.tokens.push(token.clone());
                    path.state = State::AfterColon;
                }
                (TokenTree::Punct(punct), State::AfterColon) if punct.as_char() == ':' => {
                    path.tokens.push(token.clone());
                    path.state = State::AfterSeparator;
                }
                (TokenTree::Group(group), _) => {
                    self.end(&mut path);
                    self.scan(group.stream());
                }
                _ => self.end(&mut path),
            }
        }
        self.end(&mut path);
    }

    /// Checks the path scanned so far and starts a new one.
    fn end(&mut self, path: &mut TokenPath) {
        if !path.segments.is_empty() {
            let tokens = path.tokens[..path.through_last_ident]
                .iter()
                .cloned()
                .collect();
            self.check(&path.segments, tokens);
        }
        *path = TokenPath::default();
    }
}

/// A path being scanned in a macro's tokens.
#[derive(Default)]
struct TokenPath {
    segments: Vec<String>,
    tokens: Vec<TokenTree>,
    /// How many of `tokens` there are up to the last identifier (a path ends on one).
    through_last_ident: usize,
    state: State,
}

impl TokenPath {
    fn push_ident(&mut self, ident: &proc_macro2::Ident, token: &TokenTree) {
        self.segments.push(ident.to_string());
        self.tokens.push(token.clone());
        self.through_last_ident = self.tokens.len();
        self.state = State::AfterIdent;
    }
}

/// Where the scan of a path is.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum State {
    /// No path, or a leading `::` may begin one.
    #[default]
    Start,
    /// After an identifier.
    AfterIdent,
    /// After the first `:` of a `::`.
    AfterColon,
    /// After a `::`: an identifier continues the path.
    AfterSeparator,
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_expr_path(&mut self, expr: &'ast ExprPath) {
        let mut segments = Vec::new();
        // `<SystemTime>::now`: the type is the path's first segments.
        if let Some(qself) = &expr.qself
            && qself.position == 0
            && let Type::Path(ty) = &*qself.ty
        {
            segments.extend(ty.path.segments.iter().map(|s| s.ident.to_string()));
        }
        segments.extend(expr.path.segments.iter().map(|s| s.ident.to_string()));
        self.check(&segments, expr.to_token_stream());
        visit::visit_expr_path(self, expr);
    }

    fn visit_macro(&mut self, mac: &'ast Macro) {
        // The macro's own name (`env!`, `option_env!`, `include_str!`) reads nothing at run
        // time; its arguments may.
        self.scan(mac.tokens.clone());
    }

    fn visit_item(&mut self, item: &'ast Item) {
        match item {
            // Other fns: their bodies are not this writer's.
            Item::Fn(_) | Item::Impl(_) | Item::Trait(_) | Item::Mod(_) => {}
            other => visit::visit_item(self, other),
        }
    }
}

/// `text`, cut to [`MAX_PATH_CHARS`] characters.
fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_PATH_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;
    use syn::ItemFn;

    use super::*;

    /// The paths reported in `item`'s body, as quoted in the messages.
    fn reported(item: TokenStream) -> Vec<String> {
        let item: ItemFn = syn::parse2(item).unwrap();
        let cx = Ctxt::new();
        check_prefix_body(&cx, &item.sig.ident, &item.block);
        cx.messages()
            .into_iter()
            .map(
                |message| match message.strip_prefix("a prefix writer cannot use `") {
                    Some(rest) => rest.split('`').next().unwrap().to_owned(),
                    None => message,
                },
            )
            .collect()
    }

    #[test]
    fn every_spelling_of_a_clock_path_is_reported() {
        let found = reported(quote! {
            fn f(session: &SessionContext) -> String {
                let a = SystemTime::now();
                let b = std::time::SystemTime::now();
                let c = ::std::time::Instant::now();
                let d = <SystemTime>::now();
                let e = Some(()).map(|_| chrono::Utc::now());
                let f = None.unwrap_or_else(chrono::offset::Local::now);
                let g = time::OffsetDateTime::now_utc();
                String::new()
            }
        });
        assert_eq!(
            found,
            [
                "SystemTime::now",
                "std::time::SystemTime::now",
                "std::time::Instant::now",
                "SystemTime::now",
                "chrono::Utc::now",
                "chrono::offset::Local::now",
                "time::OffsetDateTime::now_utc",
            ]
        );
    }

    #[test]
    fn closures_blocks_and_macro_arguments_are_searched_but_not_nested_fns() {
        let found = reported(quote! {
            fn f(session: &SessionContext) -> String {
                fn helper() -> u64 { rand::random() }
                impl Clock { fn now() -> Instant { Instant::now() } }
                mod inner { pub fn f() { let _ = std::env::var("X"); } }
                let seed = { let r = || rand::random::<u64>(); r() };
                let home = format!("{:?} {}", ::std::env::var("HOME"), vec![fastrand::u32(..)].len());
                let text = std::fs::read_to_string("notes.md");
                async { File::open("x") };
                // Compile-time: not reads.
                let built = env!("CARGO_PKG_NAME");
                let maybe = option_env!("CI");
                let bytes = include_str!("x.txt");
                String::new()
            }
        });
        assert_eq!(
            found,
            [
                "rand::random",
                "std::env::var",
                "fastrand::u32",
                "std::fs::read_to_string",
                "File::open",
            ]
        );
    }

    #[test]
    fn a_users_own_names_and_seeded_generators_are_not_reported() {
        let found = reported(quote! {
            fn f(session: &SessionContext) -> String {
                let a = clock::now();
                let b = var("X");
                let c = Instant::from(session);
                let d = fastrand::Rng::with_seed(7).u32(..);
                let e = StdRng::seed_from_u64(7);
                let f = std::env::consts::OS;
                let g = session.get::<SystemTime>();
                let h: Option<Instant> = None;
                String::new()
            }
        });
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_renamed_path_is_not_seen() {
        // The documented limit: the check reads paths, not name resolution.
        let found = reported(quote! {
            fn f(_session: &SessionContext) -> String {
                use std::time::SystemTime as T;
                use std::env::var;
                let _ = (T::now(), var("X"));
                String::new()
            }
        });
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn the_reads_reported_one_by_one_are_capped() {
        let calls = (0..MAX_REPORTED + 4).map(|_| quote!(let _ = SystemTime::now();));
        let found = reported(quote! {
            fn busy(_session: &SessionContext) -> String { #(#calls)* String::new() }
        });
        assert_eq!(found.len(), MAX_REPORTED + 1, "{found:?}");
        assert!(
            found[MAX_REPORTED].starts_with("and 4 more reads"),
            "{}",
            found[MAX_REPORTED]
        );
        assert!(found[MAX_REPORTED].contains("`busy`"));
    }

    #[test]
    fn a_long_path_is_quoted_bounded() {
        let path = "a".repeat(300);
        let text = bounded(&format!("{path}::SystemTime::now"));
        assert_eq!(text.chars().count(), MAX_PATH_CHARS + 1);
        assert!(text.ends_with('…'));
    }
}
