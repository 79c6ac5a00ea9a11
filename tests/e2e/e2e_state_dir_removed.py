#!/usr/bin/env python3
"""End to end, a state directory removed under a running member: `tally
broker` (4 partitions) and one `tally up --brokers` member, 2,000 events
applied. Then its `--state-dir` is removed (`rm -rf`, as an operator's
mistake or a cleanup script would) and, in a second round, replaced by an
empty directory of the same name. Each time:

- within 10 s `/healthz` answers 503 naming the directory;
- the log says so in one ERROR line naming it (not one per partition or
  per retry);
- nothing more is applied: events published after the removal leave the
  lag above 0 and the counts where they were;
- reads still answer 200 with the counts from before (the open state);
- the directory tally left is not written: nothing appears in a replaced
  one;
- SIGTERM stops it (exit 0 or 1, within the README's 10 s).

Last, a new member on a fresh state directory applies everything: every
count equals the model (nothing acknowledged was lost).

  python3 e2e_state_dir_removed.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

ERROR_MARK = "was removed or replaced since tally opened it"
STOP_BOUND_S = 10.0


def health(client):
    r = client.try_get("/healthz")
    return (r.status, r.text()) if r is not None else (None, "")


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_state_dir_removed", default_seed=61) as h:
        broker, brokers = h.start_broker(partitions=4)
        w = event_model.Workload(h.rng, 200, 150)
        feed = checks.ModelFeed(h, brokers, w)

        for round_name, replace in (("removed", False), ("replaced", True)):
            state = h.path("state-" + round_name)
            log_name = "up-%s.log" % round_name
            up, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=4, log_name=log_name)
            feed.publish(1000)
            checks.caught_up_and_exact(h, client, up, w.model, feed.published,
                                       "before the directory is %s" % round_name)
            before = {p: client.get("/v1/posts/%d/counts" % p).text() for p in sorted(w.model.post_ids)[:40]}

            shutil.rmtree(state)
            if replace:
                os.makedirs(state)
            log("%s: %s" % (round_name, state))
            feed.publish(500)

            def unhealthy():
                s, body = health(client)
                return s == 503 and state in body

            tallyctl.wait_until("/healthz to say the state directory is gone", unhealthy, timeout=10, proc=up)
            status, body = health(client)
            log("/healthz: %s %s" % (status, body[:300]))
            time.sleep(3.0)  # more windows meet the missing directory: measuring that nothing moves
            wm = tallyctl.watermarks(client)
            h.check(wm is None or wm.get("lag", 0) > 0,
                    "lag 0 after the directory was %s: the events published since were applied" % round_name)
            after = {p: client.get("/v1/posts/%d/counts" % p) for p in before}
            bad = [p for p in before if after[p].status != 200 or after[p].text() != before[p]]
            h.check(not bad, "reads after the directory was %s: %d of %d differ or fail, e.g. post %s: %r" % (
                round_name, len(bad), len(before), bad[:1], bad and after[bad[0]]))
            errors = [l for l in tallyctl.log_lines(h.path(log_name), "ERROR")]
            h.check(len(errors) == 1 and state in errors[0] and ERROR_MARK in errors[0],
                    "want one ERROR line naming %s, got %d:\n  %s" % (
                        state, len(errors), "\n  ".join(e[:300] for e in errors[:5])))
            if replace:
                left = sorted(os.listdir(state))
                h.check(not left, "tally wrote into the directory that replaced its own: %s" % left[:10])
            t0 = time.monotonic()
            rc, _ = up.stop(grace=30)
            took = time.monotonic() - t0
            log("SIGTERM: exit %s after %.1f s" % (rc, took))
            h.check(rc in (0, 1) and took <= STOP_BOUND_S,
                    "SIGTERM with the directory %s: exit %s after %.1f s (want 0 or 1 within %.0f s)" % (
                        round_name, rc, took, STOP_BOUND_S))
            h.checkpoint("the state directory %s" % round_name)

        up, client = h.start_up(brokers, h.path("state-new"), tallyctl.free_port(), partitions=4,
                                log_name="up-new.log")
        checks.caught_up_and_exact(h, client, up, w.model, feed.published,
                                   "a new member on a fresh directory")
        h.stop_cleanly(up, "tally up")
        h.checkpoint("nothing acknowledged was lost")


if __name__ == "__main__":
    main()
