//! Forward jumps of the wall clock are followed only once they have lasted.
//!
//! A wall clock that jumps ahead and is corrected a moment later (a bad NTP server, a VM
//! restored with the host's time, an operator's typo) must not drag the minting time, and
//! with it the reservations, into the future: everything minted after the correction would
//! have to wait for real time to catch up (the failure tikv/pd #6768 describes). So each
//! reading is held against a prediction: the boot-time clock plus the highest offset of the
//! wall clock over it that was accepted. A reading no more than `threshold` ahead of it is
//! accepted as it is (slews, small steps, every step back, which the minting clock handles,
//! and the correction of a step back, which only returns to where the clock was before); one
//! further ahead is a jump, and until it has persisted for `confirm`, the time given out
//! advances with the boot-time clock instead. A jump still there after `confirm` is adopted.
//!
//! Pure: the caller passes each reading in. [`FilteredClock`] wraps a [`Clock`] with it, so the
//! minter and the keeper read the same filtered time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Clock;

/// What a reading did to the filter, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JumpEvent {
    /// The wall clock jumped `ahead_ms` ahead of the prediction: not followed yet.
    Seen { ahead_ms: i64 },
    /// The jump lasted the confirmation window: followed from now on.
    Adopted { ahead_ms: i64 },
    /// The wall clock came back within the threshold before the window ended.
    Corrected,
}

/// The filter's state.
#[derive(Debug, Clone)]
pub struct ClockFilter {
    threshold_us: i64,
    confirm: Duration,
    /// The highest offset of the wall clock over the boot-time clock (µs) among accepted
    /// readings: the prediction of "now" is the boot time plus it. A reading back up to it
    /// (a step back, then corrected) is no jump: the wall clock was there before.
    high_offset_us: Option<i64>,
    /// Since when (boot time) the wall clock has been ahead of the prediction.
    jumped_since: Option<Duration>,
}

impl ClockFilter {
    pub fn new(threshold: Duration, confirm: Duration) -> ClockFilter {
        ClockFilter {
            threshold_us: threshold.as_micros().min(i64::MAX as u128) as i64,
            confirm,
            high_offset_us: None,
            jumped_since: None,
        }
    }

    /// A filter that starts from what an earlier process on this host knew: `high_offset_us`,
    /// the highest offset of the wall clock over the boot-time clock it accepted (measured on
    /// this filter's boot time). Without it, a restart in the middle of a jump would take the
    /// jumped clock as its first reading, and so as the truth; with it,
    /// the jump is one still to be confirmed, and the correction of a clock that was behind at
    /// the restart is no jump at all.
    pub fn seeded(threshold: Duration, confirm: Duration, high_offset_us: i64) -> ClockFilter {
        ClockFilter { high_offset_us: Some(high_offset_us), ..ClockFilter::new(threshold, confirm) }
    }

    /// The highest offset of the wall clock over the boot-time clock accepted so far (µs),
    /// what a later process on this host is seeded with.
    pub fn high_offset_us(&self) -> Option<i64> {
        self.high_offset_us
    }

    /// Filters one reading (`wall_us` at boot time `boot`): the wall time to use, and what
    /// the reading did.
    pub fn filter(&mut self, wall_us: i64, boot: Duration) -> (i64, Option<JumpEvent>) {
        let boot_us = boot.as_micros().min(i64::MAX as u128) as i64;
        let offset = wall_us.saturating_sub(boot_us);
        let Some(high) = self.high_offset_us else {
            self.high_offset_us = Some(offset);
            return (wall_us, None);
        };
        let ahead = offset.saturating_sub(high);
        if ahead <= self.threshold_us {
            let event = self.jumped_since.take().map(|_| JumpEvent::Corrected);
            self.high_offset_us = Some(high.max(offset));
            return (wall_us, event);
        }
        let since = *self.jumped_since.get_or_insert(boot);
        if boot.saturating_sub(since) >= self.confirm {
            self.jumped_since = None;
            self.high_offset_us = Some(offset);
            return (wall_us, Some(JumpEvent::Adopted { ahead_ms: ahead / 1000 }));
        }
        // Not confirmed: time goes on with the boot-time clock from the prediction.
        let event = (since == boot).then_some(JumpEvent::Seen { ahead_ms: ahead / 1000 });
        (boot_us.saturating_add(high), event)
    }
}

/// A clock whose wall time is filtered: forward jumps are followed only once confirmed.
/// Clones share the filter, so every reader sees the same time.
pub struct FilteredClock {
    inner: Arc<dyn Clock>,
    filter: Arc<Mutex<ClockFilter>>,
    /// Told of every jump seen, adopted or corrected (metrics and logs).
    on_jump: Arc<dyn Fn(JumpEvent) + Send + Sync>,
}

impl FilteredClock {
    pub fn new(inner: Arc<dyn Clock>, filter: ClockFilter, on_jump: Arc<dyn Fn(JumpEvent) + Send + Sync>) -> Self {
        FilteredClock { inner, filter: Arc::new(Mutex::new(filter)), on_jump }
    }

    /// The filter's [`ClockFilter::high_offset_us`], on the filter's boot time.
    pub fn high_offset_us(&self) -> Option<i64> {
        self.filter.lock().expect("clock filter lock").high_offset_us()
    }
}

impl Clock for FilteredClock {
    fn wall_us(&self) -> i64 {
        let wall = self.inner.wall_us();
        let boot = self.inner.boot_time();
        let (filtered, event) = self.filter.lock().expect("clock filter lock").filter(wall, boot);
        if let Some(event) = event {
            (self.on_jump)(event);
        }
        filtered
    }

    fn boot_time(&self) -> Duration {
        self.inner.boot_time()
    }

    fn awake(&self) -> Duration {
        self.inner.awake()
    }

    fn host_boot_origin(&self) -> Option<Duration> {
        self.inner.host_boot_origin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn small_steps_and_steps_back_pass_through() {
        let mut f = ClockFilter::new(secs(1.0), secs(10.0));
        assert_eq!(f.filter(100 * S, secs(0.0)), (100 * S, None));
        // 0.5 s ahead of the prediction: within the threshold.
        assert_eq!(f.filter(101 * S + S / 2, secs(1.0)), (101 * S + S / 2, None));
        // A step back of 30 s is passed on: the minting clock deals with it.
        assert_eq!(f.filter(72 * S, secs(2.0)), (72 * S, None));
    }

    #[test]
    fn a_jump_corrected_inside_the_window_never_moves_time_ahead() {
        let mut f = ClockFilter::new(secs(1.0), secs(10.0));
        f.filter(100 * S, secs(0.0));
        // The clock jumps an hour ahead: time goes on with the boot clock.
        let (t, event) = f.filter(3_701 * S, secs(1.0));
        assert_eq!(t, 101 * S);
        assert_eq!(event, Some(JumpEvent::Seen { ahead_ms: 3_600_000 }));
        assert_eq!(f.filter(3_705 * S, secs(5.0)), (105 * S, None));
        // Corrected 8 s later.
        assert_eq!(f.filter(108 * S, secs(8.0)), (108 * S, Some(JumpEvent::Corrected)));
        assert_eq!(f.filter(109 * S, secs(9.0)), (109 * S, None));
    }

    /// A step back corrected forward returns to where the clock was: no jump.
    #[test]
    fn the_correction_of_a_step_back_is_no_jump() {
        let mut f = ClockFilter::new(secs(1.0), secs(10.0));
        f.filter(100 * S, secs(0.0));
        assert_eq!(f.filter(91 * S, secs(1.0)), (91 * S, None));
        assert_eq!(f.filter(102 * S, secs(2.0)), (102 * S, None));
        // Beyond where it was, by more than the threshold: a jump again.
        let (t, event) = f.filter(110 * S, secs(3.0));
        assert_eq!(t, 103 * S);
        assert_eq!(event, Some(JumpEvent::Seen { ahead_ms: 7_000 }));
    }

    /// A process started while the wall clock is jumped ahead, seeded
    /// with what the one before it knew, does not take the jump as the truth: time goes on
    /// with the boot clock from before the jump until the jump has lasted the window.
    #[test]
    fn a_restart_during_a_jump_does_not_adopt_it() {
        let mut before = ClockFilter::new(secs(1.0), secs(10.0));
        before.filter(100 * S, secs(0.0));
        // The clock jumps an hour ahead, and the process is killed before it is confirmed.
        assert_eq!(before.filter(3_701 * S, secs(1.0)).0, 101 * S);
        let memory = before.high_offset_us().expect("a reading was accepted");
        assert_eq!(memory, 100 * S, "the jump is not remembered as the truth");

        // Without the memory, the restart takes the jumped clock at once.
        let mut forgetful = ClockFilter::new(secs(1.0), secs(10.0));
        assert_eq!(forgetful.filter(3_703 * S, secs(3.0)).0, 3_703 * S);

        let mut after = ClockFilter::seeded(secs(1.0), secs(10.0), memory);
        let (t, event) = after.filter(3_703 * S, secs(3.0));
        assert_eq!(t, 103 * S);
        assert_eq!(event, Some(JumpEvent::Seen { ahead_ms: 3_600_000 }));
        // Corrected: no jump was ever followed.
        assert_eq!(after.filter(105 * S, secs(5.0)), (105 * S, Some(JumpEvent::Corrected)));
        // Had it lasted the window (counted from the restart), it would be adopted.
        let mut lasting = ClockFilter::seeded(secs(1.0), secs(10.0), memory);
        lasting.filter(3_703 * S, secs(3.0));
        assert_eq!(lasting.filter(3_712 * S, secs(12.0)).0, 112 * S);
        assert_eq!(lasting.filter(3_713 * S, secs(13.0)).0, 3_713 * S);
    }

    /// A process restarted with the clock behind, then corrected: the correction returns to
    /// where the clock was before the restart, so it is followed at once (without the memory
    /// it was a jump, and minting lagged real time by the step for the confirmation window).
    #[test]
    fn the_correction_of_a_clock_behind_at_a_restart_is_no_jump() {
        let mut after = ClockFilter::seeded(secs(1.0), secs(10.0), 100 * S);
        assert_eq!(after.filter(98 * S, secs(1.0)), (98 * S, None));
        assert_eq!(after.filter(102 * S, secs(2.0)), (102 * S, None));
        let mut forgetful = ClockFilter::new(secs(1.0), secs(10.0));
        forgetful.filter(98 * S, secs(1.0));
        assert_eq!(forgetful.filter(102 * S, secs(2.0)).0, 99 * S, "the forgetful filter lags");
    }

    #[test]
    fn a_jump_that_lasts_the_window_is_adopted() {
        let mut f = ClockFilter::new(secs(1.0), secs(10.0));
        f.filter(100 * S, secs(0.0));
        f.filter(200 * S, secs(1.0));
        assert_eq!(f.filter(205 * S, secs(6.0)).0, 106 * S);
        let (t, event) = f.filter(210 * S, secs(11.0));
        assert_eq!(t, 210 * S);
        assert_eq!(event, Some(JumpEvent::Adopted { ahead_ms: 99_000 }));
        assert_eq!(f.filter(211 * S, secs(12.0)), (211 * S, None));
    }
}
