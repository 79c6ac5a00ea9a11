#!/usr/bin/env python3
"""End to end: a broker that dies under a running tally loses nothing it
acknowledged (SPEC section 7), and one whose log was replaced is handled by
the running process as at start (SPEC sections 2 and 4).

1. `tally broker` + `tally up --brokers`: the broker is SIGKILLed and started
   again on the same port and log. tally up keeps running, says nothing of
   a new log, and every count equals what a fresh tally reading the whole
   log counts: nothing lost, nothing counted twice.
2. `tally up` with its own broker: the broker's process is SIGKILLed. tally
   up says so in one line, starts it again on the same log and goes on the
   same way.
3. `tally broker` started again with a new, empty log on the same port:
   tally up --brokers (a cluster that is not its own) refuses it as a start
   would, in one line naming both cluster ids, and exits 1.

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


def counts(client):
    return {p: client.get(p).json() for p in PATHS}


def reference(h, brokers, name):
    """What a fresh tally reading the whole log counts: a second `tally up
    --brokers` of its own group and state directory on the same broker."""
    ref, ref_client = h.start_up(brokers, h.path(name), tallyctl.free_port(), log_name=name + ".log",
                                 extra=["--group", name])
    tallyctl.wait_lag_zero(ref_client, timeout=120, proc=ref)
    want = counts(ref_client)
    ref.stop(grace=30)
    return want


def survive(h, up, client, brokers, kill, log_name, what):
    """Counts 3000 events, has `kill()` kill the broker (and see it started
    again), publishes 3000 more, then checks that `up` went on and counts
    exactly what a fresh tally counts from the log."""
    produce(h, brokers, 3000, seed=1)
    tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=3000)
    before = posts(client)
    h.check(sum(before.values()) > 0, "%s: the stream counted posts" % what)
    kill()
    # Events of another seed: their posts add to the counts.
    produce(h, brokers, 3000, seed=2)
    tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=6000)
    h.check(up.alive(), "%s: tally up is still running" % what)
    got = counts(client)
    h.check(sum(p["posts"] for p in got.values()) > sum(before.values()),
            "%s: posts grew after the restart" % what)
    want = reference(h, brokers, "reference-" + log_name.split(".")[0])
    differ = [p for p in PATHS if got[p] != want[p]]
    h.check(not differ, "%s: %d users' counts differ from a fresh tally's, e.g. %s: %s, want %s" % (
        what, len(differ), differ[:1], differ and got[differ[0]], differ and want[differ[0]]))
    h.check(not tallyctl.log_lines(h.path(log_name), "was built from"),
            "%s: tally up took the restarted broker for a new log" % what)


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_broker_restart", default_seed=404) as h:
        # 1. A separate `tally broker`, SIGKILLed and started again.
        broker, brokers = h.start_broker(partitions=4)
        port = int(brokers.rsplit(":", 1)[1])
        up, client = h.start_up(brokers, h.path("state1"), tallyctl.free_port(), log_name="up1.log")

        def restart_broker():
            nonlocal broker
            broker.kill9()
            broker, _ = h.start_broker(partitions=4, port=port, attempts=1)

        survive(h, up, client, brokers, restart_broker, "up1.log", "tally broker restarted")
        h.checkpoint("a separate tally broker SIGKILLed and restarted under tally up")

        # 3. The same port, a new log: not the cluster the state was built from.
        broker.kill9()
        broker, _ = h.start_broker(partitions=4, port=port, attempts=1, log_name="broker-new.log")
        rc = up.wait(60)
        refused = tallyctl.log_lines(h.path("up1.log"), "refusing")
        h.check(rc == 1, "tally up --brokers on a replaced log: exit %s, want 1" % rc)
        h.check(len(refused) == 1, "one line says why (found %d): %s" % (len(refused), refused[-1:]))
        broker.stop(grace=10)
        h.checkpoint("a new log under tally up --brokers")

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
            tallyctl.wait_until("the broker started again",
                                lambda: tallyctl.embedded_broker_pid(state) not in (None, first), 30, proc=up)

        survive(h, up, client, "127.0.0.1:%d" % port, kill_embedded, "up2.log", "embedded broker killed")
        h.check(len(tallyctl.log_lines(h.path("up2.log"), "with its log in")) == 1,
                "tally up said it starts its broker again")
        second = tallyctl.embedded_broker_pid(state)
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit %s" % rc)
        h.check(not tallyctl.pid_alive(second), "the broker stopped with tally up")
        h.finish_checks("e2e_broker_restart")


if __name__ == "__main__":
    main()
