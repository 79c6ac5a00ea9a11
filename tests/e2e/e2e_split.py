#!/usr/bin/env python3
"""End to end, the roles apart (SPEC section 5): `tally aggregate --role
router` and `tally aggregate --role applier` as separate processes, and
`tally serve` following the state they write, read-only, from another
process. Lag 0 on serve's /v1/watermarks must mean every published record is
visible in serve's answers.

Then each role is SIGKILLed mid-stream and restarted while the other keeps
running: the router (its uncommitted input is routed again, and the applier
drops the duplicates) and the applier (its uncommitted window is redone from
the offsets in RocksDB). Every count must still equal the model.

  python3 e2e_split.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402


def aggregate(h, brokers, role, log_name):
    argv = [h.tally, "aggregate", "--brokers", brokers, "--state-dir", h.path("state"), "--role", role]
    return h.spawn("tally aggregate --role " + role, argv, log_name)


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_split", default_seed=99) as h:
        broker, brokers = h.start_broker(partitions=4)
        router = aggregate(h, brokers, "router", "router-1.log")
        applier = aggregate(h, brokers, "applier", "applier-1.log")
        tallyctl.wait_until("the applier to create the state", lambda: os.path.exists(h.path("state", "TALLY")),
                            timeout=60, proc=applier)
        serve, client = h.start_serve(brokers, h.path("state"), tallyctl.free_port())

        w = event_model.Workload(h.rng, 300, 200)
        first = w.stream(3000, n_invalid=5)
        tallyctl.publish(h.kcat, brokers, [(r.key, r.value) for r in first])
        published = len(first)
        tallyctl.wait_lag_zero(client, timeout=180, proc=serve, min_input_end=published)
        checks.check_counts(h, client, w.model)
        h.checkpoint("serve follows router + applier processes (%d records)" % published)

        def kill_mid_stream(role, proc, published):
            """Publishes more, SIGKILLs `proc` (one role) while it works, restarts it
            while the other role runs on, and checks every count."""
            more = w.stream(4000)
            tallyctl.publish(h.kcat, brokers, [(r.key, r.value) for r in more])
            published += len(more)
            time.sleep(h.rng.uniform(0.05, 0.4))
            proc.kill9()
            proc = aggregate(h, brokers, role, "%s-2.log" % role)
            tallyctl.wait_lag_zero(client, timeout=180, proc=proc, min_input_end=published)
            checks.check_counts(h, client, w.model, views=False)
            h.checkpoint("after the %s was SIGKILLed and restarted" % role)
            return proc, published

        # The router dies while records wait to be routed (the applier drops
        # what it routes again); then the applier dies with windows open (it
        # redoes them from the offsets in RocksDB).
        router, published = kill_mid_stream("router", router, published)
        applier, published = kill_mid_stream("applier", applier, published)

        for p in (serve, router, applier):
            rc, clean = p.stop(grace=30)
            h.check(clean and rc == 0, "%s on SIGTERM: exit %s%s" % (p.name, rc, "" if clean else " (SIGKILL)"))
        h.finish_checks("e2e_split")


if __name__ == "__main__":
    main()
