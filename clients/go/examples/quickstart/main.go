// Command quickstart mints IDs from the snowmint servers in $SNOWMINT_ENDPOINTS
// (comma-separated host:port) and decodes one.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	endpoints := strings.Split(os.Getenv("SNOWMINT_ENDPOINTS"), ",")
	client, err := snowmint.New(ctx, endpoints, snowmint.WithBuffer(snowmint.DefaultBufferConfig()))
	if err != nil {
		return err
	}
	defer client.Close()

	// errors.Is(err, snowmint.ErrUnavailable) means every server refused: retry later.
	id, err := client.NextID(ctx)
	if err != nil {
		return err
	}
	ids, err := client.Batch(ctx, 3)
	if err != nil {
		return err
	}
	d, err := snowmint.Decode(id, snowmint.DefaultLayout())
	if err != nil {
		return err
	}
	fmt.Printf("id %d: minted %s by worker %d, sequence %d\n",
		id, d.Time().Format(time.RFC3339Nano), d.WorkerID, d.Sequence)
	fmt.Println("batch:", ids)

	// In JSON an ID is a string: JavaScript's numbers lose precision past 2^53.
	out, err := json.Marshal(struct {
		ID uint64 `json:"id,string"`
	}{id})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}
