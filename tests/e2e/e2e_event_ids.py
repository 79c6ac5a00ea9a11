#!/usr/bin/env python3
"""End to end: an event that carries an `id` is applied once per id,
wherever and however often it arrives (SPEC section 1), so a client may
retry after an unclear answer (SPEC section 4, `503 outcome_unknown`).

1. Views with ids are POSTed, POSTed again (a client's retry), and published
   twice more with kcat, unkeyed, so the copies land on other partitions:
   each counts once. Views without an id, POSTed twice, count twice.
2. The broker is frozen (SIGSTOP) under a POST of views with ids: the answer
   is 503 `outcome_unknown`. The broker comes back, the client retries the
   same request: each view counts once.
3. Ids outside SPEC's 1..64 printable ASCII characters (empty, 65 and
   5,000 characters, a control character, a DEL, non-ASCII): each POST is
   400 `invalid_event` naming the field, two events with `"id":""` in one
   batch too; the same lines published with kcat land in tally.dlq with a
   reason naming the id, and none is counted. Ids at the rule's edges (one
   character, 64, a space, `~`) are accepted and applied once per id.
4. `tally replay` of tally.deltas into a new directory answers the same.

  python3 e2e_event_ids.py --tally build/tally [--work-dir DIR]
"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402


def views(client, posts):
    out = {}
    for i in range(0, len(posts), 200):
        chunk = posts[i:i + 200]
        r = client.get("/v1/posts/counts?ids=" + ",".join(map(str, chunk)))
        if r.status != 200:
            raise tallyctl.TestFailure("batch read: %r" % r)
        for p in r.json()["posts"]:
            out[p["post_id"]] = p["view"]
    return out


def post_events(client, events):
    return client.post("/v1/events", json.dumps(events))


# Ids SPEC refuses (section 1: 1..64 printable ASCII characters), by kind.
BAD_IDS = [("empty", ""), ("65 characters", "x" * 65), ("5,000 characters", "y" * 5000),
           ("a control character", "a\u0001b"), ("a newline", "a\n"), ("DEL", "a\u007fb"),
           ("non-ASCII", "\u00e9"), ("an emoji", "\U0001F600")]
# Ids at the edges of the rule, all valid.
EDGE_IDS = ["z", "~" * 64, "a b", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}"]


def check_bad_ids(h, client, brokers, up, ts):
    """Section 3: every id outside the rule is refused over HTTP and dead-lettered from Kafka."""
    lines, statuses = [], []
    for i, (kind, bad) in enumerate(BAD_IDS):
        ev = {"type": "view", "ts": ts + i, "post_id": 9000 + i, "id": bad}
        line = json.dumps(ev, ensure_ascii=False, separators=(",", ":"))
        lines.append((kind, 9000 + i, line))
        r = client.post("/v1/events", line.encode())
        err = r.json().get("error", {}) if r.status != 202 else {}
        statuses.append("%s %d %s" % (kind, r.status, err.get("message", "")[:60]))
        h.check(r.status == 400 and err.get("code") == "invalid_event" and "field id" in err.get("message", ""),
                "POST of a view with an id of %s: want 400 invalid_event naming field id, got %r" % (kind, r))
    twice = [{"type": "view", "ts": ts, "post_id": 9100, "id": ""}] * 2
    r = post_events(client, twice)
    h.check(r.status == 400, "POST of two views with \"id\":\"\": want 400, got %r" % r)
    log("ids outside the rule over HTTP:\n    %s" % "\n    ".join(statuses))

    good = [{"type": "view", "ts": ts, "post_id": 9200 + i, "id": g} for i, g in enumerate(EDGE_IDS)]
    for attempt in range(2):
        r = post_events(client, good)
        h.check(r.status == 202, "POST of ids at the rule's edges (attempt %d): %r" % (attempt + 1, r))

    before = tallyctl.end_offsets(tallyctl.watermarks(client))
    tallyctl.publish(h.kcat, brokers, [line for _, _, line in lines], keyed=False)
    tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=before + len(lines))
    dead = {}

    def all_dead():
        out = tallyctl.consume(h.kcat, brokers, tallyctl.DLQ_TOPIC, "%h\x1e%s\n")
        for rec in out.split("\n"):
            headers, _, value = rec.partition("\x1e")
            dead[value] = headers
        return all(line in dead for _, _, line in lines)

    try:
        tallyctl.wait_until("the bad ids in tally.dlq", all_dead, 30, interval=0.5)
    except tallyctl.TestFailure as e:
        h.check(False, str(e))
    for kind, _, line in lines:
        headers = dead.get(line)
        h.check(headers is not None and "tally.reason=field id" in headers,
                "a view with an id of %s published with kcat: want it in tally.dlq with a reason naming "
                "field id, got %s" % (kind, "nothing" if headers is None else repr(headers[:200])))
    got = views(client, [p for _, p, _ in lines] + [9100] + [e["post_id"] for e in good])
    counted = {p: v for p, v in got.items() if p < 9200 and v != 0}
    h.check(not counted, "views with ids outside the rule were counted (post: views): %s" % counted)
    edges = {p: v for p, v in got.items() if p >= 9200 and v != 1}
    h.check(not edges, "views with ids at the rule's edges, POSTed twice, want 1 each: %s" % edges)
    log("ids outside the rule from Kafka: %d dead letters, none counted" % len(lines))


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_event_ids", default_seed=2024) as h:
        broker, brokers = h.start_broker(partitions=8)
        up, client = h.start_up(brokers, h.path("state"), tallyctl.free_port(), partitions=8)
        ts = int(time.time() * 1000)

        # 1. Retries over HTTP and copies on other partitions.
        with_id = [{"type": "view", "ts": ts + i, "post_id": 1000 + i, "id": "view-%d" % i} for i in range(300)]
        without = [{"type": "view", "ts": ts + i, "post_id": 5000 + i} for i in range(100)]
        for batch in (with_id[:150], with_id[150:], without):
            for attempt in range(2):
                r = post_events(client, batch)
                h.check(r.status == 202, "POST attempt %d: %r" % (attempt + 1, r))
        copies = [json.dumps(e) for e in with_id] * 2
        h.rng.shuffle(copies)
        tallyctl.publish(h.kcat, brokers, copies, keyed=False)
        total = 2 * 300 + 2 * 100 + 600
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=total)
        got = views(client, [e["post_id"] for e in with_id + without])
        wrong = [(p, v) for p, v in got.items() if v != (1 if p < 5000 else 2)]
        h.check(not wrong, "%d posts read the wrong views (want 1 with an id, 2 without), e.g. %s" % (
            len(wrong), wrong[:8]))
        dropped = tallyctl.metric(client, "tally_applier_duplicate_event_ids_total")
        h.check(dropped is not None and dropped >= 900, "duplicate event ids counted: %s" % dropped)
        h.checkpoint("retries and copies of events with ids")

        # 2. An unclear answer, and a safe retry.
        retry = [{"type": "view", "ts": ts + i, "post_id": 8000 + i, "id": "late-%d" % i} for i in range(20)]
        os.kill(broker.pid, signal.SIGSTOP)
        log("tally broker frozen (SIGSTOP)")
        try:
            t0 = time.monotonic()
            r = post_events(tallyctl.Http(client.hostport, timeout=60), retry)
            code = r.json().get("error", {}).get("code") if r.status != 202 else None
            log("POST during the freeze: %d %s after %.1f s" % (r.status, code, time.monotonic() - t0))
            h.check(r.status == 503 and code == "outcome_unknown",
                    "a publish the broker did not answer: 503 outcome_unknown, got %r" % r)
        finally:
            os.kill(broker.pid, signal.SIGCONT)
            log("tally broker thawed (SIGCONT)")
        tallyctl.wait_healthy(client, timeout=60, proc=up)
        r = post_events(client, retry)
        h.check(r.status == 202, "the retry: %r" % r)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up)
        got = views(client, [e["post_id"] for e in retry])
        wrong = [(p, v) for p, v in got.items() if v != 1]
        h.check(not wrong, "after the retry, want 1 view each: %s" % wrong[:8])
        h.checkpoint("503 outcome_unknown, then a retry")

        # 3. Ids outside the rule.
        check_bad_ids(h, client, brokers, up, ts)
        h.checkpoint("ids outside 1..64 printable ASCII: 400, tally.dlq, not counted")

        # 4. Replay decides the same.
        everything = [e["post_id"] for e in with_id + without + retry]
        live = views(client, everything)
        h.replay(brokers, h.path("replayed"))
        serve, sclient = h.start_serve(None, h.path("replayed"), tallyctl.free_port())
        replayed = views(sclient, everything)
        diff = [p for p in everything if live[p] != replayed[p]]
        h.check(not diff, "replay differs at %d posts, e.g. %s" % (len(diff), diff[:5]))
        serve.stop()
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit %s" % rc)
        h.finish_checks("e2e_event_ids")


if __name__ == "__main__":
    main()
