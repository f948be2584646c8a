package snowmint

import (
	"fmt"
	"time"
)

// UUID is a UUIDv7 (RFC 9562) as snowmint mints it (see Client.NextUUID): 16 bytes, most
// significant first. Its 128 bits, from the most significant (bit 127, the top bit of byte
// 0):
//
//	bits 127-80  the Unix millisecond at which the tick of the ID it was made from starts
//	bits  79-76  the version, 7
//	bits  75-64  the top 12 bits of the 42-bit minted field (slot << 22 | sequence)
//	bits  63-62  the variant, 0b10
//	bits  61-32  the low 30 bits of the minted field
//	bits  31-0   random
//
// Each UUID is made from one newly minted 64-bit ID, so it is as unique as the ID; the UUIDs
// of one server strictly increase, compared byte by byte or by their text forms. A
// Layout's DecodeUUID reads the fields back and gives the ID, with no call to a server.
//
// The zero UUID is the nil UUID. UUID values are comparable, so they can be map keys.
type UUID [16]byte

// uuidTextLen is the length of a UUID's text form: 32 hex digits and 4 hyphens.
const uuidTextLen = 36

// isUUIDHyphen tells whether index i of the text form is a hyphen's.
func isUUIDHyphen(i int) bool { return i == 8 || i == 13 || i == 18 || i == 23 }

// String returns the canonical text form: 32 lowercase hex digits in groups of 8-4-4-4-12,
// such as "019b76da-a801-7000-80c0-0004ddc55174". The text forms of UUIDs sort as the UUIDs
// do.
func (u UUID) String() string {
	const digits = "0123456789abcdef"
	var text [uuidTextLen]byte
	j := 0
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			text[j] = '-'
			j++
		}
		text[j], text[j+1] = digits[b>>4], digits[b&15]
		j += 2
	}
	return string(text[:])
}

// MarshalText returns the text form, so a UUID reads and writes as a JSON string.
func (u UUID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText reads a text form as ParseUUID does.
func (u *UUID) UnmarshalText(text []byte) error {
	parsed, err := ParseUUID(string(text))
	if err != nil {
		return err
	}
	*u = parsed
	return nil
}

// hexValue is the value of one hex digit, either case, or -1.
func hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// ParseUUID reads a UUID's text form strictly, as the server does: exactly 36 ASCII
// characters, hex digits of either case in groups of 8-4-4-4-12 with a '-' between groups,
// and nothing else (no braces, no "urn:uuid:", no spaces, not the 32 digits alone). Any
// other text is refused with a *UUIDError of kind UUIDKindText. It reads any UUID, of any
// version: DecodeUUID tells whether snowmint minted it.
func ParseUUID(text string) (UUID, error) {
	refuse := func(reason string) (UUID, error) {
		shown := text
		if len(shown) > 64 {
			shown = shown[:64] + "..."
		}
		return UUID{}, &UUIDError{Kind: UUIDKindText, msg: fmt.Sprintf(
			"snowmint: %q is not a UUID's text form (36 characters: hex digits in groups of 8-4-4-4-12): %s", shown, reason)}
	}
	if len(text) != uuidTextLen {
		return refuse(fmt.Sprintf("%d bytes long", len(text)))
	}
	var u UUID
	n := 0 // hex digits read
	for i := range uuidTextLen {
		if isUUIDHyphen(i) {
			if text[i] != '-' {
				return refuse(fmt.Sprintf("%q at index %d, not a hyphen", text[i], i))
			}
			continue
		}
		v := hexValue(text[i])
		if v < 0 {
			return refuse(fmt.Sprintf("%q at index %d is not a hex digit", text[i], i))
		}
		u[n/2] |= byte(v) << (4 * (1 - n%2))
		n++
	}
	return u, nil
}

// UUIDErrorKind says why a text or a UUID was refused. The kinds are those the shared test
// vectors (clients/testdata/uuid-vectors.json) and the server name.
type UUIDErrorKind string

// The kinds of UUIDError, in the order DecodeUUID checks them (text is ParseUUID's).
const (
	// UUIDKindText: ParseUUID was given something else than 36 characters of 8-4-4-4-12
	// hex digits.
	UUIDKindText UUIDErrorKind = "text"
	// UUIDKindLayout: the layout itself is invalid (more than 64 bits, no time bits, a field
	// over 32 bits, or ticks under 1 ms), so it decodes nothing.
	UUIDKindLayout UUIDErrorKind = "layout"
	// UUIDKindVersion: the version (bits 79-76) is not 7.
	UUIDKindVersion UUIDErrorKind = "version"
	// UUIDKindVariant: the variant (bits 63-62) is not 0b10, the one of RFC 9562.
	UUIDKindVariant UUIDErrorKind = "variant"
	// UUIDKindFields: the slot or the sequence of the minted field does not fit the
	// layout's worker or sequence field.
	UUIDKindFields UUIDErrorKind = "fields"
	// UUIDKindTick: the time is not the start of one of the layout's ticks: before its
	// epoch, between two ticks, or past its last tick.
	UUIDKindTick UUIDErrorKind = "tick"
)

// UUIDError is the error of ParseUUID and DecodeUUID: Kind says why, for a program; Error
// says it for a person. Get it with errors.As.
type UUIDError struct {
	Kind UUIDErrorKind
	msg  string
}

func (e *UUIDError) Error() string { return e.msg }

// DecodedUUID is what a snowmint UUID carries.
type DecodedUUID struct {
	// ID is the 64-bit ID the UUID was made from, in the layout given to DecodeUUID.
	ID uint64
	// Tick is the ID's time field: ticks since the layout's epoch.
	Tick uint64
	// UnixMS is the UUID's time field: the Unix millisecond at which the ID's tick starts.
	UnixMS int64
	// Slot is the worker slot that minted it (the ID's worker field).
	Slot uint32
	// Sequence is the ID's sequence field.
	Sequence uint32
	// Random is the random tail, the low 32 bits. It promises nothing about uniqueness (the
	// other 96 bits do); it only makes a UUID unguessable from its neighbours.
	Random uint32
}

// Time is the start of the ID's tick, in UTC.
func (d DecodedUUID) Time() time.Time { return time.UnixMilli(d.UnixMS).UTC() }

// The minted field: the slot in 20 bits, then the sequence in 22.
const (
	uuidSlotBits     = 20
	uuidSequenceBits = 22
)

// DecodeUUID reads what u carries, when snowmint could have minted it with layout l, locally
// and the same way the server's Decode call does. It checks, in this order, that u is a
// version 7 (else a *UUIDError of kind UUIDKindVersion) of the RFC 9562 variant
// (UUIDKindVariant), that its slot and sequence fit the layout's worker and sequence fields
// (UUIDKindFields), and that its time is the start of one of the layout's ticks
// (UUIDKindTick); an invalid layout is UUIDKindLayout. The ID it gives decodes with Decode
// and the same layout to the same time, slot and sequence.
func (l Layout) DecodeUUID(u UUID) (DecodedUUID, error) {
	refuse := func(kind UUIDErrorKind, format string, args ...any) (DecodedUUID, error) {
		return DecodedUUID{}, &UUIDError{Kind: kind, msg: "snowmint: " + fmt.Sprintf(format, args...)}
	}
	total := l.totalBits()
	if total > 64 || l.TimeBits == 0 || l.WorkerBits > 32 || l.SequenceBits > 32 || l.TickMS < 1 {
		return refuse(UUIDKindLayout, "invalid layout %q: %d+%d+%d bits with %d ms ticks",
			l.Name, l.TimeBits, l.WorkerBits, l.SequenceBits, l.TickMS)
	}
	if version := u[6] >> 4; version != 7 {
		return refuse(UUIDKindVersion, "%s is not a UUIDv7: its version is %d", u, version)
	}
	if variant := u[8] >> 6; variant != 0b10 {
		return refuse(UUIDKindVariant, "%s is not an RFC 9562 UUID: its variant bits are %02b, not 10", u, variant)
	}
	var unixMS int64
	for _, b := range u[:6] {
		unixMS = unixMS<<8 | int64(b)
	}
	high := uint64(u[6]&0x0f)<<8 | uint64(u[7])                                        // bits 75-64
	low := uint64(u[8]&0x3f)<<24 | uint64(u[9])<<16 | uint64(u[10])<<8 | uint64(u[11]) // bits 61-32
	minted := high<<30 | low                                                           // 42 bits
	slot, sequence := minted>>uuidSequenceBits, minted&(1<<uuidSequenceBits-1)
	if slot > mask(l.WorkerBits) || sequence > mask(l.SequenceBits) {
		return refuse(UUIDKindFields, "%s was not minted by snowmint with layout %q: its slot %d or sequence %d does not fit the layout's fields",
			u, l.Name, slot, sequence)
	}
	// The difference of two int64s always fits a uint64 once it is known not to be negative.
	since := uint64(unixMS) - uint64(l.EpochMS)
	tick := since / uint64(l.TickMS)
	if unixMS < l.EpochMS || since%uint64(l.TickMS) != 0 || tick > mask(l.TimeBits) {
		return refuse(UUIDKindTick, "%s was not minted by snowmint with layout %q: its time %d is not the start of one of the layout's ticks",
			u, l.Name, unixMS)
	}
	id := tick << (l.WorkerBits + l.SequenceBits)
	if l.Order == SequenceWorker {
		id |= sequence<<l.WorkerBits | slot
	} else {
		id |= slot<<l.SequenceBits | sequence
	}
	random := uint32(u[12])<<24 | uint32(u[13])<<16 | uint32(u[14])<<8 | uint32(u[15])
	return DecodedUUID{ID: id, Tick: tick, UnixMS: unixMS, Slot: uint32(slot), Sequence: uint32(sequence), Random: random}, nil
}
