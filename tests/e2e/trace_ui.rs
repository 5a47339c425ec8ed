//! The live pipeline view (`--trace-ui`) in a real browser: headless
//! Chromium opens the page before a TFJob is applied, and the page must show
//! the job's key passing through every box, in pipeline order, as the events
//! arrive over server-sent events.
//!
//! The browser is driven by `e2e/trace_ui_browser.py` (the DevTools protocol
//! on a pipe: `--dump-dom` alone would dump the page at its load event,
//! before any event arrived). It needs `chromium` (Debian's package; `make
//! test-ui` installs it when missing, `CHROMIUM` names another binary). The
//! screenshot lands in `$TFJOB_CLUSTER_DIR/trace-ui/`.
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::examples::apply_example;
use crate::operator::{Operator, ensure_crd};
use crate::support::{client, cluster_dir, shared_cluster, test_namespace, wait_until};

const REACT: Duration = Duration::from_secs(60);

/// The page's boxes, in pipeline order (the ids its DOM uses).
const BOXES: [&str; 8] = [
    "reflector",
    "delta_fifo",
    "informer",
    "handlers",
    "workqueue",
    "worker",
    "reconcile",
    "write",
];

/// The value of `attribute` on the first tag in `html` that contains `tag_start`.
fn attribute(html: &str, tag_start: &str, attribute: &str) -> Option<String> {
    let tag = html.split(tag_start).nth(1)?.split('>').next()?;
    let value = tag
        .split(&format!("{attribute}=\""))
        .nth(1)?
        .split('"')
        .next()?;
    Some(value.to_owned())
}

/// The text of the element with `id` (no nested tags).
fn text_of(html: &str, id: &str) -> Option<String> {
    let after = html.split(&format!("id=\"{id}\"")).nth(1)?;
    Some(after.split_once('>')?.1.split('<').next()?.to_owned())
}

/// The boxes in the order a trail first reached each one.
fn first_reached(trail: &str) -> Vec<&str> {
    let mut seen = Vec::new();
    for step in trail.split(' ') {
        if !seen.contains(&step) {
            seen.push(step);
        }
    }
    seen
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn the_trace_ui_shows_a_new_job_passing_every_box_in_order_in_a_real_browser() {
    let _guard = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "trace-ui").await;
    let mut operator = Operator::start_with(&ns, &["--trace-ui", "127.0.0.1:0"], None);
    operator.wait_ready().await;
    let url = wait_until("the trace UI's address in the log", REACT, || async {
        let log = operator.log_text();
        let line = log.lines().find(|l| l.contains("serving the trace UI"))?;
        Some(line.split("url=").nth(1)?.trim().to_owned())
    })
    .await;

    let shots = cluster_dir().join("trace-ui");
    std::fs::create_dir_all(&shots).expect("the screenshot dir");
    let screenshot: PathBuf = shots.join(format!("{ns}.png"));
    let job_key = format!("{ns}/tfjob-simple");
    let row = format!("document.querySelector('tr[data-key=\"{job_key}\"]')");
    let until = format!("{row} && {row}.dataset.trail.split(' ').includes('write')");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/trace_ui_browser.py");
    let browser = Command::new("python3")
        .args([script, &url, &until, "60"])
        .arg(&screenshot)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs e2e/trace_ui_browser.py");
    let browser = tokio::task::spawn_blocking(move || browser.wait_with_output());

    // Only once the page listens does the job exist: what the page shows
    // arrived live, not from a replay.
    wait_until("the browser to connect to /events", REACT, || async {
        operator
            .log_text()
            .contains("trace UI: a viewer connected")
            .then_some(())
    })
    .await;
    apply_example(&ns, "tfjob-simple.yaml");

    let output = browser
        .await
        .expect("the browser task")
        .expect("the browser script ran");
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the page never showed {job_key} reaching the API write box ({}):\n{}\nDOM:\n{dom}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
    );
    let trail = attribute(&dom, &format!("data-key=\"{job_key}\""), "data-trail")
        .expect("a trail row for the job's key");
    // Later passes (each Pod and Service event enqueues the job again)
    // revisit boxes; the first pass reaches each in pipeline order.
    assert_eq!(
        first_reached(&trail),
        BOXES,
        "the job's key did not first reach the boxes in pipeline order: {trail}"
    );
    for id in BOXES {
        let count = attribute(&dom, &format!("id=\"box-{id}\""), "data-count")
            .and_then(|c| c.parse::<u64>().ok());
        assert!(count > Some(0), "box {id} counted {count:?} events");
    }
    let received: u64 = text_of(&dom, "received")
        .and_then(|t| t.parse().ok())
        .expect("the received counter");
    assert!(
        received >= BOXES.len() as u64 - 1,
        "{received} events received"
    );
    assert_eq!(
        text_of(&dom, "dropped").as_deref(),
        Some("0"),
        "a single job's events fit the buffer: nothing may be dropped"
    );
    let png = std::fs::read(&screenshot).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG"),
        "a PNG at {}",
        screenshot.display()
    );
}
