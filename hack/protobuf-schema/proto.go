package main

// The wire layout of a Go API type, read from its package's generated.proto.
//
// Up to Kubernetes 1.34 the gogo-generated Go code carried compiled-in
// protobuf descriptors (`Descriptor()`), which this command read. From 1.35
// on k8s.io/api and k8s.io/apimachinery are generated without them (no
// gogo registration, no descriptor bytes): the only statement of the wire
// layout besides the Go struct tags is the generated.proto each package
// ships. It is a small, regular subset of proto2 (top-level messages whose
// fields are `optional T name = N;`, `repeated T name = N;` or
// `map<string, V> name = N;`), read here, and anything outside that subset
// is an error rather than a guess.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// protoField is one field of a message as generated.proto declares it.
type protoField struct {
	number   int
	name     string
	repeated bool   // `repeated`, or a map (a map is a repeated entry on the wire)
	typ      string // scalar name (string, int32, ...) or fully qualified message (.k8s.io.api.core.v1.PodSpec)
	isMap    bool
	mapKey   string
	mapValue string // as typ
}

// protoMessage is a message of generated.proto: its name and fields by number.
type protoMessage struct {
	name     string
	byNumber map[int]*protoField
}

var (
	protoFiles = map[string]map[string]*protoMessage{} // Go package path -> message name -> message
	fieldLine  = regexp.MustCompile(`^(optional|repeated) ([A-Za-z0-9_.]+) ([A-Za-z0-9_]+) = ([0-9]+);$`)
	mapLine    = regexp.MustCompile(`^map<([a-z0-9]+), ?([A-Za-z0-9_.]+)> ([A-Za-z0-9_]+) = ([0-9]+);$`)
	scalars    = map[string]bool{"string": true, "bool": true, "int32": true, "int64": true, "double": true, "bytes": true, "float": true, "uint32": true, "uint64": true, "sint32": true, "sint64": true, "fixed32": true, "fixed64": true}
)

// protoMessageOf is the generated.proto message of a Go API type.
func protoMessageOf(t reflect.Type) *protoMessage {
	msgs, ok := protoFiles[t.PkgPath()]
	if !ok {
		msgs = readProtoFile(t.PkgPath())
		protoFiles[t.PkgPath()] = msgs
	}
	m, ok := msgs[t.Name()]
	if !ok {
		fail("%s.%s: no message %s in the package's generated.proto", t.PkgPath(), t.Name(), t.Name())
	}
	return m
}

// readProtoFile parses `<dir of pkg>/generated.proto`.
func readProtoFile(pkg string) map[string]*protoMessage {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", pkg).Output()
	if err != nil {
		fail("go list %s: %v", pkg, err)
	}
	path := strings.TrimSpace(string(out)) + "/generated.proto"
	f, err := os.Open(path)
	if err != nil {
		fail("%v", err)
	}
	defer f.Close()

	protoPkg := ""
	msgs := map[string]*protoMessage{}
	var cur *protoMessage
	qualify := func(typ string) string {
		if scalars[typ] {
			return typ
		}
		if strings.HasPrefix(typ, ".") {
			return typ
		}
		if strings.Contains(typ, ".") {
			return "." + typ
		}
		return "." + protoPkg + "." + typ
	}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	inComment := false
	for lineNo := 1; scanner.Scan(); lineNo++ {
		line := strings.TrimSpace(scanner.Text())
		where := fmt.Sprintf("%s:%d", path, lineNo)
		switch {
		case inComment:
			inComment = !strings.HasSuffix(line, "*/")
		case strings.HasPrefix(line, "/*"):
			inComment = !strings.HasSuffix(line, "*/")
		case line == "" || strings.HasPrefix(line, "//"):
		case strings.HasPrefix(line, "syntax = "):
			if line != `syntax = "proto2";` {
				fail("%s: %s (only proto2 is read)", where, line)
			}
		case strings.HasPrefix(line, "package "):
			protoPkg = strings.TrimSuffix(strings.TrimPrefix(line, "package "), ";")
		case strings.HasPrefix(line, "import ") || strings.HasPrefix(line, "option go_package"):
		case cur == nil && strings.HasPrefix(line, "message ") && strings.HasSuffix(line, " {"):
			name := strings.TrimSuffix(strings.TrimPrefix(line, "message "), " {")
			cur = &protoMessage{name: name, byNumber: map[int]*protoField{}}
			if _, dup := msgs[name]; dup {
				fail("%s: message %s declared twice", where, name)
			}
			msgs[name] = cur
		case cur != nil && line == "}":
			cur = nil
		case cur != nil:
			var pf protoField
			if m := fieldLine.FindStringSubmatch(line); m != nil {
				pf = protoField{name: m[3], repeated: m[1] == "repeated", typ: qualify(m[2])}
				pf.number, _ = strconv.Atoi(m[4])
			} else if m := mapLine.FindStringSubmatch(line); m != nil {
				pf = protoField{name: m[3], repeated: true, isMap: true, mapKey: m[1], mapValue: qualify(m[2])}
				pf.number, _ = strconv.Atoi(m[4])
			} else {
				fail("%s: not a field this reader knows: %q", where, line)
			}
			if prev, dup := cur.byNumber[pf.number]; dup {
				fail("%s: %s.%s reuses number %d of %s", where, cur.name, pf.name, pf.number, prev.name)
			}
			cur.byNumber[pf.number] = &pf
		default:
			fail("%s: not a line this reader knows: %q", where, line)
		}
	}
	if err := scanner.Err(); err != nil {
		fail("reading %s: %v", path, err)
	}
	if protoPkg == "" || cur != nil {
		fail("%s: no package line, or a message left open", path)
	}
	return msgs
}
