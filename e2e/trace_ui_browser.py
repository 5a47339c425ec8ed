#!/usr/bin/env python3
"""Open a page in headless Chromium, wait until a JavaScript expression is
true, then print the page's DOM and save a screenshot; then, if asked,
click a link and print where it led.

    trace_ui_browser.py URL UNTIL_JS TIMEOUT_SECONDS SCREENSHOT.png [CLICK_ID]

With CLICK_ID, after the DOM the script clicks the element with that id
(a real click, dispatched by the browser at the element's centre) and
prints a line `---- clicked: <url> <HTTP status>` followed by the text of
the page it led to.

Used by tests/e2e/trace_ui.rs for the trace UI, whose page holds a
server-sent-events stream open: `chromium --dump-dom` dumps at the load
event (before any event arrives) and `--virtual-time-budget` never ends
while a request is open, so this drives the browser itself over the
DevTools protocol on a pipe (`--remote-debugging-pipe`: NUL-separated JSON
on file descriptors 3 and 4; no WebSocket, standard library only).

Exit status: 0 when UNTIL_JS became true (DOM on stdout), 1 on timeout (the
DOM and screenshot are still written, so the failure can be read), 2 when
the browser cannot be started. `CHROMIUM` names the browser binary.
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, binary):
        self.profile = tempfile.mkdtemp(prefix="trace-ui-chromium-")
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        args = [
            binary,
            "--headless",
            "--remote-debugging-pipe",
            "--user-data-dir=" + self.profile,
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--window-size=1280,900",
            "about:blank",
        ]
        # Chromium's sandbox refuses to run as root without user namespaces.
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")

        def wire():
            # Copy both ends out of the way first: either may sit on 3 or 4.
            read_end, write_end = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        # preexec_fn runs before close_fds, which keeps pass_fds open.
        self.proc = subprocess.Popen(
            args,
            pass_fds=(3, 4),
            preexec_fn=wire,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buffer = b""
        self.next_id = 0

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        wanted = self.next_id
        while True:
            reply = self.read()
            if reply.get("id") == wanted:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def read(self):
        while b"\0" not in self.buffer:
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self):
        try:
            self.send("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


# What `while_navigating` returns when the page it asked was replaced
# under the question.
NAVIGATING = object()


def while_navigating(evaluate, expression):
    """`evaluate`, on a page that is navigating away: Chromium answers
    "Inspected target navigated or closed" (-32000) when the document the
    expression ran in is replaced before it returns, which is what the click
    is waiting for, not a failure. Returns NAVIGATING then."""
    try:
        return evaluate(expression)
    except RuntimeError as e:
        if "Inspected target navigated or closed" in str(e):
            return NAVIGATING
        raise


def clicked(browser, session, evaluate, element_id):
    """Clicks the element as a user would (mouse events at its centre) and
    prints where the browser went: its URL, the HTTP status, the text."""
    box = evaluate(
        f"(() => {{ const r = document.getElementById({json.dumps(element_id)}).getBoundingClientRect();"
        " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
    )
    before = evaluate("location.href")
    for kind in ("mousePressed", "mouseReleased"):
        browser.send(
            "Input.dispatchMouseEvent",
            {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1},
            session,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if while_navigating(evaluate, "location.href") not in (before, NAVIGATING) and (
            while_navigating(evaluate, "document.readyState") == "complete"
        ):
            break
        time.sleep(0.2)
    status = evaluate(
        "(performance.getEntriesByType('navigation')[0] || {}).responseStatus || 0"
    )
    print(f"---- clicked: {evaluate('location.href')} {status}")
    print(evaluate("document.body ? document.body.innerText : ''") or "")


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    url, until, timeout, screenshot = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    click = sys.argv[5] if len(sys.argv) == 6 else None
    binary = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not binary:
        print("chromium not found: `make test-ui` installs it (apt-get install chromium)", file=sys.stderr)
        sys.exit(2)
    browser = Browser(binary)
    try:
        target = browser.send("Target.createTarget", {"url": url})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

        def evaluate(expression):
            result = browser.send(
                "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session
            )
            return result.get("result", {}).get("value")

        deadline = time.monotonic() + timeout
        done = False
        while time.monotonic() < deadline:
            if evaluate(f"Boolean({until})"):
                done = True
                break
            time.sleep(0.2)
        # Let the last box's highlight (0.8 s) fade before the picture.
        time.sleep(1)
        dom = evaluate("document.documentElement.outerHTML") or ""
        shot = browser.send("Page.captureScreenshot", {"format": "png"}, session)
        with open(screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        print(dom)
        if not done:
            print(f"timed out after {timeout:.0f} s waiting for: {until}", file=sys.stderr)
            sys.exit(1)
        if click:
            clicked(browser, session, evaluate, click)
    finally:
        browser.close()


if __name__ == "__main__":
    main()
