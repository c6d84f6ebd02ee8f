//! A reply cut at any byte reaches the client cut there, and the proxy goes on serving.

mod common;

use std::sync::Arc;

use cacheline_proxy::ProxyConfig;
use common::*;
use proptest::prelude::*;

fn cut_then_whole(body: Vec<u8>, cut: usize) -> Script {
    Arc::new(move |n, _| {
        if n == 0 {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            vec![
                Step::Send(head.into_bytes()),
                Step::Send(body[..cut].to_vec()),
                Step::Close,
            ]
        } else {
            vec![Step::Send(whole("200 OK", &[], b"still serving"))]
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn a_reply_cut_at_any_byte_reaches_the_client_cut_there(
        body in proptest::collection::vec(any::<u8>(), 1..4096),
        at in any::<prop::sample::Index>(),
    ) {
        let cut = at.index(body.len());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let up = upstream(cut_then_whole(body.clone(), cut)).await;
            let proxy = proxy(ProxyConfig::default(), &up.url()).await;
            let (got, _) = raw(proxy.addr(), &post("/v1/chat/completions", &[], b"{}")).await;
            let (head, received) = split(&got);
            assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head}");
            // Exactly the bytes before the cut, then the connection ends short of the
            // announced length: the client sees an error, not a clean end.
            assert_eq!(received, body[..cut].to_vec());
            assert!(received.len() < body.len());
            let (again, _) = raw(proxy.addr(), &post("/v1/chat/completions", &[], b"{}")).await;
            assert!(again.ends_with(b"still serving"), "{}", String::from_utf8_lossy(&again));
            proxy.shutdown().await;
        });
    }
}
