//! The plugin threads: a few plain threads that run plugin calls for requests.
//!
//! A plugin call is synchronous CPU work (bounded by the plugin time limit), so it must
//! not run on an async worker. `block_in_place` would hand the worker's core to a new
//! thread on every request, and under load that churn of context switches costs more
//! than the calls themselves. Instead, one thread per core waits on a bounded queue:
//! a request sends its call as a job and awaits the answer. Requests beyond the
//! threads wait in the queue, and past it in `send_async` (without blocking a
//! worker), before their plugin starts, so a call never waits for a core while its
//! wall-clock time limit runs. A queued job whose request has gone is skipped.
//!
//! The threads are plain threads with no Tokio context on purpose: the sandbox's sync
//! WASI shims (`wasmtime_wasi::runtime::in_tokio`, reached when a plugin writes to
//! stderr, say) block on the ambient runtime when there is one, which panics on an
//! async worker; without one they use wasmtime-wasi's own, made on the first such call.
//!
//! A job that panics answers [`ThreadFailure::Panicked`] and its thread goes on to the
//! next job; a pool that cannot take or answer a job answers [`ThreadFailure::Stopped`]
//! instead of leaving the request waiting. Dropping the pool lets its threads finish
//! the queued jobs and exit.

use std::num::NonZero;
use std::panic::{AssertUnwindSafe, catch_unwind};
use tokio::sync::oneshot;

/// Jobs that wait in the queue, per thread: a thread that finishes a call finds the
/// next one ready; requests beyond that wait in `send_async`, on their own tasks.
/// Deep enough that a busy server's requests queue their calls at once: a request
/// that waits in `send_async` is woken once to hand its job over and again for the
/// answer, and that second wake per request was measurable (docs/performance.md,
/// section 16). Memory is not what this bounds: the body budget holds every body
/// a job can carry.
const QUEUED_PER_THREAD: usize = 64;

type Job = Box<dyn FnOnce() + Send>;

/// Most threads one server starts, however many cores it has. Each holds an instance
/// of the engine's pool while its call runs; half the pool is left for what takes one
/// elsewhere (compiling and describing a plugin at load or upload, other servers in
/// the process), so that a machine with as many cores as the pool has instances does
/// not answer 500 for want of one.
const MAX_THREADS: usize = super::runtime::POOL_INSTANCES as usize / 2;
const _: () = assert!(MAX_THREADS >= 1 && MAX_THREADS < super::runtime::POOL_INSTANCES as usize);

/// How long a request's call may wait for room in the queue: past that, every
/// thread has a full queue of calls ahead of it, and the request is answered 429
/// `overloaded` rather than left waiting (its body held) with no answer.
const ROOM_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// A job that did not produce its answer. Never the sender's fault: HTTP 500.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum ThreadFailure {
    #[error("the plugin call panicked")]
    Panicked,
    #[error("the plugin threads have stopped")]
    Stopped,
    /// No room in the queue within [`ROOM_WITHIN`]: the server is overloaded.
    #[error("the plugin threads' queue had no room")]
    Busy,
}

/// Threads named `hookhost-plugin-N` fed by one bounded queue.
#[derive(Debug)]
pub struct PluginThreads {
    jobs: flume::Sender<Job>,
    threads: usize,
    /// [`ROOM_WITHIN`], but in tests.
    room_within: std::time::Duration,
}

impl PluginThreads {
    /// One thread per core (at least one, at most [`MAX_THREADS`]): the plugin calls
    /// that run at once.
    pub fn per_core() -> std::io::Result<PluginThreads> {
        let cores = std::thread::available_parallelism().map_or(1, NonZero::get);
        PluginThreads::start(cores.min(MAX_THREADS))
    }

    /// `threads` threads (at least one).
    pub fn start(threads: usize) -> std::io::Result<PluginThreads> {
        let threads = threads.max(1);
        let (jobs, queue) = flume::bounded::<Job>(threads * QUEUED_PER_THREAD);
        for n in 0..threads {
            let queue = queue.clone();
            // On an error the threads already started exit when `jobs` drops.
            std::thread::Builder::new()
                .name(format!("hookhost-plugin-{n}"))
                .spawn(move || work(&queue))?;
        }
        Ok(PluginThreads {
            jobs,
            threads,
            room_within: ROOM_WITHIN,
        })
    }

    /// How many calls run at once.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Run `call` on a plugin thread and hand back its answer. Waits (asynchronously)
    /// for room in the queue first. A caller that goes away before its job starts
    /// (the sender hung up) costs no plugin call.
    pub async fn run<T, F>(&self, call: F) -> Result<T, ThreadFailure>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move || {
            if answer.is_closed() {
                return;
            }
            let outcome = catch_unwind(AssertUnwindSafe(call)).map_err(|panic| {
                log_panic(&*panic);
                ThreadFailure::Panicked
            });
            let _ = answer.send(outcome);
        });
        self.queue(job).await?;
        // A job dropped unanswered (its thread gone) closes the channel: Stopped.
        answered.await.map_err(|_| ThreadFailure::Stopped)?
    }

    /// Queue `call` on a plugin thread, waiting (asynchronously) for room first, at
    /// most [`ROOM_WITHIN`] ([`ThreadFailure::Busy`] then), and return once it is
    /// queued: the call answers its request itself, through what it carries, so the
    /// request wakes only for that answer. A call that panics drops what it carries,
    /// and its request sees a call that did not answer.
    pub async fn dispatch<F>(&self, call: F) -> Result<(), ThreadFailure>
    where
        F: FnOnce() + Send + 'static,
    {
        let job: Job = Box::new(move || {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(call)) {
                log_panic(&*panic);
            }
        });
        // Room at once is the common case, and it reads no clock.
        match self.jobs.try_send(job) {
            Ok(()) => Ok(()),
            Err(flume::TrySendError::Disconnected(_)) => Err(ThreadFailure::Stopped),
            Err(flume::TrySendError::Full(job)) => {
                tokio::time::timeout(self.room_within, self.queue(job))
                    .await
                    .map_err(|_| ThreadFailure::Busy)?
            }
        }
    }

    async fn queue(&self, job: Job) -> Result<(), ThreadFailure> {
        self.jobs
            .send_async(job)
            .await
            .map_err(|_| ThreadFailure::Stopped)
    }
}

fn log_panic(panic: &(dyn std::any::Any + Send)) {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    tracing::error!(panic = message, "plugin call panicked");
}

/// A plugin thread: jobs until the pool is dropped.
fn work(queue: &flume::Receiver<Job>) {
    while let Ok(job) = queue.recv() {
        // A job catches its own call's panic; this catches one from dropping a panic's
        // payload, so no job can end the thread. That second payload is leaked rather
        // than dropped, for the same reason.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(job)) {
            std::mem::forget(payload);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_runs_on_a_named_plain_thread() {
        let pool = PluginThreads::start(2).expect("threads start");
        let (name, tokio_context) = pool
            .run(|| {
                (
                    std::thread::current().name().map(str::to_owned),
                    tokio::runtime::Handle::try_current().is_ok(),
                )
            })
            .await
            .expect("the job answers");
        assert!(
            name.as_deref()
                .is_some_and(|n| n.starts_with("hookhost-plugin-")),
            "{name:?}"
        );
        assert!(
            !tokio_context,
            "a plugin thread must not have a Tokio context"
        );
        assert_eq!(pool.run(|| 6 * 7).await, Ok(42));
    }

    /// With the thread busy and its queue full, a dispatched call waits for room at
    /// most `room_within`, then is answered `Busy`, and never runs; once there is room
    /// again, calls are queued and run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_finding_no_room_in_time_is_busy_and_never_runs() {
        let mut pool = PluginThreads::start(1).expect("threads start");
        pool.room_within = std::time::Duration::from_millis(200);
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, running) = oneshot::channel();
        pool.dispatch(move || {
            let _ = started.send(());
            let _ = held.recv();
        })
        .await
        .expect("queued");
        running.await.expect("the thread is held");
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = |ran: &std::sync::Arc<std::sync::atomic::AtomicUsize>| {
            let ran = ran.clone();
            move || {
                ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        };
        for _ in 0..QUEUED_PER_THREAD {
            pool.dispatch(count(&ran)).await.expect("room in the queue");
        }
        let waited = std::time::Instant::now();
        assert_eq!(pool.dispatch(count(&ran)).await, Err(ThreadFailure::Busy));
        assert!(
            waited.elapsed() >= pool.room_within,
            "{:?}",
            waited.elapsed()
        );

        release.send(()).expect("release");
        let (answer, answered) = oneshot::channel();
        pool.dispatch(move || {
            let _ = answer.send(());
        })
        .await
        .expect("room again");
        answered.await.expect("the last call ran");
        // The queue runs in order: every queued call ran, the refused one did not.
        assert_eq!(
            ran.load(std::sync::atomic::Ordering::SeqCst),
            QUEUED_PER_THREAD
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_fails_alone_and_the_pool_keeps_working() {
        // One thread, so the job after the panic runs on the very thread that panicked.
        let pool = PluginThreads::start(1).expect("threads start");
        let panicked = pool.run(|| -> u32 { panic!("a host bug") }).await;
        assert_eq!(panicked, Err(ThreadFailure::Panicked));
        let pool = std::sync::Arc::new(pool);
        let calls: Vec<_> = (0..16)
            .map(|i| {
                let pool = pool.clone();
                tokio::spawn(async move { pool.run(move || i * 2).await })
            })
            .collect();
        for (i, call) in calls.into_iter().enumerate() {
            assert_eq!(call.await.expect("task"), Ok(i * 2));
        }
    }

    /// A dispatched call answers through what it carries: a panic drops that, which
    /// its caller sees as a closed channel, and the thread goes on to the next call.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dispatched_call_answers_itself_and_a_panic_drops_what_it_carries() {
        // One thread, so the call after the panic runs on the very thread that panicked.
        let pool = PluginThreads::start(1).expect("threads start");
        let (carried, dropped) = oneshot::channel::<u32>();
        pool.dispatch(move || {
            let _carried = carried;
            panic!("a host bug");
        })
        .await
        .expect("queued");
        assert!(dropped.await.is_err(), "nothing was sent");
        let (answer, answered) = oneshot::channel();
        pool.dispatch(move || {
            let _ = answer.send(6 * 7);
        })
        .await
        .expect("queued");
        assert_eq!(answered.await, Ok(42));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queued_job_whose_caller_left_never_runs() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let pool = Arc::new(PluginThreads::start(1).expect("threads start"));
        // Hold the one thread until the queued calls' callers have gone.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, running) = oneshot::channel();
        let busy = tokio::spawn({
            let pool = pool.clone();
            async move {
                pool.run(move || {
                    let _ = started.send(());
                    held.recv().expect("released");
                })
                .await
            }
        });
        running.await.expect("the first call runs");
        let ran = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let (pool, ran) = (pool.clone(), ran.clone());
                tokio::spawn(
                    async move { pool.run(move || ran.fetch_add(1, Ordering::SeqCst)).await },
                )
            })
            .collect();
        // Every caller's job is in the queue; then the callers go.
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while pool.jobs.len() < callers.len() {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the callers queue their jobs");
        for caller in &callers {
            caller.abort();
        }
        for caller in callers {
            assert!(caller.await.is_err_and(|e| e.is_cancelled()));
        }
        release.send(()).expect("the first call waits");
        assert_eq!(busy.await.expect("task"), Ok(()));
        // A call queued after them runs, and only it.
        let after = ran.clone();
        assert_eq!(
            pool.run(move || after.fetch_add(1, Ordering::SeqCst)).await,
            Ok(0)
        );
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_closed_pool_answers_stopped_instead_of_hanging() {
        // A queue nobody serves: its receiving end is gone.
        let (jobs, queue) = flume::bounded::<Job>(1);
        drop(queue);
        let pool = PluginThreads {
            jobs,
            threads: 1,
            room_within: ROOM_WITHIN,
        };
        assert_eq!(pool.run(|| 1).await, Err(ThreadFailure::Stopped));

        // A job dropped without being run (its thread gone) also answers.
        let (jobs, queue) = flume::bounded::<Job>(1);
        let pool = PluginThreads {
            jobs,
            threads: 1,
            room_within: ROOM_WITHIN,
        };
        let dropper = std::thread::spawn(move || drop(queue.recv()));
        assert_eq!(pool.run(|| 1).await, Err(ThreadFailure::Stopped));
        dropper.join().expect("dropper thread");
    }
}
