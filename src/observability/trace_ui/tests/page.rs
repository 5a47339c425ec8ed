//! The trace UI's routes served over HTTP ([`router`]), as the manager's
//! server serves them on a listener of their own.
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;

use crate::observability::trace_ui::{TraceUi, router};

/// A minimal HTTP/1.1 GET over a raw socket: (status code, body).
async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tcp.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Installs `ui`'s layer as this thread's subscriber while the guard lives.
fn feed(ui: &TraceUi) -> tracing::subscriber::DefaultGuard {
    tracing::subscriber::set_default(tracing_subscriber::registry().with(ui.layer()))
}

async fn wait_for_viewers(ui: &TraceUi, n: usize) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while ui.viewers() < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the viewer subscribed");
}

#[tokio::test]
async fn the_events_endpoint_streams_a_pipeline_event_as_json() {
    let stop = CancellationToken::new();
    let ui = TraceUi::new(stop.clone());
    let _guard = feed(&ui);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let serving = tokio::spawn(
        axum::serve(listener, router(ui.clone()))
            .with_graceful_shutdown(stop.clone().cancelled_owned())
            .into_future(),
    );

    let (status, page) = http_get(addr, "/").await;
    assert_eq!(status, 200);
    assert!(page.contains("new EventSource(\"events\")"), "{page}");
    // A box's link: the chapter, from the binary, wherever it runs.
    let (status, chapter) = http_get(addr, "/docs/01-reflector.md").await;
    assert_eq!(status, 200);
    assert!(chapter.contains("# 1. Reflector"), "{chapter}");
    let (status, missing) = http_get(addr, "/docs/99-nothing.md").await;
    assert_eq!(status, 404);
    assert!(missing.contains("01-reflector.md"), "{missing}");

    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.writable().await.unwrap();
    let request = b"GET /events HTTP/1.1\r\nHost: test\r\n\r\n";
    assert_eq!(stream.try_write(request).unwrap(), request.len());
    wait_for_viewers(&ui, 1).await;
    tracing::info!(target: "tfjob_operator", "not a pipeline event: never sent");
    tracing::debug!(target: "pipeline", stage = "5 handler", key = "ns/job", depth = 3, "key added to the workqueue");

    // Read the (chunked) response until the first complete data line.
    let data = tokio::time::timeout(Duration::from_secs(10), async {
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        loop {
            let found = text
                .split_once("\ndata: ")
                .and_then(|(_, rest)| rest.split_once('\n'));
            if let Some((data, _)) = found {
                break data.to_owned();
            }
            stream.readable().await.unwrap();
            match stream.try_read(&mut buf) {
                Ok(0) => panic!("the stream closed: {text}"),
                Ok(n) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("a data line");
    let message: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(message["stage"], "5 handler");
    assert_eq!(message["key"], "ns/job");
    assert_eq!(message["msg"], "key added to the workqueue");
    assert_eq!(message["depth"], 3, "the queue's depth, as traced");
    assert_eq!(message["seq"], 1, "the first message sent");

    // Shutdown ends the open stream, so the server's graceful shutdown
    // finishes instead of waiting on it forever.
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("the server stops with a viewer connected")
        .unwrap()
        .unwrap();
}
