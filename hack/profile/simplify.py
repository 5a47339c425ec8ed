#!/usr/bin/env python3
"""Shortens folded stacks (inferno-collapse-perf output) for a flame graph
that reads and stays small: drops generic arguments (`poll<Very<Long>>` ->
`poll`), drops frames that are only plumbing (panic guards, closures,
tokio's task harness), and merges a frame repeated in a row. Reads stdin,
writes stdout; the sample counts are untouched."""
import re
import sys

PLUMBING = re.compile(
    r"^(call_once|call_mut|do_call|catch_unwind|poll_future|poll_inner|with_mut|with|"
    r"try_with|set|budget|with_budget|enter_runtime|set_scheduler|\{closure#\d+\}|"
    r"\{async_block#\d+\}|\{async_fn#\d+\}|<core::panic::unwind_safe::AssertUnwindSafe.*|"
    r"<tracing::instrument::Instrumented.*|<core::pin::Pin.*|<alloc::boxed::Box.*|"
    r"<core::future::poll_fn::PollFn.*|poll|poll2|\[unknown\])$"
)
GENERIC = re.compile(r"(?<=[\w\]>})])<[^<>]*>")


def simplify(frame):
    prev = None
    while prev != frame:
        prev, frame = frame, GENERIC.sub("", frame)
    return re.sub(r"::h[0-9a-f]{16}$", "", frame)


for line in sys.stdin:
    stack, _, count = line.rstrip("\n").rpartition(" ")
    out = []
    for frame in stack.split(";"):
        frame = simplify(frame)
        if PLUMBING.match(frame) or (out and out[-1] == frame):
            continue
        out.append(frame)
    print(";".join(out), count)
