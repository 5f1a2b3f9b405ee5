//! The wall clock, read in one place. Requests are judged and events scheduled by it;
//! vector tests pass their own `now` instead.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix milliseconds now (0 before 1970, saturating far in the future).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
