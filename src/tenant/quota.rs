//! A tenant's quota: a token bucket of IDs, filled at `rate` a second up to `burst`, with the
//! time given by its caller (no clock of its own).
//!
//! A call takes as many as it asks for (a batch its size), all or none. When the bucket holds
//! too few, the answer is how long until it holds enough: the wait a refusal tells the caller
//! (`RESOURCE_EXHAUSTED` with a retry delay). A call larger than the burst can never be
//! served and is told so apart.

use std::time::Duration;

/// A tenant's rate and burst, as the policy states them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    /// IDs a second, in the long run (more than 0).
    pub rate: f64,
    /// The most IDs at once (at least 1): what the bucket holds when full.
    pub burst: u64,
}

/// Why a call was not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// Enough come in after this wait.
    Wait(Duration),
    /// More than the burst: never.
    OverBurst { burst: u64 },
}

/// One tenant's bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    quota: Quota,
    /// IDs in the bucket at `at`.
    level: f64,
    at: Duration,
}

impl Bucket {
    /// A full bucket at `now` (a monotonic time).
    pub fn new(quota: Quota, now: Duration) -> Bucket {
        Bucket { quota, level: quota.burst as f64, at: now }
    }

    /// The bucket under a changed quota (a reloaded policy): what it holds carries over, up to
    /// the new burst.
    pub fn requota(&mut self, quota: Quota, now: Duration) {
        self.refill(now);
        self.quota = quota;
        self.level = self.level.min(quota.burst as f64);
    }

    fn refill(&mut self, now: Duration) {
        if now > self.at {
            let earned = (now - self.at).as_secs_f64() * self.quota.rate;
            self.level = (self.level + earned).min(self.quota.burst as f64);
            self.at = now;
        }
    }

    /// Takes `n` IDs at `now`, or says how long until there are enough.
    pub fn take(&mut self, n: u64, now: Duration) -> Result<(), Short> {
        if n > self.quota.burst {
            return Err(Short::OverBurst { burst: self.quota.burst });
        }
        self.refill(now);
        let n = n as f64;
        // A millionth of an ID of slack, for the rounding of the time earned.
        if self.level + 1e-6 >= n {
            self.level = (self.level - n).max(0.0);
            return Ok(());
        }
        let wait = (n - self.level) / self.quota.rate;
        // Rounded up to the millisecond, so the caller who waits it finds enough.
        Err(Short::Wait(Duration::from_millis((wait * 1000.0).ceil() as u64).max(Duration::from_millis(1))))
    }

    /// IDs that could be taken at `now`, for the metric of quota left.
    pub fn available(&mut self, now: Duration) -> u64 {
        self.refill(now);
        self.level as u64
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const T0: Duration = Duration::from_secs(1000);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_full_bucket_gives_its_burst_then_refills_at_the_rate() {
        let mut bucket = Bucket::new(Quota { rate: 1000.0, burst: 100 }, T0);
        assert_eq!(bucket.take(60, T0), Ok(()));
        assert_eq!(bucket.take(40, T0), Ok(()));
        assert_eq!(bucket.take(1, T0), Err(Short::Wait(MS)));
        assert_eq!(bucket.take(50, T0), Err(Short::Wait(50 * MS)));
        assert_eq!(bucket.take(50, T0 + 50 * MS), Ok(()));
        assert_eq!(bucket.take(101, T0 + 10 * 1000 * MS), Err(Short::OverBurst { burst: 100 }));
        assert_eq!(bucket.available(T0 + 10 * 1000 * MS), 100, "never more than the burst");
    }

    #[test]
    fn a_slow_rate_tells_a_long_wait_and_a_new_quota_keeps_what_is_left() {
        let mut bucket = Bucket::new(Quota { rate: 0.5, burst: 2 }, T0);
        assert_eq!(bucket.take(2, T0), Ok(()));
        assert_eq!(bucket.take(1, T0), Err(Short::Wait(Duration::from_secs(2))));
        bucket.requota(Quota { rate: 100.0, burst: 10 }, T0 + Duration::from_secs(1));
        assert_eq!(bucket.available(T0 + Duration::from_secs(1)), 0, "half an ID earned at the old rate");
        assert_eq!(bucket.take(1, T0 + Duration::from_secs(1)), Err(Short::Wait(5 * MS)));
        bucket.requota(Quota { rate: 100.0, burst: 1 }, T0 + Duration::from_secs(9));
        assert_eq!(bucket.available(T0 + Duration::from_secs(9)), 1, "cut to the new burst");
    }

    proptest! {
        /// Over any run of calls, what was let through is at most the burst and the rate over
        /// the time passed; and a caller who waits the wait told is let through.
        #[test]
        fn never_more_than_burst_and_rate_and_the_wait_told_suffices(
            rate in 1u32..100_000,
            burst in 1u64..100_000,
            calls in proptest::collection::vec((0u64..200_000, 1u64..5_000), 1..200),
        ) {
            let quota = Quota { rate: rate as f64, burst };
            let mut bucket = Bucket::new(quota, T0);
            let (mut now, mut given) = (T0, 0u64);
            for (after_us, n) in calls {
                now += Duration::from_micros(after_us);
                match bucket.take(n, now) {
                    Ok(()) => given += n,
                    Err(Short::OverBurst { .. }) => prop_assert!(n > burst),
                    Err(Short::Wait(wait)) => {
                        let mut probe = bucket.clone();
                        prop_assert_eq!(probe.take(n, now + wait), Ok(()));
                    }
                }
                let allowed = burst as f64 + (now - T0).as_secs_f64() * quota.rate;
                prop_assert!(given as f64 <= allowed + 1e-3, "{given} > {allowed}");
            }
        }
    }
}
