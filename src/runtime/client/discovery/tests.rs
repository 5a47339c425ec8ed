use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::*;

/// A client whose transport answers each request with `answer(path)`
/// (status, JSON body): the retry logic on paused time. What a real server
/// answers is shown on the local control plane (tests/e2e).
pub(crate) fn scripted_client(
    answer: impl Fn(&str) -> (u16, String) + Send + Sync + 'static,
) -> Client {
    let answer = Arc::new(answer);
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (status, body) = answer(req.uri().path());
        async move {
            http::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(body.into_bytes()))
        }
    });
    Client::new(service, "default")
}

/// A `Status` body with `code`.
pub(crate) fn status(code: u16) -> (u16, String) {
    (
        code,
        format!(
            r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"scripted {code}","reason":"InternalError","code":{code}}}"#
        ),
    )
}

/// `/apis/{group}` listing `versions`.
pub(crate) fn api_group(group: &str, versions: &[&str]) -> (u16, String) {
    let versions: Vec<String> = versions
        .iter()
        .map(|v| format!(r#"{{"groupVersion":"{group}/{v}","version":"{v}"}}"#))
        .collect();
    (
        200,
        format!(
            r#"{{"kind":"APIGroup","apiVersion":"v1","name":"{group}","versions":[{}]}}"#,
            versions.join(",")
        ),
    )
}

/// `/apis/{group_version}` with one resource, `plural`.
pub(crate) fn resources(group_version: &str, plural: &str) -> (u16, String) {
    (
        200,
        format!(
            r#"{{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"{group_version}","resources":[{{"name":"{plural}","singularName":"x","namespaced":true,"kind":"X","verbs":["get","list","watch"]}}]}}"#
        ),
    )
}

/// Serves `things.example.com/v1` after `failures` errors of `code` on the
/// group's path.
fn failing_first(failures: usize, code: u16) -> (Client, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&asked);
    let client = scripted_client(move |path| match path {
        "/apis/example.com" if count.fetch_add(1, Ordering::SeqCst) < failures => status(code),
        "/apis/example.com" => api_group("example.com", &["v1"]),
        "/apis/example.com/v1" => resources("example.com/v1", "things"),
        _ => status(404),
    });
    (client, asked)
}

#[tokio::test(start_paused = true)]
async fn errors_are_asked_again_with_doubling_waits_until_the_server_answers() {
    let (client, asked) = failing_first(3, 500);
    let waits = Mutex::new(Vec::new());
    let start = tokio::time::Instant::now();
    let versions = versions_serving_answered(&client, "example.com", "things", |u| {
        assert!(u.error.to_string().contains("scripted 500"), "{}", u.error);
        waits
            .lock()
            .unwrap()
            .push((u.attempt, u.retry_in.as_secs()));
    })
    .await;
    assert_eq!(versions, ["v1"]);
    assert_eq!(asked.load(Ordering::SeqCst), 4);
    assert_eq!(*waits.lock().unwrap(), [(1, 1), (2, 2), (3, 4)]);
    assert_eq!(start.elapsed(), Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn the_wait_between_attempts_stops_growing_at_thirty_seconds() {
    let (client, _) = failing_first(8, 403);
    let waits = Mutex::new(Vec::new());
    versions_serving_answered(&client, "example.com", "things", |u| {
        waits.lock().unwrap().push(u.retry_in.as_secs());
    })
    .await;
    assert_eq!(*waits.lock().unwrap(), [1, 2, 4, 8, 16, 30, 30, 30]);
}

#[tokio::test(start_paused = true)]
async fn a_group_that_is_not_there_is_an_answer_not_an_error() {
    let client = scripted_client(|_| status(404));
    let versions = versions_serving_answered(&client, "example.com", "things", |u| {
        panic!("a 404 is an answer: {}", u.error)
    })
    .await;
    assert!(versions.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_listed_version_answering_503_is_no_answer() {
    let client = scripted_client(|path| match path {
        "/apis/example.com" => api_group("example.com", &["v1"]),
        _ => status(503),
    });
    let answer = versions_serving(&client, "example.com", "things").await;
    assert!(
        matches!(answer, Err(kube::Error::Api(ref s)) if s.code == 503),
        "{answer:?}"
    );
}
