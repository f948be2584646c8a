package snowmint_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

// opaqueFile is clients/testdata/opaque-strings.json, made by the Rust implementation.
type opaqueFile struct {
	Valid []struct {
		Text       string `json:"text"`
		KeyVersion uint32 `json:"key_version"`
		Value      string `json:"value"`
	} `json:"valid"`
	Aliases []struct {
		Text       string `json:"text"`
		Canonical  string `json:"canonical"`
		KeyVersion uint32 `json:"key_version"`
		Value      string `json:"value"`
	} `json:"aliases"`
	Invalid []struct {
		Text   string `json:"text"`
		Kind   string `json:"kind"`
		Reason string `json:"reason"`
	} `json:"invalid"`
	Unencodable []struct {
		KeyVersion uint32 `json:"key_version"`
		Value      string `json:"value"`
		Reason     string `json:"reason"`
	} `json:"unencodable"`
}

func loadOpaque(t *testing.T) opaqueFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "opaque-strings.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file opaqueFile
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Valid) == 0 || len(file.Aliases) == 0 || len(file.Invalid) == 0 || len(file.Unencodable) == 0 {
		t.Fatal("the opaque vector file has an empty section")
	}
	return file
}

func parseValue(t *testing.T, text string) uint64 {
	t.Helper()
	value, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return value
}

func TestOpaqueStringsAgreeWithEveryVector(t *testing.T) {
	file := loadOpaque(t)
	for _, v := range file.Valid {
		want := snowmint.OpaqueID{KeyVersion: v.KeyVersion, Value: parseValue(t, v.Value)}
		made, err := snowmint.NewOpaqueID(want.KeyVersion, want.Value)
		if err != nil || made.String() != v.Text {
			t.Errorf("NewOpaqueID(%d, %d) = %v, %v; want %s", want.KeyVersion, want.Value, made, err, v.Text)
		}
		if got, err := snowmint.ParseOpaqueID(v.Text); err != nil || got != want {
			t.Errorf("ParseOpaqueID(%q) = %+v, %v; want %+v", v.Text, got, err, want)
		}
	}
	for _, v := range file.Aliases {
		want := snowmint.OpaqueID{KeyVersion: v.KeyVersion, Value: parseValue(t, v.Value)}
		got, err := snowmint.ParseOpaqueID(v.Text)
		if err != nil || got != want || got.String() != v.Canonical {
			t.Errorf("ParseOpaqueID(%q) = %+v (%s), %v; want %+v (%s)", v.Text, got, got, err, want, v.Canonical)
		}
	}
	kinds := map[string]error{
		"character": snowmint.ErrOpaqueCharacter,
		"length":    snowmint.ErrOpaqueLength,
		"range":     snowmint.ErrOpaqueRange,
	}
	for _, v := range file.Invalid {
		want, ok := kinds[v.Kind]
		if !ok {
			t.Fatalf("unknown kind %q", v.Kind)
		}
		if got, err := snowmint.ParseOpaqueID(v.Text); !errors.Is(err, want) {
			t.Errorf("ParseOpaqueID(%q) (%s) = %+v, %v; want %v", v.Text, v.Reason, got, err, want)
		}
	}
	for _, v := range file.Unencodable {
		if got, err := snowmint.NewOpaqueID(v.KeyVersion, parseValue(t, v.Value)); err == nil {
			t.Errorf("NewOpaqueID(%d, %s) (%s) = %v; want an error", v.KeyVersion, v.Value, v.Reason, got)
		}
	}
}
