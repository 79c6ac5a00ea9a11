#!/usr/bin/env python3
"""End to end: records that retention removed before tally read them are
never skipped silently (SPEC section 4, Faults).

`tally broker` runs here with 1 MiB segments and keeps 4 MiB a partition
(--segment-bytes, --retention-bytes, as Kafka's log.segment.bytes and
log.retention.bytes), checked every 200 ms, so a stopped tally can fall out
of its log:

1. Input: `tally up` counts a few likes and stops cleanly; then 12 MiB of
   views (incompressible padding in an unknown field) go into the one input
   partition, and the log start moves past the offset tally committed.
   Restarted, tally says in one ERROR line which records were lost, counts
   them in tally_input_lost_records_total, and counts everything from the
   log start on.
2. tally.deltas: tally stops again; 8 MiB of other records go into the one
   deltas partition, past the offset the state holds. Restarted, the applier
   says in one ERROR line which deltas records were lost, counts them in
   tally_deltas_lost_records_total, goes on from the log start, and new
   events are counted.
3. The input gap again, met by `tally aggregate` (its router a consumer
   group member) with `tally serve` beside it.

  python3 e2e_retention.py --tally build/tally [--work-dir DIR]
"""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

TS0 = 1_700_000_000_000
PAD = 4096  # bytes of incompressible padding per filler event


def log_start(h, brokers, topic):
    """The first offset `topic` partition 0 still holds."""
    out = subprocess.run([h.kcat, "-C", "-b", brokers, "-t", topic, "-p", "0", "-o", "beginning", "-c", "1",
                          "-e", "-q", "-f", "%o\\n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=60).stdout.decode().split()
    return int(out[0]) if out else None


def settled_log_start(h, brokers, topic, above):
    """The log start of `topic` partition 0 once retention moved it past
    `above` and it stays put over two retention checks."""
    last = [None]

    def settled():
        now = log_start(h, brokers, topic)
        moved = now is not None and now > above and now == last[0]
        last[0] = now
        return now if moved else None

    try:
        return tallyctl.wait_until("retention to move %s/0 past offset %d" % (topic, above), settled, 30,
                                   interval=0.5)
    except tallyctl.TestFailure:
        raise tallyctl.TestFailure("retention did not move %s/0 past offset %d (log start %s)" % (
            topic, above, last[0])) from None


def likes(n, post, first_user, ts):
    return [(str(post), json.dumps({"type": "like", "ts": ts + i, "post_id": post, "user_id": first_user + i}))
            for i in range(n)]


def lines_matching(path, pattern):
    with open(path, errors="replace") as f:
        return [m for m in (re.search(pattern, l) for l in f) if m]


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_retention", default_seed=5) as h:
        _, brokers = h.start_broker(partitions=1, extra=[
            "--segment-bytes", 1 << 20, "--retention-bytes", 4 << 20, "--retention-check-ms", 200])
        state, http_port = h.path("state"), tallyctl.free_port()

        # 1. The input log moves past tally's committed offset while it is stopped.
        up, client = h.start_up(brokers, state, http_port, partitions=1, log_name="up1.log")
        tallyctl.publish(h.kcat, brokers, likes(10, 1, 1, TS0))
        tallyctl.wait_lag_zero(client, timeout=60, proc=up, min_input_end=10)
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "first tally up on SIGTERM: exit %s" % rc)

        n_views = 3000
        filler = [("77", json.dumps({"type": "view", "ts": TS0 + i, "post_id": 77,
                                     "pad": h.rng.randbytes(PAD // 2).hex()})) for i in range(n_views)]
        tallyctl.publish(h.kcat, brokers, filler)
        end = 10 + n_views
        low = settled_log_start(h, brokers, tallyctl.EVENTS_TOPIC, 10)
        log("tally.events/0 now holds offsets %s..%d" % (low, end - 1))

        up, client = h.start_up(brokers, state, http_port, partitions=1, log_name="up2.log")
        tallyctl.wait_lag_zero(client, timeout=60, proc=up, min_input_end=end)
        found = lines_matching(h.path("up2.log"),
                               r"ERROR.* tally\.events/0: records (\d+)\.\.(\d+) were removed by retention "
                               r"before tally read them \((\d+) lost\)")
        want = (10, low - 1, low - 10)
        h.check([tuple(int(g) for g in m.groups()) for m in found] == [want],
                "want one ERROR line for tally.events/0 records %d..%d (%d lost), found %s" % (
                    want + ([m.group(0) for m in found],)))
        lost = tallyctl.metric(client, "tally_input_lost_records_total")
        h.check(lost == low - 10, "tally_input_lost_records_total is %s, want %d" % (lost, low - 10))
        views = client.get("/v1/posts/77/counts").json()["view"]
        h.check(views == end - low, "post 77 has %d views, want the %d from the log start on" % (views, end - low))
        h.check(client.get("/v1/posts/1/counts").json()["like"] == 10, "the likes counted before the gap")
        h.checkpoint("input lost to retention: reported, counted, counting goes on")

        # 2. tally.deltas moves past the state's offset while tally is stopped.
        deltas_end = tallyctl.watermarks(client)
        deltas_end = [p["end_offset"] for p in deltas_end["partitions"] if p["topic"] == tallyctl.DELTAS_TOPIC][0]
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "second tally up on SIGTERM: exit %s" % rc)
        # Just under 1 MiB a record (Kafka's message.max.bytes); none decodes as deltas.
        junk = h.rng.randbytes((1 << 19) - 1024).hex()
        res = subprocess.run([h.kcat, "-P", "-b", brokers, "-t", tallyctl.DELTAS_TOPIC, "-p", "0",
                              "-X", "message.max.bytes=2000000", "-q"],
                             input=("\n".join([junk] * 7) + "\n").encode(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=60)
        if res.returncode != 0:
            raise tallyctl.TestFailure("kcat -P to tally.deltas: %s" % res.stderr.decode(errors="replace"))
        dlow = settled_log_start(h, brokers, tallyctl.DELTAS_TOPIC, deltas_end)
        log("tally.deltas/0 now starts at %s; the state goes on from %d" % (dlow, deltas_end))
        tallyctl.publish(h.kcat, brokers, likes(5, 2, 100, TS0 + 10**6))

        up, client = h.start_up(brokers, state, http_port, partitions=1, log_name="up3.log")
        tallyctl.wait_lag_zero(client, timeout=60, proc=up, min_input_end=end + 5)
        found = lines_matching(h.path("up3.log"),
                               r"ERROR.* tally\.deltas/0: records (\d+)\.\.(\d+) were removed by retention "
                               r"before the applier applied them")
        want = (deltas_end, dlow - 1)
        h.check([tuple(int(g) for g in m.groups()) for m in found] == [want],
                "want one ERROR line for tally.deltas/0 records %d..%d, found %s" % (
                    want + ([m.group(0) for m in found],)))
        dlost = tallyctl.metric(client, "tally_deltas_lost_records_total")
        h.check(dlost == dlow - deltas_end, "tally_deltas_lost_records_total is %s, want %d" % (
            dlost, dlow - deltas_end))
        h.check(client.get("/v1/posts/2/counts").json()["like"] == 5, "likes published after the deltas gap")
        h.check(client.get("/v1/posts/1/counts").json()["like"] == 10 and
                client.get("/v1/posts/77/counts").json()["view"] == end - low, "counts kept across the deltas gap")
        h.check(not lines_matching(h.path("up3.log"), r"tally\.events/0: records"),
                "the input gap was reported again after a restart")
        h.checkpoint("deltas lost to retention: reported, counted, applying goes on")

        # 3. The same input gap met by `tally aggregate`, whose router is a
        #    consumer group member (partitions assigned by the group).
        committed = end + 5
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "third tally up on SIGTERM: exit %s" % rc)
        filler = [("78", json.dumps({"type": "view", "ts": TS0 + i, "post_id": 78,
                                     "pad": h.rng.randbytes(PAD // 2).hex()})) for i in range(n_views)]
        tallyctl.publish(h.kcat, brokers, filler)
        end2 = committed + n_views
        low2 = settled_log_start(h, brokers, tallyctl.EVENTS_TOPIC, committed)
        log("tally.events/0 now holds offsets %s..%d" % (low2, end2 - 1))
        agg = h.spawn("tally aggregate", [h.tally, "aggregate", "--brokers", brokers, "--state-dir", state],
                      "aggregate.log")
        serve, sclient = h.start_serve(brokers, state, tallyctl.free_port())
        tallyctl.wait_lag_zero(sclient, timeout=90, proc=agg, min_input_end=end2)
        found = lines_matching(h.path("aggregate.log"),
                               r"ERROR.* tally\.events/0: records (\d+)\.\.(\d+) were removed by retention "
                               r"before tally read them \((\d+) lost\)")
        want = (committed, low2 - 1, low2 - committed)
        h.check([tuple(int(g) for g in m.groups()) for m in found] == [want],
                "tally aggregate: want one ERROR line for tally.events/0 records %d..%d (%d lost), found %s" % (
                    want + ([m.group(0) for m in found],)))
        views = sclient.get("/v1/posts/78/counts").json()["view"]
        h.check(views == end2 - low2, "post 78 has %d views, want the %d from the log start on" % (
            views, end2 - low2))
        serve.stop()
        rc, clean = agg.stop(grace=30)
        h.check(clean and rc == 0, "tally aggregate on SIGTERM: exit %s" % rc)
        h.checkpoint("input lost to retention under tally aggregate (a group member)")
        h.finish_checks("e2e_retention")


if __name__ == "__main__":
    main()
