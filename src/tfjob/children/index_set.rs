//! A set of replica indexes written as ranges (`"0,2-4"`), the way Kubernetes
//! Jobs write `completedIndexes`: compact in status, readable by people.
use std::collections::BTreeSet;

/// Parses `"0,2-4"`; malformed parts are skipped (status is ours, but a
/// person may have edited it).
pub fn parse(s: Option<&str>) -> BTreeSet<i32> {
    let mut set = BTreeSet::new();
    for part in s
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    set.extend(a..=b);
                }
            }
            None => {
                if let Ok(i) = part.parse() {
                    set.insert(i);
                }
            }
        }
    }
    set
}

/// Formats as ranges; `None` for the empty set.
pub fn format(set: &BTreeSet<i32>) -> Option<String> {
    let mut parts = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_round_trip() {
        let set: BTreeSet<i32> = [0, 2, 3, 4, 7].into();
        assert_eq!(format(&set).as_deref(), Some("0,2-4,7"));
        assert_eq!(parse(Some("0,2-4,7")), set);
    }

    #[test]
    fn empty_set_is_absent_and_garbage_is_skipped() {
        assert_eq!(format(&BTreeSet::new()), None);
        assert_eq!(parse(Some("x,1,-,3-y")), [1].into());
        assert!(parse(None).is_empty());
    }
}
