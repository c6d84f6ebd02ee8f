//! `scripts/llama-server.sh`: every file of an instance (URL, pid, log, the log's rotation)
//! sits beside its URL file, and no instance touches another's files. Needs llama-server
//! installed (`scripts/llama-server.sh install`); without it the test prints why it is
//! skipped, and under `CI=true` fails instead.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use prompt_llama::{ChatOptions, LlamaClient, ServerUrl, URL_FILE_ENV};

use crate::live_llama::{LOG_ENV, Spawned, in_ci, process_dir, say, script, spawn_instance};

/// Whether llama-server and the model are installed, or why not.
fn installed() -> Result<(), String> {
    let output = Command::new("bash")
        .arg(script("llama-server.sh"))
        .arg("installed")
        .output()
        .map_err(|e| format!("cannot run scripts/llama-server.sh: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
    }
}

/// The files of the instance whose URL file is `url_file`.
struct Files {
    url: PathBuf,
    pid: PathBuf,
    log: PathBuf,
    rotated: PathBuf,
}

impl Files {
    fn of(dir: &Path, name: &str) -> Self {
        let file = |ext: &str| dir.join(format!("{name}.{ext}"));
        Self {
            url: file("url"),
            pid: file("pid"),
            log: file("log"),
            rotated: file("log.1"),
        }
    }
}

/// What can be seen of a file: its inode and length (`None`: it does not exist).
fn seen(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.ino(), m.len()))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Starts `scripts/llama-server.sh instance` with `url_file` (and `log`, when given).
fn start(dir: &Path, name: &str, log: Option<&Path>) -> Result<(String, Spawned), String> {
    let url_file = dir.join(format!("{name}.url"));
    let mut env: Vec<(&str, &OsStr)> = vec![(URL_FILE_ENV, url_file.as_os_str())];
    if let Some(log) = log {
        env.push((LOG_ENV, log.as_os_str()));
    }
    spawn_instance(
        "llama-server.sh",
        &["instance"],
        &env,
        &dir.join(format!("{name}-script.log")),
    )
}

/// Stops an instance (its stdin closes) and waits until its pid file is gone.
fn stop(instance: Spawned, files: &Files) {
    drop(instance);
    let deadline = Instant::now() + Duration::from_secs(30);
    while files.pid.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !files.pid.exists(),
        "{} stayed after stop",
        files.pid.display()
    );
}

/// One short generation, which the server logs.
fn generate(url: &str) {
    LlamaClient::new(url)
        .chat(
            br#"[{"role":"user","content":"hi"}]"#,
            &ChatOptions::greedy_uncached(1),
        )
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Waits (at most 10 s) for `path` to grow past `len`.
fn grows(path: &Path, len: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if seen(path).is_some_and(|(_, now)| now > len) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn a_second_instance_leaves_the_first_instance_s_log_and_pid_untouched() {
    let test = "a_second_instance_leaves_the_first_instance_s_log_and_pid_untouched";
    if let Err(why) = installed() {
        assert!(
            !in_ci(),
            "{test}: CI=true and llama-server is not installed: {why}"
        );
        say(&format!(
            "SKIPPED {test}: llama-server is not installed: {why}"
        ));
        return;
    }
    let dir = process_dir("instances").unwrap_or_else(|e| panic!("{e}"));
    let (a, b) = (Files::of(&dir, "a"), Files::of(&dir, "b"));

    // The first instance: its URL, pid and log beside its URL file.
    let (url_a, first) = start(&dir, "a", None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&a.url).trim(), url_a);
    let pid_a = read(&a.pid);
    generate(&url_a);
    let log_a = seen(&a.log).unwrap_or_else(|| panic!("no log beside {}", a.url.display()));
    assert!(seen(&a.rotated).is_none());

    // A second instance in the same folder: files of its own, the first's untouched.
    let (url_b, second) = start(&dir, "b", None).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(url_a, url_b);
    assert_eq!(read(&b.url).trim(), url_b);
    assert!(b.pid.exists() && b.log.exists(), "b's files beside b.url");
    // Restarted: its log rotates beside it, and its URL file names the new server.
    let mut b_url = ServerUrl::file(&b.url);
    assert_eq!(b_url.url().unwrap_or_else(|e| panic!("{e}")), url_b);
    stop(second, &b);
    let (url_b2, second) = start(&dir, "b", None).unwrap_or_else(|e| panic!("{e}"));
    assert!(b.rotated.exists(), "b's previous log beside it");
    let now = b_url.url().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        now, url_b2,
        "the URL file read again names the restarted server"
    );
    LlamaClient::new(now)
        .health()
        .unwrap_or_else(|e| panic!("{e}"));

    // A third whose log is the first's (a CACHELINE_LLAMA_LOG shared by mistake): refused.
    let refused = start(&dir, "c", Some(&a.log));
    let error = refused
        .err()
        .unwrap_or_else(|| panic!("an instance was started on another instance's log"));
    assert!(
        error.contains("is written by another running llama-server"),
        "{error}"
    );

    // The first instance: the same pid file, its log where it was (the same file, not
    // rotated), and its server still writing to it.
    assert_eq!(read(&a.pid), pid_a);
    assert_eq!(read(&a.url).trim(), url_a);
    let (inode, len) = seen(&a.log).unwrap_or_else(|| panic!("a's log is gone"));
    assert_eq!(inode, log_a.0, "a's log was moved");
    assert!(seen(&a.rotated).is_none(), "a's log was rotated");
    assert!(
        Path::new(&format!("/proc/{}", pid_a.trim())).exists(),
        "a's server is running"
    );
    generate(&url_a);
    assert!(grows(&a.log, len), "a's server still writes its own log");
    say(&format!(
        "{test}: a at {url_a}, b at {url_b} then {url_b2}, each with its files in {}",
        dir.display()
    ));
    stop(second, &b);
    stop(first, &a);
}
