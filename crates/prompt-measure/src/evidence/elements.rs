//! Both requests side by side as the engine reads them: each element's hash as compared
//! ([`Canonical`]), the first one the engine's changes name, the bytes around the first
//! divergence (found in each body through the engine's element, [`Place::element_in`]), and
//! the top-level fields, which the engine does not keep, compared as bytes.

use prompt_core::input;
use prompt_core::raw_json::Object;
use prompt_engine::{Canonical, Cause, Change, Place};

use super::read::Reread;
use super::redact::Redactor;
use super::{
    AFTER, Around, BEFORE, BlockRow, Blocks, FieldFacts, FirstDivergence, MAX_BLOCKS, MAX_FIELDS,
    MAX_LABEL,
};

/// Whether a change is in the body: a header is not, nor the request as a whole.
pub(super) fn in_body(place: &Place) -> bool {
    !matches!(place, Place::Header { .. } | Place::Request)
}

/// `body[offset - BEFORE .. offset]` and `body[offset .. offset + AFTER]`, at character
/// boundaries.
fn around(body: &str, offset: usize) -> (&str, &str) {
    let at = body.floor_char_boundary(offset.min(body.len()));
    let start = body.floor_char_boundary(at.saturating_sub(BEFORE));
    let end = body.floor_char_boundary(at.saturating_add(AFTER).min(body.len()));
    (&body[start..at], &body[at..end])
}

/// One request read again, and the engine's view of it.
pub(super) type Read<'a, 'r> = (&'a Reread<'r>, &'a Canonical<'a>);

/// The bytes of both sides around the change `c` names: for a tool, a system block or a
/// message, the body's bytes at its offset in the later body, and at the same offset into
/// the same element in the earlier body; for a value (a parameter, the model, a header),
/// the engine's excerpt of it on each side (a header is not in the body: no offset).
pub(super) fn first_divergence(
    c: &Change,
    (later, later_c): Read<'_, '_>,
    earlier: Option<Read<'_, '_>>,
    redactor: &Redactor,
) -> FirstDivergence {
    let offset = c.divergence.byte_offset;
    let in_body = in_body(&c.place);
    let placed = earlier.and_then(|(er, ec)| {
        let l = c.place.element_in(later_c)?;
        let e = c.place.element_in(ec)?;
        let at = e.start as usize + offset.checked_sub(l.start as usize)?.min(e.len as usize);
        Some((er.line, at, around(&er.masked.text, at)))
    });
    let side = |line: u64, at: Option<usize>, (before, from): (&str, &str)| Around {
        line,
        byte_offset: at,
        before: redactor.excerpt(before),
        from: redactor.excerpt(from),
    };
    let (earlier_side, later_side) = match placed {
        Some((line, at, bytes)) => (
            side(line, Some(at), bytes),
            side(later.line, Some(offset), around(&later.masked.text, offset)),
        ),
        // Not placed in the bodies: the engine's excerpt of the changed value.
        None => (
            side(
                earlier.map_or(0, |(r, _)| r.line),
                None,
                ("", &c.divergence.excerpt.earlier),
            ),
            side(
                later.line,
                in_body.then_some(offset),
                ("", &c.divergence.excerpt.later),
            ),
        ),
    };
    FirstDivergence {
        byte_offset: in_body.then_some(offset),
        earlier: earlier_side,
        later: later_side,
    }
}

/// A short hex of an element hash.
fn short(hash: u64) -> String {
    format!("{:08x}", hash >> 32)
}

/// A request's elements by group: each one's hash as compared and its label (a tool's
/// name, a message's role).
fn groups_of(c: &Canonical<'_>) -> [Vec<(u64, String)>; 3] {
    let label = |s: &str| input::excerpt(s, MAX_LABEL).into_owned();
    [
        c.tools
            .iter()
            .map(|t| (t.block.hash, label(&t.name)))
            .collect(),
        c.system.iter().map(|b| (b.hash, String::new())).collect(),
        c.messages
            .iter()
            .map(|m| (m.block.hash, label(c.role(m))))
            .collect(),
    ]
}

/// The engine's groups of elements, in the provider's cache order.
const GROUPS: [&str; 3] = ["tools", "system", "messages"];

/// The row of the element a change names: a message by its index in the body's array,
/// found among the later request's messages, else the earlier's (a message gone).
fn row_of(place: &Place, earlier: &Canonical<'_>, later: &Canonical<'_>) -> Option<String> {
    match place {
        Place::Tools { index } => Some(format!("tools[{index}]")),
        Place::System { block } => Some(format!("system[{block}]")),
        Place::Message { index, .. } => {
            let at = |c: &Canonical<'_>| c.messages.iter().position(|m| m.index as usize == *index);
            at(later)
                .or_else(|| at(earlier))
                .map(|i| format!("messages[{i}]"))
        }
        _ => None,
    }
}

/// Both requests' elements side by side, group by group, index by index; the first
/// difference is the first element the engine's `changes` name (a change of serialization
/// alone loses nothing and names none).
pub(super) fn blocks(
    earlier: Option<&Canonical<'_>>,
    later: &Canonical<'_>,
    changes: &[Change],
) -> Blocks {
    let mut rows = Vec::new();
    let mut unlisted = 0;
    let mut earlier_groups = earlier.map(groups_of);
    for ((group, l), i) in GROUPS.into_iter().zip(groups_of(later)).zip(0..) {
        let e = earlier_groups.as_mut().map(|g| std::mem::take(&mut g[i]));
        let len = l.len().max(e.as_ref().map_or(0, Vec::len));
        unlisted += len.saturating_sub(MAX_BLOCKS);
        for i in 0..len.min(MAX_BLOCKS) {
            let (x, y) = (e.as_ref().and_then(|e| e.get(i)), l.get(i));
            let status = match (x, y) {
                (Some(x), Some(y)) if x.0 == y.0 => "equal",
                (Some(_), Some(_)) => "differs",
                (None, _) if e.is_none() => "sent",
                (None, _) => "added",
                (Some(_), None) => "removed",
            };
            rows.push(BlockRow {
                group,
                index: i,
                label: y.or(x).map(|r| r.1.clone()).unwrap_or_default(),
                earlier: x.map(|r| short(r.0)),
                later: y.map(|r| short(r.0)),
                status,
            });
        }
    }
    let first_difference = earlier.and_then(|e| {
        changes
            .iter()
            .filter(|c| c.cause != Cause::SerializationOnly)
            .find_map(|c| row_of(&c.place, e, later))
    });
    Blocks {
        rows,
        first_difference,
        unlisted,
    }
}

/// The top-level fields of two bodies, compared as bytes: the engine reads only those that
/// key a cache, and not the bytes between its elements.
pub(super) fn fields(earlier: Option<&str>, later: &str) -> Vec<FieldFacts> {
    let parse = |text: &str| -> Vec<(String, String)> {
        Object::parse(text)
            .map(|o| {
                o.fields
                    .iter()
                    .map(|(k, v)| {
                        (
                            input::excerpt(k, MAX_LABEL).into_owned(),
                            v.get().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (l, e) = (parse(later), earlier.map(parse));
    let status = |name: &str, lv: &str| match e.as_ref().map(|e| e.iter().find(|(k, _)| k == name))
    {
        None => "sent",
        Some(None) => "added",
        Some(Some((_, ev))) if ev == lv => "equal",
        Some(Some((_, ev))) => {
            let open = ev.strip_suffix([']', '}', '"']).unwrap_or(ev);
            if ev.len() > 1 && lv.starts_with(open) {
                "extended"
            } else {
                "changed"
            }
        }
    };
    let removed = e
        .iter()
        .flatten()
        .filter(|(k, _)| !l.iter().any(|(n, _)| n == k));
    l.iter()
        .map(|(name, lv)| (name, status(name, lv)))
        .chain(removed.map(|(name, _)| (name, "removed")))
        .take(MAX_FIELDS)
        .map(|(name, status)| FieldFacts {
            name: name.clone(),
            status,
        })
        .collect()
}
