#!/usr/bin/env python3
"""End to end: the status page (GET /) in a real browser.

`tally up --brokers` (a cluster of one beside a `tally broker`) under
generated load (`tally produce --gen --rate`) and a trickle of HTTP reads;
then Debian's headless Chromium opens http://.../ and runs the page:

1. The JSON the page reads answers: /v1/status (what runs, no alert),
   /v1/status/history (samples with events routed), /v1/status/hot-posts
   (posts with increments), the embedded files with their types and ETags
   (a 304 on revalidation).
2. The page as Chromium leaves it (--dump-dom): every plot drawn (a
   canvas) with a non-empty series for each of its lines, a lag sparkline
   per input partition, the member table equal to /v1/cluster (members,
   and the partitions each owns), the hottest posts listed, no banner.
3. A screenshot, saved as status-page.png in the work directory.
4. The broker stopped: /v1/status says kafka_lost and the page shows the
   red banner (status-page-kafka-lost.png).

Chromium is required: without it the test fails saying how to install it
(scripts/deps does). About 40 s.

  python3 e2e_status_page.py --tally build/tally [--work-dir DIR] [--chromium PATH]
"""

import html.parser
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import TestFailure, log  # noqa: E402

PARTITIONS = 4
CHARTS = ["chart-throughput", "chart-dlq", "chart-lag", "chart-freshness", "chart-http", "chart-commit"]


class Dom(html.parser.HTMLParser):
    """The elements of a dumped DOM that the checks read: by id, the body's
    attributes, the member rows, the hot-post rows, the sparklines."""

    def __init__(self, text):
        super().__init__()
        self.by_id = {}
        self.body = {}
        self.members = []
        self.hot = []
        self.sparks = []
        self.banner_codes = []
        self._in_banner = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if "id" in a:
            self.by_id[a["id"]] = a
        if tag == "tr" and "data-member" in a:
            self.members.append(a)
        if tag == "tr" and "data-post" in a:
            self.hot.append(a)
        if tag == "div" and a.get("class") == "spark":
            self.sparks.append(a)
        if a.get("id") == "banner":
            self._in_banner = 1
        elif self._in_banner and tag == "div" and "data-code" in a:
            self.banner_codes.append(a["data-code"])

    def handle_endtag(self, tag):
        pass


def chromium(h, exe, url, what, extra):
    """Runs headless Chromium on `url` with `extra` arguments; its stdout."""
    argv = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--user-data-dir=%s" % h.path("chromium-profile"), "--window-size=1400,1250",
            # Virtual time: the page's timers run at once, its fetches are real.
            "--virtual-time-budget=8000"] + extra + [url]
    t0 = time.monotonic()
    with open(h.path("chromium.log"), "a") as err:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, timeout=90)
    if h.path("chromium.log") not in h.logs:
        h.logs.append(h.path("chromium.log"))
    if p.returncode != 0:
        raise TestFailure("chromium (%s) exited %d (see chromium.log)" % (what, p.returncode))
    log("chromium %s: %.1f s" % (what, time.monotonic() - t0))
    return p.stdout.decode(errors="replace")


def check_json(h, client):
    s = client.get("/v1/status").json()
    h.check(s["partitions"] == PARTITIONS and s["input_topics"] == ["tally.events"],
            "/v1/status names what runs: %s" % s)
    h.check(s["alerts"] == [] and s["ready"] is True, "/v1/status under a healthy load: %s" % s)
    hist = client.get("/v1/status/history").json()
    n = len(hist["t"])
    h.check(n >= 5 and all(len(hist[c]) == n for c in ("routed", "applied", "lag", "http_p99_ms")),
            "/v1/status/history: %d samples, columns of that length" % n)
    h.check(any(v and v > 0 for v in hist["routed"]), "/v1/status/history shows no event routed")
    h.check(len(hist["partitions"]) == PARTITIONS,
            "/v1/status/history: %d partition series, want %d" % (len(hist["partitions"]), PARTITIONS))
    hot = client.get("/v1/status/hot-posts").json()
    h.check(len(hot["posts"]) == 20 and hot["posts"][0]["increments"] >= hot["posts"][-1]["increments"] > 0,
            "/v1/status/hot-posts: %s" % hot["posts"][:3])
    page = client.get("/")
    h.check(page.status == 200 and page.headers.get("content-type", "").startswith("text/html"),
            "GET / is the HTML page: %d %s" % (page.status, page.headers.get("content-type")))
    js = client.get("/status/dygraph.min.js")
    etag = js.headers.get("etag", "")
    h.check(js.status == 200 and js.headers.get("content-type", "").startswith("text/javascript")
            and len(js.body) > 100000 and etag, "the embedded dygraphs: %d, %s, %d bytes, ETag %r" % (
                js.status, js.headers.get("content-type"), len(js.body), etag))
    again = client.request("GET", "/status/dygraph.min.js", headers={"If-None-Match": etag})
    h.check(again.status == 304 and not again.body, "revalidating dygraphs: %d" % again.status)
    h.checkpoint("the page's JSON and files")


def check_page(h, dom, cluster):
    h.check(dom.body.get("data-ready") == "true" and int(dom.body.get("data-refreshes", "0")) >= 1,
            "the page never drew (body %s)" % dom.body)
    for cid in CHARTS:
        a = dom.by_id.get(cid, {})
        points = [int(x) for x in a.get("data-points", "").split(",") if x]
        h.check(a.get("data-drawn") == "true", "plot %s has no canvas: %s" % (cid, a))
        h.check(points and all(p > 0 for p in points), "plot %s has an empty series: points %s" % (cid, points))
    h.check(len(dom.sparks) == PARTITIONS and all(int(s.get("data-points", "0")) > 0 for s in dom.sparks),
            "lag sparklines: %s" % dom.sparks)
    want = [(m["member"], ",".join(str(p) for p in m["owns"]), ",".join(str(p) for p in m["standby"]))
            for m in cluster["members"]]
    got = [(r["data-member"], r.get("data-owns", ""), r.get("data-standby", "")) for r in dom.members]
    h.check(got == want, "the member table %s is not /v1/cluster's %s" % (got, want))
    h.check(len(dom.hot) == 20, "the page lists %d hottest posts, want 20" % len(dom.hot))
    h.check(dom.by_id.get("banner", {}).get("hidden") is not None and not dom.banner_codes,
            "a banner under a healthy load: %s" % dom.banner_codes)
    h.checkpoint("the page as Chromium drew it")


def main():
    args = tallyctl.parse_args(__doc__, extra=lambda ap: ap.add_argument(
        "--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "",
        help="path of Chromium (Debian's chromium)"))
    if not args.chromium or not shutil.which(args.chromium):
        print("e2e_status_page: Chromium is not installed; install Debian's chromium "
              "(scripts/deps does: apt-get install --no-install-recommends chromium)", flush=True)
        raise SystemExit(1)
    with tallyctl.Harness(args, "e2e_status_page", default_seed=4242) as h:
        broker, brokers = h.start_broker(partitions=PARTITIONS)
        http_port = tallyctl.free_port()
        up, client = h.start_up(brokers, h.path("state"), http_port, partitions=PARTITIONS)
        h.spawn("tally produce", [h.tally, "produce", "--brokers", brokers, "--gen", 200000, "--rate", 2000,
                                  "--seed", h.seed], "produce.log")
        # A trickle of reads, so that the HTTP plot has requests and a p99.
        stop = threading.Event()

        def reads():
            reader = tallyctl.Http("127.0.0.1:%d" % http_port)
            i = 0
            while not stop.is_set():
                i += 1
                reader.try_get("/v1/posts/%d/counts" % (1 + i % 500))
                time.sleep(0.02)

        t = threading.Thread(target=reads, daemon=True)
        t.start()
        try:
            def enough():
                hist = client.get("/v1/status/history").json()
                routed = sum(1 for v in hist["routed"] if v and v > 0)
                p99 = sum(1 for v in hist["http_p99_ms"] if v is not None)
                commits = sum(1 for v in hist["commit_p99_ms"] if v is not None)
                return routed >= 5 and p99 >= 3 and commits >= 3

            tallyctl.wait_until("5 s of load in /v1/status/history", enough, timeout=60, interval=0.5, proc=up)
            check_json(h, client)

            url = "http://127.0.0.1:%d/" % http_port
            dom = Dom(chromium(h, args.chromium, url, "--dump-dom", ["--dump-dom"]))
            cluster = client.get("/v1/cluster").json()
            check_page(h, dom, cluster)
            shot = h.path("status-page.png")
            chromium(h, args.chromium, url, "--screenshot", ["--screenshot=%s" % shot])
            h.check(os.path.getsize(shot) > 20000, "the screenshot %s is nearly empty" % shot)
            log("screenshot: %s" % shot)
        finally:
            stop.set()
            t.join(timeout=5)

        # Kafka lost: the broker stopped under the running process.
        broker.stop(grace=5, sig=signal.SIGKILL)

        def kafka_lost():
            codes = [a["code"] for a in client.get("/v1/status").json()["alerts"]]
            return "kafka_lost" in codes

        tallyctl.wait_until("/v1/status to say kafka_lost", kafka_lost, timeout=40, interval=0.5, proc=up)
        shot = h.path("status-page-kafka-lost.png")
        dom = Dom(chromium(h, args.chromium, url, "--dump-dom (Kafka lost)", ["--dump-dom"]))
        h.check("kafka_lost" in dom.banner_codes and dom.by_id.get("banner", {}).get("hidden") is None,
                "no kafka_lost banner on the page with the broker gone: %s" % dom.banner_codes)
        chromium(h, args.chromium, url, "--screenshot (Kafka lost)", ["--screenshot=%s" % shot])
        h.checkpoint("the red banner when Kafka is lost")
        h.finish_checks("e2e_status_page")


if __name__ == "__main__":
    main()
