//go:build tools

// Package tools keeps Jaeger's v2 binary (cmd/jaeger, an OpenTelemetry
// Collector distribution) in this module's dependency graph, so `go mod tidy`
// records every module it imports and `go build` can build it from go.sum alone.
package tools

import (
	_ "github.com/jaegertracing/jaeger/cmd/jaeger"
)
