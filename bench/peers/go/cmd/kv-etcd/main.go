// Load generator of the `replication` suite for etcd: the same load as
// `mmapkit-kv load` (a fixed number of writes of `value-size`-byte values,
// keys k{client}-{i}, shared by `clients` concurrent clients, each waiting
// for its write to be acknowledged before sending the next; the latency of
// each write from its send to its answer), through etcd's own Go client
// (go.etcd.io/etcd/client/v3, gRPC) to the cluster's leader, found with
// Status, as `mmapkit-kv load` writes to its leader. The clients share up
// to 32 gRPC connections (HTTP/2 multiplexes their calls), as etcd's own
// `benchmark put --conns` does. Prints the same JSON line as
// `mmapkit-kv load --json`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type report struct {
	Clients    int     `json:"clients"`
	Writes     int     `json:"writes"`
	Seconds    float64 `json:"seconds"`
	WritesPerS float64 `json:"writes_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
}

func fail(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "kv-etcd: "+f+"\n", a...)
	os.Exit(1)
}

func dial(endpoint string) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		fail("connect %s: %v", endpoint, err)
	}
	return c
}

// leader is the client URL of the endpoint that leads, waiting up to 20 s for one.
func leader(endpoints []string) string {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, ep := range endpoints {
			c := dial(ep)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := c.Status(ctx, ep)
			cancel()
			c.Close()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return ep
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	fail("no leader among %v within 20 s", endpoints)
	return ""
}

func main() {
	endpoints := flag.String("endpoints", "", "comma-separated client URLs")
	clients := flag.Int("clients", 1, "concurrent clients")
	writes := flag.Int("writes", 1000, "writes in all")
	valueSize := flag.Int("value-size", 100, "bytes per value")
	flag.Parse()
	if *endpoints == "" {
		fail("--endpoints is required")
	}
	ep := leader(strings.Split(*endpoints, ","))
	conns := make([]*clientv3.Client, min(*clients, 32))
	for i := range conns {
		conns[i] = dial(ep)
	}
	value := strings.Repeat("v", *valueSize)
	var next atomic.Int64
	lat := make([][]float64, *clients)
	errs := make(chan error, *clients)
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			kv := conns[c%len(conns)]
			for {
				i := int(next.Add(1) - 1)
				if i >= *writes {
					return
				}
				t := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := kv.Put(ctx, fmt.Sprintf("k%d-%d", c, i), value)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				lat[c] = append(lat[c], time.Since(t).Seconds())
			}
		}(c)
	}
	wg.Wait()
	seconds := time.Since(t0).Seconds()
	close(errs)
	if err := <-errs; err != nil {
		fail("put: %v", err)
	}
	var all []float64
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Float64s(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return all[int(math.Round(float64(len(all)-1)*p))] * 1e3
	}
	out, _ := json.Marshal(report{*clients, len(all), seconds, float64(len(all)) / seconds, pct(0.5), pct(0.99), pct(1)})
	fmt.Println(string(out))
	for _, c := range conns {
		c.Close()
	}
}
