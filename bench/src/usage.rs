//! What a process costs while a load phase runs, read from Linux's `/proc`: CPU time
//! (user + system, all threads, `/proc/PID/stat`) before and after, and resident memory
//! (`VmRSS`, `/proc/PID/status`) sampled on a thread of its own, so that a busy load
//! generator does not delay the samples. Where `/proc` cannot be read the figures are
//! absent, and the bench runs on.

use anyhow::{Context as _, anyhow};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The unit of `utime` and `stime` in `/proc/PID/stat`: `USER_HZ`, which Linux fixes
/// at 100 in its ABI on every architecture (whatever the kernel's own tick).
const USER_HZ: u64 = 100;
/// How often resident memory is sampled during a phase.
const RSS_SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// The load generator is one thread: busier than this share of the phase, it may be
/// what limits the rate, not the receiver.
pub const GENERATOR_SATURATED: f64 = 0.9;

/// CPU time (user + system) `pid` has used so far; `None` for this process.
pub fn cpu_time(pid: Option<u32>) -> anyhow::Result<Duration> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".into(),
    };
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let fields: Vec<&str> = text
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // After the name: state is field 3, utime field 14 and stime field 15.
    let ticks = |field: usize| -> anyhow::Result<u64> {
        fields
            .get(field - 3)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("{path}: no field {field}"))
    };
    let ticks = ticks(14)? + ticks(15)?;
    Ok(Duration::from_millis(ticks * 1000 / USER_HZ))
}

/// `pid`'s resident memory now, bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let kib = text
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .ok_or_else(|| anyhow!("{path}: no VmRSS"))?;
    Ok(kib * 1024)
}

/// What the measured processes and this one used over a phase.
#[derive(Debug, Default, Clone, Copy)]
pub struct Usage {
    /// CPU time of the measured processes (summed).
    pub cpu: Option<Duration>,
    /// CPU time of this process: the load generator.
    pub bench_cpu: Option<Duration>,
    pub wall: Duration,
    /// The largest sampled resident memory of the measured processes (summed per sample).
    pub peak_rss: Option<u64>,
}

impl Usage {
    /// The measured processes' CPU time per counted request.
    pub fn cpu_per_request(&self, requests: u64) -> Option<Duration> {
        per_request(self.cpu?, requests)
    }

    /// The load generator's CPU time per counted request.
    pub fn bench_cpu_per_request(&self, requests: u64) -> Option<Duration> {
        per_request(self.bench_cpu?, requests)
    }

    /// The load generator's CPU time ÷ the phase's wall time (1.0: one core, saturated).
    pub fn bench_busy(&self) -> Option<f64> {
        let cpu = self.bench_cpu?;
        let wall = self.wall.as_secs_f64();
        (wall > 0.0).then(|| cpu.as_secs_f64() / wall)
    }

    pub fn generator_saturated(&self) -> bool {
        self.bench_busy().is_some_and(|b| b >= GENERATOR_SATURATED)
    }
}

fn per_request(cpu: Duration, requests: u64) -> Option<Duration> {
    (requests > 0).then(|| cpu.div_f64(requests as f64))
}

/// Run `phase`, measuring the processes `pids` (and this one) while it runs.
pub async fn measure<T>(
    pids: &[u32],
    phase: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, Usage)> {
    let cpu = || -> Option<Duration> { pids.iter().map(|&p| cpu_time(Some(p)).ok()).sum() };
    let sampler = RssSampler::start(pids.to_vec())?;
    let (cpu_before, bench_before) = (cpu(), cpu_time(None).ok());
    let started = Instant::now();
    let outcome = phase.await;
    let wall = started.elapsed();
    let (cpu_after, bench_after) = (cpu(), cpu_time(None).ok());
    let peak_rss = sampler.finish();
    let value = outcome?;
    let delta = |before: Option<Duration>, after: Option<Duration>| {
        before.zip(after).map(|(b, a)| a.saturating_sub(b))
    };
    Ok((
        value,
        Usage {
            cpu: delta(cpu_before, cpu_after),
            bench_cpu: delta(bench_before, bench_after),
            wall,
            peak_rss,
        },
    ))
}

/// A thread sampling the summed resident memory of some processes until finished.
struct RssSampler {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Option<u64>>,
}

impl RssSampler {
    fn start(pids: Vec<u32>) -> anyhow::Result<RssSampler> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("rss-sampler".into())
            .spawn(move || {
                let mut peak: Option<u64> = None;
                loop {
                    let sample: Option<u64> = pids.iter().map(|&p| rss_bytes(p).ok()).sum();
                    if let Some(sample) = sample {
                        peak = Some(peak.map_or(sample, |p| p.max(sample)));
                    }
                    // A message or a dropped sender both end the sampling.
                    if !matches!(
                        stopped.recv_timeout(RSS_SAMPLE_EVERY),
                        Err(mpsc::RecvTimeoutError::Timeout)
                    ) {
                        return peak;
                    }
                }
            })
            .context("cannot start the memory sampler's thread")?;
        Ok(RssSampler { stop, thread })
    }

    /// Stop sampling (the last sample is at most one period old) and return the peak.
    fn finish(self) -> Option<u64> {
        let _ = self.stop.send(()); // a thread already gone is fine
        self.thread.join().ok().flatten()
    }
}

/// Bytes as MiB, one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// A duration as µs, one decimal.
pub fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory() -> anyhow::Result<()> {
        if !std::path::Path::new("/proc/self/stat").exists() {
            return Ok(()); // not Linux: the figures are absent, by design
        }
        cpu_time(None)?;
        assert!(rss_bytes(std::process::id())? > 0);
        Ok(())
    }
}
