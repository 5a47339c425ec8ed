//! Check 8: the docs' pictures show what the code draws today.
//!
//! - `docs/trace-ui.png` carries, in a PNG `tEXt` chunk, the fingerprint of
//!   the page it shows (written by the browser test, `make test-ui`); it
//!   must be the fingerprint of today's page. Exact: any change to the page
//!   asks for a new picture.
//! - The dashboard's panels (`docs/dashboard/*.png`) must be committed no
//!   earlier than the last change to the dashboard and the script that
//!   draws them (git commit times; skipped outside a git checkout). A
//!   weaker check, so the pictures carry no mark of their own yet.
//!
//! `docs/scale/*.png` plot measurements, not code: they are as old as the
//! run they show, which `docs/scale.md` dates.
use std::process::Command;

use tfjob_operator::observability::trace_ui::page_fingerprint;

use crate::repo::repo_root;

/// The PNG keyword under which a picture records what it shows (the browser
/// test writes it: `tests/e2e/trace_ui.rs`).
const DRAWN_FROM: &str = "tfjob-operator:drawn-from";

/// The `tEXt` chunks of a PNG: (keyword, text).
fn text_chunks(png: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut at = 8; // after the signature
    while at + 8 <= png.len() {
        let length = u32::from_be_bytes([png[at], png[at + 1], png[at + 2], png[at + 3]]) as usize;
        let kind = &png[at + 4..at + 8];
        let Some(data) = png.get(at + 8..at + 8 + length) else {
            break;
        };
        if kind == b"tEXt"
            && let Some(nul) = data.iter().position(|b| *b == 0)
        {
            out.push((
                String::from_utf8_lossy(&data[..nul]).into_owned(),
                String::from_utf8_lossy(&data[nul + 1..]).into_owned(),
            ));
        }
        at += 12 + length; // length, type, data, CRC
    }
    out
}

#[test]
fn the_trace_ui_picture_shows_todays_page() {
    let png = std::fs::read(repo_root().join("docs/trace-ui.png")).expect("docs/trace-ui.png");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "docs/trace-ui.png is not a PNG"
    );
    let today = format!(
        "src/observability/trace_ui/index.html {}",
        page_fingerprint()
    );
    let drawn_from = text_chunks(&png)
        .into_iter()
        .find(|(keyword, _)| keyword == DRAWN_FROM)
        .map(|(_, text)| text);
    assert_eq!(
        drawn_from.as_deref(),
        Some(today.as_str()),
        "docs/trace-ui.png shows another version of the trace UI's page than today's: \
         redraw it with `make test-ui` and commit it"
    );
}

/// The commit time of the last commit that changed `path` (following
/// renames); `None` outside a git checkout or for an uncommitted path.
fn last_changed(path: &str) -> Option<i64> {
    let output = Command::new("git")
        .args(["log", "-1", "--format=%ct", "--follow", "--", path])
        .current_dir(repo_root())
        .output()
        .ok()?;
    String::from_utf8(output.stdout).ok()?.trim().parse().ok()
}

/// Pictures and what they draw: each picture's last commit must be no
/// older than the last commit of any of its sources.
const DRAWN: &[(&str, &[&str])] = &[(
    "docs/dashboard",
    &[
        "charts/tfjob-operator/files/grafana-dashboard.json",
        "e2e/dashboard/pictures.py",
    ],
)];

#[test]
fn the_dashboard_pictures_are_newer_than_the_dashboard_they_draw() {
    let mut problems = Vec::new();
    for (pictures, sources) in DRAWN {
        let dir = repo_root().join(pictures);
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("the pictures' folder")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|f| f.ends_with(".png"))
            .map(|f| format!("{pictures}/{f}"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no pictures in {pictures}");
        for picture in &files {
            let Some(drawn) = last_changed(picture) else {
                eprintln!("{picture}: no git history here; not checked");
                continue;
            };
            for source in *sources {
                if let Some(changed) = last_changed(source)
                    && changed > drawn
                {
                    problems.push(format!(
                        "{picture} was drawn before {source} last changed: redraw it \
                         (`make dashboard-pictures`) and commit it"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn text_chunks_are_read_from_a_png() {
    // Signature, then a tEXt chunk "k\0v" (CRC not checked here), then IEND.
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(&[0, 0, 0, 3]);
    png.extend_from_slice(b"tEXtk\0v");
    png.extend_from_slice(&[0; 4]);
    png.extend_from_slice(&[0, 0, 0, 0]);
    png.extend_from_slice(b"IEND");
    png.extend_from_slice(&[0; 4]);
    assert_eq!(text_chunks(&png), [("k".to_owned(), "v".to_owned())]);
    assert!(text_chunks(&png[..12]).is_empty(), "a cut PNG is no panic");
}
