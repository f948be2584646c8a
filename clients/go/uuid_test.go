package snowmint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	snowmint "github.com/snowmint/snowmint/clients/go"
	pb "github.com/snowmint/snowmint/clients/go/internal/snowmintv1"
)

// uuidVectorFile is clients/testdata/uuid-vectors.json, made by the Rust implementation; its
// layouts are those of vectors.json.
type uuidVectorFile struct {
	Vectors []struct {
		Layout   string `json:"layout"`
		ID       string `json:"id"`
		Random   uint32 `json:"random"`
		UUID     string `json:"uuid"`
		UnixMS   string `json:"unix_ms"`
		Slot     uint32 `json:"slot"`
		Sequence uint32 `json:"sequence"`
	} `json:"vectors"`
	Invalid []struct {
		Layout string `json:"layout"`
		UUID   string `json:"uuid"`
		Kind   string `json:"kind"`
		Reason string `json:"reason"`
	} `json:"invalid"`
	Malformed []struct {
		Text   string `json:"text"`
		Reason string `json:"reason"`
	} `json:"malformed"`
}

func loadUUIDVectors(t *testing.T) (uuidVectorFile, map[string]snowmint.Layout) {
	t.Helper()
	_, layouts := loadVectors(t)
	data, err := os.ReadFile(filepath.Join("..", "testdata", "uuid-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file uuidVectorFile
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Vectors) == 0 || len(file.Invalid) == 0 || len(file.Malformed) == 0 {
		t.Fatal("the UUID vector file has no vectors")
	}
	return file, layouts
}

// uuidKind is the Kind of err's *UUIDError, or "" when it has none.
func uuidKind(err error) snowmint.UUIDErrorKind {
	var uerr *snowmint.UUIDError
	if errors.As(err, &uerr) {
		return uerr.Kind
	}
	return ""
}

func TestDecodeUUIDAgreesWithEveryVector(t *testing.T) {
	file, layouts := loadUUIDVectors(t)
	for _, v := range file.Vectors {
		layout, ok := layouts[v.Layout]
		if !ok {
			t.Fatalf("vector of unknown layout %q", v.Layout)
		}
		u, err := snowmint.ParseUUID(v.UUID)
		if err != nil {
			t.Errorf("ParseUUID(%q): %v", v.UUID, err)
			continue
		}
		if got := u.String(); got != v.UUID {
			t.Errorf("ParseUUID(%q).String() = %q", v.UUID, got)
		}
		if upper, err := snowmint.ParseUUID(strings.ToUpper(v.UUID)); err != nil || upper != u {
			t.Errorf("ParseUUID(%q) = %v, %v; want %v", strings.ToUpper(v.UUID), upper, err, u)
		}
		d, err := layout.DecodeUUID(u)
		if err != nil {
			t.Errorf("%s %s: %v", v.Layout, v.UUID, err)
			continue
		}
		got := [...]string{strconv.FormatUint(d.ID, 10), strconv.FormatInt(d.UnixMS, 10),
			strconv.Itoa(int(d.Slot)), strconv.Itoa(int(d.Sequence)), strconv.FormatUint(uint64(d.Random), 10)}
		want := [...]string{v.ID, v.UnixMS, strconv.Itoa(int(v.Slot)), strconv.Itoa(int(v.Sequence)),
			strconv.FormatUint(uint64(v.Random), 10)}
		if got != want {
			t.Errorf("%s %s: decoded (id, unix_ms, slot, sequence, random) %v, want %v", v.Layout, v.UUID, got, want)
			continue
		}
		// The ID decodes with the same layout to the same time, slot and sequence.
		id, err := snowmint.Decode(d.ID, layout)
		if err != nil || id.Tick != d.Tick || id.UnixMS != d.UnixMS || id.WorkerID != d.Slot || id.Sequence != d.Sequence {
			t.Errorf("%s %s: the ID decodes to %+v, %v; the UUID to %+v", v.Layout, v.UUID, id, err, d)
		}
		if !d.Time().Equal(id.Time()) {
			t.Errorf("%s %s: Time() %v, the ID's %v", v.Layout, v.UUID, d.Time(), id.Time())
		}
	}
	for _, v := range file.Invalid {
		layout, ok := layouts[v.Layout]
		if !ok {
			t.Fatalf("invalid entry of unknown layout %q", v.Layout)
		}
		u, err := snowmint.ParseUUID(v.UUID)
		if err != nil {
			t.Errorf("ParseUUID(%q) (%s): %v", v.UUID, v.Reason, err)
			continue
		}
		d, err := layout.DecodeUUID(u)
		if kind := uuidKind(err); string(kind) != v.Kind {
			t.Errorf("%s %s (%s): got %+v, %v (kind %q); want kind %q", v.Layout, v.UUID, v.Reason, d, err, kind, v.Kind)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "snowmint: ") {
			t.Errorf("error %q does not say it is snowmint's", err)
		}
	}
}

func TestParseUUIDRefusesEveryMalformedText(t *testing.T) {
	file, _ := loadUUIDVectors(t)
	for _, m := range file.Malformed {
		u, err := snowmint.ParseUUID(m.Text)
		if kind := uuidKind(err); kind != snowmint.UUIDKindText {
			t.Errorf("ParseUUID(%q) (%s) = %v, %v; want an error of kind text", m.Text, m.Reason, u, err)
		}
	}
	var u snowmint.UUID
	if err := u.UnmarshalText([]byte("{0190163d-8694-739b-aea5-6d2a3f0b1c4e}")); uuidKind(err) != snowmint.UUIDKindText {
		t.Errorf("UnmarshalText of braces: %v", err)
	}
}

func TestUUIDTextForms(t *testing.T) {
	var u snowmint.UUID
	if got := u.String(); got != "00000000-0000-0000-0000-000000000000" {
		t.Errorf("the nil UUID's text: %q", got)
	}
	for i := range u {
		u[i] = byte(0x11 * (i % 16))
	}
	u[0] = 0xab
	const text = "ab112233-4455-6677-8899-aabbccddeeff"
	if got := u.String(); got != text {
		t.Errorf("String() = %q, want %q", got, text)
	}
	for _, in := range []string{text, strings.ToUpper(text), "AB112233-4455-6677-8899-AaBbCcDdEeFf"} {
		if parsed, err := snowmint.ParseUUID(in); err != nil || parsed != u {
			t.Errorf("ParseUUID(%q) = %v, %v; want %v", in, parsed, err, u)
		}
	}
	// JSON: a string of the text form, both ways.
	encoded, err := json.Marshal(map[string]snowmint.UUID{"u": u})
	if err != nil || string(encoded) != `{"u":"`+text+`"}` {
		t.Fatalf("json.Marshal: %s, %v", encoded, err)
	}
	var decoded map[string]snowmint.UUID
	if err := json.Unmarshal(encoded, &decoded); err != nil || decoded["u"] != u {
		t.Fatalf("json.Unmarshal: %v, %v", decoded, err)
	}
}

func TestDecodeUUIDRefusesAnInvalidLayout(t *testing.T) {
	// Tick 2 of the default layout, slot 3, sequence 4.
	u, err := snowmint.ParseUUID("019b76da-a802-7000-80c0-0004ddc55174")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []snowmint.Layout{
		{Name: "no-time", TickMS: 1, WorkerBits: 10, SequenceBits: 12},
		{Name: "too-wide", TickMS: 1, TimeBits: 50, WorkerBits: 10, SequenceBits: 12},
		{Name: "no-ticks", TickMS: 0, TimeBits: 41, WorkerBits: 10, SequenceBits: 12},
	} {
		if _, err := l.DecodeUUID(u); uuidKind(err) != snowmint.UUIDKindLayout {
			t.Errorf("layout %+v: got %v, want kind layout", l, err)
		}
	}
	// A tick past the layout's last one is refused too.
	short := snowmint.SnowmintLayout(snowmint.DefaultEpochMS, 10, 12)
	short.TimeBits = 1
	if _, err := short.DecodeUUID(u); uuidKind(err) != snowmint.UUIDKindTick {
		t.Errorf("tick 2 in a 1-bit time field: got %v, want kind tick", err)
	}
	short.TimeBits = 2
	if d, err := short.DecodeUUID(u); err != nil || d.Tick != 2 || d.Slot != 3 || d.Sequence != 4 {
		t.Errorf("tick 2 in a 2-bit time field: got %+v, %v", d, err)
	}
}

// assertUUIDsIncrease fails the test unless uuids strictly increase, byte by byte and by their
// text forms.
func assertUUIDsIncrease(t *testing.T, uuids []snowmint.UUID) {
	t.Helper()
	for i := 1; i < len(uuids); i++ {
		if bytes.Compare(uuids[i-1][:], uuids[i][:]) >= 0 {
			t.Fatalf("UUIDs not strictly increasing at %d: %v then %v", i, uuids[i-1], uuids[i])
		}
		if uuids[i-1].String() >= uuids[i].String() {
			t.Fatalf("the text forms do not sort as the UUIDs at %d: %v then %v", i, uuids[i-1], uuids[i])
		}
	}
}

func TestUUIDsFromARealServer(t *testing.T) {
	srv := startServer(t, 11, "")
	client := newClient(t, []string{srv.addr})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	layout := snowmint.DefaultLayout()

	before := time.Now()
	u, err := client.NextUUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u[6]>>4 != 7 || u[8]>>6 != 0b10 {
		t.Fatalf("NextUUID gave %v: not a version 7 of the RFC 9562 variant", u)
	}
	d, err := layout.DecodeUUID(u)
	if err != nil {
		t.Fatalf("NextUUID gave %v: %v", u, err)
	}
	if d.Slot != 11 {
		t.Fatalf("NextUUID gave %v of slot %d, want 11", u, d.Slot)
	}
	if at := d.Time(); at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("NextUUID gave %v of time %v, not now", u, at)
	}
	if id, err := snowmint.Decode(d.ID, layout); err != nil || id.WorkerID != 11 || id.UnixMS != d.UnixMS {
		t.Fatalf("the ID of %v decodes to %+v, %v", u, id, err)
	}

	seen := map[snowmint.UUID]bool{u: true}
	last := u
	for _, n := range []int{1, 1000} {
		batch, err := client.BatchUUIDs(ctx, n)
		if err != nil {
			t.Fatalf("BatchUUIDs(%d): %v", n, err)
		}
		if len(batch) != n {
			t.Fatalf("BatchUUIDs(%d) gave %d UUIDs", n, len(batch))
		}
		assertUUIDsIncrease(t, append([]snowmint.UUID{last}, batch...))
		for _, b := range batch {
			if seen[b] {
				t.Fatalf("UUID %v handed out twice", b)
			}
			seen[b] = true
			if d, err := layout.DecodeUUID(b); err != nil || d.Slot != 11 {
				t.Fatalf("BatchUUIDs(%d) gave %v: %+v, %v", n, b, d, err)
			}
		}
		last = batch[len(batch)-1]
	}
	next, err := client.NextUUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	assertUUIDsIncrease(t, []snowmint.UUID{last, next})

	// The server's text forms are the client's.
	conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pb.NewIdServiceClient(conn).BatchUuids(ctx, &pb.BatchUuidsRequest{Count: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetUuids()) != 50 || len(resp.GetTexts()) != 50 {
		t.Fatalf("BatchUuids(50) answered %d UUIDs and %d texts", len(resp.GetUuids()), len(resp.GetTexts()))
	}
	for i, raw := range resp.GetUuids() {
		parsed, err := snowmint.ParseUUID(resp.GetTexts()[i])
		if err != nil || !bytes.Equal(parsed[:], raw) || parsed.String() != resp.GetTexts()[i] {
			t.Fatalf("the server's text %q of %x: parsed %v, %v", resp.GetTexts()[i], raw, parsed, err)
		}
	}

	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NextUUID(ctx); !errors.Is(err, snowmint.ErrClosed) {
		t.Fatalf("NextUUID after Close: got %v, want ErrClosed", err)
	}
	if _, err := client.BatchUUIDs(ctx, 3); !errors.Is(err, snowmint.ErrClosed) {
		t.Fatalf("BatchUUIDs after Close: got %v, want ErrClosed", err)
	}
}

func TestBatchUUIDsErrorsReturnAsTheyAreWithoutFailover(t *testing.T) {
	first := startServer(t, 12, "")
	second := startServer(t, 13, "", "--max-batch", "100")
	client := newClient(t, []string{first.addr, second.addr})
	_, err := client.BatchUUIDs(context.Background(), 0)
	if status.Code(err) != codes.InvalidArgument || errors.Is(err, snowmint.ErrUnavailable) {
		t.Fatalf("BatchUUIDs(0): got %v, want INVALID_ARGUMENT as it is", err)
	}
	if n := first.requests(t, "BatchUuids"); n != 1 {
		t.Fatalf("the first server saw %d BatchUuids calls, want 1", n)
	}
	if n := second.requests(t, "BatchUuids"); n != 0 {
		t.Fatalf("the error was failed over: the second server saw %d BatchUuids calls", n)
	}
	// Sizes no request can carry are refused before any call.
	for _, n := range []int{-1, math.MaxUint32 + 1} {
		if _, err := client.BatchUUIDs(context.Background(), n); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("BatchUUIDs(%d): got %v, want INVALID_ARGUMENT", n, err)
		}
	}
	if n := first.requests(t, "BatchUuids") + second.requests(t, "BatchUuids"); n != 1 {
		t.Fatalf("the servers saw %d BatchUuids calls, want 1", n)
	}
	// Over a server's --max-batch is its own INVALID_ARGUMENT.
	alone := newClient(t, []string{second.addr})
	if _, err := alone.BatchUUIDs(context.Background(), 101); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("BatchUUIDs(101) over --max-batch 100: got %v, want INVALID_ARGUMENT", err)
	}
}

func TestUUIDCallsFailOver(t *testing.T) {
	down := startServer(t, 14, "")
	down.kill()
	dir := t.TempDir()
	writeRefusingState(t, dir, 15)
	refusing := startServer(t, 15, dir)
	good := startServer(t, 16, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	layout := snowmint.DefaultLayout()

	// A server that is down, or one that refuses, listed first: the calls go to the good one.
	for _, first := range []*server{down, refusing} {
		client := newClient(t, []string{first.addr, good.addr}, snowmint.WithTimeout(500*time.Millisecond))
		for range 3 {
			u, err := client.NextUUID(ctx)
			if err != nil {
				t.Fatalf("NextUUID with a good server listed second: %v", err)
			}
			if d, err := layout.DecodeUUID(u); err != nil || d.Slot != 16 {
				t.Fatalf("NextUUID gave %v: %+v, %v; want slot 16", u, d, err)
			}
		}
		batch, err := client.BatchUUIDs(ctx, 10)
		if err != nil {
			t.Fatalf("BatchUUIDs with a good server listed second: %v", err)
		}
		assertUUIDsIncrease(t, batch)
		if d, err := layout.DecodeUUID(batch[0]); err != nil || d.Slot != 16 {
			t.Fatalf("BatchUUIDs gave %v: %+v, %v; want slot 16", batch[0], d, err)
		}
	}

	// Alone, a refusing server gives a retriable error.
	alone := newClient(t, []string{refusing.addr}, snowmint.WithTimeout(300*time.Millisecond))
	if _, err := alone.NextUUID(ctx); !errors.Is(err, snowmint.ErrUnavailable) || status.Code(err) != codes.Unavailable {
		t.Fatalf("NextUUID alone on a refusing server: got %v, want ErrUnavailable", err)
	}
	if _, err := alone.BatchUUIDs(ctx, 5); !errors.Is(err, snowmint.ErrUnavailable) || status.Code(err) != codes.Unavailable {
		t.Fatalf("BatchUUIDs alone on a refusing server: got %v, want ErrUnavailable", err)
	}
	// The caller's deadline wins.
	past, cancelPast := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancelPast()
	<-past.Done()
	if _, err := newClient(t, []string{good.addr}).NextUUID(past); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("NextUUID past the caller's deadline: got %v, want DEADLINE_EXCEEDED", err)
	}
}

// malformedServer answers UUIDs of the wrong length, or too few of them.
type malformedServer struct {
	pb.UnimplementedIdServiceServer
}

func (malformedServer) NextUuid(context.Context, *pb.NextUuidRequest) (*pb.NextUuidResponse, error) {
	return &pb.NextUuidResponse{Uuid: make([]byte, 15)}, nil
}

func (malformedServer) BatchUuids(_ context.Context, req *pb.BatchUuidsRequest) (*pb.BatchUuidsResponse, error) {
	if req.GetCount() == 2 {
		return &pb.BatchUuidsResponse{Uuids: [][]byte{make([]byte, 16)}}, nil
	}
	uuids := make([][]byte, req.GetCount())
	for i := range uuids {
		uuids[i] = make([]byte, 16)
	}
	uuids[len(uuids)-1] = make([]byte, 17)
	return &pb.BatchUuidsResponse{Uuids: uuids}, nil
}

func TestAMalformedUUIDAnswerIsAnError(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcServer := grpc.NewServer()
	pb.RegisterIdServiceServer(grpcServer, malformedServer{})
	go func() { _ = grpcServer.Serve(listener) }()
	t.Cleanup(grpcServer.Stop)

	client := newClient(t, []string{listener.Addr().String()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if u, err := client.NextUUID(ctx); status.Code(err) != codes.Internal {
		t.Errorf("NextUUID answered 15 bytes: got %v, %v; want an error of code Internal", u, err)
	}
	for _, n := range []int{1, 2, 3} {
		if uuids, err := client.BatchUUIDs(ctx, n); status.Code(err) != codes.Internal || uuids != nil {
			t.Errorf("BatchUUIDs(%d) answered badly: got %v, %v; want an error of code Internal", n, uuids, err)
		}
	}
}
