//! The order in which queued jobs are claimed, one function for every store, for the places users are shown
//! and for the scheduler's question "should the running job make way?". Fair between owners:
//!
//! 1. a synchronous call (`/v1/decode`, `/v1/encode`: someone holds a connection open for it) first;
//! 2. then the higher priority (an admin bounds each token's, `[[tokens]] max_priority`);
//! 3. then the owner with the fewest jobs running, then the owner whose last job started longest ago (never
//!    first): owners take turns, so one owner's ten jobs do not all go before another owner's one;
//! 4. then first come.
//!
//! Without tokens every job has the same owner (none), and the order is priority, then first come.
use std::cmp::Reverse;
use std::collections::HashMap;

use uuid::Uuid;

pub use crate::jobs::model::QueuePlace;

/// A queued (not paused) or running job as the order sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: Uuid,
    pub owner: Option<String>,
    pub priority: i64,
    /// Insertion order: first come.
    pub seq: i64,
    pub running: bool,
    /// A synchronous call: its caller waits on an open connection.
    pub interactive: bool,
    pub model: String,
    pub device_bytes_needed: u64,
    /// The box's estimate of the job's run time when it was queued (`Estimate::seconds`).
    pub estimate_s: Option<f64>,
    /// When it last joined the queue (submitted, or stopped to make way), RFC 3339.
    pub waiting_since: String,
    /// A running job: seconds left as its progress says (else its estimate less the time it has run).
    pub remaining_s: Option<f64>,
}

/// When an owner last had a job start, as the order compares it: never (first), at a recorded time, or at
/// the n-th start of a simulated sequence (after every recorded one).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum LastStart {
    Never,
    At(String),
    Simulated(usize),
}

/// The queue as one read of the store saw it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub entries: Vec<Entry>,
    /// Each owner's latest start (RFC 3339, over all its jobs, finished ones too).
    pub last_start: HashMap<Option<String>, String>,
}

/// What the order keeps track of per owner while it walks the queue.
#[derive(Debug, Clone, Default)]
struct Owners {
    running: HashMap<Option<String>, usize>,
    last_start: HashMap<Option<String>, LastStart>,
    picks: usize,
}

impl Owners {
    fn of(snapshot: &Snapshot) -> Owners {
        let mut owners = Owners::default();
        for (owner, at) in &snapshot.last_start {
            owners.last_start.insert(owner.clone(), LastStart::At(at.clone()));
        }
        for entry in snapshot.entries.iter().filter(|e| e.running) {
            *owners.running.entry(entry.owner.clone()).or_default() += 1;
        }
        owners
    }

    /// Lower goes first.
    fn key(&self, entry: &Entry) -> (bool, Reverse<i64>, usize, LastStart, i64) {
        let running = self.running.get(&entry.owner).copied().unwrap_or(0);
        let last = self.last_start.get(&entry.owner).cloned().unwrap_or(LastStart::Never);
        (!entry.interactive, Reverse(entry.priority), running, last, entry.seq)
    }

    fn started(&mut self, owner: &Option<String>) {
        *self.running.entry(owner.clone()).or_default() += 1;
        self.last_start.insert(owner.clone(), LastStart::Simulated(self.picks));
        self.picks += 1;
    }

    fn stopped(&mut self, owner: &Option<String>) {
        if let Some(count) = self.running.get_mut(owner) {
            *count = count.saturating_sub(1);
        }
    }
}

impl Snapshot {
    fn queued(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| !e.running)
    }

    pub fn running(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.running)
    }

    pub fn entry(&self, id: Uuid) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// The job a worker claims next among those it `accepts`.
    pub fn next(&self, accepts: impl Fn(&Entry) -> bool) -> Option<&Entry> {
        let owners = Owners::of(self);
        self.queued().filter(|e| accepts(e)).min_by_key(|e| owners.key(e))
    }

    /// Every queued job in the order workers would claim them if nothing else arrived: each pick counts as a
    /// start of its owner's (who then waits for the others' turns).
    pub fn claim_sequence(&self) -> Vec<&Entry> {
        let mut owners = Owners::of(self);
        let mut left: Vec<&Entry> = self.queued().collect();
        let mut sequence = Vec::with_capacity(left.len());
        while let Some((index, _)) = left.iter().enumerate().min_by_key(|(_, e)| owners.key(e)) {
            let entry = left.swap_remove(index);
            owners.started(&entry.owner);
            sequence.push(entry);
        }
        sequence
    }

    /// The queued job `id`'s place; `workers`: how many run jobs from this queue (at least 1 is assumed).
    pub fn place(&self, id: Uuid, workers: usize) -> Option<QueuePlace> {
        let sequence = self.claim_sequence();
        let index = sequence.iter().position(|e| e.id == id)?;
        // Each worker is free after its running job's remaining time (0 for an idle one); each job ahead
        // goes to the worker free first.
        let mut free: Vec<Option<f64>> = self.running().map(|e| e.remaining_s.map(|s| s.max(0.0))).collect();
        free.resize(free.len().max(workers.max(1)), Some(0.0));
        for entry in &sequence[..index] {
            let soonest = soonest(&free);
            free[soonest] = match (free[soonest], entry.estimate_s) {
                (Some(at), Some(run)) => Some(at + run),
                _ => None,
            };
        }
        let starts_in_s = free[soonest(&free)];
        Some(QueuePlace { position: index + 1, ahead: index, running: self.running().count(), starts_in_s })
    }

    /// Whether the running job `id` should make way at its next checkpoint: as a queued job again, the order
    /// would pick another owner's job (one this worker `accepts`) that has waited at least `patience_s`
    /// (`now`: RFC 3339). That job, if so.
    pub fn makes_way_for(&self, id: Uuid, accepts: impl Fn(&Entry) -> bool, patience_s: f64, now: &str) -> Option<&Entry> {
        let running = self.entry(id).filter(|e| e.running)?;
        let mut owners = Owners::of(self);
        owners.stopped(&running.owner);
        let waited = |e: &Entry| crate::jobs::model::seconds_between(&e.waiting_since, now).is_some_and(|s| s >= patience_s);
        let candidates = self.queued().filter(|e| accepts(e)).chain(std::iter::once(running));
        let first = candidates.min_by_key(|e| owners.key(e))?;
        (first.id != id && first.owner != running.owner && waited(first)).then_some(first)
    }
}

/// The worker free first; one that will never be known to be free (`None`) last.
fn soonest(free: &[Option<f64>]) -> usize {
    let mut best = 0;
    for (index, at) in free.iter().enumerate() {
        let better = match (at, free[best]) {
            (Some(a), Some(b)) => *a < b,
            (Some(_), None) => true,
            _ => false,
        };
        if better {
            best = index;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u128, owner: &str, seq: i64) -> Entry {
        Entry {
            id: Uuid::from_u128(n),
            owner: Some(owner.into()),
            priority: 0,
            seq,
            running: false,
            interactive: false,
            model: "m".into(),
            device_bytes_needed: 0,
            estimate_s: Some(10.0),
            waiting_since: "2026-11-28T00:00:00.000Z".into(),
            remaining_s: None,
        }
    }

    fn ids(entries: &[&Entry]) -> Vec<u128> {
        entries.iter().map(|e| e.id.as_u128()).collect()
    }

    /// Ten of one owner's jobs queued before another owner's one: the one goes after at most one of the ten.
    #[test]
    fn owners_take_turns() {
        let mut entries: Vec<Entry> = (1..=10).map(|n| job(n, "ann", n as i64)).collect();
        entries.push(job(11, "bob", 11));
        let snapshot = Snapshot { entries, last_start: HashMap::new() };
        let order = ids(&snapshot.claim_sequence());
        assert_eq!(&order[..3], &[1, 11, 2], "{order:?}");
        assert_eq!(snapshot.next(|_| true).map(|e| e.id.as_u128()), Some(1), "both owners never started: first come");
        // Ann's first is running: Bob's one is next.
        let mut running = snapshot.clone();
        running.entries[0].running = true;
        assert_eq!(running.next(|_| true).map(|e| e.id.as_u128()), Some(11));
        assert_eq!(running.place(Uuid::from_u128(11), 1).map(|p| p.position), Some(1));
        assert_eq!(running.place(Uuid::from_u128(2), 1).map(|p| p.position), Some(2), "Ann's second waits for Bob's");
    }

    #[test]
    fn calls_and_priority_go_first_and_owners_that_waited_longest_next() {
        let mut entries = vec![job(1, "ann", 1), job(2, "bob", 2), job(3, "cat", 3)];
        entries[2].priority = 5;
        let mut snapshot = Snapshot { entries, last_start: HashMap::new() };
        assert_eq!(ids(&snapshot.claim_sequence()), vec![3, 1, 2], "priority first");
        snapshot.entries[1].interactive = true;
        assert_eq!(ids(&snapshot.claim_sequence()), vec![2, 3, 1], "a synchronous call before all");
        snapshot.entries[1].interactive = false;
        snapshot.entries[2].priority = 0;
        snapshot.last_start.insert(Some("ann".into()), "2026-11-28T10:00:00.000Z".into());
        snapshot.last_start.insert(Some("bob".into()), "2026-11-28T09:00:00.000Z".into());
        assert_eq!(ids(&snapshot.claim_sequence()), vec![3, 2, 1], "never started, then longest ago");
    }

    /// The place counts the jobs ahead of every owner and shares their estimates over the workers.
    #[test]
    fn a_place_counts_every_job_ahead_and_its_wait() {
        let mut entries = vec![job(1, "ann", 1), job(2, "ann", 2), job(3, "bob", 3)];
        entries[0].running = true;
        entries[0].remaining_s = Some(100.0);
        let snapshot = Snapshot { entries, last_start: HashMap::new() };
        let place = snapshot.place(Uuid::from_u128(2), 1).unwrap();
        assert_eq!(place, QueuePlace { position: 2, ahead: 1, running: 1, starts_in_s: Some(110.0) });
        let two_workers = snapshot.place(Uuid::from_u128(2), 2).unwrap();
        assert_eq!(two_workers.starts_in_s, Some(10.0), "the idle worker takes Bob's, then Ann's");
        let mut unknown = snapshot.clone();
        unknown.entries[0].remaining_s = None;
        assert_eq!(unknown.place(Uuid::from_u128(3), 1).unwrap().starts_in_s, None, "no basis, no guess");
    }

    #[test]
    fn a_running_job_makes_way_for_another_owner_that_waited_long_enough() {
        let mut entries = vec![job(1, "ann", 1), job(2, "bob", 2), job(3, "ann", 3)];
        entries[0].running = true;
        entries[1].waiting_since = "2026-11-28T00:00:00.000Z".into();
        let snapshot = Snapshot { entries, last_start: HashMap::from([(Some("ann".into()), "2026-11-28T00:00:01.000Z".into())]) };
        let id = Uuid::from_u128(1);
        let way = snapshot.makes_way_for(id, |_| true, 30.0, "2026-11-28T00:01:00.000Z");
        assert_eq!(way.map(|e| e.id.as_u128()), Some(2));
        assert!(snapshot.makes_way_for(id, |_| true, 120.0, "2026-11-28T00:01:00.000Z").is_none(), "not waited long enough");
        assert!(snapshot.makes_way_for(id, |e| e.owner.as_deref() != Some("bob"), 30.0, "2026-11-28T00:01:00.000Z").is_none(), "not for this worker");
        let mut urgent = snapshot.clone();
        urgent.entries[0].priority = 9;
        assert!(urgent.makes_way_for(id, |_| true, 30.0, "2026-11-28T00:01:00.000Z").is_none(), "a higher priority keeps its place");
    }
}
