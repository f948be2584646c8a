//! The generator: the pure state machine that turns ticks into IDs.
//!
//! It holds the layout, the last ID it minted (the cursor) and, for each slot it
//! may mint for, a window: the floor a previous holder left and the reservation that covers
//! minting. Every ID it mints is greater than the one before, so one generator never repeats
//! itself; the windows keep it clear of every other holder's IDs. With several slots, each
//! tick is filled across the slots in ascending slot order before the next tick, so IDs
//! stay strictly increasing.
//!
//! It does no I/O, never sleeps and never reads a clock: the caller passes the current tick
//! and gets back IDs or the reason it cannot mint now ([`Blocked`]).

use crate::layout::{FieldOrder, Layout, LayoutError, Parts, Slot};

/// Why the generator cannot mint at the tick it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// Nothing can be minted before tick `tick`; ask again once the clock reaches it.
    WaitUntil { tick: u64, reason: WaitReason },
    /// The clock is further behind where minting must go on than the generator may wait or
    /// borrow: refuse at once. Minting resumes by itself once the clock reaches `resume`.
    Refuse { behind: u64, resume: u64, reason: RefuseReason },
    /// `tick` is past the reservation `reserved`: minting it could repeat IDs after a
    /// restart or a take-over, so it waits for the reservation to be extended.
    Fenced { tick: u64, reserved: u64 },
    /// No slot is held.
    NoSlot,
}

/// Why a wait is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// Every sequence number of the current tick is used, in every slot.
    SequenceExhausted,
    /// The clock stepped back by `behind` ticks, within the threshold.
    ClockBehind { behind: u64 },
    /// The clock is `behind` ticks short of passing a previous holder's reservation.
    BelowFloor { behind: u64 },
}

/// Why a refusal happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefuseReason {
    /// The wall clock stepped back past the bound after this generator minted at `last_tick`.
    ClockStepBack { last_tick: u64 },
    /// The clock has not yet passed `floor`, the reservation a previous run or holder of the
    /// slot saved, and the gap is beyond the bound.
    BelowFloor { floor: u64 },
}

/// The window one slot may mint in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub slot: Slot,
    /// Ticks up to and including this one may have been minted by a previous run or holder.
    pub floor: Option<u64>,
    /// Ticks up to and including this one are covered by a durable reservation.
    pub reserved: u64,
}

/// A slot's window, with the last tick minted in it.
#[derive(Debug, Clone, Copy)]
struct Held {
    window: Window,
    last_tick: Option<u64>,
}

/// The generator state of one instance.
#[derive(Debug, Clone)]
pub struct Generator {
    layout: Layout,
    /// The last ID minted, as its parts: every new ID is greater.
    last: Option<Parts>,
    /// In ascending slot order.
    slots: Vec<Held>,
    /// The last tick minted on each slot no longer held, in ascending slot order: what
    /// this process minted on a slot stays known while the slot is away, so a claim that
    /// takes it back (and resumes) reports it at the stop and its reservation is never
    /// shrunk below it.
    away: Vec<(Slot, u64)>,
    /// Strict policy (`max_ahead` 0): steps back of at most this many ticks are waited out;
    /// larger ones are refused.
    max_back: u64,
    /// Hybrid policy: while the clock is behind the minting time (a step back, a floor ahead
    /// of it), minting goes on ahead of the clock by at most this many ticks, taking the next
    /// tick as each sequence runs out; beyond it, refused. 0: the strict policy.
    max_ahead: u64,
}

impl Generator {
    /// A generator for `layout` holding no slot yet. Only layouts whose IDs order as
    /// (time, worker, sequence) and keep the sign bit 0 can be minted: the generator relies
    /// on consecutive sequence numbers being consecutive IDs.
    pub fn new(layout: Layout, max_back: u64, max_ahead: u64) -> Result<Generator, LayoutError> {
        if layout.order != FieldOrder::WorkerSequence {
            return Err(LayoutError::NotMintable {
                name: layout.name.clone(),
                why:
                    "snowmint mints only time | worker | sequence layouts (this one puts the sequence above the worker)"
                        .into(),
            });
        }
        if layout.total_bits() > 63 {
            return Err(LayoutError::NotMintable {
                name: layout.name.clone(),
                why: format!("its fields take {} bits; minted IDs keep the sign bit 0", layout.total_bits()),
            });
        }
        Ok(Generator { layout, last: None, slots: Vec::new(), away: Vec::new(), max_back, max_ahead })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Replaces the slots and their windows (a claim taken, lost, or re-claimed). The cursor
    /// stays: nothing below the last ID is ever minted again.
    pub fn set_windows(&mut self, windows: &[Window]) {
        for slot in &self.slots {
            if let Some(last) = slot.last_tick
                && !windows.iter().any(|w| w.slot == slot.window.slot)
            {
                self.away.retain(|&(away, _)| away != slot.window.slot);
                self.away.push((slot.window.slot, last));
            }
        }
        let mut slots: Vec<Held> = windows
            .iter()
            .map(|w| {
                assert!(u64::from(w.slot) <= self.layout.max_worker(), "worker {} does not fit the layout", w.slot);
                let held = self.slots.iter().find(|s| s.window.slot == w.slot).and_then(|s| s.last_tick);
                let away = self.away.iter().find(|(slot, _)| *slot == w.slot).map(|&(_, last)| last);
                let last_tick = held.or(away);
                Held { window: Window { reserved: w.reserved.min(self.layout.max_tick()), ..*w }, last_tick }
            })
            .collect();
        slots.sort_by_key(|s| s.window.slot);
        self.away.retain(|(slot, _)| !slots.iter().any(|s| s.window.slot == *slot));
        self.away.sort_unstable();
        self.slots = slots;
    }

    /// Raises a slot's reservation. A lower value is ignored: a reservation once written
    /// stays in force for its claim.
    pub fn extend_reservation(&mut self, slot: Slot, reserved: u64) {
        let max = self.layout.max_tick();
        if let Some(slot) = self.slots.iter_mut().find(|s| s.window.slot == slot) {
            slot.window.reserved = slot.window.reserved.max(reserved.min(max));
        }
    }

    /// The last ID minted, as its parts.
    pub fn last(&self) -> Option<Parts> {
        self.last
    }

    /// The last tick minted on `worker`, if any.
    pub fn last_tick_of(&self, slot: Slot) -> Option<u64> {
        self.slots.iter().find(|s| s.window.slot == slot).and_then(|s| s.last_tick)
    }

    /// Per slot minted on by this generator, held now or not, the last tick minted on it.
    pub fn last_ticks(&self) -> impl Iterator<Item = (Slot, u64)> + '_ {
        self.slots.iter().filter_map(|s| Some((s.window.slot, s.last_tick?))).chain(self.away.iter().copied())
    }

    /// The lowest reservation among the slots held (what the next fence would be).
    pub fn reserved(&self) -> Option<u64> {
        self.slots.iter().map(|s| s.window.reserved).min()
    }

    fn usable(window: &Window, tick: u64) -> bool {
        window.floor.is_none_or(|f| tick > f) && tick <= window.reserved
    }

    /// The next position to mint at tick `now`: (tick, slot index, sequence), or why there is
    /// none. The tick is `now`, or (hybrid policy, while the clock is behind the minting time)
    /// up to `max_ahead` ticks past it.
    fn next_position(&self, now: u64) -> Result<(u64, usize, u64), Blocked> {
        if self.slots.is_empty() {
            return Err(Blocked::NoSlot);
        }
        // The rest of the current tick: the same slot's next sequence, then higher slots;
        // while the clock is behind, within the bound.
        if let Some(last) = self.last
            && (now == last.tick || (now < last.tick && last.tick - now <= self.max_ahead))
        {
            if last.sequence < self.layout.max_sequence()
                && let Some(i) = self.slots.iter().position(|s| u64::from(s.window.slot) == last.worker)
                && Self::usable(&self.slots[i].window, last.tick)
            {
                return Ok((last.tick, i, last.sequence + 1));
            }
            if let Some(i) = self
                .slots
                .iter()
                .position(|s| u64::from(s.window.slot) > last.worker && Self::usable(&s.window, last.tick))
            {
                return Ok((last.tick, i, 0));
            }
        }
        // A later tick: the first one at which some slot is above its floor.
        let start = self.last.map_or(0, |l| l.tick + 1);
        let first_free = self
            .slots
            .iter()
            .map(|s| s.window.floor.map_or(start, |f| f.saturating_add(1).max(start)))
            .min()
            .expect("slots is not empty");
        // Waiting for a previous holder's reservation to pass, not for this generator's own
        // last tick: a clock short of it has not stepped back.
        let below_floor = self.last.is_none_or(|l| first_free > l.tick + 1);
        let clock_behind = self.last.is_some_and(|l| now < l.tick);
        let tick = if now >= first_free {
            now
        } else if (clock_behind || below_floor) && first_free - now <= self.max_ahead {
            // The minting time goes on ahead of a clock that is behind it: borrowed time,
            // covered by the reservation like any other (checked below).
            first_free
        } else {
            return Err(self.blocked(now, first_free, clock_behind, below_floor));
        };
        // Invariant 1: a tick is minted only while a reservation covers it.
        match self.slots.iter().position(|s| Self::usable(&s.window, tick)) {
            Some(i) => Ok((tick, i, 0)),
            None => Err(Blocked::Fenced { tick, reserved: self.reserved().expect("slots is not empty") }),
        }
    }

    /// Why nothing can be minted at `now` when the next free tick is `first_free`, ahead of it.
    fn blocked(&self, now: u64, first_free: u64, clock_behind: bool, below_floor: bool) -> Blocked {
        if clock_behind && !below_floor {
            // Invariant 5: a step back never resets the sequence; the generator waits for the
            // clock to come back, borrows within the bound, or refuses.
            let last = self.last.expect("the clock is behind a tick minted").tick;
            let behind = last - now;
            if self.max_ahead == 0 && behind <= self.max_back {
                return Blocked::WaitUntil { tick: last, reason: WaitReason::ClockBehind { behind } };
            }
            let resume = first_free.saturating_sub(self.max_ahead).max(now + 1);
            return Blocked::Refuse { behind, resume, reason: RefuseReason::ClockStepBack { last_tick: last } };
        }
        if !below_floor {
            return Blocked::WaitUntil { tick: first_free, reason: WaitReason::SequenceExhausted };
        }
        let floor = first_free - 1;
        let behind = floor - now;
        if self.max_ahead == 0 && behind <= self.max_back {
            return Blocked::WaitUntil { tick: first_free, reason: WaitReason::BelowFloor { behind } };
        }
        let resume = first_free.saturating_sub(self.max_ahead).max(now + 1);
        Blocked::Refuse { behind, resume, reason: RefuseReason::BelowFloor { floor } }
    }

    /// Why the generator could not mint at tick `now`, without changing anything; `None`
    /// when it could.
    pub fn probe(&self, now: u64) -> Option<Blocked> {
        self.next_position(now).err()
    }

    /// Moves the cursor to the next position at or before `now`, or says why it cannot.
    fn advance(&mut self, now: u64) -> Result<(usize, Parts), Blocked> {
        if crate::defects::active(crate::defects::Defect::SequenceResetBeforeClockCheck)
            && let Some(last) = &mut self.last
            && now != last.tick
        {
            // The old Snowflake bug: the sequence restarts whenever the tick read changes,
            // also when the clock went back, and minting repeats the last tick's IDs.
            last.sequence = 0;
        }
        // Invariant 5: the sequence restarts only here, when the tick advances, after the
        // clock checks in `next_position`.
        let (tick, i, sequence) = self.next_position(now)?;
        let parts = Parts { tick, worker: u64::from(self.slots[i].window.slot), sequence };
        self.slots[i].last_tick = Some(tick);
        self.last = Some(parts);
        Ok((i, parts))
    }

    /// Mints one ID at tick `now`.
    pub fn next_id(&mut self, now: u64) -> Result<u64, Blocked> {
        let (_, parts) = self.advance(now)?;
        Ok(self.layout.pack(parts))
    }

    /// Appends IDs minted no later than tick `now` to `out` until it holds `want`, in one
    /// pass over each slot's free sequence numbers. On `Err`, `out` keeps what was minted so
    /// far: the caller asks again for the rest (after waiting for the next tick when every
    /// sequence ran out).
    pub fn fill(&mut self, now: u64, out: &mut Vec<u64>, want: usize) -> Result<(), Blocked> {
        let max_sequence = self.layout.max_sequence();
        while out.len() < want {
            let (_, first) = self.advance(now)?;
            let take = (max_sequence - first.sequence + 1).min((want - out.len()) as u64);
            // With the sequence in the lowest bits (checked in `new`), consecutive sequence
            // numbers are consecutive IDs.
            let base = self.layout.pack(first);
            out.extend(base..base + take);
            self.last = Some(Parts { sequence: first.sequence + take - 1, ..first });
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

    fn generator(layout: Layout, slot: Slot, floor: Option<u64>, reserved: u64, max_back: u64) -> Generator {
        let mut g = Generator::new(layout, max_back, 0).unwrap();
        g.set_windows(&[Window { slot, floor, reserved }]);
        g
    }

    #[test]
    fn mints_in_order_and_restarts_the_sequence_on_a_new_tick() {
        let mut g = generator(layout(), 3, None, 1_000, 5);
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
        let mut g = generator(small_layout(), 1, None, 1_000, 5);
        for _ in 0..4 {
            g.next_id(7).unwrap();
        }
        assert_eq!(g.next_id(7), Err(Blocked::WaitUntil { tick: 8, reason: WaitReason::SequenceExhausted }));
        assert_eq!(small_layout().unpack(g.next_id(8).unwrap()).sequence, 0);
    }

    #[test]
    fn small_step_back_waits_until_the_last_tick() {
        let mut g = generator(layout(), 0, None, 1_000, 5);
        g.next_id(100).unwrap();
        assert_eq!(g.next_id(95), Err(Blocked::WaitUntil { tick: 100, reason: WaitReason::ClockBehind { behind: 5 } }));
        // Back at the last tick, the sequence goes on where it was.
        assert_eq!(layout().unpack(g.next_id(100).unwrap()).sequence, 1);
    }

    #[test]
    fn large_step_back_is_refused_and_keeps_the_sequence() {
        let mut g = generator(layout(), 0, None, 1_000, 5);
        g.next_id(100).unwrap();
        assert_eq!(
            g.next_id(94),
            Err(Blocked::Refuse { behind: 6, resume: 101, reason: RefuseReason::ClockStepBack { last_tick: 100 } })
        );
        assert_eq!(layout().unpack(g.next_id(100).unwrap()).sequence, 1);
    }

    #[test]
    fn floor_is_never_minted_at() {
        let mut g = generator(layout(), 0, Some(500), 1_000, 5);
        assert_eq!(g.last(), None);
        assert_eq!(
            g.next_id(400),
            Err(Blocked::Refuse { behind: 100, resume: 501, reason: RefuseReason::BelowFloor { floor: 500 } })
        );
        assert_eq!(g.next_id(497), Err(Blocked::WaitUntil { tick: 501, reason: WaitReason::BelowFloor { behind: 3 } }));
        assert_eq!(g.next_id(500), Err(Blocked::WaitUntil { tick: 501, reason: WaitReason::BelowFloor { behind: 0 } }));
        assert_eq!(layout().unpack(g.next_id(501).unwrap()).tick, 501);
        assert_eq!(g.last_tick_of(0), Some(501));
    }

    #[test]
    fn ticks_past_the_reservation_are_fenced() {
        let mut g = generator(layout(), 0, None, 50, 5);
        g.next_id(50).unwrap();
        assert_eq!(g.next_id(51), Err(Blocked::Fenced { tick: 51, reserved: 50 }));
        g.extend_reservation(0, 40); // lower: ignored
        assert_eq!(g.reserved(), Some(50));
        g.extend_reservation(0, 60);
        g.next_id(51).unwrap();
    }

    #[test]
    fn fill_spans_ticks_and_keeps_what_it_minted() {
        let mut g = generator(small_layout(), 2, None, 1_000, 5);
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

    /// The hybrid policy: a clock that steps back within the bound is no refusal; minting
    /// goes on at the last tick, then past it as each sequence runs out, never going back.
    #[test]
    fn a_step_back_within_the_bound_borrows_time_instead_of_refusing() {
        let mut g = Generator::new(small_layout(), 0, 10).unwrap();
        g.set_windows(&[Window { slot: 1, floor: None, reserved: 1_000 }]);
        let first = small_layout().unpack(g.next_id(100).unwrap());
        // The clock steps back 8 ticks: minting goes on at 100, then 101, 102...
        let mut out = Vec::new();
        g.fill(92, &mut out, 10).unwrap();
        let ticks: Vec<u64> = out.iter().map(|&id| small_layout().unpack(id).tick).collect();
        assert_eq!(ticks, [100, 100, 100, 101, 101, 101, 101, 102, 102, 102]);
        assert!(out[0] > small_layout().pack(first));
        // Tick 102 is the bound (92 + 10): its last ID, then a refusal that says when the clock
        // is back within the bound.
        let mut more = Vec::new();
        let blocked = g.fill(92, &mut more, 1_000).unwrap_err();
        assert_eq!(more.len(), 1, "went past the bound");
        assert_eq!(
            blocked,
            Blocked::Refuse { behind: 10, resume: 93, reason: RefuseReason::ClockStepBack { last_tick: 102 } }
        );
    }

    /// A floor just ahead of the clock (a restart after kill -9 with its reservation saved a
    /// window ahead) is minted above at once under the hybrid policy.
    #[test]
    fn a_floor_within_the_bound_is_minted_above_at_once() {
        let mut g = Generator::new(layout(), 0, 3_000).unwrap();
        g.set_windows(&[Window { slot: 4, floor: Some(2_900), reserved: 6_000 }]);
        assert_eq!(layout().unpack(g.next_id(1_000).unwrap()).tick, 2_901);
        let mut g = Generator::new(layout(), 0, 3_000).unwrap();
        g.set_windows(&[Window { slot: 4, floor: Some(5_000), reserved: 9_000 }]);
        assert_eq!(
            g.next_id(1_000),
            Err(Blocked::Refuse { behind: 4_000, resume: 2_001, reason: RefuseReason::BelowFloor { floor: 5_000 } })
        );
        // Borrowing never passes the reservation.
        let mut g = Generator::new(layout(), 0, 3_000).unwrap();
        g.set_windows(&[Window { slot: 4, floor: Some(2_900), reserved: 2_900 }]);
        assert_eq!(g.next_id(1_000), Err(Blocked::Fenced { tick: 2_901, reserved: 2_900 }));
    }

    /// With the clock current, a used-up tick is waited out, not borrowed past.
    #[test]
    fn an_exhausted_tick_waits_even_under_the_hybrid_policy() {
        let mut g = Generator::new(small_layout(), 0, 10).unwrap();
        g.set_windows(&[Window { slot: 1, floor: None, reserved: 1_000 }]);
        let mut out = Vec::new();
        let blocked = g.fill(50, &mut out, 5).unwrap_err();
        assert_eq!(out.len(), 4);
        assert_eq!(blocked, Blocked::WaitUntil { tick: 51, reason: WaitReason::SequenceExhausted });
    }

    #[test]
    fn several_slots_fill_each_tick_in_worker_order() {
        let mut g = Generator::new(small_layout(), 5, 0).unwrap();
        g.set_windows(&[
            Window { slot: 4, floor: None, reserved: 1_000 },
            Window { slot: 1, floor: None, reserved: 1_000 },
        ]);
        let mut out = Vec::new();
        assert_eq!(
            g.fill(10, &mut out, 9),
            Err(Blocked::WaitUntil { tick: 11, reason: WaitReason::SequenceExhausted })
        );
        let parts: Vec<_> = out.iter().map(|&id| small_layout().unpack(id)).collect();
        assert_eq!(parts.len(), 8);
        assert!(parts[..4].iter().all(|p| p.worker == 1 && p.tick == 10));
        assert!(parts[4..].iter().all(|p| p.worker == 4 && p.tick == 10));
        assert!(out.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn layouts_that_cannot_be_minted_say_why() {
        for name in ["sonyflake", "discord", "instagram"] {
            let err = Generator::new(Layout::named(name).unwrap(), 5, 0).unwrap_err();
            assert!(matches!(err, LayoutError::NotMintable { .. }), "{name}: {err}");
            assert!(err.to_string().contains(name), "{err}");
        }
        Generator::new(Layout::named("twitter").unwrap(), 5, 0).unwrap();
    }

    /// One step of a random run: the clock moves, then the generator is asked for IDs.
    #[derive(Debug, Clone)]
    enum Step {
        Clock(i64),
        Next,
        Fill(usize),
        Extend(usize, u64),
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        prop::collection::vec(
            prop_oneof![
                3 => (-20i64..20).prop_map(Step::Clock),
                1 => (-5_000i64..-20).prop_map(Step::Clock),
                4 => Just(Step::Next),
                2 => (1usize..12).prop_map(Step::Fill),
                1 => (0usize..3, 0u64..400).prop_map(|(slot, by)| Step::Extend(slot, by)),
            ],
            1..300,
        )
    }

    /// Every named layout and a spread of snowmint layouts: those the generator accepts.
    fn mintable_layouts() -> Vec<Layout> {
        let mut layouts: Vec<Layout> =
            crate::layout::NAMED_LAYOUTS.iter().map(|name| Layout::named(name).unwrap()).collect();
        layouts.extend([Layout::snowmint(0, 10, 2), Layout::snowmint(0, 0, 1), Layout::snowmint(0, 20, 3)]);
        layouts.into_iter().filter(|l| Generator::new(l.clone(), 0, 0).is_ok()).collect()
    }

    proptest! {
        /// No sequence of clock readings, steps back included, yields a duplicate or a
        /// decrease, or a tick at or below a floor or past a reservation, with one slot or
        /// several, on every layout the generator accepts.
        #[test]
        fn ids_strictly_increase_whatever_the_clock_does(
            steps in steps(),
            layout_index in 0usize..8,
            start in 0u64..1_000,
            floors in prop::collection::vec(prop::option::of(0u64..1_200), 1..=3),
            max_back in 0u64..10,
            max_ahead in prop_oneof![Just(0u64), 1u64..3_000],
        ) {
            let layouts = mintable_layouts();
            let layout = layouts[layout_index % layouts.len()].clone();
            let mut g = Generator::new(layout.clone(), max_back, max_ahead).unwrap();
            let mut windows: Vec<Window> = floors
                .iter()
                .enumerate()
                .map(|(i, &floor)| Window { slot: ((i as u64 * 3) & layout.max_worker()) as Slot, floor, reserved: start + 100 })
                .collect();
            windows.dedup_by_key(|w| w.slot);
            g.set_windows(&windows);
            let mut now = start as i64;
            let mut issued: Vec<u64> = Vec::new();
            for step in steps {
                let before = issued.len();
                let result = match step {
                    Step::Clock(d) => { now = (now + d).max(0); Ok(()) }
                    Step::Next => g.next_id(now as u64).map(|id| issued.push(id)),
                    Step::Fill(n) => g.fill(now as u64, &mut issued, before + n),
                    Step::Extend(slot, by) => {
                        if let Some(w) = windows.get_mut(slot) {
                            w.reserved = w.reserved.max(now as u64 + by);
                            g.extend_reservation(w.slot, w.reserved);
                        }
                        Ok(())
                    }
                };
                if let Err(blocked) = result {
                    match blocked {
                        Blocked::WaitUntil { tick, .. } => prop_assert!(tick > now as u64 || g.last().is_some_and(|l| l.tick == tick)),
                        Blocked::Refuse { behind, resume, .. } => {
                            prop_assert!(resume > now as u64);
                            prop_assert!(max_ahead > 0 || behind > max_back);
                        }
                        Blocked::Fenced { tick, reserved } => prop_assert!(tick > reserved),
                        Blocked::NoSlot => prop_assert!(false, "slots are held"),
                    }
                }
                for &id in &issued[before..] {
                    let parts = layout.unpack(id);
                    let window = windows.iter().find(|w| u64::from(w.slot) == parts.worker);
                    prop_assert!(window.is_some(), "minted for a slot not held");
                    let window = window.unwrap();
                    prop_assert!(parts.tick <= now as u64 + max_ahead, "minted a tick further ahead of the clock than the bound");
                    prop_assert!(parts.tick <= window.reserved, "minted past the reservation");
                    prop_assert!(window.floor.is_none_or(|f| parts.tick > f), "minted at or below the floor");
                }
            }
            prop_assert!(issued.windows(2).all(|w| w[0] < w[1]), "IDs not strictly increasing");
        }
    }
}
