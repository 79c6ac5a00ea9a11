#!/usr/bin/env python3
"""End to end: a running tally whose embedded broker is replaced goes on by
itself (SPEC section 4, "Faults": a broker whose log was replaced is handled
by the running process as at start).

1. `tally broker` + `tally up --brokers`: the broker is SIGKILLed and started
   again on the same port. tally up keeps running, says in one line that the
   log is new, keeps every count, and counts the new log's events on top.
2. `tally up` with its own embedded broker: the broker's process is
   SIGKILLed. tally up says what that lost, starts a new broker on the same
   port and goes on the same way.

  python3 e2e_broker_restart.py --tally build/tally [--work-dir DIR]
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

PATHS = ["/v1/users/%d/counts" % u for u in range(1, 41)]


def produce(h, brokers, n, seed):
    # The users read below are all the users: each has posts in every run.
    res = subprocess.run([h.tally, "produce", "--brokers", brokers, "--gen", str(n), "--seed", str(seed),
                          "--users", str(len(PATHS))],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if res.returncode != 0:
        raise tallyctl.TestFailure("tally produce exited %d: %s" % (res.returncode, res.stderr.decode()[-500:]))


def posts(client):
    """Each user's posts, by path."""
    return {p: client.get(p).json()["posts"] for p in PATHS}


def survive(h, up, client, brokers, replace, log_name, what):
    """Counts 3000 events, has `replace()` replace the broker's log, then
    checks that `up` goes on: counts kept, new events counted on top."""
    produce(h, brokers, 3000, seed=1)
    tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=3000)
    before = posts(client)
    h.check(sum(before.values()) > 0, "%s: the stream counted posts" % what)
    replace()
    # Events of another seed, published at once: their posts add to the counts.
    produce(h, brokers, 3000, seed=2)
    tallyctl.wait_until("tally up to say the log is new",
                        lambda: tallyctl.log_lines(h.path(log_name), "new embedded broker log"), 60, proc=up)
    tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=3000)
    h.check(up.alive(), "%s: tally up is still running" % what)
    after = posts(client)
    h.check(sum(after.values()) > sum(before.values()),
            "%s: posts grew on the new log: %d -> %d" % (what, sum(before.values()), sum(after.values())))
    # The generator deletes only posts it made in the same run, after them:
    # no user's count may fall (a partition whose state was lost would).
    fell = {p: (before[p], after[p]) for p in PATHS if after[p] < before[p]}
    h.check(not fell, "%s: every user's posts kept on the new log; fell: %s" % (what, fell))
    lines = tallyctl.log_lines(h.path(log_name), "new embedded broker log")
    h.check(len(lines) == 1, "%s: one line says the log is new (found %d)" % (what, len(lines)))
    h.check(not tallyctl.log_lines(h.path(log_name), "stopped after an error"), "%s: no stop" % what)


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_broker_restart", default_seed=404) as h:
        # 1. A separate `tally broker`, SIGKILLed and started again.
        broker, brokers = h.start_broker(partitions=4)
        port = brokers.rsplit(":", 1)[1]
        up, client = h.start_up(brokers, h.path("state1"), tallyctl.free_port(), log_name="up1.log")

        def restart_broker():
            nonlocal broker
            broker.kill9()
            broker = h.spawn("tally broker", [h.tally, "broker", "--port", port, "--partitions", 4],
                             "broker2.log", capture_stdout=True)
            if not broker.wait_stdout(lambda l: l.startswith("bootstrap: "), timeout=60):
                raise tallyctl.TestFailure("tally broker did not start again on port %s" % port)

        survive(h, up, client, brokers, restart_broker, "up1.log", "tally broker restarted")
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up --brokers on SIGTERM: exit %s" % rc)
        h.checkpoint("a separate tally broker restarted under tally up")

        # 2. tally up's own broker process SIGKILLed.
        port, http_port = tallyctl.free_port(), tallyctl.free_port()
        state = h.path("state2")
        up = h.spawn("tally up", [h.tally, "up", "--port", port, "--state-dir", state, "--http",
                                  "127.0.0.1:%d" % http_port, "--partitions", 4], "up2.log")
        client = tallyctl.Http("127.0.0.1:%d" % http_port)
        tallyctl.wait_healthy(client, timeout=120, proc=up)
        first = tallyctl.embedded_broker_pid(state)

        def kill_embedded():
            os.kill(first, 9)
            log("SIGKILLed tally up's embedded broker (pid %d)" % first)
            tallyctl.wait_until("a new embedded broker", lambda: tallyctl.embedded_broker_pid(state) not in (None, first),
                                30, proc=up)

        survive(h, up, client, "127.0.0.1:%d" % port, kill_embedded, "up2.log", "embedded broker killed")
        h.check(len(tallyctl.log_lines(h.path("up2.log"), "starting a new one")) == 1,
                "tally up said it starts a new broker")
        second = tallyctl.embedded_broker_pid(state)
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit %s" % rc)
        h.check(not tallyctl.pid_alive(second), "the new embedded broker stopped with tally up")
        h.finish_checks("e2e_broker_restart")


if __name__ == "__main__":
    main()
