package snowmint_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// snippet returns the code block that follows `<!-- snippet: name -->` in clients/README.md.
func snippet(t *testing.T, name string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	pattern := regexp.MustCompile("(?s)<!-- snippet: " + regexp.QuoteMeta(name) + " -->\n```[a-z]*\n(.*?)```\n<!-- end snippet -->")
	match := pattern.FindSubmatch(readme)
	if match == nil {
		t.Fatalf("clients/README.md has no snippet %s", name)
	}
	return string(match[1])
}

func TestTheQuickStartIsTheREADMEsAndRuns(t *testing.T) {
	source, err := os.ReadFile(filepath.Join("examples", "quickstart", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if snippet(t, "go/examples/quickstart/main.go") != string(source) {
		t.Fatal("the Go quick start in clients/README.md differs from examples/quickstart/main.go: copy the file into the page")
	}

	srv := startServer(t, 9, "")
	exe := filepath.Join(t.TempDir(), "quickstart")
	if out, err := exec.Command("go", "build", "-o", exe, "./examples/quickstart").CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/quickstart: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), "SNOWMINT_ENDPOINTS="+srv.addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("quickstart: %v\n%s", err, out)
	}
	for _, want := range []string{"by worker 9, sequence", "batch: [", `{"id":"`} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("quickstart printed no %q:\n%s", want, out)
		}
	}
}
