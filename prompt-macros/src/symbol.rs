//! The words the macro recognizes, compared against identifiers and paths instead of spelled
//! out as string literals at each use.

use std::fmt::{self, Display};

use syn::{Ident, Path};

/// A word the macro recognizes.
#[derive(Clone, Copy)]
pub(crate) struct Symbol(&'static str);

// The attribute's arguments.
/// `placement = "prefix" | "tail"`.
pub(crate) const PLACEMENT: Symbol = Symbol("placement");
/// `id = "..."`.
pub(crate) const ID: Symbol = Symbol("id");
/// `what = "..."`.
pub(crate) const WHAT: Symbol = Symbol("what");
/// `persist = "history" | "ephemeral"`.
pub(crate) const PERSIST: Symbol = Symbol("persist");
/// `cleared = "..."`.
pub(crate) const CLEARED: Symbol = Symbol("cleared");

// Their values.
/// `placement = "prefix"`.
pub(crate) const PREFIX: Symbol = Symbol("prefix");
/// `placement = "tail"`.
pub(crate) const TAIL: Symbol = Symbol("tail");
/// `persist = "history"`.
pub(crate) const HISTORY: Symbol = Symbol("history");
/// `persist = "ephemeral"`.
pub(crate) const EPHEMERAL: Symbol = Symbol("ephemeral");

// Names in the annotated item.
/// The attribute a `///` comment becomes.
pub(crate) const DOC: Symbol = Symbol("doc");
/// The text type of a `const`/`static` component: `&str`.
pub(crate) const STR: Symbol = Symbol("str");
/// The only lifetime a `const`/`static` component's `&str` may name.
pub(crate) const STATIC: Symbol = Symbol("static");
/// A renderer's return type, alone or in [`OPTION`].
pub(crate) const STRING: Symbol = Symbol("String");
/// `Option<String>`: a renderer with nothing to say.
pub(crate) const OPTION: Symbol = Symbol("Option");
/// The context of a renderer called once per session.
pub(crate) const SESSION_CONTEXT: Symbol = Symbol("SessionContext");
/// The context of a renderer called each turn.
pub(crate) const TURN_CONTEXT: Symbol = Symbol("TurnContext");

impl PartialEq<Symbol> for Ident {
    fn eq(&self, word: &Symbol) -> bool {
        self == word.0
    }
}

impl PartialEq<Symbol> for &Ident {
    fn eq(&self, word: &Symbol) -> bool {
        *self == word.0
    }
}

impl PartialEq<Symbol> for Path {
    fn eq(&self, word: &Symbol) -> bool {
        self.is_ident(word.0)
    }
}

impl PartialEq<Symbol> for &Path {
    fn eq(&self, word: &Symbol) -> bool {
        self.is_ident(word.0)
    }
}

impl PartialEq<Symbol> for str {
    fn eq(&self, word: &Symbol) -> bool {
        self == word.0
    }
}

impl Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}
