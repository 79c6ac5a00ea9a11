#!/usr/bin/env python3
"""End to end, unread counts (SPEC section 3) through real processes: a
`tally broker`, a `tally up`, events published with kcat, resets over HTTP.

Phase 1 publishes mentions, comments, likes, reposts, DMs, follows, posts,
notices, red dots and views, then two late notices (ids below the newest,
counted) and two repeated ids (ignored, counted in
tally_applier_repeated_notices_total, logged); every user's
`GET /v1/users/{id}/unread` must equal a reference model. Phase 2 resets every kind over HTTP (notice fills in
the newest id, red_dot takes ?channel=, feed snapshots the followees' current
post counts) and checks the answers again. Phase 3 publishes more (new posts
after the snapshots, an unfollow, newer dots and notices) and checks again,
plus the feed snapshots and "viewed" (never a false "no"). Finally `tally
replay` rebuilds the state into a fresh directory, `tally serve` serves it,
and every unread, snapshot and viewed answer must be byte for byte the live
one.

  python3 e2e_unread.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

USERS = list(range(1, 41))
AUTHORS = list(range(1, 21))
CHANNELS = ["discover", "games", "live.now"]
KINDS = ["mention", "comment", "like", "repost", "dm", "follower"]


class Model:
    def __init__(self):
        self.counters = {u: {k: 0 for k in KINDS} for u in USERS}
        self.posts = {u: 0 for u in USERS}
        self.follows = set()
        self.notices = set()
        self.repeated_notices = 0
        self.notice_read = {}
        self.dots = {}
        self.clicks = {}
        self.snapshots = {}
        self.viewed = set()

    def apply(self, e):
        t = e["type"]
        if t == "post":
            self.posts[e["author_id"]] += 1
        elif t in ("like", "repost", "comment") and "author_id" in e:
            self.counters[e["author_id"]][t] += 1
        elif t == "mention":
            for u in set(e["target_ids"]):
                self.counters[u]["mention"] += 1
        elif t == "dm":
            self.counters[e["to_user_id"]]["dm"] += 1
        elif t == "follow":
            edge = (e["user_id"], e["target_id"])
            if edge not in self.follows:
                self.follows.add(edge)
                self.counters[e["target_id"]]["follower"] += 1
        elif t == "unfollow":
            self.follows.discard((e["user_id"], e["target_id"]))
        elif t == "notice":
            if e["notice_id"] in self.notices:
                self.repeated_notices += 1
            self.notices.add(e["notice_id"])
        elif t == "red_dot":
            self.dots[e["channel"]] = max(self.dots.get(e["channel"], 0), e["ts"])
        elif t == "view" and "user_id" in e:
            self.viewed.add((e["post_id"], e["user_id"]))

    def followee_posts(self, u):
        return {f: self.posts[f] for (a, f) in sorted(self.follows) if a == u}

    def unread(self, u):
        c = self.counters[u]
        notice = 0
        if u in self.notice_read:
            notice = sum(1 for n in self.notices if n > self.notice_read[u])
        feed = 0
        if u in self.snapshots:
            for f, then in self.snapshots[u].items():
                if (u, f) in self.follows:
                    feed += max(0, self.posts[f] - then)
        dots = {ch: (u, ch) not in self.clicks or self.clicks[(u, ch)] < ts for ch, ts in sorted(self.dots.items())}
        return {"user_id": u, "mention": c["mention"], "comment": c["comment"], "like": c["like"],
                "repost": c["repost"], "dm": c["dm"], "follower": c["follower"], "notice": notice,
                "feed": feed, "red_dots": dots}


def key_of(e):
    t = e["type"]
    if t in ("like", "unlike", "view", "repost", "comment"):
        return str(e["post_id"])
    if t == "post":
        return str(e["author_id"])
    if t == "notice":
        return "notice"
    if t == "red_dot":
        return e["channel"]
    if t == "dm":
        return str(e["from_user_id"])
    return str(e["user_id"])


def events(rng, n, ts0, model, notice_start):
    out = []
    nid = notice_start
    for i in range(n):
        ts = ts0 + i
        r = rng.random()
        u = rng.choice(USERS)
        if r < 0.15:
            e = {"type": "post", "ts": ts, "author_id": rng.choice(AUTHORS), "post_id": rng.randint(1, 10**6)}
        elif r < 0.30:
            e = {"type": rng.choice(["like", "repost", "comment"]), "ts": ts, "post_id": rng.randint(1, 300),
                 "user_id": u, "author_id": rng.choice(USERS)}
        elif r < 0.40:
            e = {"type": "mention", "ts": ts, "user_id": u, "target_ids": rng.sample(USERS, rng.randint(1, 3))}
        elif r < 0.48:
            e = {"type": "dm", "ts": ts, "from_user_id": u, "to_user_id": rng.choice(USERS)}
        elif r < 0.62:
            e = {"type": "follow", "ts": ts, "user_id": rng.choice(USERS[:10]), "target_id": rng.choice(AUTHORS)}
        elif r < 0.85:
            e = {"type": "view", "ts": ts, "post_id": rng.randint(1, 300), "user_id": u}
        elif r < 0.90:
            nid += rng.randint(1, 3)
            e = {"type": "notice", "ts": ts, "notice_id": nid, "title": "notice %d" % nid}
        else:
            e = {"type": "red_dot", "ts": ts, "channel": rng.choice(CHANNELS)}
        model.apply(e)
        out.append((key_of(e), json.dumps(e)))
    return out, nid


def check_all(h, client, model, what):
    for u in USERS:
        r = client.get("/v1/users/%d/unread" % u)
        want = model.unread(u)
        h.check(r.status == 200 and r.json() == want,
                "%s: user %d unread\n    got  %s\n    want %s" % (what, u, r.text(), json.dumps(want)))


def answers(client, paths):
    return {p: client.get(p).text() for p in paths}


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_unread", default_seed=4321) as h:
        broker, brokers = h.start_broker(partitions=4)
        http_port = tallyctl.free_port()
        up, client = h.start_up(brokers, h.path("state"), http_port, partitions=4)
        model = Model()
        now = int(time.time() * 1000)

        # Phase 1: events with times an hour in the past.
        recs, nid = events(h.rng, 3000, now - 3600_000, model, 100)
        # Late notices (ids below the newest, not listed yet) count; repeated
        # ids are ignored, counted, logged (SPEC section 1).
        late = [100, next(i for i in range(nid - 1, 100, -1) if i not in model.notices)]
        repeated = [nid, min(model.notices)]
        for i, sid in enumerate(late + repeated):
            e = {"type": "notice", "ts": now - 3500_000 + i, "notice_id": sid, "title": "late %d" % sid}
            model.apply(e)
            recs.append((key_of(e), json.dumps(e)))
        tallyctl.publish(h.kcat, brokers, recs)
        published = len(recs)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=published)
        check_all(h, client, model, "after phase 1")
        h.check(model.repeated_notices == len(repeated), "the model saw %d repeated notices, want %d" % (
            model.repeated_notices, len(repeated)))
        counted = tallyctl.metric(client, "tally_applier_repeated_notices_total")
        h.check(counted == len(repeated), "tally_applier_repeated_notices_total is %s, want %d" % (
            counted, len(repeated)))
        ignored = tallyctl.log_lines(h.path("up.log"), "ignored, already in the list")
        h.check(len(ignored) == len(repeated), "up.log has %d lines for %d repeated notices:\n  %s" % (
            len(ignored), len(repeated), "\n  ".join(ignored)))
        h.check(model.notices and model.dots and model.follows, "the stream exercised every shape")
        h.checkpoint("unread after %d events" % published)

        # Phase 2: reset every kind over HTTP for half the users.
        resets = 0
        for u in USERS[::2]:
            for kind in KINDS + ["notice", "feed"]:
                r = client.post("/v1/users/%d/unread/%s/reset" % (u, kind))
                h.check(r.status == 202 and r.json() == {"accepted": True}, "reset %s of %d: %r" % (kind, u, r))
                resets += 1
                if kind in KINDS:
                    model.counters[u][kind] = 0
                elif kind == "notice" and model.notices:
                    model.notice_read[u] = max(model.notices)
                elif kind == "feed":
                    model.snapshots[u] = model.followee_posts(u)
            ch = CHANNELS[u % len(CHANNELS)]
            r = client.post("/v1/users/%d/unread/red_dot/reset?channel=%s" % (u, ch))
            h.check(r.status == 202, "reset red_dot of %d: %r" % (u, r))
            resets += 1
            model.clicks[(u, ch)] = int(time.time() * 1000)  # after every phase-1 dot
        r = client.post("/v1/users/1/unread/red_dot/reset")
        h.check(r.status == 400 and r.json()["error"]["code"] == "bad_request", "red_dot reset without channel: %r" % r)
        r = client.post("/v1/users/1/unread/nonsense/reset")
        h.check(r.status == 400 and r.json()["error"]["code"] == "bad_kind", "bad kind: %r" % r)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=published + resets)
        check_all(h, client, model, "after HTTP resets")
        h.checkpoint("unread after %d resets over HTTP" % resets)

        # Phase 3: more events an hour in the future (newer dots show again),
        # and an unfollow of a followee that is in a snapshot.
        recs, nid = events(h.rng, 2000, now + 3600_000, model, nid)
        snap_user = next((u for u in USERS[::2] if model.snapshots.get(u)), None)
        if snap_user is not None:
            gone = sorted(model.snapshots[snap_user])[0]
            e = {"type": "unfollow", "ts": now + 7200_000, "user_id": snap_user, "target_id": gone}
            model.apply(e)
            recs.append((key_of(e), json.dumps(e)))
        tallyctl.publish(h.kcat, brokers, recs)
        published += resets + len(recs)
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=published)
        check_all(h, client, model, "after phase 3")
        for u in USERS[::2]:
            r = client.get("/v1/users/%d/feed/snapshot" % u)
            want = {str(f): n for f, n in model.snapshots.get(u, {}).items()}
            h.check(r.status == 200 and r.json()["followees"] == want and r.json()["user_id"] == u,
                    "snapshot of %d: got %s want %s" % (u, r.text(), want))
        misses = [p for p in sorted(model.viewed) if client.get("/v1/posts/%d/views/%d" % p).json() != {"viewed": True}]
        h.check(not misses, "viewed pairs read false (never allowed): %s" % misses[:10])
        h.checkpoint("unread, snapshots and viewed after phase 3")

        # Replay into a fresh directory and compare every answer byte for byte.
        paths = ["/v1/users/%d/unread" % u for u in USERS] + ["/v1/users/%d/feed/snapshot" % u for u in USERS]
        paths += ["/v1/posts/%d/views/%d" % p for p in sorted(model.viewed)[:300]]
        paths += ["/v1/users/%d/counts" % u for u in USERS]
        live = answers(client, paths)

        def check_replay(name, extra_args, what):
            h.replay(brokers, h.path(name), log_name=name + ".log", extra_args=extra_args)
            serve, rclient = h.start_serve(None, h.path(name), tallyctl.free_port())
            rebuilt = answers(rclient, paths)
            diff = [p for p in paths if live[p] != rebuilt[p]]
            h.check(not diff, "%s differs from live at %d paths, e.g. %s: live %s replayed %s" % (
                what, len(diff), diff[:1], live[diff[0]] if diff else "", rebuilt[diff[0]] if diff else ""))
            h.checkpoint("%s equals live on %d answers" % (what, len(paths)))
            serve.stop()

        check_replay("replayed", [], "replay")
        # The memtables are interchangeable: RocksDB's skip list rebuilds the
        # same state as the sorted runs the live one used.
        check_replay("replayed-skiplist", ["--memtable", "skiplist"], "a replay through RocksDB's skip list")
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit %s" % rc)
        h.finish_checks("e2e_unread")


if __name__ == "__main__":
    main()
