#!/usr/bin/env python3
"""Where the operator's CPU goes, from folded stacks (hack/profile/cpu.sh):
   python3 hack/profile/breakdown.py target/profile/cpu-200.folded
   python3 hack/profile/breakdown.py target/profile/cpu-1000.folded --json OUT --jobs 1000
(the second writes them for a results file: hack/profile/cpu.sh, PROFILE_RECORD).
Three tables. "task": which of the operator's tasks the CPU ran for. "self": each sample goes to the first category that matches its
stack from the leaf up (what the CPU was executing). "inclusive": the share
of samples whose stack passes through a part of the operator (what it was
doing it for); these overlap."""
import json
import re
import sys

SELF = [
    ("kernel: scheduling, epoll, futex", r"finish_task_switch|schedule|epoll_wait|futex"),
    ("kernel: other (syscalls, net)", r"_\[k\]$"),
    ("malloc/free (glibc)", r"malloc|_int_free|libc_free|realloc|unlink_chunk|tcache|cfree"),
    ("memcpy/memcmp", r"memcpy|memmove|memcmp|memset"),
    ("TLS crypto", r"aws_lc|ring::|aes|gcm|chacha|sha2|GFp|poly1305"),
    ("protobuf decode (ours)", r"runtime::(client::)?protobuf"),
    ("serde_json", r"serde_json"),
    ("serde of k8s types", r"k8s_openapi|serde_core|serde::"),
    ("HTTP/2 (h2, hpack)", r"^h2::|<h2::|hpack"),
    ("hyper", r"hyper"),
    ("rustls", r"rustls"),
    ("tracing", r"tracing"),
    ("tokio, mio", r"tokio|mio"),
    ("the operator's own code", r"tfjob_operator"),
    ("btree, hash", r"btree|hash"),
]
# Which task the CPU ran for: the first that matches a stack, in this order.
# A task is named by its future's frames, whole (`Reflector<K>::run`) or, in
# the fat-LTO `dist` binary, inlined into a generic frame (`poll<…informer…>`).
TASKS = [
    ("watches: reflectors, decode, informers, handlers",
     r"SharedInformer<K>::run|Reflector<K>::run|cache::informer::\{impl#2\}::run"),
    ("reconciles: the workers and their writes",
     r"TfJobReconciler|runtime::controller::\{impl#2\}::run|controller::Controller<R>::run|tfjob::apply::"),
    ("Event writes (the recorder)", r"runtime::events"),
    ("HTTP/2 connections: every request's and watch's bytes, TLS",
     r"h2::client::Connection|H2ClientFuture|h2::proto::connection|http2::Connection"),
    ("runtime idle: park, epoll, scheduling", r"park|epoll_wait|Poll::poll|finish_task_switch"),
]
# On whose behalf, for the phases issue #42 names (decode, cache, reconcile,
# plan, serialize, TLS, Event writes): a sample counts for a row when, for
# every pattern, some frame of its stack matches (a "!" pattern: no frame
# does). Rows overlap.
TLS = r"^<?(tokio_rustls|rustls)::|^(read_io|write_io|process_new_packets|complete_io)<|aws_lc|^ring::"
INCLUSIVE = [
    ("watch: decode, every kind", [r"decode_event"]),
    ("  Pods (protobuf, into the cached view)", [r"decode_event", r"CachedPod"]),
    ("  Services (protobuf; metadata)", [r"decode_event", r"CachedService"]),
    ("  TFJobs (JSON)", [r"decode_event", r"types::TFJob"]),
    ("watch: the rest of the informers' tasks (reading the streams, queue, store, indexes, handlers)",
     [r"SharedInformer<K>::run|cache::informer::\{impl#2\}::run", r"!decode_event"]),
    ("reconcile: the whole of it", [r"TfJobReconciler::sync"]),
    ("  observe (read the caches, claim the children)", [r"TfJobReconciler::sync", r"observe::Observer"]),
    ("  plan", [r"plan::plan_into|::plan::plan$"]),
    ("  creates and deletes of children", [r"Applier::apply_one|unread::create"]),
    ("  status writes", [r"write_status"]),
    ("Event writes (the recorder)", [r"runtime::events"]),
    ("serialize: request bodies", [r"serde_json::ser::|as serde_core::ser::Serialize>::serialize|Serializer"]),
    ("TLS: rustls and its crypto", [TLS]),
    ("HTTP/2 connection task (framing, TLS inside)", [r"h2::proto::connection::Connection<T,P,B>::poll"]),
    ("runtime idle (park, epoll)", [r"park_internal|epoll_wait"]),
    ("log lines", [r"tracing_subscriber::fmt"]),
]


def tables(path):
    """The three tables from a folded file: (CPU-seconds sampled, {name: [(row, share %)]})."""
    rows, total = [], 0
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        rows.append((stack.split(";"), int(n)))
        total += int(n)
    if total == 0:
        sys.exit(f"{path}: no samples")
    share = lambda n: round(100 * n / total, 1)
    executing = {}
    for frames, n in rows:
        cat = "other"
        for frame in reversed(frames):
            hit = next((c for c, p in SELF if re.search(p, frame)), None)
            if hit:
                cat = hit
                break
        executing[cat] = executing.get(cat, 0) + n
    tasks = {}
    for frames, n in rows:
        task = next((t for t, p in TASKS if any(re.search(p, f) for f in frames)), "other")
        tasks[task] = tasks.get(task, 0) + n
    def holds(frames, pat):
        if pat.startswith("!"):
            return not any(re.search(pat[1:], f) for f in frames)
        return any(re.search(pat, f) for f in frames)

    inclusive = [
        (name, share(sum(n for frames, n in rows if all(holds(frames, p) for p in pats))))
        for name, pats in INCLUSIVE
    ]
    by_share = lambda counts: [(k, share(n)) for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    # perf's cpu-clock samples are weighted in nanoseconds.
    return total / 1e9, {"task": by_share(tasks), "self": by_share(executing), "inclusive": inclusive}


HEADINGS = {"task": "task", "self": "self: executing", "inclusive": "inclusive: on behalf of"}


def main(argv):
    """breakdown.py FOLDED [--json OUT --jobs N]: print the tables, or write
    them as a results file's `results` (e2e/record.py --json)."""
    seconds, found = tables(argv[0])
    if len(argv) == 5 and argv[1] == "--json" and argv[3] == "--jobs":
        doc = {"profile": {"workload": "jobs", "jobs": int(argv[4]), "sampled_cpu_s": round(seconds, 2),
                           **{k: [{"what": w, "share_pct": s} for w, s in v] for k, v in found.items()}}}
        with open(argv[2], "w") as out:
            json.dump(doc, out, indent=2)
            out.write("\n")
        return
    print(f"{seconds:.2f} CPU-seconds sampled")
    for key, rows in found.items():
        print(f"\n| {HEADINGS[key]} | share |\n|---|---:|")
        for what, s in rows:
            print(f"| {what} | {s:.1f} % |")


main(sys.argv[1:])
