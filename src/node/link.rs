//! The rules that join the keeper and the minter, written once, with no I/O: what the
//! minter tells the keeper (how far minting got, and that it needs its reservation extended
//! now) and when, and in what order the keeper's events and holdings go out.
//!
//! The tokio tasks ([`super::keeper_task`], [`super::minter_task`]) carry these over watch
//! channels and a notify; the simulator carries them over its own event queue, with the
//! latencies and coalescing a real runtime may add. Both run these functions.

use crate::grant::{Holding, Minted, Progress};
use crate::keeper::{Event, Keeper, Now};
use crate::minter::{MinterCore, Next, Reading, Responder};
use crate::store::Request;

/// How far the minting time moves before the keeper hears of it again.
pub const PROGRESS_EVERY_MS: i64 = 100;

/// The keeper, as the minter's reports reach it.
pub struct KeeperSide {
    keeper: Keeper,
    /// The stop began: what was minted is final, reports from the minter are no longer heard.
    finishing: bool,
}

impl KeeperSide {
    pub fn new(keeper: Keeper) -> KeeperSide {
        KeeperSide { keeper, finishing: false }
    }

    pub fn keeper(&self) -> &Keeper {
        &self.keeper
    }

    pub fn keeper_mut(&mut self) -> &mut Keeper {
        &mut self.keeper
    }

    /// Whether the stop began.
    pub fn finishing(&self) -> bool {
        self.finishing
    }

    /// The minter's report of how far it got. Unheard once the stop began: the final word on
    /// what was minted is the stop's.
    pub fn progress(&mut self, progress: &Progress) {
        if !self.finishing
            && let Some(mint_ms) = progress.mint_ms
        {
            self.keeper.handle_progress(mint_ms, progress.slots.clone());
        }
    }

    /// The minter found itself past its reservation: extend it now (not during the stop).
    pub fn extend_now(&mut self) {
        if !self.finishing {
            self.keeper.extend_now();
        }
    }

    /// The stop: the minter ended, having minted `minted`. Heard once.
    pub fn finish(&mut self, minted: Minted) {
        if !std::mem::replace(&mut self.finishing, true) {
            self.keeper.finish(minted);
        }
    }

    /// The request to send now, when none is in flight.
    pub fn poll_request(&mut self, now: Now, in_flight: bool) -> Option<(u64, Request)> {
        if in_flight { None } else { self.keeper.poll_request(now) }
    }

    /// Hands every event to `sink`, then returns the holding to publish, if it changed:
    /// events first, so that the history stamps a claim before the minter can mint under it.
    pub fn drain(&mut self, mut sink: impl FnMut(Event)) -> Option<Holding> {
        while let Some(event) = self.keeper.poll_event() {
            sink(event);
        }
        self.keeper.poll_holding()
    }
}

/// What a minter pass tells the keeper.
#[derive(Debug, Default)]
pub struct ToKeeper {
    /// How far minting got, when it is time the keeper heard.
    pub progress: Option<Progress>,
    /// The minter is past its reservation: extend it now.
    pub extend_now: bool,
}

/// The minter's side: when its progress is reported.
#[derive(Debug, Default)]
pub struct MinterSide {
    /// The minting time last reported to the keeper.
    progress_sent: Option<i64>,
    /// The generation of the last holding passed to the core.
    generation_seen: Option<u64>,
}

impl MinterSide {
    /// Before a pass under `holding`: when its claims changed, how far each slot got under
    /// the old ones, now, before the generator takes the new windows, so that the history
    /// marks where one claim of a slot ends and the next one of this process begins (a
    /// resumed claim) at the last ID minted, not [`PROGRESS_EVERY_MS`] off.
    pub fn before_pass<R: Responder>(&mut self, core: &MinterCore<R>, holding: &Holding) -> Option<Progress> {
        let generation = holding.grant().map(|g| g.generation);
        if generation == self.generation_seen {
            return None;
        }
        self.generation_seen = generation;
        self.report(core, true)
    }

    /// One pass of `core` at `now` under `holding`, with what it tells the keeper.
    pub fn pass<R: Responder>(
        &mut self,
        core: &mut MinterCore<R>,
        now: Reading,
        holding: &Holding,
    ) -> (Next, ToKeeper) {
        let next = core.pass(now, holding);
        let extend_now = core.take_extension_wish();
        (next, ToKeeper { progress: self.report(core, false), extend_now })
    }

    /// How far minting got: every [`PROGRESS_EVERY_MS`] of minting time, or now when `now`.
    fn report<R: Responder>(&mut self, core: &MinterCore<R>, now: bool) -> Option<Progress> {
        let mint_ms = core.mint_ms()?;
        if !now && self.progress_sent.is_some_and(|sent| mint_ms - sent < PROGRESS_EVERY_MS) {
            return None;
        }
        let Minted::UpTo(slots) = core.minted() else { return None };
        self.progress_sent = Some(mint_ms);
        Some(Progress { mint_ms: Some(mint_ms), slots })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::grant::{Grant, SlotGrant};
    use crate::layout::Layout;
    use crate::minter::{Ask, Ids, MintError, MinterConfig, NoTally, Pending};

    struct Sink;
    impl Responder for Sink {
        fn is_closed(&self) -> bool {
            false
        }
        fn send(self, _: Result<Ids, MintError>) -> bool {
            true
        }
    }

    fn core() -> MinterCore<Sink> {
        let config = MinterConfig {
            layout: Layout::default_snowmint(),
            max_clock_back: Duration::from_millis(5),
            max_clock_drift: Duration::ZERO,
            max_wait: Duration::from_secs(1),
            fair_quantum: crate::minter::FAIR_QUANTUM,
        };
        MinterCore::new(config, Box::new(NoTally)).unwrap()
    }

    fn held(generation: u64, wall_ms: i64) -> Holding {
        Holding::Held(Grant {
            slots: vec![SlotGrant {
                slot: 3,
                claim: generation,
                floor_ms: None,
                reserved_ms: wall_ms + 60_000,
                resumes: false,
                fenced: None,
            }],
            generation,
            deadline: None,
            session: None,
            on_demand: false,
        })
    }

    /// Mints one ID at `wall_ms` under `holding`; what the pass tells the keeper.
    fn mint_at(side: &mut MinterSide, core: &mut MinterCore<Sink>, holding: &Holding, wall_ms: i64) -> ToKeeper {
        let boot = Duration::from_millis(wall_ms as u64);
        core.push(Pending::new(Ask::One, crate::minter::ConnectionKey(1), boot, boot + Duration::from_secs(1), Sink));
        let now = Reading { wall_us: wall_ms * 1000, boot, awake: boot };
        side.pass(core, now, holding).1
    }

    #[test]
    fn progress_goes_out_every_hundred_ms_of_minting_and_at_once_when_the_claims_change() {
        let wall = Layout::default_snowmint().epoch_ms + 1_000_000;
        let (mut side, mut core) = (MinterSide::default(), core());
        let first = held(1, wall);
        assert!(side.before_pass(&core, &first).is_none(), "nothing minted yet: nothing to report");
        assert!(mint_at(&mut side, &mut core, &first, wall).progress.is_some(), "the first ID is reported");
        assert!(mint_at(&mut side, &mut core, &first, wall + 50).progress.is_none(), "50 ms on: not yet");
        let report = mint_at(&mut side, &mut core, &first, wall + 101).progress.expect("100 ms on: reported");
        assert_eq!(report.mint_ms, Some(wall + 101));
        mint_at(&mut side, &mut core, &first, wall + 120);
        assert!(side.before_pass(&core, &first).is_none(), "the same claims: no report out of turn");
        let before = side.before_pass(&core, &held(2, wall)).expect("new claims: reported at once");
        assert_eq!(before.mint_ms, Some(wall + 120), "at the last ID minted under the old claims");
    }
}
