#!/usr/bin/env python3
"""End to end, with crashes: ~50k events are published with kcat in paced
chunks while `tally up` is SIGKILLed at seeded random moments (20 times by
default) and restarted on the same state directory. Once everything is
consumed, every count must equal the reference model exactly: exactly-once
across crashes (SPEC section 2). Then:

- a clean SIGTERM stop exits 0 and a restart keeps every count;
- `tally replay` rebuilds a fresh state directory from tally.deltas, and
  `tally serve` over it answers every counts/unread/likes request byte for
  byte as the live `tally up` does;
- `tally replay --from-input` re-derives another fresh state from the input
  topic, and its counts equal the model.

  python3 e2e_crash.py --tally build/tally [--seed N] [--kills K] [--events N]
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

N_POSTS = 2000
N_USERS = 1000
# The feeder spreads the stream over about this long per kill (the wait
# between kills plus the restart), so every kill lands while records are
# still arriving.
FEED_SECONDS_PER_KILL = 6.5


def extra_args(ap):
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs of tally up (at least 5)")
    ap.add_argument("--events", type=int, default=50000, help="valid events to publish")


def compare_servers(h, live, rebuilt, model, what):
    """Every counts/unread/likes answer (and a sample of views and feed
    snapshots) of `rebuilt` must equal `live`'s byte for byte."""
    post_ids = sorted(model.post_ids)
    user_ids = sorted(model.user_ids)
    paths = []
    for i in range(0, len(post_ids), checks.BATCH):
        paths.append("/v1/posts/counts?ids=" + ",".join(map(str, post_ids[i:i + checks.BATCH])))
    paths += ["/v1/posts/%d/counts" % p for p in post_ids]
    for u in user_ids:
        paths += ["/v1/users/%d/counts" % u, "/v1/users/%d/unread" % u]
    paths += ["/v1/posts/%d/likes/%d" % pu for pu in sorted(model.like_pairs)]
    viewed = sorted(model.viewed)
    paths += ["/v1/posts/%d/views/%d" % pu for pu in h.rng.sample(viewed, min(300, len(viewed)))]
    paths += ["/v1/users/%d/feed/snapshot" % u for u in h.rng.sample(user_ids, min(50, len(user_ids)))]
    differ = []
    for path in paths:
        a, b = live.get(path), rebuilt.get(path)
        if a.status != b.status or a.body != b.body:
            differ.append("%s: live %r, %s %r" % (path[:80], a, what, b))
    h.check(not differ, "%s: %d of %d answers differ from the live tally up; first:\n    %s" % (
        what, len(differ), len(paths), "\n    ".join(differ[:20])))
    log("%s: compared %d answers byte for byte with the live tally up" % (what, len(paths)))


def main():
    args = tallyctl.parse_args(__doc__, extra_args)
    if args.kills < 5:
        raise SystemExit("--kills must be at least 5")
    t_begin = time.monotonic()
    with tallyctl.Harness(args, "e2e_crash", default_seed=4242) as h:
        broker, brokers = h.start_broker(partitions=4)
        state = h.path("state")

        w = event_model.Workload(h.rng, N_POSTS, N_USERS)
        records = w.stream(args.events, n_invalid=20)
        log("generated %d records (%d like edges set, %d follow edges set at the end)" % (
            len(records), len(w.model.likes), len(w.model.follows)))

        up, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=4)
        feeder = checks.Feeder(h, brokers, records, h.seed + 1, max(50, FEED_SECONDS_PER_KILL * args.kills))
        feeder.start()

        rng = h.rng
        busy_kills = 0
        for kill in range(1, args.kills + 1):
            # Early kills land during start-up or the consumer groups' join
            # (often with a backlog); the others after the pipeline moved.
            early = rng.random() < 0.4
            delay = rng.uniform(0.0, 3.0) if early else rng.uniform(0.0, 0.6)
            note = ""
            if not early:
                # Wait for the pipeline to apply something since this start,
                # then kill at a random moment after that.
                base = [None]

                def progressed():
                    wm = tallyctl.watermarks(client)
                    if wm is None:
                        return False
                    applied = tallyctl.applied_offsets(wm)
                    if base[0] is None:
                        base[0] = applied
                        return False
                    return applied > base[0] or (wm["lag"] == 0 and feeder.done.is_set())

                tallyctl.wait_until("tally up to apply records after restart %d" % (kill - 1), progressed,
                                    timeout=120, interval=0.1, proc=up)
                note = " after progress"
            time.sleep(delay)  # the kill moment itself (random), not an ordering device
            wm = tallyctl.watermarks(client)
            up.kill9()
            if wm and wm["lag"] > 0:
                busy_kills += 1
            log("kill %d/%d%s +%.2fs: lag %s, %s records of tally.events applied, %d written to kcat" % (
                kill, args.kills, note, delay, wm["lag"] if wm else "?",
                tallyctl.applied_offsets(wm) if wm else "?", feeder.written))
            client.close()
            up, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=4)

        log("%d of %d kills hit with records waiting (lag > 0 just before)" % (busy_kills, args.kills))
        feeder.join(timeout=300)
        if feeder.is_alive():
            raise tallyctl.TestFailure("the feeder did not finish publishing within 300 s")
        if feeder.error:
            raise feeder.error
        report = tallyctl.wait_lag_zero(client, timeout=180, proc=up, min_input_end=len(records))
        log("lag 0 after %d kills: %d records in %s (%.0f s so far)" % (
            args.kills, tallyctl.end_offsets(report), tallyctl.EVENTS_TOPIC, time.monotonic() - t_begin))
        h.check(tallyctl.end_offsets(report) == len(records), "%s holds %d records, %d were published" % (
            tallyctl.EVENTS_TOPIC, tallyctl.end_offsets(report), len(records)))
        lost, doubled = checks.compare_with_model(h, client, w.model, "after %d SIGKILLs" % args.kills)
        h.checkpoint("exactly once across %d SIGKILLs" % args.kills)
        log("SIGKILL summary: %d kills (seed %d), %d records checked (%d valid events, %d invalid), lost %d, "
            "doubled %d" % (args.kills, h.seed, len(records), sum(1 for r in records if r.valid),
                            sum(1 for r in records if not r.valid), lost, doubled))

        # A clean stop flushes and exits 0; a restart keeps every count.
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit status %s%s" % (rc, "" if clean else " (SIGKILLed)"))
        client.close()
        up, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=4)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up)
        checks.compare_with_model(h, client, w.model, "after a clean restart", full_posts=False)
        h.checkpoint("clean stop and restart")

        # Rebuild from tally.deltas: byte for byte the live answers.
        rebuilt = h.path("replay-deltas")
        h.replay(brokers, rebuilt, log_name="replay-deltas.log")
        serve, sclient = h.start_serve(brokers, rebuilt, tallyctl.free_port(), log_name="serve-deltas.log")
        compare_servers(h, client, sclient, w.model, "replay from tally.deltas")
        sclient.close()
        serve.stop()
        h.checkpoint("tally replay")

        # Re-derive from the input: counts equal the model.
        derived = h.path("replay-input")
        h.replay(brokers, derived, from_input=True, log_name="replay-input.log")
        serve, sclient = h.start_serve(brokers, derived, tallyctl.free_port(), log_name="serve-input.log")
        checks.compare_with_model(h, sclient, w.model, "replay --from-input", full_posts=False)
        sclient.close()
        serve.stop()
        h.checkpoint("tally replay --from-input")

        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit status %s" % rc)
        h.checkpoint("final stop")
        h.finish_checks("e2e_crash")
        log("total %.0f s" % (time.monotonic() - t_begin))


if __name__ == "__main__":
    main()
