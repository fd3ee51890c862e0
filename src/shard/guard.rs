//! Panic containment: a bug reached by one connection must not take its
//! shard (and every other connection on it) down. The connection task is
//! polled under `catch_unwind`; a panic ends that connection only.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

pub struct Contained<F> {
    inner: Pin<Box<F>>,
    shard: usize,
}

/// Wraps a connection future so a panic inside it is logged and contained.
pub fn contain<F: Future<Output = ()>>(shard: usize, future: F) -> Contained<F> {
    Contained {
        inner: Box::pin(future),
        shard,
    }
}

impl<F: Future<Output = ()>> Future for Contained<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let shard = self.shard;
        // The state a panicking connection leaves behind is its own (it is
        // dropped with the future); shared shard state is only touched
        // through RefCell guards, which release on unwind.
        match catch_unwind(AssertUnwindSafe(|| self.inner.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                crate::error!(
                    shard = shard,
                    "connection task panicked: {what}; connection dropped"
                );
                Poll::Ready(())
            }
        }
    }
}
