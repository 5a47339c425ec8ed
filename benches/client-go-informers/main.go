// Command client-go-informers is the bench's fair limit for watching
// (issue #42): client-go's informers on exactly what tfjob-operator watches
// at its defaults — every TFJob, and the Pods and Services that carry the
// label `training.kubeflow.org/job-name` — cached with the same cuts ours
// makes (no managedFields; a Pod without its spec, a Service as its
// metadata), each event's job key put on a workqueue that one worker drains
// doing nothing else. It runs beside the bare client (benches/e2e, peer
// `raw-watching`), so it sees that run's churn; its CPU and peak RSS are
// what watching costs client-go, to set beside the watching part of ours.
//
// Prints "informers: synced" once every cache has synced, and on SIGTERM
// the events each informer handled, then exits.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

// The label ours selects its children by (src/api/constants.rs).
const jobNameLabel = "training.kubeflow.org/job-name"

var tfjobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "tfjobs"}

// counted enqueues each event's job key, as a controller's handler does.
type counted struct {
	n     atomic.Int64
	queue workqueue.TypedRateLimitingInterface[string]
	key   func(obj any) (string, bool)
}

func (c *counted) handle(obj any) {
	c.n.Add(1)
	if key, ok := c.key(obj); ok {
		c.queue.Add(key)
	}
}

func (c *counted) handlers() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    c.handle,
		UpdateFunc: func(_, obj any) { c.handle(obj) },
		DeleteFunc: c.handle,
	}
}

// ownerJob is the key of the job a child belongs to, from its label.
func ownerJob(obj any) (string, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := metaOf(obj)
	if err != nil {
		return "", false
	}
	job, ok := m.GetLabels()[jobNameLabel]
	return m.GetNamespace() + "/" + job, ok
}

func metaOf(obj any) (metav1.Object, error) {
	if o, ok := obj.(metav1.Object); ok {
		return o, nil
	}
	return nil, fmt.Errorf("not an object: %T", obj)
}

func jobKey(obj any) (string, bool) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	return key, err == nil
}

// slim caches a Pod as its metadata and status and a Service as its
// metadata, neither with managedFields, as ours does
// (src/tfjob/children/cached.rs).
func slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		o.ManagedFields = nil
		o.Spec = corev1.PodSpec{}
	case *corev1.Service:
		o.ManagedFields = nil
		o.Spec = corev1.ServiceSpec{}
	}
	return obj, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "informers:", err)
		os.Exit(1)
	}
}

func run() error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// No client-side limit, as ours at its defaults; Pods and Services in
	// protobuf, as ours asks for them (TFJobs are JSON: a custom resource).
	config.QPS, config.Burst = -1, 0
	core := *config
	core.ContentType = "application/vnd.kubernetes.protobuf"
	core.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	kube, err := kubernetes.NewForConfig(&core)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	go func() {
		for {
			key, quit := queue.Get()
			if quit {
				return
			}
			queue.Forget(key)
			queue.Done(key)
		}
	}()

	children := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = jobNameLabel }),
		informers.WithTransform(slim))
	jobs := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)

	pods := &counted{queue: queue, key: ownerJob}
	services := &counted{queue: queue, key: ownerJob}
	tfjobEvents := &counted{queue: queue, key: jobKey}
	if _, err := children.Core().V1().Pods().Informer().AddEventHandler(pods.handlers()); err != nil {
		return err
	}
	if _, err := children.Core().V1().Services().Informer().AddEventHandler(services.handlers()); err != nil {
		return err
	}
	if _, err := jobs.ForResource(tfjobs).Informer().AddEventHandler(tfjobEvents.handlers()); err != nil {
		return err
	}
	children.Start(ctx.Done())
	jobs.Start(ctx.Done())
	for what, synced := range children.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return fmt.Errorf("%v did not sync", what)
		}
	}
	for what, synced := range jobs.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return fmt.Errorf("%v did not sync", what)
		}
	}
	fmt.Fprintln(os.Stderr, "informers: synced")
	<-ctx.Done()
	fmt.Fprintf(os.Stderr, "informers: handled %d Pod, %d Service and %d TFJob events\n",
		pods.n.Load(), services.n.Load(), tfjobEvents.n.Load())
	children.Shutdown()
	jobs.Shutdown()
	return nil
}
