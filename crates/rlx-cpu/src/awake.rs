//! Rayon's workers sleep on a futex soon after they run out of work, and waking one takes tens
//! of microseconds: on a small kernel that is most of its parallel part, paid at every kernel
//! of a run. [`run`] keeps the pool's other workers spinning through a run instead, each
//! stealing the run's jobs as soon as they are pushed, as onnxruntime's and llama.cpp's pools
//! spin between their parallel sections.

use rayon::Yield;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A spinning worker that has found no job for this long goes back to rayon's own idling: a
/// bound on the CPU a long serial stretch burns, and on how long a spinner could hold up a
/// join it was started under.
const MAX_IDLE: Duration = Duration::from_micros(500);

thread_local! {
    /// Set while this thread spins: a spinner started inside another returns at once.
    static SPINNING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` on one of rayon's workers while the pool's other workers spin, looking for work.
pub fn run<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let done = AtomicBool::new(false);
    rayon::scope(|s| {
        let owner = rayon::current_thread_index();
        for _ in 1..rayon::current_num_threads() {
            let done = &done;
            s.spawn(move |_| spin(done, owner));
        }
        let out = f();
        done.store(true, Ordering::Release);
        out
    })
}

/// Executes the pool's jobs until `done`, or until none has come for [`MAX_IDLE`]. Spinners are
/// the oldest jobs of the owner's deque and thieves take the oldest first, so a worker meets
/// one before any job of the run; the owner (which pops its newest first) and a worker already
/// spinning skip it.
fn spin(done: &AtomicBool, owner: Option<usize>) {
    if rayon::current_thread_index() == owner || SPINNING.with(|s| s.replace(true)) {
        return;
    }
    let (mut idle_since, mut misses) = (Instant::now(), 0u32);
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(Yield::Executed) => misses = 0,
            _ => {
                // The clock is read every 64 misses: reading it each time cost 2% of a run.
                misses += 1;
                if misses == 1 {
                    idle_since = Instant::now();
                } else if misses % 64 == 0 && idle_since.elapsed() > MAX_IDLE {
                    break;
                }
                std::hint::spin_loop();
            }
        }
    }
    SPINNING.with(|s| s.set(false));
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn parallel_kernels_inside_a_run_complete_and_spinners_stop() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let sums = pool.install(|| {
            run(|| {
                (0..50)
                    .map(|round| (0..10_000u64).into_par_iter().map(|i| i * round).sum::<u64>())
                    .collect::<Vec<_>>()
            })
        });
        assert_eq!(sums[7], 7 * 10_000 * 9_999 / 2);
        // Every spinner has returned with the run: the pool is free for a plain join.
        assert_eq!(pool.join(|| 1, || 2), (1, 2));
    }
}
