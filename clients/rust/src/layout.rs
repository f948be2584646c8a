//! Decoding IDs locally, with no server and none of the server's crates: a [`Layout`] (the
//! epoch, the tick length, the widths of the three fields and their order) splits an ID into
//! its time, worker and sequence, as `clients/README.md` writes the rule and the server's
//! `Decode` call does. Pure: nothing here reads a clock.

use std::fmt;

/// snowmint's default epoch, 2026-01-01T00:00:00Z, in Unix milliseconds.
pub const DEFAULT_EPOCH_MS: i64 = 1_767_225_600_000;

/// The names [`Layout::named`] knows, as the server's `Decode` call knows them.
pub const LAYOUT_NAMES: [&str; 5] = ["snowmint", "twitter", "discord", "instagram", "sonyflake"];

/// The order of the two fields below the time field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOrder {
    /// `time | worker | sequence`: snowmint, Twitter, Discord, Instagram.
    WorkerSequence,
    /// `time | sequence | worker`: Sonyflake.
    SequenceWorker,
}

/// How an ID's 64 bits split into fields, most significant first: time, then worker and
/// sequence in [`FieldOrder`]. Bits above the three fields are zero in every ID minted with
/// it. It must match the layout the IDs were minted with: for snowmint, the server's
/// `--epoch`, `--worker-bits` and `--sequence-bits`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `snowmint` for snowmint's own layouts, or a preset's name.
    pub name: String,
    /// Unix milliseconds at which tick 0 starts.
    pub epoch_ms: i64,
    /// The length of one tick in milliseconds (at least 1).
    pub tick_ms: u64,
    pub time_bits: u32,
    pub worker_bits: u32,
    pub sequence_bits: u32,
    pub order: FieldOrder,
}

/// An ID split into its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    pub id: u64,
    /// The time field: ticks since the layout's epoch.
    pub tick: u64,
    /// The start of the ID's tick, in Unix milliseconds.
    pub unix_ms: i64,
    /// The worker (or shard, or machine) that minted it.
    pub worker_id: u64,
    /// The counter within its tick.
    pub sequence: u64,
}

/// Why an ID or a layout could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The ID has bits set above the layout's fields (for snowmint's layouts, the sign bit):
    /// it was not minted with this layout.
    NotThisLayout { id: u64, bits: u32 },
    /// The layout cannot decode anything: fields wider than 64 bits, no time bits, a tick of
    /// 0 ms, or a time past what Unix milliseconds hold.
    InvalidLayout(String),
    /// [`Layout::named`] was given a name it does not know.
    UnknownName(String),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::NotThisLayout { id, bits } => write!(f, "{id} has bits set above the layout's {bits} bits"),
            DecodeError::InvalidLayout(why) => write!(f, "invalid layout: {why}"),
            DecodeError::UnknownName(name) => {
                write!(f, "unknown layout {name:?}; known layouts: {}", LAYOUT_NAMES.join(", "))
            }
        }
    }
}

impl std::error::Error for DecodeError {}

fn mask(bits: u32) -> u64 {
    if bits >= 64 { u64::MAX } else { (1 << bits) - 1 }
}

impl Layout {
    /// snowmint's layout with the given epoch and widths: 1 ms ticks, time | worker |
    /// sequence, the time field taking the rest of the 63 bits below the sign bit.
    pub fn snowmint(epoch_ms: i64, worker_bits: u32, sequence_bits: u32) -> Layout {
        Layout {
            name: "snowmint".into(),
            epoch_ms,
            tick_ms: 1,
            time_bits: 63u32.saturating_sub(worker_bits + sequence_bits),
            worker_bits,
            sequence_bits,
            order: FieldOrder::WorkerSequence,
        }
    }

    /// The layout a snowmint server mints with unless told otherwise: epoch 2026-01-01, 41
    /// bits of milliseconds, 10 of worker, 12 of sequence.
    pub fn default_snowmint() -> Layout {
        Layout::snowmint(DEFAULT_EPOCH_MS, 10, 12)
    }

    /// A preset by name: `snowmint` (the default layout), `twitter`, `discord`, `instagram`,
    /// `sonyflake`.
    pub fn named(name: &str) -> Result<Layout, DecodeError> {
        use FieldOrder::*;
        let preset = |epoch_ms, tick_ms, time_bits, worker_bits, sequence_bits, order| Layout {
            name: name.into(),
            epoch_ms,
            tick_ms,
            time_bits,
            worker_bits,
            sequence_bits,
            order,
        };
        match name {
            "snowmint" => Ok(Layout::default_snowmint()),
            "twitter" => Ok(preset(1_288_834_974_657, 1, 41, 10, 12, WorkerSequence)),
            // 5 bits of worker and 5 of process, read together as one 10-bit worker.
            "discord" => Ok(preset(1_420_070_400_000, 1, 42, 10, 12, WorkerSequence)),
            // The 13-bit logical shard as the worker.
            "instagram" => Ok(preset(1_314_220_021_721, 1, 41, 13, 10, WorkerSequence)),
            // 10 ms ticks, then 8 bits of sequence and 16 of machine.
            "sonyflake" => Ok(preset(1_409_529_600_000, 10, 39, 16, 8, SequenceWorker)),
            _ => Err(DecodeError::UnknownName(name.into())),
        }
    }

    /// Splits `id` into its fields.
    pub fn decode(&self, id: u64) -> Result<Decoded, DecodeError> {
        let total = self.time_bits + self.worker_bits + self.sequence_bits;
        if total > 64 || self.time_bits == 0 || self.tick_ms == 0 {
            return Err(DecodeError::InvalidLayout(format!(
                "{} + {} + {} bits of {} ms ticks",
                self.time_bits, self.worker_bits, self.sequence_bits, self.tick_ms
            )));
        }
        if total < 64 && id >> total != 0 {
            return Err(DecodeError::NotThisLayout { id, bits: total });
        }
        let (worker_shift, sequence_shift) = match self.order {
            FieldOrder::WorkerSequence => (self.sequence_bits, 0),
            FieldOrder::SequenceWorker => (0, self.worker_bits),
        };
        let low = self.worker_bits + self.sequence_bits;
        let tick = if low >= 64 { 0 } else { (id >> low) & mask(self.time_bits) };
        let unix_ms = i128::from(self.epoch_ms) + i128::from(tick) * i128::from(self.tick_ms);
        let unix_ms = i64::try_from(unix_ms)
            .map_err(|_| DecodeError::InvalidLayout(format!("tick {tick} is past what Unix milliseconds hold")))?;
        Ok(Decoded {
            id,
            tick,
            unix_ms,
            worker_id: (id >> worker_shift) & mask(self.worker_bits),
            sequence: (id >> sequence_shift) & mask(self.sequence_bits),
        })
    }
}

impl Decoded {
    /// The start of the ID's tick as RFC 3339 in UTC with milliseconds, as the server writes
    /// it: `2026-01-01T00:00:00.123Z`.
    pub fn rfc3339(&self) -> String {
        rfc3339_ms(self.unix_ms)
    }
}

/// Unix milliseconds as RFC 3339 in UTC with milliseconds (proleptic Gregorian calendar).
pub fn rfc3339_ms(unix_ms: i64) -> String {
    let (days, ms) = (unix_ms.div_euclid(86_400_000), unix_ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// The date of a count of days since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_counts_days_across_leap_years_and_before_1970() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(DEFAULT_EPOCH_MS + 123), "2026-01-01T00:00:00.123Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(rfc3339_ms(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }
}
