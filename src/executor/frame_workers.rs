//! On CPU, a chunk's frames split between worker threads that each run libtorch with one intra-op
//! thread, in place of one call whose every operator splits across all the threads.
//!
//! Why: small frames make small operators, and each one ends at a barrier where both OpenMP threads
//! wait for the slower. When anything else takes a core for a moment (the job's own ffmpeg encoder,
//! a poller), the whole team waits. Workers with a frame each share no barrier: a worker that loses
//! its core for a while delays only its own frame (docs/benchmarks.md, "frames on workers").
use std::panic::resume_unwind;

use tch::Tensor;

/// A model shared by the workers for reading only.
struct ReadOnly<'a, M: ?Sized>(&'a M);

// SAFETY: the workers only run forward passes without gradients, which read the model's tensors and
// never write them; libtorch's operators may read one tensor from several threads at once (PyTorch's
// own inter-op parallelism does the same). The model holds no interior mutability (no `Cell`s), and
// the reference does not outlive the scope that joins every worker.
unsafe impl<M: ?Sized> Sync for ReadOnly<'_, M> {}

impl<M: ?Sized> ReadOnly<'_, M> {
    /// A method, so that closures capture the whole `ReadOnly` (which is `Sync`), not its field.
    fn model(&self) -> &M {
        self.0
    }
}

/// How many workers share a chunk; 1 runs it on the calling thread as one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameWorkers {
    pub workers: usize,
}

impl FrameWorkers {
    /// Runs `forward` on `frames` (`[N, ...]`) split along the first axis into up to `workers` runs of
    /// consecutive frames, each on a scoped thread with one intra-op thread, and returns the outputs in
    /// order (not joined: that would hold the chunk's output twice; a worker may also convert its own
    /// output before it returns, so no float output waits for the others). The calling thread keeps its
    /// intra-op thread count. Panics in a worker resume here, so the executor's `attempt` sees them as
    /// it would its own.
    pub fn run<M: ?Sized, T: Send, E: Send>(&self, model: &M, frames: &Tensor, forward: impl Fn(&M, &Tensor) -> Result<T, E> + Sync) -> Result<Vec<T>, E> {
        let n = frames.size().first().copied().unwrap_or(0);
        let workers = (self.workers as i64).min(n);
        if workers <= 1 {
            return forward(model, frames).map(|output| vec![output]);
        }
        let threads = tch::get_num_threads();
        let model = ReadOnly(model);
        let forward = &forward;
        let joined: Vec<std::thread::Result<Result<T, E>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = split_evenly(n, workers)
                .map(|(start, len)| {
                    let part = frames.narrow(0, start, len);
                    let model = &model;
                    scope.spawn(move || {
                        // Gradient mode and the intra-op count are per thread in libtorch, but a thread's
                        // first query sets its count from the process-wide one: query first, then set 1.
                        tch::get_num_threads();
                        tch::set_num_threads(1);
                        tch::no_grad(|| forward(model.model(), &part))
                    })
                })
                .collect();
            handles.into_iter().map(|handle| handle.join()).collect()
        });
        // libtorch keeps the last count set as the default of threads to come; restored before a worker's
        // panic resumes too, since running out of memory there is a panic the executor recovers from.
        tch::set_num_threads(threads);
        joined.into_iter().map(|result| result.unwrap_or_else(|panic| resume_unwind(panic))).collect()
    }
}

/// `parts` runs of consecutive indices covering `0..n`, the first ones one longer when `n` does not divide.
fn split_evenly(n: i64, parts: i64) -> impl Iterator<Item = (i64, i64)> {
    let (base, extra) = (n / parts, n % parts);
    (0..parts).scan(0, move |start, i| {
        let len = base + i64::from(i < extra);
        let run = (*start, len);
        *start += len;
        Some(run)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_cover_every_frame_once_in_order() {
        assert_eq!(split_evenly(4, 2).collect::<Vec<_>>(), vec![(0, 2), (2, 2)]);
        assert_eq!(split_evenly(5, 2).collect::<Vec<_>>(), vec![(0, 3), (3, 2)]);
        assert_eq!(split_evenly(3, 3).collect::<Vec<_>>(), vec![(0, 1), (1, 1), (2, 1)]);
    }

    #[test]
    fn frames_on_workers_equal_one_call_and_keep_the_callers_threads() {
        // Other tests' workers change the process-wide count that a thread's first query reads.
        tch::get_num_threads();
        tch::set_num_threads(2);
        let weight = Tensor::randn([8, 3, 3, 3], (tch::Kind::Float, tch::Device::Cpu));
        let frames = Tensor::rand([5, 3, 12, 10], (tch::Kind::Float, tch::Device::Cpu));
        let conv = |w: &Tensor, x: &Tensor| Ok::<_, ()>(x.conv2d(w, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1));
        let whole = conv(&weight, &frames).unwrap();
        let parts = FrameWorkers { workers: 2 }.run(&weight, &frames, conv).unwrap();
        assert_eq!(parts.iter().map(|p| p.size()[0]).collect::<Vec<_>>(), vec![3, 2]);
        let split = Tensor::cat(&parts, 0);
        assert_eq!(split.size(), whole.size());
        let diff = f64::try_from((&split - &whole).abs().max()).unwrap();
        assert!(diff < 1e-5, "max difference {diff}");
        assert_eq!(tch::get_num_threads(), 2);
    }

    #[test]
    fn a_panic_in_a_worker_reaches_the_caller() {
        let frames = Tensor::zeros([2, 1], (tch::Kind::Float, tch::Device::Cpu));
        let caught = std::panic::catch_unwind(|| FrameWorkers { workers: 2 }.run(&(), &frames, |_, _| -> Result<Tensor, ()> { panic!("libtorch said no") }));
        assert!(caught.is_err());
    }
}
