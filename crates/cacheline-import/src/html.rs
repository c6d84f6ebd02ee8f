//! `--html FILE`: one self-contained page in the proxy page's look (no script from a
//! network, no CDN, no font): each session a box, each request a bar of its prompt —
//! read from cache, re-processed (lost), new — the breaks marked with their cause.

use std::fmt::Write as _;

use crate::report::{Report, is_break, moment_label, pct, thousands, usd};

/// Text made safe inside HTML.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// What the import report adds to [`prompt_measure::report::REQUESTS_STYLE`].
const STYLE: &str = "
  table { border-collapse: collapse; margin: 0 0 1em; }
  td, th { padding: 1px .6em; text-align: right; } td:first-child, th:first-child { text-align: left; }
";

/// The most sessions drawn (the ones that lost most); the rest are in the totals.
const MAX_SESSIONS: usize = 200;
/// The most requests drawn per session.
const MAX_ROWS: usize = 400;

/// The page.
pub fn page(report: &Report) -> String {
    let mut out = String::new();
    let t = &report.totals;
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>cacheline import</title>\n<style>\n{}{STYLE}</style>\n</head>\n<body>\n<h1>cacheline import — sessions</h1>\n",
        prompt_measure::report::REQUESTS_STYLE
    );
    let _ = writeln!(
        out,
        "<div id=\"totals\">{} sessions, {} requests ({} exact); prompts {} tokens, cache read {}; cost {} , lost to the cache {} ({}), {} breaks</div>",
        t.sessions,
        t.requests,
        t.exact,
        thousands(t.input_tokens),
        pct(t.cache_read_tokens as f64, t.input_tokens as f64),
        usd(t.cost),
        usd(t.lost_cost),
        pct(t.lost_units, t.cost_units),
        t.breaks
    );
    for (title, groups) in [("cause", &report.causes), ("moment", &report.moments)] {
        if groups.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "<table><tr><th>{title}</th><th>requests</th><th>tokens lost</th><th>lost</th><th>share of the loss</th></tr>"
        );
        for g in groups {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&g.name),
                g.totals.requests,
                thousands(g.totals.tokens_lost),
                usd(g.totals.lost_cost),
                pct(g.totals.lost_units, t.lost_units)
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("<div class=\"legend\"><span class=\"cached\">cached</span><span class=\"reprocessed\">re-processed</span><span class=\"new\">new</span></div>\n<div id=\"sessions\">\n");
    let mut ranked: Vec<_> = report.sessions.iter().collect();
    ranked.sort_by(|a, b| {
        b.lost_units
            .total_cmp(&a.lost_units)
            .then(a.session.cmp(&b.session))
    });
    for s in ranked.into_iter().take(MAX_SESSIONS) {
        let widest = s
            .requests
            .iter()
            .map(|r| r.input_tokens)
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        let _ = writeln!(
            out,
            "<section class=\"session\"><h2>{} {} — {} — {} requests, {} lost of {} ({})</h2>",
            esc(s.agent.name()),
            esc(&s.session),
            esc(&s.project),
            s.requests.len(),
            usd(s.lost_cost),
            usd(s.cost),
            pct(s.lost_units, s.cost_units)
        );
        for r in s.requests.iter().take(MAX_ROWS) {
            let lost = r
                .tokens_lost
                .min(r.input_tokens.saturating_sub(r.cache_read_tokens));
            let fresh = r
                .input_tokens
                .saturating_sub(r.cache_read_tokens)
                .saturating_sub(lost);
            let w = |n: u64| 100.0 * n as f64 / widest;
            let verdict = match r.cause {
                None => "extends its predecessor".to_owned(),
                Some(c) => format!(
                    "{c}{} at {}{}{}",
                    if r.exact { "" } else { " (inferred)" },
                    moment_label(r.at),
                    if r.tokens_lost > 0 {
                        format!("; {} tokens lost", thousands(r.tokens_lost))
                    } else {
                        String::new()
                    },
                    r.writer
                        .as_ref()
                        .map(|w| format!(" — {w}"))
                        .unwrap_or_default()
                ),
            };
            let _ = writeln!(
                out,
                "<div class=\"req{}\"><span class=\"num\">#{}</span><span>{} {}<br>{} tokens, read {}</span><div><div class=\"bar\"><span class=\"seg cached\" style=\"width:{:.2}%\"></span><span class=\"seg reprocessed\" style=\"width:{:.2}%\"></span><span class=\"seg new\" style=\"width:{:.2}%\"></span></div><div class=\"verdict\">{}</div></div></div>",
                if is_break(r) { " break" } else { "" },
                r.index,
                esc(r.time.as_deref().unwrap_or("")),
                esc(&r.model),
                thousands(r.input_tokens),
                thousands(r.cache_read_tokens),
                w(r.cache_read_tokens),
                w(lost),
                w(fresh),
                esc(&verdict)
            );
        }
        out.push_str("</section>\n");
    }
    out.push_str("</div>\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn markup_in_names_is_escaped() {
        assert_eq!(esc("<script>\"&'"), "&lt;script&gt;&quot;&amp;&#39;");
    }
}
