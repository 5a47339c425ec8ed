//! The messages of the Events for created children.
//!
//! Kubeflow records `SuccessfulCreatePod` "Created pod: <name>" for every
//! Pod and `SuccessfulCreateService` "Created service: <name>" for every
//! Service, and so do we by default ([`created_child`]): scripts grep for
//! exactly that. It costs as many Event writes as children (eight for a
//! four-replica job); client-go's EventCorrelator combines them only from
//! the tenth on, and still patches the combined Event once per occurrence.
//!
//! Under `--fold-create-events` ([`creation_event`]) the creates of one pass
//! become one Event per kind with `count` set to the number created
//! (`kubectl describe` shows "(x4 over 0s)") and the names in the message:
//! the same story in two writes instead of eight, for very large jobs whose
//! operators accept messages Kubeflow does not write. A single create keeps
//! Kubeflow's exact message.

use crate::tfjob::kubeflow::messages::created_child;

/// Names listed in one message; beyond this many the rest are counted.
pub const LISTED_NAMES: usize = 10;

/// The message and count of the Event for `names`, children of `kind`
/// ("pod", "service") created in one pass, in the order given; `None` when
/// nothing was created.
pub fn creation_event(kind: &str, names: &[String]) -> Option<(String, i32)> {
    let count = i32::try_from(names.len()).unwrap_or(i32::MAX);
    match names {
        [] => None,
        [one] => Some((created_child(kind, one), 1)),
        _ => {
            let listed = names[..names.len().min(LISTED_NAMES)].join(", ");
            let message = match names.len().checked_sub(LISTED_NAMES) {
                Some(more) if more > 0 => {
                    format!("Created {count} {kind}s: {listed} and {more} more")
                }
                _ => format!("Created {count} {kind}s: {listed}"),
            };
            Some((message, count))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}-{i}")).collect()
    }

    #[test]
    fn a_single_create_keeps_kubeflows_message() {
        assert_eq!(
            creation_event("pod", &names("mnist-worker", 1)),
            Some(("Created pod: mnist-worker-0".to_owned(), 1))
        );
    }

    #[test]
    fn the_creates_of_one_pass_are_one_event_naming_every_child_with_their_count() {
        let created = [
            "j-chief-0".to_owned(),
            "j-ps-0".to_owned(),
            "j-worker-0".to_owned(),
            "j-worker-1".to_owned(),
        ];
        assert_eq!(
            creation_event("pod", &created),
            Some((
                "Created 4 pods: j-chief-0, j-ps-0, j-worker-0, j-worker-1".to_owned(),
                4
            ))
        );
    }

    #[test]
    fn a_large_burst_lists_the_first_names_and_counts_the_rest() {
        let (message, count) = creation_event("service", &names("big-worker", 501)).unwrap();
        assert_eq!(count, 501);
        assert!(
            message.starts_with("Created 501 services: big-worker-0, big-worker-1,"),
            "{message}"
        );
        assert!(message.ends_with("big-worker-9 and 491 more"), "{message}");
    }

    #[test]
    fn nothing_created_is_no_event() {
        assert_eq!(creation_event("pod", &[]), None);
    }
}
