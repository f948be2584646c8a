//! The bit layout of an ID: field widths and order, the epoch and the tick length.
//!
//! Pure: nothing here reads a clock. A [`Layout`] packs a (tick, worker, sequence) triple into
//! a `u64` and unpacks it again. Layouts that snowmint mints with are validated by
//! [`Layout::validate_for_minting`] (sign bit kept 0, widths summing to 63, epoch not in the
//! future, horizon not passed); decode-only layouts of other systems (see [`Layout::named`])
//! may use all 64 bits or put the sequence before the worker, as Sonyflake does.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

/// Why a layout cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error(
        "time, worker and sequence bits must sum to 63 (the sign bit stays 0), got {time} + {worker} + {sequence} = {sum}"
    )]
    WidthsNot63 { time: u8, worker: u8, sequence: u8, sum: u32 },
    #[error("{field} bits must be between {min} and {max}, got {got}")]
    WidthOutOfRange { field: &'static str, min: u8, max: u8, got: u8 },
    #[error("the tick must be at least 1 ms")]
    ZeroTick,
    #[error("the epoch {epoch} is in the future (now is {now})")]
    EpochInFuture { epoch: String, now: String },
    #[error("the layout ran out at {expiry}: {time_bits} bits of {tick_ms} ms ticks from {epoch}")]
    Expired { expiry: String, time_bits: u8, tick_ms: u64, epoch: String },
    #[error("unknown layout {name:?}; known layouts: {known}")]
    UnknownName { name: String, known: String },
    #[error("the {name} layout cannot be minted: {why}")]
    NotMintable { name: String, why: String },
}

/// The order of the two low fields below the time field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldOrder {
    /// `time | worker | sequence` (Snowflake, snowmint, Discord, Instagram).
    WorkerSequence,
    /// `time | sequence | worker` (Sonyflake).
    SequenceWorker,
}

/// An ID layout. Fields are most significant first: time, then the two low fields in
/// [`FieldOrder`]. Bits above the three fields are zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// The layout's name: `snowmint` for ours, or a named layout of another system.
    pub name: String,
    /// Milliseconds since the Unix epoch at which tick 0 starts.
    pub epoch_ms: i64,
    /// Length of one tick in milliseconds.
    pub tick_ms: u64,
    pub time_bits: u8,
    pub worker_bits: u8,
    pub sequence_bits: u8,
    pub order: FieldOrder,
}

/// A slot: one value of the worker field, what the keeper claims and the generator mints
/// under. Every layout snowmint mints with has at most 20 worker bits ([`WORKER_BITS`]), so a
/// slot always fits; [`Parts::worker`] is the field as any layout decodes it.
pub type Slot = u32;

/// The three fields of an ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub tick: u64,
    pub worker: u64,
    pub sequence: u64,
}

/// The default epoch, 2026-01-01T00:00:00Z, in Unix milliseconds.
pub const DEFAULT_EPOCH_MS: i64 = 1_767_225_600_000;

/// The widths of the time field snowmint mints with. The three fields share the 63 bits
/// below the sign bit.
pub const TIME_BITS: std::ops::RangeInclusive<u8> = 20..=61;
/// The widths of the worker field snowmint mints with.
pub const WORKER_BITS: std::ops::RangeInclusive<u8> = 0..=20;
/// The widths of the sequence field snowmint mints with.
pub const SEQUENCE_BITS: std::ops::RangeInclusive<u8> = 1..=22;

/// The names accepted by [`Layout::named`].
pub const NAMED_LAYOUTS: [&str; 4] = ["twitter", "discord", "instagram", "sonyflake"];

fn mask(bits: u8) -> u64 {
    if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }
}

/// Formats Unix milliseconds as RFC 3339 in UTC with milliseconds, or the raw number when it
/// falls outside the calendar chrono supports.
pub fn rfc3339_ms(unix_ms: i64) -> String {
    match DateTime::<Utc>::from_timestamp_millis(unix_ms) {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::Millis, true),
        None => format!("{unix_ms} ms since the Unix epoch"),
    }
}

/// Parses an RFC 3339 time into Unix milliseconds.
pub fn parse_rfc3339_ms(text: &str) -> Result<i64, chrono::ParseError> {
    Ok(DateTime::parse_from_rfc3339(text)?.timestamp_millis())
}

impl Layout {
    /// snowmint's own layout with the given epoch and widths (1 ms ticks, time | worker |
    /// sequence). Not validated: call [`Layout::validate_for_minting`].
    pub fn snowmint(epoch_ms: i64, worker_bits: u8, sequence_bits: u8) -> Layout {
        Layout {
            name: "snowmint".to_string(),
            epoch_ms,
            tick_ms: 1,
            time_bits: 63u8.saturating_sub(worker_bits).saturating_sub(sequence_bits),
            worker_bits,
            sequence_bits,
            order: FieldOrder::WorkerSequence,
        }
    }

    /// The default layout: epoch 2026-01-01, 41 bits of ms, 10 of worker, 12 of sequence.
    pub fn default_snowmint() -> Layout {
        Layout::snowmint(DEFAULT_EPOCH_MS, 10, 12)
    }

    /// Another system's layout, for decoding its IDs.
    pub fn named(name: &str) -> Result<Layout, LayoutError> {
        let layout = |epoch_ms, tick_ms, time_bits, worker_bits, sequence_bits, order| Layout {
            name: name.to_string(),
            epoch_ms,
            tick_ms,
            time_bits,
            worker_bits,
            sequence_bits,
            order,
        };
        use FieldOrder::*;
        match name {
            "twitter" => Ok(layout(1_288_834_974_657, 1, 41, 10, 12, WorkerSequence)),
            // 5-bit worker and 5-bit process, read together as one 10-bit worker.
            "discord" => Ok(layout(1_420_070_400_000, 1, 42, 10, 12, WorkerSequence)),
            // 13-bit logical shard as the worker.
            "instagram" => Ok(layout(1_314_220_021_721, 1, 41, 13, 10, WorkerSequence)),
            // Start 2014-09-01T00:00:00Z, 10 ms units, 8-bit sequence, 16-bit machine id.
            "sonyflake" => Ok(layout(1_409_529_600_000, 10, 39, 16, 8, SequenceWorker)),
            _ => Err(LayoutError::UnknownName { name: name.to_string(), known: NAMED_LAYOUTS.join(", ") }),
        }
    }

    /// Checks a layout that snowmint will mint with, at wall time `now_ms`.
    pub fn validate_for_minting(&self, now_ms: i64) -> Result<(), LayoutError> {
        for (field, range, got) in [
            ("time", TIME_BITS, self.time_bits),
            ("worker", WORKER_BITS, self.worker_bits),
            ("sequence", SEQUENCE_BITS, self.sequence_bits),
        ] {
            if !range.contains(&got) {
                return Err(LayoutError::WidthOutOfRange { field, min: *range.start(), max: *range.end(), got });
            }
        }
        let sum = u32::from(self.time_bits) + u32::from(self.worker_bits) + u32::from(self.sequence_bits);
        if sum != 63 {
            return Err(LayoutError::WidthsNot63 {
                time: self.time_bits,
                worker: self.worker_bits,
                sequence: self.sequence_bits,
                sum,
            });
        }
        if self.tick_ms == 0 {
            return Err(LayoutError::ZeroTick);
        }
        if self.epoch_ms > now_ms {
            return Err(LayoutError::EpochInFuture { epoch: rfc3339_ms(self.epoch_ms), now: rfc3339_ms(now_ms) });
        }
        if self.expiry_ms() <= now_ms {
            return Err(LayoutError::Expired {
                expiry: rfc3339_ms(self.expiry_ms()),
                time_bits: self.time_bits,
                tick_ms: self.tick_ms,
                epoch: rfc3339_ms(self.epoch_ms),
            });
        }
        Ok(())
    }

    /// The largest tick the time field holds.
    pub fn max_tick(&self) -> u64 {
        mask(self.time_bits)
    }

    /// The largest worker ID.
    pub fn max_worker(&self) -> u64 {
        mask(self.worker_bits)
    }

    /// The largest sequence number within one tick.
    pub fn max_sequence(&self) -> u64 {
        mask(self.sequence_bits)
    }

    /// Unix milliseconds at which the layout runs out (the start of the first tick past
    /// [`Layout::max_tick`]).
    pub fn expiry_ms(&self) -> i64 {
        let span = (u128::from(self.max_tick()) + 1) * u128::from(self.tick_ms);
        i64::try_from(i128::from(self.epoch_ms) + span as i128).unwrap_or(i64::MAX)
    }

    /// The tick that wall time `unix_ms` falls in, or `None` before the epoch.
    pub fn tick_at(&self, unix_ms: i64) -> Option<u64> {
        let since = unix_ms.checked_sub(self.epoch_ms)?;
        if since < 0 {
            return None;
        }
        Some(since as u64 / self.tick_ms)
    }

    /// Unix milliseconds at which `tick` starts.
    pub fn tick_start_ms(&self, tick: u64) -> i64 {
        let start = i128::from(self.epoch_ms) + i128::from(tick) * i128::from(self.tick_ms);
        i64::try_from(start).unwrap_or(i64::MAX)
    }

    /// Unix milliseconds of the last millisecond of `tick`.
    pub fn tick_end_ms(&self, tick: u64) -> i64 {
        self.tick_start_ms(tick).saturating_add(self.tick_ms as i64 - 1)
    }

    fn shifts(&self) -> (u32, u32, u32) {
        let (w, s) = (u32::from(self.worker_bits), u32::from(self.sequence_bits));
        match self.order {
            FieldOrder::WorkerSequence => (w + s, s, 0),
            FieldOrder::SequenceWorker => (w + s, 0, w),
        }
    }

    /// Packs the three fields into an ID. Each field must fit its width; the generator
    /// guarantees that, and a debug build checks it.
    pub fn pack(&self, parts: Parts) -> u64 {
        debug_assert!(parts.tick <= self.max_tick());
        debug_assert!(parts.worker <= self.max_worker());
        debug_assert!(parts.sequence <= self.max_sequence());
        let (t, w, s) = self.shifts();
        (parts.tick << t) | (parts.worker << w) | (parts.sequence << s)
    }

    /// Splits an ID into its three fields. Bits above the fields are ignored.
    pub fn unpack(&self, id: u64) -> Parts {
        let (t, w, s) = self.shifts();
        Parts {
            tick: (id >> t) & self.max_tick(),
            worker: (id >> w) & self.max_worker(),
            sequence: (id >> s) & self.max_sequence(),
        }
    }

    /// Total width of the three fields.
    pub fn total_bits(&self) -> u32 {
        u32::from(self.time_bits) + u32::from(self.worker_bits) + u32::from(self.sequence_bits)
    }

    /// Whether `id` has bits set above the layout's fields (for snowmint's own layout: the
    /// sign bit).
    pub fn has_excess_bits(&self, id: u64) -> bool {
        self.total_bits() < 64 && id >> self.total_bits() != 0
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let low = match self.order {
            FieldOrder::WorkerSequence => {
                format!("{} worker bits, {} sequence bits", self.worker_bits, self.sequence_bits)
            }
            FieldOrder::SequenceWorker => {
                format!("{} sequence bits, {} worker bits", self.sequence_bits, self.worker_bits)
            }
        };
        write!(
            f,
            "{}: epoch {}, {} time bits of {} ms, {}",
            self.name,
            rfc3339_ms(self.epoch_ms),
            self.time_bits,
            self.tick_ms,
            low
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_790_000_000_000; // 2026-09-21

    #[test]
    fn default_layout_is_valid_and_runs_out_in_2095() {
        let layout = Layout::default_snowmint();
        assert_eq!(layout.time_bits, 41);
        layout.validate_for_minting(NOW).unwrap();
        assert_eq!(rfc3339_ms(layout.expiry_ms()), "2095-09-07T15:47:35.552Z");
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let mut layout = Layout::default_snowmint();
        layout.time_bits = 40;
        assert!(matches!(layout.validate_for_minting(NOW), Err(LayoutError::WidthsNot63 { sum: 62, .. })));

        let layout = Layout::snowmint(DEFAULT_EPOCH_MS, 10, 0);
        assert!(matches!(
            layout.validate_for_minting(NOW),
            Err(LayoutError::WidthOutOfRange { field: "sequence", .. })
        ));

        let layout = Layout::snowmint(NOW + 1, 10, 12);
        let err = layout.validate_for_minting(NOW).unwrap_err();
        assert!(err.to_string().contains("in the future"), "{err}");

        // 21 bits of ms run out after about 35 minutes.
        let layout = Layout::snowmint(NOW - 3_600_000, 20, 22);
        assert!(matches!(layout.validate_for_minting(NOW), Err(LayoutError::Expired { .. })));

        let mut layout = Layout::default_snowmint();
        layout.tick_ms = 0;
        assert_eq!(layout.validate_for_minting(NOW), Err(LayoutError::ZeroTick));
    }

    #[test]
    fn unknown_layout_lists_the_known_ones() {
        let err = Layout::named("uuid").unwrap_err().to_string();
        for name in NAMED_LAYOUTS {
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn sonyflake_puts_sequence_above_machine() {
        let layout = Layout::named("sonyflake").unwrap();
        let id = layout.pack(Parts { tick: 5, worker: 0x1234, sequence: 7 });
        assert_eq!(id, (5 << 24) | (7 << 16) | 0x1234);
        assert_eq!(layout.unpack(id), Parts { tick: 5, worker: 0x1234, sequence: 7 });
    }

    #[test]
    fn ticks_map_to_wall_time_and_back() {
        let layout = Layout::named("sonyflake").unwrap();
        assert_eq!(layout.tick_at(layout.epoch_ms - 1), None);
        assert_eq!(layout.tick_at(layout.epoch_ms + 25), Some(2));
        assert_eq!(layout.tick_start_ms(2), layout.epoch_ms + 20);
        assert_eq!(layout.tick_end_ms(2), layout.epoch_ms + 29);
    }

    fn valid_layout() -> impl Strategy<Value = Layout> {
        (WORKER_BITS, SEQUENCE_BITS).prop_filter_map("time bits in range", |(w, s)| {
            let layout = Layout::snowmint(0, w, s);
            TIME_BITS.contains(&layout.time_bits).then_some(layout)
        })
    }

    proptest! {
        #[test]
        fn pack_unpack_round_trips(layout in valid_layout(), t in any::<u64>(), w in any::<u64>(), s in any::<u64>()) {
            let parts = Parts {
                tick: t & layout.max_tick(),
                worker: w & layout.max_worker(),
                sequence: s & layout.max_sequence(),
            };
            let id = layout.pack(parts);
            prop_assert!(id < 1 << 63, "sign bit set");
            prop_assert!(!layout.has_excess_bits(id));
            prop_assert_eq!(layout.unpack(id), parts);
        }

        #[test]
        fn ids_order_by_tick_then_sequence(layout in valid_layout(), t in any::<u64>(), w in any::<u64>(), s in any::<u64>()) {
            let tick = (t & layout.max_tick()).min(layout.max_tick() - 1);
            let worker = w & layout.max_worker();
            let seq = s & layout.max_sequence();
            let a = layout.pack(Parts { tick, worker, sequence: seq });
            let b = layout.pack(Parts { tick: tick + 1, worker, sequence: 0 });
            prop_assert!(a < b);
        }

        #[test]
        fn named_layouts_round_trip(idx in 0usize..4, id in any::<u64>()) {
            let layout = Layout::named(NAMED_LAYOUTS[idx]).unwrap();
            let id = if layout.total_bits() < 64 { id & mask(layout.total_bits() as u8) } else { id };
            prop_assert_eq!(layout.pack(layout.unpack(id)), id);
        }
    }
}
