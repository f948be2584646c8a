// Command bench measures the IDs per second one caller gets from a buffered client, to set
// beside `snowmint bench --method buffered --concurrency 1` (the Rust client):
//
//	go run ./cmd/bench -addr 127.0.0.1:50051 -duration 5s
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "server endpoints, comma-separated")
	duration := flag.Duration("duration", 5*time.Second, "how long to measure")
	flag.Parse()

	ctx := context.Background()
	client, err := snowmint.New(ctx, strings.Split(*addr, ","), snowmint.WithBuffer(snowmint.DefaultBufferConfig()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	// One ID first, so the connection is open before the clock starts.
	if _, err := client.NextID(ctx); err != nil {
		log.Fatal(err)
	}
	var count int
	start := time.Now()
	for time.Since(start) < *duration {
		// Check the clock once per 1,024 IDs, not per ID.
		for range 1024 {
			if _, err := client.NextID(ctx); err != nil {
				log.Fatal(err)
			}
		}
		count += 1024
	}
	elapsed := time.Since(start)
	fmt.Printf("go client, buffered, 1 caller: %d IDs in %.2f s = %.0f IDs/s\n",
		count, elapsed.Seconds(), float64(count)/elapsed.Seconds())
}
