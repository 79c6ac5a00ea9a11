#!/usr/bin/env python3
"""End to end, `--rate-limit` in a cluster: the limit is per client
address, applied once, at the member the client reached. Two `tally up
--brokers` members A and B on a `tally broker` (4 partitions), both with
`--rate-limit 5` (a bucket of 5, 5 more a second). Ten clients, each from
its own loopback address (127.0.0.2-11), read 4 posts that B owns through
A at once: A's bucket of each client allows all 4, so all 40 are 200,
answered by B (X-Tally-Member); B must not count A's forwarded reads, all
from A's one address, as one client a second time (before the fix: 10
answers and 30 `429`s). A member's forwarded reads pass B's limit only with
the key A published in the members directory: a client that sends
X-Tally-Forwarded itself to B (naming A, without and with a made-up
`Authorization: TallyMember` key) is limited like any client, and one
client reading through A is still limited at A.

  python3 e2e_forwarded_rate_limit.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import http.client
import math
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

RATE = 5  # --rate-limit, and so the bucket (--rate-burst 0: one second's worth)
CLIENTS = 10
READS = 4  # per client: within its bucket at A
PARTITIONS = 4


def member(h, brokers, name, port):
    argv = [h.tally, "up", "--brokers", brokers, "--state-dir", h.path(name), "--http",
            "127.0.0.1:%d" % port, "--partitions", PARTITIONS, "--rate-limit", RATE]
    return h.spawn("tally up " + name, argv, name + ".log"), tallyctl.Http("127.0.0.1:%d" % port)


def settled(client):
    """Both members own partitions, none restoring, and neither keeps a warm
    copy of what it gave up (the old owner answers for a partition until its
    new owner is published caught up, SPEC 6): (owns by member id) or None."""
    r = client.try_get("/v1/cluster")
    if r is None or r.status != 200:
        return None
    ms = r.json()["members"]
    if len(ms) != 2 or not all(m["owns"] and not m["restoring"] and not m["standby"] for m in ms):
        return None
    if sorted(p for m in ms for p in m["owns"]) != list(range(PARTITIONS)):
        return None
    return {m["member"]: m["owns"] for m in ms}


def read_all(port, source, targets, headers=None):
    """GETs `targets` in turn on one keep-alive connection from `source`
    (a loopback address); returns [(status, X-Tally-Member)] and the time
    from the first send to the last answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15, source_address=(source, 0))
    out = []
    t0 = time.monotonic()
    try:
        for target in targets:
            conn.request("GET", target, headers=headers or {})
            resp = conn.getresponse()
            resp.read()
            out.append((resp.status, resp.getheader("X-Tally-Member")))
    finally:
        conn.close()
    return out, time.monotonic() - t0


def allowed(seconds):
    """Most 200s a bucket of RATE gives in `seconds`, one of slack."""
    return RATE + int(math.ceil(RATE * seconds)) + 1


def limited_once(h, port, source, targets, what, headers=None):
    answers, seconds = read_all(port, source, targets, headers)
    ok = sum(1 for s, _ in answers if s == 200)
    limited = sum(1 for s, _ in answers if s == 429)
    log("%s: %d x 200, %d x 429 of %d in %.2f s" % (what, ok, limited, len(answers), seconds))
    h.check(ok + limited == len(answers), "%s: statuses other than 200 and 429: %s" % (what, answers))
    h.check(limited > 0 and ok <= allowed(seconds),
            "%s: want at most %d x 200 and the rest 429, got %d x 200, %d x 429"
            % (what, allowed(seconds), ok, limited))


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_forwarded_rate_limit", default_seed=5) as h:
        broker, brokers = h.start_broker(partitions=PARTITIONS)
        pa, pb = tallyctl.free_port(), tallyctl.free_port()
        a, ca = member(h, brokers, "a", pa)
        b, cb = member(h, brokers, "b", pb)
        id_a, id_b = "127.0.0.1:%d" % pa, "127.0.0.1:%d" % pb
        # Polled from 127.0.0.1 at under RATE a second: the tests' own
        # requests never drain a bucket the checks below use.
        for c, p in ((ca, a), (cb, b)):
            tallyctl.wait_healthy(c, timeout=120, proc=p)
        def both_settled():
            va, vb = settled(ca), settled(cb)
            return va if va and va == vb else None

        owns = tallyctl.wait_until("both members owning partitions on A and B", both_settled, 90,
                                   interval=0.5, proc=a)
        log("settled: %s" % owns)
        b_posts = [i for i in range(1, 10000) if tallyctl.partition_of(i, PARTITIONS) in owns[id_b]]

        # Ten clients at once through A, each within its own bucket there.
        results = [None] * CLIENTS
        start = threading.Barrier(CLIENTS)

        def client(i):
            start.wait()
            targets = ["/v1/posts/%d/counts" % p for p in b_posts[i * READS:(i + 1) * READS]]
            results[i] = read_all(pa, "127.0.0.%d" % (2 + i), targets)[0]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        answers = [a for r in results if r for a in r]
        ok = [m for s, m in answers if s == 200]
        limited = sum(1 for s, _ in answers if s == 429)
        log("%d clients x %d reads of B's posts through A: %d x 200, %d x 429, other %s"
            % (CLIENTS, READS, len(ok), limited, [s for s, _ in answers if s not in (200, 429)]))
        h.check(len(answers) == CLIENTS * READS and len(ok) == CLIENTS * READS,
                "every client's %d reads through A are within its bucket at A: want %d x 200, got %d x 200 "
                "and %d x 429 (B limited A's forwarded reads as one client)"
                % (READS, CLIENTS * READS, len(ok), limited))
        h.check(all(m == id_b for m in ok), "the reads were answered by B (X-Tally-Member %s)"
                % sorted(set(ok)))
        h.checkpoint("the limit applies once, at the member the client reached")

        # The limit is still there: at A for a client reading through it,
        # and at B for a client that sends the forwarded header itself.
        targets = ["/v1/posts/%d/counts" % p for p in b_posts[:20]]
        limited_once(h, pa, "127.0.0.20", targets, "one client, 20 reads of B's posts through A")
        limited_once(h, pb, "127.0.0.21", targets, "a client sending X-Tally-Forwarded: %s to B" % id_a,
                     headers={"X-Tally-Forwarded": id_a})
        limited_once(h, pb, "127.0.0.22", targets, "the same with a made-up member key",
                     headers={"X-Tally-Forwarded": id_a,
                              "Authorization": "TallyMember 0123456789abcdef0123456789abcdef"})
        h.checkpoint("a client cannot pass as a member")

        for p in (a, b):
            rc, clean = p.stop(grace=30)
            h.check(clean and rc == 0, "%s on SIGTERM: exit %s%s" % (p.name, rc, "" if clean else " (SIGKILL)"))
        broker.stop()
        h.finish_checks("e2e_forwarded_rate_limit")


if __name__ == "__main__":
    main()
