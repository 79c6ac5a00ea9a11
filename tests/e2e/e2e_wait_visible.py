#!/usr/bin/env python3
"""End to end: `?wait=visible` on POST /v1/events and on the resets (SPEC
section 4): the answer comes once every effect of the request is visible to
reads, so a read right after it (no sleep, no retry) sees it.

`tally up` with its embedded broker takes a background load (`tally produce
--rate`, 2,000 events/s) while one client, on one keep-alive connection:
  - likes a post of its own 150 times with ?wait=visible, each time reading
    the post's count at once: it must be exactly the number of likes;
  - follows a user of its own from 60 new users (a follow's `followers` and
    unread `follower` are derived on the target's partition): the target's
    counts right after must show each;
  - resets the author's unread likes with ?wait=visible after a liked
    batch: unread `like` right after must read 0;
and the answers must be 200 {"accepted":N,"visible":true}. The same through
a `tally serve` following a separate `tally aggregate` (its own process,
judging by Kafka and the state it follows): 40 likes and 10 follows. Then,
with --visible-timeout-ms 1 on a second `tally up`, a wait that cannot
finish in time answers 504 not_yet_visible and the event still counts.

  python3 e2e_wait_visible.py --tally build/tally [--rounds 150]
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

BASE = 10 ** 15  # ids far above the generator's
POST, AUTHOR, TARGET = BASE + 1, BASE + 2, BASE + 3


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def up(h, name, extra=()):
    port, http_port = tallyctl.free_port(), tallyctl.free_port()
    argv = [h.tally, "up", "--port", port, "--state-dir", h.path("state-" + name),
            "--http", "127.0.0.1:%d" % http_port, "--partitions", 8] + list(extra)
    p = h.spawn("tally up " + name, argv, "up-%s.log" % name)
    client = tallyctl.Http("127.0.0.1:%d" % http_port)
    tallyctl.wait_healthy(client, timeout=120, proc=p)
    return p, client, "127.0.0.1:%d" % port


def main():
    def extra(ap):
        ap.add_argument("--rounds", type=int, default=150)
        ap.add_argument("--load-rate", type=int, default=2000)

    args = tallyctl.parse_args(__doc__, extra)
    with tallyctl.Harness(args, "e2e_wait_visible", default_seed=31) as h:
        p, client, brokers = up(h, "main")
        load = h.spawn("tally produce", [h.tally, "produce", "--brokers", brokers, "--gen",
                                         args.load_rate * 600, "--rate", args.load_rate, "--seed", h.seed],
                       "produce.log")
        ts = int(time.time() * 1000)
        lat = []

        def post(path, body=None):
            t0 = time.monotonic()
            r = client.post(path, body)
            lat.append(time.monotonic() - t0)
            return r

        # Likes: each one readable at once.
        for i in range(args.rounds):
            ev = {"type": "like", "ts": ts, "post_id": POST, "user_id": BASE + 100 + i, "author_id": AUTHOR}
            r = post("/v1/events?wait=visible", ev)
            if not h.check(r.status == 200 and r.json() == {"accepted": 1, "visible": True},
                           "like %d: %r" % (i, r)):
                break
            got = client.get("/v1/posts/%d/counts" % POST).json()["like"]
            h.check(got == i + 1, "like %d answered visible but the post reads %d likes" % (i, got))
        h.checkpoint("%d likes, each read right after its answer" % args.rounds)

        # Follows: derived on the target's partition.
        for i in range(60):
            ev = {"type": "follow", "ts": ts, "user_id": BASE + 1000 + i, "target_id": TARGET}
            r = post("/v1/events?wait=visible", [ev])
            if not h.check(r.status == 200 and r.json() == {"accepted": 1, "visible": True},
                           "follow %d: %r" % (i, r)):
                break
            counts = client.get("/v1/users/%d/counts" % TARGET).json()
            unread = client.get("/v1/users/%d/unread" % TARGET).json()
            h.check(counts["followers"] == i + 1 and unread["follower"] == i + 1,
                    "follow %d answered visible but the target reads followers %d, unread follower %d" % (
                        i, counts["followers"], unread["follower"]))
            following = client.get("/v1/users/%d/counts" % (BASE + 1000 + i)).json()["following"]
            h.check(following == 1, "follow %d: the follower reads following %d" % (i, following))
        h.checkpoint("60 follows, derived counts read right after")

        # Resets: a batch of likes, then the author's reset.
        for i in range(20):
            batch = [{"type": "like", "ts": ts, "post_id": POST + 1 + i, "user_id": BASE + 5000 + j,
                      "author_id": AUTHOR} for j in range(5)]
            r = post("/v1/events?wait=visible", batch)
            h.check(r.status == 200 and r.json() == {"accepted": 5, "visible": True}, "batch %d: %r" % (i, r))
            h.check(client.get("/v1/users/%d/unread" % AUTHOR).json()["like"] >= 5,
                    "batch %d: the author's unread likes do not show it" % i)
            r = post("/v1/users/%d/unread/like/reset?wait=visible" % AUTHOR)
            h.check(r.status == 200 and r.json() == {"accepted": True, "visible": True}, "reset %d: %r" % (i, r))
            got = client.get("/v1/users/%d/unread" % AUTHOR).json()["like"]
            h.check(got == 0, "reset %d answered visible but unread like reads %d" % (i, got))
        h.checkpoint("20 resets, read right after")
        log("?wait=visible under %d events/s: %d requests, p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (
            args.load_rate, len(lat), percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000,
            max(lat) * 1000))
        h.check(load.alive(), "the background load ended early")
        load.stop(grace=10)
        rc, clean = p.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit %s" % rc)

        # tally serve beside a separate aggregator.
        broker, brokers2 = h.start_broker(partitions=4)
        agg = h.spawn("tally aggregate", [h.tally, "aggregate", "--brokers", brokers2, "--state-dir",
                                          h.path("state-split")], "aggregate.log")
        tallyctl.wait_until("the aggregator to create the state",
                            lambda: os.path.exists(h.path("state-split", "TALLY")), timeout=60, proc=agg)
        serve, sclient = h.start_serve(brokers2, h.path("state-split"), tallyctl.free_port())
        for i in range(40):
            ev = {"type": "like", "ts": ts, "post_id": POST, "user_id": BASE + 100 + i}
            r = sclient.post("/v1/events?wait=visible", ev)
            if not h.check(r.status == 200 and r.json() == {"accepted": 1, "visible": True},
                           "serve: like %d: %r" % (i, r)):
                break
            got = sclient.get("/v1/posts/%d/counts" % POST).json()["like"]
            h.check(got == i + 1, "serve: like %d answered visible but the post reads %d likes" % (i, got))
        for i in range(10):
            ev = {"type": "follow", "ts": ts, "user_id": BASE + 1000 + i, "target_id": TARGET}
            r = sclient.post("/v1/events?wait=visible", ev)
            h.check(r.status == 200, "serve: follow %d: %r" % (i, r))
            got = sclient.get("/v1/users/%d/counts" % TARGET).json()["followers"]
            h.check(got == i + 1, "serve: follow %d answered visible but followers reads %d" % (i, got))
        h.checkpoint("tally serve beside tally aggregate: 40 likes and 10 follows read right after")
        for proc in (serve, agg, broker):
            proc.stop(grace=30)

        # A timeout too short to make it: 504, and the event counts anyway.
        p2, client2, _ = up(h, "short", extra=["--visible-timeout-ms", "1"])
        r = client2.post("/v1/events?wait=visible", {"type": "view", "ts": ts, "post_id": POST})
        h.check(r.status == 504 and r.json()["error"]["code"] == "not_yet_visible", "1 ms timeout: %r" % r)
        tallyctl.wait_lag_zero(client2, timeout=60, proc=p2)
        got = client2.get("/v1/posts/%d/counts" % POST).json()["view"]
        h.check(got == 1, "the view answered 504 must still count: view %d" % got)
        rc, clean = p2.stop(grace=30)
        h.check(clean and rc == 0, "second tally up on SIGTERM: exit %s" % rc)
        h.finish_checks("e2e_wait_visible")


if __name__ == "__main__":
    main()
