//! What one render of a chat template may cost, and the runtime checks that hold it to that.
//!
//! Chat templates come from model files users download, so a template is untrusted code.
//! minijinja's fuel bounds the instructions a render executes and most of the data it
//! creates, but not everything: converting a value to text (printing, `~`, comparing,
//! passing it to a filter that wants a string) walks the value, and a value built from shared
//! references (`[s] * 10**8`, `[a, a]` nested sixty times) can print as terabytes while
//! costing almost no fuel to build. The compile step (`guard.rs`) therefore routes every value
//! that reaches such an operation through [`guard_value`], which measures its printed size
//! and nesting with a bounded walk and refuses it past [`RenderLimits::value_bytes`] /
//! [`RenderLimits::value_depth`]. Output goes to a [`CappedWriter`]. The filters and functions
//! this crate adds bound their own arguments.

use std::fmt;
use std::io;

use minijinja::value::{ObjectRepr, Value as JValue};
use minijinja::{Error as JError, ErrorKind, State};
use serde::Serialize;

/// How much one render of a chat template may do.
///
/// Every render of a [`ChatTemplate`](crate::ChatTemplate) runs with these limits; a
/// template that exceeds one fails with [`RenderError::Limit`](crate::RenderError::Limit)
/// naming it, instead of running for minutes, growing without bound or aborting the process.
///
/// Built with methods, so a limit added later breaks no caller:
///
/// ```
/// use prompt_template_probe::RenderLimits;
/// let limits = RenderLimits::PROBE.with_fuel(50_000).with_total_fuel(None);
/// assert_eq!((limits.fuel, limits.total_fuel), (50_000, None));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RenderLimits {
    /// minijinja fuel per render: one per instruction executed, one per 64 bytes of data
    /// created or processed (the engine's own accounting, `Environment::set_fuel`).
    pub fuel: u64,
    /// The most bytes one render may output.
    pub output_bytes: usize,
    /// The largest value, measured as its printed size, that may be printed, concatenated,
    /// compared, or passed to a filter, test, function or method.
    pub value_bytes: usize,
    /// The deepest nesting of lists and maps such a value may have (it also stops a
    /// namespace that contains itself).
    pub value_depth: usize,
    /// The deepest nesting of macro calls, loops and includes (minijinja's recursion limit).
    pub recursion: usize,
    /// The fuel all renders of one [`ChatTemplate`](crate::ChatTemplate) may use together,
    /// or `None` for no such budget. A render that fails with an engine error is counted at
    /// its full [`fuel`](Self::fuel) (the engine does not say what it used).
    pub total_fuel: Option<u64>,
}

impl RenderLimits {
    /// The limits of the probe, whose conversations are a few short messages: 10 000 fuel
    /// per render (the 32 real templates of the test fixtures need at most about 2 100) and
    /// 60 000 for the whole probe (they need at most about 17 000 for the twenty-odd renders
    /// of a probe), 256 KiB of output and per value, 32 levels of nesting, 64 levels of
    /// recursion. A probe of any template thus does at most about 70 000 fuel of work
    /// (a few milliseconds).
    pub const PROBE: RenderLimits = RenderLimits {
        fuel: 10_000,
        output_bytes: 256 << 10,
        value_bytes: 256 << 10,
        value_depth: 32,
        recursion: 64,
        total_fuel: Some(60_000),
    };
}

impl RenderLimits {
    /// The same limits with this much fuel per render.
    pub const fn with_fuel(mut self, fuel: u64) -> Self {
        self.fuel = fuel;
        self
    }

    /// The same limits with this output cap.
    pub const fn with_output_bytes(mut self, bytes: usize) -> Self {
        self.output_bytes = bytes;
        self
    }

    /// The same limits with this value cap.
    pub const fn with_value_bytes(mut self, bytes: usize) -> Self {
        self.value_bytes = bytes;
        self
    }

    /// The same limits with this value nesting cap.
    pub const fn with_value_depth(mut self, depth: usize) -> Self {
        self.value_depth = depth;
        self
    }

    /// The same limits with this recursion cap.
    pub const fn with_recursion(mut self, depth: usize) -> Self {
        self.recursion = depth;
        self
    }

    /// The same limits with this budget across renders (`None`: none).
    pub const fn with_total_fuel(mut self, fuel: Option<u64>) -> Self {
        self.total_fuel = fuel;
        self
    }
}

impl Default for RenderLimits {
    /// For rendering real requests: 250 000 fuel per render (about 15 ms of work, 16 MiB of
    /// data), 8 MiB of output, 4 MiB per value, 32 levels of nesting, 64 levels of recursion,
    /// no budget across renders.
    fn default() -> Self {
        Self {
            fuel: 250_000,
            output_bytes: 8 << 20,
            value_bytes: 4 << 20,
            value_depth: 32,
            recursion: 64,
            total_fuel: None,
        }
    }
}

/// Which limit a render exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// [`RenderLimits::fuel`] or [`RenderLimits::total_fuel`].
    Fuel,
    /// [`RenderLimits::output_bytes`].
    Output,
    /// [`RenderLimits::value_bytes`].
    ValueSize,
    /// [`RenderLimits::value_depth`].
    ValueDepth,
    /// [`RenderLimits::recursion`].
    Recursion,
    /// An argument of a filter or function over its bound (`tojson` indent, `strftime_now`
    /// format, `str.format` width, slice step).
    Argument,
}

impl Limit {
    /// The label: `fuel`, `output`, `value_size`, `value_depth`, `recursion`, `argument`.
    pub fn label(self) -> &'static str {
        match self {
            Limit::Fuel => "fuel",
            Limit::Output => "output",
            Limit::ValueSize => "value_size",
            Limit::ValueDepth => "value_depth",
            Limit::Recursion => "recursion",
            Limit::Argument => "argument",
        }
    }
}

/// Carried as the source of the errors the guards return, so a limit can be told apart from
/// other engine failures.
#[derive(Debug, Clone)]
pub(crate) struct LimitHit {
    pub(crate) limit: Limit,
    pub(crate) message: String,
}

impl fmt::Display for LimitHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LimitHit {}

/// An engine error carrying a [`LimitHit`].
pub(crate) fn limit_error(limit: Limit, message: String) -> JError {
    JError::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(LimitHit { limit, message })
}

/// The [`LimitHit`] in `err`'s source chain, if any.
pub(crate) fn limit_hit(err: &JError) -> Option<LimitHit> {
    in_source_chain::<LimitHit>(err).cloned()
}

/// The first `T` in `err`'s source chain (`err` itself included): how the probe's own
/// errors (a limit hit, a raised exception) come back out of a minijinja error.
pub(crate) fn in_source_chain<T: std::error::Error + 'static>(err: &JError) -> Option<&T> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        current = e.source();
    }
    None
}

/// Approximate printed sizes, in bytes, used by [`guard_value`].
const SCALAR_BYTES: usize = 24;
const ITEM_BYTES: usize = 2;
const OPAQUE_BYTES: usize = 32;
/// Fuel charged per value a walk visits: about what an instruction costs, four times that
/// for a list or map (whose items are iterated through a new iterator).
const SCALAR_FUEL: u64 = 1;
const CONTAINER_FUEL: u64 = 4;
/// How much fuel a walk runs up before paying it.
const WALK_FUEL_BATCH: u64 = 256;

/// Returns `value` unchanged if its printed size is at most `limits.value_bytes` and its
/// lists and maps nest at most `limits.value_depth` deep; otherwise a limit error.
///
/// Strings and numbers pass at once (their size was paid for when they were created, and
/// the engine charges a filter's string input by the byte). Lists, maps and iterables are
/// walked depth first, one iterator per level, stopping as soon as either bound is passed,
/// so the walk costs at most `value_bytes / 2` steps whatever the value's real size; the
/// steps are charged as fuel.
pub(crate) fn guard_value(
    state: &State,
    value: JValue,
    limits: &RenderLimits,
) -> Result<JValue, JError> {
    let Some(obj) = value.as_object() else {
        return Ok(value);
    };
    walk(state, &value, limits, |_| Ok(()))?;
    // A lazy sequence (`a + b`, `[x] * n`, `range(n)`) is handed on as a list: iterating a
    // chain of lazy concatenations costs one step per link for every item, which the fuel
    // would not see. Its items were just counted, so the copy is bounded.
    if obj.repr() == ObjectRepr::Iterable
        && obj.enumerator_len().is_some()
        && let Some(items) = obj.try_iter()
    {
        return Ok(JValue::from(items.collect::<Vec<_>>()));
    }
    Ok(value)
}

/// Returns `value` unchanged unless it is or contains one of `targets`: what `{% set
/// ns.attr = value %}` assigns must not contain `ns`, or the namespace would contain itself
/// (printed forever, and a reference cycle that is never freed).
pub(crate) fn guard_acyclic(
    state: &State,
    value: JValue,
    targets: &[JValue],
    limits: &RenderLimits,
) -> Result<JValue, JError> {
    let targets: Vec<&JValue> = targets.iter().filter(|t| t.as_object().is_some()).collect();
    if value.as_object().is_none() || targets.is_empty() {
        return Ok(value);
    }
    walk(state, &value, limits, |node| {
        if targets.iter().any(|t| minijinja::tests::is_sameas(node, t)) {
            return Err(limit_error(
                Limit::ValueDepth,
                "a namespace would contain itself".to_owned(),
            ));
        }
        Ok(())
    })?;
    Ok(value)
}

/// Walks what printing `value` visits, depth first with one iterator per level, calling
/// `visit` on every node and stopping at the first error or as soon as the printed size
/// passes `limits.value_bytes` or the nesting `limits.value_depth`. The nodes visited are
/// charged as fuel.
fn walk(
    state: &State,
    value: &JValue,
    limits: &RenderLimits,
    mut visit: impl FnMut(&JValue) -> Result<(), JError>,
) -> Result<(), JError> {
    let mut size = 0usize;
    let mut unpaid = 0u64;
    let mut stack: Vec<Box<dyn Iterator<Item = JValue> + Send + Sync>> = Vec::new();
    let mut next = Some(value.clone());
    let outcome = loop {
        let item = match next.take() {
            Some(item) => item,
            None => match stack.last_mut() {
                None => break Ok(()),
                Some(iter) => match iter.next() {
                    Some(item) => {
                        size = size.saturating_add(ITEM_BYTES);
                        item
                    }
                    None => {
                        stack.pop();
                        continue;
                    }
                },
            },
        };
        // Charged as it goes, so a walk also stops where the fuel runs out.
        if unpaid >= WALK_FUEL_BATCH {
            if let Err(e) = state.consume_fuel(unpaid) {
                break Err(e);
            }
            unpaid = 0;
        }
        if let Err(e) = visit(&item) {
            break Err(e);
        }
        size = size.saturating_add(printed_size(&item));
        let items = children(&item);
        unpaid += if items.is_some() {
            CONTAINER_FUEL
        } else {
            SCALAR_FUEL
        };
        if let Some(iter) = items {
            if stack.len() >= limits.value_depth {
                break Err(limit_error(
                    Limit::ValueDepth,
                    format!(
                        "a value nests lists or maps more than {} levels deep",
                        limits.value_depth
                    ),
                ));
            }
            stack.push(iter);
        }
        if size > limits.value_bytes {
            break Err(limit_error(
                Limit::ValueSize,
                format!(
                    "a value would print as more than {} bytes",
                    limits.value_bytes
                ),
            ));
        }
    };
    state.consume_fuel(unpaid)?;
    outcome
}

/// The printed size of `value` itself, without its items.
fn printed_size(value: &JValue) -> usize {
    if let Some(s) = value.as_str() {
        return s.len().saturating_add(2);
    }
    match value.as_object() {
        Some(obj) => match obj.repr() {
            ObjectRepr::Map | ObjectRepr::Seq | ObjectRepr::Iterable => ITEM_BYTES,
            _ => OPAQUE_BYTES,
        },
        None => SCALAR_BYTES,
    }
}

/// What printing `value` visits: the items of a sized sequence or iterable, the keys and
/// values of a map. Unsized iterables print as a placeholder and are not iterated (they
/// may be one-shot).
fn children(value: &JValue) -> Option<Box<dyn Iterator<Item = JValue> + Send + Sync>> {
    let obj = value.as_object()?;
    match obj.repr() {
        ObjectRepr::Map => {
            let pairs = obj.try_iter_pairs()?;
            Some(Box::new(pairs.flat_map(|(k, v)| [k, v])))
        }
        ObjectRepr::Seq | ObjectRepr::Iterable if obj.enumerator_len().is_some() => obj.try_iter(),
        _ => None,
    }
}

/// Returns the slice step unchanged unless it is `i64::MIN`, whose negation overflows in
/// minijinja's slicing (`-step as usize`, a panic with overflow checks on).
pub(crate) fn guard_slice_step(value: JValue) -> Result<JValue, JError> {
    if i64::try_from(value.clone()).ok() == Some(i64::MIN) {
        return Err(limit_error(
            Limit::Argument,
            format!("slice step {} is out of range", i64::MIN),
        ));
    }
    Ok(value)
}

/// Returns the `*items` of a `cycle` call unchanged unless there are none.
pub(crate) fn guard_cycle_items(value: JValue) -> Result<JValue, JError> {
    if value.len() == Some(0) {
        return Err(no_cycle_items());
    }
    Ok(value)
}

/// The error of `loop.cycle()` without items, as Jinja raises it.
pub(crate) fn no_cycle_items() -> JError {
    JError::new(ErrorKind::InvalidOperation, "no items for cycling given")
}

/// The render output: a byte buffer that refuses to grow past its cap.
///
/// A write that would pass the cap fails as a whole (nothing of it is kept), so the buffer
/// always holds whole `str` pieces, and minijinja stops the render with a write error.
#[derive(Debug)]
pub(crate) struct CappedWriter {
    buf: Vec<u8>,
    cap: usize,
    pub(crate) overflowed: bool,
}

impl CappedWriter {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            overflowed: false,
        }
    }

    pub(crate) fn into_string(self) -> String {
        match String::from_utf8(self.buf) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

impl io::Write for CappedWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(bytes.len()) > self.cap {
            self.overflowed = true;
            return Err(io::Error::other("the output cap is reached"));
        }
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Where `tojson` writes: charges the state's fuel as it goes (one per 64 bytes) and stops at
/// a cap, so indentation cannot multiply a small value into a huge text.
pub(crate) struct FueledWriter<'a, 'b, 'c> {
    state: &'a State<'b, 'c>,
    pub(crate) out: Vec<u8>,
    cap: usize,
    uncharged: usize,
    pub(crate) stopped: Option<JError>,
}

impl<'a, 'b, 'c> FueledWriter<'a, 'b, 'c> {
    pub(crate) fn new(state: &'a State<'b, 'c>, cap: usize) -> Self {
        Self {
            state,
            out: Vec::new(),
            cap,
            uncharged: 0,
            stopped: None,
        }
    }

    /// Charges what is still uncharged.
    pub(crate) fn settle(&mut self) -> Result<(), JError> {
        let fuel = (self.uncharged / 64) as u64;
        self.uncharged %= 64;
        self.state.consume_fuel(fuel)
    }
}

impl io::Write for FueledWriter<'_, '_, '_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.out.len().saturating_add(bytes.len()) > self.cap {
            self.stopped = Some(limit_error(
                Limit::ValueSize,
                format!("tojson would write more than {} bytes", self.cap),
            ));
            return Err(io::Error::other("the tojson cap is reached"));
        }
        self.out.extend_from_slice(bytes);
        self.uncharged += bytes.len();
        if self.uncharged >= 4096
            && let Err(e) = self.settle()
        {
            self.stopped = Some(e);
            return Err(io::Error::other("out of fuel"));
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
