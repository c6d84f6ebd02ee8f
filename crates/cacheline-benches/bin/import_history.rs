//! `import-history HOME MIB [AGENT…]`: writes MIB mebibytes of agent sessions under HOME
//! (copies of the fixture stores with fresh ids) for `cacheline import`'s benchmark
//! (docs/benchmarks.md).

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(home), Some(mib)) = (
        args.first(),
        args.get(1).and_then(|m| m.parse::<u64>().ok()),
    ) else {
        eprintln!(
            "usage: import-history HOME MIB [claude-code|claude-code-rebuilt|codex|gemini-cli|qwen-code …]"
        );
        return std::process::ExitCode::from(2);
    };
    let agents: Vec<&str> = args[2..].iter().map(String::as_str).collect();
    match cacheline_benches::import_history::write_history(
        std::path::Path::new(home),
        mib << 20,
        &agents,
    ) {
        Ok((bytes, files)) => {
            println!("{bytes} bytes in {files} files under {home}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("import-history: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
