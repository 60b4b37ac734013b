//! Train and held-out splits of the built-in tasks: a problem's split is a hash of its
//! id, and problems are drawn, deduplicated, until a split has enough.

use deltarl_schemas::seed::{hash_str, Rng};

/// The set a prompt belongs to: train problems and held-out problems never overlap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    Test,
}

/// The split of a problem id: held-out problems are those whose id hashes into the
/// lowest 10 % (every built-in task splits this way).
pub fn split_of_id(id: &str) -> Split {
    if hash_str(id).is_multiple_of(10) {
        Split::Test
    } else {
        Split::Train
    }
}

/// Up to `n` distinct problems of one split, drawn deterministically from `seed` with
/// `draw` (each named by `id`), giving up after `tries` draws (for small problem spaces).
pub(crate) fn distinct<P>(
    split: Split,
    n: usize,
    seed: u64,
    tries: usize,
    draw: impl Fn(&mut Rng) -> P,
    id: impl Fn(&P) -> String,
) -> Vec<P> {
    let mut rng = Rng::new(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for _ in 0..tries {
        if out.len() >= n {
            break;
        }
        let p = draw(&mut rng);
        let name = id(&p);
        if split_of_id(&name) == split && seen.insert(name) {
            out.push(p);
        }
    }
    out
}
