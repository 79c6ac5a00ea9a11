"""What the end-to-end tests share beyond the harness (tallyctl.py) and the
model (event_model.py): comparisons of a running tally's answers with the
model, the check of the invalid-record log lines, and the paced kcat feeder
the fault tests publish with while they break something. Each check records
its failures on the Harness (h.check) and goes on; none raises for a
mismatch. No e2e_*.py imports another: what two of them need lives here.
"""

import json
import random
import subprocess
import threading
import time

import event_model
import tallyctl
from tallyctl import log

BATCH = 200  # ids per GET /v1/posts/counts?ids= (the endpoint's maximum)
FRESH = 900_000  # ids above the workloads', never in a stream
N_CHUNKS = 10  # kcat processes per Feeder stream
SLICE = 250  # records a Feeder writes to kcat between pauses


def check_counts(h, client, model, extra_posts=(), extra_users=(), views=True):
    """Every post's counts (single and batch endpoints), every user's counts
    and unread kinds, every like edge plus 30 never set, and (with `views`)
    200 "viewed" pairs equal the model; extra_* ids are checked too."""
    post_ids = sorted(model.post_ids | set(extra_posts))
    user_ids = sorted(model.user_ids | set(extra_users))
    log("comparing %d posts, %d users, %d like edges with the model" % (
        len(post_ids), len(user_ids), len(model.like_pairs)))

    for i, p in enumerate(post_ids):
        r = client.get("/v1/posts/%d/counts" % p)
        want = model.post_counts(p)
        if h.check(r.status == 200, "GET /v1/posts/%d/counts: %r" % (p, r)):
            got = r.json()
            h.check(got == want, "post %d: got %s, want %s" % (p, json.dumps(got), json.dumps(want)))
            if i == 0:
                ct = r.headers.get("content-type", "")
                h.check(ct.startswith("application/json"), "counts Content-Type is %r" % ct)

    for i in range(0, len(post_ids), BATCH):
        chunk = post_ids[i:i + BATCH]
        path = "/v1/posts/counts?ids=" + ",".join(str(p) for p in chunk)
        r = client.get(path)
        if not h.check(r.status == 200, "GET /v1/posts/counts?ids=<%d ids from %d>: %r" % (len(chunk), chunk[0], r)):
            continue
        got = r.json()
        want = {"posts": [model.post_counts(p) for p in chunk]}
        if got != want:
            bad = [(w, g) for w, g in zip(want["posts"], got.get("posts", [])) if w != g][:5]
            h.check(False, "batch of %d posts from %d differs (%d answered): first differences (want, got) %s" % (
                len(chunk), chunk[0], len(got.get("posts", [])), bad))

    unread_keys = {"user_id", "mention", "comment", "like", "repost", "dm", "follower", "notice", "feed",
                   "red_dots"}
    for u in user_ids:
        r = client.get("/v1/users/%d/counts" % u)
        want = model.user_counts(u)
        if h.check(r.status == 200, "GET /v1/users/%d/counts: %r" % (u, r)):
            got = r.json()
            h.check(got == want, "user %d: got %s, want %s" % (u, json.dumps(got), json.dumps(want)))
        r = client.get("/v1/users/%d/unread" % u)
        if h.check(r.status == 200, "GET /v1/users/%d/unread: %r" % (u, r)):
            got = r.json()
            h.check(set(got) == unread_keys and got.get("user_id") == u and isinstance(got.get("red_dots"), dict),
                    "GET /v1/users/%d/unread has the wrong shape: %s" % (u, r.text()))
            want_u = model.unread_counts(u)
            got_u = {k: got.get(k) for k in event_model.UNREAD_CHECKED}
            h.check(got_u == want_u, "user %d unread: got %s, want %s" % (u, got_u, want_u))

    pairs = sorted(model.like_pairs)
    rng = h.rng
    never = [(rng.choice(post_ids), FRESH + rng.randrange(1000)) for _ in range(30)]
    for p, u in pairs + never:
        r = client.get("/v1/posts/%d/likes/%d" % (p, u))
        want = {"liked": model.liked(p, u)}
        if h.check(r.status == 200, "GET /v1/posts/%d/likes/%d: %r" % (p, u, r)):
            h.check(r.json() == want, "like edge (%d, %d): got %s, want %s" % (p, u, r.text(), json.dumps(want)))

    viewed = sorted(model.viewed)
    sample = rng.sample(viewed, min(200, len(viewed))) if views else []
    for p, u in sample:
        r = client.get("/v1/posts/%d/views/%d" % (p, u))
        if not h.check(r.status == 200, "GET /v1/posts/%d/views/%d: %r" % (p, u, r)):
            break  # one line is enough when the endpoint is missing
        h.check(r.json() == {"viewed": True}, "viewed (%d, %d): got %s, want {\"viewed\":true} (never false wrongly)"
                % (p, u, r.text()))


def check_invalid_logged(h, client, n):
    """Every invalid record is counted, and the log names each one with its
    partition and offset until a flood: then the first 10 of 10 s, the last
    of them saying that the next ones are left out."""
    counted = tallyctl.metric(client, "tally_router_invalid_total")
    h.check(counted == n, "tally_router_invalid_total is %s, %d invalid records were sent" % (counted, n))
    lines = tallyctl.log_lines(h.path("up.log"), "invalid record topic=")
    h.check(min(n, 10) <= len(lines) <= n and all("partition=" in l and "offset=" in l for l in lines),
            "%d 'invalid record' lines in up.log for %d invalid records:\n  %s" % (
                len(lines), n, "\n  ".join(lines[:12])))
    # The records of these tests are routed within a few seconds, inside one
    # 10 s period: past 10, the rest are left out, and the log says so.
    if n > 10:
        h.check(len(lines) < n and any("the next ones are left out" in l for l in lines),
                "up.log names %d of %d invalid records routed within seconds (want 10, the last saying that "
                "the next ones are left out)" % (len(lines), n))


class Feeder(threading.Thread):
    """Publishes the records in N_CHUNKS chunks, one kcat per chunk, a slice
    at a time with short random pauses, so the pipeline always has work
    while the main thread kills it. kcat children die with this thread, which
    waits for each of them."""

    def __init__(self, h, brokers, records, seed, seconds, kcat_extra=()):
        super().__init__(daemon=True)
        self.kcat_extra = list(kcat_extra)
        self.h, self.brokers, self.records = h, brokers, records
        self.rng = random.Random(seed)
        self.rate = len(records) / max(1.0, seconds)
        self.error = None
        self.written = 0  # handed to kcat (published a few ms later)
        self.published = 0  # flushed by a kcat that exited 0
        self.done = threading.Event()

    def run(self):
        try:
            self.t0 = time.monotonic()
            n = len(self.records)
            size = (n + N_CHUNKS - 1) // N_CHUNKS
            for c in range(0, n, size):
                self._chunk(self.records[c:c + size])
            log("feeder: published all %d records" % self.published)
        except Exception as e:  # reported by the main thread
            self.error = e
        finally:
            self.done.set()

    def _chunk(self, chunk):
        argv = [self.h.kcat, "-P", "-b", self.brokers, "-t", tallyctl.EVENTS_TOPIC, "-K", "\\t",
                "-X", "enable.idempotence=true", "-q"] + self.kcat_extra
        errlog = open(self.h.path("kcat.log"), "ab")
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=errlog, stderr=errlog,
                             preexec_fn=tallyctl._child_setup)
        try:
            for s in range(0, len(chunk), SLICE):
                data = "".join("%s\t%s\n" % (r.key, r.value) for r in chunk[s:s + SLICE])
                p.stdin.write(data.encode())
                p.stdin.flush()
                self.written += len(chunk[s:s + SLICE])
                # Pacing (not ordering): about `rate` records/s, in bursts.
                ahead = self.written / self.rate - (time.monotonic() - self.t0)
                time.sleep(max(0.0, ahead) + self.rng.uniform(0.0, 0.05))
            p.stdin.close()
            rc = p.wait(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            errlog.close()
        if rc != 0:
            raise tallyctl.TestFailure("kcat -P exited %d (see kcat.log)" % rc)
        self.published += len(chunk)


class ModelFeed:
    """A Workload's records published to tally.events with kcat, counted:
    `publish(n)` sends n more; `published` is how many so far."""

    def __init__(self, h, brokers, workload):
        self.h, self.brokers, self.w = h, brokers, workload
        self.published = 0

    def publish(self, n):
        recs = self.w.stream(n)
        tallyctl.publish(self.h.kcat, self.brokers, [(r.key, r.value) for r in recs])
        self.published += len(recs)
        return recs


def caught_up_and_exact(h, client, proc, model, published, what):
    """Waits for lag 0 with every published record in the input, then
    compares every count with the model."""
    tallyctl.wait_lag_zero(client, timeout=120, proc=proc, min_input_end=published)
    compare_with_model(h, client, model, what)


def logged_model(h, brokers, w):
    """The model to compare with, and how many valid records tally.events
    holds more than once: the workload's own model, unless that count is
    not 0. An idempotent producer's retry across an outage is not always
    deduplicated by the embedded broker (librdkafka 2.0.2's mock cluster;
    seen in the model test as a batch of five appended twice, in
    e2e_outage as 56 records), and tally counts what the log holds. Then
    the model is rebuilt from the log, record by record in each partition's
    order (effects commute across partitions), and the duplicates logged."""
    values = tallyctl.consume(h.kcat, brokers, tallyctl.EVENTS_TOPIC, "%s\n").splitlines()
    seen, twice = set(), 0
    for v in values:
        if v in w.emitted:
            twice += v in seen
            seen.add(v)
    h.check(len(seen) == len(w.emitted), "%s holds %d of the %d valid records made" % (
        tallyctl.EVENTS_TOPIC, len(seen), len(w.emitted)))
    if twice == 0:
        return w.model, 0
    log("%s holds %d valid records more than once (a producer retry the embedded broker did not "
        "deduplicate): the model is rebuilt from the log" % (tallyctl.EVENTS_TOPIC, twice))
    m = event_model.Model()
    for v in values:
        if v in w.emitted:
            m.apply(w.emitted[v])
    return m, twice


def compare_with_model(h, client, model, what, full_posts=True):
    """Every post (batch endpoint; single endpoint for a sample), every user's
    counts and checked unread kinds, every like edge. Mismatches are summed
    into lost (below the model) and doubled (above)."""
    post_ids = sorted(model.post_ids)
    user_ids = sorted(model.user_ids)
    lost, doubled = {}, {}
    mismatches = []

    def diff(entity, got, want):
        if got == want:
            return
        mismatches.append("%s: got %s, want %s" % (entity, json.dumps(got), json.dumps(want)))
        for k, v in want.items():
            g = got.get(k) if isinstance(got, dict) else None
            if isinstance(v, int) and isinstance(g, int) and g != v and k not in ("post_id", "user_id"):
                bucket = lost if g < v else doubled
                name = "%s.%s" % (entity.split(" ")[0], k)
                bucket[name] = bucket.get(name, 0) + abs(g - v)

    for i in range(0, len(post_ids), BATCH):
        chunk = post_ids[i:i + BATCH]
        r = client.get("/v1/posts/counts?ids=" + ",".join(map(str, chunk)))
        if not h.check(r.status == 200, "%s: batch GET from post %d: %r" % (what, chunk[0], r)):
            continue
        got = r.json().get("posts", [])
        h.check(len(got) == len(chunk), "%s: batch of %d answered %d posts" % (what, len(chunk), len(got)))
        for p, g in zip(chunk, got):
            diff("post %d" % p, g, model.post_counts(p))
    sample = post_ids if full_posts else h.rng.sample(post_ids, min(200, len(post_ids)))
    for p in sample[:300]:
        r = client.get("/v1/posts/%d/counts" % p)
        if h.check(r.status == 200, "%s: GET /v1/posts/%d/counts: %r" % (what, p, r)):
            if r.json() != model.post_counts(p):
                mismatches.append("post %d (single GET): got %s, want %s" % (p, r.text(), model.post_counts(p)))
    for u in user_ids:
        r = client.get("/v1/users/%d/counts" % u)
        if h.check(r.status == 200, "%s: GET /v1/users/%d/counts: %r" % (what, u, r)):
            diff("user %d" % u, r.json(), model.user_counts(u))
        r = client.get("/v1/users/%d/unread" % u)
        if h.check(r.status == 200, "%s: GET /v1/users/%d/unread: %r" % (what, u, r)):
            got = r.json()
            diff("unread %d" % u, {k: got.get(k) for k in event_model.UNREAD_CHECKED}, model.unread_counts(u))
    wrong_likes = 0
    for p, u in sorted(model.like_pairs):
        r = client.get("/v1/posts/%d/likes/%d" % (p, u))
        want = {"liked": model.liked(p, u)}
        if not h.check(r.status == 200, "%s: GET /v1/posts/%d/likes/%d: %r" % (what, p, u, r)):
            break
        if r.json() != want:
            wrong_likes += 1
            if wrong_likes <= 10:
                mismatches.append("like edge (%d, %d): got %s, want %s" % (p, u, r.text(), json.dumps(want)))
    lost_n, doubled_n = sum(lost.values()), sum(doubled.values())
    log("%s: lost %d, doubled %d (%d post and %d user records, %d like edges checked)" % (
        what, lost_n, doubled_n, len(post_ids), len(user_ids), len(model.like_pairs)))
    if mismatches or wrong_likes:
        h.check(False, "%s: %d entities differ from the model; lost (below the model) %s; doubled (above) %s; "
                "%d of %d like edges wrong; first differences:\n    %s" % (
                    what, len(mismatches), json.dumps(lost, sort_keys=True), json.dumps(doubled, sort_keys=True),
                    wrong_likes, len(model.like_pairs), "\n    ".join(mismatches[:25])))
    return lost_n, doubled_n
