//! libtorch's own OpenMP team, for a kernel of ours.
//!
//! libtorch's CPU kernels run their parallel regions on an OpenMP team (the wheel's
//! libgomp). Between regions its threads spin for a while before they sleep, so a kernel
//! that starts threads of its own between two libtorch calls shares the cores with them.
//! [`parallel`] runs its parts on that team instead, through libgomp's entry point for a
//! parallel region (`GOMP_parallel`, what a compiler emits for `#pragma omp parallel`),
//! found in the process's libraries ([`crate::dl`]). Without it (a libtorch
//! on another threading runtime) the parts run on scoped threads.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock, PoisonError};

/// `GOMP_parallel(fn, data, num_threads, flags)`: runs fn(data) on every thread of a new
/// team of `num_threads` (0: the default), the calling thread among them, and returns
/// when all have.
type Parallel = unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, c_uint, c_uint);
/// `omp_get_thread_num()` and `omp_get_num_threads()`: this thread's index in its team,
/// and the team's size.
type Query = unsafe extern "C" fn() -> c_int;

#[derive(Clone, Copy, Debug)]
struct Gomp {
    parallel: Parallel,
    thread_num: Query,
    num_threads: Query,
}

fn gomp() -> Option<Gomp> {
    static GOMP: OnceLock<Option<Gomp>> = OnceLock::new();
    *GOMP.get_or_init(|| {
        let find = crate::dl::symbol;
        let (p, t, n) = (
            find(c"GOMP_parallel")?,
            find(c"omp_get_thread_num")?,
            find(c"omp_get_num_threads")?,
        );
        // SAFETY: libgomp's exported entry points, whose C signatures the two types above
        // spell out.
        unsafe {
            Some(Gomp {
                parallel: std::mem::transmute::<*mut c_void, Parallel>(p),
                thread_num: std::mem::transmute::<*mut c_void, Query>(t),
                num_threads: std::mem::transmute::<*mut c_void, Query>(n),
            })
        }
    })
}

/// What every thread of the team reads: the parts, their count, and the first panic.
struct Region<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    parts: usize,
    gomp: Gomp,
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

/// One team thread's share: parts tid, tid + team, ... (the team may be smaller than
/// asked, as OpenMP allows, so every part is still run exactly once). A panic is caught
/// here, since it must not unwind through C, and raised again by [`parallel`].
extern "C" fn body(data: *mut c_void) {
    // SAFETY: `data` is the `Region` that `parallel` passed, alive until GOMP_parallel
    // returns (every team thread has finished by then); it is only read.
    let region = unsafe { &*(data as *const Region) };
    // SAFETY: libgomp's queries, called on a thread of the team it is running.
    let (tid, team) = unsafe { ((region.gomp.thread_num)(), (region.gomp.num_threads)()) };
    let (tid, team) = (tid.max(0) as usize, team.max(1) as usize);
    let run = || {
        for i in (tid..region.parts).step_by(team) {
            (region.f)(i);
        }
    };
    if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        region
            .panic
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(e);
    }
}

/// Runs f(0), ..., f(parts - 1), at most one part a thread at a time, on libtorch's
/// OpenMP team of `parts` threads; returns when every part has run.
pub(crate) fn parallel(parts: usize, f: &(dyn Fn(usize) + Sync)) {
    if parts <= 1 {
        (0..parts).for_each(f);
        return;
    }
    let Some(gomp) = gomp() else {
        std::thread::scope(|scope| {
            for i in 1..parts {
                scope.spawn(move || f(i));
            }
            f(0);
        });
        return;
    };
    let region = Region {
        f,
        parts,
        gomp,
        panic: Mutex::new(None),
    };
    let threads = c_uint::try_from(parts).unwrap_or(c_uint::MAX);
    // SAFETY: `body` only reads the region, which outlives the call; GOMP_parallel returns
    // after every thread of its team has returned from `body`.
    unsafe { (gomp.parallel)(body, &region as *const Region as *mut c_void, threads, 0) };
    let panic = region
        .panic
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(e) = panic {
        std::panic::resume_unwind(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The wheel's libtorch runs on libgomp: the team is found, and every part runs once.
    #[test]
    fn every_part_runs_once_on_libtorchs_team() {
        assert!(gomp().is_some(), "libgomp's GOMP_parallel not found");
        for parts in [0, 1, 2, 3, 7] {
            let seen: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
            parallel(parts, &|i| {
                seen[i].fetch_add(1, Ordering::SeqCst);
            });
            let counts: Vec<usize> = seen.iter().map(|c| c.load(Ordering::SeqCst)).collect();
            assert_eq!(counts, vec![1; parts], "{parts} parts");
        }
    }

    #[test]
    fn a_panicking_part_panics_the_caller() {
        let caught = std::panic::catch_unwind(|| {
            parallel(2, &|i| assert!(i != 1, "part one fails"));
        });
        assert!(caught.is_err());
    }
}
