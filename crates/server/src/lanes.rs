//! The lanes beside the runtime's workers and its blocking pool: small pools of dedicated
//! threads, each with its own queue, so that what runs on one never waits for a thread that
//! another kind of work holds.
//!
//! - The decode lane ([`decode`]) runs the CPU work before and after a large message's command:
//!   decompression, the wire decoder's BSON checks and conversion, the request's own checks
//!   (`decode.rs`), and compression of a large reply. On the runtime's workers, which serve
//!   every connection's reads and the control commands, a 40 MB zlib-compressed insert held one
//!   worker for a fraction of a second; on the blocking pool, commands would queue behind
//!   decodes. It has one thread fewer than the cores (at least one), so a core is always left
//!   for the workers, and since a connection reads, decodes and runs one message at a time, one
//!   connection uses at most one of its threads.
//! - The control lane ([`control`]) runs the control commands that read more than memory
//!   (serverStatus lists the catalog, authentication reads users), which must not wait for a
//!   blocking-pool thread that a scan holds, nor hold a runtime worker (`execution.rs`).
//!
//! - Own threads ([`own_thread`]) run the commands that wait for other commands of the same
//!   process: a transaction's prepare, commit and abort, and a two-phase commit's coordination.
//!   Reads and writes waiting for a prepared transaction's decision may fill the blocking pool,
//!   and a coordinator waits for its own shard's prepare; on the pool, either could hold every
//!   thread the other needs (seen: 16 cross-shard transfers, 8 pool threads, each a coordinator
//!   waiting for a prepare queued behind it).
//!
//! A job waits in its lane's queue as a parked task, holding no thread. Lane threads enter the
//! runtime's context, so code that needs it runs there as on the blocking pool.
//!
//! Invariant: a job that panics answers InternalError to its connection; its thread lives on.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

use myriad_commands::CommandError;

type Job = Box<dyn FnOnce() + Send>;

/// Stack of lane threads: requests' checks recurse through nested documents as commands do
/// (see `network::runtime`).
const LANE_THREAD_STACK_BYTES: usize = 16 * 1024 * 1024;
/// Threads of the control lane: two, so a slow serverStatus (many databases) leaves one free.
const CONTROL_THREADS: usize = 2;
/// The decode lane's threads run at this nice value above the process's: when the cores are
/// busy, the scheduler gives a decode a tenth of the share of a runtime worker (weights 110
/// against 1024), so a worker woken by a ping preempts a decode at once instead of waiting for
/// its time slice; when a core is free, decodes use all of it as before.
const DECODE_NICE_INCREMENT: i32 = 10;

static DECODE: OnceLock<Lane> = OnceLock::new();
static CONTROL: OnceLock<Lane> = OnceLock::new();

/// Runs `work` on the decode lane and waits for it without holding a runtime thread.
pub async fn decode<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, CommandError> {
    DECODE.get_or_init(|| Lane::start("myriad-decode", decode_threads(), decode_nice_increment())).run(work).await
}

/// Runs `work` on a thread of its own, started for it, and waits for it without holding a
/// runtime thread: for the commands that wait for other commands of this process to finish
/// (a two-phase commit's coordinator waits for its own shard's prepare and commit; a prepared
/// transaction's decision is what the reads and writes queued behind it wait for), which on a
/// bounded pool could each hold a thread the other needs.
pub async fn own_thread<T: Send + 'static>(name: &str, work: impl FnOnce() -> T + Send + 'static) -> Result<T, CommandError> {
    own_thread_at(name, 0, work).await
}

/// Runs the command of a large message ([`CommandRequest::heavy`]) on a thread of its own at
/// the decode lane's lower priority: its CPU (a 40 MB insert's key generation and memtable
/// inserts) then yields at once to a runtime worker woken by a cheap command, as its decoding
/// does. A thread per command, not a lane: nothing queues (each connection runs one message
/// at a time), so maxTimeMS, currentOp and killOp see the command as on the blocking pool; the
/// thread's start is small beside half a megabyte of BSON.
///
/// [`CommandRequest::heavy`]: myriad_commands::CommandRequest::heavy
pub async fn heavy<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, CommandError> {
    own_thread_at("myriad-heavy", decode_nice_increment(), work).await
}

async fn own_thread_at<T: Send + 'static>(name: &str, nice_increment: i32, work: impl FnOnce() -> T + Send + 'static) -> Result<T, CommandError> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let runtime = tokio::runtime::Handle::try_current().ok();
    let spawned = std::thread::Builder::new().name(name.to_string()).stack_size(LANE_THREAD_STACK_BYTES).spawn(move || {
        let _context = runtime.as_ref().map(tokio::runtime::Handle::enter);
        lower_priority(nice_increment);
        if let Ok(result) = std::panic::catch_unwind(AssertUnwindSafe(work)) {
            let _ = answer.send(result);
        }
    });
    if let Err(error) = spawned {
        return Err(CommandError::internal(format!("cannot start a thread: {error}")));
    }
    // A job that panicked dropped its answer without sending it.
    answered.await.map_err(|_| CommandError::internal("the work failed"))
}

/// Runs `work` on the control lane and waits for it without holding a runtime thread.
pub async fn control<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, CommandError> {
    CONTROL.get_or_init(|| Lane::start("myriad-control", control_threads(), 0)).run(work).await
}

/// One fewer than the cores, at least one. Override with MYRIAD_DECODE_THREADS.
fn decode_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |count| count.get());
    thread_count("MYRIAD_DECODE_THREADS", decode_lane_threads(cores))
}

fn decode_lane_threads(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

/// [`DECODE_NICE_INCREMENT`]; override with MYRIAD_DECODE_NICE (0 to 19).
fn decode_nice_increment() -> i32 {
    std::env::var("MYRIAD_DECODE_NICE").ok().and_then(|value| value.parse().ok()).unwrap_or(DECODE_NICE_INCREMENT).clamp(0, 19)
}

/// Override with MYRIAD_CONTROL_THREADS.
fn control_threads() -> usize {
    thread_count("MYRIAD_CONTROL_THREADS", CONTROL_THREADS)
}

fn thread_count(variable: &str, default: usize) -> usize {
    std::env::var(variable).ok().and_then(|value| value.parse().ok()).unwrap_or(default).max(1)
}

/// A pool of named threads taking jobs from one queue, oldest first.
struct Lane {
    sender: Mutex<mpsc::Sender<Job>>,
    /// Threads that started; with none, jobs run on the caller's thread.
    threads: usize,
}

impl Lane {
    /// `nice_increment`: how much lower than the process's its threads' priority is.
    fn start(name: &str, threads: usize, nice_increment: i32) -> Lane {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let runtime = tokio::runtime::Handle::try_current().ok();
        let mut started = 0;
        for index in 0..threads {
            let (receiver, runtime) = (Arc::clone(&receiver), runtime.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{index}"))
                .stack_size(LANE_THREAD_STACK_BYTES)
                .spawn(move || {
                    let _context = runtime.as_ref().map(tokio::runtime::Handle::enter);
                    lower_priority(nice_increment);
                    serve_jobs(&receiver);
                });
            started += usize::from(spawned.is_ok());
        }
        Lane { sender: Mutex::new(sender), threads: started }
    }

    async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T, CommandError> {
        if self.threads == 0 {
            return std::panic::catch_unwind(AssertUnwindSafe(work)).map_err(|_| CommandError::internal("the work failed"));
        }
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = answer.send(work());
        });
        let sent = match self.sender.lock() {
            Ok(sender) => sender.send(job),
            Err(poisoned) => poisoned.into_inner().send(job),
        };
        if sent.is_err() {
            return Err(CommandError::internal("the lane has stopped"));
        }
        // A job that panicked dropped its answer without sending it.
        answered.await.map_err(|_| CommandError::internal("the work failed"))
    }
}

/// Lowers the calling thread's priority by `increment` nice levels (nothing for 0). A failure
/// leaves the thread at the process's priority, which only costs the workers' latency.
fn lower_priority(increment: i32) {
    if increment == 0 {
        return;
    }
    // SAFETY: gettid and getpriority/setpriority take no pointers; with PRIO_PROCESS and this
    // thread's id, Linux changes this thread's nice value only.
    unsafe {
        let thread_id = libc::id_t::try_from(libc::gettid()).unwrap_or(0);
        if thread_id == 0 {
            return;
        }
        let current = libc::getpriority(libc::PRIO_PROCESS, thread_id);
        let _ = libc::setpriority(libc::PRIO_PROCESS, thread_id, current.saturating_add(increment).min(19));
    }
}

/// A lane thread: takes the oldest waiting job, runs it, and again until the process ends.
fn serve_jobs(receiver: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = match receiver.lock() {
            Ok(receiver) => receiver.recv(),
            Err(poisoned) => poisoned.into_inner().recv(),
        };
        let Ok(job) = job else { return };
        let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_is_left_for_the_workers() {
        assert_eq!(decode_lane_threads(1), 1);
        assert_eq!(decode_lane_threads(2), 1);
        assert_eq!(decode_lane_threads(8), 7);
    }

    #[tokio::test]
    async fn jobs_answer_and_a_panic_becomes_an_error() {
        let lane = Lane::start("test-lane", 1, 5);
        assert_eq!(lane.run(|| 6 * 7).await.expect("answered"), 42);
        let failed = lane.run(|| -> i32 { panic!("a job that panics") }).await;
        assert!(failed.is_err(), "a panic is an error, not a hang");
        assert_eq!(lane.run(|| "still serving").await.expect("the thread lives on"), "still serving");
        let in_context = lane.run(|| tokio::runtime::Handle::try_current().is_ok()).await.expect("answered");
        assert!(in_context, "lane threads run in the runtime's context");
        // SAFETY: getpriority takes no pointers; on Linux, 0 names the calling thread.
        let lane_nice = lane.run(|| unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }).await.expect("answered");
        // SAFETY: as above.
        let own_nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        assert_eq!(lane_nice, (own_nice + 5).min(19), "the lane's thread runs 5 nice levels lower");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_heavy_command_runs_at_the_decode_lanes_priority_and_a_panic_becomes_an_error() {
        // SAFETY: getpriority takes no pointers; on Linux, 0 names the calling thread.
        let (heavy_nice, in_context) = heavy(|| (unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }, tokio::runtime::Handle::try_current().is_ok()))
            .await
            .expect("answered");
        // SAFETY: as above.
        let own_nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        assert_eq!(heavy_nice, (own_nice + decode_nice_increment()).min(19));
        assert!(in_context, "the command's thread runs in the runtime's context");
        assert!(heavy(|| -> i32 { panic!("a command that panics") }).await.is_err());
    }
}
