#!/usr/bin/env python3
"""End to end: `tally up` with its embedded broker (no --brokers), stopped and
started again on the same state directory (SPEC sections 2 and 7): the
broker's log is kept in DIR/log, so every count is as it was, nothing is
read twice, nothing is said of a new log, and new events count on top; tally
up's GET /metrics shows its broker's end offsets.

  python3 e2e_restart.py --tally build/tally [--work-dir DIR]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

PATHS = ["/v1/posts/%d/counts" % p for p in range(1, 41)] + ["/v1/users/%d/counts" % u for u in range(1, 41)]


def up(h, port, http_port, log_name, extra=()):
    argv = [h.tally, "up", "--port", port, "--state-dir", h.path("state"), "--http", "127.0.0.1:%d" % http_port,
            "--partitions", 4] + list(extra)
    p = h.spawn("tally up", argv, log_name)
    client = tallyctl.Http("127.0.0.1:%d" % http_port)
    tallyctl.wait_healthy(client, timeout=120, proc=p)
    return p, client


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_restart", default_seed=77) as h:
        port, http_port = tallyctl.free_port(), tallyctl.free_port()
        brokers = "127.0.0.1:%d" % port
        p1, client = up(h, port, http_port, "up1.log")
        n = 3000
        produce(h, brokers, n, seed=1)
        tallyctl.wait_lag_zero(client, timeout=120, proc=p1, min_input_end=n)
        before = {path: client.get(path).text() for path in PATHS}
        h.check(any('"like":0' not in v and "post" in k for k, v in before.items()), "the stream counted something")
        rc, clean = p1.stop(grace=30)
        h.check(clean and rc == 0, "first tally up on SIGTERM: exit %s" % rc)

        # Restarted with a token on the write endpoints (--auth-token-file).
        with open(h.path("token"), "w") as f:
            f.write("e2e-secret\n")
        p2, client = up(h, port, http_port, "up2.log", extra=["--auth-token-file", h.path("token")])
        after = {path: client.get(path).text() for path in PATHS}
        diff = [k for k in PATHS if before[k] != after[k]]
        h.check(not diff, "counts changed across the restart at %s: %s -> %s" % (
            diff[:1], before[diff[0]] if diff else "", after[diff[0]] if diff else ""))
        lines = tallyctl.log_lines(h.path("up2.log"), "was built from")
        h.check(not lines, "tally up took its own kept log for a new one: %s" % lines[:1])

        event = '{"type":"view","ts":1,"post_id":1}'
        r = client.post("/v1/events", event)
        h.check(r.status == 401 and r.json()["error"]["code"] == "unauthorized"
                and r.headers.get("www-authenticate", "").startswith("Bearer"), "POST without the token: %r" % r)
        r = client.post("/v1/events", event, headers={"Authorization": "Bearer wrong"})
        h.check(r.status == 401, "POST with a wrong token: %r" % r)
        r = client.post("/v1/users/1/unread/like/reset", headers={"Authorization": "Bearer e2e-secret"})
        h.check(r.status == 202, "reset with the token: %r" % r)
        h.check(client.get("/v1/posts/1/counts").status == 200, "reads need no token")

        broker_pid = tallyctl.embedded_broker_pid(h.path("state"))
        h.check(broker_pid is not None and tallyctl.pid_alive(broker_pid),
                "the state directory names a running embedded broker: %s" % broker_pid)

        # New events count on top of the kept ones.
        produce(h, brokers, n, seed=2)
        report = tallyctl.wait_lag_zero(client, timeout=120, proc=p2, min_input_end=2 * n + 1)
        h.check(tallyctl.end_offsets(report) == 2 * n + 1, "the log holds %d records (%d events and one reset)" % (
            tallyctl.end_offsets(report), 2 * n))
        # The broker's figures in tally up's own /metrics (SPEC section 7).
        def broker_end_offsets():
            total = 0
            for line in client.get("/metrics").text().splitlines():
                if line.startswith('tally_broker_log_end_offset{topic="tally.events"'):
                    total += int(line.rsplit(" ", 1)[1])
            return total == 2 * n + 1
        h.check(tallyctl.wait_until("/metrics to show the broker's end offsets", broker_end_offsets, 10,
                                    proc=p2), "tally_broker_log_end_offset of tally.events in /metrics")
        views_before = sum(int(before[p].split('"view":')[1].rstrip("}")) for p in PATHS if "posts" in p)
        views_after = sum(int(client.get(p).text().split('"view":')[1].rstrip("}")) for p in PATHS if "posts" in p)
        h.check(views_after > views_before, "views did not grow after the restart: %d -> %d" % (views_before,
                                                                                                views_after))
        rc, clean = p2.stop(grace=30)
        h.check(clean and rc == 0, "second tally up on SIGTERM: exit %s" % rc)
        # Everything was applied, so a clean stop takes its broker along.
        h.check(not tallyctl.pid_alive(broker_pid), "the embedded broker (pid %d) stopped with tally up" % broker_pid)
        h.check(not os.path.exists(h.path("state", "BROKER")), "the broker's record is gone after a clean stop")
        h.finish_checks("e2e_restart")


def produce(h, brokers, n, seed):
    """Publishes n generated events with `tally produce --gen`."""
    import subprocess
    res = subprocess.run([h.tally, "produce", "--brokers", brokers, "--gen", str(n), "--seed", str(seed)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if res.returncode != 0:
        raise tallyctl.TestFailure("tally produce exited %d: %s" % (res.returncode, res.stderr.decode()[-500:]))
    log(res.stdout.decode().strip())


if __name__ == "__main__":
    main()
