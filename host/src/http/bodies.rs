//! The budget for request bodies held in memory at once (`[limits]
//! max_bodies_in_flight_bytes`).
//!
//! A request reserves its declared length (or the body cap, when it declares none)
//! before reading its body, and keeps the reservation until its answer is ready; a
//! receipt keeps it until the store is done with it (committed or failed), even when
//! the sender stopped waiting, so receipts queued behind a stalled store count too. When
//! the budget is spent, requests wait before reading: their bytes stay in the kernel's
//! socket buffers and the senders are slowed by TCP, not refused. The cap per body
//! (`max_body_bytes`) is never more than the budget, so every request fits eventually.

use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes per permit. A semaphore takes at most `u32::MAX` permits at once; counting in
/// KiB lets one body be up to 4 TiB, at the price of rounding each body up to a KiB.
const PERMIT_BYTES: usize = 1024;

#[derive(Debug)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    /// Permits in all; no reservation asks for more, so none waits forever.
    total: usize,
}

/// Bytes of body a request holds; given back when dropped.
#[derive(Debug)]
pub struct Reservation(OwnedSemaphorePermit);

impl BodyBudget {
    /// A budget of `bytes` (rounded up to a KiB).
    pub fn new(bytes: usize) -> BodyBudget {
        let total = permits(bytes).min(Semaphore::MAX_PERMITS);
        BodyBudget {
            permits: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Reserve room for `bytes` of body, waiting while the budget is spent.
    pub async fn reserve(&self, bytes: usize) -> Reservation {
        let wanted = permits(bytes).min(self.total);
        let wanted = u32::try_from(wanted).unwrap_or(u32::MAX);
        match self.permits.clone().acquire_many_owned(wanted).await {
            Ok(permit) => Reservation(permit),
            // Only `close` makes acquiring fail, and this semaphore is never closed.
            Err(_) => unreachable!("the body budget is never closed"),
        }
    }

    /// Bytes not reserved by any request right now.
    pub fn available_bytes(&self) -> usize {
        self.permits
            .available_permits()
            .saturating_mul(PERMIT_BYTES)
    }
}

impl Reservation {
    /// Keep only what `bytes` needs; give the rest back (a body shorter than reserved).
    pub fn shrink_to(&mut self, bytes: usize) {
        let excess = self.0.num_permits().saturating_sub(permits(bytes));
        drop(self.0.split(excess));
    }
}

fn permits(bytes: usize) -> usize {
    bytes.div_ceil(PERMIT_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_wait_for_room_and_give_back_what_they_do_not_use() {
        let budget = BodyBudget::new(3 * 1024);
        let a = budget.reserve(1024).await;
        let mut b = budget.reserve(2000).await;
        assert_eq!(budget.available_bytes(), 0);
        // A third waits until there is room.
        let third = budget.reserve(1);
        tokio::pin!(third);
        assert!(futures_poll(third.as_mut()).is_none());
        // The KiB `b` does not use goes to the reservation waiting for it.
        b.shrink_to(10);
        let c = third.await;
        assert_eq!(budget.available_bytes(), 0);
        drop((a, b, c));
        assert_eq!(budget.available_bytes(), 3 * 1024);
        // Nothing asks for more than there is: a huge reservation takes all, not forever.
        let all = budget.reserve(usize::MAX).await;
        assert_eq!(budget.available_bytes(), 0);
        drop(all);
        // An empty body reserves nothing.
        let _none = budget.reserve(0).await;
        assert_eq!(budget.available_bytes(), 3 * 1024);
    }

    /// Poll a future once.
    fn futures_poll<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match future.poll(&mut context) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        }
    }
}
