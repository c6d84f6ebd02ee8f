//! # prompt-llama
//!
//! Live measurements on a llama.cpp server (`llama-server`).
//!
//! - [`LlamaClient`]: a blocking OpenAI-compatible client. It sends the library's serialized
//!   request as `messages` with `cache_prompt`, and reads back llama.cpp's `timings`
//!   (`prompt_n`: tokens re-processed, `cache_n`: tokens reused) and `usage`;
//! - [`bench`](mod@bench): a conversation sent as the library composes it and as
//!   replace-at-head composes it, turn by turn (`cacheline bench-live` sends
//!   `prompt-reference`'s scripted session at its compact size);
//! - [`fleet`]: sessions played through a router in front of several replicas, per routing
//!   policy (`cacheline bench-fleet`, `scripts/fleet.sh`);
//! - [`probe`]: does the model follow a system-prompt update, depending on where it is put.
//!
//! The server URL comes from [`locate_server`]: `CACHELINE_LLAMA_URL`, else the file that
//! `scripts/llama-server.sh start` writes; [`ServerUrl`] reads that file again after a
//! restart. [`NewTokens`] counts each request's new tokens by the server's own tokenizer,
//! to set beside what it re-processed (the reply's `UsageFigures`, read by `prompt-wire`).
//! See `docs/live-llama.md`.
//!
//! Every error names the endpoint it was talking to; here nothing listens there:
//!
//! ```
//! use prompt_llama::{read_url_file, ChatOptions, LiveError, LlamaClient};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A port nothing listens on, written as `scripts/llama-server.sh start` writes its URL.
//! let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
//! let file = std::env::temp_dir().join(format!("prompt-llama-doc-{}.url", std::process::id()));
//! std::fs::write(&file, format!("http://127.0.0.1:{port}\n"))?;
//!
//! let client = LlamaClient::new(read_url_file(&file)?);
//! std::fs::remove_file(&file)?;
//! assert_eq!(client.base_url(), format!("http://127.0.0.1:{port}"));
//!
//! let messages = br#"[{"role":"user","content":"hi"}]"#;
//! let Err(error) = client.chat(messages, &ChatOptions::cached(8)) else {
//!     panic!("nothing listens on port {port}");
//! };
//! assert!(matches!(error, LiveError::Transport { .. }));
//! // The message shows what failed, not only the URL.
//! let message = error.to_string();
//! let head = format!("http://127.0.0.1:{port}/v1/chat/completions: transport failed: ");
//! assert!(message.starts_with(&head) && message.len() > head.len(), "{message}");
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::path::PathBuf;

pub mod bench;
mod client;
pub mod fleet;
pub mod probe;
mod tokens;

pub use client::{
    ChatOptions, ChatReply, LiveError, LlamaClient, MAX_RESPONSE_BYTES, Timings, Usage,
};
pub use tokens::{NewTokens, TokenCount};

/// Environment variable holding the server's base URL.
pub const URL_ENV: &str = "CACHELINE_LLAMA_URL";
/// Environment variable naming the file that holds the URL (default: [`default_url_file`]).
pub const URL_FILE_ENV: &str = "CACHELINE_LLAMA_URL_FILE";

/// Where `scripts/llama-server.sh start` writes the URL when `CACHELINE_LLAMA_URL_FILE` is
/// unset: `$CACHELINE_CACHE_DIR/llama-server.url`, else
/// `${XDG_CACHE_HOME:-$HOME/.cache}/cacheline/llama-server.url`.
pub fn default_url_file() -> Option<PathBuf> {
    let nonempty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let cache = if let Some(dir) = nonempty("CACHELINE_CACHE_DIR") {
        PathBuf::from(dir)
    } else if let Some(xdg) = nonempty("XDG_CACHE_HOME") {
        PathBuf::from(xdg).join("cacheline")
    } else {
        PathBuf::from(nonempty("HOME")?)
            .join(".cache")
            .join("cacheline")
    };
    Some(cache.join("llama-server.url"))
}

/// Environment variable naming the server's log instead of the one beside the URL file.
pub const LOG_ENV: &str = "CACHELINE_LLAMA_LOG";

/// The URL file `scripts/llama-server.sh` uses: `CACHELINE_LLAMA_URL_FILE`, else
/// [`default_url_file`].
pub fn url_file() -> Option<PathBuf> {
    match std::env::var_os(URL_FILE_ENV).filter(|v| !v.is_empty()) {
        Some(path) => Some(PathBuf::from(path)),
        None => default_url_file(),
    }
}

/// Where `scripts/llama-server.sh start` writes the server's log: `CACHELINE_LLAMA_LOG`,
/// else beside the URL file ([`url_file`]), its `.url` replaced by `.log` (the previous
/// run's in `.log.1`), as the pid file is, so that each instance's files are its own.
pub fn default_log_file() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(LOG_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(path));
    }
    Some(instance_file(&url_file()?, "log"))
}

/// The file of the instance whose URL file is `url_file`, with extension `ext` (`pid`,
/// `log`): `name.url` → `name.ext`, as `scripts/llama-server.sh` names them.
pub fn instance_file(url_file: &std::path::Path, ext: &str) -> PathBuf {
    if url_file.extension().is_some_and(|e| e == "url") {
        return url_file.with_extension(ext);
    }
    let mut name = url_file.as_os_str().to_owned();
    name.push(".");
    name.push(ext);
    PathBuf::from(name)
}

/// The most a URL file is read: a URL is far shorter; anything longer is not one.
pub const URL_FILE_LIMIT: u64 = 4096;

/// The text of a URL file (as `scripts/llama-server.sh` and `scripts/fleet.sh` write them),
/// at most [`URL_FILE_LIMIT`] bytes; a longer file is an `InvalidData` error.
pub fn read_url_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(URL_FILE_LIMIT + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > URL_FILE_LIMIT {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("longer than {URL_FILE_LIMIT} bytes: not a URL file"),
        ));
    }
    Ok(text)
}

/// Where the server is, read again whenever asked: `scripts/llama-server.sh start` writes a
/// restarted server's new URL (a new free port) into the same URL file, so an agent that
/// keeps running across a server restart reads it again ([`ServerUrl::refresh`]) instead of
/// keeping the URL it read at start.
///
/// ```
/// use prompt_llama::ServerUrl;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let file = std::env::temp_dir().join(format!("prompt-llama-restart-{}.url", std::process::id()));
/// std::fs::write(&file, "http://127.0.0.1:8080\n")?;
/// let mut server = ServerUrl::file(&file);
/// assert_eq!(server.refresh()?.as_deref(), Some("http://127.0.0.1:8080")); // the first read
/// assert_eq!(server.refresh()?, None); // unchanged
/// std::fs::write(&file, "http://127.0.0.1:8123\n")?; // the server restarted on another port
/// assert_eq!(server.refresh()?.as_deref(), Some("http://127.0.0.1:8123"));
/// assert_eq!(server.url()?, "http://127.0.0.1:8123");
/// std::fs::remove_file(&file)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    from: UrlFrom,
    last: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum UrlFrom {
    Env(String),
    File(PathBuf),
}

impl ServerUrl {
    /// `CACHELINE_LLAMA_URL` when it is set (a fixed URL), else the URL file
    /// (`CACHELINE_LLAMA_URL_FILE`, else [`default_url_file`]), which need not exist yet.
    pub fn locate() -> Result<Self, LiveError> {
        if let Some(url) = std::env::var(URL_ENV).ok().filter(|u| !u.trim().is_empty()) {
            return Ok(Self {
                from: UrlFrom::Env(url.trim().to_owned()),
                last: None,
            });
        }
        let file = url_file().ok_or_else(|| LiveError::UrlFile {
            path: PathBuf::from("llama-server.url"),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{URL_ENV} is unset and HOME is unknown"),
            ),
        })?;
        Ok(Self::file(file))
    }

    /// The URL in `path`, a URL file as `scripts/llama-server.sh` writes it.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self {
            from: UrlFrom::File(path.into()),
            last: None,
        }
    }

    /// Where the URL comes from: `CACHELINE_LLAMA_URL` or the file's path.
    pub fn source(&self) -> String {
        match &self.from {
            UrlFrom::Env(_) => URL_ENV.to_owned(),
            UrlFrom::File(path) => path.display().to_string(),
        }
    }

    /// The URL now: the file read again (a missing or empty file is
    /// [`LiveError::UrlFile`], naming it: no server is running).
    pub fn url(&mut self) -> Result<String, LiveError> {
        let url = match &self.from {
            UrlFrom::Env(url) => url.clone(),
            UrlFrom::File(path) => {
                let text = read_url_file(path).map_err(|source| LiveError::UrlFile {
                    path: path.clone(),
                    source,
                })?;
                let url = text.trim();
                if url.is_empty() {
                    return Err(LiveError::UrlFile {
                        path: path.clone(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "empty: no server is running (scripts/llama-server.sh start)",
                        ),
                    });
                }
                url.to_owned()
            }
        };
        self.last = Some(url.clone());
        Ok(url)
    }

    /// Reads the URL again; `Some(url)` when it differs from the one read last (the first
    /// read included): the server restarted, and a client made for the old URL is stale.
    pub fn refresh(&mut self) -> Result<Option<String>, LiveError> {
        let before = self.last.take();
        let now = self.url()?;
        Ok((before.as_deref() != Some(now.as_str())).then_some(now))
    }
}

/// Where the server is, or why none is configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerLocation {
    /// A URL, and where it came from.
    Found {
        /// The base URL.
        url: String,
        /// `CACHELINE_LLAMA_URL` or the file it was read from.
        source: String,
    },
    /// No URL: the reason, for a skip message.
    Absent {
        /// What was looked at.
        reason: String,
    },
}

/// Finds the server: `CACHELINE_LLAMA_URL`, else the URL file (`CACHELINE_LLAMA_URL_FILE`
/// or [`default_url_file`]). Does not contact it.
pub fn locate_server() -> Result<ServerLocation, LiveError> {
    if let Some(url) = std::env::var(URL_ENV).ok().filter(|u| !u.trim().is_empty()) {
        return Ok(ServerLocation::Found {
            url: url.trim().to_owned(),
            source: URL_ENV.to_owned(),
        });
    }
    let Some(file) = url_file() else {
        return Ok(ServerLocation::Absent {
            reason: format!("{URL_ENV} is unset and HOME is unknown"),
        });
    };
    match read_url_file(&file) {
        Ok(text) if !text.trim().is_empty() => Ok(ServerLocation::Found {
            url: text.trim().to_owned(),
            source: file.display().to_string(),
        }),
        Ok(_) => Ok(ServerLocation::Absent {
            reason: format!("{URL_ENV} is unset and {} is empty", file.display()),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ServerLocation::Absent {
            reason: format!(
                "{URL_ENV} is unset and {} does not exist (run `scripts/llama-server.sh start`)",
                file.display()
            ),
        }),
        Err(source) => Err(LiveError::UrlFile { path: file, source }),
    }
}

#[cfg(test)]
mod url_file_tests {
    use super::*;

    /// As `scripts/llama-server.sh` names them: `NAME.url` → `NAME.pid`, `NAME.log`; a URL
    /// file named otherwise gets the extension appended.
    #[test]
    fn each_instance_file_sits_beside_its_url_file() {
        let url = std::path::Path::new("/tmp/agent-a/llama.url");
        assert_eq!(
            instance_file(url, "log"),
            PathBuf::from("/tmp/agent-a/llama.log")
        );
        assert_eq!(
            instance_file(url, "pid"),
            PathBuf::from("/tmp/agent-a/llama.pid")
        );
        assert_eq!(
            instance_file(std::path::Path::new("/tmp/b/server"), "log"),
            PathBuf::from("/tmp/b/server.log")
        );
    }

    #[test]
    fn a_url_file_is_read_up_to_its_limit_and_a_longer_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("prompt-llama-url-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (short, long) = (dir.join("ok.url"), dir.join("huge.url"));
        std::fs::write(&short, "http://127.0.0.1:8080\n").unwrap();
        std::fs::write(&long, "x".repeat(URL_FILE_LIMIT as usize + 1)).unwrap();
        assert_eq!(read_url_file(&short).unwrap(), "http://127.0.0.1:8080\n");
        let err = read_url_file(&long).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(
            fleet::fleet_url(&dir, "ok").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert!(matches!(
            fleet::fleet_url(&dir, "huge"),
            Err(LiveError::UrlFile { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
