//! What a stage computed with beyond its settings and inputs (libtorch's intra-op threads,
//! the number of processes), recorded in its manifest: a float's last bits depend on it.
//! `status` and `compare` say when records that should agree byte for byte do not share it.

use std::collections::BTreeMap;

use deltarl_schemas::Compute;

/// This process's compute, as it stands now (after `model.threads` and, among several
/// processes, the share of the cores were applied), shared by `processes` processes.
pub fn now(processes: usize) -> Compute {
    Compute {
        threads: u32::try_from(tch::get_num_threads().max(1)).unwrap_or(1),
        processes: u32::try_from(processes.max(1)).unwrap_or(u32::MAX),
    }
}

/// The places (a stage, a run) of each distinct compute among `recorded`, or `None` when
/// there is at most one: `[(compute, places)]`, the most used first.
pub fn mixed(
    recorded: impl IntoIterator<Item = (String, Compute)>,
) -> Option<Vec<(Compute, Vec<String>)>> {
    let mut by: BTreeMap<(u32, u32), (Compute, Vec<String>)> = BTreeMap::new();
    for (place, c) in recorded {
        by.entry((c.threads, c.processes))
            .or_insert_with(|| (c, Vec::new()))
            .1
            .push(place);
    }
    if by.len() <= 1 {
        return None;
    }
    let mut v: Vec<_> = by.into_values().collect();
    v.sort_by_key(|g| std::cmp::Reverse(g.1.len()));
    Some(v)
}

/// One line per compute: `2 threads x 1 process: update of iteration 1, ...` (at most
/// `shown` places named, then how many more).
pub fn describe(groups: &[(Compute, Vec<String>)], shown: usize) -> String {
    groups
        .iter()
        .map(|(c, places)| {
            let mut names = places
                .iter()
                .take(shown)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if places.len() > shown {
                names += &format!(" and {} more", places.len() - shown);
            }
            format!("  {c}: {names}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(threads: u32, processes: u32) -> Compute {
        Compute { threads, processes }
    }

    #[test]
    fn one_compute_is_not_mixed_two_are_named_most_used_first() {
        assert!(mixed([("a".into(), c(2, 1)), ("b".into(), c(2, 1))]).is_none());
        assert!(mixed(Vec::new()).is_none());
        let g = mixed([
            ("a".into(), c(1, 2)),
            ("b".into(), c(2, 1)),
            ("c".into(), c(2, 1)),
        ])
        .expect("two computes");
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].0, c(2, 1));
        assert_eq!(g[0].1, ["b", "c"]);
        let text = describe(&g, 1);
        assert_eq!(
            text,
            "  2 threads x 1 process: b and 1 more\n  1 thread x 2 processes: a"
        );
    }
}
