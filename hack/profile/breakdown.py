#!/usr/bin/env python3
"""Where the operator's CPU goes, from folded stacks (hack/profile/cpu.sh):
   python3 hack/profile/breakdown.py target/profile/cpu-200.folded
Three tables. "task": which of the operator's tasks the CPU ran for. "self": each sample goes to the first category that matches its
stack from the leaf up (what the CPU was executing). "inclusive": the share
of samples whose stack passes through a part of the operator (what it was
doing it for); these overlap."""
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
TASKS = [
    ("watches: reflectors, decode, informers, handlers", r"SharedInformer<K>::run|Reflector<K>::run"),
    ("reconciles (the workers)", r"TfJobReconciler::sync|controller::Controller<R>::run"),
    ("event recorder", r"runtime::events"),
    ("HTTP/2 connection (every request's and watch's bytes, TLS)", r"h2::client::Connection|H2ClientFuture|h2::proto::connection"),
    ("runtime idle: park, epoll, scheduling", r"park|epoll_wait|Poll::poll|finish_task_switch"),
]
INCLUSIVE = [
    ("watch decode: Pods", [r"decode_event", r"v1::pod::Pod"]),
    ("  of which the Pod spec", [r"decode_event", r"v1::pod::Pod", r"pod_spec::PodSpec"]),
    ("watch decode: Services", [r"decode_event", r"service::Service"]),
    ("watch decode: TFJobs", [r"decode_event", r"types::TFJob"]),
    ("informers: store, indexes, handlers", [r"SharedInformer<K>::process"]),
    ("reconcile (all of it)", [r"TfJobReconciler::sync"]),
    ("  plan", [r"plan::plan$"]),
    ("    normalize (defaults)", [r"plan::plan$", r"defaults::normalize"]),
    ("  creates of Pods", [r"create::\{async_fn_env#0\}<k8s_openapi::[\w:]+::pod::Pod>"]),
    ("    response decoded", [r"create::\{async_fn_env#0\}<k8s_openapi::[\w:]+::pod::Pod>", r"from_trait"]),
    ("  creates of Services", [r"create::\{async_fn_env#0\}<k8s_openapi::[\w:]+::service::Service>"]),
    ("    response decoded", [r"create::\{async_fn_env#0\}<k8s_openapi::[\w:]+::service::Service>", r"from_trait"]),
    ("  status writes", [r"write_status::\{async_fn_env"]),
    ("    response decoded", [r"write_status::\{async_fn_env", r"from_trait"]),
    ("event recorder", [r"runtime::events"]),
    ("    response decoded", [r"runtime::events", r"from_trait"]),
    ("HTTP/2 connection task", [r"h2::proto::connection::Connection<T,P,B>::poll"]),
    ("log lines", [r"tracing_subscriber::fmt"]),
]


def main(path):
    rows, total = [], 0
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        rows.append((stack.split(";"), int(n)))
        total += int(n)
    print(f"{total / 1e9:.2f} CPU-seconds sampled\n")
    print("| self: executing | share |\n|---|---:|")
    counts = {}
    for frames, n in rows:
        cat = "other"
        for frame in reversed(frames):
            hit = next((c for c, p in SELF if re.search(p, frame)), None)
            if hit:
                cat = hit
                break
        counts[cat] = counts.get(cat, 0) + n
    for cat, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"| {cat} | {100 * n / total:.1f} % |")
    print("\n| task | share |\n|---|---:|")
    counts = {}
    for frames, n in rows:
        task = next((t for t, p in TASKS if any(re.search(p, f) for f in frames)), "other")
        counts[task] = counts.get(task, 0) + n
    for task, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"| {task} | {100 * n / total:.1f} % |")
    print("\n| inclusive: on behalf of | share |\n|---|---:|")
    for name, pats in INCLUSIVE:
        n = sum(n for frames, n in rows if all(any(re.search(p, f) for f in frames) for p in pats))
        print(f"| {name} | {100 * n / total:.1f} % |")


main(sys.argv[1])
