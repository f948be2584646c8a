//! The two cores' events turned into metrics and log lines: the one subscriber production
//! gives them. Neither core writes a metric or a log line itself.

use std::time::Duration;

use crate::grant::Holding;
use crate::keeper::{Event, LossReason};
use crate::layout::{Slot, rfc3339_ms};
use crate::metrics::{
    ACTION_BORROWED, ACTION_REFUSED, ACTION_WAITED, BATCH_IDS, Metrics, NEXT_ID, REFUSED_DEADLINE, REFUSED_SATURATED,
    RESULT_FAILED, RESULT_OK,
};
use crate::minter::event::{ArrivalRefusal, ClockBackAction, Method, Tally};
use crate::minter::{self, MinterConfig, MinterCore, Responder};

/// The keeper's events as metrics and logs; keeps what it needs to log a run of failures
/// once, and the last failure for the start's error line.
pub struct KeeperReport {
    metrics: Metrics,
    renew_failing: bool,
    write_failing: bool,
    /// The last failure the keeper reported.
    pub last_error: Option<String>,
}

impl KeeperReport {
    pub fn new(metrics: Metrics) -> KeeperReport {
        KeeperReport { metrics, renew_failing: false, write_failing: false, last_error: None }
    }

    /// Records one event.
    pub fn record(&mut self, event: Event) {
        match event {
            Event::SessionOpened { session, ttl } => {
                tracing::debug!(session = format!("{session:x}"), ?ttl, "session opened")
            }
            Event::FleetClock { .. } | Event::FleetClockBeyond { .. } | Event::FleetClockWithin => {
                self.fleet_clock(event)
            }
            Event::SlotsListed { taken, slots } => {
                self.metrics.fleet_slots_in_use.set(taken as i64);
                self.metrics.fleet_slots.set(slots as i64);
            }
            Event::SlotTaken { .. } | Event::SlotLost { .. } | Event::NoFreeSlot { .. } | Event::SlotFenced { .. } => {
                self.slot(event)
            }
            Event::Renewed | Event::RenewFailed { .. } | Event::DeadlinePassed | Event::Closed => self.lease(event),
            Event::ReservationsWritten { .. }
            | Event::ReservationWriteFailed { .. }
            | Event::FinalSaved { .. }
            | Event::FinalKept { .. } => self.reservation(event),
            Event::RequestFailed { request, error } => {
                tracing::debug!(request, %error, "store request failed; retrying");
                self.last_error = Some(error);
            }
            Event::Corrupt { .. } | Event::StoreWentBack { .. } | Event::FenceSet { .. } => self.store(event),
        }
    }

    fn fleet_clock(&mut self, event: Event) {
        match event {
            Event::FleetClock { skew_ms, peers } => {
                self.metrics.fleet_clock_skew.set(skew_ms as f64 / 1000.0);
                tracing::debug!(skew_ms, peers, "clock compared with the fleet's");
            }
            Event::FleetClockBeyond { reason } => {
                tracing::error!(%reason, "minting stops until this clock agrees with the fleet's")
            }
            Event::FleetClockWithin => tracing::info!("the clock agrees with the fleet's again; minting goes on"),
            _ => unreachable!("a fleet clock event"),
        }
    }

    fn slot(&mut self, event: Event) {
        let m = &self.metrics;
        match event {
            Event::SlotTaken { slot, claim, floor_ms, reserved_ms, resumed, .. } => {
                m.lease_valid.set(1);
                tracing::info!(
                    worker_id = slot,
                    claim,
                    floor = floor_ms.map(rfc3339_ms),
                    reserved_until = %rfc3339_ms(reserved_ms),
                    resumed,
                    "slot taken"
                );
            }
            Event::SlotLost { slot, reason } => {
                m.lease_lost.inc();
                if reason == LossReason::SessionGone {
                    m.lease_valid.set(0);
                }
                let why = match reason {
                    LossReason::SessionGone => "the lease is gone on the store",
                    LossReason::NotOurs => "the slot's key is no longer this instance's",
                    LossReason::Corrupt => "its reservation is corrupt",
                };
                tracing::warn!(worker_id = slot, reason = why, "slot lost; claiming again");
            }
            Event::NoFreeSlot { slots } => {
                tracing::error!(slots, "every slot is taken; minting stays refused until one frees up")
            }
            Event::SlotFenced { slot, until_ms, reason } => {
                m.slots_fenced.inc();
                tracing::warn!(
                    worker_id = slot,
                    until = %rfc3339_ms(until_ms),
                    %reason,
                    "the floor of this claim is fenced: nothing is minted on it before then"
                );
            }
            _ => unreachable!("a slot event"),
        }
    }

    fn lease(&mut self, event: Event) {
        let m = &self.metrics;
        match event {
            Event::Renewed => {
                m.lease_renewals.with_label_values(&[RESULT_OK]).inc();
                m.lease_valid.set(1);
                if std::mem::take(&mut self.renew_failing) {
                    tracing::info!("lease renewals work again");
                }
            }
            Event::RenewFailed { error } => {
                m.lease_renewals.with_label_values(&[RESULT_FAILED]).inc();
                if !std::mem::replace(&mut self.renew_failing, true) {
                    tracing::warn!(%error, "lease renewal failed; retrying");
                }
                self.last_error = Some(error);
            }
            Event::DeadlinePassed => {
                m.lease_valid.set(0);
                tracing::warn!("lease deadline passed without a renewal; minting is fenced");
            }
            Event::Closed => {
                m.lease_valid.set(0);
                tracing::info!("slot released");
            }
            _ => unreachable!("a lease event"),
        }
    }

    fn reservation(&mut self, event: Event) {
        let m = &self.metrics;
        let latest = |slots: &[(Slot, i64)]| slots.iter().map(|&(_, until)| until).max().unwrap_or(0);
        match event {
            Event::ReservationsWritten { slots } => {
                m.reservation_writes.with_label_values(&[RESULT_OK]).inc();
                if std::mem::take(&mut self.write_failing) {
                    tracing::info!(?slots, "reservation writes work again");
                }
                tracing::debug!(?slots, reserved_until = %rfc3339_ms(latest(&slots)), "reservation extended");
            }
            Event::ReservationWriteFailed { error } => {
                m.reservation_writes.with_label_values(&[RESULT_FAILED]).inc();
                if !std::mem::replace(&mut self.write_failing, true) {
                    tracing::error!(%error, "reservation write failed; minting stops when the current reservation runs out");
                }
                self.last_error = Some(error);
            }
            Event::FinalSaved { slots } => {
                tracing::info!(?slots, reserved_until = %rfc3339_ms(latest(&slots)), "final reservation saved")
            }
            Event::FinalKept { why } => {
                tracing::warn!(why, "the saved reservation stays as it is; it covers every ID minted")
            }
            _ => unreachable!("a reservation event"),
        }
    }

    fn store(&mut self, event: Event) {
        match event {
            Event::Corrupt { slot, location, reason } => {
                tracing::error!(worker_id = slot, %location, %reason, "stored reservation is corrupt; never overwritten")
            }
            Event::StoreWentBack { detail, fence_until_ms } => {
                self.metrics.store_went_back.inc();
                tracing::error!(
                    %detail,
                    fence_until = %rfc3339_ms(fence_until_ms),
                    "etcd went back in time (a restored snapshot?): what was written since is lost; every claim's floor is fenced until past anything minted under the lost state, and this instance's own reservations are written again"
                );
            }
            Event::FenceSet { until_ms } => {
                tracing::warn!(until = %rfc3339_ms(until_ms), "fence set in etcd for the rest of the fleet")
            }
            _ => unreachable!("a store event"),
        }
    }

    /// The gauges of what is held, at `wall_ms`.
    pub fn holding(&self, holding: &Holding, wall_ms: i64) {
        let m = &self.metrics;
        match holding {
            Holding::Held(grant) => {
                let reserved = grant.slots.iter().map(|s| s.reserved_ms).min().unwrap_or(0);
                m.reservation_headroom_seconds.set((reserved - wall_ms) as f64 / 1000.0);
                m.slots_held.set(grant.slots.len() as i64);
                m.worker_id.set(grant.slots.first().map_or(-1, |s| s.slot.into()));
            }
            Holding::Unheld { .. } => {
                m.slots_held.set(0);
                m.worker_id.set(-1);
            }
        }
    }
}

/// The minter core's events and gauges as metrics and logs.
pub struct MinterReport {
    metrics: Metrics,
}

impl MinterReport {
    /// The report of a minter run with `config`; sets the gauges that `config` fixes.
    pub fn new(metrics: Metrics, config: &MinterConfig) -> MinterReport {
        metrics.clock_drift_bound_seconds.set(config.max_clock_drift.as_secs_f64());
        MinterReport { metrics }
    }

    /// The counts of the core's hot path, to give the core.
    pub fn tally(&self) -> Box<dyn Tally> {
        let m = &self.metrics;
        Box::new(MetricsTally {
            queue_wait: [NEXT_ID, BATCH_IDS].map(|method| m.queue_wait_seconds.with_label_values(&[method])),
            issued: m.ids_issued.clone(),
            discarded: m.ids_discarded.clone(),
            refused_on_arrival: [REFUSED_SATURATED, REFUSED_DEADLINE]
                .map(|reason| m.refused_on_arrival.with_label_values(&[reason])),
        })
    }

    /// Records the events of the last pass, and the gauges it leaves.
    pub fn after_pass<R: Responder>(&self, core: &mut MinterCore<R>) {
        while let Some(event) = core.poll_event() {
            self.record(event);
        }
        let m = &self.metrics;
        m.queue_length.set(core.queue_length() as i64);
        m.minting.set(i64::from(core.serving()));
        m.clock_drift_seconds.set(core.drift_ms() as f64 / 1000.0);
    }

    fn record(&self, event: minter::Event) {
        use minter::Event::*;
        let m = &self.metrics;
        match event {
            Minting => tracing::info!("minting"),
            Refusing { why } => tracing::warn!(reason = %why, "minting refused"),
            MintingFor { slots, generation } => tracing::info!(workers = ?slots, generation, "minting for workers"),
            BorrowingStarted { drift_ms, bound_ms } => {
                m.clock_backward.with_label_values(&[ACTION_BORROWED]).inc();
                m.clock_backward_seconds.observe(drift_ms as f64 / 1000.0);
                tracing::warn!(
                    drift_ms,
                    bound_ms,
                    "the wall clock is behind the minting time; minting goes on ahead of it, within the drift bound"
                );
            }
            BorrowingEnded => tracing::info!("the wall clock has caught up with the minting time"),
            ClockBack { behind_ms, action } => {
                let label = match action {
                    ClockBackAction::Waited => ACTION_WAITED,
                    ClockBackAction::Refused => ACTION_REFUSED,
                };
                m.clock_backward.with_label_values(&[label]).inc();
                m.clock_backward_seconds.observe(behind_ms as f64 / 1000.0);
                if action == ClockBackAction::Refused {
                    tracing::warn!(behind_ms, "the wall clock stepped back past the wait threshold; refusing to mint");
                } else {
                    tracing::info!(behind_ms, "the wall clock stepped back; waiting it out");
                }
            }
            SequenceExhausted => m.sequence_exhausted.inc(),
            SequenceWaited { waited } => m.sequence_wait_seconds.inc_by(waited.as_secs_f64()),
        }
    }
}

/// The hot path's counts, as Prometheus metrics looked up once.
struct MetricsTally {
    queue_wait: [prometheus::Histogram; 2],
    issued: prometheus::IntCounter,
    discarded: prometheus::IntCounter,
    refused_on_arrival: [prometheus::IntCounter; 2],
}

impl Tally for MetricsTally {
    fn answered(&self, method: Method, waited: Duration) {
        self.queue_wait[method as usize].observe(waited.as_secs_f64());
    }

    fn issued(&self, ids: u64) {
        self.issued.inc_by(ids);
    }

    fn discarded(&self, ids: u64) {
        self.discarded.inc_by(ids);
    }

    fn refused_on_arrival(&self, why: ArrivalRefusal) {
        self.refused_on_arrival[why as usize].inc();
    }
}
