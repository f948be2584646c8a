package snowmint

import (
	"slices"
	"testing"
	"time"
)

// simulate runs a caller at perSecond for the given time against a buffer whose refills are
// answered after roundTrip, in simulated time: the IDs minted, used, and the calls that
// found the buffer empty after the first second.
func simulate(cfg BufferConfig, perSecond int, length, roundTrip time.Duration) (minted, used, empty int) {
	start := time.Unix(1_000_000, 0)
	b := newBuffer(cfg, start)
	type inFlight struct {
		arrives, sent time.Time
		asked         uint32
	}
	var flying []inFlight
	var wakeAt time.Time
	next := uint64(0)
	nextCall := start
	waiting := false
	decide := func(now time.Time) {
		refills, at := b.decideLocked(now)
		for _, n := range refills {
			minted += int(n)
			flying = append(flying, inFlight{now.Add(roundTrip), now, n})
		}
		wakeAt = at
	}
	for now := start; now.Before(start.Add(length)); now = now.Add(time.Millisecond) {
		again := !wakeAt.IsZero() && !wakeAt.After(now)
		kept := flying[:0]
		for _, f := range flying {
			if f.arrives.After(now) {
				kept = append(kept, f)
				continue
			}
			ids := make([]uint64, f.asked)
			for i := range ids {
				ids[i] = next
				next++
			}
			b.endedLocked(f.asked, f.sent, ids, nil, now)
			again = true
		}
		flying = kept
		if !now.Before(nextCall) || waiting {
			if _, ok := b.popLocked(now); ok {
				used++
				if waiting {
					b.waiting--
					waiting = false
				}
				nextCall = nextCall.Add(time.Second / time.Duration(perSecond))
				b.countdown--
				again = again || b.countdown <= 0
			} else if !waiting {
				waiting = true
				b.waiting++
				again = true
				if now.Sub(start) >= time.Second {
					empty++
				}
			}
		}
		if again {
			decide(now)
		}
	}
	return minted, used, empty
}

func TestABufferUsedTenTimesASecondMintsAboutAThirdMoreAndNeverWaitsAtAnExpiry(t *testing.T) {
	minted, used, empty := simulate(DefaultBufferConfig(), 10, time.Minute, 100*time.Millisecond)
	if used < 595 || empty != 0 || minted > used*3/2+20 {
		t.Fatalf("%d minted, %d used, %d calls found the buffer empty after the first second", minted, used, empty)
	}
}

func TestABufferSendsNothingBeforeItsFirstUseNorAfterItsLast(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	b := newBuffer(DefaultBufferConfig(), start)
	if refills, at := b.decideLocked(start); len(refills) != 0 || !at.IsZero() {
		t.Fatalf("before any use: refills %v, next decision at %v", refills, at)
	}
	b.waiting = 1
	if refills, _ := b.decideLocked(start); len(refills) != 1 || refills[0] != 1 {
		t.Fatalf("one caller waiting: refills %v, want one of 1 ID", refills)
	}
	b.waiting = 0
	b.endedLocked(1, start, []uint64{7}, nil, start.Add(time.Millisecond))
	if _, ok := b.popLocked(start.Add(2 * time.Millisecond)); !ok {
		t.Fatal("no ID")
	}
	for s := 1; s < 10; s++ {
		if refills, _ := b.decideLocked(start.Add(time.Duration(s) * time.Second)); len(refills) != 0 {
			t.Fatalf("%d s after the only use: refills %v", s, refills)
		}
	}
}

func TestPausesComeOnlyOnceEveryEndpointWasTried(t *testing.T) {
	var got []time.Duration
	for k := range 4 {
		got = append(got, pauseBefore(k, 2))
	}
	want := []time.Duration{0, 0, 10 * time.Millisecond, 20 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("two endpoints: pauses %v, want %v", got, want)
	}
	got = got[:0]
	for k := range 9 {
		got = append(got, pauseBefore(k, 1))
	}
	ms := time.Millisecond
	want = []time.Duration{0, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 320 * ms, 320 * ms}
	if !slices.Equal(got, want) {
		t.Fatalf("one endpoint: pauses %v, want %v", got, want)
	}
}
