// Tests of WithToken and quota waits against real servers started with a tenants' policy
// (docs/operations/tenants.md): the token on every call, over plain text and TLS; the
// refusals returned as they are after one attempt; the retry delay of RESOURCE_EXHAUSTED
// waited out on the same endpoint; and a token never shown.
package snowmint_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

// policy is the tenants of these tests: a with a rate of 5 IDs a second and a burst of 1 (a
// second call at once waits about 200 ms), b that may only mint UUIDs, c with every
// permission and no rate, and d with a rate of 1 (a second call at once waits about 1 s).
const policy = `[tenant.a]
tokens = ["a"]
allow = ["ids", "uuids", "sequences"]
rate = 5
burst = 1

[tenant.b]
tokens = ["b"]
allow = ["uuids"]

[tenant.c]
tokens = ["c"]
allow = ["ids", "uuids", "sequences"]

[tenant.d]
tokens = ["d"]
allow = ["ids"]
rate = 1
burst = 1
`

// tenants is a policy file and a token file for policy in a temp dir, with the token of each
// tenant (made by `snowmint token new`) and one that is in neither file.
type tenants struct {
	args                []string // the serve flags that name both files
	a, b, c, d, unknown string
	policyFile, tokFile string
}

func newTenants(t *testing.T) *tenants {
	t.Helper()
	dir := t.TempDir()
	ts := &tenants{policyFile: filepath.Join(dir, "policy.toml"), tokFile: filepath.Join(dir, "tokens")}
	var lines []string
	for _, name := range []string{"a", "b", "c", "d", "unknown"} {
		out, err := exec.Command(binary(t), "token", "new", name).Output()
		if err != nil {
			t.Fatalf("snowmint token new %s: %v", name, err)
		}
		token, line, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		switch name {
		case "a":
			ts.a = token
		case "b":
			ts.b = token
		case "c":
			ts.c = token
		case "d":
			ts.d = token
		case "unknown":
			ts.unknown = token
			continue // not in the token file
		}
		lines = append(lines, line)
	}
	if err := os.WriteFile(ts.tokFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ts.policyFile, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	ts.args = []string{"--policy-file", ts.policyFile, "--token-file", ts.tokFile}
	return ts
}

// counter sums the series of the metric name whose labels include each of labels
// (`method="NextId"`), over the others.
func (s *server) counter(t *testing.T, name string, labels ...string) int {
	t.Helper()
	total := 0
lines:
	for _, line := range strings.Split(s.metrics(t), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, label := range labels {
			if !strings.Contains(line, label) {
				continue lines
			}
		}
		n, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		total += int(n)
	}
	return total
}

// Tenant c's token gets every call it may make, buffered NextID and a failover to a second
// server included: each attempt carries it (a call without it is UNAUTHENTICATED).
func TestATokenGoesWithEveryCall(t *testing.T) {
	ts := newTenants(t)
	dir := t.TempDir()
	writeRefusingState(t, dir, 31)
	refusing := startServer(t, 31, dir, ts.args...)
	srv := startServer(t, 32, "", append(ts.args, "--create-sequences-on-use")...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	client := newClient(t, []string{refusing.addr, srv.addr}, snowmint.WithToken(ts.c))
	if id, err := client.NextID(ctx); err != nil {
		t.Fatalf("NextID after a failover: %v", err)
	} else if d, _ := snowmint.Decode(id, snowmint.DefaultLayout()); d.WorkerID != 32 {
		t.Fatalf("an ID of worker %d, want 32", d.WorkerID)
	}
	if ids, err := client.Batch(ctx, 10); err != nil || len(ids) != 10 {
		t.Fatalf("Batch(10): %d IDs, %v", len(ids), err)
	}
	if _, err := client.NextUUID(ctx); err != nil {
		t.Fatalf("NextUUID: %v", err)
	}
	if uuids, err := client.BatchUUIDs(ctx, 3); err != nil || len(uuids) != 3 {
		t.Fatalf("BatchUUIDs(3): %d UUIDs, %v", len(uuids), err)
	}
	if _, err := client.NextValue(ctx, "orders"); err != nil {
		t.Fatalf("NextValue: %v", err)
	}
	if values, err := client.BatchValues(ctx, "orders", 3); err != nil || len(values) != 3 {
		t.Fatalf("BatchValues(3): %d values, %v", len(values), err)
	}
	buffered := newClient(t, []string{srv.addr}, snowmint.WithToken(ts.c), snowmint.WithBuffer(snowmint.DefaultBufferConfig()))
	for range 100 {
		if _, err := buffered.NextID(ctx); err != nil {
			t.Fatalf("buffered NextID: %v", err)
		}
	}
	prefetching := newClient(t, []string{srv.addr}, snowmint.WithToken(ts.c), snowmint.WithSequencePrefetch(10))
	for range 20 {
		if _, err := prefetching.NextValue(ctx, "orders"); err != nil {
			t.Fatalf("prefetched NextValue: %v", err)
		}
	}
	if n := srv.counter(t, "snowmint_unauthenticated_calls_total"); n != 0 {
		t.Fatalf("%d calls were UNAUTHENTICATED", n)
	}
}

// Over TLS the token goes as over plain text: grpc-go's per-RPC credentials that ask for
// transport security would refuse the plain-text connections of the other tests.
func TestATokenGoesOverTLS(t *testing.T) {
	ts := newTenants(t)
	dir := t.TempDir()
	roots := writeServerCertificate(t, dir)
	srv := startServer(t, 33, "", append(ts.args, "--tls-cert", filepath.Join(dir, "cert.pem"),
		"--tls-key", filepath.Join(dir, "key.pem"))...)
	tlsConfig := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := newClient(t, []string{"https://" + srv.addr}, snowmint.WithTLS(tlsConfig), snowmint.WithToken(ts.c))
	if _, err := client.Batch(ctx, 5); err != nil {
		t.Fatalf("Batch over TLS with a token: %v", err)
	}
	without := newClient(t, []string{"https://" + srv.addr}, snowmint.WithTLS(tlsConfig))
	if _, err := without.Batch(ctx, 5); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Batch over TLS without a token: got %v, want UNAUTHENTICATED", err)
	}
}

// writeServerCertificate writes a self-signed certificate for 127.0.0.1 and its key into dir
// (cert.pem, key.pem) and returns the pool that trusts it.
func writeServerCertificate(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "snowmint test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{"cert.pem": {Type: "CERTIFICATE", Bytes: der},
		"key.pem": {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return roots
}

// A wrong token and no token are UNAUTHENTICATED, a call the tenant may not make is
// PERMISSION_DENIED: each returned as it is after one attempt, not failed over to the second
// server. The error does not show the token.
func TestRefusedCredentialsReturnAfterOneAttempt(t *testing.T) {
	ts := newTenants(t)
	first := startServer(t, 34, "", ts.args...)
	second := startServer(t, 35, "", ts.args...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	endpoints := []string{first.addr, second.addr}

	wrong := newClient(t, endpoints, snowmint.WithToken(ts.unknown))
	_, err := wrong.NextID(ctx)
	if status.Code(err) != codes.Unauthenticated || errors.Is(err, snowmint.ErrUnavailable) {
		t.Fatalf("a wrong token: got %v, want UNAUTHENTICATED as it is", err)
	}
	if strings.Contains(err.Error(), ts.unknown) {
		t.Fatalf("the error shows the token: %v", err)
	}
	if _, err := newClient(t, endpoints).Batch(ctx, 3); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: got %v, want UNAUTHENTICATED", err)
	}
	if n := first.counter(t, "snowmint_unauthenticated_calls_total", `reason="unknown_token"`); n != 1 {
		t.Fatalf("the first server refused %d calls of an unknown token, want 1", n)
	}
	if n := first.counter(t, "snowmint_unauthenticated_calls_total", `reason="missing"`); n != 1 {
		t.Fatalf("the first server refused %d calls without credentials, want 1", n)
	}

	b := newClient(t, endpoints, snowmint.WithToken(ts.b))
	if _, err := b.NextID(ctx); status.Code(err) != codes.PermissionDenied || errors.Is(err, snowmint.ErrUnavailable) {
		t.Fatalf("tenant b's NextID: got %v, want PERMISSION_DENIED as it is", err)
	}
	if n := first.counter(t, "snowmint_tenant_refusals_total", `reason="permission"`, `tenant="b"`); n != 1 {
		t.Fatalf("the first server refused %d of b's calls, want 1", n)
	}
	if _, err := b.NextUUID(ctx); err != nil {
		t.Fatalf("tenant b's NextUUID: %v", err)
	}

	if n := second.counter(t, "snowmint_unauthenticated_calls_total") + second.counter(t, "snowmint_tenant_refusals_total") +
		second.counter(t, "snowmint_requests_total"); n != 0 {
		t.Fatalf("a refusal was failed over: the second server saw %d calls", n)
	}
}

// Tenant a's second batch at once is refused with a delay of about 200 ms, which the call
// waits out and then succeeds, on the same server: with two endpoints, the second gets no
// call. A caller's deadline nearer than the delay ends the call at once, RESOURCE_EXHAUSTED
// (waiting, it would have ended DEADLINE_EXCEEDED at the deadline).
func TestAQuotaRefusalIsWaitedOutOnTheSameServer(t *testing.T) {
	ts := newTenants(t)
	first := startServer(t, 36, "", ts.args...)
	second := startServer(t, 37, "", ts.args...)
	client := newClient(t, []string{first.addr, second.addr}, snowmint.WithToken(ts.a))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := client.Batch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := client.Batch(ctx, 1); err != nil {
		t.Fatalf("the second batch at once: %v", err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("the second batch took %v: it did not wait for the quota", took)
	}
	if n := first.counter(t, "snowmint_tenant_refusals_total", `reason="quota"`); n < 1 {
		t.Fatalf("the first server refused no call over the quota (%d)", n)
	}

	// Tenant d's second call at once has about 1 s to wait, past a deadline of 400 ms.
	d := newClient(t, []string{first.addr, second.addr}, snowmint.WithToken(ts.d))
	if _, err := d.Batch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancelShort()
	start = time.Now()
	_, err := d.Batch(short, 1)
	took := time.Since(start)
	if status.Code(err) != codes.ResourceExhausted || errors.Is(err, snowmint.ErrUnavailable) {
		t.Fatalf("a deadline nearer than the delay: got %v, want RESOURCE_EXHAUSTED as it is", err)
	}
	if took > 350*time.Millisecond {
		t.Fatalf("a deadline nearer than the delay: the call took %v, not ended at once", took)
	}

	if n := second.counter(t, "snowmint_requests_total") + second.counter(t, "snowmint_tenant_refusals_total"); n != 0 {
		t.Fatalf("a quota wait moved to the second server: it saw %d calls", n)
	}
}

// A token that is empty, holds a character outside '!' to '~' or is longer than 4,096 is
// refused by New, with an error that does not show it; the longest and the edge characters
// are taken. A client's printed form and its option's never show the token.
func TestATokenIsCheckedAndNeverShown(t *testing.T) {
	ctx := context.Background()
	long := strings.Repeat("Tk7~", snowmint.MaxTokenLength/4)
	for _, token := range []string{"", "secret token", "secret\ttoken", "sécret-token", "secret\x7ftoken", long + "Z"} {
		client, err := snowmint.New(ctx, []string{"127.0.0.1:1"}, snowmint.WithToken(token))
		if err == nil {
			_ = client.Close()
			t.Errorf("New took the token %q", token)
			continue
		}
		if token != "" && strings.Contains(err.Error(), token[:6]) {
			t.Errorf("New's error shows the token: %v", err)
		}
	}
	for _, token := range []string{"!", "~", long, "smt_a-B.c~d!e"} {
		client, err := snowmint.New(ctx, []string{"127.0.0.1:1"}, snowmint.WithToken(token))
		if err != nil {
			t.Errorf("New refused a token of %d characters: %v", len(token), err)
			continue
		}
		_ = client.Close()
	}

	const token = "smt_Never-Shown-7f3a"
	option := snowmint.WithToken(token)
	client := newClient(t, []string{"127.0.0.1:1"}, option, snowmint.WithBuffer(snowmint.DefaultBufferConfig()))
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		for what, value := range map[string]any{"client": client, "option": option} {
			if shown := fmt.Sprintf(verb, value); strings.Contains(shown, token) ||
				strings.Contains(shown, fmt.Sprintf("%x", token)) {
				t.Errorf("the %s printed with %s shows the token: %s", what, verb, shown)
			}
		}
	}
	_, err := client.Batch(ctx, 1)
	if err == nil || strings.Contains(err.Error(), token) {
		t.Fatalf("a failed call's error shows the token (or it did not fail): %v", err)
	}
}
