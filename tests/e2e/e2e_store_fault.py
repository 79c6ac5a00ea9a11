#!/usr/bin/env python3
"""End to end, with the disk failing: `tally up` runs with
TALLY_STORE_FAULT_FILE=<work>/fault, so every RocksDB write (WAL, SST,
MANIFEST) fails while that file exists, as on a full or failing disk.

1. Events are applied; then the fault starts and more events arrive. The
   applier must stop advancing (applied offsets frozen, lag > 0), log one
   line saying why with partition and offset, keep retrying, answer
   /healthz 503 with that reason, and keep serving reads from what is
   there (every count equals the model as it was before the fault). The
   fault clears: applying resumes, one line says so, and every count
   equals the model: nothing lost, nothing doubled.
2. The fault starts again, and `tally up` is SIGKILLed while it retries; it
   is restarted without the fault on the same state: every count equals the
   model.

  python3 e2e_store_fault.py --tally build/tally [--seed N] [--fault-seconds 8]
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

ERROR_LINE = "cannot commit the window"
RESUMED_LINE = "committed after"


def extra_args(ap):
    ap.add_argument("--fault-seconds", type=float, default=8.0, help="how long writes fail in round 1")


def snapshot(client, model):
    """Every post's and user's counts as served now."""
    out = {}
    for p in sorted(model.post_ids):
        out["p%d" % p] = client.get("/v1/posts/%d/counts" % p).text()
    for u in sorted(model.user_ids):
        out["u%d" % u] = client.get("/v1/users/%d/counts" % u).text()
    return out


def main():
    args = tallyctl.parse_args(__doc__, extra_args)
    t_begin = time.monotonic()
    with tallyctl.Harness(args, "e2e_store_fault", default_seed=2024) as h:
        fault = h.path("fault")
        os.environ["TALLY_STORE_FAULT_FILE"] = fault  # inherited by tally up
        broker, brokers = h.start_broker(partitions=4)
        up, client = h.start_up(brokers, h.path("state"), tallyctl.free_port(), partitions=4)
        w = event_model.Workload(h.rng, 400, 250)
        published = 0

        def publish(n):
            nonlocal published
            recs = w.stream(n, n_invalid=2)
            tallyctl.publish(h.kcat, brokers, [(r.key, r.value) for r in recs])
            published += len(recs)

        publish(3000)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=published)
        checks.compare_with_model(h, client, w.model, "before the fault")
        before = snapshot(client, w.model)
        h.checkpoint("before the fault")

        # ---- round 1: writes fail, then recover ----------------------------------
        open(fault, "w").close()
        log("fault on: RocksDB writes fail while %s exists" % fault)
        publish(4000)
        tallyctl.wait_until("the applier to log that it cannot commit",
                            lambda: tallyctl.log_lines(h.path("up.log"), ERROR_LINE), timeout=30, proc=up)
        t_fault = time.monotonic()
        first = tallyctl.log_lines(h.path("up.log"), ERROR_LINE)[0]
        log("up.log: %s" % first[:260])
        h.check("tally.deltas/" in first and "offset" in first and "injected write fault" in first,
                "the error line does not name the partition, the offset and the cause: %s" % first)
        w1 = tallyctl.watermarks(client)
        h.check(w1 is not None and w1["lag"] > 0, "lag during the fault: %s" % (w1 and w1["lag"]))
        time.sleep(2.0)  # measuring that nothing moves, not ordering
        w2 = tallyctl.watermarks(client)
        h.check(w1 is not None and w2 is not None and tallyctl.applied_offsets(w1) == tallyctl.applied_offsets(w2)
                and tallyctl.applied_offsets(w2, tallyctl.DELTAS_TOPIC) == tallyctl.applied_offsets(
                    w1, tallyctl.DELTAS_TOPIC),
                "applied offsets moved while every write failed: %s -> %s" % (
                    w1 and tallyctl.applied_offsets(w1), w2 and tallyctl.applied_offsets(w2)))
        during = snapshot(client, w.model)
        differ = [k for k in before if before[k] != during[k]]
        h.check(not differ, "reads during the fault differ from the state before it (%d answers), e.g. %s: %s -> %s"
                % (len(differ), differ[:1], differ and before[differ[0]], differ and during[differ[0]]))
        r = client.get("/healthz")
        h.check(r.status == 503 and "injected write fault" in r.text(),
                "/healthz during a store fault: want 503 naming the fault, got %r" % r)
        left = args.fault_seconds - (time.monotonic() - t_fault)
        if left > 0:
            time.sleep(left)  # the length of the fault
        errors = tallyctl.log_lines(h.path("up.log"), ERROR_LINE)
        h.check(len(errors) == 1, "more than one error line for one fault:\n  %s" % "\n  ".join(errors[:5]))
        os.remove(fault)
        log("fault off after %.1f s of failing writes" % (time.monotonic() - t_fault))
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=published)
        resumed = tallyctl.log_lines(h.path("up.log"), RESUMED_LINE)
        h.check(len(resumed) == 1, "expected one line saying the applier resumed, found %d" % len(resumed))
        for l in resumed:
            log("up.log: %s" % l[:260])
        lost, doubled = checks.compare_with_model(h, client, w.model, "after the store fault cleared")
        h.check(up.alive(), "tally up exited during the fault")
        h.checkpoint("round 1: writes failed for %.0f s, then recovered" % args.fault_seconds)

        # ---- round 2: SIGKILL while writes fail -----------------------------------
        open(fault, "w").close()
        publish(2000)
        tallyctl.wait_until("the applier to fail again",
                            lambda: len(tallyctl.log_lines(h.path("up.log"), ERROR_LINE)) >= 2, timeout=30, proc=up)
        up.kill9()
        client.close()
        os.remove(fault)
        del os.environ["TALLY_STORE_FAULT_FILE"]
        up, client = h.start_up(brokers, h.path("state"), tallyctl.free_port(), partitions=4, log_name="up-2.log")
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=published)
        lost2, doubled2 = checks.compare_with_model(h, client, w.model, "after a SIGKILL during the fault")
        h.checkpoint("round 2: SIGKILL while writes failed, restart")

        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit %s" % rc)
        log("events checked: %d records published (%d valid); lost %d, doubled %d" % (
            published, published - 6, lost + lost2, doubled + doubled2))
        h.finish_checks("e2e_store_fault")
        log("total %.0f s" % (time.monotonic() - t_begin))


if __name__ == "__main__":
    main()
