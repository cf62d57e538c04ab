//! Running a piece of model work so that every failure comes back as an [`ExecError`], and so that
//! a kernel that could not be compiled for lack of memory does not spoil the thread for the work that
//! follows.
//!
//! oneDNN compiles its CPU kernels with Xbyak, built without exceptions: Xbyak keeps its first error
//! in a thread-local, and while that is set every kernel compiled on the thread fails ("could not
//! create a primitive"). Nothing in libtorch clears it. An out-of-memory that hits Xbyak's code buffer
//! thus leaves the thread unable to run any convolution shape it has not run before (kernels already
//! in oneDNN's process-wide cache still run), while a retry with smaller pieces needs new shapes. So
//! after that error on a thread, the work that follows runs on a fresh thread; the executor's state
//! moves over for the call and comes back. Other out-of-memory errors (a tensor, CUDA) leave the
//! thread as it was, and the work stays on it: a new thread costs stacks, which count against an
//! address-space limit too.
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use super::error::ExecError;

thread_local! {
    static CANNOT_CREATE_KERNELS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `work`, catching libtorch panics; on a fresh thread once this one cannot create kernels.
pub fn attempt<T, E: Into<ExecError>>(work: impl FnOnce() -> Result<T, E>) -> Result<T, ExecError> {
    let caught = move || match catch_unwind(AssertUnwindSafe(work)) {
        Ok(result) => result.map_err(Into::into),
        Err(panic) => Err(ExecError::from_panic(panic)),
    };
    let result = if CANNOT_CREATE_KERNELS.get() {
        on_fresh_thread(caught)
    } else {
        caught()
    };
    if result.as_ref().is_err_and(ExecError::is_out_of_memory) {
        crate::device::cuda::stop_autotuning_after_out_of_memory();
    }
    if !CANNOT_CREATE_KERNELS.get() && result.as_ref().is_err_and(|e| e.to_string().contains(crate::models::ONEDNN_CANNOT_CREATE_KERNEL)) {
        tracing::warn!("a kernel could not be created on this thread (oneDNN's JIT ran out of memory): what follows runs on fresh threads");
        CANNOT_CREATE_KERNELS.set(true);
    }
    result
}

/// Whether a kernel failed on this thread (the executor then moves to a new thread between jobs).
pub fn this_thread_cannot_create_kernels() -> bool {
    CANNOT_CREATE_KERNELS.get()
}

/// Runs `work` on a new thread and waits for it; on this thread when none can be started (it may
/// still find its kernels in oneDNN's cache). The new thread computes with one intra-op thread: more
/// would make OpenMP start a team for it, and when that fails (as it can under the address-space
/// limit that failed the kernel) libgomp ends the process.
fn on_fresh_thread<T>(work: impl FnOnce() -> T) -> T {
    /// Carries the executor's tensors and models (not `Sync`) to the new thread and the result back.
    struct Handover<V>(V);
    // SAFETY: this thread waits in `join` for as long as the new thread runs, so what `work` reaches is
    // used by one thread at a time, with the channel and join ordering the two sides; libtorch objects
    // may change threads that way (tch's `Tensor` is `Send`), and so may the executor's `Rc`s, whose
    // counts only one thread touches at a time. The executor hands in no thread-bound value (no lock
    // guard, no reference to a thread-local).
    unsafe impl<V> Send for Handover<V> {}

    let threads = tch::get_num_threads();
    let result = std::thread::scope(|scope| {
        // The work goes over only once the thread exists, so that it stays here if none can be started.
        let (give, take) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new().name("vaebox-retry".into()).spawn_scoped(scope, move || {
            let Handover(work) = take.recv().ok()?;
            // Gradient mode is per thread in libtorch; the executor never needs gradients.
            tch::set_num_threads(1);
            Some(Handover(tch::no_grad(work)))
        });
        let handle = match spawned {
            Ok(handle) => handle,
            Err(error) => {
                tracing::warn!(%error, "cannot start a thread for work after a failed kernel; it runs on this thread");
                return tch::no_grad(work);
            }
        };
        tracing::debug!("this thread cannot create kernels any more: the work runs on a fresh one");
        assert!(give.send(Handover(work)).is_ok(), "the new thread waits for its work");
        match handle.join() {
            Ok(Some(Handover(result))) => result,
            Ok(None) => unreachable!("the work was sent"),
            Err(panic) => resume_unwind(panic),
        }
    });
    // libtorch keeps the last count set as the default of threads to come.
    tch::set_num_threads(threads);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What libtorch's panic says when oneDNN's JIT could not allocate (seen under an address-space cap).
    fn cannot_create_kernel() -> Result<(), ExecError> {
        panic!("Torch(\"could not create a primitive\\nException raised from ...\")")
    }

    #[test]
    fn work_after_a_failed_kernel_runs_on_another_thread() {
        std::thread::spawn(|| {
            let home = std::thread::current().id();
            let ran_on = || attempt(|| Ok::<_, ExecError>(std::thread::current().id())).unwrap();
            assert_eq!(ran_on(), home, "a thread that can create kernels keeps its work");
            assert!(attempt(cannot_create_kernel).is_err_and(|e| e.is_out_of_memory()));
            let first = ran_on();
            let second = ran_on();
            assert_ne!(first, home);
            assert_ne!(second, home);
            assert_ne!(first, second, "each call gets a fresh thread");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn other_failures_keep_the_thread() {
        std::thread::spawn(|| {
            let home = std::thread::current().id();
            assert!(attempt(|| Err::<(), _>(ExecError::Invalid("bad".into()))).is_err());
            let tensor_too_large = || -> Result<(), ExecError> { panic!("DefaultCPUAllocator: can't allocate memory: you tried to allocate 12 bytes") };
            assert!(attempt(tensor_too_large).is_err_and(|e| e.is_out_of_memory()));
            assert!(attempt(|| -> Result<(), ExecError> { panic!("index out of range") }).is_err_and(|e| e.code() == "internal-error"));
            assert_eq!(attempt(|| Ok::<_, ExecError>(std::thread::current().id())).unwrap(), home);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_fresh_thread_computes_alone_and_the_caller_keeps_its_threads() {
        std::thread::spawn(|| {
            tch::set_num_threads(2);
            let _ = attempt(cannot_create_kernel);
            let on_fresh_thread = attempt(|| Ok::<_, ExecError>(tch::get_num_threads())).unwrap();
            assert_eq!(on_fresh_thread, 1);
            assert_eq!(tch::get_num_threads(), 2);
            assert!(this_thread_cannot_create_kernels());
        })
        .join()
        .unwrap();
    }

    /// Set in the child process of the test below, which limits its own address space.
    const CHILD: &str = "VAEBOX_TEST_KERNEL_FAILURE_CHILD";

    /// Real libtorch, in a process of its own (an address-space limit would fail the other tests):
    /// a convolution of a new shape under a limit fails to get its oneDNN kernel; after the limit is
    /// lifted the same thread still cannot create kernels, and work through `attempt` runs again.
    #[test]
    fn after_a_kernel_could_not_be_created_new_shapes_run_on_a_fresh_thread() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "executor::attempt::tests::kernel_failure_in_this_process", "--ignored", "--nocapture", "--test-threads", "1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("{stdout}");
        assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}\n{stderr}");
    }

    #[test]
    #[ignore = "run by after_a_kernel_could_not_be_created_… in a process of its own"]
    fn kernel_failure_in_this_process() {
        use tch::{Device, Kind, Tensor};
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        std::thread::spawn(|| {
            let conv = |side: i64| -> Result<Tensor, ExecError> {
                let options = (Kind::Float, Device::Cpu);
                let x = Tensor::ones([1, 16, 2, side, side], options);
                let weight = Tensor::ones([16, 16, 3, 3, 3], options) * 0.01;
                Ok(crate::models::nn::conv3d::conv3d(&x, &weight, &Tensor::zeros([16], options), [1, 1, 1], [1, 1, 1])?)
            };
            let _ = conv(8).unwrap();
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let vm_kib: u64 = status.lines().find(|l| l.starts_with("VmSize:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
            let limit = |soft: libc::rlim_t| {
                let limit = libc::rlimit { rlim_cur: soft, rlim_max: libc::RLIM_INFINITY };
                // SAFETY: a plain system call on a struct that lives across it.
                assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
            };
            limit((vm_kib << 10) + (2 << 20));
            let failed = (9..40).find_map(|side| attempt(|| conv(side)).err().map(|e| (side, e)));
            limit(libc::RLIM_INFINITY);
            let (side, error) = failed.expect("every convolution got its kernel under the limit");
            println!("side {side} under the limit: {error}");
            assert!(error.to_string().contains(crate::models::ONEDNN_CANNOT_CREATE_KERNEL), "{error}");
            let here = catch_unwind(AssertUnwindSafe(|| conv(41)));
            assert!(!matches!(here, Ok(Ok(_))), "the thread created a kernel again: the fresh thread is not needed any more");
            for side in [43, 45] {
                let _ = attempt(|| conv(side)).unwrap_or_else(|e| panic!("side {side} after the limit: {e}"));
            }
        })
        .join()
        .unwrap();
    }
}
