//! etcd's alarms, recognised: when etcd refuses this fleet's writes because of an alarm,
//! every refusal, log line and metric names the alarm and how to clear it.
//!
//! etcd raises an alarm for the whole cluster when a member's database reaches its quota
//! (`NOSPACE`, `--quota-backend-bytes`, 2 GiB by default) or a member finds its data corrupt
//! (`CORRUPT`). While `NOSPACE` is raised etcd refuses every write with `etcdserver: mvcc:
//! database space exceeded` (reads, lease keep-alives, compaction and defragmentation go on);
//! it stays raised until an operator frees space and disarms it. While `CORRUPT` is raised
//! it refuses reads and writes with `etcdserver: corrupt cluster`.
//!
//! An instance learns of an alarm in two ways, neither of which writes:
//!
//! - from the error of any etcd call of its own ([`AlarmWatch::saw_error`]): the store's
//!   reservation writes, the upkeep's compaction rounds;
//! - from etcd's status call, polled by the upkeep task ([`crate::upkeep`]): each member lists
//!   the cluster's alarms among its status errors. The status is a local read of one member;
//!   the alarm list call would do as well, but in etcd 3.4 even its `GET` is a raft proposal,
//!   a write to every member's log.
//!
//! An alarm is cleared by a status that no longer lists it, or by a write that etcd applied
//! ([`AlarmWatch::saw_write`]): no alarm is raised while etcd applies writes.

use std::sync::{Arc, Mutex};

use prometheus::IntGauge;
use tokio::sync::watch;

use crate::metrics::{ALARM_CORRUPT, ALARM_NOSPACE, Metrics};

/// An etcd alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alarm {
    /// The database reached `--quota-backend-bytes`: every write is refused.
    NoSpace,
    /// A member's data disagrees with the others': reads and writes are refused.
    Corrupt,
}

impl Alarm {
    /// Every alarm, the most severe first.
    pub const ALL: [Alarm; 2] = [Alarm::Corrupt, Alarm::NoSpace];

    /// etcd's name of the alarm, as `etcdctl alarm list` prints it and as the `alarm` label of
    /// `snowmint_etcd_alarm` carries it.
    pub fn label(self) -> &'static str {
        match self {
            Alarm::NoSpace => ALARM_NOSPACE,
            Alarm::Corrupt => ALARM_CORRUPT,
        }
    }

    /// What etcd answers a call it refuses because of the alarm.
    fn refusal(self) -> &'static str {
        match self {
            Alarm::NoSpace => "etcdserver: mvcc: database space exceeded",
            Alarm::Corrupt => "etcdserver: corrupt cluster",
        }
    }

    /// The alarm an etcd call's error names, if any.
    pub fn in_error(error: &str) -> Option<Alarm> {
        // etcd's own words, and its gRPC status's (code and text vary by version and client).
        Alarm::ALL.into_iter().find(|alarm| {
            let refusal = alarm.refusal();
            let short = refusal.rsplit(": ").next().unwrap_or(refusal);
            error.contains(short)
        })
    }

    /// The alarms a member's status errors list (`memberID:<id> alarm:NOSPACE `, one per alarm
    /// and member).
    pub fn in_status(errors: &[String]) -> Raised {
        let mut raised = Raised::default();
        for error in errors {
            for alarm in Alarm::ALL {
                if error.split_whitespace().any(|word| word == format!("alarm:{}", alarm.label())) {
                    raised = raised.with(alarm);
                }
            }
        }
        raised
    }

    /// What it means and how to clear it, in one sentence.
    pub fn explain(self) -> &'static str {
        match self {
            Alarm::NoSpace => {
                "etcd raised its NOSPACE alarm (its database reached --quota-backend-bytes) and refuses every write: compact etcd's history, defragment every member and run `etcdctl alarm disarm` (the runbook, docs/runbook.md#snowmintetcdalarm, has the commands); minting resumes by itself once etcd accepts writes"
            }
            Alarm::Corrupt => {
                "etcd raised its CORRUPT alarm (a member's data disagrees with the others') and refuses reads and writes: find the corrupt member (etcd's log), remove it and add it back with an empty data dir, or restore the cluster from a snapshot, then run `etcdctl alarm disarm` (the runbook, docs/runbook.md#snowmintetcdalarm); minting resumes by itself once etcd accepts writes"
            }
        }
    }
}

impl std::fmt::Display for Alarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// The set of alarms raised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Raised {
    no_space: bool,
    corrupt: bool,
}

impl Raised {
    pub fn contains(self, alarm: Alarm) -> bool {
        match alarm {
            Alarm::NoSpace => self.no_space,
            Alarm::Corrupt => self.corrupt,
        }
    }

    pub fn with(mut self, alarm: Alarm) -> Raised {
        match alarm {
            Alarm::NoSpace => self.no_space = true,
            Alarm::Corrupt => self.corrupt = true,
        }
        self
    }

    pub fn is_empty(self) -> bool {
        self == Raised::default()
    }

    /// The most severe alarm raised.
    pub fn first(self) -> Option<Alarm> {
        Alarm::ALL.into_iter().find(|&alarm| self.contains(alarm))
    }
}

/// The alarms this instance believes raised, shared by everything that calls etcd: it keeps
/// `snowmint_etcd_alarm` up to date, logs each alarm as it is raised and cleared, and tells
/// the minter why etcd refuses (attached to the refusals that follow from it).
#[derive(Clone)]
pub struct AlarmWatch {
    inner: Arc<Inner>,
}

struct Inner {
    raised: Mutex<Raised>,
    /// `snowmint_etcd_alarm{alarm}`, in the order of [`Alarm::ALL`].
    gauges: [IntGauge; 2],
    /// What the minter attaches to refusals the store causes: the most severe alarm explained.
    trouble: watch::Sender<Option<String>>,
}

impl AlarmWatch {
    pub fn new(metrics: &Metrics) -> AlarmWatch {
        let gauges = Alarm::ALL.map(|alarm| metrics.etcd_alarm.with_label_values(&[alarm.label()]));
        let inner = Inner { raised: Mutex::default(), gauges, trouble: watch::Sender::new(None) };
        AlarmWatch { inner: Arc::new(inner) }
    }

    /// Why etcd refuses this instance's writes, while an alarm says so: for the minter.
    pub fn trouble(&self) -> watch::Receiver<Option<String>> {
        self.inner.trouble.subscribe()
    }

    pub fn raised(&self) -> Raised {
        *self.inner.raised.lock().expect("alarm state lock")
    }

    /// An etcd call failed with `error`: the alarm it names, if any, is raised.
    pub fn saw_error(&self, error: &str) {
        if let Some(alarm) = Alarm::in_error(error) {
            self.update(|raised| raised.with(alarm));
        }
    }

    /// etcd applied a write: no alarm stops writes now.
    pub fn saw_write(&self) {
        self.update(|_| Raised::default());
    }

    /// A member's status listed these alarms: the cluster's alarms, as that member knows them.
    pub fn saw_status(&self, raised: Raised) {
        self.update(|_| raised);
    }

    fn update(&self, change: impl FnOnce(Raised) -> Raised) {
        let mut state = self.inner.raised.lock().expect("alarm state lock");
        let (before, after) = (*state, change(*state));
        if before == after {
            return;
        }
        *state = after;
        for (alarm, gauge) in Alarm::ALL.into_iter().zip(&self.inner.gauges) {
            gauge.set(i64::from(after.contains(alarm)));
            match (before.contains(alarm), after.contains(alarm)) {
                (false, true) => tracing::error!(alarm = alarm.label(), fix = alarm.explain(), "etcd alarm raised"),
                (true, false) => tracing::info!(alarm = alarm.label(), "etcd alarm cleared; etcd accepts writes again"),
                _ => {}
            }
        }
        self.inner.trouble.send_replace(after.first().map(|alarm| alarm.explain().to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alarms_are_recognised_in_etcds_own_words() {
        // As the store reports a call etcd refused (etcd-client 0.21 against etcd 3.4).
        let nospace = "etcd record layout at http://127.0.0.1:46211: grpc request error: code: 'Some resource has been exhausted', message: \"etcdserver: mvcc: database space exceeded\"";
        assert_eq!(Alarm::in_error(nospace), Some(Alarm::NoSpace));
        assert_eq!(Alarm::in_error("status: DataLoss, message: \"etcdserver: corrupt cluster\""), Some(Alarm::Corrupt));
        assert_eq!(Alarm::in_error("etcdserver: request timed out"), None);
        assert_eq!(Alarm::in_error("etcdserver: mvcc: required revision has been compacted"), None);

        let status = ["memberID:13668033151171901709 alarm:NOSPACE ".to_string()];
        assert_eq!(Alarm::in_status(&status), Raised::default().with(Alarm::NoSpace));
        let both: [String; 3] =
            ["memberID:1 alarm:NOSPACE ".into(), "memberID:2 alarm:CORRUPT ".into(), "etcdserver: no leader".into()];
        let raised = Alarm::in_status(&both);
        assert!(raised.contains(Alarm::NoSpace) && raised.contains(Alarm::Corrupt));
        assert_eq!(raised.first(), Some(Alarm::Corrupt), "the most severe first");
        assert!(Alarm::in_status(&["etcdserver: no leader".to_string()]).is_empty());
    }

    #[test]
    fn the_watch_keeps_the_gauges_and_the_minters_reason() {
        let metrics = Metrics::new();
        let watch = AlarmWatch::new(&metrics);
        let trouble = watch.trouble();
        let gauge = |alarm: &str| metrics.etcd_alarm.with_label_values(&[alarm]).get();
        assert_eq!((gauge("NOSPACE"), gauge("CORRUPT")), (0, 0));

        watch.saw_error("etcd lease keep-alive: no answer within 2s");
        assert!(watch.raised().is_empty());
        watch.saw_error("message: \"etcdserver: mvcc: database space exceeded\"");
        assert_eq!((gauge("NOSPACE"), gauge("CORRUPT")), (1, 0));
        let why = trouble.borrow().clone().expect("a reason while NOSPACE is raised");
        assert!(why.contains("NOSPACE") && why.contains("etcdctl alarm disarm") && why.contains("defragment"), "{why}");

        // The status is the cluster's word: it may add and remove alarms.
        watch.saw_status(Raised::default().with(Alarm::Corrupt));
        assert_eq!((gauge("NOSPACE"), gauge("CORRUPT")), (0, 1));
        assert!(trouble.borrow().as_deref().is_some_and(|why| why.contains("CORRUPT")));

        watch.saw_write();
        assert_eq!((gauge("NOSPACE"), gauge("CORRUPT")), (0, 0));
        assert_eq!(*trouble.borrow(), None);
    }
}
