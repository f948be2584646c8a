//! The contended hand-over: a family of scripted schedules in which one slot changes hands
//! back and forth between the two machines of a fleet with no spare slot, as it does when
//! holders stall one after the other. The timings, the window, the TTL, the clocks and how
//! each process is stopped are drawn from the seed; the order of the steps is the script's:
//!
//! 1. A holds its slot (claim 1) and mints; B holds the other one.
//! 2. A stops (SIGSTOP, or cut off from etcd) past its lease. As its lease expires, B is
//!    killed (`kill -9`): its restart finds only A's slot free (its own is bound to its dead
//!    lease for a while yet) and takes it over A's reservation.
//! 3. B stops in turn, its slot freed by hand (its worker key deleted) or by its lease
//!    expiring. A runs again, finds its lease gone, and claims its lost slot back (claim 2)
//!    over B's reservation, which reaches past A's clock: A mints nothing yet.
//! 4. Right after claim 2's first write, A stops again past its lease, and runs again: its
//!    third claim of the slot finds its own last write still stored and resumes claim 2,
//!    within a window of B's last write, A's clock still behind B's reserved range.
//! 5. B runs again, finds its lease gone, and takes the other slot.
//!
//! Each step is a realistic fault or operation at a moment chosen by watching the world, as
//! an unlucky schedule would have it. A resumed claim must carry claim 2's floor (B's
//! reservation): with the floor of claim 1 it mints at or below B's reservation, which the
//! checker holds against invariant 2.

use std::time::Duration;

use super::{Ev, Fault, MS, Mode, Params, SECOND, World};
use crate::layout::{Layout, Slot};
use crate::sim::Us;
use crate::sim::rng::Rng;
use crate::store::SessionId;

/// One seed in this many is a hand-over.
const ONE_IN: u64 = 16;

/// How often the script looks at the world.
const LOOK_EVERY: Us = 10 * MS;

/// Whether the schedule of `seed` is a hand-over: drawn apart from the schedule's own
/// randomness, so every other seed's schedule stays as it was.
pub(super) fn drawn(seed: u64) -> bool {
    Rng::new(seed ^ 0x68a4_d0fe_5c0b_e11d).below(ONE_IN) == 0
}

/// Shapes `params` (drawn as for any schedule) for a hand-over: two machines of one slot
/// each and no spare slot, a short TTL against a long window (a reservation reaches past a
/// whole hand-over and back), a strict or tight drift bound (so a claim over a reservation
/// ahead of its clock waits rather than mints), and no fault but the script's.
pub(super) fn shape(params: &mut Params, rng: &mut Rng) {
    params.hand_over = true;
    params.mode = Mode::Etcd;
    params.machines = 2;
    params.slots = 1;
    params.layout = Layout::snowmint(crate::layout::DEFAULT_EPOCH_MS, 1, params.layout.sequence_bits);
    params.ttl = Duration::from_secs(rng.between(2, 3));
    params.window_ms = rng.between(5_000, 10_000) as i64;
    params.max_clock_drift =
        if rng.chance(0.5) { Duration::ZERO } else { Duration::from_millis(rng.between(500, 2_000)) };
    params.skew_us = if rng.chance(0.5) { rng.between(100_000, 500_000) as i64 } else { 0 };
    params.bursty = false;
    params.lost_state = false;
    // The warm-up, three leases run out and a few seconds of claims and restarts.
    params.fault_until = 5 * SECOND / 2 + 3 * params.ttl.as_micros() as u64 + 8 * SECOND;
    params.settle();
}

/// Where the script stands: each step waits for its condition, then acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Both machines hold a slot and A has minted: A stops.
    Warm,
    /// A's lease is gone: B is killed, and restarts.
    ALeaseGone,
    /// B's restart holds A's slot: B stops a little later.
    BTakesOver,
    /// B stops (its worker key deleted by hand, or its lease left to expire).
    StopB,
    /// The slot is free: A runs again a little later.
    SlotFree,
    ReleaseA,
    /// A holds the slot again (claim 2): A stops at once, before it mints.
    AClaimsAgain,
    /// A's second lease is gone: A runs again a little later.
    ALeaseGoneAgain,
    ReleaseAAgain,
    /// A holds the slot a third time: B runs again a little later.
    AResumes,
    ReleaseB,
    Done,
}

/// The hand-over's script and what it has seen.
#[derive(Debug)]
pub(super) struct Script {
    /// The machine that claims the slot three times, and the other one.
    a: usize,
    b: usize,
    /// How A's two stops and B's are made: SIGSTOP (`true`) or cut off from etcd.
    sigstop: [bool; 3],
    /// B's slot is freed by hand (its worker key deleted) rather than by its lease expiring.
    delete_key: bool,
    /// A's first slot, handed over.
    slot: Slot,
    /// A's latest claim of the slot, and the session it holds it under.
    claim: u64,
    session: SessionId,
    step: Step,
    /// The current step acts no earlier than this.
    not_before: Us,
}

impl World {
    /// Draws the script and schedules its first look, after a warm-up.
    pub(super) fn start_script(&mut self) {
        let a = self.rng.below(2) as usize;
        let script = Script {
            a,
            b: 1 - a,
            sigstop: [self.rng.chance(0.5), self.rng.chance(0.5), self.rng.chance(0.5)],
            delete_key: self.rng.chance(0.5),
            slot: 0,
            claim: 0,
            session: 0,
            step: Step::Warm,
            not_before: self.rng.between(1_000, 2_500) * MS,
        };
        self.trace(|| format!("hand-over script {script:?}"));
        let at = script.not_before;
        self.script = Some(script);
        self.schedule(at, Ev::Script);
    }

    /// The script's look at the world: the current step acts if its condition holds; the
    /// next look is scheduled until the script is done or the faults stop.
    pub(super) fn direct(&mut self) {
        let Some(mut script) = self.script.take() else { return };
        let now = self.now;
        if now >= self.params.fault_until {
            // Given up: every stop ends by now.
            return;
        }
        if now >= script.not_before {
            self.take_step(&mut script);
        }
        if script.step != Step::Done {
            let at = (now + LOOK_EVERY).max(script.not_before);
            self.schedule(at, Ev::Script);
            self.script = Some(script);
        }
    }

    fn take_step(&mut self, script: &mut Script) {
        let (a, b, now) = (script.a, script.b, self.now);
        let before = script.step;
        match script.step {
            Step::Warm => {
                let (Some((slot, claim)), Some(_)) = (self.held(a), self.held(b)) else { return };
                let Some(session) = self.machines[a].process.as_ref().and_then(|p| p.session) else { return };
                if self.machines[a].last_success.is_none() {
                    return;
                }
                (script.slot, script.claim, script.session) = (slot, claim, session);
                self.stop(a, script.sigstop[0]);
                script.step = Step::ALeaseGone;
            }
            Step::ALeaseGone => {
                if self.etcd.lease_alive(now, script.session) {
                    return;
                }
                self.scripted(Fault::Crash, b);
                if self.machines[b].process.take().is_some() {
                    let at = now + self.rng.between(50, 300) * MS;
                    self.schedule(at, Ev::Start { m: b });
                }
                script.step = Step::BTakesOver;
            }
            Step::BTakesOver => match self.held(b) {
                Some((slot, _)) if slot == script.slot => {
                    script.not_before = now + self.rng.between(0, 800) * MS;
                    script.step = Step::StopB;
                }
                // B's restart took the other slot: no hand-over this time.
                Some(_) => script.step = Step::Done,
                None => {}
            },
            Step::StopB => {
                self.stop(b, script.sigstop[1]);
                if script.delete_key {
                    self.scripted(Fault::KeyDeletedByHand, b);
                    self.etcd.delete_worker(now, script.slot);
                }
                script.step = Step::SlotFree;
            }
            Step::SlotFree => {
                if !self.etcd.taken(now, script.slot) {
                    script.not_before = now + self.rng.between(0, 300) * MS;
                    script.step = Step::ReleaseA;
                }
            }
            Step::ReleaseA => {
                self.release(a, script.sigstop[0]);
                script.step = Step::AClaimsAgain;
            }
            Step::AClaimsAgain => match self.held(a) {
                Some((slot, claim)) if slot == script.slot && claim > script.claim => {
                    let Some(session) = self.machines[a].process.as_ref().and_then(|p| p.session) else { return };
                    (script.claim, script.session) = (claim, session);
                    self.stop(a, script.sigstop[2]);
                    script.step = Step::ALeaseGoneAgain;
                }
                Some((slot, _)) if slot != script.slot => script.step = Step::Done,
                _ => {}
            },
            Step::ALeaseGoneAgain => {
                if !self.etcd.lease_alive(now, script.session) {
                    script.not_before = now + self.rng.between(0, 400) * MS;
                    script.step = Step::ReleaseAAgain;
                }
            }
            Step::ReleaseAAgain => {
                self.release(a, script.sigstop[2]);
                script.step = Step::AResumes;
            }
            Step::AResumes => match self.held(a) {
                Some((slot, claim)) if slot == script.slot && claim > script.claim => {
                    script.not_before = now + self.rng.between(300, 1_500) * MS;
                    script.step = Step::ReleaseB;
                }
                Some((slot, _)) if slot != script.slot => script.step = Step::Done,
                _ => {}
            },
            Step::ReleaseB => {
                self.release(b, script.sigstop[1]);
                script.step = Step::Done;
            }
            Step::Done => {}
        }
        if script.step != before {
            let step = script.step;
            self.trace(|| format!("hand-over: {before:?} -> {step:?}"));
        }
    }

    /// The slot machine `m`'s process holds as last published, and its claim.
    fn held(&self, m: usize) -> Option<(Slot, u64)> {
        let grant = self.machines[m].process.as_ref()?.published.grant()?;
        grant.slots.first().map(|slot| (slot.slot, slot.claim))
    }

    /// Counts and traces a fault the script injects.
    fn scripted(&mut self, fault: Fault, m: usize) {
        self.trace(|| format!("FAULT {} on m{m} (hand-over)", fault.name()));
        *self.report.faults.entry(fault.name()).or_default() += 1;
        self.digest(fault as u64);
    }

    /// Stops machine `m` until [`World::release`] (or the end of the faults): its process
    /// with SIGSTOP, or the machine cut off from etcd.
    fn stop(&mut self, m: usize, sigstop: bool) {
        let until = self.params.fault_until;
        if sigstop {
            self.scripted(Fault::Pause, m);
            self.pause(m, until.saturating_sub(self.now), false);
        } else {
            self.scripted(Fault::Partition, m);
            self.machines[m].partitioned = true;
            self.schedule(until, Ev::NetworkHeals { m, kind: Fault::Partition });
        }
    }

    /// Ends machine `m`'s stop.
    fn release(&mut self, m: usize, sigstop: bool) {
        self.trace(|| format!("m{m} runs again (hand-over)"));
        if sigstop {
            if let Some((_, pause, _)) = self.machines[m].paused {
                self.resume(m, pause);
            }
        } else {
            self.machines[m].partitioned = false;
        }
    }
}
