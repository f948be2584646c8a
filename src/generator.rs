//! The generator: the pure state machine that turns ticks into IDs.
//!
//! It holds the layout, the worker ID, the last tick used with its next sequence number, and
//! the reservation limit. It does no I/O, never sleeps and never reads a clock: the caller
//! passes the current tick in and gets back either IDs or the reason it cannot mint now
//! ([`Blocked`]): wait until a tick, refuse, or fenced. The minter turns those into waits and
//! gRPC errors.

use crate::layout::{Layout, Parts};

/// Why the generator cannot mint at the tick it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// Nothing can be minted before tick `tick`; ask again once the clock reaches it.
    WaitUntil { tick: u64, reason: WaitReason },
    /// The clock is more than the wait threshold behind the last tick used: refuse at once.
    /// Minting resumes by itself once the clock passes `last_tick`.
    Refuse { behind: u64, last_tick: u64, reason: RefuseReason },
    /// `tick` is past the reservation `reserved`: minting it could repeat IDs after a
    /// restart or a take-over, so it waits for the reservation to be extended.
    Fenced { tick: u64, reserved: u64 },
}

/// Why a wait is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// Every sequence number of the current tick is used.
    SequenceExhausted,
    /// The clock stepped back by `behind` ticks, within the threshold.
    ClockBehind { behind: u64 },
    /// The clock is `behind` ticks short of passing a previous holder's reservation.
    BelowFloor { behind: u64 },
}

/// Why a refusal happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefuseReason {
    /// The wall clock stepped back past the threshold after this generator minted.
    ClockStepBack,
    /// The clock has not yet passed the reservation a previous run or holder of this worker
    /// ID saved, and the gap is beyond the threshold.
    BelowFloor,
}

/// The generator state for one worker ID.
#[derive(Debug, Clone)]
pub struct Generator {
    layout: Layout,
    worker: u64,
    /// The tick of the last ID issued, or the inherited floor before the first.
    last_tick: u64,
    /// The sequence number the next ID at `last_tick` gets; above the maximum when the
    /// tick is used up (also for the inherited floor).
    next_sequence: u64,
    /// Ticks up to and including this one are covered by a durable reservation.
    reserved: u64,
    /// Steps back of at most this many ticks are waited out; larger ones are refused.
    max_back: u64,
    /// True until the first ID: `last_tick` is then a floor inherited from a previous
    /// holder, not a tick this generator used.
    at_floor: bool,
}

impl Generator {
    /// A generator for `worker` that mints only ticks above `floor` (the last reservation a
    /// previous run or holder of this worker saved) and up to `reserved`.
    ///
    /// Panics if `worker` does not fit the layout; callers validate it first.
    pub fn new(layout: Layout, worker: u64, floor: Option<u64>, reserved: u64, max_back: u64) -> Generator {
        assert!(worker <= layout.max_worker(), "worker {worker} does not fit the layout");
        let (last_tick, next_sequence) = match floor {
            // Invariant 2: a new holder mints only ticks above the previous reservation, so
            // the floor tick starts out used up.
            Some(floor) => (floor, layout.max_sequence() + 1),
            None => (0, 0),
        };
        // The time field cannot hold ticks past the layout's maximum: cap the reservation.
        let reserved = reserved.min(layout.max_tick());
        Generator { layout, worker, last_tick, next_sequence, reserved, max_back, at_floor: true }
    }

    pub fn worker(&self) -> u64 {
        self.worker
    }

    /// The last tick an ID was minted at, or `None` before the first ID.
    pub fn last_minted_tick(&self) -> Option<u64> {
        (!self.at_floor).then_some(self.last_tick)
    }

    /// The tick the clock must pass before a refused generator can mint again.
    pub fn last_tick(&self) -> u64 {
        self.last_tick
    }

    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Raises the reservation limit. A lower value is ignored: a reservation once written
    /// stays in force for this generator.
    pub fn extend_reservation(&mut self, reserved: u64) {
        self.reserved = self.reserved.max(reserved.min(self.layout.max_tick()));
    }

    /// Why the generator could not mint at tick `now`, without changing anything; `None`
    /// when it could.
    pub fn probe(&self, now: u64) -> Option<Blocked> {
        if now < self.last_tick {
            let behind = self.last_tick - now;
            // Invariant 5: a step back never resets the sequence; the generator waits for
            // the clock to come back, or refuses.
            return Some(match (behind <= self.max_back, self.at_floor) {
                (true, false) => {
                    Blocked::WaitUntil { tick: self.last_tick, reason: WaitReason::ClockBehind { behind } }
                }
                (true, true) => {
                    Blocked::WaitUntil { tick: self.last_tick + 1, reason: WaitReason::BelowFloor { behind } }
                }
                (false, false) => {
                    Blocked::Refuse { behind, last_tick: self.last_tick, reason: RefuseReason::ClockStepBack }
                }
                (false, true) => {
                    Blocked::Refuse { behind, last_tick: self.last_tick, reason: RefuseReason::BelowFloor }
                }
            });
        }
        // Invariant 1: a tick is minted only while it is covered by the reservation.
        if now > self.reserved {
            return Some(Blocked::Fenced { tick: now, reserved: self.reserved });
        }
        if now == self.last_tick && self.next_sequence > self.layout.max_sequence() {
            let reason =
                if self.at_floor { WaitReason::BelowFloor { behind: 0 } } else { WaitReason::SequenceExhausted };
            return Some(Blocked::WaitUntil { tick: now + 1, reason });
        }
        None
    }

    /// Makes the generator ready to mint at tick `now`, or says why it cannot.
    fn admit(&mut self, now: u64) -> Result<(), Blocked> {
        if let Some(blocked) = self.probe(now) {
            return Err(blocked);
        }
        if now > self.last_tick {
            // Invariant 5: the sequence restarts only here, when the tick advances, after
            // the clock check in `probe`.
            self.last_tick = now;
            self.next_sequence = 0;
        }
        self.at_floor = false;
        Ok(())
    }

    /// Mints one ID at tick `now`.
    pub fn next_id(&mut self, now: u64) -> Result<u64, Blocked> {
        self.admit(now)?;
        let id = self.layout.pack(Parts { tick: self.last_tick, worker: self.worker, sequence: self.next_sequence });
        self.next_sequence += 1;
        Ok(id)
    }

    /// Appends IDs minted at tick `now` to `out` until it holds `want`, in one pass over
    /// each tick's free sequence numbers. On `Err`, `out` keeps what was minted so far:
    /// the caller asks again for the rest (after waiting for the next tick when the
    /// sequence ran out).
    pub fn fill(&mut self, now: u64, out: &mut Vec<u64>, want: usize) -> Result<(), Blocked> {
        while out.len() < want {
            self.admit(now)?;
            let free = self.layout.max_sequence() + 1 - self.next_sequence;
            let take = free.min((want - out.len()) as u64);
            let base = self.layout.pack(Parts { tick: self.last_tick, worker: self.worker, sequence: 0 });
            let first = self.next_sequence;
            // With the sequence in the lowest bits, consecutive sequence numbers are
            // consecutive IDs.
            out.extend((first..first + take).map(|sequence| base | sequence));
            self.next_sequence += take;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout() -> Layout {
        Layout::snowmint(0, 10, 12)
    }

    fn small_layout() -> Layout {
        // Four IDs a tick, to exhaust the sequence quickly.
        Layout::snowmint(0, 10, 2)
    }

    #[test]
    fn mints_in_order_and_restarts_the_sequence_on_a_new_tick() {
        let mut g = Generator::new(layout(), 3, None, 1_000, 5);
        let a = g.next_id(10).unwrap();
        let b = g.next_id(10).unwrap();
        let c = g.next_id(11).unwrap();
        let l = layout();
        assert_eq!(l.unpack(a), Parts { tick: 10, worker: 3, sequence: 0 });
        assert_eq!(l.unpack(b), Parts { tick: 10, worker: 3, sequence: 1 });
        assert_eq!(l.unpack(c), Parts { tick: 11, worker: 3, sequence: 0 });
    }

    #[test]
    fn exhausted_sequence_waits_for_the_next_tick_and_never_wraps() {
        let mut g = Generator::new(small_layout(), 1, None, 1_000, 5);
        for _ in 0..4 {
            g.next_id(7).unwrap();
        }
        assert_eq!(g.next_id(7), Err(Blocked::WaitUntil { tick: 8, reason: WaitReason::SequenceExhausted }));
        assert_eq!(small_layout().unpack(g.next_id(8).unwrap()).sequence, 0);
    }

    #[test]
    fn small_step_back_waits_until_the_last_tick() {
        let mut g = Generator::new(layout(), 0, None, 1_000, 5);
        g.next_id(100).unwrap();
        assert_eq!(g.next_id(95), Err(Blocked::WaitUntil { tick: 100, reason: WaitReason::ClockBehind { behind: 5 } }));
        // Back at the last tick, the sequence goes on where it was.
        assert_eq!(layout().unpack(g.next_id(100).unwrap()).sequence, 1);
    }

    #[test]
    fn large_step_back_is_refused_and_keeps_the_sequence() {
        let mut g = Generator::new(layout(), 0, None, 1_000, 5);
        g.next_id(100).unwrap();
        assert_eq!(
            g.next_id(94),
            Err(Blocked::Refuse { behind: 6, last_tick: 100, reason: RefuseReason::ClockStepBack })
        );
        assert_eq!(layout().unpack(g.next_id(100).unwrap()).sequence, 1);
    }

    #[test]
    fn floor_is_never_minted_at() {
        let mut g = Generator::new(layout(), 0, Some(500), 1_000, 5);
        assert_eq!(g.last_minted_tick(), None);
        assert_eq!(
            g.next_id(400),
            Err(Blocked::Refuse { behind: 100, last_tick: 500, reason: RefuseReason::BelowFloor })
        );
        assert_eq!(g.next_id(497), Err(Blocked::WaitUntil { tick: 501, reason: WaitReason::BelowFloor { behind: 3 } }));
        assert_eq!(g.next_id(500), Err(Blocked::WaitUntil { tick: 501, reason: WaitReason::BelowFloor { behind: 0 } }));
        assert_eq!(layout().unpack(g.next_id(501).unwrap()).tick, 501);
        assert_eq!(g.last_minted_tick(), Some(501));
    }

    #[test]
    fn ticks_past_the_reservation_are_fenced() {
        let mut g = Generator::new(layout(), 0, None, 50, 5);
        g.next_id(50).unwrap();
        assert_eq!(g.next_id(51), Err(Blocked::Fenced { tick: 51, reserved: 50 }));
        g.extend_reservation(40); // lower: ignored
        assert_eq!(g.reserved(), 50);
        g.extend_reservation(60);
        g.next_id(51).unwrap();
    }

    #[test]
    fn fill_spans_ticks_and_keeps_what_it_minted() {
        let mut g = Generator::new(small_layout(), 2, None, 1_000, 5);
        g.next_id(5).unwrap();
        let mut out = Vec::new();
        assert_eq!(g.fill(5, &mut out, 6), Err(Blocked::WaitUntil { tick: 6, reason: WaitReason::SequenceExhausted }));
        assert_eq!(out.len(), 3);
        g.fill(6, &mut out, 6).unwrap();
        assert_eq!(out.len(), 6);
        assert!(out.windows(2).all(|w| w[0] < w[1]));
        let parts: Vec<_> = out.iter().map(|&id| small_layout().unpack(id)).collect();
        assert_eq!(parts[0], Parts { tick: 5, worker: 2, sequence: 1 });
        assert_eq!(parts[5], Parts { tick: 6, worker: 2, sequence: 2 });
    }

    /// One step of a random run: the clock moves, then the generator is asked for IDs.
    #[derive(Debug, Clone)]
    enum Step {
        Clock(i64),
        Next,
        Fill(usize),
        Extend(u64),
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        prop::collection::vec(
            prop_oneof![
                3 => (-20i64..20).prop_map(Step::Clock),
                1 => (-5_000i64..-20).prop_map(Step::Clock),
                4 => Just(Step::Next),
                2 => (1usize..12).prop_map(Step::Fill),
                1 => (0u64..400).prop_map(Step::Extend),
            ],
            1..300,
        )
    }

    proptest! {
        /// No sequence of clock readings, steps back included, yields a duplicate or a
        /// decrease, or a tick at or below the floor or past the reservation.
        #[test]
        fn ids_strictly_increase_whatever_the_clock_does(
            steps in steps(),
            start in 0u64..1_000,
            floor in prop::option::of(0u64..1_200),
            max_back in 0u64..10,
        ) {
            let layout = small_layout();
            let mut reserved = start + 100;
            let mut g = Generator::new(layout.clone(), 9, floor, reserved, max_back);
            let mut now = start as i64;
            let mut issued: Vec<u64> = Vec::new();
            for step in steps {
                let before = issued.len();
                let result = match step {
                    Step::Clock(d) => { now = (now + d).max(0); Ok(()) }
                    Step::Next => g.next_id(now as u64).map(|id| issued.push(id)),
                    Step::Fill(n) => g.fill(now as u64, &mut issued, before + n),
                    Step::Extend(by) => { reserved = reserved.max(now as u64 + by); g.extend_reservation(reserved); Ok(()) }
                };
                if let Err(blocked) = result {
                    match blocked {
                        Blocked::WaitUntil { tick, .. } => prop_assert!(tick > now as u64 || tick == g.last_tick()),
                        Blocked::Refuse { behind, .. } => prop_assert!(behind > max_back),
                        Blocked::Fenced { tick, reserved } => prop_assert!(tick > reserved),
                    }
                }
                for &id in &issued[before..] {
                    let parts = layout.unpack(id);
                    prop_assert!(parts.tick <= now as u64, "minted a tick ahead of the clock");
                    prop_assert!(parts.tick <= reserved, "minted past the reservation");
                    prop_assert!(floor.is_none_or(|f| parts.tick > f), "minted at or below the floor");
                    prop_assert_eq!(parts.worker, 9);
                }
            }
            prop_assert!(issued.windows(2).all(|w| w[0] < w[1]), "IDs not strictly increasing");
        }
    }
}
