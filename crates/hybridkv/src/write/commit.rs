//! Group commit: concurrent writers queue their batches; the first becomes the leader,
//! takes every queued batch, and commits them with one small-log write (synced once for
//! the whole group if any asked for it). Followers sleep until the leader hands them their
//! result.

use super::batch::WriteBatch;
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Spins a follower makes before it sleeps on the queue's condition variable (a group
/// commits in a few microseconds; a futex sleep and wake-up cost about as much). Measured
/// with `hybridkv keyspace-bench --writers 2` (PERFORMANCE.md).
const FOLLOWER_SPINS: u32 = 200;

/// One writer's batch waiting in the queue.
pub(crate) struct Request {
    pub batch: WriteBatch,
    pub sync: bool,
    /// The keyspace the batch was written to (its operations that name none go there).
    pub keyspace: u32,
    result: Mutex<Option<Result<()>>>,
    /// Set once `result` holds the outcome (read without its lock by a waiting follower).
    done: AtomicBool,
}

impl Request {
    /// Fails this request alone (its group goes on without it).
    pub(crate) fn fail(&self, e: Error) {
        *self.result.lock() = Some(Err(e));
        self.done.store(true, Ordering::Release);
    }

    pub(crate) fn new(batch: WriteBatch, sync: bool, keyspace: u32) -> Arc<Self> {
        Arc::new(Request {
            batch,
            sync,
            keyspace,
            result: Mutex::new(None),
            done: AtomicBool::new(false),
        })
    }
}

#[derive(Default)]
struct QueueState {
    pending: Vec<Arc<Request>>,
    leader_active: bool,
}

/// The queue shared by all writers.
#[derive(Default)]
pub(crate) struct CommitQueue {
    state: Mutex<QueueState>,
    cv: Condvar,
}

/// A copy of an error for the other members of a failed group (`Error` is not `Clone`).
fn share(e: &Error) -> Error {
    match e {
        Error::Io { op, path, source } => Error::Io {
            op,
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
        Error::Closed => Error::Closed,
        Error::ReadOnly => Error::ReadOnly,
        other => Error::Poisoned(other.to_string()),
    }
}

impl CommitQueue {
    /// Queues `req` and returns once it is committed (by this thread as leader, or by
    /// another leader). `commit_group` receives every batch of a group, in queue order.
    pub(crate) fn submit(
        &self,
        req: Arc<Request>,
        commit_group: impl FnOnce(&[Arc<Request>]) -> Result<()>,
    ) -> Result<()> {
        let mut st = self.state.lock();
        st.pending.push(Arc::clone(&req));
        let mut spun = false;
        loop {
            if let Some(r) = req.result.lock().take() {
                return r;
            }
            if !st.leader_active {
                break;
            }
            if !spun {
                // A group commits in a few microseconds: a follower first waits for its
                // result without sleeping (a futex sleep and wake-up cost about as much),
                // then sleeps.
                spun = true;
                parking_lot::MutexGuard::unlocked(&mut st, || {
                    for _ in 0..FOLLOWER_SPINS {
                        if req.done.load(Ordering::Acquire) {
                            break;
                        }
                        std::hint::spin_loop();
                    }
                });
                continue;
            }
            self.cv.wait(&mut st);
        }
        st.leader_active = true;
        // Hand the queue's buffer to this group and keep one of the same capacity for the
        // next (no reallocation per group as the queue refills).
        let cap = st.pending.capacity();
        let group = std::mem::replace(&mut st.pending, Vec::with_capacity(cap));
        drop(st);

        let result = commit_group(&group);
        for other in group.iter().filter(|r| !Arc::ptr_eq(r, &req)) {
            let mut slot = other.result.lock();
            if slot.is_none() {
                *slot = Some(match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(share(e)),
                });
            }
            other.done.store(true, Ordering::Release);
        }
        // This thread's own request may have been failed alone.
        let result = req.result.lock().take().unwrap_or(result);
        let mut st = self.state.lock();
        st.leader_active = false;
        self.cv.notify_all();
        drop(st);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_request_committed_exactly_once_and_groups_form() {
        let q = Arc::new(CommitQueue::default());
        let committed = Arc::new(AtomicUsize::new(0));
        let groups = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (q, committed, groups) = (q.clone(), committed.clone(), groups.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let mut b = WriteBatch::new();
                        b.put("k", "v");
                        q.submit(Request::new(b, false, 0), |g| {
                            committed.fetch_add(g.len(), Ordering::SeqCst);
                            groups.fetch_add(1, Ordering::SeqCst);
                            std::thread::yield_now();
                            Ok(())
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(committed.load(Ordering::SeqCst), 1600);
        assert!(groups.load(Ordering::SeqCst) <= 1600);
    }

    #[test]
    fn a_failed_group_fails_every_member() {
        let q = CommitQueue::default();
        let r = q.submit(Request::new(WriteBatch::new(), false, 0), |_| {
            Err(Error::io("write", "x", std::io::Error::other("boom")))
        });
        assert!(matches!(r, Err(Error::Io { .. })));
    }
}
