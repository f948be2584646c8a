//! What the slot keeper hands the minter, and what the minter hands back.
//!
//! The keeper publishes a [`Holding`] on a watch channel: the slots this instance holds, the
//! window each may mint in, and the boot-time deadline past which the claim may be gone. The
//! minter reads it on every pass and never mints outside it. When the minter stops it reports
//! what it minted ([`Minted`]), so the keeper can shrink the saved reservations to exactly
//! that, and only when it is known. While it mints, it reports how far it has got
//! ([`Progress`]), so the keeper extends reservations as far as minting needs.

use crate::layout::Slot;
use std::time::Duration;

/// One slot held, and the window it may mint in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotGrant {
    pub slot: Slot,
    /// Changes with every claim of this slot (the history records it as the claim's number).
    /// The minter keeps one generator for the life of the process: a new claim gives the
    /// slot a new window, and the generator's cursor keeps this process's own IDs apart.
    pub claim: u64,
    /// Unix ms up to which another run or holder of this slot may have minted; only later
    /// times are minted (invariant 2). `None`: nothing was ever reserved for the slot. For a
    /// claim that [`SlotGrant::resumes`], the floor of the claim it continues.
    pub floor_ms: Option<i64>,
    /// Unix ms up to which a durable reservation, written by this instance while it held the
    /// slot, covers minting (invariant 1).
    pub reserved_ms: i64,
    /// The store shows that nobody wrote this slot's reservation since this instance's own
    /// last write (a re-claim of the slot it just lost): nobody else minted on it since the
    /// claim that wrote it, so the floor is that claim's floor, not the reservation this
    /// instance wrote itself, and minting goes on at once.
    pub resumes: bool,
    /// Why the floor stands past the stored reservation, when a fence raised it (the store
    /// went back in time, the reservation was missing): said in the minter's refusals.
    pub fenced: Option<String>,
}

/// What the minter may mint with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holding {
    /// No slot is held: minting refuses, saying why.
    Unheld {
        reason: String,
    },
    Held(Grant),
}

/// The slots held under one claim of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// In ascending slot order; never empty.
    pub slots: Vec<SlotGrant>,
    /// Changes whenever the set of claims changes (a slot taken, lost or re-claimed), never
    /// for a mere extension or renewal. A response is filled under one generation only.
    pub generation: u64,
    /// The boot-time instant ([`crate::clock::Clock::boot_time`]) past which the lease may
    /// have expired; `None` when the claim cannot expire (a local state file).
    pub deadline: Option<Duration>,
    /// The claim's session (the store's session id, an etcd lease): what else the instance
    /// holds is bound to it (the ordered sequences it serves), so it lapses with the slots.
    pub session: Option<i64>,
    /// The keeper extends the reservations only when the minter asks: nothing was minted
    /// lately, so they were left to lapse (an idle instance writes nothing). A minter past
    /// them with nothing to mint is still ready; one with a request asks for an extension
    /// and waits for it (one store write).
    pub on_demand: bool,
}

impl Holding {
    pub fn grant(&self) -> Option<&Grant> {
        match self {
            Holding::Held(grant) => Some(grant),
            Holding::Unheld { .. } => None,
        }
    }
}

/// What the stopped minter minted, as the final reservation needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Minted {
    /// The minter stopped cleanly: for each slot it minted on, nothing past this Unix ms
    /// was minted. A slot not listed minted nothing.
    UpTo(Vec<(Slot, i64)>),
    /// The minter failed, or never reported: what it minted is unknown, so the saved
    /// reservations must stay as they are.
    Unknown,
}

impl Minted {
    /// The last Unix ms minted on `slot`: `Some(None)` when nothing was, `None` when
    /// what was minted is unknown.
    pub fn last_ms(&self, slot: Slot) -> Option<Option<i64>> {
        match self {
            Minted::UpTo(slots) => Some(slots.iter().find(|(w, _)| *w == slot).map(|(_, ms)| *ms)),
            Minted::Unknown => None,
        }
    }
}

/// How far minting has got, as the minter reports it to the keeper.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// The minting time, Unix ms: reservations reach ahead of it.
    pub mint_ms: Option<i64>,
    /// Per slot, the last Unix ms minted.
    pub slots: Vec<(Slot, i64)>,
}
