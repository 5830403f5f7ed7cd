//! Work-queue benchmarks.
//!
//! - `add_get_done/*`: a producer adds distinct `namespace/name` keys while workers loop on
//!   `get` + `done`; one element = one add + get + done. `1_worker` runs on a current-thread
//!   runtime (one core); `4_workers` on a 4-thread runtime.
//! - `timers/*`: 1,000,000 pending `add_after` timers: the time to insert them, and the time for
//!   the timer task to move them all into the queue once they are due. The memory they take is
//!   printed before the benchmarks run (resident set growth read from `/proc/self/statm`).
//!
//! - `add_get_done_on_cpu/*`: the one-worker cases again, timed by the on-CPU time of the single
//!   runtime thread (`/proc/thread-self/schedstat`) instead of the wall clock, so that other load
//!   on a shared machine does not count. `timers_on_cpu/*` does the same for the timer cases
//!   (both run on a current-thread runtime). Skipped where that file does not exist.
//!
//! Run: `cargo bench -p benches --bench workqueue` (about three minutes).

use criterion::{BenchmarkId, Criterion, Throughput};
use sample_client_go::workqueue::{
    DelayingQueue, Queue, QueueMetrics, RateLimitingQueue, default_controller_rate_limiter,
};
use std::hash::Hash;
use std::time::{Duration, Instant};

const TIMERS: usize = 1_000_000;

fn keys(n: u64) -> Vec<String> {
    (0..n).map(|i| format!("default/object-{i:08}")).collect()
}

/// The three queue flavours under the same worker loop.
#[derive(Clone)]
enum AnyQueue<T> {
    Plain(Queue<T>),
    RateLimiting(RateLimitingQueue<T>),
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> AnyQueue<T> {
    fn add(&self, item: T) {
        match self {
            AnyQueue::Plain(q) => q.add(item),
            AnyQueue::RateLimiting(q) => q.add(item),
        }
    }
    async fn get(&self) -> Option<T> {
        match self {
            AnyQueue::Plain(q) => q.get().await,
            AnyQueue::RateLimiting(q) => q.get().await,
        }
    }
    fn done(&self, item: &T) {
        match self {
            AnyQueue::Plain(q) => q.done(item),
            AnyQueue::RateLimiting(q) => q.done(item),
        }
    }
    fn shut_down(&self) {
        match self {
            AnyQueue::Plain(q) => q.shut_down(),
            AnyQueue::RateLimiting(q) => q.shut_down(),
        }
    }
}

/// Adds every key (yielding every 256 adds so workers run meanwhile), shuts down, and waits for
/// the workers to drain the queue. Returns how many items the workers processed.
async fn produce_and_drain(queue: AnyQueue<String>, items: Vec<String>, workers: usize) -> usize {
    let mut handles = Vec::with_capacity(workers);
    for _ in 0..workers {
        let q = queue.clone();
        handles.push(tokio::spawn(async move {
            let mut n = 0usize;
            while let Some(item) = q.get().await {
                q.done(&item);
                n += 1;
            }
            n
        }));
    }
    for (i, item) in items.into_iter().enumerate() {
        queue.add(item);
        if i % 256 == 255 {
            tokio::task::yield_now().await;
        }
    }
    queue.shut_down();
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap_or(0);
    }
    total
}

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    let rt = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    };
    match rt {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build the benchmark runtime: {e}"),
    }
}

/// Nanoseconds this thread has spent on a CPU (Linux), from `/proc/thread-self/schedstat`.
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

#[derive(Clone, Copy, PartialEq)]
enum Clock {
    Wall,
    /// On-CPU time of the calling thread: only meaningful on a current-thread runtime.
    ThreadCpu,
}

fn bench_add_get_done(c: &mut Criterion, clock: Clock) {
    let (name, cases): (&str, &[(&str, usize)]) = match clock {
        Clock::Wall => (
            "add_get_done",
            &[
                ("queue", 1),
                ("queue", 4),
                ("rate_limiting_queue", 1),
                ("named_queue_with_metrics", 1),
            ],
        ),
        Clock::ThreadCpu => (
            "add_get_done_on_cpu",
            &[
                ("queue", 1),
                ("rate_limiting_queue", 1),
                ("named_queue_with_metrics", 1),
            ],
        ),
    };
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    for &(flavour, workers) in cases {
        let rt = runtime(workers);
        let id = BenchmarkId::new(
            flavour,
            format!("{workers}_worker{}", if workers > 1 { "s" } else { "" }),
        );
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let items = keys(iters);
                let queue = rt.block_on(async {
                    match flavour {
                        "queue" => AnyQueue::Plain(Queue::new()),
                        "rate_limiting_queue" => AnyQueue::RateLimiting(RateLimitingQueue::new(
                            default_controller_rate_limiter(),
                        )),
                        _ => {
                            let mut registry = prometheus_client::registry::Registry::default();
                            let metrics = QueueMetrics::new(&mut registry);
                            AnyQueue::Plain(Queue::with_metrics("bench", &metrics))
                        }
                    }
                });
                let start = Instant::now();
                let cpu_start = thread_cpu_ns().unwrap_or(0);
                let done = rt.block_on(produce_and_drain(queue, items, workers));
                let elapsed = match clock {
                    Clock::Wall => start.elapsed(),
                    Clock::ThreadCpu => {
                        Duration::from_nanos(thread_cpu_ns().unwrap_or(0).saturating_sub(cpu_start))
                    }
                };
                assert_eq!(done as u64, iters, "every distinct key is processed once");
                elapsed
            });
        });
    }
    group.finish();
}

/// Inserts `TIMERS` add_after timers with `delay` on a current-thread runtime.
fn insert_timers(q: &DelayingQueue<u64>, delay: Duration) {
    for i in 0..TIMERS as u64 {
        q.add_after(i, delay);
    }
}

fn bench_timers(c: &mut Criterion, clock: Clock) {
    let mut group = c.benchmark_group(match clock {
        Clock::Wall => "timers",
        Clock::ThreadCpu => "timers_on_cpu",
    });
    group.throughput(Throughput::Elements(TIMERS as u64));
    let rt = runtime(1);
    let stopwatch = move || (Instant::now(), thread_cpu_ns().unwrap_or(0));
    let elapsed = move |(wall, cpu): (Instant, u64)| match clock {
        Clock::Wall => wall.elapsed(),
        Clock::ThreadCpu => Duration::from_nanos(thread_cpu_ns().unwrap_or(0).saturating_sub(cpu)),
    };

    group.bench_function("insert_1m_add_after", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rt.block_on(async {
                    let q = DelayingQueue::new();
                    let start = stopwatch();
                    insert_timers(&q, Duration::from_secs(3600));
                    total += elapsed(start);
                    q.shut_down();
                });
            }
            total
        });
    });

    group.bench_function("fire_1m_due", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rt.block_on(async {
                    let q = DelayingQueue::new();
                    // The timer task cannot run while this task inserts (one thread), so every
                    // timer is due (1 ms) by the time the clock starts.
                    insert_timers(&q, Duration::from_millis(1));
                    // Block (not await) so the timer task does not start before the clock does.
                    std::thread::sleep(Duration::from_millis(2));
                    let start = stopwatch();
                    while q.len() < TIMERS {
                        tokio::task::yield_now().await;
                    }
                    total += elapsed(start);
                    q.shut_down();
                });
            }
            total
        });
    });
    group.finish();
}

/// Resident set size in bytes, from `/proc/self/statm` (Linux); `None` elsewhere.
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(resident * 4096)
}

/// Prints the memory taken by one million pending timers.
fn report_timer_memory() {
    let rt = runtime(1);
    rt.block_on(async {
        let before = rss_bytes();
        let q = DelayingQueue::new();
        insert_timers(&q, Duration::from_secs(3600));
        let after = rss_bytes();
        match (before, after) {
            (Some(b), Some(a)) => {
                let grown = a.saturating_sub(b);
                println!(
                    "timers/memory: {} pending add_after timers (u64 items) grew the resident set by {:.1} MiB ({} bytes per timer)",
                    q.waiting_len(),
                    grown as f64 / (1024.0 * 1024.0),
                    grown / TIMERS as u64
                );
            }
            _ => println!("timers/memory: /proc/self/statm not available on this platform"),
        }
        q.shut_down();
    });
}

fn main() {
    report_timer_memory();
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench_add_get_done(&mut c, Clock::Wall);
    if thread_cpu_ns().is_some() {
        bench_add_get_done(&mut c, Clock::ThreadCpu);
    }
    bench_timers(&mut c, Clock::Wall);
    if thread_cpu_ns().is_some() {
        bench_timers(&mut c, Clock::ThreadCpu);
    }
    c.final_summary();
}
