#!/usr/bin/env python3
"""End to end, a cluster member that starts alone (docs/cluster.md,
"Starting, stopping, faults"): `tally up --brokers` on a backlog, with no
other member in the directory, routes every input partition standalone and
applies every partition at once instead of waiting for the groups' first
rebalance (3 s on Kafka, group.initial.rebalance.delay.ms, which the broker
here is given too); the backlog must be visible, exact,
and the member must say so in its log. Then a second member joins: the
first one's router must join the group, the partitions must split between
the two, and every count on both must still equal the model, with more
events published during the handover. The member that held the notices'
partition for its global entity only then has its state run by one
process, which makes that partition whole again. Last, a lone member of another
cluster whose router group already has a member without a directory
record (`tally aggregate --role router`) must join the group once the
group refuses its standalone commits, counting every record once.

  python3 e2e_lone_member.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402


def member(h, brokers, name, port):
    argv = [h.tally, "up", "--brokers", brokers, "--state-dir", h.path(name), "--http",
            "127.0.0.1:%d" % port, "--partitions", "4"]
    return h.spawn("tally up " + name, argv, name + ".log"), tallyctl.Http("127.0.0.1:%d" % port)


def stop_cleanly(h, procs):
    for p in procs:
        rc, clean = p.stop(grace=30)
        h.check(clean and rc == 0, "%s on SIGTERM: exit %s%s" % (p.name, rc, "" if clean else " (SIGKILL)"))


def wait_lag_zero_readable(h, client, proc, published):
    """wait_lag_zero, checking on the way SPEC section 4's promise: whenever
    /v1/watermarks answers, a read right after it is answered too (a member
    still restoring answers both 503, never lag 0 beside a 503 read)."""
    bad = []

    def caught_up():
        w = client.try_get("/v1/watermarks")
        if w is None or w.status != 200:
            return None
        r = client.try_get("/v1/posts/1/counts")
        if r is not None and r.status == 503:
            bad.append((w.json().get("lag"), r.body[:160]))
        report = w.json()
        if report.get("lag") != 0 or tallyctl.end_offsets(report) < published:
            return None
        return report

    tallyctl.wait_until("lag 0 on %s" % client.hostport, caught_up, 120, interval=0.02, proc=proc)
    h.check(not bad, "/v1/watermarks answered while reads answered 503 (%d times; first: lag %s, %s)"
            % (len(bad), bad[0][0] if bad else None, bad[0][1] if bad else None))


NOTICES = 12
NOTICE_READERS = (1, 2, 3, 4, 5)


def global_only_at_stop(log_path):
    """True when the member's log last said that it applies the partition of
    the notices for its global entity only."""
    last = None
    with open(log_path, errors="replace") as f:
        for line in f:
            if "applying its global entity only" in line:
                last = "only"
            elif "held for its global entity only until now" in line:
                last = "whole"
    return last == "only"


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_lone_member", default_seed=17) as h:
        broker, brokers = h.start_broker(partitions=4, extra=["--group-initial-rebalance-delay-ms", 3000])
        w = event_model.Workload(h.rng, 300, 200)
        backlog = w.stream(3000, n_invalid=3)
        tallyctl.publish(h.kcat, brokers, [(r.key, r.value) for r in backlog])
        published = len(backlog)

        t0 = time.monotonic()
        a, ca = member(h, brokers, "a", tallyctl.free_port())
        tallyctl.wait_lag_zero(ca, timeout=120, proc=a, min_input_end=published)
        visible_s = time.monotonic() - t0
        tallyctl.wait_healthy(ca, timeout=120, proc=a)
        log("backlog visible after %.2f s, /healthz ready after %.2f s" % (visible_s, time.monotonic() - t0))
        # The group's first assignment comes 3 s after the join (Kafka's
        # default initial rebalance delay); the member served before it,
        # holding every partition current.
        for who, needle in (("router", "router: no other member of the cluster is live"),
                            ("applier", "applier: no other member of the cluster is live"),
                            ("HTTP tier", "holds every partition")):
            h.check(tallyctl.log_lines(h.path("a.log"), needle),
                    "the lone member's %s started without the group (log: %r)" % (who, needle))
        checks.check_counts(h, ca, w.model)
        h.checkpoint("a member alone applied its backlog (%d records) without waiting for the group" % published)

        # A second member: the first one's router joins the group, the
        # partitions split, and events published meanwhile count once.
        b, cb = member(h, brokers, "b", tallyctl.free_port())
        more = w.stream(3000)
        tallyctl.publish(h.kcat, brokers, [(r.key, r.value) for r in more])
        published += len(more)
        # Notices too, unkeyed (the model leaves them out): the member that
        # does not own their partition keeps them global-only (below).
        ts = max(json.loads(r.value)["ts"] for r in more if r.valid)
        notices = [json.dumps({"type": "notice", "ts": ts + i, "notice_id": 7000 + i, "title": "n%d" % i})
                   for i in range(NOTICES)]
        tallyctl.publish(h.kcat, brokers, notices, keyed=False)
        # A user with no last-read notice has none unread (SPEC section 3):
        # these read the first, and have the rest unread.
        reads = [(str(u), json.dumps({"type": "read", "ts": ts, "user_id": u, "kind": "notice",
                                      "notice_id": 7000})) for u in NOTICE_READERS]
        tallyctl.publish(h.kcat, brokers, reads)
        published += len(notices) + len(reads)
        tallyctl.wait_until("the first member's router to join the group",
                            lambda: tallyctl.log_lines(h.path("a.log"), "to share the input partitions"), 60,
                            proc=a)
        tallyctl.wait_until("both members to own partitions", lambda: tallyctl.cluster_settled(ca, 2), 120, proc=b)
        for client, proc in ((ca, a), (cb, b)):
            tallyctl.wait_lag_zero(client, timeout=120, proc=proc, min_input_end=published)
            checks.check_counts(h, client, w.model)
        h.checkpoint("after a second member joined (%d records)" % published)

        # The member that neither owns nor stands by for the partition of
        # the notices holds it for its global entity only. It stops first,
        # so that it still does at its stop (stopped second, it would be
        # given the other's partitions, a rebalance that tally's broker
        # completes in well under a second).
        only = [n for n in ("a", "b") if global_only_at_stop(h.path(n + ".log"))]
        h.check(len(only) == 1, "one member should hold the notices' partition global-only, not %s" % only)
        stop_cleanly(h, (a, b) if only == ["a"] else (b, a))
        h.check(only == [n for n in ("a", "b") if global_only_at_stop(h.path(n + ".log"))],
                "the global-only member stopped as one")

        # Its state run by one process (`tally aggregate` without
        # --advertise applies every partition) makes that partition whole
        # again from offset 0, over the notices and red dots it kept, and
        # every count equals the model.
        if only:
            name = only[0]
            agg = h.spawn("tally aggregate " + name,
                          [h.tally, "aggregate", "--brokers", brokers, "--state-dir", h.path(name)],
                          "aggregate-" + name + ".log")
            serve, cs = h.start_serve(brokers, h.path(name), tallyctl.free_port(), log_name="serve-" + name + ".log")
            tallyctl.wait_until("the global-only partition to be made whole",
                                lambda: tallyctl.log_lines(h.path("aggregate-" + name + ".log"),
                                                           "one process applies every partition in full"),
                                60, proc=agg)
            tallyctl.wait_lag_zero(cs, timeout=120, proc=agg, min_input_end=published)
            checks.check_counts(h, cs, w.model)
            for u in NOTICE_READERS:
                r = cs.get("/v1/users/%d/unread" % u)
                got = r.json().get("notice") if r.status == 200 else r
                h.check(got == NOTICES - 1, "user %d: %s unread notices, want %d" % (u, got, NOTICES - 1))
            # The notices it kept are listed again from offset 0: expected, not repeats.
            repeats = tallyctl.log_lines(h.path("aggregate-" + name + ".log"), "already in the list")
            h.check(not repeats, "the rebuild logged kept notices as repeats: %s" % repeats[:2])
            stop_cleanly(h, (serve, agg))
            h.checkpoint("member %s's state, its notices' partition global-only, run by one process" % name)

        # Another cluster (--group solo) on the same topics, whose router
        # group already has a member with no directory record (`tally
        # aggregate --role router`): the lone member routes standalone until
        # the group refuses its commit, then joins; every record counts once.
        router = h.spawn("tally aggregate --role router",
                         [h.tally, "aggregate", "--brokers", brokers, "--group", "solo", "--role", "router"],
                         "router.log")
        tallyctl.wait_until("the router to be given its partitions",
                            lambda: tallyctl.log_lines(h.path("router.log"), "assigned tally.events"), 60,
                            proc=router)
        port = tallyctl.free_port()
        c = h.spawn("tally up c", [h.tally, "up", "--brokers", brokers, "--group", "solo", "--state-dir",
                                   h.path("c"), "--http", "127.0.0.1:%d" % port, "--partitions", "4"], "c.log")
        cc = tallyctl.Http("127.0.0.1:%d" % port)
        # Published once the lone member reads the topic, so that it routes
        # them too (and commits, which the group refuses): published before,
        # the router in the group may have routed and committed them all
        # by then, leaving the lone member nothing to route or commit.
        tallyctl.wait_until("the lone member to route standalone",
                            lambda: tallyctl.log_lines(h.path("c.log"), "from the offsets committed to group solo"),
                            60, proc=c)
        last = w.stream(1000)
        tallyctl.publish(h.kcat, brokers, [(r.key, r.value) for r in last])
        published += len(last)
        tallyctl.wait_until("the lone member to find the router group taken",
                            lambda: tallyctl.log_lines(h.path("c.log"), "refused a commit"), 60, proc=c)
        wait_lag_zero_readable(h, cc, c, published)
        tallyctl.wait_lag_zero(cc, timeout=120, proc=c, min_input_end=published)
        checks.check_counts(h, cc, w.model)
        h.checkpoint("a lone member beside a router already in its group (%d records)" % published)
        stop_cleanly(h, (c, router))
        h.finish_checks("e2e_lone_member")


if __name__ == "__main__":
    main()
