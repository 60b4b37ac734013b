//! Sessions: the requests (one prompt, G samples each) cut, in request order, into
//! groups of at most `session_rows` samples, each decoded through its own set of slots (the
//! decoder runs them one after another; processes share them out).

use std::ops::Range;

use crate::sample::SampleSettings;
use crate::{Error, RequestProblem, Result};

/// One prompt and the seeds of its samples (one per sample).
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt_ids: Vec<u32>,
    pub seeds: Vec<u64>,
}

/// Samples `samples` of request `request`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Slice {
    pub(crate) request: usize,
    pub(crate) samples: Range<usize>,
}

/// Requests decoded through one set of slots.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Session {
    /// In request order; each request at most once.
    pub(crate) slices: Vec<Slice>,
    /// Rows decoded together at most.
    pub(crate) slots: usize,
    /// Positions a slot holds: the session's longest prompt + max_new_tokens.
    pub(crate) capacity: usize,
}

/// Cuts the requests, in order, into sessions of at most `session_rows` samples (a
/// request whose samples do not fit the room left continues in the next session, its
/// samples in order), each decoded through `max_batch_rows` slots or, with a cache
/// budget, at most `max_cache_tokens / capacity`.
pub(crate) fn plan_sessions(requests: &[Request], s: &SampleSettings) -> Result<Vec<Session>> {
    if let Some(budget) = s.max_cache_tokens {
        for (i, r) in requests.iter().enumerate() {
            if r.prompt_ids.len() + s.max_new_tokens > budget {
                return Err(Error::Request {
                    request: i,
                    problem: RequestProblem::OverCacheBudget {
                        prompt: r.prompt_ids.len(),
                        max_new_tokens: s.max_new_tokens,
                        budget,
                    },
                });
            }
        }
    }
    let per = s.session_rows.unwrap_or(usize::MAX).max(1);
    let mut cuts: Vec<Vec<Slice>> = Vec::new();
    let mut room = 0;
    for (i, r) in requests.iter().enumerate() {
        let n = r.seeds.len();
        let mut next = 0;
        while next < n {
            if room == 0 {
                cuts.push(Vec::new());
                room = per;
            }
            let take = (n - next).min(room);
            if let Some(c) = cuts.last_mut() {
                c.push(Slice {
                    request: i,
                    samples: next..next + take,
                });
            }
            room -= take;
            next += take;
        }
    }
    Ok(cuts
        .into_iter()
        .map(|slices| {
            let rows: usize = slices.iter().map(|x| x.samples.len()).sum();
            let longest = slices
                .iter()
                .map(|x| requests[x.request].prompt_ids.len())
                .max()
                .unwrap_or(0);
            let capacity = longest + s.max_new_tokens;
            let mut slots = s.max_batch_rows.max(1).min(rows);
            if let Some(budget) = s.max_cache_tokens {
                // Every request fits the budget (checked above), so at least one slot.
                slots = slots.min(budget / capacity).max(1);
            }
            Session {
                slices,
                slots,
                capacity,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings(
        max_batch_rows: usize,
        max_cache_tokens: Option<usize>,
        session_rows: Option<usize>,
    ) -> SampleSettings {
        SampleSettings {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 6,
            eos_ids: vec![],
            stop_strings: vec![],
            max_batch_rows,
            max_cache_tokens,
            session_rows,
        }
    }

    fn req(len: usize, g: u64) -> Request {
        Request {
            prompt_ids: vec![1; len],
            seeds: (0..g).collect(),
        }
    }

    /// (slices as (request, first, end), slots, capacity) per session.
    type Shape = (Vec<(usize, usize, usize)>, usize, usize);

    fn shape(sessions: &[Session]) -> Vec<Shape> {
        sessions
            .iter()
            .map(|x| {
                let slices = x
                    .slices
                    .iter()
                    .map(|s| (s.request, s.samples.start, s.samples.end))
                    .collect();
                (slices, x.slots, x.capacity)
            })
            .collect()
    }

    #[test]
    fn sessions_mix_prompt_lengths_and_split_groups_in_request_order() {
        // Prompts of 4, 2, 4 tokens, G = 3 each; max_new_tokens = 6.
        let requests = [req(4, 3), req(2, 3), req(4, 3)];
        // One session of every sample, whatever the lengths: 8 slots for 9 rows, each of
        // the longest prompt + 6 = 10 positions.
        let b = plan_sessions(&requests, &settings(8, None, None)).unwrap();
        assert_eq!(
            shape(&b),
            vec![(vec![(0, 0, 3), (1, 0, 3), (2, 0, 3)], 8, 10)]
        );
        // Sessions of 4 samples: groups split in sample order; a session never has more
        // slots than rows; the short prompt's session is as wide as its longest prompt.
        let b = plan_sessions(&requests, &settings(8, None, Some(4))).unwrap();
        assert_eq!(
            shape(&b),
            vec![
                (vec![(0, 0, 3), (1, 0, 1)], 4, 10),
                (vec![(1, 1, 3), (2, 0, 2)], 4, 10),
                (vec![(2, 2, 3)], 1, 10),
            ]
        );
        // A budget of 25 positions: 25 / 10 = 2 slots of 10 positions.
        let b = plan_sessions(&requests, &settings(8, Some(25), None)).unwrap();
        assert_eq!(
            shape(&b),
            vec![(vec![(0, 0, 3), (1, 0, 3), (2, 0, 3)], 2, 10)]
        );
        for x in &b {
            assert!(x.slots * x.capacity <= 25);
        }
    }

    #[test]
    fn a_response_longer_than_the_cache_budget_is_refused_by_name() {
        let err = plan_sessions(&[req(4, 2)], &settings(8, Some(9), None))
            .unwrap_err()
            .to_string();
        assert!(err.contains("rollout.kv_cache_tokens"), "{err}");
        assert!(err.contains("10 cache positions"), "{err}");
    }
}
