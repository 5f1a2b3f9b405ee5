//! The load matrix: hookhost on SQLite, the reference and the ceiling (`receivers`),
//! each its own process, at every concurrency level × body size, with each receiver's
//! accepted/s, latency, CPU per request and peak resident memory (`usage`).
//!
//! The cells run in turn across the receivers (for each body, for each concurrency:
//! hookhost, reference, ceiling), so the figures compared with each other are measured
//! seconds apart, and drift in the machine's speed (a shared disk and CPU) touches them
//! alike.

use crate::Table;
use crate::event::size_label;
use crate::load::{self, Payload, PhaseResult, Target};
use crate::usage::{self, Usage};
use std::time::Duration;

/// Who is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Hookhost,
    Reference,
    Ceiling,
}

impl Subject {
    pub fn label(self) -> &'static str {
        match self {
            Subject::Hookhost => "hookhost (SQLite)",
            Subject::Reference => "reference (SQLite)",
            Subject::Ceiling => "ceiling (bare axum)",
        }
    }
}

/// A running receiver of the matrix.
pub struct Contestant {
    pub subject: Subject,
    pub target: Target,
    pub pid: u32,
}

/// One receiver at one concurrency and body size.
pub struct Cell {
    pub subject: Subject,
    pub concurrency: u16,
    pub body: usize,
    pub result: PhaseResult,
    pub usage: Usage,
}

impl Cell {
    pub fn name(&self) -> String {
        format!(
            "{}, c={}, {}",
            self.subject.label(),
            self.concurrency,
            size_label(self.body)
        )
    }
}

/// The cell of `subject` at `concurrency` and `body`, if it was measured.
pub fn find(cells: &[Cell], subject: Subject, concurrency: u16, body: usize) -> Option<&Cell> {
    cells
        .iter()
        .find(|c| c.subject == subject && c.concurrency == concurrency && c.body == body)
}

/// Check each contestant with one event of the first body size (a bench whose events
/// are refused measures nothing) and warm it up for 1 s at concurrency 16; then measure
/// every cell for `duration`.
pub async fn run(
    contestants: &[Contestant],
    concurrency: &[u16],
    bodies: &[(usize, Payload)],
    duration: Duration,
) -> anyhow::Result<Vec<Cell>> {
    if let Some((size, payload)) = bodies.first() {
        for contestant in contestants {
            eprintln!(
                "{}: warming up (1 s at concurrency 16, {})…",
                contestant.subject.label(),
                size_label(*size)
            );
            contestant.target.expect_one(payload, "accepted").await?;
            load::drive(
                &contestant.target,
                16,
                Duration::from_secs(1),
                payload,
                "accepted",
            )
            .await?;
        }
    }
    let mut cells = Vec::new();
    for (body, payload) in bodies {
        for &c in concurrency {
            for contestant in contestants {
                eprintln!(
                    "{}: {} bodies at concurrency {c} for {} s…",
                    contestant.subject.label(),
                    size_label(*body),
                    duration.as_secs()
                );
                let (result, usage) = usage::measure(
                    &[contestant.pid],
                    load::drive(&contestant.target, c.into(), duration, payload, "accepted"),
                )
                .await?;
                cells.push(Cell {
                    subject: contestant.subject,
                    concurrency: c,
                    body: *body,
                    result,
                    usage,
                });
            }
        }
    }
    Ok(cells)
}

/// One row per cell, grouped by receiver, then body size, then concurrency.
pub fn table(cells: &[Cell]) -> Table {
    let mut table = Table::new(&[
        "receiver",
        "conns",
        "body",
        "accepted/s",
        "p50",
        "p99",
        "errors",
        "server CPU/req",
        "peak RSS",
        "bench CPU/req",
        "bench busy",
    ])
    .right_aligned_from(1);
    let mut order: Vec<&Cell> = cells.iter().collect();
    order.sort_by_key(|c| (c.subject as u8, c.body, c.concurrency));
    for cell in order {
        let ok = cell.result.ok;
        let usage = &cell.usage;
        table.cells(vec![
            cell.subject.label().into(),
            cell.concurrency.to_string(),
            size_label(cell.body),
            format!("{:.0}", cell.result.rate()),
            crate::ms(cell.result.percentile(0.50)),
            crate::ms(cell.result.percentile(0.99)),
            cell.result.error_count().to_string(),
            or_na(usage.cpu_per_request(ok).map(usage::micros)),
            or_na(usage.peak_rss.map(usage::mib)),
            or_na(usage.bench_cpu_per_request(ok).map(usage::micros)),
            or_na(usage.bench_busy().map(|b| {
                format!(
                    "{:.0}%{}",
                    b * 100.0,
                    if usage.generator_saturated() {
                        " *"
                    } else {
                        ""
                    }
                )
            })),
        ]);
    }
    table
}

fn or_na(value: Option<String>) -> String {
    value.unwrap_or_else(|| "n/a".into())
}
