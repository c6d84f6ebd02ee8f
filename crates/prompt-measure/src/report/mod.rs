//! One verdict value per request and every way it is shown, in one place: a printer never
//! analyses again, it projects the value.
//!
//! - [`RequestReport`]: the audit's [`RequestAudit`](crate::audit::RequestAudit) (the
//!   engine's verdict, tokens, usage, writer, the provider's verdict) or why there is none,
//!   with what the proxy knew of the exchange ([`Forwarded`]).
//! - [`verdict_text`]: the verdict as one sentence (`cacheline audit`'s divergence column,
//!   the proxy's line, the page's row), with its [`provider_clause`] and [`writer_clause`].
//! - [`RequestRow`] ([`RequestReport::page_row`]): the page's, the state's and the event
//!   stream's row; [`verdict_line`]: the terminal's line; [`RequestRow::metric_labels`]:
//!   the labels `/metrics` counts it under.
//! - [`causes_text`], [`provider_verdicts_text`]: summary lines the audit and the proxy
//!   share. The audit's JSON is the serialization of the values themselves.
//! - [`evidence_markdown`], [`evidence_json`]: one request's proof
//!   ([`Evidence`](crate::evidence::Evidence)), `cacheline evidence`'s report.

mod evidence;
mod labels;
mod row;
mod summary;
mod verdict;

pub use evidence::{evidence_json, evidence_markdown};
pub use labels::{AGENTS, KNOWN_AGENTS, MetricLabels, agent_label};
pub use row::{Forwarded, Outcome, RequestReport, RequestRow, VERDICT_BYTES, verdict_line};
pub use summary::{causes_text, provider_verdicts_text};
pub use verdict::{provider_clause, refusal_clause, utc, verdict_text, writer_clause};

/// The stylesheet of a page of sessions and their requests, shared by `cacheline proxy`'s
/// live page and `cacheline import`'s HTML report: one look, written once.
pub const REQUESTS_STYLE: &str = include_str!("requests.css");
