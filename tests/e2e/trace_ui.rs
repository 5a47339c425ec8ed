//! The live pipeline view (`--trace-ui`) in a real browser: headless
//! Chromium opens the page before a TFJob is applied, and the page must show
//! the job's key passing through every box, in pipeline order, as the events
//! arrive over server-sent events.
//!
//! The browser is driven by `e2e/trace_ui_browser.py` (the DevTools protocol
//! on a pipe: `--dump-dom` alone would dump the page at its load event,
//! before any event arrived). It needs `chromium` (Debian's package; `make
//! test-ui` installs it when missing, `CHROMIUM` names another binary). The
//! screenshot lands in `$TFJOB_CLUSTER_DIR/trace-ui/`; with
//! `TFJOB_TRACE_UI_PICTURE=path` (`make test-ui` sets `docs/trace-ui.png`)
//! it is also written there, marked with the page's fingerprint so the
//! docs' drift guard can tell a picture of an older page. Then the browser
//! clicks the Reflector box, and its chapter must open.
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use tfjob_operator::observability::trace_ui::page_fingerprint;

use crate::cluster::{client, cluster_dir, test_namespace, wait_until};
use crate::examples::apply_example;
use crate::operator::{Operator, ensure_crd};
use crate::support::shared_cluster;

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

/// The PNG keyword under which a picture records what it shows.
const DRAWN_FROM: &str = "tfjob-operator:drawn-from";

/// CRC-32 (IEEE), as PNG chunks carry it.
fn crc32(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0_u32, |crc, byte| {
        (0..8).fold(crc ^ u32::from(*byte), |c, _| {
            if c & 1 == 1 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            }
        })
    })
}

/// `png` with a `tEXt` chunk `keyword: text` right after its header chunk.
fn with_text_chunk(png: &[u8], keyword: &str, text: &str) -> Vec<u8> {
    // Signature (8) + IHDR: length (4), type (4), 13 bytes, CRC (4).
    let after_header = 8 + 4 + 4 + 13 + 4;
    let mut chunk = b"tEXt".to_vec();
    chunk.extend_from_slice(keyword.as_bytes());
    chunk.push(0);
    chunk.extend_from_slice(text.as_bytes());
    let length = u32::try_from(chunk.len() - 4).expect("a short text");
    let mut out = png[..after_header].to_vec();
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&chunk);
    out.extend_from_slice(&crc32(&chunk).to_be_bytes());
    out.extend_from_slice(&png[after_header..]);
    out
}

#[test]
fn a_text_chunk_goes_after_the_header_with_the_crc_png_expects() {
    // The CRC of "IEND" is PNG's best-known constant.
    assert_eq!(crc32(b"IEND"), 0xAE42_6082);
    let png: Vec<u8> = (0..40).collect();
    let out = with_text_chunk(&png, "k", "v");
    assert_eq!(&out[..33], &png[..33]);
    assert_eq!(&out[33..37], &[0, 0, 0, 3]);
    assert_eq!(&out[37..44], b"tEXtk\0v");
    assert_eq!(&out[48..], &png[33..]);
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
    let script = crate::cluster::repo_dir()
        .join("e2e/trace_ui_browser.py")
        .display()
        .to_string();
    let browser = Command::new("python3")
        .args([script.as_str(), &url, &until, "60"])
        .arg(&screenshot)
        .arg("box-reflector")
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
    let stdout = String::from_utf8_lossy(&output.stdout);
    let (dom, clicked) = stdout.split_once("---- clicked: ").unwrap_or((&stdout, ""));
    assert!(
        output.status.success(),
        "the page never showed {job_key} reaching the API write box ({}):\n{}\nDOM:\n{dom}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
    );
    let trail = attribute(dom, &format!("data-key=\"{job_key}\""), "data-trail")
        .expect("a trail row for the job's key");
    // Later passes (each Pod and Service event enqueues the job again)
    // revisit boxes; the first pass reaches each in pipeline order.
    assert_eq!(
        first_reached(&trail),
        BOXES,
        "the job's key did not first reach the boxes in pipeline order: {trail}"
    );
    for id in BOXES {
        let count = attribute(dom, &format!("id=\"box-{id}\""), "data-count")
            .and_then(|c| c.parse::<u64>().ok());
        assert!(count > Some(0), "box {id} counted {count:?} events");
    }
    let received: u64 = text_of(dom, "received")
        .and_then(|t| t.parse().ok())
        .expect("the received counter");
    assert!(
        received >= BOXES.len() as u64 - 1,
        "{received} events received"
    );
    assert_eq!(
        text_of(dom, "dropped").as_deref(),
        Some("0"),
        "a single job's events fit the buffer: nothing may be dropped"
    );
    let png = std::fs::read(&screenshot).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG"),
        "a PNG at {}",
        screenshot.display()
    );

    // A box's link opens its chapter (served by the operator itself).
    let (target, chapter) = clicked.split_once('\n').unwrap_or((clicked, ""));
    assert!(
        target.contains("/docs/01-reflector.md 200"),
        "clicking the Reflector box led to {target:?}:\n{chapter}"
    );
    assert!(chapter.starts_with("# 1. Reflector"), "{chapter}");

    if let Some(picture) = std::env::var_os("TFJOB_TRACE_UI_PICTURE") {
        let drawn_from = format!(
            "src/observability/trace_ui/index.html {}",
            page_fingerprint()
        );
        std::fs::write(&picture, with_text_chunk(&png, DRAWN_FROM, &drawn_from))
            .expect("TFJOB_TRACE_UI_PICTURE is writable");
    }
}
