package snowmint_test

import (
	"context"
	"testing"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

func TestBadEndpointsAreRefusedAtNew(t *testing.T) {
	for _, endpoint := range []string{"", "http://", "https://", "ftp://host:1", "http://host:1/path"} {
		if client, err := snowmint.New(context.Background(), []string{endpoint}); err == nil {
			_ = client.Close()
			t.Errorf("New accepted endpoint %q", endpoint)
		}
	}
	if _, err := snowmint.New(context.Background(), nil); err == nil {
		t.Error("New accepted no endpoints")
	}
}
