#!/usr/bin/env python3
"""End to end: a seeded random stream of ~5k events, published with kcat to a
`tally broker`, consumed by `tally up`; every answer must equal a naive
reference model (SPEC sections 1-4).

Checks: every post's counts (single and batch endpoints), every user's
counts, the unread counters with unconditional increments, every like edge
the stream touched, a sample of "viewed" pairs; the invalid records reached
tally.dlq with their original bytes and a reason header; the error JSON shape
of 400/404/405/413; POST /v1/events accepts a valid batch (202) and refuses
an invalid one (400 naming the index) without publishing any of it.

  python3 e2e_counts.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

N_EVENTS = 5000
N_POSTS = 300
N_USERS = 200
FRESH = checks.FRESH  # ids above the workload's, for the POST /v1/events checks


def is_error_shape(reply, status):
    """True when `reply` is `status` with {"error":{"code":snake,"message":S}}."""
    if reply.status != status:
        return False
    try:
        body = reply.json()
    except ValueError:
        return False
    err = body.get("error") if isinstance(body, dict) else None
    return (isinstance(err, dict) and set(body) == {"error"} and set(err) == {"code", "message"}
            and isinstance(err["code"], str) and re.fullmatch(r"[a-z][a-z0-9_]*", err["code"]) is not None
            and isinstance(err["message"], str) and "\n" not in err["message"]
            and reply.headers.get("content-type", "").startswith("application/json"))


def check_dlq(h, brokers, invalid):
    want_values = sorted(r.value for r in invalid)
    values = []

    def all_there():
        out = tallyctl.consume(h.kcat, brokers, tallyctl.DLQ_TOPIC, "%s\n")
        values[:] = [v for v in out.split("\n") if v]
        return len(values) >= len(want_values)

    try:
        tallyctl.wait_until("%d records in tally.dlq" % len(want_values), all_there, 30, interval=0.5)
    except tallyctl.TestFailure as e:
        h.check(False, "%s (found %d)" % (e, len(values)))
    h.check(sorted(values) == want_values,
            "tally.dlq values differ from the invalid records sent:\n    sent %s\n    got  %s" % (
                want_values, sorted(values)))
    headers = [l for l in tallyctl.consume(h.kcat, brokers, tallyctl.DLQ_TOPIC, "%h\n").split("\n") if l]
    h.check(len(headers) == len(want_values), "tally.dlq has %d header lines, want %d" % (len(headers), len(want_values)))
    for line in headers:
        h.check("tally.reason=" in line and "tally.source.topic=%s" % tallyctl.EVENTS_TOPIC in line
                and "tally.source.partition=" in line and "tally.source.offset=" in line,
                "tally.dlq record headers lack reason/source coordinates: %r" % line)
    log("tally.dlq: %d records, e.g. %s" % (len(headers), headers[0] if headers else None))


def check_errors(h, client):
    r = client.get("/v1/no/such/path")
    h.check(is_error_shape(r, 404), "GET /v1/no/such/path: want 404 with the error JSON shape, got %r" % r)
    r = client.get("/nothing")
    h.check(is_error_shape(r, 404), "GET /nothing: want 404 with the error JSON shape, got %r" % r)
    for path in ("/v1/posts/abc/counts", "/v1/posts/0/counts", "/v1/users/-1/counts",
                 "/v1/posts/9223372036854775808/counts", "/v1/posts/1/likes/x"):
        r = client.get(path)
        h.check(is_error_shape(r, 400), "GET %s: want 400 with the error JSON shape, got %r" % (path, r))
    too_many = ",".join(str(i) for i in range(1, 202))
    for path in ("/v1/posts/counts?ids=" + too_many, "/v1/posts/counts?ids=", "/v1/posts/counts",
                 "/v1/posts/counts?ids=1,x"):
        r = client.get(path)
        h.check(is_error_shape(r, 400), "GET %s: want 400, got %r" % (path[:60], r))
    r = client.post("/v1/posts/1/counts", body="{}")
    h.check(is_error_shape(r, 405), "POST /v1/posts/1/counts: want 405 with the error JSON shape, got %r" % r)
    r = client.get("/v1/events")
    h.check(is_error_shape(r, 405), "GET /v1/events: want 405, got %r" % r)
    r = client.post("/v1/users/1/unread/bogus/reset")
    h.check(is_error_shape(r, 400), "POST /v1/users/1/unread/bogus/reset: want 400 (bad kind), got %r" % r)
    try:
        r = client.post("/v1/events", body=b"[" + b" " * (1024 * 1024 + 16) + b"]",
                        headers={"Content-Type": "application/json"})
        h.check(is_error_shape(r, 413), "POST /v1/events with a body over 1 MiB: want 413, got %r" % r)
    except ConnectionError as e:
        h.check(False, "POST /v1/events with a body over 1 MiB: no answer (%s), want 413" % e)
    # A bad request never disturbs other requests.
    r = client.get("/healthz")
    h.check(r.status == 200, "GET /healthz after bad requests: %r" % r)
    r = client.get("/metrics")
    h.check(r.status == 200 and len(r.body) > 0, "GET /metrics: %r" % r)


def check_post_events(h, client, model):
    """POST /v1/events: valid single event and batch accepted, invalid batches
    refused with nothing published. Applies the accepted ones to `model`."""
    ts = event_model.TS0 + 10**9
    before = tallyctl.end_offsets(tallyctl.watermarks(client))
    single = {"type": "like", "ts": ts, "post_id": FRESH + 1, "user_id": 1, "author_id": str(FRESH + 50)}
    r = client.post("/v1/events", body=single)
    h.check(r.status == 202 and r.json() == {"accepted": 1}, "POST /v1/events (one like): want 202 {\"accepted\":1}, got %r" % r)
    batch = [
        {"type": "comment", "ts": ts + 1, "post_id": FRESH + 2, "user_id": 2, "author_id": FRESH + 50},
        {"type": "follow", "ts": ts + 2, "user_id": FRESH + 51, "target_id": str(FRESH + 52)},
        {"type": "post", "ts": ts + 3, "author_id": FRESH + 53, "post_id": FRESH + 3},
    ]
    r = client.post("/v1/events", body=batch)
    h.check(r.status == 202 and r.json() == {"accepted": 3}, "POST /v1/events (3 events): want 202 {\"accepted\":3}, got %r" % r)
    accepted = [single] + batch

    mid = tallyctl.end_offsets(tallyctl.watermarks(client))
    bad_batches = [
        ([{"type": "like", "ts": ts + 4, "post_id": FRESH + 5, "user_id": 3},
          {"type": "view", "ts": ts + 5, "post_id": FRESH + 5},
          {"type": "like", "ts": ts + 6, "post_id": FRESH + 5}], 2),  # missing user_id
        ([{"type": "view", "ts": ts + 7, "post_id": FRESH + 6},
          {"type": "nonsense", "ts": ts + 8}], 1),
        ([{"type": "comment", "ts": ts + 9, "post_id": 0, "user_id": 4},
          {"type": "view", "ts": ts + 10, "post_id": FRESH + 6}], 0),
    ]
    for body, index in bad_batches:
        r = client.post("/v1/events", body=body)
        ok = is_error_shape(r, 400) and re.search(r"(?<![0-9])%d(?![0-9])" % index, r.json()["error"]["message"])
        h.check(ok, "POST /v1/events, invalid at index %d: want 400 naming index %d, got %r" % (index, index, r))
    for raw in (b"{not json", b"42", b"[" + b",".join([b'{"type":"view","ts":1,"post_id":7}'] * 1001) + b"]"):
        r = client.post("/v1/events", body=raw, headers={"Content-Type": "application/json"})
        h.check(is_error_shape(r, 400), "POST /v1/events %r...: want 400, got %r" % (raw[:40], r))
    after = tallyctl.end_offsets(tallyctl.watermarks(client))
    h.check(mid - before == 4, "POST /v1/events accepted 4 events but %s grew by %d records" % (
        tallyctl.EVENTS_TOPIC, mid - before))
    h.check(after == mid, "refused POST /v1/events requests published %d records to %s" % (
        after - mid, tallyctl.EVENTS_TOPIC))

    tallyctl.wait_lag_zero(client, timeout=60)
    for ev in accepted:
        model.apply({k: int(v) if k.endswith("_id") else v for k, v in ev.items()})
    for p in (FRESH + 1, FRESH + 2, FRESH + 3, FRESH + 5, FRESH + 6):
        r = client.get("/v1/posts/%d/counts" % p)
        want = model.post_counts(p)
        h.check(r.status == 200 and r.json() == want, "after POST /v1/events, post %d: got %r, want %s" % (p, r, want))
    for u in (FRESH + 50, FRESH + 51, FRESH + 52, FRESH + 53):
        r = client.get("/v1/users/%d/counts" % u)
        want = model.user_counts(u)
        h.check(r.status == 200 and r.json() == want, "after POST /v1/events, user %d: got %r, want %s" % (u, r, want))
    r = client.get("/v1/users/%d/unread" % (FRESH + 50))
    h.check(r.status == 200 and r.json().get("comment") == 1,
            "after POST /v1/events, user %d unread comment: got %r, want 1" % (FRESH + 50, r))


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_counts", default_seed=1234) as h:
        broker, brokers = h.start_broker(partitions=4)
        http_port = tallyctl.free_port()
        up, client = h.start_up(brokers, h.path("state"), http_port, partitions=4)

        r = client.get("/v1/info")
        h.check(r.status == 200, "GET /v1/info: %r" % r)
        if r.status == 200:
            info = r.json()
            h.check(info.get("partitions") == 4 and info.get("input_topics") == [tallyctl.EVENTS_TOPIC]
                    and isinstance(info.get("version"), str) and isinstance(info.get("brokers"), str)
                    and isinstance(info.get("state_dir"), str),
                    "GET /v1/info: unexpected %s" % r.text())

        w = event_model.Workload(h.rng, N_POSTS, N_USERS)
        records = w.stream(N_EVENTS, n_invalid=14)
        invalid = [r for r in records if not r.valid]
        # Two publishes: the second lands while the first is being consumed.
        half = len(records) // 2
        for part in (records[:half], records[half:]):
            tallyctl.publish(h.kcat, brokers, [(r.key, r.value) for r in part])
        log("published %d records (%d invalid) with kcat" % (len(records), len(invalid)))
        report = tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=len(records))
        log("lag 0: %d records in %s" % (tallyctl.end_offsets(report), tallyctl.EVENTS_TOPIC))
        h.check(tallyctl.end_offsets(report) == len(records), "%s holds %d records, %d were published" % (
            tallyctl.EVENTS_TOPIC, tallyctl.end_offsets(report), len(records)))
        rows = report.get("partitions", [])
        h.check(any(p.get("topic") == tallyctl.EVENTS_TOPIC for p in rows) and all(
            set(p) == {"topic", "partition", "applied_offset", "end_offset", "lag", "event_time_ms"} for p in rows),
            "GET /v1/watermarks has the wrong shape: %s" % json.dumps(report)[:500])

        unseen_posts = [FRESH + 500 + i for i in range(5)]
        unseen_users = [FRESH + 600 + i for i in range(5)]
        checks.check_counts(h, client, w.model, unseen_posts, unseen_users)
        h.checkpoint("counts after %d events" % N_EVENTS)

        check_dlq(h, brokers, invalid)
        checks.check_invalid_logged(h, client, len(invalid))
        check_errors(h, client)
        check_post_events(h, client, w.model)
        h.checkpoint("dead letters, their log lines, errors and POST /v1/events")

        # Everything still matches after the POSTed events (nothing else moved).
        checks.check_counts(h, client, w.model, views=False)
        h.checkpoint("counts after POST /v1/events")

        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit status %s%s" % (rc, "" if clean else " (had to SIGKILL)"))
        h.checkpoint("clean stop")
        h.finish_checks("e2e_counts")


if __name__ == "__main__":
    main()
