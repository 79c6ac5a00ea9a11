#!/usr/bin/env python3
"""End to end, with crashes: ~50k events are published with kcat in paced
chunks while `tally up` is SIGKILLed at seeded random moments (20 times by
default) and restarted on the same state directory. Once everything is
consumed, every count must equal the reference model exactly: exactly-once
across crashes (SPEC section 2). Then:

- a clean SIGTERM stop exits 0 and a restart keeps every count;
- `tally replay` rebuilds a fresh state directory from tally.deltas, and
  `tally serve` over it answers every counts/unread/likes request byte for
  byte as the live `tally up` does;
- `tally replay --from-input` re-derives another fresh state from the input
  topic, and its counts equal the model.

  python3 e2e_crash.py --tally build/tally [--seed N] [--kills K] [--events N]
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

N_POSTS = 2000
N_USERS = 1000
N_CHUNKS = 10
SLICE = 250  # records written to kcat between pauses
# The feeder spreads the stream over about this long per kill (the wait
# between kills plus the restart), so every kill lands while records are
# still arriving.
FEED_SECONDS_PER_KILL = 6.5
BATCH = 200


def extra_args(ap):
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs of tally up (at least 5)")
    ap.add_argument("--events", type=int, default=50000, help="valid events to publish")


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


def model_as_logged(h, brokers, w):
    """The model to compare with: the workload's own, unless tally.events
    holds a valid record more than once. An idempotent producer's retry
    across an outage is not always deduplicated by the embedded broker
    (librdkafka 2.0.2's mock cluster; seen in the model test as a batch of
    five appended twice), and tally counts what the log holds. Then the
    model is rebuilt from the log, record by record in each partition's
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
        return w.model
    log("%s holds %d valid records more than once (a producer retry the embedded broker did not "
        "deduplicate): the model is rebuilt from the log" % (tallyctl.EVENTS_TOPIC, twice))
    m = event_model.Model()
    for v in values:
        if v in w.emitted:
            m.apply(w.emitted[v])
    return m


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


def compare_servers(h, live, rebuilt, model, what):
    """Every counts/unread/likes answer (and a sample of views and feed
    snapshots) of `rebuilt` must equal `live`'s byte for byte."""
    post_ids = sorted(model.post_ids)
    user_ids = sorted(model.user_ids)
    paths = []
    for i in range(0, len(post_ids), BATCH):
        paths.append("/v1/posts/counts?ids=" + ",".join(map(str, post_ids[i:i + BATCH])))
    paths += ["/v1/posts/%d/counts" % p for p in post_ids]
    for u in user_ids:
        paths += ["/v1/users/%d/counts" % u, "/v1/users/%d/unread" % u]
    paths += ["/v1/posts/%d/likes/%d" % pu for pu in sorted(model.like_pairs)]
    viewed = sorted(model.viewed)
    paths += ["/v1/posts/%d/views/%d" % pu for pu in h.rng.sample(viewed, min(300, len(viewed)))]
    paths += ["/v1/users/%d/feed/snapshot" % u for u in h.rng.sample(user_ids, min(50, len(user_ids)))]
    differ = []
    for path in paths:
        a, b = live.get(path), rebuilt.get(path)
        if a.status != b.status or a.body != b.body:
            differ.append("%s: live %r, %s %r" % (path[:80], a, what, b))
    h.check(not differ, "%s: %d of %d answers differ from the live tally up; first:\n    %s" % (
        what, len(differ), len(paths), "\n    ".join(differ[:20])))
    log("%s: compared %d answers byte for byte with the live tally up" % (what, len(paths)))


def main():
    args = tallyctl.parse_args(__doc__, extra_args)
    if args.kills < 5:
        raise SystemExit("--kills must be at least 5")
    t_begin = time.monotonic()
    with tallyctl.Harness(args, "e2e_crash", default_seed=4242) as h:
        broker, brokers = h.start_broker(partitions=4)
        state = h.path("state")

        w = event_model.Workload(h.rng, N_POSTS, N_USERS)
        records = w.stream(args.events, n_invalid=20)
        log("generated %d records (%d like edges set, %d follow edges set at the end)" % (
            len(records), len(w.model.likes), len(w.model.follows)))

        up, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=4)
        feeder = Feeder(h, brokers, records, h.seed + 1, max(50, FEED_SECONDS_PER_KILL * args.kills))
        feeder.start()

        rng = h.rng
        busy_kills = 0
        for kill in range(1, args.kills + 1):
            # Early kills land during start-up or the consumer groups' join
            # (often with a backlog); the others after the pipeline moved.
            early = rng.random() < 0.4
            delay = rng.uniform(0.0, 3.0) if early else rng.uniform(0.0, 0.6)
            note = ""
            if not early:
                # Wait for the pipeline to apply something since this start,
                # then kill at a random moment after that.
                base = [None]

                def progressed():
                    wm = tallyctl.watermarks(client)
                    if wm is None:
                        return False
                    applied = tallyctl.applied_offsets(wm)
                    if base[0] is None:
                        base[0] = applied
                        return False
                    return applied > base[0] or (wm["lag"] == 0 and feeder.done.is_set())

                tallyctl.wait_until("tally up to apply records after restart %d" % (kill - 1), progressed,
                                    timeout=120, interval=0.1, proc=up)
                note = " after progress"
            time.sleep(delay)  # the kill moment itself (random), not an ordering device
            wm = tallyctl.watermarks(client)
            up.kill9()
            if wm and wm["lag"] > 0:
                busy_kills += 1
            log("kill %d/%d%s +%.2fs: lag %s, %s records of tally.events applied, %d written to kcat" % (
                kill, args.kills, note, delay, wm["lag"] if wm else "?",
                tallyctl.applied_offsets(wm) if wm else "?", feeder.written))
            client.close()
            up, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=4)

        log("%d of %d kills hit with records waiting (lag > 0 just before)" % (busy_kills, args.kills))
        feeder.join(timeout=300)
        if feeder.is_alive():
            raise tallyctl.TestFailure("the feeder did not finish publishing within 300 s")
        if feeder.error:
            raise feeder.error
        report = tallyctl.wait_lag_zero(client, timeout=180, proc=up, min_input_end=len(records))
        log("lag 0 after %d kills: %d records in %s (%.0f s so far)" % (
            args.kills, tallyctl.end_offsets(report), tallyctl.EVENTS_TOPIC, time.monotonic() - t_begin))
        h.check(tallyctl.end_offsets(report) == len(records), "%s holds %d records, %d were published" % (
            tallyctl.EVENTS_TOPIC, tallyctl.end_offsets(report), len(records)))
        lost, doubled = compare_with_model(h, client, w.model, "after %d SIGKILLs" % args.kills)
        h.checkpoint("exactly once across %d SIGKILLs" % args.kills)
        log("SIGKILL summary: %d kills (seed %d), %d records checked (%d valid events, %d invalid), lost %d, "
            "doubled %d" % (args.kills, h.seed, len(records), sum(1 for r in records if r.valid),
                            sum(1 for r in records if not r.valid), lost, doubled))

        # A clean stop flushes and exits 0; a restart keeps every count.
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit status %s%s" % (rc, "" if clean else " (SIGKILLed)"))
        client.close()
        up, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=4)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up)
        compare_with_model(h, client, w.model, "after a clean restart", full_posts=False)
        h.checkpoint("clean stop and restart")

        # Rebuild from tally.deltas: byte for byte the live answers.
        rebuilt = h.path("replay-deltas")
        h.replay(brokers, rebuilt, log_name="replay-deltas.log")
        serve, sclient = h.start_serve(brokers, rebuilt, tallyctl.free_port(), log_name="serve-deltas.log")
        compare_servers(h, client, sclient, w.model, "replay from tally.deltas")
        sclient.close()
        serve.stop()
        h.checkpoint("tally replay")

        # Re-derive from the input: counts equal the model.
        derived = h.path("replay-input")
        h.replay(brokers, derived, from_input=True, log_name="replay-input.log")
        serve, sclient = h.start_serve(brokers, derived, tallyctl.free_port(), log_name="serve-input.log")
        compare_with_model(h, sclient, w.model, "replay --from-input", full_posts=False)
        sclient.close()
        serve.stop()
        h.checkpoint("tally replay --from-input")

        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit status %s" % rc)
        h.checkpoint("final stop")
        h.finish_checks("e2e_crash")
        log("total %.0f s" % (time.monotonic() - t_begin))


if __name__ == "__main__":
    main()
