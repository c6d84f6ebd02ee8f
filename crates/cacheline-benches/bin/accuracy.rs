//! The accuracy benchmark: `cargo run --release -p cacheline-benches --bin accuracy -- --seed 1 --markdown`
//! prints the table docs/benchmarks.md holds; `--findings` lists the misnamed and missed
//! injections and any false break.

use std::process::ExitCode;

use cacheline_benches::accuracy::{self, Config};
use clap::Parser;

/// The accuracy benchmark of the comparison engine.
#[derive(Parser)]
struct Args {
    /// The seed of the generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the Markdown table (what docs/benchmarks.md holds).
    #[arg(long)]
    markdown: bool,
    /// Print examples of each misnamed or missed injection and each false break.
    #[arg(long)]
    findings: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = Config::published(args.seed);
    match accuracy::run(&accuracy::workspace_root(), config) {
        Ok(report) => {
            if args.markdown || !args.findings {
                print!("{}", accuracy::markdown(&report, &config));
            }
            if args.findings {
                print!("{}", accuracy::findings(&report));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("accuracy: {e}");
            ExitCode::FAILURE
        }
    }
}
