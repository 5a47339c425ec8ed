//! The compatibility doc against the messages table: every text Kubeflow's
//! training-operator writes for a TFJob is listed as `tfjob::kubeflow::messages::KUBEFLOW`
//! renders it, and each deliberate difference is named in the doc's
//! differences section (the table itself is checked word for word against
//! v1.9.2's source by `src/tfjob/kubeflow/messages.rs`'s tests).
use std::fmt::Write as _;

use crate::repo::repo_root;

/// The compatibility doc's table of Kubeflow's texts, as
/// `tfjob::kubeflow::messages::KUBEFLOW` renders it.
fn kubeflow_texts_table() -> String {
    let mut table =
        String::from("| where | ours, for sample values | against Kubeflow |\n|---|---|---|\n");
    for row in tfjob_operator::tfjob::kubeflow::messages::KUBEFLOW {
        let verdict = if row.difference.is_some() {
            "differs on purpose (below)"
        } else {
            "word for word"
        };
        let _ = writeln!(
            table,
            "| {} | `{}` | {verdict} |",
            row.what,
            row.sample().replace('|', "\\|")
        );
    }
    table
}

#[test]
fn the_compatibility_doc_lists_every_kubeflow_text_and_each_difference() {
    let path = repo_root().join("docs/kubeflow-compatibility.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let table = kubeflow_texts_table();
    assert!(
        doc.contains(&table),
        "docs/kubeflow-compatibility.md must hold this table (from src/tfjob/kubeflow/messages.rs) under \"Messages word for word\":\n\n{table}"
    );
    let differences = doc
        .split("## Differences we keep on purpose")
        .nth(1)
        .expect("a \"Differences we keep on purpose\" section");
    for row in tfjob_operator::tfjob::kubeflow::messages::KUBEFLOW {
        if let Some(why) = row.difference {
            assert!(
                differences.contains(row.what),
                "the differences section must name {:?} ({why})",
                row.what
            );
        }
    }
}
