//! Group commit: concurrent writers queue their batches; the first becomes the leader,
//! takes every queued batch, and commits them with one small-log write (synced once for
//! the whole group if any asked for it). Followers wait until the leader hands them their
//! result: spinning, then yielding their core (unless the group syncs), then asleep. A
//! writer that finds no leader and no one queued commits its batch alone, without queueing
//! it (no shared request to allocate).
//!
//! A leader may give the lead up before its group is done ([`Lead::release`]: the commit
//! path does once the group is in the log, and inserts into the memtable while the next
//! leader writes the log); its followers, taken into its group, then wait for their
//! result alone, not for the lead.

use super::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::memtable::InsertHint;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Spins a follower makes before it sleeps on the queue's condition variable (a group
/// commits in a few microseconds; a futex sleep and wake-up cost about as much). Measured
/// with `hybridkv keyspace-bench --writers 2` (PERFORMANCE.md).
const FOLLOWER_SPINS: u32 = 200;

/// Then the times a follower gives its core away (`sched_yield`) before it sleeps: with
/// more writers than cores the leader may be the thread waiting for a core, and a yield
/// hands it one without the futex sleep and wake-up (RocksDB's write thread waits the
/// same way). Measured with `keyspace-bench --writers 4` (PERFORMANCE.md).
const FOLLOWER_YIELDS: u32 = 100;

/// One writer's batch waiting in the queue.
pub(crate) struct Request {
    pub batch: WriteBatch,
    pub sync: bool,
    /// The keyspace the batch was written to (its operations that name none go there).
    pub keyspace: u32,
    result: Mutex<Option<Result<()>>>,
    /// Set once `result` holds the outcome (read without its lock by a waiting follower).
    done: AtomicBool,
    /// Set when a leader takes it into its group (under the queue's lock): from then on
    /// its writer waits for its result, not for the lead.
    taken: AtomicBool,
    /// Where its one version goes in the memtable, searched by its writer while it
    /// waited for the lead (set once; a leader that took the request before then
    /// inserts without it).
    hint: OnceLock<InsertHint>,
}

impl Request {
    /// Fails this request alone (its group goes on without it).
    pub(crate) fn fail(&self, e: Error) {
        *self.result.lock() = Some(Err(e));
        self.done.store(true, Ordering::Release);
    }

    pub(crate) fn new(batch: WriteBatch, sync: bool, keyspace: u32) -> Self {
        Request {
            batch,
            sync,
            keyspace,
            result: Mutex::new(None),
            done: AtomicBool::new(false),
            taken: AtomicBool::new(false),
            hint: OnceLock::new(),
        }
    }

    /// Records where its one version goes in the memtable (once; later calls do
    /// nothing).
    pub(crate) fn set_hint(&self, hint: InsertHint) {
        let _ = self.hint.set(hint);
    }

    /// Where its one version goes in the memtable, if its writer searched already.
    pub(crate) fn hint(&self) -> Option<&InsertHint> {
        self.hint.get()
    }
}

#[derive(Default)]
struct QueueState {
    pending: Vec<Arc<Request>>,
    /// The last group's list, emptied, for the next group to take (no allocation per
    /// group).
    spare: Vec<Arc<Request>>,
    leader_active: bool,
}

/// The queue shared by all writers.
#[derive(Default)]
pub(crate) struct CommitQueue {
    state: Mutex<QueueState>,
    cv: Condvar,
    /// `QueueState::leader_active`, readable without the lock by a waiting follower.
    leader_busy: AtomicBool,
    /// Whether the group being committed syncs: its followers sleep at once rather than
    /// yield their cores through an fsync that takes a hundred times longer than a group.
    group_syncs: AtomicBool,
}

/// A group's lead, handed to the function that commits the group.
pub(crate) struct Lead<'q> {
    queue: &'q CommitQueue,
    released: std::cell::Cell<bool>,
}

impl Lead<'_> {
    /// Gives the lead to the next writer now, before this group is done (its members
    /// still wait for their results). Once only; later calls do nothing.
    pub(crate) fn release(&self) {
        if !self.released.replace(true) {
            self.queue.end_lead(self.queue.state.lock());
        }
    }
}

/// If a group's leader unwinds (a panic in its commit), fails the group's members (they
/// would wait for their results forever) and gives the lead up (the queue goes on).
struct GroupOnPanic<'a> {
    queue: &'a CommitQueue,
    others: &'a [Arc<Request>],
    lead: &'a Lead<'a>,
}

impl Drop for GroupOnPanic<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for r in self.others {
            let mut slot = r.result.lock();
            if slot.is_none() {
                *slot = Some(Err(Error::Poisoned(
                    "the leader of this write's commit group panicked".into(),
                )));
            }
            r.done.store(true, Ordering::Release);
        }
        self.lead.release();
        let _st = self.queue.state.lock();
        self.queue.cv.notify_all();
    }
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
    /// another leader). `commit_group` receives every batch of a group, in queue order,
    /// and the group's lead (which it may release before it returns). A writer that
    /// must wait for a leader first runs `while_waiting` on its request (work that would
    /// otherwise follow the commit), outside the queue's lock.
    pub(crate) fn submit_waiting(
        &self,
        req: Request,
        commit_group: impl FnOnce(&[&Request], &Lead<'_>) -> Result<()>,
        while_waiting: impl FnOnce(&Request),
    ) -> Result<()> {
        let mut st = self.state.lock();
        if !st.leader_active && st.pending.is_empty() {
            // No leader to wait for, no one to take along: a group of this batch alone,
            // committed from this writer's stack. Writers that come meanwhile queue for the
            // next group.
            st.leader_active = true;
            self.leader_busy.store(true, Ordering::Release);
            self.group_syncs.store(req.sync, Ordering::Release);
            drop(st);
            let lead = self.lead();
            let on_panic = GroupOnPanic {
                queue: self,
                others: &[],
                lead: &lead,
            };
            let result = commit_group(&[&req], &lead);
            drop(on_panic);
            // The request may have been failed alone.
            let result = req.result.lock().take().unwrap_or(result);
            lead.release();
            req.batch.recycle();
            return result;
        }
        let req = Arc::new(req);
        st.pending.push(Arc::clone(&req));
        parking_lot::MutexGuard::unlocked(&mut st, || while_waiting(&req));
        let mut waited = false;
        loop {
            if let Some(r) = req.result.lock().take() {
                return r;
            }
            if !req.taken.load(Ordering::Acquire) && !st.leader_active {
                break;
            }
            if !waited {
                // A group commits in a few microseconds: a follower first waits for its
                // result (or for the lead to be free) without sleeping, spinning, then
                // yielding its core; then it sleeps.
                waited = true;
                parking_lot::MutexGuard::unlocked(&mut st, || self.wait_awake(&req));
                continue;
            }
            self.cv.wait(&mut st);
        }
        st.leader_active = true;
        self.leader_busy.store(true, Ordering::Release);
        // Hand the queue's list to this group; the queue refills the last group's
        // (given back below), so no group allocates one.
        let spare = std::mem::take(&mut st.spare);
        let mut group = std::mem::replace(&mut st.pending, spare);
        for r in &group {
            r.taken.store(true, Ordering::Release);
        }
        self.group_syncs
            .store(group.iter().any(|r| r.sync), Ordering::Release);
        drop(st);

        let lead = self.lead();
        let on_panic = GroupOnPanic {
            queue: self,
            others: &group,
            lead: &lead,
        };
        let members: smallvec::SmallVec<[&Request; 8]> = group.iter().map(|r| &**r).collect();
        let result = commit_group(&members, &lead);
        drop(members);
        drop(on_panic);
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
        let had_others = group.len() > 1;
        group.clear();
        let mut st = self.state.lock();
        // For the next group to take (the lead given up early, another group may have
        // formed meanwhile and put its list there: one of the two is dropped).
        st.spare = group;
        if !lead.released.replace(true) {
            self.end_lead(st);
        } else if had_others {
            // Its members may sleep, waiting for their results (set above).
            self.cv.notify_all();
        }
        result
    }

    /// [`CommitQueue::submit_waiting`] with nothing to do while waiting.
    #[cfg(test)]
    pub(crate) fn submit(
        &self,
        req: Request,
        commit_group: impl FnOnce(&[&Request], &Lead<'_>) -> Result<()>,
    ) -> Result<()> {
        self.submit_waiting(req, commit_group, |_| {})
    }

    fn lead(&self) -> Lead<'_> {
        Lead {
            queue: self,
            released: std::cell::Cell::new(false),
        }
    }

    /// Gives the lead up and wakes the writers waiting for it (or for their results).
    fn end_lead(&self, mut st: parking_lot::MutexGuard<'_, QueueState>) {
        st.leader_active = false;
        self.leader_busy.store(false, Ordering::Release);
        self.cv.notify_all();
    }

    /// Waits, awake, until `req` is done or (not taken into a group yet) no leader is
    /// active: [`FOLLOWER_SPINS`] spins,
    /// then, unless the group syncs, up to [`FOLLOWER_YIELDS`] yields of the core.
    fn wait_awake(&self, req: &Request) {
        // Its result, or (not yet taken into a group) a free lead.
        let over = |q: &Self| {
            req.done.load(Ordering::Acquire)
                || (!req.taken.load(Ordering::Acquire) && !q.leader_busy.load(Ordering::Acquire))
        };
        for _ in 0..FOLLOWER_SPINS {
            if over(self) {
                return;
            }
            std::hint::spin_loop();
        }
        for _ in 0..FOLLOWER_YIELDS {
            if over(self) || self.group_syncs.load(Ordering::Acquire) {
                return;
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_batch_committed_alone_leaves_its_buffer_to_the_threads_next_batch() {
        let q = CommitQueue::default();
        let mut b = WriteBatch::new();
        b.put("k", vec![5u8; 500]);
        let len = b.payload().len();
        q.submit(Request::new(b, false, 0), |g, _| {
            assert_eq!(g.len(), 1);
            Ok(())
        })
        .unwrap();
        let next = WriteBatch::new();
        assert!(next.is_empty());
        assert!(
            next.capacity_for_tests() >= len,
            "the committed batch's buffer was kept"
        );
    }

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
                        q.submit(Request::new(b, false, 0), |g, _| {
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
    fn more_writers_than_cores_with_synced_groups_commit_each_request_once() {
        // Eight writers (more than this machine's cores), every fifth request synced:
        // followers of a synced group sleep at once, the others spin and yield first;
        // each way every request ends committed exactly once, with its own group's
        // outcome.
        use std::collections::HashMap;
        let q = Arc::new(CommitQueue::default());
        let committed = Arc::new(AtomicUsize::new(0));
        let synced_groups = Arc::new(AtomicUsize::new(0));
        // Each batch's key -> whether its group failed (set by the group's leader).
        let outcome: Arc<parking_lot::Mutex<HashMap<Vec<u8>, bool>>> = Arc::default();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (q, committed, synced_groups, outcome) = (
                    q.clone(),
                    committed.clone(),
                    synced_groups.clone(),
                    outcome.clone(),
                );
                std::thread::spawn(move || {
                    for i in 0..150 {
                        let key = format!("{t}-{i}").into_bytes();
                        let mut b = WriteBatch::new();
                        b.put(&key, "v");
                        let r = q.submit(Request::new(b, i % 5 == 0, 0), |g, _| {
                            committed.fetch_add(g.len(), Ordering::SeqCst);
                            if g.iter().any(|r| r.sync) {
                                synced_groups.fetch_add(1, Ordering::SeqCst);
                                std::thread::sleep(std::time::Duration::from_micros(50));
                            }
                            // A group fails if one of its batches is the 50th, 100th or
                            // 150th of its writer.
                            let keys: Vec<&[u8]> = g.iter().map(|r| key_of(&r.batch)).collect();
                            let fails = keys.iter().any(|k| {
                                k.ends_with(b"-49") || k.ends_with(b"-99") || k.ends_with(b"-149")
                            });
                            let mut o = outcome.lock();
                            for k in keys {
                                o.insert(k.to_vec(), fails);
                            }
                            if fails {
                                Err(Error::Closed)
                            } else {
                                Ok(())
                            }
                        });
                        let failed = outcome.lock().get(&key).copied();
                        match (failed, &r) {
                            (Some(true), Err(Error::Closed)) | (Some(false), Ok(())) => {}
                            other => panic!("{t}-{i}: {other:?}"),
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(committed.load(Ordering::SeqCst), 8 * 150);
        assert!(synced_groups.load(Ordering::SeqCst) > 0);
        assert_eq!(outcome.lock().len(), 8 * 150);
        assert!(!q.leader_busy.load(Ordering::SeqCst));
    }

    /// The key of a batch holding one put of a one-byte value (op, key length, value
    /// length, key, value).
    fn key_of(b: &WriteBatch) -> &[u8] {
        let p = b.payload();
        &p[9..p.len() - 1]
    }

    #[test]
    fn a_writer_alone_commits_without_queueing_and_gets_its_own_failure() {
        let q = CommitQueue::default();
        let mut b = WriteBatch::new();
        b.put("k", "v");
        // No leader, no one queued: a group of this request alone, nothing left queued.
        let mut seen = 0;
        q.submit(Request::new(b.clone(), false, 0), |g, _| {
            seen = g.len();
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, 1);
        assert!(q.state.lock().pending.is_empty());
        assert!(!q.leader_busy.load(Ordering::SeqCst));
        // A request the group failed alone reports its own error, not the group's Ok.
        let r = q.submit(Request::new(b, false, 0), |g, _| {
            g[0].fail(Error::InvalidArgument("refused".into()));
            Ok(())
        });
        assert!(matches!(r, Err(Error::InvalidArgument(_))));
        assert!(!q.state.lock().leader_active);
    }

    #[test]
    fn a_lead_released_early_lets_the_next_writer_commit_before_the_group_is_done() {
        // Writer A's group gives its lead up and then waits until writer B has committed:
        // B can only get there by taking the lead A released (were the lead still A's, B
        // would queue behind it and A would wait forever: the receive below times out).
        let q = Arc::new(CommitQueue::default());
        let (b_done_tx, b_done_rx) = std::sync::mpsc::channel::<()>();
        let (released_tx, released_rx) = std::sync::mpsc::channel::<()>();
        let a = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                let mut b = WriteBatch::new();
                b.put("a", "1");
                q.submit(Request::new(b, false, 0), |g, lead| {
                    assert_eq!(g.len(), 1);
                    lead.release();
                    lead.release(); // a second release does nothing
                    released_tx.send(()).unwrap();
                    b_done_rx
                        .recv_timeout(std::time::Duration::from_secs(120))
                        .map_err(|_| Error::Internal("B never committed".into()))
                })
            })
        };
        released_rx.recv().unwrap();
        let mut b = WriteBatch::new();
        b.put("b", "2");
        let mut led = false;
        q.submit(Request::new(b, false, 0), |g, _| {
            led = g.len() == 1;
            Ok(())
        })
        .unwrap();
        assert!(led, "B committed its own batch");
        b_done_tx.send(()).unwrap();
        a.join().unwrap().unwrap();
        assert!(!q.leader_busy.load(Ordering::SeqCst));
        assert!(q.state.lock().pending.is_empty());
    }

    #[test]
    fn a_leader_that_panics_gives_the_lead_up() {
        let q = CommitQueue::default();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = q.submit(Request::new(WriteBatch::new(), false, 0), |_, _| {
                panic!("a merge operator's bug")
            });
        }));
        assert!(panicked.is_err());
        assert!(!q.leader_busy.load(Ordering::SeqCst));
        assert!(!q.state.lock().leader_active);
        // The queue goes on.
        q.submit(Request::new(WriteBatch::new(), false, 0), |_, _| Ok(()))
            .unwrap();
    }

    #[test]
    fn a_leader_that_panics_fails_its_members_instead_of_leaving_them_waiting() {
        // A leads alone until B and C are both queued; then one of them leads both and
        // panics: the other gets an error (not a wait without end), the lead is free.
        let q = Arc::new(CommitQueue::default());
        // B and C start only once A leads: otherwise one of them could lead alone.
        let leading = Arc::new(std::sync::Barrier::new(2));
        let a = {
            let q = Arc::clone(&q);
            let leading = Arc::clone(&leading);
            std::thread::spawn(move || {
                let qq = Arc::clone(&q);
                q.submit(Request::new(WriteBatch::new(), false, 0), move |_, _| {
                    leading.wait();
                    while qq.state.lock().pending.len() < 2 {
                        std::thread::yield_now();
                    }
                    Ok(())
                })
            })
        };
        leading.wait();
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let q = Arc::clone(&q);
                std::thread::spawn(move || {
                    q.submit(Request::new(WriteBatch::new(), false, 0), |g, _| {
                        assert_eq!(g.len(), 2);
                        panic!("a bug in the commit");
                    })
                })
            })
            .collect();
        a.join().unwrap().unwrap();
        let outcomes: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        assert_eq!(
            outcomes.iter().filter(|o| o.is_err()).count(),
            1,
            "one leader panicked"
        );
        assert!(outcomes
            .iter()
            .any(|o| matches!(o, Ok(Err(Error::Poisoned(_))))));
        assert!(!q.leader_busy.load(Ordering::SeqCst));
    }

    #[test]
    fn a_failed_group_fails_every_member() {
        let q = CommitQueue::default();
        let r = q.submit(Request::new(WriteBatch::new(), false, 0), |_, _| {
            Err(Error::io("write", "x", std::io::Error::other("boom")))
        });
        assert!(matches!(r, Err(Error::Io { .. })));
    }
}
