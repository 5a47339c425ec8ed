// Command go-workqueue is the client-go peer of benches/workqueue.rs: it runs
// the same workloads against k8s.io/client-go/util/workqueue and prints one
// JSON object per workload, so the Rust bench can compute ratios in the same run.
//
// Each run reports wall-clock ops/s and ops per CPU-second (process CPU
// time from getrusage): on a shared, loaded machine the second is the fairer
// measure, since waiting for a core is not the queue's cost. Usage:
// go-workqueue -n 1000000 -workload 8_workers_hot_keys (one run, one line).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/util/workqueue"
)

type result struct {
	Workload   string  `json:"workload"`
	Ops        int64   `json:"ops"`
	Gets       int64   `json:"gets"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	OpsPerS    float64 `json:"ops_per_s"`
	OpsPerCPUS float64 `json:"ops_per_cpu_s"`
	// Hot keys only: how long the producers' adds took (sampled).
	AddLatencyUs *latency `json:"add_latency_us,omitempty"`
}

// latency: percentiles of the producers' sampled Add calls, in microseconds.
type latency struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// sampleEvery: one Add in this many is timed (the Rust bench does the same).
const sampleEvery = 64

func latencyOf(ns []int64) *latency {
	if len(ns) == 0 {
		return nil
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	at := func(q float64) float64 {
		return float64(ns[int(math.Round(float64(len(ns)-1)*q))]) / 1e3
	}
	return &latency{at(0.5), at(0.99), at(0.999), at(1)}
}

// clock is wall time and process CPU time (all threads), in seconds.
type clock struct{ wall, cpu float64 }

func now() clock {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	return clock{float64(time.Now().UnixNano()) / 1e9, cpu}
}

func measure(workload string, ops, gets int64, start clock) result {
	end := now()
	wall, cpu := end.wall-start.wall, end.cpu-start.cpu
	return result{workload, ops, gets, wall, cpu, float64(ops) / wall, float64(ops) / cpu, nil}
}

// newQueue is what controllers use: the rate-limiting queue with the default
// controller rate limiter (add/get/done go straight to the underlying queue).
func newQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("default/job-%d", i)
	}
	return out
}

// singleThread: rounds of adding `depth` distinct keys then get+done each;
// one op = one add+get+done cycle.
func singleThread(workload string, n, depth int) result {
	ks := keys(depth)
	rounds := n / depth
	q := newQueue()
	start := now()
	for r := 0; r < rounds; r++ {
		for _, k := range ks {
			q.Add(k)
		}
		for range ks {
			k, _ := q.Get()
			q.Done(k)
		}
	}
	ops := int64(rounds * depth)
	res := measure(workload, ops, ops, start)
	q.ShutDown()
	return res
}

// hotKeys: 2 producers add N keys in total, 80% of them to 10 hot keys and the
// rest to 10,000 cold keys; `workers` workers get+done until the queue is
// drained. One op = one queue call (add, get or done): how many adds collapse
// depends on how fast workers keep up, so counting adds alone would reward
// slow workers.
func hotKeys(n, workers int) result {
	hot := keys(10)
	cold := keys(10_010)[10:]
	seq := make([]string, n)
	r := rand.New(rand.NewSource(42))
	for i := range seq {
		if r.Intn(100) < 80 {
			seq[i] = hot[r.Intn(len(hot))]
		} else {
			seq[i] = cold[r.Intn(len(cold))]
		}
	}
	q := newQueue()
	var gets atomic.Int64
	var wg sync.WaitGroup
	start := now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Counted locally, added once: a shared counter bumped on every
			// Get would be measured as the queue's cost (ours does the same).
			var mine int64
			defer func() { gets.Add(mine) }()
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				mine++
				q.Done(k)
			}
		}()
	}
	var pw sync.WaitGroup
	const producers = 2
	sampled := make([][]int64, producers)
	for p := 0; p < producers; p++ {
		pw.Add(1)
		go func(p int, part []string) {
			defer pw.Done()
			mine := make([]int64, 0, len(part)/sampleEvery+1)
			for i, k := range part {
				if i%sampleEvery == 0 {
					t := time.Now()
					q.Add(k)
					mine = append(mine, int64(time.Since(t)))
				} else {
					q.Add(k)
				}
			}
			sampled[p] = mine
		}(p, seq[p*n/producers:(p+1)*n/producers])
	}
	pw.Wait()
	for q.Len() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
	q.ShutDownWithDrain()
	wg.Wait()
	g := gets.Load()
	res := measure("8_workers_hot_keys", int64(n)+2*g, g, start)
	res.AddLatencyUs = latencyOf(append(sampled[0], sampled[1]...))
	return res
}

func main() {
	n := flag.Int("n", 1_000_000, "items per workload")
	workload := flag.String("workload", "", "run only this workload (once); empty: each workload once")
	flag.Parse()
	// One run per call: the Rust bench calls this once per repetition, taking
	// turns with its own runs, and takes the medians of both sides itself.
	workloads := []struct {
		name string
		run  func() result
	}{
		{"single_thread_add_get_done", func() result { return singleThread("single_thread_add_get_done", *n, 1000) }},
		{"single_thread_1m_deep", func() result { return singleThread("single_thread_1m_deep", *n, *n) }},
		{"8_workers_hot_keys", func() result { return hotKeys(*n, 8) }},
	}
	enc := json.NewEncoder(os.Stdout)
	ran := false
	for _, w := range workloads {
		if *workload != "" && w.name != *workload {
			continue
		}
		ran = true
		if err := enc.Encode(w.run()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if !ran {
		fmt.Fprintf(os.Stderr, "unknown workload %q\n", *workload)
		os.Exit(2)
	}
}
