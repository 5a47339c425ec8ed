//go:build tools

// Package tools keeps the four Kubernetes commands the local control plane
// needs in this module's dependency graph, so `go mod tidy` records every
// module they import and `go build` can build them from go.sum alone.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
