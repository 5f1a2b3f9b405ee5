//! The machine's speed, printed with every run so that figures in µs from two runs, or
//! two machines, can be set side by side: this VM's speed for the same code moves by
//! half from one hour to the next (docs/performance.md, sections 30, 34, 42 and 43).
//! Three readings, none of them a target:
//! - how fast one core hashes: SHA-256 over 1 KiB blocks, with the `sha2` code that
//!   hookhost hashes bodies and computes HMACs with;
//! - what a system call costs: a one-byte `write` to `/dev/null`. The kernel's part of
//!   a request (loopback TCP, wakes, the WAL's writes) is a quarter to a third of
//!   hookhost's CPU, and it has differed between machines whose hashing did not;
//! - how much CPU time the hypervisor took from this VM during the run: `steal` in
//!   `/proc/stat`, against all the ticks counted over the same time.

use sha2::{Digest as _, Sha256};
use std::hint::black_box;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long each speed reading runs.
const READING: Duration = Duration::from_millis(500);

/// One core's speed for hookhost's kind of work, read just now.
pub struct Speed {
    /// SHA-256 over 1 KiB blocks, bytes a second.
    pub sha256: f64,
    /// One `write` of one byte to `/dev/null`, or why it could not be read.
    pub syscall: Result<Duration, String>,
}

impl Speed {
    /// Read both, about a second in all.
    pub fn read() -> Speed {
        Speed {
            sha256: sha256_rate(),
            syscall: write_cost(Path::new("/dev/null")),
        }
    }

    /// The line the run prints.
    pub fn line(&self) -> String {
        let syscall = match &self.syscall {
            Ok(took) => format!(
                "a one-byte write to /dev/null {:.2} µs",
                took.as_secs_f64() * 1e6
            ),
            Err(why) => format!("a system call: not measured ({why})"),
        };
        format!(
            "machine speed: SHA-256 over 1 KiB blocks {:.2} GB/s on one core, {syscall}",
            self.sha256 / 1e9
        )
    }
}

fn sha256_rate() -> f64 {
    let block = [0x5a_u8; 1024];
    let started = Instant::now();
    let mut bytes = 0_u64;
    while started.elapsed() < READING {
        for _ in 0..256 {
            black_box(Sha256::digest(black_box(&block)));
        }
        bytes += 256 * block.len() as u64;
    }
    bytes as f64 / started.elapsed().as_secs_f64()
}

/// One-byte writes to `device` for `READING`; an error names the device and the cause.
fn write_cost(device: &Path) -> Result<Duration, String> {
    let failed = |error: std::io::Error| format!("{}: {error}", device.display());
    let mut sink = std::fs::OpenOptions::new()
        .write(true)
        .open(device)
        .map_err(failed)?;
    let started = Instant::now();
    let mut calls = 0_u32;
    while started.elapsed() < READING {
        for _ in 0..1_000 {
            sink.write_all(b"x").map_err(failed)?;
        }
        calls += 1_000;
    }
    Ok(started.elapsed() / calls)
}

/// The CPU ticks of all cores so far, from the first line of `/proc/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticks {
    /// Every state's ticks: user, nice, system, idle, iowait, irq, softirq and steal
    /// (guest time is already counted in user).
    pub total: u64,
    /// Ticks the hypervisor ran something else while this VM wanted the CPU.
    pub steal: u64,
}

impl Ticks {
    /// Now; `None` where `/proc/stat` cannot be read or has no steal column.
    pub fn now() -> Option<Ticks> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        Ticks::parse(text.lines().next()?)
    }

    fn parse(line: &str) -> Option<Ticks> {
        let mut fields = line.split_whitespace();
        if fields.next()? != "cpu" {
            return None;
        }
        let counts = fields
            .take(8)
            .map(|field| field.parse::<u64>().ok())
            .collect::<Option<Vec<u64>>>()?;
        let steal = *counts.get(7)?;
        Some(Ticks {
            total: counts.iter().sum(),
            steal,
        })
    }

    /// The line the run prints, for the time since `earlier`.
    pub fn stolen_since(&self, earlier: &Ticks) -> String {
        let total = self.total.saturating_sub(earlier.total);
        let steal = self.steal.saturating_sub(earlier.steal);
        let share = if total == 0 {
            0.0
        } else {
            steal as f64 * 100.0 / total as f64
        };
        format!(
            "CPU time taken by the hypervisor during the run: {steal} of {total} ticks ({share:.2}%)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn the_steal_column_is_read_from_the_first_line_of_proc_stat() -> anyhow::Result<()> {
        // Two readings of one machine's first line, 28,376 ticks apart.
        let before =
            Ticks::parse("cpu  254365 0 23810 66624 474 0 134 147 0 0").context("a full line")?;
        let after =
            Ticks::parse("cpu  263189 0 31940 75182 1458 0 2011 150 0 0").context("a full line")?;
        assert_eq!(before.steal, 147);
        assert_eq!(before.total, 254_365 + 23_810 + 66_624 + 474 + 134 + 147);
        assert_eq!(
            after.stolen_since(&before),
            "CPU time taken by the hypervisor during the run: 3 of 28376 ticks (0.01%)"
        );
        Ok(())
    }

    #[test]
    fn a_line_without_the_steal_column_or_of_one_core_is_not_read() {
        // Kernels before 2.6.11 had seven columns; `cpu0` is one core, not all of them.
        assert_eq!(Ticks::parse("cpu  254365 0 23810 66624 474 0 134"), None);
        assert_eq!(
            Ticks::parse("cpu0 254365 0 23810 66624 474 0 134 147 0 0"),
            None
        );
        assert_eq!(
            Ticks::parse("cpu  254365 0 x 66624 474 0 134 147 0 0"),
            None
        );
    }

    #[test]
    fn the_speed_line_gives_both_readings_in_their_units() {
        let speed = Speed {
            sha256: 1.49e9,
            syscall: Ok(Duration::from_nanos(350)),
        };
        assert_eq!(
            speed.line(),
            "machine speed: SHA-256 over 1 KiB blocks 1.49 GB/s on one core, \
             a one-byte write to /dev/null 0.35 µs"
        );
    }

    #[test]
    fn a_write_that_cannot_be_read_says_why_in_the_speed_line() {
        let speed = Speed {
            sha256: 1.49e9,
            syscall: write_cost(Path::new("/nonexistent-hookhost-dir/null")),
        };
        assert_eq!(
            speed.line(),
            "machine speed: SHA-256 over 1 KiB blocks 1.49 GB/s on one core, \
             a system call: not measured (/nonexistent-hookhost-dir/null: \
             No such file or directory (os error 2))"
        );
    }
}
