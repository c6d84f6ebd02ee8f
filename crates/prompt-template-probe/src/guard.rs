//! Compile-time defences: source checks that keep minijinja's lexer and parser within bounds,
//! and a rewrite that routes values through the runtime guards of `limits.rs`.
//!
//! The rewrite works on minijinja's own parse tree (its `unstable_machinery` parser, so the
//! tree is exactly what the engine compiles) and only inserts text inside expressions: each
//! guarded sub-expression `e` becomes `((e)|__cacheline_guard)`. Nothing is inserted across
//! lines, so line numbers in errors stay those of the original template. Guarded are the
//! values that get converted to text, compared, hashed, added or handed to code: what `{{ }}`
//! prints, both sides of `~`, `+`, comparisons and `in`, the input and arguments of every
//! filter and test, the arguments and receiver of every call, subscripts, and the items of
//! list, tuple and map literals (so no value nests deeper than the guard allows). Besides,
//! slice steps go through `__cacheline_slice_step`, the value of `{% set ns.attr = … %}`
//! through `__cacheline_acyclic(ns)`, and `loop.cycle()` without items gets an argument that
//! fails as Jinja does. The guards return their input unchanged (a lazy sequence as the list
//! of its items), so a template that stays within the limits renders as before; the test
//! `the_guards_change_no_render_of_the_fixture_templates` checks it on the 32 real ones.
//!
//! The price: the guards nest parentheses, so an expression nesting calls or filters more
//! than about 70 deep reaches minijinja's parser limit (150) where the original would not.

use minijinja::machinery::{self, Token, ast};
use minijinja::syntax::SyntaxConfig;

use super::render::{TemplateError, describe};

/// The filter that measures a value (`limits::guard_value`).
pub(crate) const GUARD: &str = "__cacheline_guard";
/// The filter that checks a slice step (`limits::guard_slice_step`).
pub(crate) const STEP_GUARD: &str = "__cacheline_slice_step";
/// The filter that refuses an empty list of `cycle` items (`limits::guard_cycle_items`).
pub(crate) const CYCLE_GUARD: &str = "__cacheline_cycle_items";
/// The function that fails as Jinja's `loop.cycle()` without items does
/// (`limits::no_cycle_items`).
pub(crate) const NO_CYCLE_ITEMS: &str = "__cacheline_no_cycle_items";
/// The filter that keeps a namespace from containing itself (`limits::guard_acyclic`).
pub(crate) const ACYCLIC_GUARD: &str = "__cacheline_acyclic";

/// The longest line, in characters, minijinja's lexer handles: it counts columns in a `u16`
/// that saturates at 65 535, and a syntax error at that column adds one to it (an overflow
/// panic with overflow checks on).
pub(crate) const MAX_LINE_CHARS: usize = u16::MAX as usize - 1;

/// The most operators one `{{ }}` or `{% %}` tag may chain. minijinja parses operator chains
/// in loops (left-nested trees of any depth) and unary operators by recursion without its
/// recursion guard; compiling, walking and dropping such a tree recurses once per level, so a
/// long enough chain overflows the stack, which aborts the process. Real templates chain a
/// few dozen at most.
pub(crate) const MAX_CHAIN: usize = 256;

/// Checks `source` and returns the text to compile: `source` with the guards inserted.
pub(crate) fn prepare(
    source: &str,
    name: &str,
    syntax: &SyntaxConfig,
) -> Result<String, TemplateError> {
    check_lines(source)?;
    check_chains(source, syntax)?;
    let tree = machinery::parse(source, name, syntax.clone()).map_err(|e| TemplateError {
        message: describe(&e),
    })?;
    let mut rewriter = Rewriter {
        source,
        insertions: Vec::new(),
    };
    rewriter.stmt(&tree);
    drop(tree);
    Ok(rewriter.apply())
}

fn check_lines(source: &str) -> Result<(), TemplateError> {
    for (index, line) in source.split('\n').enumerate() {
        // Only lines that could be too long are counted.
        if line.len() > MAX_LINE_CHARS {
            let chars = line.chars().count();
            if chars > MAX_LINE_CHARS {
                return Err(TemplateError {
                    message: format!(
                        "line {} is {chars} characters long; minijinja counts columns in 16 bits, so at most {MAX_LINE_CHARS} are supported",
                        index + 1
                    ),
                });
            }
        }
    }
    Ok(())
}

fn check_chains(source: &str, syntax: &SyntaxConfig) -> Result<(), TemplateError> {
    let mut chain = 0usize;
    for token in machinery::tokenize(source, false, syntax.clone()) {
        // A lexing error is reported by the parser, with the same message.
        let Ok((token, span)) = token else {
            return Ok(());
        };
        let links = match token {
            Token::VariableStart | Token::BlockStart => {
                chain = 0;
                0
            }
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::FloorDiv
            | Token::Pow
            | Token::Mod
            | Token::Dot
            | Token::Tilde
            | Token::Pipe
            | Token::Eq
            | Token::Ne
            | Token::Gt
            | Token::Gte
            | Token::Lt
            | Token::Lte
            | Token::BracketOpen
            | Token::ParenOpen => 1,
            Token::Ident("and" | "or" | "not" | "in" | "is" | "if") => 1,
            _ => 0,
        };
        chain += links;
        if chain > MAX_CHAIN {
            return Err(TemplateError {
                message: format!(
                    "an expression chains more than {MAX_CHAIN} operators (line {})",
                    span.start_line
                ),
            });
        }
    }
    Ok(())
}

/// How often the partial sums of an `a + b + c + …` chain are guarded.
const CHAIN_GUARD_EVERY: usize = 8;

/// How many `op` operators `expr` chains on its left: `a + b + c` has two for `+`.
fn left_links(expr: &ast::Expr<'_>, op: ast::BinOpKind) -> usize {
    let mut links = 0;
    let mut current = expr;
    while let ast::Expr::BinOp(b) = current {
        if std::mem::discriminant(&b.op) != std::mem::discriminant(&op) {
            break;
        }
        links += 1;
        current = &b.left;
    }
    links
}

/// A guard to insert around the source range `start..end`, or (with no filter) the text of
/// a call to [`NO_CYCLE_ITEMS`] at `start`.
struct Insertion {
    start: usize,
    end: usize,
    /// The filter, with its arguments if any.
    filter: Option<String>,
}

struct Rewriter<'s> {
    source: &'s str,
    insertions: Vec<Insertion>,
}

type Extent = (usize, usize);

fn union(a: Extent, b: Extent) -> Extent {
    (a.0.min(b.0), a.1.max(b.1))
}

fn span_extent(span: machinery::Span) -> Extent {
    (span.start_offset as usize, span.end_offset as usize)
}

impl Rewriter<'_> {
    fn stmts(&mut self, stmts: &[ast::Stmt<'_>]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, stmt: &ast::Stmt<'_>) {
        match stmt {
            ast::Stmt::Template(t) => self.stmts(&t.children),
            ast::Stmt::EmitExpr(e) => {
                self.guarded(&e.expr);
            }
            ast::Stmt::EmitRaw(_) | ast::Stmt::Continue(_) | ast::Stmt::Break(_) => {}
            ast::Stmt::ForLoop(f) => {
                self.expr(&f.iter);
                if let Some(filter) = &f.filter_expr {
                    self.expr(filter);
                }
                self.stmts(&f.body);
                self.stmts(&f.else_body);
            }
            ast::Stmt::IfCond(i) => {
                self.expr(&i.expr);
                self.stmts(&i.true_body);
                self.stmts(&i.false_body);
            }
            ast::Stmt::WithBlock(w) => {
                for (_, value) in &w.assignments {
                    self.expr(value);
                }
                self.stmts(&w.body);
            }
            ast::Stmt::Set(s) => {
                let extent = self.expr(&s.expr);
                let mut objects = Vec::new();
                self.set_targets(&s.target, &mut objects);
                if !objects.is_empty() {
                    self.wrap(extent, &format!("{ACYCLIC_GUARD}({})", objects.join(", ")));
                }
            }
            ast::Stmt::SetBlock(s) => {
                if let Some(filter) = &s.filter {
                    self.expr(filter);
                }
                self.stmts(&s.body);
            }
            ast::Stmt::AutoEscape(a) => {
                self.expr(&a.enabled);
                self.stmts(&a.body);
            }
            ast::Stmt::FilterBlock(f) => {
                self.expr(&f.filter);
                self.stmts(&f.body);
            }
            ast::Stmt::Block(b) => self.stmts(&b.body),
            ast::Stmt::Import(i) => {
                self.expr(&i.expr);
            }
            ast::Stmt::FromImport(i) => {
                self.expr(&i.expr);
            }
            ast::Stmt::Extends(e) => {
                self.expr(&e.name);
            }
            ast::Stmt::Include(i) => {
                self.expr(&i.name);
            }
            ast::Stmt::Macro(m) => self.macro_decl(m),
            ast::Stmt::CallBlock(c) => {
                self.call(&c.call);
                self.macro_decl(&c.macro_decl);
            }
            ast::Stmt::Do(d) => {
                self.call(&d.call);
            }
        }
    }

    fn macro_decl(&mut self, m: &ast::Macro<'_>) {
        for default in &m.defaults {
            self.guarded(default);
        }
        self.stmts(&m.body);
    }

    /// Walks `expr`, guards it, and returns its extent.
    fn guarded(&mut self, expr: &ast::Expr<'_>) -> Extent {
        let extent = self.expr(expr);
        if !matches!(expr, ast::Expr::Const(_)) {
            self.wrap(extent, GUARD);
        }
        extent
    }

    fn wrap(&mut self, extent: Extent, filter: &str) {
        self.insertions.push(Insertion {
            start: extent.0,
            end: extent.1,
            filter: Some(filter.to_owned()),
        });
    }

    /// The objects whose attributes an assignment target sets: `ns` in `ns.a`, `a.b` in
    /// `a.b.c`, each item's in `ns.a, ns.b`.
    fn set_targets(&self, target: &ast::Expr<'_>, objects: &mut Vec<String>) {
        match target {
            ast::Expr::GetAttr(g) => {
                let mut probe = Rewriter {
                    source: self.source,
                    insertions: Vec::new(),
                };
                let (start, end) = probe.expr(&g.expr);
                if let Some(text) = self.source.get(start..end) {
                    objects.push(text.to_owned());
                }
            }
            ast::Expr::List(l) => {
                for item in &l.items {
                    self.set_targets(item, objects);
                }
            }
            _ => {}
        }
    }

    fn args(&mut self, args: &[ast::CallArg<'_>]) -> Option<Extent> {
        let mut extent: Option<Extent> = None;
        for arg in args {
            let e = match arg {
                ast::CallArg::Pos(e)
                | ast::CallArg::Kwarg(_, e)
                | ast::CallArg::PosSplat(e)
                | ast::CallArg::KwargSplat(e) => self.guarded(e),
            };
            extent = Some(extent.map_or(e, |x| union(x, e)));
        }
        extent
    }

    /// Walks a call; its extent runs from the callee's first token to the call's last.
    fn call(&mut self, call: &ast::Spanned<ast::Call<'_>>) -> Extent {
        let callee = match &call.expr {
            // A method call: the receiver is guarded, except `self.block()`.
            ast::Expr::GetAttr(attr) if !matches!(&attr.expr, ast::Expr::Var(v) if v.id == "self") =>
            {
                let receiver = self.guarded(&attr.expr);
                (receiver.0, receiver.1.max(span_extent(attr.span()).1))
            }
            other => self.expr(other),
        };
        let mut end = callee.1.max(span_extent(call.span()).1);
        if let Some(args) = self.args(&call.args) {
            end = end.max(args.1);
        }
        if matches!(&call.expr, ast::Expr::GetAttr(attr) if attr.name == "cycle") {
            self.cycle_items(&call.args, end);
        }
        (callee.0, end)
    }

    /// minijinja's `loop.cycle` indexes its arguments modulo their count, which panics
    /// (division by zero) when there are none. Without arguments the call gets one that
    /// fails as Jinja does; arguments that are all `*splats` are checked to be non-empty.
    fn cycle_items(&mut self, args: &[ast::CallArg<'_>], end: usize) {
        if args.is_empty() {
            if end > 0 && self.source.as_bytes().get(end - 1) == Some(&b')') {
                self.insertions.push(Insertion {
                    start: end - 1,
                    end: end - 1,
                    filter: None,
                });
            }
            return;
        }
        if args.iter().all(|a| matches!(a, ast::CallArg::PosSplat(_))) {
            for arg in args {
                if let ast::CallArg::PosSplat(e) = arg {
                    let extent = self.extent_of(e);
                    self.wrap(extent, CYCLE_GUARD);
                }
            }
        }
    }

    /// The extent of an expression already walked (its guards are not recorded again).
    fn extent_of(&mut self, expr: &ast::Expr<'_>) -> Extent {
        let kept = self.insertions.len();
        let extent = self.expr(expr);
        self.insertions.truncate(kept);
        extent
    }

    /// Walks `expr` and returns its extent: the source range from its first to its last token.
    ///
    /// A node's span always ends at its last token, but it does not always start at its
    /// first: a filter's starts at its name, a comparison's or an inline `if`'s at the token
    /// before it. So the start is taken from the node only when its first token is its own
    /// (a name, a literal, an opening bracket, a prefix operator), else from its operands.
    fn expr(&mut self, expr: &ast::Expr<'_>) -> Extent {
        let own = span_extent(expr.span());
        let mut inner: Option<Extent> = None;
        let add = |inner: &mut Option<Extent>, e: Extent| {
            *inner = Some(inner.map_or(e, |x| union(x, e)));
        };
        match expr {
            ast::Expr::Var(_) | ast::Expr::Const(_) => {}
            ast::Expr::Slice(s) => {
                add(&mut inner, self.expr(&s.expr));
                if let Some(start) = &s.start {
                    add(&mut inner, self.expr(start));
                }
                if let Some(stop) = &s.stop {
                    add(&mut inner, self.expr(stop));
                }
                if let Some(step) = &s.step {
                    let e = self.expr(step);
                    let harmless = match step {
                        ast::Expr::Const(c) => {
                            i64::try_from(c.value.clone()).ok() != Some(i64::MIN)
                        }
                        // `-n` with a literal `n` below 2**63.
                        ast::Expr::UnaryOp(u) => {
                            matches!(u.op, ast::UnaryOpKind::Neg)
                                && matches!(&u.expr, ast::Expr::Const(c)
                                    if c.value.is_integer()
                                        && c.value.as_i64().is_some_and(|n| n >= 0))
                        }
                        _ => false,
                    };
                    if !harmless {
                        self.wrap(e, STEP_GUARD);
                    }
                    add(&mut inner, e);
                }
            }
            ast::Expr::UnaryOp(u) => add(&mut inner, self.expr(&u.expr)),
            ast::Expr::BinOp(b) => {
                use ast::BinOpKind as K;
                // `+` too: adding lists is lazy and the result is flattened (or copied)
                // once chained more than 32 deep, which costs its full size unpaid.
                let converts = matches!(
                    b.op,
                    K::Concat | K::In | K::Eq | K::Ne | K::Lt | K::Lte | K::Gt | K::Gte | K::Add
                );
                if converts {
                    // In a chain `a ~ b ~ c` the inner `a ~ b` is a string and needs no
                    // guard; in `a + b + c` the inner sums are guarded every eighth link
                    // only. Guarding every link would nest the parentheses as deep as the
                    // chain is long, past minijinja's parser limit of 150.
                    let links = left_links(&b.left, b.op);
                    let skip = links > 0
                        && (matches!(b.op, K::Concat) || !links.is_multiple_of(CHAIN_GUARD_EVERY));
                    if skip {
                        add(&mut inner, self.expr(&b.left));
                    } else {
                        add(&mut inner, self.guarded(&b.left));
                    }
                    add(&mut inner, self.guarded(&b.right));
                } else {
                    add(&mut inner, self.expr(&b.left));
                    add(&mut inner, self.expr(&b.right));
                }
            }
            ast::Expr::Compare(c) => {
                add(&mut inner, self.guarded(&c.expr));
                for op in &c.ops {
                    add(&mut inner, self.guarded(&op.expr));
                }
            }
            ast::Expr::IfExpr(i) => {
                add(&mut inner, self.expr(&i.test_expr));
                add(&mut inner, self.expr(&i.true_expr));
                if let Some(f) = &i.false_expr {
                    add(&mut inner, self.expr(f));
                }
            }
            ast::Expr::Filter(f) => {
                if let Some(input) = &f.expr {
                    add(&mut inner, self.guarded(input));
                }
                if let Some(args) = self.args(&f.args) {
                    add(&mut inner, args);
                }
            }
            ast::Expr::Test(t) => {
                add(&mut inner, self.guarded(&t.expr));
                if let Some(args) = self.args(&t.args) {
                    add(&mut inner, args);
                }
            }
            ast::Expr::GetAttr(g) => add(&mut inner, self.expr(&g.expr)),
            ast::Expr::GetItem(g) => {
                add(&mut inner, self.expr(&g.expr));
                add(&mut inner, self.guarded(&g.subscript_expr));
            }
            ast::Expr::Call(c) => add(&mut inner, self.call(c)),
            ast::Expr::List(l) => {
                for item in &l.items {
                    add(&mut inner, self.guarded(item));
                }
            }
            ast::Expr::Tuple(t) => {
                for item in &t.items {
                    add(&mut inner, self.guarded(item));
                }
            }
            ast::Expr::Map(m) => {
                for item in m.keys.iter().chain(&m.values) {
                    add(&mut inner, self.guarded(item));
                }
            }
        }
        let text = self.source.get(own.0..).unwrap_or_default();
        let leading = match expr {
            ast::Expr::Var(_) | ast::Expr::Const(_) | ast::Expr::List(_) | ast::Expr::Map(_) => {
                true
            }
            ast::Expr::Tuple(_) => text.starts_with('('),
            ast::Expr::Filter(f) => f.expr.is_none(),
            ast::Expr::UnaryOp(_) => {
                ["not", "-", "+"].iter().any(|op| text.starts_with(op))
                    && inner.is_none_or(|i| own.0 < i.0)
            }
            _ => false,
        };
        match inner {
            None => own,
            Some(inner) if leading => (own.0.min(inner.0), own.1.max(inner.1)),
            Some(inner) => (inner.0, own.1.max(inner.1)),
        }
    }

    /// `source` with every insertion: `((` before its range, `)|filter)` after it.
    ///
    /// Ranges nest (they are sub-expressions of one tree), so at one offset the closings come
    /// first, innermost first, then the openings, outermost first. A range may leave out the
    /// opening parenthesis of its first operand (`(a)|f` spans `a)|f`); the inserted pair
    /// then swaps partners with the original one, which groups the same tokens.
    fn apply(mut self) -> String {
        let source = self.source;
        // (offset, order, text)
        let mut events: Vec<(usize, (u8, usize, usize), String)> = Vec::new();
        self.insertions
            .retain(|i| i.start <= i.end && i.end <= source.len());
        for (index, i) in self.insertions.iter().enumerate() {
            let Some(filter) = &i.filter else {
                events.push((i.start, (2, 0, index), format!("{NO_CYCLE_ITEMS}()")));
                continue;
            };
            events.push((i.start, (1, usize::MAX - i.end, index), "((".to_owned()));
            events.push((
                i.end,
                (0, usize::MAX - i.start, usize::MAX - index),
                format!(")|{filter})"),
            ));
        }
        events.sort_by_key(|e| (e.0, e.1));
        let extra: usize = events.iter().map(|e| e.2.len()).sum();
        let mut out = String::with_capacity(source.len() + extra);
        let mut at = 0;
        for (offset, _, text) in events {
            if let Some(piece) = source.get(at..offset) {
                out.push_str(piece);
                at = offset;
            }
            out.push_str(&text);
        }
        out.push_str(source.get(at..).unwrap_or_default());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syntax() -> SyntaxConfig {
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn guarded_fixtures_compile() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat-templates");
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{e}")) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path.extension().is_none_or(|e| e != "jinja") {
                continue;
            }
            let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
            let guarded = prepare(&src, "t", &syntax()).unwrap_or_else(|e| panic!("{e}"));
            if let Err(e) = machinery::parse(&guarded, "t", syntax()) {
                let line = e.line().unwrap_or(0);
                panic!(
                    "{}: {e}\n{}\n{}",
                    path.display(),
                    src.lines().nth(line - 1).unwrap_or_default(),
                    guarded.lines().nth(line - 1).unwrap_or_default()
                );
            }
        }
    }
}
