#!/usr/bin/env python3
"""End to end: a state directory has one writer.

While a `tally up` runs on a state directory, every other command that would
write it (`tally up` with and without --brokers, `tally aggregate`, `tally
replay`) stops at once with one line saying that another tally holds the
directory, with that process's pid, and exits non-zero: before its router
routes anything or its embedded broker starts, and without RocksDB's "While
lock file" error. `tally serve` (a read-only follower) and `tally aggregate
--role router` (no state) still start beside it. A SIGKILLed holder leaves no
stale lock: the next `tally up` starts.

  python3 e2e_state_lock.py --tally build/tally [--work-dir DIR]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def refused(h, name, argv, log_name, holder_pid, state):
    """Runs `argv` to its exit and checks it refused the directory."""
    p = h.spawn(name, argv, log_name)
    rc = p.wait(30)
    if rc is None:
        p.stop(grace=10)
        h.check(False, "%s on a state directory in use did not exit within 30 s" % name)
        return
    p.stop()
    text = read(h.path(log_name))
    want = "state directory %s is in use by another tally process (pid %d)" % (state, holder_pid)
    h.check(rc != 0, "%s on a state directory in use exited %d" % (name, rc))
    h.check(want in text, "%s: its log does not say %r:\n%s" % (name, want, text[-1500:]))
    h.check("While lock file" not in text, "%s: RocksDB's lock error reached the log" % name)
    h.check("routing tally.events" not in text, "%s routed before it refused the directory" % name)
    h.check("embedded broker up" not in text, "%s started its embedded broker before it refused" % name)
    log("%s: refused (exit %d): %s" % (name, rc, [l for l in text.splitlines() if want in l][:1]))


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_state_lock", default_seed=9) as h:
        _, brokers = h.start_broker(partitions=2)
        state = h.path("state")
        holder, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=2, log_name="up1.log")
        tallyctl.publish(h.kcat, brokers, [("1", '{"type":"like","ts":1,"post_id":1,"user_id":2}')])
        tallyctl.wait_lag_zero(client, timeout=60, proc=holder, min_input_end=1)

        http = lambda: "127.0.0.1:%d" % tallyctl.free_port()  # noqa: E731
        refused(h, "second tally up --brokers",
                [h.tally, "up", "--brokers", brokers, "--state-dir", state, "--http", http(), "--partitions", 2],
                "up2.log", holder.pid, state)
        refused(h, "second tally up (embedded broker)",
                [h.tally, "up", "--port", tallyctl.free_port(), "--state-dir", state, "--http", http(),
                 "--partitions", 2], "up3.log", holder.pid, state)
        refused(h, "tally aggregate", [h.tally, "aggregate", "--brokers", brokers, "--state-dir", state,
                                       "--group", "other"], "aggregate.log", holder.pid, state)
        refused(h, "tally replay", [h.tally, "replay", "--brokers", brokers, "--state-dir", state],
                "replay.log", holder.pid, state)
        h.checkpoint("writers refused while tally up holds the state directory")

        # A read-only follower shares the directory.
        serve, sclient = h.start_serve(brokers, state, tallyctl.free_port())
        r = sclient.get("/v1/posts/1/counts")
        h.check(r.status == 200 and r.json()["like"] == 1, "tally serve beside tally up: %r" % r)
        serve.stop()
        h.checkpoint("tally serve shares the state directory")

        # A SIGKILLed holder leaves no lock behind.
        holder.kill9()
        p, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=2, log_name="up4.log")
        r = client.get("/v1/posts/1/counts")
        h.check(r.status == 200 and r.json()["like"] == 1, "tally up after the holder was SIGKILLed: %r" % r)
        rc, clean = p.stop(grace=30)
        h.check(clean and rc == 0, "tally up after a SIGKILLed holder: exit %s" % rc)
        h.checkpoint("a SIGKILLed holder leaves no stale lock")
        h.finish_checks("e2e_state_lock")


if __name__ == "__main__":
    main()
