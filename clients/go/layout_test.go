package snowmint_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

// vectorFile is clients/testdata/vectors.json, made by the Rust implementation.
type vectorFile struct {
	Layouts map[string]struct {
		EpochMS      string `json:"epoch_ms"`
		TickMS       int64  `json:"tick_ms"`
		TimeBits     uint   `json:"time_bits"`
		WorkerBits   uint   `json:"worker_bits"`
		SequenceBits uint   `json:"sequence_bits"`
		Order        string `json:"order"`
	} `json:"layouts"`
	Vectors []struct {
		Layout   string `json:"layout"`
		ID       string `json:"id"`
		UnixMS   string `json:"unix_ms"`
		Tick     string `json:"tick"`
		WorkerID uint32 `json:"worker_id"`
		Sequence uint32 `json:"sequence"`
		Time     string `json:"time"`
	} `json:"vectors"`
	Invalid []struct {
		Layout string `json:"layout"`
		ID     string `json:"id"`
		Reason string `json:"reason"`
	} `json:"invalid"`
}

func loadVectors(t *testing.T) (vectorFile, map[string]snowmint.Layout) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file vectorFile
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	layouts := map[string]snowmint.Layout{}
	for name, l := range file.Layouts {
		epoch, err := strconv.ParseInt(l.EpochMS, 10, 64)
		if err != nil {
			t.Fatalf("layout %s: epoch_ms %q: %v", name, l.EpochMS, err)
		}
		order := snowmint.WorkerSequence
		if l.Order == "sequence_worker" {
			order = snowmint.SequenceWorker
		}
		layout := snowmint.Layout{Name: name, EpochMS: epoch, TickMS: l.TickMS, TimeBits: l.TimeBits,
			WorkerBits: l.WorkerBits, SequenceBits: l.SequenceBits, Order: order}
		if order.String() != l.Order {
			t.Fatalf("layout %s: unknown order %q", name, l.Order)
		}
		layouts[name] = layout
		// The presets built into the client are the ones in the file.
		if preset, err := snowmint.NamedLayout(name); err == nil && preset != layout {
			t.Errorf("NamedLayout(%q) = %+v, the vectors say %+v", name, preset, layout)
		}
	}
	if snowmint.SnowmintLayout(snowmint.DefaultEpochMS, 10, 12) != layouts["snowmint"] {
		t.Errorf("DefaultLayout() is not the vectors' snowmint layout")
	}
	return file, layouts
}

func TestDecodeAgreesWithEveryVector(t *testing.T) {
	file, layouts := loadVectors(t)
	if len(file.Vectors) == 0 || len(file.Invalid) == 0 {
		t.Fatal("the vector file has no vectors")
	}
	for _, v := range file.Vectors {
		layout, ok := layouts[v.Layout]
		if !ok {
			t.Fatalf("vector of unknown layout %q", v.Layout)
		}
		id, err := strconv.ParseUint(v.ID, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		d, err := snowmint.Decode(id, layout)
		if err != nil {
			t.Errorf("%s %s: %v", v.Layout, v.ID, err)
			continue
		}
		got := [...]string{strconv.FormatInt(d.UnixMS, 10), strconv.FormatUint(d.Tick, 10),
			strconv.Itoa(int(d.WorkerID)), strconv.Itoa(int(d.Sequence)), d.Time().Format("2006-01-02T15:04:05.000Z07:00")}
		want := [...]string{v.UnixMS, v.Tick, strconv.Itoa(int(v.WorkerID)), strconv.Itoa(int(v.Sequence)), v.Time}
		if got != want || d.ID != id {
			t.Errorf("%s %s: decoded (unix_ms, tick, worker, sequence, time) %v, want %v", v.Layout, v.ID, got, want)
		}
	}
	for _, v := range file.Invalid {
		id, err := strconv.ParseUint(v.ID, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := snowmint.Decode(id, layouts[v.Layout]); !errors.Is(err, snowmint.ErrNotThisLayout) {
			t.Errorf("%s %s (%s): decoded to %+v, %v; want ErrNotThisLayout", v.Layout, v.ID, v.Reason, d, err)
		}
	}
}

func TestUnknownLayoutNamesTheKnownOnes(t *testing.T) {
	_, err := snowmint.NamedLayout("uuid")
	if err == nil || !strings.Contains(err.Error(), "twitter, discord, instagram, sonyflake") {
		t.Fatalf("NamedLayout(uuid): got %v, want an error listing the known layouts", err)
	}
}
