#!/usr/bin/env python3
"""End to end, system notices that reach tally in any order (SPEC sections 1
and 3): a `tally broker` and a `tally up` with 8 partitions, notices
published with kcat WITHOUT a key, so they land on every input partition
and the router reads them in parallel, in shuffled id order, some ids
published twice.

Phase 1 publishes half the notice ids and the users' reads (30 of 40 users
read up to various ids, keyed by user; 10 never read); every user's
`notice` count must be the number of listed ids above their last-read id.
Phase 2 publishes the other half, most of them below ids already applied
(late notices), and repeats: counted again, repeats ignored, counted in
`tally_applier_repeated_notices_total` and logged. Phase 3 resets `notice`
over HTTP for some users (last read := the newest id) and publishes a few
more late notices and one newer one. Phase 4 publishes more late notices
and SIGKILLs `tally up` at once, restarts it on the same state and checks
again. Finally `tally replay` rebuilds the state into a fresh directory and
`tally serve` must answer every user's unread byte for byte like the live
process.

  python3 e2e_notices.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402

PARTITIONS = 8
USERS = list(range(1, 41))
READERS = USERS[:30]  # the last 10 users never read a notice


class Model:
    """SPEC section 3, notices: a set of ids and each user's last-read id."""

    def __init__(self):
        self.notices = set()
        self.read = {}
        self.repeats = 0

    def notice(self, nid):
        if nid in self.notices:
            self.repeats += 1
        self.notices.add(nid)

    def unread(self, u):
        if u not in self.read:
            return 0
        return sum(1 for n in self.notices if n > self.read[u])


def notice_event(nid, ts):
    return json.dumps({"type": "notice", "ts": ts, "notice_id": nid, "title": "notice %d" % nid})


def read_event(u, nid, ts):
    return (str(u), json.dumps({"type": "read", "ts": ts, "user_id": u, "kind": "notice", "notice_id": nid}))


def publish_notices(h, brokers, model, ids, ts):
    """Publishes notices `ids` (in that order) unkeyed and applies them to the model."""
    for nid in ids:
        model.notice(nid)
    tallyctl.publish(h.kcat, brokers, [notice_event(nid, ts + i) for i, nid in enumerate(ids)], keyed=False)
    return len(ids)


def check_all(h, client, model, what):
    for u in USERS:
        r = client.get("/v1/users/%d/unread" % u)
        want = model.unread(u)
        got = r.json().get("notice") if r.status == 200 else None
        h.check(got == want, "%s: user %d (read up to %s) has notice %s, want %d: %s" % (
            what, u, model.read.get(u), got, want, r.text()))


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_notices", default_seed=2718) as h:
        rng = h.rng
        broker, brokers = h.start_broker(partitions=PARTITIONS)
        state = h.path("state")
        up, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=PARTITIONS)
        model = Model()
        now = int(time.time() * 1000)
        published = 0

        # 400 distinct ids between 1 and 2000, in two shuffled halves.
        ids = rng.sample(range(1, 2001), 400)
        first, second = ids[:200], ids[200:]

        # Phase 1: the first half, three of them twice, and the users' reads.
        batch = first + rng.sample(first, 3)
        rng.shuffle(batch)
        published += publish_notices(h, brokers, model, batch, now - 3600_000)
        reads = []
        for i, u in enumerate(READERS):
            nid = rng.randint(1, 2000)
            model.read[u] = nid
            reads.append(read_event(u, nid, now - 3500_000 + i))
        tallyctl.publish(h.kcat, brokers, reads)
        published += len(reads)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=published)
        check_all(h, client, model, "after phase 1")

        # The premise: unkeyed notices were spread over every input partition.
        out = tallyctl.consume(h.kcat, brokers, tallyctl.EVENTS_TOPIC, "%p %k %s\n")
        notice_partitions = {int(l.split(" ", 2)[0]) for l in out.splitlines()
                             if '"type": "notice"' in l}
        h.check(len(notice_partitions) == PARTITIONS, "notices landed on partitions %s, want all %d" % (
            sorted(notice_partitions), PARTITIONS))
        h.checkpoint("phase 1: %d notices on %d partitions, %d reads" % (
            len(batch), len(notice_partitions), len(reads)))

        # Phase 2: the second half (most of it below ids already applied),
        # and five repeats of either half.
        batch = second + rng.sample(first, 3) + rng.sample(second, 2)
        rng.shuffle(batch)
        published += publish_notices(h, brokers, model, batch, now - 3000_000)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=published)
        check_all(h, client, model, "after phase 2 (late notices)")
        counted = tallyctl.metric(client, "tally_applier_repeated_notices_total")
        h.check(counted == model.repeats, "tally_applier_repeated_notices_total is %s, want %d" % (
            counted, model.repeats))
        logged = tallyctl.log_lines(h.path("up.log"), "ignored, already in the list")
        h.check(len(logged) == model.repeats, "up.log has %d lines for %d repeated notices:\n  %s" % (
            len(logged), model.repeats, "\n  ".join(logged)))
        h.checkpoint("phase 2: %d late notices, %d repeats in all" % (len(batch), model.repeats))

        # Phase 3: reset over HTTP (last read := the newest id), then late
        # notices below it (not unread) and one above it (unread).
        resets = USERS[::3]
        for u in resets:
            r = client.post("/v1/users/%d/unread/notice/reset" % u)
            h.check(r.status == 202 and r.json() == {"accepted": True}, "reset notice of %d: %r" % (u, r))
            model.read[u] = max(model.notices)
        published += len(resets)
        unused = sorted(set(range(1, 2001)) - model.notices)
        batch = rng.sample(unused, 10) + [2001]
        rng.shuffle(batch)
        published += publish_notices(h, brokers, model, batch, now - 2000_000)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=published)
        check_all(h, client, model, "after HTTP resets and more late notices")
        h.checkpoint("phase 3: %d resets over HTTP" % len(resets))

        # Phase 4: more late notices and repeats, tally up SIGKILLed at once
        # (wherever it is in applying them) and restarted on the same state.
        unused = sorted(set(range(1, 2001)) - model.notices)
        batch = rng.sample(unused, 40) + rng.sample(sorted(model.notices), 5)
        rng.shuffle(batch)
        published += publish_notices(h, brokers, model, batch, now - 1000_000)
        up.kill9()
        up, client = h.start_up(brokers, state, tallyctl.free_port(), partitions=PARTITIONS)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=published)
        check_all(h, client, model, "after a SIGKILL and a restart")
        h.checkpoint("phase 4: %d notices in the list, %d users" % (len(model.notices), len(USERS)))

        # Replay into a fresh directory: every unread answer byte for byte.
        paths = ["/v1/users/%d/unread" % u for u in USERS]
        live = {p: client.get(p).text() for p in paths}
        h.replay(brokers, h.path("replayed"), log_name="replay.log")
        serve, rclient = h.start_serve(None, h.path("replayed"), tallyctl.free_port())
        rebuilt = {p: rclient.get(p).text() for p in paths}
        diff = [p for p in paths if live[p] != rebuilt[p]]
        h.check(not diff, "replay differs from live at %d paths, e.g. %s: live %s replayed %s" % (
            len(diff), diff[:1], live[diff[0]] if diff else "", rebuilt[diff[0]] if diff else ""))
        h.checkpoint("replay equals live on %d answers" % len(paths))
        serve.stop()
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit %s" % rc)
        h.finish_checks("e2e_notices")


if __name__ == "__main__":
    main()
