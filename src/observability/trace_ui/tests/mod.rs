use tracing_subscriber::layer::SubscriberExt;

use super::*;

/// Installs `ui`'s layer as this thread's subscriber while the guard lives.
fn feed(ui: &TraceUi) -> tracing::subscriber::DefaultGuard {
    tracing::subscriber::set_default(tracing_subscriber::registry().with(ui.layer()))
}

fn queued(n: usize) {
    for i in 0..n {
        tracing::debug!(target: "pipeline", stage = "2 delta_fifo", kind = "TFJob", key = %format!("ns/job-{i}"), delta = "Added", "delta queued");
    }
}

#[tokio::test]
async fn a_slow_viewer_loses_the_oldest_messages_and_is_told_how_many() {
    let ui = TraceUi::with_buffer(8, CancellationToken::new());
    let _guard = feed(&ui);
    let viewer = viewer_stream(ui.inner.sender.subscribe(), CancellationToken::new());
    futures::pin_mut!(viewer);

    // The viewer reads nothing while 100 events pass.
    queued(100);
    assert_eq!(ui.queued(), 8, "the channel holds its buffer, not 100");

    let first = format!("{:?}", viewer.next().await.unwrap());
    assert!(first.contains(r"event: dropped\ndata: 92\n"), "{first}");
    let mut seqs = Vec::new();
    for _ in 0..8 {
        let event = format!("{:?}", viewer.next().await.unwrap());
        // The event's Debug text escapes the JSON's quotes: …seq\":93,…
        let after = event.split("seq").nth(1).unwrap_or_default();
        let digits: String = after
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(char::is_ascii_digit)
            .collect();
        seqs.push(digits.parse::<u64>().unwrap());
    }
    assert_eq!(seqs, (93..=100).collect::<Vec<_>>(), "the newest 8 remain");
    assert_eq!(ui.queued(), 0);

    // Falling behind again adds to the count this viewer is shown.
    queued(10);
    let again = format!("{:?}", viewer.next().await.unwrap());
    assert!(again.contains(r"event: dropped\ndata: 94\n"), "{again}");
}

#[test]
fn every_chapter_the_page_links_to_is_served() {
    // The page names each box's chapter as a string: "NN-name.md".
    let named: Vec<&str> = PAGE
        .split('"')
        .filter(|s| s.ends_with(".md") && s.as_bytes().first().is_some_and(u8::is_ascii_digit))
        .collect();
    assert_eq!(named.len(), CHAPTERS.len(), "{named:?}");
    for file in named {
        let (_, text) = CHAPTERS
            .iter()
            .find(|(served, _)| *served == file)
            .unwrap_or_else(|| panic!("the page links to {file}, which is not served"));
        let number = file.split('-').next().unwrap().trim_start_matches('0');
        assert!(
            text.starts_with(&format!("# {number}. ")),
            "{file} is served as another chapter: {}",
            text.lines().next().unwrap_or_default()
        );
    }
}

#[test]
fn the_fingerprint_is_the_pages_and_changes_with_it() {
    // FNV-1a's published test vectors.
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(
        page_fingerprint(),
        format!("fnv1a64:{:016x}", fnv1a64(PAGE.as_bytes()))
    );
    assert_ne!(fnv1a64(PAGE.as_bytes()), fnv1a64(&PAGE.as_bytes()[1..]));
}

#[test]
fn without_viewers_nothing_is_serialized_or_queued() {
    let ui = TraceUi::new(CancellationToken::new());
    let _guard = feed(&ui);
    queued(10);
    assert_eq!(ui.queued(), 0);
    assert_eq!(ui.inner.seq.load(Ordering::Relaxed), 0);
}

mod page;
