//! Every built-in plugin on bodies at the default body cap, in the widest shapes JSON
//! has (the SDK's `testing::wide_bodies`), as a request gets them: one fresh instance,
//! plan then describe. Each call's wall-clock time, the median of a few, is held to the
//! default `plugin_time_ms`: a call past it is stopped and the request answered 500,
//! so a real provider's largest request must finish well within it.

use crate::Table;
use anyhow::anyhow;
use hookhost::config::DEFAULT_MAX_BODY_BYTES;
use hookhost::plugins::{Catalog, PluginLimits};
use hookhost::verify::{MessageSource, owned_headers};
use hookhost_plugin_sdk::testing::{WIDE_BODY_HEADERS, wide_bodies};
use std::time::{Duration, Instant};

/// Each plugin reads each body this many times; the median of each call is kept.
const RUNS: usize = 3;

/// The slowest call of any built-in on one shape of body.
struct Slowest {
    shape: &'static str,
    plugin: String,
    call: &'static str,
    took: Duration,
}

pub struct AtCap {
    /// The bodies' size.
    size: usize,
    limit: Duration,
    slowest: Vec<Slowest>,
}

/// The limits the bench loads the built-ins with: the defaults, but a generous time
/// limit, so that a slow call at the cap is timed, not cut off. (A call's cost does
/// not depend on its deadline: the per-request measurement uses the same catalogue.)
pub fn limits() -> PluginLimits {
    PluginLimits {
        time: Duration::from_secs(10),
        ..PluginLimits::default()
    }
}

/// Every built-in on bodies at the default cap, against the default time limit.
pub fn measure(catalog: &Catalog) -> anyhow::Result<AtCap> {
    measure_at(
        catalog,
        DEFAULT_MAX_BODY_BYTES,
        PluginLimits::default().time,
    )
}

/// Every plugin of `catalog` on the wide bodies of about `size` bytes: the slowest
/// call on each shape, to be held to `limit`.
fn measure_at(catalog: &Catalog, size: usize, limit: Duration) -> anyhow::Result<AtCap> {
    let headers = owned_headers(WIDE_BODY_HEADERS);
    let mut slowest = Vec::new();
    for (shape, body) in wide_bodies(size) {
        let source = MessageSource {
            method: "POST",
            url: "http://127.0.0.1/webhooks/at-cap",
            headers: &headers,
            body: body.as_bytes(),
        };
        let mut worst: Option<Slowest> = None;
        for plugin in catalog.iter() {
            let failed = |call: &str, failure: &dyn std::fmt::Display| {
                anyhow!("{} on {shape}, {call}: {failure}", plugin.name())
            };
            let (mut plans, mut describes) = (Vec::new(), Vec::new());
            for _ in 0..RUNS {
                let mut session = plugin
                    .session("{}", &source)
                    .map_err(|e| failed("instance", &e))?;
                // A plugin may reject such a body: the time is what counts.
                let started = Instant::now();
                let _ = session
                    .plan_verification()
                    .map_err(|e| failed("plan-verification", &e))?;
                let planned = Instant::now();
                let _ = session
                    .describe_event()
                    .map_err(|e| failed("describe-event", &e))?;
                describes.push(planned.elapsed());
                plans.push(planned - started);
            }
            for (call, mut took) in [("plan-verification", plans), ("describe-event", describes)] {
                took.sort_unstable();
                let median = took[took.len() / 2];
                if worst.as_ref().is_none_or(|w| median > w.took) {
                    worst = Some(Slowest {
                        shape,
                        plugin: plugin.name().to_owned(),
                        call,
                        took: median,
                    });
                }
            }
        }
        slowest.extend(worst);
    }
    Ok(AtCap {
        size,
        limit,
        slowest,
    })
}

impl AtCap {
    pub fn rows(&self, table: &mut Table) {
        let limit_ms = self.limit.as_secs_f64() * 1e3;
        for (i, slowest) in self.slowest.iter().enumerate() {
            let took_ms = slowest.took.as_secs_f64() * 1e3;
            let name = if i == 0 {
                format!(
                    "slowest built-in call, {} body: {}",
                    crate::event::size_label(self.size),
                    slowest.shape
                )
            } else {
                format!("  {}", slowest.shape)
            };
            table.row(
                &name,
                format!(
                    "{} {}: {took_ms:.1} ms ({:.1}× under the limit)",
                    slowest.plugin,
                    slowest.call,
                    limit_ms / took_ms
                ),
                format!("≤ {limit_ms:.0} ms (plugin_time_ms)"),
                Some(took_ms <= limit_ms),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost::plugins::BUILTIN_NAMES;

    /// Each shape gets one row: the slowest call of a real built-in on it, marked
    /// against the limit, PASS under it and FAIL over it.
    #[test]
    fn each_shape_gets_the_slowest_built_in_call_marked_against_the_limit() -> anyhow::Result<()> {
        const SIZE: usize = 16 * 1024;
        let catalog = Catalog::load(None, limits())?;
        let at_cap = measure_at(&catalog, SIZE, Duration::from_secs(10))?;
        let shapes: Vec<&str> = wide_bodies(SIZE).iter().map(|(shape, _)| *shape).collect();
        let measured: Vec<&str> = at_cap.slowest.iter().map(|s| s.shape).collect();
        assert_eq!(measured, shapes);
        for slowest in &at_cap.slowest {
            assert!(
                BUILTIN_NAMES.contains(&slowest.plugin.as_str()),
                "{}",
                slowest.plugin
            );
            assert!(["plan-verification", "describe-event"].contains(&slowest.call));
            assert!(slowest.took > Duration::ZERO);
        }
        let marks = |at_cap: &AtCap| {
            let mut table = Table::default();
            at_cap.rows(&mut table);
            assert!(table.rows[0][0].starts_with("slowest built-in call, 16 KiB body"));
            table
                .rows
                .iter()
                .map(|row| row[3].clone())
                .collect::<Vec<_>>()
        };
        assert!(marks(&at_cap).iter().all(|mark| mark == "PASS"));
        let below_every_call = AtCap {
            limit: Duration::from_nanos(1),
            ..at_cap
        };
        let failed = marks(&below_every_call);
        assert_eq!(failed.len(), shapes.len());
        assert!(failed.iter().all(|mark| mark == "FAIL"));
        Ok(())
    }
}
