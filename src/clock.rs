//! The clock seam: wall time for the ID's time field, boot time for every wait and deadline.
//!
//! Wall time may step backward or jump forward (NTP, an operator, a VM restore); boot time
//! never does. Boot time counts the time the machine is suspended (Linux `CLOCK_BOOTTIME`),
//! as an etcd lease does: `CLOCK_MONOTONIC` stops during a suspend, so a deadline measured on
//! it would pass late, after the lease is gone. The generator reads no clock: the minter reads
//! a [`Clock`] and passes ticks in. Tests use [`ManualClock`] to step wall time back and forth
//! and to suspend the machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of wall time and boot time.
pub trait Clock: Send + Sync + 'static {
    /// Wall time, in microseconds since the Unix epoch. May go backward.
    fn wall_us(&self) -> i64;
    /// Wall time, in milliseconds since the Unix epoch. May go backward.
    fn wall_ms(&self) -> i64 {
        self.wall_us().div_euclid(1000)
    }
    /// Time since an arbitrary fixed origin, counting suspend. Never goes backward.
    fn boot_time(&self) -> Duration;
    /// Like [`Clock::boot_time`], but stopped while the machine is suspended. Only a planted
    /// defect measures deadlines on it; it exists so the simulator can tell the two apart.
    fn awake(&self) -> Duration {
        self.boot_time()
    }
    /// Where [`Clock::boot_time`]'s origin lies on the host's own boot-time clock, for what
    /// outlives the process (the clock filter's memory): `None` for a clock with no host
    /// behind it (tests), whose readings mean nothing to a later process.
    fn host_boot_origin(&self) -> Option<Duration> {
        None
    }
}

/// The operating system's clocks.
#[derive(Debug, Clone)]
pub struct SystemClock {
    origin: Instant,
    boot_origin: Duration,
}

/// Reads `CLOCK_BOOTTIME` on Linux (never back, counting suspend); `CLOCK_MONOTONIC` elsewhere.
fn read_boot_clock() -> Duration {
    #[cfg(target_os = "linux")]
    let id = libc::CLOCK_BOOTTIME;
    #[cfg(not(target_os = "linux"))]
    let id = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes into it.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime failed: {}", std::io::Error::last_os_error());
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock { origin: Instant::now(), boot_origin: read_boot_clock() }
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

    fn boot_time(&self) -> Duration {
        read_boot_clock().saturating_sub(self.boot_origin)
    }

    fn awake(&self) -> Duration {
        self.origin.elapsed()
    }

    fn host_boot_origin(&self) -> Option<Duration> {
        Some(self.boot_origin)
    }
}

/// A clock for tests: the wall clock moves only by hand; boot time runs in real time (so
/// call deadlines and waits behave as in production) plus whatever is added by hand.
/// Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    origin: Instant,
    wall_us: Arc<AtomicI64>,
    /// Added to the real time elapsed since `origin`.
    offset_ns: Arc<AtomicU64>,
    /// Time spent suspended, which [`Clock::awake`] does not count.
    suspended_ns: Arc<AtomicU64>,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock {
            origin: Instant::now(),
            wall_us: Arc::default(),
            offset_ns: Arc::default(),
            suspended_ns: Arc::default(),
        }
    }
}

impl ManualClock {
    /// A clock at `wall_ms` (milliseconds since the Unix epoch).
    pub fn new(wall_ms: i64) -> ManualClock {
        let clock = ManualClock::default();
        clock.set_wall(wall_ms);
        clock
    }

    /// Moves both clocks forward by `d`, as time passing does.
    pub fn advance(&self, d: Duration) {
        self.wall_us.fetch_add(d.as_micros() as i64, Ordering::SeqCst);
        self.offset_ns.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
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

    /// The machine sleeps for `d`: wall and boot time move on, awake time does not.
    pub fn suspend(&self, d: Duration) {
        self.advance(d);
        self.suspended_ns.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn wall_us(&self) -> i64 {
        self.wall_us.load(Ordering::SeqCst)
    }

    fn boot_time(&self) -> Duration {
        self.origin.elapsed() + Duration::from_nanos(self.offset_ns.load(Ordering::SeqCst))
    }

    fn awake(&self) -> Duration {
        self.boot_time() - Duration::from_nanos(self.suspended_ns.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_steps_wall_time_alone() {
        let clock = ManualClock::new(1_000);
        clock.advance(Duration::from_millis(5));
        assert_eq!(clock.wall_ms(), 1_005);
        assert!(clock.boot_time() >= Duration::from_millis(5));
        let boot = clock.boot_time();
        clock.step_wall(-100);
        assert_eq!(clock.wall_ms(), 905);
        assert!(clock.boot_time() < boot + Duration::from_millis(50), "a wall step moved boot time");
        let shared = clock.clone();
        shared.set_wall(7);
        assert_eq!(clock.wall_ms(), 7);
        shared.advance(Duration::from_micros(1_500));
        assert_eq!((clock.wall_us(), clock.wall_ms()), (8_500, 8));
    }

    #[test]
    fn a_suspend_moves_boot_time_but_not_awake_time() {
        let clock = ManualClock::new(1_000);
        clock.advance(Duration::from_secs(1));
        clock.suspend(Duration::from_secs(30));
        assert!(clock.boot_time() >= Duration::from_secs(31));
        let awake = clock.awake();
        let slept = clock.boot_time() - awake;
        assert!(slept >= Duration::from_secs(30) && slept < Duration::from_millis(30_100), "{slept:?}");
        assert_eq!(clock.wall_ms(), 31_000 + 1_000);
    }

    /// The system clock's deadlines run on CLOCK_BOOTTIME, which goes on through a suspend
    /// as the etcd lease does.
    #[test]
    #[cfg(target_os = "linux")]
    fn system_clock_measures_deadlines_on_boot_time() {
        let clock = SystemClock::new();
        let before = read_boot_clock();
        let reading = clock.boot_time() + clock.boot_origin;
        let after = read_boot_clock();
        assert!(before <= reading && reading <= after, "{before:?} <= {reading:?} <= {after:?}");
    }

    #[test]
    fn system_clock_is_after_2020_and_its_boot_time_never_goes_back() {
        let clock = SystemClock::new();
        assert!(clock.wall_ms() > 1_577_836_800_000);
        let a = clock.boot_time();
        let b = clock.boot_time();
        assert!(b >= a);
    }
}
