//! The open-files limit: a test binary of its own, since it lowers its process' soft limit
//! as a shell's common default of 1,024 would (here 256, with 300 streams: the same ratio).

mod common;

use std::sync::Arc;
use std::time::Duration;

use cacheline_proxy::ProxyConfig;
use common::*;
use tokio::sync::Notify;

#[allow(unsafe_code)]
fn nofile() -> libc::rlimit {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes one rlimit through a pointer to a live local.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) }, 0);
    l
}

#[allow(unsafe_code)]
fn set_soft(soft: libc::rlim_t) {
    let mut l = nofile();
    l.rlim_cur = soft;
    // SAFETY: setrlimit(2) reads one rlimit from a live local.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) }, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_open_files_limit_is_raised_to_the_hard_one_and_concurrent_streams_are_served() {
    let hard = nofile().rlim_max;
    let streams = 300;
    // Client, proxy and upstream in one process: four descriptors per stream.
    if hard < 4 * streams as libc::rlim_t + 256 {
        eprintln!("SKIPPED: the hard open-files limit ({hard}) is too low for this test");
        return;
    }
    set_soft(256);
    let go = Arc::new(Notify::new());
    let g = go.clone();
    let up = upstream(Arc::new(move |_, _| {
        vec![
            Step::Wait(g.clone()),
            Step::Send(whole("200 OK", &[], b"{}")),
        ]
    }))
    .await;
    let proxy = proxy(ProxyConfig::default().with_queue(2048), &up.url()).await;
    assert_eq!(nofile().rlim_cur, hard, "the soft limit is the hard one");
    let addr = proxy.addr();
    let tasks: Vec<_> = (0..streams)
        .map(|i| {
            tokio::spawn(async move {
                let body = format!(
                    r#"{{"model":"gpt-4o","messages":[{{"role":"user","content":"stream {i}"}}]}}"#
                );
                let (got, _) = raw(addr, &post("/v1/chat/completions", &[], body.as_bytes())).await;
                got.starts_with(b"HTTP/1.1 200 OK\r\n")
            })
        })
        .collect();
    // Every stream open at once: each request waits at the upstream for all the others.
    for _ in 0..600 {
        if up.received().len() == streams {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        up.received().len(),
        streams,
        "every stream reached the upstream"
    );
    for _ in 0..streams {
        go.notify_one();
    }
    let mut ok = 0;
    for t in tasks {
        ok += usize::from(t.await.unwrap());
    }
    assert_eq!(ok, streams, "every stream answered");
    proxy.shutdown().await;
}
