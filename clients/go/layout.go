package snowmint

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// FieldOrder is the order of the two fields below the time field.
type FieldOrder int

const (
	// WorkerSequence is time | worker | sequence (snowmint, Twitter, Discord, Instagram).
	WorkerSequence FieldOrder = iota
	// SequenceWorker is time | sequence | worker (Sonyflake).
	SequenceWorker
)

// String returns the order's name as the shared test vectors spell it.
func (o FieldOrder) String() string {
	if o == SequenceWorker {
		return "sequence_worker"
	}
	return "worker_sequence"
}

// DefaultEpochMS is snowmint's default epoch, 2026-01-01T00:00:00Z, in Unix milliseconds.
const DefaultEpochMS int64 = 1_767_225_600_000

// Layout describes how an ID's 64 bits split into time, worker and sequence. Decoding needs
// only the layout, so it is done locally, with no call to a server. A Layout must match the
// one the IDs were minted with: for snowmint, the server's --epoch, --worker-bits and
// --sequence-bits.
type Layout struct {
	// Name is the layout's name: "snowmint" or a named preset.
	Name string
	// EpochMS is the Unix time in milliseconds at which tick 0 starts.
	EpochMS int64
	// TickMS is the length of one tick in milliseconds.
	TickMS int64
	// TimeBits, WorkerBits and SequenceBits are the widths of the three fields.
	TimeBits, WorkerBits, SequenceBits uint
	// Order is the order of the worker and sequence fields.
	Order FieldOrder
}

// SnowmintLayout is snowmint's layout with the given epoch and widths: 1 ms ticks and
// time | worker | sequence, with the time field taking the rest of the 63 bits below the
// sign bit.
func SnowmintLayout(epochMS int64, workerBits, sequenceBits uint) Layout {
	return Layout{
		Name:         "snowmint",
		EpochMS:      epochMS,
		TickMS:       1,
		TimeBits:     63 - workerBits - sequenceBits,
		WorkerBits:   workerBits,
		SequenceBits: sequenceBits,
		Order:        WorkerSequence,
	}
}

// DefaultLayout is the layout a snowmint server mints with unless configured otherwise:
// epoch 2026-01-01, 41 bits of milliseconds, 10 bits of worker, 12 bits of sequence.
func DefaultLayout() Layout { return SnowmintLayout(DefaultEpochMS, 10, 12) }

// NamedLayout returns a preset by name: "snowmint" (the default layout), "twitter",
// "discord", "instagram" or "sonyflake", the same presets the server's Decode call accepts.
func NamedLayout(name string) (Layout, error) {
	preset := func(epochMS, tickMS int64, t, w, s uint, order FieldOrder) (Layout, error) {
		return Layout{Name: name, EpochMS: epochMS, TickMS: tickMS, TimeBits: t, WorkerBits: w, SequenceBits: s, Order: order}, nil
	}
	switch name {
	case "snowmint":
		return DefaultLayout(), nil
	case "twitter":
		return preset(1_288_834_974_657, 1, 41, 10, 12, WorkerSequence)
	case "discord":
		// A 5-bit worker and a 5-bit process, read together as one 10-bit worker.
		return preset(1_420_070_400_000, 1, 42, 10, 12, WorkerSequence)
	case "instagram":
		// The 13-bit logical shard is the worker.
		return preset(1_314_220_021_721, 1, 41, 13, 10, WorkerSequence)
	case "sonyflake":
		// 10 ms ticks from 2014-09-01, an 8-bit sequence above a 16-bit machine ID.
		return preset(1_409_529_600_000, 10, 39, 16, 8, SequenceWorker)
	}
	return Layout{}, fmt.Errorf("snowmint: unknown layout %q; known layouts: snowmint, twitter, discord, instagram, sonyflake", name)
}

// Decoded is an ID split into its fields.
type Decoded struct {
	ID uint64
	// Tick is the raw time field: ticks since the layout's epoch.
	Tick uint64
	// UnixMS is the start of the ID's tick, in Unix milliseconds.
	UnixMS   int64
	WorkerID uint32
	Sequence uint32
}

// Time is the start of the ID's tick, in UTC.
func (d Decoded) Time() time.Time { return time.UnixMilli(d.UnixMS).UTC() }

// ErrNotThisLayout is returned by Decode for an ID with bits set above the layout's fields
// (for snowmint's layouts, the sign bit): it was not minted with that layout.
var ErrNotThisLayout = errors.New("snowmint: id has bits set above the layout's fields")

func (l Layout) totalBits() uint { return l.TimeBits + l.WorkerBits + l.SequenceBits }

func mask(bits uint) uint64 {
	if bits >= 64 {
		return math.MaxUint64
	}
	return 1<<bits - 1
}

// Decode splits id into its fields with layout l, the same way the server's Decode call does.
func Decode(id uint64, l Layout) (Decoded, error) {
	total := l.totalBits()
	if total > 64 || l.TimeBits == 0 || l.WorkerBits > 32 || l.SequenceBits > 32 || l.TickMS < 1 {
		return Decoded{}, fmt.Errorf("snowmint: invalid layout %q: %d+%d+%d bits with %d ms ticks",
			l.Name, l.TimeBits, l.WorkerBits, l.SequenceBits, l.TickMS)
	}
	if total < 64 && id>>total != 0 {
		return Decoded{}, fmt.Errorf("%w: %d has bits above the %d bits of layout %q", ErrNotThisLayout, id, total, l.Name)
	}
	workerShift, sequenceShift := l.SequenceBits, uint(0)
	if l.Order == SequenceWorker {
		workerShift, sequenceShift = 0, l.WorkerBits
	}
	tick := id >> (l.WorkerBits + l.SequenceBits) & mask(l.TimeBits)
	room := uint64(math.MaxInt64) // how far past the epoch an int64 of Unix ms reaches
	if l.EpochMS > 0 {
		room -= uint64(l.EpochMS)
	}
	if tick > room/uint64(l.TickMS) {
		return Decoded{}, fmt.Errorf("snowmint: tick %d of layout %q is past the year 292277026596", tick, l.Name)
	}
	return Decoded{
		ID:       id,
		Tick:     tick,
		UnixMS:   l.EpochMS + int64(tick)*l.TickMS,
		WorkerID: uint32(id >> workerShift & mask(l.WorkerBits)),
		Sequence: uint32(id >> sequenceShift & mask(l.SequenceBits)),
	}, nil
}
