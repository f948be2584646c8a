//! Who compacts etcd's history, and to which revision: a state machine with no I/O.
//!
//! Every instance runs one. Each round (every compaction interval, the first at a random
//! point within one) it sends one transaction on the compaction key (`<prefix>/compaction`):
//!
//! ```text
//! if version(<prefix>/compaction) == the version this instance last saw
//! then put(<prefix>/compaction, the revision it saw one round ago)
//! else get(<prefix>/compaction)
//! ```
//!
//! The put bumps the key's version, so of all the instances that saw the same version, the
//! first to send its round wins and the others' compares fail. Only the winner compacts, to
//! the revision etcd had at its previous round, at least one interval ago: at least one
//! interval of history is kept. A loser learns the key's version from its get and can win a
//! later round, so when the compactor dies the next instance to send its round after it
//! takes over (one to two intervals later), and no instance does anything in between. This
//! is the scheme of the Kubernetes API server for its own etcd (`compact.go` in
//! `k8s.io/apiserver/pkg/storage/etcd3`).
//!
//! Why this scheme: there is no leader to elect or fail over and nothing bound to a lease
//! (a compactor that pauses or dies simply stops winning), the compare picks at most one
//! compactor per version of the key, and since each winner must have seen the version the
//! previous winner wrote, at a round of its own an interval before, the fleet compacts about
//! once an interval, however many instances it has. It costs each
//! instance one transaction per interval (a raft proposal, as every transaction that may
//! write is) and the fleet one new revision per interval (the winner's put), besides the
//! compaction itself.
//!
//! etcd restored from an older snapshot hands its revisions out again, so a revision seen a
//! round before the restore may be reached again seconds after it: compacting to it would
//! keep almost none of the new history. The round's transaction also reads the fleet's
//! fence key (`<prefix>/fence`), which the restore procedure sets: a fence that changed
//! since the last round (its mod revision or its value: a restore done twice from one
//! snapshot sets the fence at the same revision, a later time in it), or an answer whose
//! header shows etcd went back (the task's
//! [`went_back`](Compactor::went_back)), drops the revision seen, so the next compaction is
//! to a revision seen after it, an interval of the new history kept.
//!
//! A round or a compaction that fails is counted and retried at the next round; nothing here
//! ever touches minting. A compaction to a revision etcd already compacted (by its own
//! `--auto-compaction-*`, or an operator) is answered "required revision has been
//! compacted": harmless, counted apart.

use std::collections::VecDeque;
use std::time::Duration;

/// What the compactor asks of etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The round's transaction: `if version(key) == expect_version then put(key, compact_to)
    /// else get(key)`.
    Round { expect_version: i64, compact_to: i64 },
    /// Compacts etcd's history up to `revision`.
    Compact { revision: i64 },
}

/// The fleet's fence key as a round read it: its mod revision and its value. Two restores
/// from one snapshot, each followed by `snowmint fence`, leave the key at the same mod
/// revision; the value (a time a fence window past the restore) tells them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceKey {
    pub mod_revision: i64,
    pub value: Vec<u8>,
}

/// etcd's answer. `fence`: the fence key, if it exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The compare held: the put applied. `revision`: etcd's revision after it.
    Won {
        revision: i64,
        fence: Option<FenceKey>,
    },
    /// The compare failed: the key's version now (0 when it does not exist), the revision its
    /// last writer compacts to (if it holds one), and etcd's revision.
    Lost {
        version: i64,
        compact_to: Option<i64>,
        revision: i64,
        fence: Option<FenceKey>,
    },
    /// The compaction applied.
    Compacted,
    /// The revision had been compacted already.
    AlreadyCompacted,
    Failed {
        error: String,
    },
}

/// What happened, for the logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// This instance compacted etcd's history up to `revision`.
    Compacted { revision: i64 },
    /// The history up to `revision` was compacted already.
    AlreadyCompacted { revision: i64 },
    /// This instance won a round with nothing to compact yet (its first round).
    WonFirstRound,
    /// Another instance compacts this round; it set out to compact up to `compact_to`.
    Lost { compact_to: Option<i64> },
    /// The round's transaction (`what` = "round") or the compaction failed.
    Failed { what: &'static str, error: String },
    /// etcd's history went back (a restore): nothing seen before it is compacted to.
    WentBack { detail: String },
}

/// Who compacts, and to which revision.
#[derive(Debug)]
pub struct Compactor {
    interval: Duration,
    /// The compaction key's version as this instance last saw it (0: absent, or not seen).
    version: i64,
    /// etcd's revision at this instance's last round that got an answer: what it compacts to
    /// when it wins the next one.
    seen_revision: Option<i64>,
    /// The boot-time instant of the next round.
    next_round: Duration,
    /// A compaction this instance won the right to, not yet sent.
    to_compact: Option<i64>,
    /// The request in flight, and the boot-time instant it was sent.
    in_flight: Option<(Request, Duration)>,
    /// The longest a request's answer may take to be acted on (a call's timeout): one that
    /// comes later (the process was stopped or suspended with it waiting) may be of a history
    /// etcd has gone back from since.
    answer_within: Duration,
    /// The fence key at the last round answered (`None`: no round yet).
    fence: Option<Option<FenceKey>>,
    events: VecDeque<Event>,
}

impl Compactor {
    /// A compactor whose rounds come every `interval`, the first at boot-time instant `first`,
    /// acting on answers that come within `answer_within` (a call's timeout).
    pub fn new(interval: Duration, first: Duration, answer_within: Duration) -> Compactor {
        Compactor {
            interval,
            answer_within,
            version: 0,
            seen_revision: None,
            next_round: first,
            to_compact: None,
            in_flight: None,
            fence: None,
            events: VecDeque::new(),
        }
    }

    /// The request to send now, if any (one at a time).
    pub fn poll_request(&mut self, now: Duration) -> Option<Request> {
        if self.in_flight.is_some() {
            return None;
        }
        let request = if let Some(revision) = self.to_compact.take() {
            Request::Compact { revision }
        } else if now >= self.next_round {
            // The next round comes an interval after this one (as the Kubernetes API server
            // times its own): a round that came late (a pause, a slow etcd) does not bring the
            // next one closer.
            self.next_round = now + self.interval;
            Request::Round { expect_version: self.version, compact_to: self.seen_revision.unwrap_or(0) }
        } else {
            return None;
        };
        self.in_flight = Some((request.clone(), now));
        Some(request)
    }

    /// The boot-time instant at which the next request is due, if none is in flight.
    pub fn poll_timeout(&self) -> Option<Duration> {
        match (&self.in_flight, self.to_compact) {
            (Some(_), _) => None,
            (None, Some(_)) => Some(Duration::ZERO),
            (None, None) => Some(self.next_round),
        }
    }

    /// etcd went back in time (an answer's header below one seen before, or another
    /// cluster): the revision seen is of the history before, and no compaction to it is
    /// made.
    pub fn went_back(&mut self, detail: String) {
        self.seen_revision = None;
        self.to_compact = None;
        self.events.push_back(Event::WentBack { detail });
    }

    /// Takes in the fence a round's answer read: one that changed since the last round
    /// marks a restore.
    fn saw_fence(&mut self, fence: Option<FenceKey>) {
        let revision = |f: &Option<FenceKey>| f.as_ref().map(|f| f.mod_revision);
        if let Some(before) = self.fence.replace(fence.clone())
            && before != fence
        {
            let (before, now) = (revision(&before), revision(&fence));
            let detail = if before == now {
                format!("the fleet's fence changed (its value, at mod revision {now:?})")
            } else {
                format!("the fleet's fence changed (mod revision {before:?}, now {now:?})")
            };
            self.went_back(detail);
        }
    }

    /// etcd's answer to the request in flight, taken in at boot-time instant `now`.
    pub fn handle_reply(&mut self, now: Duration, reply: Reply) {
        let Some((request, sent)) = self.in_flight.take() else { return };
        let took = now.saturating_sub(sent);
        if matches!(request, Request::Round { .. }) && took > self.answer_within {
            // A won round acted on this late would compact to a revision of a history etcd
            // may have gone back from meanwhile (a restore while this process was suspended
            // with the answer waiting: simulator seed 12021697578). Nothing seen is trusted.
            self.seen_revision = None;
            let error =
                format!("the round's answer came {} ms after it was sent, too late to act on", took.as_millis());
            self.events.push_back(Event::Failed { what: "round", error });
            return;
        }
        if let Reply::Won { fence, .. } | Reply::Lost { fence, .. } = &reply {
            self.saw_fence(fence.clone());
        }
        match (request, reply) {
            (Request::Round { .. }, Reply::Won { revision, .. }) => {
                self.version += 1;
                // The revision seen a round ago (at least one interval of history is kept);
                // nothing on this instance's first round.
                let compact_to = if crate::defects::active(crate::defects::Defect::CompactToCurrent) {
                    self.seen_revision.replace(revision).map(|_| revision)
                } else {
                    self.seen_revision.replace(revision)
                };
                match compact_to.filter(|&r| r > 0) {
                    Some(to) => self.to_compact = Some(to),
                    None => self.events.push_back(Event::WonFirstRound),
                }
            }
            (Request::Round { .. }, Reply::Lost { version, compact_to, revision, .. }) => {
                self.version = version;
                self.seen_revision = Some(revision);
                self.events.push_back(Event::Lost { compact_to });
            }
            (Request::Round { .. }, Reply::Failed { error }) => {
                // Whether the put applied is unknown: if it did, the key's version moved on and
                // the next round's compare fails, teaching this instance the version. The
                // revision it would compact to stays the older one: more history kept.
                self.events.push_back(Event::Failed { what: "round", error });
            }
            (Request::Compact { revision }, Reply::Compacted) => self.events.push_back(Event::Compacted { revision }),
            (Request::Compact { revision }, Reply::AlreadyCompacted) => {
                self.events.push_back(Event::AlreadyCompacted { revision })
            }
            (Request::Compact { .. }, Reply::Failed { error }) => {
                self.events.push_back(Event::Failed { what: "compaction", error })
            }
            (request, reply) => {
                let error = format!("unexpected answer {reply:?} to {request:?}");
                self.events.push_back(Event::Failed { what: "round", error });
            }
        }
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(300);

    /// A call's timeout.
    const CALL: Duration = Duration::from_secs(1);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// A model of the compaction key and etcd's revision, as the transaction sees them.
    #[derive(Default)]
    struct Key {
        version: i64,
        value: Option<i64>,
        revision: i64,
        compacted: i64,
        fence: Option<FenceKey>,
    }

    impl Key {
        /// Carries out `request` as etcd would.
        fn answer(&mut self, request: Request) -> Reply {
            match request {
                Request::Round { expect_version, compact_to } if expect_version == self.version => {
                    self.version += 1;
                    self.value = Some(compact_to);
                    self.revision += 1;
                    Reply::Won { revision: self.revision, fence: self.fence.clone() }
                }
                Request::Round { .. } => Reply::Lost {
                    version: self.version,
                    compact_to: self.value,
                    revision: self.revision,
                    fence: self.fence.clone(),
                },
                Request::Compact { revision } if revision <= self.compacted => Reply::AlreadyCompacted,
                Request::Compact { revision } => {
                    assert!(revision <= self.revision, "compacted to a future revision");
                    self.compacted = revision;
                    Reply::Compacted
                }
            }
        }
    }

    /// Runs `compactor` at `now` against `key` until it has nothing more to send.
    fn run(compactor: &mut Compactor, key: &mut Key, now: Duration) -> Vec<Event> {
        while let Some(request) = compactor.poll_request(now) {
            let reply = key.answer(request);
            compactor.handle_reply(now, reply);
        }
        std::iter::from_fn(|| compactor.poll_event()).collect()
    }

    #[test]
    fn one_instance_a_round_compacts_to_what_it_saw_a_round_before() {
        let mut key = Key::default();
        // Three instances, their rounds at 10 s, 20 s and 30 s past each interval.
        let mut fleet: Vec<Compactor> = [10, 20, 30].map(|s| Compactor::new(INTERVAL, secs(s), CALL)).into();
        let mut compactions = Vec::new();
        for round in 0..6u64 {
            for (i, compactor) in fleet.iter_mut().enumerate() {
                let now = secs(round * 300 + 10 * (i as u64 + 1));
                assert_eq!(compactor.poll_timeout(), Some(now));
                // Between rounds the fleet writes: 100 revisions per instance per round.
                key.revision += 100;
                for event in run(compactor, &mut key, now) {
                    if let Event::Compacted { revision } = event {
                        compactions.push((round, i, revision));
                    }
                }
            }
        }
        // The first instance wins every round (it comes first after its own put), and from its
        // second round on compacts to the revision it saw a round earlier (each round adds
        // 301: the fleet's 300 and its own put): nothing newer than an interval is compacted.
        let expected: Vec<(u64, usize, i64)> = (1..6).map(|round| (round, 0, 101 + (round as i64 - 1) * 301)).collect();
        assert_eq!(compactions, expected);
        assert_eq!(key.version, 6, "one put a round");
    }

    #[test]
    fn a_dead_compactor_is_replaced_by_the_next_instance_whose_round_comes() {
        let mut key = Key::default();
        let mut a = Compactor::new(INTERVAL, secs(10), CALL);
        let mut b = Compactor::new(INTERVAL, secs(20), CALL);
        for round in 0..3 {
            run(&mut a, &mut key, secs(round * 300 + 10));
            let events = run(&mut b, &mut key, secs(round * 300 + 20));
            assert!(events.iter().all(|e| matches!(e, Event::Lost { .. })), "{events:?}");
        }
        // `a` dies. `b` lost its last round after `a`'s put, so it knows the key's version and
        // wins its next round, and compacts to what it saw then.
        let seen = key.revision;
        key.revision += 50;
        let events = run(&mut b, &mut key, secs(3 * 300 + 20));
        assert_eq!(events, vec![Event::Compacted { revision: seen }]);
        assert_eq!(key.compacted, seen);
        // `a` comes back: it lost its place, and learns the version again.
        let events = run(&mut a, &mut key, secs(4 * 300 + 10));
        assert!(matches!(events[..], [Event::Lost { compact_to: Some(r) }] if r == seen), "{events:?}");
    }

    /// etcd restored from a snapshot hands its revisions out again: a revision seen before
    /// the restore is reached again soon after it when the fleet writes fast. The fence the
    /// restore procedure sets shows it: that round compacts nothing, and the next compacts to
    /// a revision seen after the restore, an interval of the new history kept.
    #[test]
    fn a_restore_compacts_nothing_seen_before_it() {
        let mut key = Key::default();
        let mut c = Compactor::new(INTERVAL, secs(0), CALL);
        key.revision = 1_000;
        run(&mut c, &mut key, secs(0));
        // Restored from a snapshot taken at revision 400 (after the round's put), fenced,
        // and written past 1,001 again within the interval.
        key.revision = 401;
        key.fence = Some(fence_at(401, 1_000));
        key.revision = 1_100;
        let events = run(&mut c, &mut key, secs(300));
        assert!(!events.iter().any(|e| matches!(e, Event::Compacted { .. })), "compacted the new history: {events:?}");
        assert!(events.iter().any(|e| matches!(e, Event::WentBack { .. })), "{events:?}");
        assert_eq!(key.compacted, 0);
        key.revision += 50;
        let events = run(&mut c, &mut key, secs(600));
        assert_eq!(events, vec![Event::Compacted { revision: 1_101 }]);
        // A header below one seen before, told by the task, does the same.
        key.revision += 50;
        c.went_back("etcd's revision is 7, below 1,201 seen before".into());
        let events = run(&mut c, &mut key, secs(900));
        assert!(!events.iter().any(|e| matches!(e, Event::Compacted { .. })), "{events:?}");
    }

    /// The fence key as `snowmint fence` leaves it: at `mod_revision`, until `until_ms`.
    fn fence_at(mod_revision: i64, until_ms: i64) -> FenceKey {
        FenceKey { mod_revision, value: format!("{{\"until_ms\":{until_ms}}}").into_bytes() }
    }

    /// A restore done twice from one snapshot, each time fenced as the runbook says, leaves
    /// the fence key at the same mod revision, and the history after the second restore
    /// reaches the revisions seen after the first one again. The fence's value (a later time)
    /// shows the second restore: nothing seen before it is compacted to.
    #[test]
    fn a_second_restore_from_the_same_snapshot_compacts_nothing_seen_before_it() {
        let mut key = Key::default();
        let mut c = Compactor::new(INTERVAL, secs(0), CALL);
        key.revision = 400;
        run(&mut c, &mut key, secs(0));
        // The first restore, from a snapshot at revision 400, fenced at revision 401.
        key.revision = 401;
        key.fence = Some(fence_at(401, 60_000));
        let events = run(&mut c, &mut key, secs(300));
        assert!(events.iter().any(|e| matches!(e, Event::WentBack { .. })), "{events:?}");
        // The second restore, from the same snapshot, fenced at revision 401 again, and the
        // fleet writes past the revision the last round saw within the interval.
        key.revision = 401;
        key.fence = Some(fence_at(401, 90_000));
        key.revision = 500;
        let events = run(&mut c, &mut key, secs(600));
        assert!(!events.iter().any(|e| matches!(e, Event::Compacted { .. })), "compacted the new history: {events:?}");
        assert!(events.iter().any(|e| matches!(e, Event::WentBack { .. })), "{events:?}");
        assert_eq!(key.compacted, 0);
    }

    #[test]
    fn failures_and_compactions_already_done_are_counted_and_never_stop_the_rounds() {
        let mut key = Key::default();
        let mut c = Compactor::new(INTERVAL, secs(0), CALL);
        run(&mut c, &mut key, secs(0));
        // A round that fails: the version and the revision to compact to are kept.
        let request = c.poll_request(secs(300)).unwrap();
        assert_eq!(request, Request::Round { expect_version: 1, compact_to: 1 });
        c.handle_reply(secs(300), Reply::Failed { error: "no answer".into() });
        assert_eq!(c.poll_event(), Some(Event::Failed { what: "round", error: "no answer".into() }));
        assert_eq!(c.poll_timeout(), Some(secs(600)));
        // etcd compacted further by itself: the compaction is answered "already compacted".
        key.compacted = 50;
        key.revision = 60;
        let events = run(&mut c, &mut key, secs(600));
        assert_eq!(events, vec![Event::AlreadyCompacted { revision: 1 }]);
        // A compaction that fails: counted, and the next round goes on.
        let request = c.poll_request(secs(900)).unwrap();
        assert!(matches!(request, Request::Round { expect_version: 2, .. }), "{request:?}");
        let won = key.answer(request);
        c.handle_reply(secs(900), won);
        assert_eq!(c.poll_request(secs(900)), Some(Request::Compact { revision: 61 }));
        c.handle_reply(secs(900), Reply::Failed { error: "etcdserver: request timed out".into() });
        assert!(matches!(c.poll_event(), Some(Event::Failed { what: "compaction", .. })));
        assert_eq!(c.poll_timeout(), Some(secs(1200)));
    }

    #[test]
    fn a_late_round_does_not_bring_the_next_one_closer() {
        let mut c = Compactor::new(INTERVAL, secs(0), CALL);
        assert!(c.poll_request(secs(0)).is_some());
        c.handle_reply(secs(0), Reply::Won { revision: 5, fence: None });
        // The process was paused for an hour: one round now, the next an interval later.
        assert!(c.poll_request(secs(3_600)).is_some());
        c.handle_reply(secs(3_600), Reply::Lost { version: 3, compact_to: Some(4), revision: 9, fence: None });
        assert_eq!(c.poll_timeout(), Some(secs(3_600 + 300)));
    }

    /// A round won, its answer taken in only after the process was suspended for longer than
    /// a call's timeout (etcd restored meanwhile, its revisions handed out again): nothing is
    /// compacted on it, and the revision it saw is not compacted to later either (simulator
    /// seed 12021697578 compacted to a revision reached 0.3 s before on the restored history).
    #[test]
    fn a_round_answered_too_late_compacts_nothing() {
        let mut c = Compactor::new(INTERVAL, secs(0), CALL);
        assert!(c.poll_request(secs(0)).is_some());
        c.handle_reply(secs(0), Reply::Won { revision: 5, fence: None });
        assert_eq!(c.poll_event(), Some(Event::WonFirstRound));
        assert!(c.poll_request(secs(300)).is_some());
        // The answer waited out a suspend of 4 s.
        c.handle_reply(secs(304), Reply::Won { revision: 9, fence: None });
        assert!(matches!(c.poll_event(), Some(Event::Failed { what: "round", error }) if error.contains("too late")));
        assert_eq!(c.poll_request(secs(304)), None, "no compaction on a late answer");
        // The next round, answered in time, has seen nothing a round before: no compaction yet.
        assert!(c.poll_request(secs(604)).is_some());
        c.handle_reply(secs(604), Reply::Won { revision: 12, fence: None });
        assert_eq!(c.poll_request(secs(604)), None);
        assert!(c.poll_request(secs(904)).is_some());
        c.handle_reply(secs(904), Reply::Won { revision: 20, fence: None });
        assert_eq!(c.poll_request(secs(904)), Some(Request::Compact { revision: 12 }));
    }
}
