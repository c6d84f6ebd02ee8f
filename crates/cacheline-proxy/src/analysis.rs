//! The analysis thread: owns the audit (and so the one comparison engine), reads each
//! exchange's copy off the hot path, writes it as a line of the audit's log format, audits
//! that very line and prints its verdict. `cacheline audit` on the log runs the same code on
//! the same lines: its verdicts are the proxy's.

use std::borrow::Cow;
use std::io::Read;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prompt_measure::audit::AuditSummary;
use prompt_measure::logged::{LoggedExchange, LoggedResponse};
use prompt_measure::report::{Forwarded, Outcome, RequestReport, verdict_line};
use prompt_measure::{AuditConfig, Auditor, O200kBase};

use crate::copy::BodyCopy;
use crate::diagnose::{Diagnose, DiagnoseJob};
use crate::log::{ExchangeLog, LogLine};
use crate::state::ProxyState;
use prompt_core::profile::Provider;

/// One exchange, handed to the analysis thread.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) api: Provider,
    /// The path, without its query (Gemini's `?key=` never leaves the hot path).
    pub(crate) path: String,
    /// The headers the engine keeps ([`prompt_wire::engine::keep_header`]), lowercase.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) agent: Option<String>,
    pub(crate) ts: f64,
    pub(crate) request: BodyCopy,
    pub(crate) response: BodyCopy,
    pub(crate) content_encoding: Option<String>,
    pub(crate) status: u16,
    pub(crate) outcome: Outcome,
    pub(crate) added_latency: Duration,
    /// `--diagnose`: the session its reply id is held under, and the reply its request was
    /// compared with.
    pub(crate) diagnose: Option<DiagnoseJob>,
    /// `--stabilize`: what it did (the request copy is then what was sent upstream).
    pub(crate) repair: Option<crate::stabilize::RepairNote>,
    /// `--stabilize`: the agent's own body, when what was sent differs.
    pub(crate) agent_request: Option<Arc<Mutex<BodyCopy>>>,
}

/// What the analysis thread is told.
pub(crate) enum Message {
    Exchange(Box<Job>),
    Stop,
}

/// The analysis thread's settings.
pub(crate) struct Settings {
    pub(crate) audit: AuditConfig,
    pub(crate) log: Option<ExchangeLog>,
    pub(crate) max_copy_bytes: usize,
    pub(crate) keep_bodies: bool,
    pub(crate) print_verdicts: bool,
    /// The writer catalogue, when not the built-in one.
    pub(crate) catalogue: Option<prompt_measure::catalogue::Catalogue>,
    pub(crate) diagnose: Option<Arc<Diagnose>>,
    /// The state directory sessions carry over in, and its bounds (`None`: this launch
    /// keeps nothing).
    pub(crate) state: Option<crate::sessions::StateConfig>,
    /// This launch's id, in each log line and state entry.
    pub(crate) launch: String,
}

/// A decompressed copy of a reply: `Err` says why it is not analysed. Output bounded by
/// `cap`: a small bomb cannot grow memory.
fn decoded(encoding: Option<&str>, body: Vec<u8>, cap: usize) -> Result<Vec<u8>, String> {
    let limit = cap as u64 + 1;
    let mut out = Vec::new();
    let read = match encoding.map(str::trim) {
        None | Some("" | "identity") => return Ok(body),
        Some("gzip" | "x-gzip") => flate2::read::MultiGzDecoder::new(&body[..])
            .take(limit)
            .read_to_end(&mut out),
        Some("deflate") => flate2::read::ZlibDecoder::new(&body[..])
            .take(limit)
            .read_to_end(&mut out),
        Some(other) => {
            return Err(format!(
                "a reply in `{}` encoding is forwarded but not read",
                prompt_core::input::head(other, 40)
            ));
        }
    };
    match read {
        Ok(_) if out.len() > cap => Err(format!("the reply decompresses to over {cap} bytes")),
        Ok(_) => Ok(out),
        Err(e) => Err(format!("the compressed reply could not be read: {e}")),
    }
}

/// The summary the analysis thread hands back when it stops.
pub(crate) type Finished = Option<AuditSummary>;

/// Runs until told to stop (or every sender is gone).
pub(crate) fn run(
    rx: Receiver<Message>,
    state: Arc<ProxyState>,
    mut settings: Settings,
    ready: tokio::sync::oneshot::Sender<()>,
) -> Finished {
    // Analysis never delays traffic: on a core it shares with the forwarding, it yields.
    crate::limits::yield_to_forwarding();
    let loaded = O200kBase::shared();
    // The proxy starts serving once the tokenizer is loaded: exchanges queued while it
    // loads (a second or more) would fill the queue and be dropped.
    let _ = ready.send(());
    let tokenizer = match loaded {
        Ok(t) => t,
        Err(e) => {
            let warning = format!("no analysis: the tokenizer could not be loaded: {e}");
            if settings.print_verdicts {
                eprintln!("cacheline proxy: {warning}");
            }
            state.warn(warning);
            // Drain so senders never block (they never do: try_send), then stop.
            for m in rx {
                if matches!(m, Message::Stop) {
                    break;
                }
            }
            return None;
        }
    };
    let mut auditor = Auditor::new(tokenizer, settings.audit);
    if let Some(c) = settings.catalogue.take() {
        auditor = auditor.with_catalogue(c);
    }
    let warn = |warning: String| {
        if settings.print_verdicts {
            eprintln!("cacheline proxy: {warning}");
        }
        state.warn(warning);
    };
    // Sessions earlier launches saw: held before the first exchange is analysed.
    let mut carried = settings
        .state
        .as_ref()
        .and_then(|config| crate::sessions::Carried::open(config, &settings.launch, &warn));
    if let Some(c) = carried.as_mut() {
        c.catch_up(&mut auditor, settings.log.as_ref(), &warn);
    }
    let mut line_no = 0u64;
    // The request's bytes, one buffer for every exchange (`copy::REUSED_BUFFER_BYTES`).
    let mut request_buffer: Vec<u8> = Vec::new();
    for (seq, message) in (1u64..).zip(rx) {
        let job = match message {
            Message::Exchange(job) => job,
            Message::Stop => break,
        };
        let cpu_before = crate::limits::thread_cpu_time();
        let mut report = RequestReport {
            forwarded: Some(Forwarded {
                request: seq,
                api: job.api,
                agent: job.agent.clone(),
                status: job.status,
                outcome: job.outcome,
                added_latency: job.added_latency,
            }),
            line: None,
            audit: Err(String::new()),
            body: None,
        };
        let cap = settings.max_copy_bytes;
        if job.outcome == Outcome::Unreachable {
            // Its body was never read: nothing to compare, nothing billed.
            report.audit = Err("not analysed: the upstream was not reached".to_owned());
        } else if job.request.is_over() {
            report.audit = Err(format!(
                "not analysed: body over {cap} bytes ({} bytes)",
                job.request.len
            ));
        } else {
            let mut request_bytes = std::mem::take(&mut request_buffer);
            job.request.bytes_into(&mut request_bytes);
            let request = request_bytes.as_slice();
            let agent_request = job
                .agent_request
                .as_ref()
                .and_then(|c| c.lock().ok().map(|c| c.bytes()));
            let response = if job.response.is_over() {
                Err(format!("the reply is over {cap} bytes"))
            } else {
                decoded(job.content_encoding.as_deref(), job.response.bytes(), cap)
            };
            // A compressed reply's id, for `--diagnose` (an identity one's was read on the
            // forwarding path).
            if let (Some(d), Some(dj), Ok(body)) =
                (&settings.diagnose, &job.diagnose, response.as_deref())
                && job.content_encoding.is_some()
                && job.outcome == Outcome::Complete
                && (200..300).contains(&job.status)
            {
                d.remember_reply(dj, body);
            }
            // A reply that cannot be read is logged as none: its usage is not known.
            let response = response.as_deref().ok();
            // Held while this exchange is numbered, logged, analysed and kept: another launch
            // writing the same state and log waits, and this one first holds what it wrote.
            let mut held = carried.as_mut().and_then(|c| c.lock(&warn));
            if let Some(h) = held.as_mut() {
                h.catch_up(&mut auditor, settings.log.as_ref(), &warn);
            }
            line_no += 1;
            let mut offset = None;
            let request_text = prompt_core::input::utf8_lossy(request);
            // The body's text and top-level object, when it is one JSON object, read once:
            // for the audit, and what lets the log line hold the body as JSON, not escaped.
            let object = match request_text {
                Cow::Borrowed(text) => prompt_core::raw_json::Object::parse(text)
                    .ok()
                    .map(|top| (text, top)),
                Cow::Owned(_) => None,
            };
            if let Some(log) = settings.log.as_mut() {
                let line = LogLine {
                    path: &job.path,
                    headers: &job.headers,
                    ts: job.ts,
                    request,
                    request_object: object.as_ref().map(|(text, _)| *text),
                    response,
                    diagnosed_against: job.diagnose.as_ref().and_then(|d| d.against.as_deref()),
                    launch: &settings.launch,
                    repair: job.repair.as_ref(),
                    agent_request: agent_request.as_deref(),
                };
                // The log's own numbering: lines of earlier and concurrent launches count.
                if let Some((line, at)) =
                    log.write_or_report(&line, &state, settings.print_verdicts)
                {
                    line_no = line;
                    offset = Some(at);
                }
            }
            report.line = Some(line_no);
            if settings.keep_bodies {
                report.body = Some(request_text.clone().into_owned());
            }
            // The exchange goes to the audit as it is: the log line above is for the file
            // only, never read back.
            let mut exchange = match object {
                Some((text, top)) => LoggedExchange::of_object(text, top),
                None => LoggedExchange::of(request_text),
            };
            exchange.response =
                response.map(|r| LoggedResponse::Text(prompt_core::input::utf8_lossy(r)));
            exchange.path = Some(job.path.clone());
            exchange.headers = job.headers.clone();
            exchange.ts = Some(job.ts);
            exchange.diagnosed_against = job.diagnose.as_ref().and_then(|d| d.against.clone());
            exchange.launch = Some(settings.launch.clone());
            exchange.repair = job.repair.clone();
            report.audit = auditor
                .push_exchange(line_no, exchange)
                .map(Box::new)
                .map_err(|e| format!("could not be read: {e}"));
            if let Ok(audit) = &report.audit {
                state.set_lifetime(auditor.lifetime_total());
                if let Some(h) = held.as_mut() {
                    let log = settings.log.as_ref().map(|l| l.path().to_owned());
                    h.keep(&auditor, audit, log, offset, &warn);
                }
            }
            drop(held);
            request_bytes.clear();
            request_bytes.shrink_to(crate::copy::REUSED_BUFFER_BYTES);
            request_buffer = request_bytes;
        }
        // A request not analysed still says what `--stabilize` did to it.
        if let (Err(why), Some(note)) = (&mut report.audit, &job.repair) {
            why.push_str(&match note.outcome {
                crate::stabilize::RepairOutcome::Refused => {
                    prompt_measure::report::refusal_clause(note)
                }
                crate::stabilize::RepairOutcome::Repaired => format!("; repaired: {}", note.entry),
            });
        }
        let row = report.page_row();
        if settings.print_verdicts {
            eprintln!("{}", verdict_line(&row));
        }
        state.record(row);
        if let (Some(before), Some(after)) = (cpu_before, crate::limits::thread_cpu_time()) {
            state.add_analysis_cpu(after.saturating_sub(before));
        }
    }
    Some(auditor.summary())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_gzip_bomb_is_cut_at_the_cap() {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![b'a'; 4 << 20]).unwrap();
        let bomb = e.finish().unwrap();
        assert!(bomb.len() < 64 << 10);
        let err = decoded(Some("gzip"), bomb.clone(), 1 << 20).unwrap_err();
        assert!(err.contains("over 1048576 bytes"), "{err}");
        assert_eq!(decoded(Some("gzip"), bomb, 8 << 20).unwrap().len(), 4 << 20);
        let err = decoded(Some("br"), vec![1, 2], 10).unwrap_err();
        assert!(
            err.contains("`br` encoding is forwarded but not read"),
            "{err}"
        );
    }
}
