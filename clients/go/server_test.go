package snowmint_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// server is a real snowmint binary started for one test, in standalone mode on free loopback
// ports. It is killed when the test ends, whatever the outcome.
type server struct {
	addr   string // gRPC host:port
	admin  string // admin HTTP host:port
	cmd    *exec.Cmd
	exited chan struct{}

	mu   sync.Mutex
	logs []string // the last lines of stderr, for failure messages
}

// binary is the snowmint executable: $SNOWMINT_BIN, or the debug build of this checkout
// (test.sh builds it).
func binary(t *testing.T) string {
	t.Helper()
	path := os.Getenv("SNOWMINT_BIN")
	if path == "" {
		path = filepath.Join("..", "..", "target", "debug", "snowmint")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("no snowmint binary at %s (set SNOWMINT_BIN, or run cargo build --locked --bin snowmint): %v", abs, err)
	}
	return abs
}

// startServer runs `snowmint serve` as worker workerID with its state in stateDir (a fresh
// temp dir when empty) and waits until it logs its listening addresses.
func startServer(t *testing.T, workerID int, stateDir string, extra ...string) *server {
	t.Helper()
	if stateDir == "" {
		stateDir = t.TempDir()
	}
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--log-format", "json", "--state-dir", stateDir, "--worker-id", strconv.Itoa(workerID)}, extra...)
	cmd := exec.Command(binary(t), args...)
	// Its own process group, so teardown kills anything it starts; and killed with us should
	// the test binary die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	s := &server{cmd: cmd, exited: make(chan struct{})}
	t.Cleanup(s.kill)

	type listening struct{ grpc, admin string }
	found := make(chan listening, 1)
	go func() {
		// Read every line until the pipe closes, so the server never blocks on a full pipe.
		scanner := bufio.NewScanner(stderr)
		scanner.Buffer(make([]byte, 64*1024), 1024*1024)
		for scanner.Scan() {
			line := scanner.Text()
			s.mu.Lock()
			s.logs = append(s.logs[max(0, len(s.logs)-49):], line)
			s.mu.Unlock()
			var fields struct {
				Grpc  string `json:"grpc_addr"`
				Admin string `json:"admin_addr"`
			}
			if json.Unmarshal([]byte(line), &fields) == nil && fields.Grpc != "" && fields.Admin != "" {
				select {
				case found <- listening{fields.Grpc, fields.Admin}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		close(s.exited)
	}()
	select {
	case addrs := <-found:
		s.addr, s.admin = addrs.grpc, addrs.admin
		return s
	case <-s.exited:
		t.Fatalf("snowmint exited before listening; stderr:\n%s", s.stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("snowmint did not listen within 30 s; stderr:\n%s", s.stderr())
	}
	return nil
}

func (s *server) stderr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.logs, "\n")
}

// kill sends SIGKILL to the server's process group and waits for it to exit.
func (s *server) kill() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
}

// metrics is the server's /metrics text.
func (s *server) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// issued is the server's snowmint_ids_issued_total: the IDs it handed out.
func (s *server) issued(t *testing.T) int {
	t.Helper()
	for _, line := range strings.Split(s.metrics(t), "\n") {
		if value, ok := strings.CutPrefix(line, "snowmint_ids_issued_total "); ok {
			n, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return int(n)
		}
	}
	t.Fatal("no snowmint_ids_issued_total")
	return 0
}

// requests sums the server's snowmint_requests_total series for method, over every code.
func (s *server) requests(t *testing.T, method string) int {
	t.Helper()
	total := 0
	for _, line := range strings.Split(s.metrics(t), "\n") {
		if strings.HasPrefix(line, "snowmint_requests_total{") && strings.Contains(line, fmt.Sprintf("method=%q", method)) {
			n, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			total += int(n)
		}
	}
	return total
}

// writeRefusingState writes the state file of workerID in dir with a reservation an hour
// ahead of the clock: a server started on it must not mint for that hour, and refuses with
// UNAVAILABLE.
func writeRefusingState(t *testing.T, dir string, workerID int) {
	t.Helper()
	now := time.Now()
	until := now.Add(time.Hour)
	state := fmt.Sprintf(`{"version":1,"worker_id":%d,`+
		`"layout":{"name":"snowmint","epoch_ms":1767225600000,"tick_ms":1,"time_bits":41,"worker_bits":10,"sequence_bits":12,"order":"worker_sequence"},`+
		`"reserved_until_ms":%d,"reserved_until":%q,"saved_at":%q}`,
		workerID, until.UnixMilli(), until.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("worker-%d.json", workerID)), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
}
