//! Output helpers shared by the commands: numbers, progress bars, positioned JSON errors.

use std::io::{IsTerminal, Write};
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use prompt_core::input::{self, CONFIG_LIMIT};
use prompt_measure::PriceTable;
use prompt_registry::cli;

/// `0.123` → `12.3%`.
pub(crate) fn pct(share: f64) -> String {
    format!("{:.1}%", 100.0 * share)
}

/// `part / whole` as a percentage, 0 when `whole` is 0.
pub(crate) fn pct_of(part: u64, whole: u64) -> String {
    if whole == 0 {
        "0.0%".to_owned()
    } else {
        pct(part as f64 / whole as f64)
    }
}

pub(crate) use prompt_measure::audit::thousands;

/// A progress bar on standard error when it is a terminal; hidden (and free) when piped, so
/// piped output carries nothing extra.
pub(crate) fn progress(len: u64, template: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// Writes a JSON error as `file:line:col: error: message`, the position taken out of
/// serde_json's text so it is said once, where every diagnostic says it.
pub(crate) fn write_json_error(err: &mut dyn Write, path: &Path, e: &serde_json::Error) {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = text.strip_suffix(&suffix).unwrap_or(&text);
    let _ = writeln!(
        err,
        "{}:{}:{}: error: {message}",
        path.display(),
        e.line(),
        e.column()
    );
}

/// The price table of `--prices FILE` (default: [`PriceTable::default`]). Problems are
/// written to `err`; `None` then.
pub(crate) fn load_prices(path: Option<&Path>, err: &mut dyn Write) -> Option<PriceTable> {
    let Some(path) = path else {
        return Some(PriceTable::default());
    };
    let text = match input::read_text(path, CONFIG_LIMIT) {
        Ok(text) => text,
        Err(e) => {
            cli::write_error(err, None, &e);
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(prices) => Some(prices),
        Err(e) => {
            write_json_error(err, path, &e);
            None
        }
    }
}

/// The prices of `cacheline audit --prices FILE`: the price table, and under its
/// `"lifetime"` key the lifetime economics' prices
/// ([`prompt_measure::lifetime::LifetimePrices`]: the longer lifetimes' writes, the models'
/// base input prices in USD per million tokens). Problems are written to `err`; `None`
/// then.
pub(crate) fn load_audit_prices(
    path: Option<&Path>,
    err: &mut dyn Write,
) -> Option<(PriceTable, prompt_measure::lifetime::LifetimePrices)> {
    use prompt_measure::lifetime::LifetimePrices;
    let Some(path) = path else {
        return Some((PriceTable::default(), LifetimePrices::default()));
    };
    let text = match input::read_text(path, CONFIG_LIMIT) {
        Ok(text) => text,
        Err(e) => {
            cli::write_error(err, None, &e);
            return None;
        }
    };
    let first = match serde_json::from_str::<PriceTable>(&text) {
        Ok(table) => return Some((table, LifetimePrices::default())),
        Err(e) => e,
    };
    // Not a bare price table: one with a "lifetime" key, read apart.
    let mut value = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Object(map)) if map.contains_key("lifetime") => map,
        _ => {
            write_json_error(err, path, &first);
            return None;
        }
    };
    let lifetime = value.remove("lifetime").unwrap_or_default();
    let lifetime = match serde_json::from_value::<LifetimePrices>(lifetime) {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(err, "{}: error: \"lifetime\": {e}", path.display());
            return None;
        }
    };
    match serde_json::from_value::<PriceTable>(serde_json::Value::Object(value)) {
        Ok(table) => Some((table, lifetime)),
        Err(e) => {
            let _ = writeln!(err, "{}: error: {e}", path.display());
            None
        }
    }
}
