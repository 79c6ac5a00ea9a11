#!/usr/bin/env python3
"""End to end, two processes that claim one member id: `tally broker` (4
partitions) and a settled `tally up --brokers` member A. Member B is started
with its own `--http` but A's `--advertise`, the operator's copy-paste
mistake. B must exit non-zero within 20 s with one ERROR line naming A's
address, before it joins anything; A must go on owning every partition and
answering reads, its `/v1/cluster` unchanged.

Then A is SIGKILLed and started again at once with the same `--advertise`:
its predecessor's record in tally.members is still live (it expires after
6 s), but the process that wrote it is gone, and the new A must say so
and start without waiting for the record to expire; every count equals the
model.

  python3 e2e_duplicate_member.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

DUPLICATE_MARK = "another live process is already this member"
TAKEOVER_MARK = "is a stopped process's"


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_duplicate_member", default_seed=37) as h:
        broker, brokers = h.start_broker(partitions=4)
        w = event_model.Workload(h.rng, 200, 150)
        port_a = tallyctl.free_port()
        address_a = "127.0.0.1:%d" % port_a
        a, ca = h.start_up(brokers, h.path("a"), port_a, log_name="a.log")
        tallyctl.wait_until("member A to own every partition", lambda: tallyctl.cluster_settled(ca, 1, 4),
                            60, proc=a)
        recs = w.stream(1500)
        tallyctl.publish(h.kcat, brokers, [(r.key, r.value) for r in recs])
        tallyctl.wait_lag_zero(ca, timeout=120, proc=a, min_input_end=len(recs))
        before = tallyctl.cluster_view(ca)
        log("A settled: generation %d, %s" % (before[0], before[1]))

        # ---- B: A's --advertise, its own --http ------------------------------------
        port_b = tallyctl.free_port()
        argv = [h.tally, "up", "--brokers", brokers, "--state-dir", h.path("b"), "--http",
                "127.0.0.1:%d" % port_b, "--partitions", "4", "--advertise", "http://" + address_a]
        t0 = time.monotonic()
        b = h.spawn("tally up (B, A's --advertise)", argv, "b.log")
        rc = b.wait(20)
        took = time.monotonic() - t0
        log("B: exit %s after %.1f s" % (rc, took))
        h.check(rc is not None and rc != 0, "B under A's member id: exit %s (want non-zero within 20 s)" % rc)
        errors = tallyctl.log_lines(h.path("b.log"), "ERROR")
        h.check(len(errors) == 1 and DUPLICATE_MARK in errors[0] and address_a in errors[0],
                "B: want one ERROR line naming %s, got %r" % (address_a, [e[:300] for e in errors]))
        joined = tallyctl.log_lines(h.path("b.log"), "assigned ")
        h.check(not joined, "B joined a group before refusing: %s" % joined[:1])
        time.sleep(2.0)  # a heartbeat of A's after B's exit: measuring that nothing moved
        after = tallyctl.cluster_view(ca)
        h.check(after == before, "A's /v1/cluster moved while B tried: %s -> %s" % (before, after))
        checks.compare_with_model(h, ca, w.model, "A after B's refused start")
        h.checkpoint("a second process under one member id refuses to start")

        # ---- A SIGKILLed and started again at once ---------------------------------
        a.kill9()
        ca.close()
        t0 = time.monotonic()
        a, ca = h.start_up(brokers, h.path("a"), port_a, log_name="a-2.log")
        log("A again: healthy %.1f s after its SIGKILL" % (time.monotonic() - t0))
        took_over = tallyctl.log_lines(h.path("a-2.log"), TAKEOVER_MARK)
        h.check(len(took_over) == 1, "the restarted A did not say its predecessor's record was a stopped "
                "process's: %r" % took_over)
        errors = tallyctl.log_lines(h.path("a-2.log"), "ERROR")
        h.check(not errors, "the restarted A logged errors: %r" % [e[:300] for e in errors])
        tallyctl.wait_until("the restarted A to own every partition",
                            lambda: tallyctl.cluster_settled(ca, 1, 4), 60, proc=a)
        checks.caught_up_and_exact(h, ca, a, w.model, len(recs), "A after its SIGKILL and restart")
        h.stop_cleanly(a, "A")
        h.checkpoint("a killed member restarts under its id at once")


if __name__ == "__main__":
    main()
