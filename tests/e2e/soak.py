#!/usr/bin/env python3
"""Soak: steady load through ingest and queries for a bounded time, while the
resident memory of `tally up` is sampled; at the end every count equals the
reference model, nothing failed, and memory stayed flat.

The load, for --seconds (default 150):
- kcat publishes a seeded event stream at --rate events/s (keyed as SPEC
  section 2 recommends), over a bounded id space, so the state stops growing
  once every key exists and only a leak can make memory grow;
- a share of the commutative events (repost, comment, view, mention, dm: pure
  increments, so their order against the rest does not matter) goes through
  `POST /v1/events` in batches instead, which must answer 202;
- --clients keep-alive HTTP clients read all the time: single and batch post
  counts, user counts, unread, like edges, "viewed", watermarks; every answer
  must be 200 with a JSON body.

`tally up` runs with small budgets (block cache, memtables, "viewed" tables,
the counter read cache) so that the caches reach their configured size
during the warm-up: the read cache's pages are taken as records are first
read or committed, so a 64 MiB one would still be growing at the end.

Checks at the end:
- no HTTP answer other than 200/202, no connection error;
- no dead letter (tally.dlq is empty, tally_router_invalid_total is 0), no
  ERROR line in the log of `tally up`;
- lag 0, then every post's and user's counts and the checked unread kinds
  equal the model;
- RSS flat: the run is cut in thirds; the first is warm-up (caches and
  memtables filling, allocator arenas of every thread created); the largest
  sample of the last third may exceed the largest of the middle third by at
  most max(--rss-slack-mb, --rss-slack-pct of it). A leak of a few bytes per
  request or event shows up as a steady climb across the last two thirds;
- a clean SIGTERM stop (exit 0).

  python3 soak.py --tally build/tally [--seconds 150] [--rate 2000] [--clients 2]
"""

import json
import os
import random
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

N_POSTS = 5000
N_USERS = 2000
PARTITIONS = 4
TICK = 0.1  # the feeder publishes every TICK seconds
POST_SHARE = 0.25  # of the commutative events, the share sent by POST /v1/events
POST_BATCH = 50
COMMUTATIVE = ("repost", "comment", "view", "mention", "dm")


def extra_args(ap):
    ap.add_argument("--seconds", type=float, default=150, help="how long the load runs")
    ap.add_argument("--rate", type=int, default=2000, help="events per second published")
    ap.add_argument("--clients", type=int, default=2, help="HTTP reader threads")
    ap.add_argument("--sample-every", type=float, default=2.0, help="RSS sampling period, seconds")
    ap.add_argument("--rss-slack-mb", type=float, default=6.0,
                    help="allowed growth of the last third's peak RSS over the middle third's, MiB")
    ap.add_argument("--rss-slack-pct", type=float, default=5.0,
                    help="same, in percent of the middle third's peak (the larger of the two applies)")


def rss_kib(pid):
    """VmRSS of `pid` in KiB, or None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Stop:
    def __init__(self):
        self.event = threading.Event()

    def __bool__(self):
        return self.event.is_set()


class Errors:
    """Thread-safe list of failures seen by the load threads (the first few
    kept in full, all counted)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.count = 0
        self.first = []

    def add(self, what):
        with self.lock:
            self.count += 1
            if len(self.first) < 20:
                self.first.append(what)
                log("ERROR: %s" % what)


class Feeder(threading.Thread):
    """Generates events at `rate`/s for as long as `stop` is unset: most go
    to one long-lived kcat, a share of the commutative ones to `post_queue`
    for the HTTP posters. The workload (and its model) is touched only by
    this thread until it has finished."""

    def __init__(self, h, brokers, workload, rate, stop, errors):
        super().__init__(daemon=True)
        self.h, self.brokers, self.w, self.rate = h, brokers, workload, rate
        self.stop, self.errors = stop, errors
        self.rng = random.Random(h.seed + 1)
        self.kcat_records = 0
        self.post_queue = []
        self.post_cv = threading.Condition()
        self.generated = 0
        self.finished = threading.Event()

    def run(self):
        argv = [self.h.kcat, "-P", "-b", self.brokers, "-t", tallyctl.EVENTS_TOPIC, "-K", "\\t",
                "-X", "enable.idempotence=true", "-X", "linger.ms=20", "-q"]
        errlog = open(self.h.path("kcat.log"), "ab")
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=errlog, stderr=errlog,
                             preexec_fn=tallyctl._child_setup)
        try:
            t0 = time.monotonic()
            while not self.stop:
                due = int((time.monotonic() - t0) * self.rate) - self.generated
                lines, to_post = [], []
                for _ in range(max(0, due)):
                    r = self.w.event()
                    self.generated += 1
                    if r.event["type"] in COMMUTATIVE and self.rng.random() < POST_SHARE:
                        to_post.append(json.loads(r.value))
                    else:
                        lines.append("%s\t%s\n" % (r.key, r.value))
                if lines:
                    p.stdin.write("".join(lines).encode())
                    p.stdin.flush()
                    self.kcat_records += len(lines)
                if to_post:
                    with self.post_cv:
                        self.post_queue.extend(to_post)
                        self.post_cv.notify()
                time.sleep(TICK)
            p.stdin.close()
            rc = p.wait(timeout=120)
            if rc != 0:
                self.errors.add("kcat -P exited %d (see kcat.log)" % rc)
        except Exception as e:  # reported by the main thread
            self.errors.add("feeder: %r" % e)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            errlog.close()
            with self.post_cv:
                self.finished.set()
                self.post_cv.notify_all()


class Poster(threading.Thread):
    """POSTs the feeder's queued events in batches; each must be 202 with
    the batch's size accepted. Drains the queue before it returns."""

    def __init__(self, hostport, feeder, errors):
        super().__init__(daemon=True)
        self.client = tallyctl.Http(hostport)
        self.feeder, self.errors = feeder, errors
        self.accepted = 0
        self.requests = 0

    def run(self):
        f = self.feeder
        while True:
            with f.post_cv:
                while not f.post_queue and not f.finished.is_set():
                    f.post_cv.wait(0.5)
                batch = f.post_queue[:POST_BATCH]
                del f.post_queue[:POST_BATCH]
                if not batch and f.finished.is_set():
                    break
            try:
                r = self.client.post("/v1/events", body=batch)
            except ConnectionError as e:
                self.errors.add("POST /v1/events: %s" % e)
                continue
            self.requests += 1
            if r.status != 202 or r.json() != {"accepted": len(batch)}:
                self.errors.add("POST /v1/events (%d events): %r" % (len(batch), r))
            else:
                self.accepted += len(batch)
        self.client.close()


class Reader(threading.Thread):
    """Reads until `stop`: a seeded mix of every read endpoint over the id
    space. Every answer must be 200 with a JSON object."""

    def __init__(self, hostport, seed, stop, errors):
        super().__init__(daemon=True)
        self.client = tallyctl.Http(hostport)
        self.rng = random.Random(seed)
        self.stop, self.errors = stop, errors
        self.requests = 0

    def path(self):
        rng = self.rng
        r = rng.random()
        p, u = rng.randint(1, N_POSTS), rng.randint(1, N_USERS)
        if r < 0.35:
            return "/v1/posts/%d/counts" % p
        if r < 0.50:
            return "/v1/posts/counts?ids=" + ",".join(str(rng.randint(1, N_POSTS)) for _ in range(20))
        if r < 0.65:
            return "/v1/users/%d/counts" % u
        if r < 0.85:
            return "/v1/users/%d/unread" % u
        if r < 0.92:
            return "/v1/posts/%d/likes/%d" % (p, u)
        if r < 0.99:
            return "/v1/posts/%d/views/%d" % (p, u)
        return "/v1/watermarks"

    def run(self):
        while not self.stop:
            path = self.path()
            try:
                r = self.client.get(path)
            except ConnectionError as e:
                self.errors.add("GET %s: %s" % (path, e))
                continue
            self.requests += 1
            if r.status != 200:
                self.errors.add("GET %s: %r" % (path, r))
                continue
            try:
                ok = isinstance(r.json(), dict)
            except ValueError:
                ok = False
            if not ok:
                self.errors.add("GET %s: not a JSON object: %r" % (path, r))
        self.client.close()


def http_statuses(client):
    """{status code: count} from tally_http_requests_total, /healthz left
    out: the start polls it, and a cluster member answers 503 there until
    the group has given it its partitions."""
    r = client.get("/metrics")
    out = {}
    for line in r.text().splitlines():
        if line.startswith("tally_http_requests_total{"):
            labels, value = line.rsplit(" ", 1)
            fields = {}
            for part in labels[labels.index("{") + 1:labels.rindex("}")].split(","):
                k, _, v = part.partition("=")
                fields[k.strip()] = v.strip().strip('"')
            if fields.get("route") == "healthz":
                continue
            code = fields.get("code", fields.get("status"))
            if code is not None:
                out[code] = out.get(code, 0) + int(float(value))
    return out


def rss_verdict(samples, slack_mb, slack_pct):
    """(ok, text) for samples [(t, rss KiB)]: thirds by time, the last
    third's peak against the middle third's peak."""
    if len(samples) < 9:
        return False, "only %d RSS samples, too few to judge" % len(samples)
    t_end = samples[-1][0]
    thirds = [[], [], []]
    for t, kib in samples:
        thirds[min(2, int(3 * t / t_end))].append(kib)
    peaks = [max(x) / 1024.0 for x in thirds]
    lows = [min(x) / 1024.0 for x in thirds]
    allowed = max(slack_mb, peaks[1] * slack_pct / 100.0)
    growth = peaks[2] - peaks[1]
    # Least-squares slope over the last two thirds, for the report.
    tail = [(t, kib / 1024.0) for t, kib in samples if t >= t_end / 3]
    n = len(tail)
    mt = sum(t for t, _ in tail) / n
    mr = sum(r for _, r in tail) / n
    var = sum((t - mt) ** 2 for t, _ in tail)
    slope = sum((t - mt) * (r - mr) for t, r in tail) / var * 60 if var else 0.0
    text = ("RSS MiB by third (warm-up, middle, last): min %.1f / %.1f / %.1f, max %.1f / %.1f / %.1f; "
            "last-third peak %+.1f MiB over the middle's (allowed %.1f); slope over the last two thirds "
            "%+.2f MiB/min; %d samples" % (lows[0], lows[1], lows[2], peaks[0], peaks[1], peaks[2], growth,
                                           allowed, slope, len(samples)))
    return growth <= allowed, text


def compare_with_model(h, client, model):
    post_ids = sorted(model.post_ids)
    for i in range(0, len(post_ids), 200):
        chunk = post_ids[i:i + 200]
        r = client.get("/v1/posts/counts?ids=" + ",".join(str(p) for p in chunk))
        if not h.check(r.status == 200, "GET /v1/posts/counts (%d ids from %d): %r" % (len(chunk), chunk[0], r)):
            continue
        for want, got in zip([model.post_counts(p) for p in chunk], r.json().get("posts", [])):
            h.check(got == want, "post %d: got %s, want %s" % (want["post_id"], json.dumps(got), json.dumps(want)))
    for u in sorted(model.user_ids):
        r = client.get("/v1/users/%d/counts" % u)
        want = model.user_counts(u)
        h.check(r.status == 200 and r.json() == want, "user %d: got %r, want %s" % (u, r, want))
        r = client.get("/v1/users/%d/unread" % u)
        if h.check(r.status == 200, "GET /v1/users/%d/unread: %r" % (u, r)):
            got = r.json()
            want = model.unread_counts(u)
            h.check(all(got.get(k) == v for k, v in want.items()),
                    "user %d unread: got %s, want %s" % (u, json.dumps(got), json.dumps(want)))
    log("compared %d posts and %d users with the model" % (len(post_ids), len(model.user_ids)))


def main():
    args = tallyctl.parse_args(__doc__, extra_args)
    with tallyctl.Harness(args, "soak", default_seed=4242) as h:
        broker, brokers = h.start_broker(partitions=PARTITIONS)
        http_port = tallyctl.free_port()
        up, client = h.start_up(brokers, h.path("state"), http_port, partitions=PARTITIONS,
                                extra=["--block-cache-mb", "16", "--write-buffer-mb", "2", "--viewed-mb", "8",
                                       "--read-cache-mb", "8"])
        hostport = "127.0.0.1:%d" % http_port

        w = event_model.Workload(h.rng, N_POSTS, N_USERS)
        stop, errors = Stop(), Errors()
        feeder = Feeder(h, brokers, w, args.rate, stop, errors)
        posters = [Poster(hostport, feeder, errors) for _ in range(2)]
        readers = [Reader(hostport, h.seed + 10 + i, stop, errors) for i in range(args.clients)]
        log("soak: %.0f s at %d events/s, %d readers, RSS of tally up (pid %d) every %.1f s" % (
            args.seconds, args.rate, args.clients, up.pid, args.sample_every))
        for t in [feeder] + posters + readers:
            t.start()

        samples, broker_samples = [], []
        t0 = time.monotonic()
        next_sample, next_report = t0, t0
        while True:
            now = time.monotonic()
            if now - t0 >= args.seconds:
                break
            if not up.alive():
                raise tallyctl.TestFailure("tally up exited with status %s during the soak" % up.returncode())
            if now >= next_sample:
                kib = rss_kib(up.pid)
                if kib is not None:
                    samples.append((now - t0, kib))
                kib = rss_kib(broker.pid)
                if kib is not None:
                    broker_samples.append((now - t0, kib))
                next_sample += args.sample_every
            if now >= next_report:
                log("soak %3.0f s: RSS %.1f MiB (broker %.1f), %d events (%d by POST), %d reads, %d errors" % (
                    now - t0, samples[-1][1] / 1024.0 if samples else 0,
                    broker_samples[-1][1] / 1024.0 if broker_samples else 0, feeder.generated,
                    sum(p.accepted for p in posters), sum(r.requests for r in readers), errors.count))
                next_report += 15
            time.sleep(min(0.2, max(0.0, next_sample - time.monotonic())))

        stop.event.set()
        for t in [feeder] + posters + readers:
            t.join(timeout=180)
            if t.is_alive():
                raise tallyctl.TestFailure("%s did not finish within 180 s of the end of the load" % t.name)
        reads = sum(r.requests for r in readers)
        posted = sum(p.accepted for p in posters)
        elapsed = time.monotonic() - t0
        log("load stopped after %.0f s: %d events (%d by kcat, %d by %d POSTs), %d reads (%.0f/s)" % (
            elapsed, feeder.generated, feeder.kcat_records, posted, sum(p.requests for p in posters),
            reads, reads / elapsed))
        h.check(feeder.kcat_records + posted == feeder.generated,
                "%d events generated but %d published" % (feeder.generated, feeder.kcat_records + posted))

        report = tallyctl.wait_lag_zero(client, timeout=180, proc=up, min_input_end=feeder.generated)
        h.check(tallyctl.end_offsets(report) == feeder.generated, "%s holds %d records, %d were published" % (
            tallyctl.EVENTS_TOPIC, tallyctl.end_offsets(report), feeder.generated))
        h.check(errors.count == 0, "%d errors during the load, first: %s" % (errors.count, errors.first[:5]))
        h.checkpoint("load: %d events, %d reads, no errors" % (feeder.generated, reads))

        compare_with_model(h, client, w.model)
        h.checkpoint("counts equal the model")

        invalid = tallyctl.metric(client, "tally_router_invalid_total")
        h.check(invalid == 0, "tally_router_invalid_total is %s, want 0" % invalid)
        dlq = [l for l in tallyctl.consume(h.kcat, brokers, tallyctl.DLQ_TOPIC, "%o\n").split("\n") if l]
        h.check(not dlq, "tally.dlq holds %d records, want none" % len(dlq))
        statuses = http_statuses(client)
        log("HTTP answers by status (GET /metrics): %s" % statuses)
        h.check(statuses and all(code in ("200", "202") for code in statuses),
                "HTTP statuses other than 200/202: %s" % statuses)
        with open(h.path("up.log"), errors="replace") as f:
            lines = f.read().splitlines()
        bad = [l for l in lines if " ERROR " in l]
        warns = [l for l in lines if " WARN " in l]
        log("up.log: %d lines, %d WARN, %d ERROR" % (len(lines), len(warns), len(bad)))
        for l in warns[:5]:
            log("  %s" % l)
        h.check(not bad, "%d ERROR lines in up.log, first: %s" % (len(bad), bad[:5]))
        h.checkpoint("no dead letters, no error answers, no error lines")

        with open(h.path("rss.tsv"), "w") as f:
            f.write("seconds\ttally_up_rss_kib\ttally_broker_rss_kib\n")
            for (t, kib), (_, bkib) in zip(samples, broker_samples):
                f.write("%.1f\t%d\t%d\n" % (t, kib, bkib))
        ok, text = rss_verdict(samples, args.rss_slack_mb, args.rss_slack_pct)
        log("tally up %s" % text)
        _, btext = rss_verdict(broker_samples, args.rss_slack_mb, args.rss_slack_pct)
        log("tally broker (not judged: it keeps the newest ~5 MiB of log per partition) %s" % btext)
        h.check(ok, "RSS of tally up not flat: %s" % text)
        h.checkpoint("RSS flat")

        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit status %s%s" % (rc, "" if clean else " (had to SIGKILL)"))
        h.checkpoint("clean stop")
        h.finish_checks("soak")


if __name__ == "__main__":
    main()
