//! Where the estimators read the token vectors from: memory, or a features file read once
//! a pass. Everything else they need (advantages, entropies, lengths) stays in memory; the
//! vectors, `tokens x dim` floats a response, are the one thing too large to hold at the
//! paper's scale (10 M tokens x 4,096 dims).

use rayon::prelude::*;

use crate::sums;
use crate::wire::Wire;
use crate::{Error, Response, Result};

/// A batch of a pass: (index of the response in the estimator's order, its token-major
/// vectors).
pub type Batch<'a> = [(usize, &'a [f32])];

/// What a pass calls with each batch.
pub type Visit<'v> = dyn FnMut(&Batch<'_>) -> Result<()> + 'v;

/// The token vectors of the responses, read once a pass.
pub trait Vectors {
    /// One pass: `visit` gets batches; every response comes exactly once, in any order.
    fn pass(&mut self, visit: &mut Visit<'_>) -> Result<()>;

    /// Each response's `sum_t v_t` ([`deltarl_schemas::vector_sum`]) by index, when the
    /// source stores them for every response (DelTA's first centroids then need no pass);
    /// None otherwise. A pass that reads the vectors checks them against these.
    fn sums(&self) -> Option<Vec<&[f64]>> {
        None
    }

    /// Whether several processes each hold some of the responses' vectors (a pass then
    /// visits this process's only, and [`Vectors::share`] exchanges the results).
    fn shared(&self) -> bool {
        false
    }

    /// Among several processes: every process's encoded per-response results of a pass,
    /// this one's (`local`) included, by an all-gather. Only called when
    /// [`Vectors::shared`].
    fn share(&mut self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![local.to_vec()])
    }
}

/// The vectors of responses held in memory ([`Response::features`]): one batch a pass.
pub struct InMemory<'r, 'a>(pub &'r [Response<'a>]);

impl Vectors for InMemory<'_, '_> {
    fn pass(&mut self, visit: &mut Visit<'_>) -> Result<()> {
        let all: Vec<(usize, &[f32])> = self.0.iter().map(|r| r.features).enumerate().collect();
        visit(&all)
    }
}

/// Runs one pass of `src` and computes `f(index, vectors)` for every response (each batch
/// in parallel), giving the results in index order. Among several processes
/// ([`Vectors::shared`]) each computes its own responses' and the results are exchanged,
/// bit for bit, so every process holds every response's. A response missing from the pass
/// or given twice is an error naming it.
pub(crate) fn each<T: Send + Wire>(
    src: &mut dyn Vectors,
    rs: &[Response<'_>],
    f: impl Fn(usize, &[f32]) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let mut out: Vec<Option<T>> = (0..rs.len()).map(|_| None).collect();
    let place = |out: &mut Vec<Option<T>>, i: usize, r: T| -> Result<()> {
        let slot = out
            .get_mut(i)
            .ok_or_else(|| Error::Input(format!("vectors of response {i} of {}", rs.len())))?;
        if slot.is_some() {
            return Err(Error::Input(format!(
                "{}: vectors given twice",
                rs[i].key()
            )));
        }
        *slot = Some(r);
        Ok(())
    };
    src.pass(&mut |batch| {
        let results: Vec<(usize, Result<T>)> =
            batch.par_iter().map(|&(i, v)| (i, f(i, v))).collect();
        for (i, r) in results {
            place(&mut out, i, r?)?;
        }
        Ok(())
    })?;
    if src.shared() {
        let mut local = Vec::new();
        let mine: Vec<bool> = out.iter().map(Option::is_some).collect();
        for (i, r) in out.iter().enumerate() {
            if let Some(r) = r {
                (i as u64).put(&mut local);
                r.put(&mut local);
            }
        }
        for blob in src.share(&local)? {
            let mut rest = blob.as_slice();
            while !rest.is_empty() {
                let i = usize::try_from(u64::take(&mut rest)?).unwrap_or(usize::MAX);
                let r = T::take(&mut rest)?;
                // This process's own results come back with the others'.
                if mine.get(i) != Some(&true) {
                    place(&mut out, i, r)?;
                }
            }
        }
    }
    out.into_iter()
        .enumerate()
        .map(|(i, r)| r.ok_or_else(|| Error::Input(format!("{}: no feature vectors", rs[i].key()))))
        .collect()
}

/// The vectors of one response are as long as its tokens say.
pub(crate) fn check_len(dim: usize, r: &Response<'_>, v: &[f32]) -> Result<()> {
    if v.len() != r.tokens() * dim {
        return Err(Error::Input(format!(
            "{}: {} feature floats for {} tokens of dimension {dim}",
            r.key(),
            v.len(),
            r.tokens()
        )));
    }
    Ok(())
}

/// The vectors of one response are as long as its tokens say and finite.
pub(crate) fn check(dim: usize, r: &Response<'_>, v: &[f32]) -> Result<()> {
    check_len(dim, r, v)?;
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(Error::Input(format!(
            "{}: feature of token {} is {}",
            r.key(),
            i / dim.max(1),
            v[i]
        )));
    }
    Ok(())
}

/// The response's `sum_t v_t` ([`sums::sum`]), its vectors checked as [`check`] does on the
/// way: a coordinate's sum of finite f32 values is finite in f64 (at most tokens x 3.4e38,
/// far below f64's 1.8e308), so the sums are finite exactly when every value is, and the
/// values are scanned one by one only to name a bad token.
pub(crate) fn checked_sum(dim: usize, r: &Response<'_>, v: &[f32]) -> Result<Vec<f64>> {
    check_len(dim, r, v)?;
    let sum = sums::sum(dim, v);
    if sum.iter().all(|x| x.is_finite()) {
        Ok(sum)
    } else {
        check(dim, r, v).map(|()| sum)
    }
}
