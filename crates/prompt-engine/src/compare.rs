//! The guard for integrators who build bodies themselves: does the later body extend the
//! earlier one, and if not, where and why not. A view over the engine: one diff.

use prompt_core::ApiKind;
use serde::Serialize;

use crate::body::error::GuardError;
use crate::body::parse::parse;
use crate::body::shape::{Evidence, Reading, Which};
use crate::canon::{Canonical, Context};
use crate::cause::Break;
use crate::diff::diff;

/// What [`compare`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Every message and block of the earlier body is unchanged at the head of the later
    /// one (for Anthropic ignoring `cache_control`), with the same model, key and tools.
    Extends {
        /// The bodies' API (in JSON, its shape: `chat_completions`, `anthropic`…).
        #[serde(serialize_with = "crate::body::shape::serialize_shape")]
        shape: ApiKind,
    },
    /// It does not.
    Breaks(Break),
}

impl Verdict {
    /// Whether the later body extends the earlier one.
    pub fn extends(&self) -> bool {
        matches!(self, Verdict::Extends { .. })
    }
}

/// Compares two consecutive bodies of any supported API (recognised from their keys):
/// [`Verdict::Extends`], or the first place the later body stops extending the earlier one
/// and why — tools changed, the system field rewritten or grown by hoisting, a message
/// edited, inserted, removed or reordered.
///
/// Pass the earlier body as sent (its per-request tail then shows as
/// [`Cause::TailDropped`](crate::Cause::TailDropped)) or without its per-request tail
/// (`prompt_wire`'s `Body::stable_body`). Anthropic bodies are compared block by
/// block ignoring `cache_control`, since breakpoints move between requests. Each body is
/// at most [`MAX_AUDIT_BODY_BYTES`](crate::MAX_AUDIT_BODY_BYTES); the work is linear in their size.
///
/// ```
/// use prompt_engine::{compare, Cause};
/// let earlier = br#"{"model":"m","system":"Be brief.","messages":[{"role":"user","content":"hi"}]}"#;
/// let later = br#"{"model":"m","system":"Be brief.\n\nToday is Monday.","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"and?"}]}"#;
/// let verdict = compare(earlier, later).unwrap();
/// let prompt_engine::Verdict::Breaks(b) = verdict else { panic!("{verdict:?}") };
/// assert!(matches!(b.cause, Cause::InsertAboveHistory { hoisted: Some(_), .. }));
/// ```
pub fn compare(earlier: &[u8], later: &[u8]) -> Result<Verdict, GuardError> {
    let e = parse(earlier, Which::Earlier, Reading::Compare)?;
    let l = parse(later, Which::Later, Reading::Compare)?;
    if e.class != l.class {
        return Err(GuardError::ShapeMismatch {
            earlier: e.shape(e.evidence),
            later: l.shape(l.evidence),
        });
    }
    let evidence = Evidence {
        anthropic: e.evidence.anthropic || l.evidence.anthropic,
        chat: e.evidence.chat || l.evidence.chat,
    };
    let shape = e.shape(evidence);
    // One engine: the guard's verdict is its first change that loses tokens.
    let context = Context::default();
    let e = Canonical::from_parsed(e, shape, context, None);
    let l = Canonical::from_parsed(l, shape, context, None);
    let found = diff(&e, &l);
    Ok(match found.first_break() {
        None => Verdict::Extends { shape },
        Some(change) => Verdict::Breaks(Break {
            shape,
            place: change.place.clone(),
            cause: change.cause.clone(),
            divergence: change.divergence.clone(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cause;

    fn verdict(a: &str, b: &str) -> Verdict {
        compare(a.as_bytes(), b.as_bytes()).unwrap()
    }

    fn cause(a: &str, b: &str) -> Cause {
        match verdict(a, b) {
            Verdict::Breaks(b) => b.cause,
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn a_body_extends_itself_and_its_continuation() {
        let a = r#"{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}]}"#;
        let b = r#"{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}],"temperature":1}"#;
        assert!(verdict(a, a).extends());
        assert!(verdict(a, b).extends());
    }

    #[test]
    fn chat_message_edits_removals_insertions_and_tails_are_told_apart() {
        let m = |xs: &[&str]| {
            let msgs: Vec<String> = xs
                .iter()
                .map(|x| format!(r#"{{"role":"user","content":"{x}"}}"#))
                .collect();
            format!(r#"{{"messages":[{}]}}"#, msgs.join(","))
        };
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "B", "c"])),
            Cause::EditInPlace
        );
        assert_eq!(cause(&m(&["a", "b", "c"]), &m(&["a", "c"])), Cause::Removed);
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "x", "b", "c", "d"])),
            Cause::InsertAboveHistory {
                count: 1,
                hoisted: None
            }
        );
        // The earlier end sent again at the very end, after new messages: a per-request
        // tail; the cache loses the same bytes either way.
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "x", "b", "c"])),
            Cause::TailDropped
        );
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "c", "b"])),
            Cause::Reorder
        );
        // The last message replaced by one of the same role reads as an edit; by one of
        // another role, as its end not carried over.
        assert_eq!(
            cause(&m(&["a", "b", "eph"]), &m(&["a", "b", "d", "e"])),
            Cause::EditInPlace
        );
        let eph =
            r#"{"messages":[{"role":"user","content":"a"},{"role":"system","content":"eph"}]}"#;
        let next =
            r#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}"#;
        assert_eq!(cause(eph, next), Cause::TailDropped);
        assert_eq!(cause(&m(&["a", "b"]), &m(&["a"])), Cause::TailDropped);
    }

    #[test]
    fn anthropic_blocks_compare_without_cache_control_and_merge_into_the_last_message() {
        let a = r#"{"model":"m","system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}"#;
        let b = r#"{"model":"m","system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":"more","cache_control":{"type":"ephemeral"}}]}]}"#;
        assert_eq!(
            verdict(a, b),
            Verdict::Extends {
                shape: ApiKind::Anthropic
            }
        );
    }
}
