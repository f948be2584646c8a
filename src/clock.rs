//! The clock seam: wall time for the ID's time field, monotonic time for every wait and
//! deadline.
//!
//! Wall time may step backward or jump forward (NTP, an operator, a VM restore); monotonic
//! time never does. The generator never reads either: the minter reads a [`Clock`] and passes
//! ticks in. Tests use [`ManualClock`] to step wall time back and forth at will.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of wall and monotonic time.
pub trait Clock: Send + Sync + 'static {
    /// Wall time, in microseconds since the Unix epoch. May go backward.
    fn wall_us(&self) -> i64;
    /// Wall time, in milliseconds since the Unix epoch. May go backward.
    fn wall_ms(&self) -> i64 {
        self.wall_us().div_euclid(1000)
    }
    /// Time since an arbitrary fixed origin. Never goes backward.
    fn monotonic(&self) -> Duration;
}

/// The operating system's clocks.
#[derive(Debug, Clone)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock { origin: Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn wall_us(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX),
        }
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock moved only by hand, for tests. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    wall_us: Arc<AtomicI64>,
    monotonic_ns: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at `wall_ms` (milliseconds since the Unix epoch).
    pub fn new(wall_ms: i64) -> ManualClock {
        let clock = ManualClock::default();
        clock.set_wall(wall_ms);
        clock
    }

    /// Moves both clocks forward by `d`, as real time passing does.
    pub fn advance(&self, d: Duration) {
        self.wall_us.fetch_add(d.as_micros() as i64, Ordering::SeqCst);
        self.monotonic_ns.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Steps the wall clock alone by `delta_ms` (negative: backward), as NTP or an
    /// operator does.
    pub fn step_wall(&self, delta_ms: i64) {
        self.wall_us.fetch_add(delta_ms * 1000, Ordering::SeqCst);
    }

    /// Sets the wall clock alone, in milliseconds since the Unix epoch.
    pub fn set_wall(&self, wall_ms: i64) {
        self.wall_us.store(wall_ms * 1000, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn wall_us(&self) -> i64 {
        self.wall_us.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.monotonic_ns.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_steps_wall_time_alone() {
        let clock = ManualClock::new(1_000);
        clock.advance(Duration::from_millis(5));
        assert_eq!((clock.wall_ms(), clock.monotonic()), (1_005, Duration::from_millis(5)));
        clock.step_wall(-100);
        assert_eq!((clock.wall_ms(), clock.monotonic()), (905, Duration::from_millis(5)));
        let shared = clock.clone();
        shared.set_wall(7);
        assert_eq!(clock.wall_ms(), 7);
        shared.advance(Duration::from_micros(1_500));
        assert_eq!((clock.wall_us(), clock.wall_ms()), (8_500, 8));
    }

    #[test]
    fn system_clock_is_after_2020_and_monotonic() {
        let clock = SystemClock::new();
        assert!(clock.wall_ms() > 1_577_836_800_000);
        let a = clock.monotonic();
        let b = clock.monotonic();
        assert!(b >= a);
    }
}
