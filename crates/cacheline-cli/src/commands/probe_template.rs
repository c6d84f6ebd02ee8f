//! `cacheline probe-template`: how a chat template treats appended updates.

use std::io::Write;
use std::path::PathBuf;

use prompt_core::input;
use prompt_template_probe::{ProbeOptions, TEMPLATE_LIMIT, probe_with};

/// Arguments of `probe-template`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProbeArgs {
    /// The chat template file (Jinja), e.g. from GGUF metadata or llama-server `/props`;
    /// `-` reads standard input.
    file: PathBuf,
    /// Print JSON: `mid_system`, `prefix_stable`, `delivery`, and details.
    #[arg(long)]
    json: bool,
    /// The `bos_token` the template sees.
    #[arg(long, default_value = "<s>")]
    bos_token: String,
    /// The `eos_token` the template sees.
    #[arg(long, default_value = "</s>")]
    eos_token: String,
}

/// Exit 0 when a delivery style was found, 1 on a refusal, 2 when the file cannot be read.
pub(crate) fn run(
    args: &ProbeArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn std::error::Error>> {
    let source = match input::read_text(&args.file, TEMPLATE_LIMIT) {
        Ok(s) => s,
        Err(e) => {
            prompt_registry::cli::write_error(err, None, &e);
            return Ok(2);
        }
    };
    // A template copied from JSON (`tokenizer_config.json`, `/props`) may still be quoted.
    let source = match serde_json::from_str::<String>(source.trim()) {
        Ok(unquoted) => unquoted,
        Err(_) => source,
    };
    let mut options = ProbeOptions::default();
    options.render.bos_token.clone_from(&args.bos_token);
    options.render.eos_token.clone_from(&args.eos_token);
    let report = probe_with(&source, &options);
    if args.json {
        let mut value = report.to_json();
        if let Some(map) = value.as_object_mut() {
            map.insert(
                "template".to_owned(),
                serde_json::Value::String(args.file.display().to_string()),
            );
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        writeln!(out, "template:      {}", args.file.display())?;
        write!(out, "{report}")?;
    }
    Ok(if report.delivery_style().is_some() {
        0
    } else {
        1
    })
}
