// Benchmark 3's client-go peer: time from process start to a synced Pod
// informer over every namespace, and the process's peak RSS.
//
// The same work as benches/sync.rs asks of our informer and kube-runtime's
// watcher + reflector: a SharedInformerFactory with no resync, one Pod
// informer, wait until synced. With -strip, a transform drops managedFields
// before storage (as our reflector does by default). By default the typed
// clientset asks for protobuf for built-in kinds (it is generated with
// --prefers-protobuf); -json asks for JSON, the only format the Rust peers
// (and every client of a CRD) can use. KUBE_FEATURE_WatchListClient=true in
// the environment turns on client-go's streaming list. Prints one JSON line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// vmHWM reads the peak resident set size (kB) from /proc/self/status.
func vmHWM() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			if err == nil {
				return kb
			}
		}
	}
	return -1
}

func main() {
	start := time.Now()
	strip := flag.Bool("strip", false, "drop managedFields before storing")
	jsonWire := flag.Bool("json", false, "ask for JSON (the clientset's default for built-in kinds is protobuf)")
	flag.Parse()

	config, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to load the kubeconfig:", err)
		os.Exit(1)
	}
	// client-go's default 5 QPS would throttle paginated LISTs: the Rust
	// peers have no client-side limit, so lift it here too.
	config.QPS = 1e6
	config.Burst = 1e6
	if *jsonWire {
		config.ContentType = "application/json"
		config.AcceptContentTypes = "application/json"
	}
	client := kubernetes.NewForConfigOrDie(config)
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Core().V1().Pods().Informer()
	if *strip {
		_ = informer.SetTransform(func(obj interface{}) (interface{}, error) {
			if pod, ok := obj.(*corev1.Pod); ok {
				pod.ManagedFields = nil
			}
			return obj, nil
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	// cache.WaitForCacheSync polls every 100 ms, which would round the
	// measured time up to the next tenth of a second: poll every millisecond.
	synced := func(context.Context) (bool, error) { return informer.HasSynced(), nil }
	if err := wait.PollUntilContextCancel(ctx, time.Millisecond, true, synced); err != nil {
		fmt.Fprintln(os.Stderr, "failed to sync:", err)
		os.Exit(1)
	}
	seconds := time.Since(start).Seconds()
	out, _ := json.Marshal(map[string]interface{}{
		"seconds":  seconds,
		"objects":  len(informer.GetStore().ListKeys()),
		"vmhwm_kb": vmHWM(),
	})
	fmt.Println(string(out))
}
