//! Sessions continued by a new launch: what the proxy keeps of each request
//! ([`Auditor::last_record`]) is restored into the auditor of a later launch
//! ([`Auditor::restore`]), as `cacheline proxy` does each time an agent is resumed by running
//! it again. Scored: append-only turns continued by the new launch (no break, and compared
//! with the request of the earlier launch), the same beside a side call of another lane that
//! the earlier launch made last, and injected changes whose predecessor an earlier launch saw.

use std::collections::BTreeMap;

use prompt_core::ApiKind;
use prompt_wire::engine::CauseKind;

use super::inject::{self, applicable};
use super::synth::{Request, Rng};
use super::{AccuracyError, Agent, Audit, Config, Counts, Quarter, is_break, score, session_start};

/// Append-only turns continued by a new launch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resumed {
    /// Turns scored.
    pub turns: u64,
    /// A break named on an append-only turn.
    pub false_breaks: u64,
    /// Compared with another request than its own conversation's last (or with none).
    pub wrong_predecessor: u64,
}

/// The launches set's figures.
#[derive(Debug, Clone, Default)]
pub struct Launches {
    /// Append-only turns continued by a new launch, by API.
    pub resumed: BTreeMap<ApiKind, Resumed>,
    /// The same, after a side call of another lane (a title, a classifier) the earlier launch
    /// made last in the session.
    pub beside_side_call: BTreeMap<ApiKind, Resumed>,
    /// Changes injected into a request whose predecessor an earlier launch saw, by API.
    pub injected: BTreeMap<ApiKind, Counts>,
    /// What went wrong, for the findings.
    pub examples: Vec<String>,
}

/// Turns resumed per session.
const TURNS: usize = 3;

/// What one launch keeps: each request's record and its line.
struct Kept {
    records: Vec<(prompt_engine::RequestRecord, u64, String)>,
    line: u64,
}

/// Launch 1: audits `requests` (each tagged with the launch) and keeps their records.
fn first_launch(
    agent: &'static str,
    api: ApiKind,
    tokenizer: &Quarter,
    requests: &[&Request],
) -> Result<(Kept, Vec<u64>), AccuracyError> {
    let mut one = Audit::new(agent, api, tokenizer);
    let mut kept = Kept {
        records: Vec::new(),
        line: 0,
    };
    let mut lines = Vec::new();
    for r in requests {
        let mut r = (*r).clone();
        r.launch = Some("launch-1".to_owned());
        let audit = one.push(&r)?;
        lines.push(audit.line);
        if let Some(record) = one.auditor.last_record(&audit) {
            kept.records.push((record, audit.line, r.body_text()));
        }
    }
    kept.line = one.line;
    Ok((kept, lines))
}

/// Launch 2: restores what launch 1 kept and audits `next`.
fn second_launch(
    agent: &'static str,
    api: ApiKind,
    tokenizer: &Quarter,
    kept: Kept,
    next: &Request,
) -> Result<prompt_measure::audit::RequestAudit, AccuracyError> {
    let mut two = Audit::new(agent, api, tokenizer);
    for (record, line, body) in kept.records {
        two.auditor.restore(record, line, true, Some(&body));
    }
    two.line = kept.line;
    let mut next = next.clone();
    next.launch = Some("launch-2".to_owned());
    two.push(&next)
}

/// Runs the launches set on `agents`, from its own seed (the other sets' draws unchanged).
pub(super) fn run(
    agents: &[Agent],
    tokenizer: &Quarter,
    config: Config,
) -> Result<Launches, AccuracyError> {
    let mut rng = Rng::new(config.seed ^ 0x6c61_756e_6368_6573);
    let mut out = Launches::default();
    let mut n = 1u64 << 40;
    for agent in agents {
        let api = agent.api;
        let causes = applicable(api);
        let mut next_cause = 0usize;
        for episode in 0..config.episodes {
            let mut prev = session_start(agent, &mut rng, episode);
            prev.session = format!("{}-resumed-{episode}", agent.name);
            for turn in 0..TURNS {
                n += 1;
                let next = inject::append_turn(api, &mut rng, &prev, n);
                // Every other turn, the earlier launch made a side call last.
                let side = if turn % 2 == 1 {
                    inject::side_call(api, &mut rng, &prev, n).map(|mut s| {
                        s.session = prev.session.clone();
                        s
                    })
                } else {
                    None
                };
                let mut sent = vec![&prev];
                sent.extend(side.as_ref());
                let (kept, lines) = first_launch(agent.name, api, tokenizer, &sent)?;
                let audit = second_launch(agent.name, api, tokenizer, kept, &next)?;
                let v = &audit.verdict;
                let row = if side.is_some() {
                    out.beside_side_call.entry(api).or_default()
                } else {
                    out.resumed.entry(api).or_default()
                };
                row.turns += 1;
                let false_break = is_break(v);
                let right = v
                    .predecessor
                    .as_ref()
                    .is_some_and(|p| p.tag == lines[0] && p.earlier_launch);
                row.false_breaks += u64::from(false_break);
                row.wrong_predecessor += u64::from(!right);
                if (false_break || !right) && out.examples.len() < 12 {
                    out.examples.push(format!(
                        "{} resumed{}: {}",
                        agent.name,
                        if side.is_some() {
                            " beside a side call"
                        } else {
                            ""
                        },
                        prompt_measure::audit::verdict_text(&audit)
                    ));
                }
                // A change injected where the predecessor is the earlier launch's.
                let kind = causes[next_cause % causes.len()];
                next_cause += 1;
                n += 1;
                if let Some((mut pred, mut x, expected)) =
                    inject::inject(api, kind, &mut rng, &prev, &next, n)
                {
                    let session = format!("inj-launch-{n}");
                    pred.session = session.clone();
                    if kind != CauseKind::ColdStart {
                        x.session = session;
                    }
                    let (kept, _) = first_launch(agent.name, api, tokenizer, &[&pred])?;
                    let audit = second_launch(agent.name, api, tokenizer, kept, &x)?;
                    let (outcome, said) = score(&expected, &audit.verdict);
                    out.injected.entry(api).or_default().add(outcome);
                    if outcome != super::Outcome::Right && out.examples.len() < 12 {
                        // The same pair in one launch, to tell what the launches change.
                        let mut one = Audit::new(agent.name, api, tokenizer);
                        one.push(&pred)?;
                        let (_, in_one) = score(&expected, &one.push(&x)?.verdict);
                        out.examples.push(format!(
                            "{}: injected {kind} at {:?} across launches ({}); said {said}; in one launch: {in_one}",
                            agent.name, expected.place, expected.how
                        ));
                    }
                }
                prev = next;
            }
        }
    }
    Ok(out)
}
