package snowmint

import (
	"errors"
	"fmt"
	"strings"
)

// OpaqueID is an opaque public ID, as a server started with --opaque-key-file hands it out:
// the ID put through the server's keyed permutation (Value, below 2^63) and the version of
// the key (KeyVersion, 0 to 31). Only the server's key maps it back to the ID; this client
// reads and writes its string form, which needs no key.
//
// The string form is 14 characters of Crockford base32: the key version, then the value in
// 13 characters, most significant first. Values are unique per key version; strings, which
// carry the version, are unique across key rotations.
type OpaqueID struct {
	KeyVersion uint32
	Value      uint64
}

// The errors of opaque IDs, for errors.Is: a string with a character outside Crockford
// base32, of the wrong length, or holding a value of 2^63 or more; a key version above 31
// or a value of 2^63 or more given to NewOpaqueID.
var (
	ErrOpaqueCharacter = errors.New("snowmint: not a Crockford base32 character")
	ErrOpaqueLength    = errors.New("snowmint: an opaque ID's string form has 14 characters")
	ErrOpaqueRange     = errors.New("snowmint: the value of an opaque ID is below 2^63")
	ErrOpaqueVersion   = errors.New("snowmint: an opaque ID's key version is 0 to 31")
)

// opaqueAlphabet is Crockford's base32: digits and capitals without I, L, O and U.
const opaqueAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// opaqueTextLen is the length of the string form: a key version and 13 characters of value.
const opaqueTextLen = 14

// NewOpaqueID returns the opaque ID of value under key version keyVersion, both checked.
func NewOpaqueID(keyVersion uint32, value uint64) (OpaqueID, error) {
	if keyVersion > 31 {
		return OpaqueID{}, fmt.Errorf("%w: got %d", ErrOpaqueVersion, keyVersion)
	}
	if value >= 1<<63 {
		return OpaqueID{}, fmt.Errorf("%w: got %d", ErrOpaqueRange, value)
	}
	return OpaqueID{KeyVersion: keyVersion, Value: value}, nil
}

// String returns the string form. An OpaqueID made with NewOpaqueID or ParseOpaqueID always
// has one; the fields of any other are cut to their widths.
func (o OpaqueID) String() string {
	var text [opaqueTextLen]byte
	text[0] = opaqueAlphabet[o.KeyVersion&31]
	for i := 1; i < opaqueTextLen; i++ {
		shift := 5 * uint(opaqueTextLen-1-i)
		text[i] = opaqueAlphabet[(o.Value>>shift)&31]
	}
	return string(text[:])
}

// opaqueSymbol is the value of one character of the string form, with its aliases (lower
// case, O for 0, I and L for 1), or -1.
func opaqueSymbol(c rune) int {
	switch c {
	case 'O', 'o':
		return 0
	case 'I', 'i', 'L', 'l':
		return 1
	}
	if c >= 'a' && c <= 'z' {
		c -= 'a' - 'A'
	}
	if c > 127 {
		return -1
	}
	return strings.IndexByte(opaqueAlphabet, byte(c))
}

// ParseOpaqueID reads a string form. Lower case reads as upper case, O as 0, I and L as 1,
// and hyphens anywhere are ignored; then, in this order, any other character
// (ErrOpaqueCharacter), a length other than 14 without hyphens (ErrOpaqueLength) and a value
// of 2^63 or more (ErrOpaqueRange) are refused.
func ParseOpaqueID(text string) (OpaqueID, error) {
	var symbols [opaqueTextLen]uint64
	n := 0
	for i, c := range []rune(text) {
		if c == '-' {
			continue
		}
		s := opaqueSymbol(c)
		if s < 0 {
			return OpaqueID{}, fmt.Errorf("%w: %q (character %d) in %q", ErrOpaqueCharacter, c, i+1, text)
		}
		if n < opaqueTextLen {
			symbols[n] = uint64(s)
		}
		n++
	}
	if n != opaqueTextLen {
		return OpaqueID{}, fmt.Errorf("%w: %q has %d without its hyphens", ErrOpaqueLength, text, n)
	}
	if symbols[1] >= 8 {
		return OpaqueID{}, fmt.Errorf("%w: %q", ErrOpaqueRange, text)
	}
	var value uint64
	for _, s := range symbols[1:] {
		value = value<<5 | s
	}
	return OpaqueID{KeyVersion: uint32(symbols[0]), Value: value}, nil
}
