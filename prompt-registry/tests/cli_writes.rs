//! Defect 7 of issue 20: `check` writes its diagnostics in few `write(2)` calls. The number
//! of calls is the kernel's (`syscw` in `/proc/self/io`), counted in a child process that
//! runs only `cli::run`: the test binary runs itself again with `CHILD` set. Time is
//! measured in docs/robustness.md, never here.

use std::cell::RefCell;
use std::io::{self, Write};
use std::process::{Command, Stdio};
use std::rc::Rc;

use prompt_registry::cli::{self, App};

/// Set in the child: the file it checks.
const CHILD: &str = "CACHELINE_CLI_WRITES_CHILD";

/// Malformed entries in the checked file: one diagnostic line each.
const ENTRIES: usize = 2_000;

/// Write system calls made by this process so far.
fn write_calls() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("syscw: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// Defect 7: `check` over a file of 2,000 malformed entries (2,000 diagnostic lines, on
/// standard error that is not a terminal) makes at most one `write(2)` per 20 lines; it
/// made about 21 per line, one per piece of each line's format.
#[test]
fn defect7_check_writes_its_diagnostics_in_few_write_calls() {
    if let Some(file) = std::env::var_os(CHILD) {
        let before = write_calls();
        let args = [std::ffi::OsString::from("my-agent"), "check".into(), file];
        let code = cli::run(App::new("my-agent", "1.0.0"), args);
        let calls = write_calls() - before;
        println!("writes={calls} code={code:?}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("cli-writes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("agent.toml");
    let entries: Vec<String> = (0..ENTRIES).map(|i| format!("\"Bad{i}\"")).collect();
    std::fs::write(
        &file,
        format!("[prompt]\nprefix_allow = [\n{}\n]\n", entries.join(",\n")),
    )
    .unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "defect7_check_writes_its_diagnostics_in_few_write_calls",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, &file)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = stdout
        .lines()
        .find_map(|l| l.strip_prefix("writes="))
        .unwrap_or_else(|| panic!("the child said: {stdout}"));
    let (calls, code) = report.split_once(" code=").unwrap();
    let calls: usize = calls.parse().unwrap();
    assert!(code.contains('2'), "check of a broken file exits 2: {code}");
    assert!(
        calls <= ENTRIES / 20,
        "{calls} write calls for {ENTRIES} diagnostic lines"
    );
}

/// The writes both streams received, in order: which stream (`o` or `e`) and the bytes.
type WriteLog = Rc<RefCell<Vec<(char, Vec<u8>)>>>;

/// A writer appending to a log shared by both streams, tagged, to see their order.
struct Tagged(WriteLog, char);

impl Write for Tagged {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().push((self.1, buf.to_vec()));
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The buffering keeps the order in which the command wrote to the two streams, and a
/// closed standard output still stops the command: the broken pipe reaches its writes.
#[test]
fn buffered_streams_keep_their_relative_order_and_report_a_closed_output() {
    let log = Rc::new(RefCell::new(Vec::new()));
    let (code, flushed) = cli::buffered(
        Tagged(log.clone(), 'o'),
        Tagged(log.clone(), 'e'),
        false,
        |out, err| {
            for i in 0..3 {
                writeln!(err, "warning {i}").unwrap();
                writeln!(err, "warning {i}b").unwrap();
                writeln!(out, "result {i}").unwrap();
            }
            0u8
        },
    );
    assert_eq!((code, flushed.is_ok()), (0, true));
    let log = log.borrow();
    let order: Vec<char> = log.iter().map(|(tag, _)| *tag).collect();
    assert_eq!(
        order,
        ['e', 'o', 'e', 'o', 'e', 'o'],
        "one write per run of lines"
    );
    assert_eq!(log[0].1, b"warning 0\nwarning 0b\n");

    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let (result, _) = cli::buffered(Closed, io::sink(), false, |out, _| {
        let line = "x".repeat(100);
        for _ in 0..1_000 {
            writeln!(out, "{line}")?;
        }
        Ok::<(), io::Error>(())
    });
    let e = result.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    assert_eq!(cli::finish(Err(Box::new(e)), &mut io::sink()), 0);
}
