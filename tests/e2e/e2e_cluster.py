#!/usr/bin/env python3
"""End to end, a cluster of tally processes (SPEC section 6): one `tally
broker` and three `tally up --brokers B --group G --advertise ... --standbys
1` members, each with its own state directory and HTTP port, then the
membership changes while events keep coming:

  1. three members form the group while the first events arrive;
  2. one member is SIGKILLed (its directory record must expire);
  3. a fresh member joins with an empty state directory (it restores the
     partitions it is given from tally.deltas);
  4. another member stops cleanly on SIGTERM (exit 0).

Each step publishes events of every type with kcat (the model's stream plus
notices and red dots), waits for the group to settle (every live member's
`GET /v1/cluster` lists exactly the live members, their `owns` divide every
partition, nothing is `restoring`; each member's log then says its
windows end as far apart as its share of the partitions makes them),
POSTs events to one member, waits for
lag 0 everywhere, publishes `read` events of every kind and HTTP resets
(a barrier before and after, as reads do not commute with increments from
other input partitions), waits for lag 0 again, and then reads from every
live member every post's counts (single and batch, ids shuffled so a batch
spans owners), every user's counts, unread and feed snapshot, like edges and
"viewed" pairs.

m3, which takes part in every change without being stopped, is a `tally
aggregate --advertise` beside a `tally serve --advertise` on one state
directory rather than a `tally up`: reads, forwarding, POSTs and resets go
to its serve, and ownership and restores happen in its aggregate.

The expected answers come from a reference: one `tally up` with its own
embedded broker (tally's topics have fixed names, so a second group on the
cluster's broker would route the same input into the same tally.deltas
twice), fed the same records with the same keys. Its answers are checked
against event_model's Model where that model reaches (counts, like edges,
four unread kinds) and every member's answer must equal the reference's
byte for byte, carrying an X-Tally-Member header that names live members.
While the group moves, reads are sampled on every live member (and from a
joining member's start): each must be 200 naming running members, or 503
`partition_moving` with Retry-After, never anything else; and after the
first formation, when every partition has a current standby, not even
that (SPEC section 6: a current standby or old owner answers meanwhile).

  python3 e2e_cluster.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

PARTITIONS = 6
GROUP = "e2e-cluster"
STANDBYS = 1
N_POSTS, N_USERS = 120, 80
CHANNELS = ["discover", "games", "live.now"]
READ_KINDS = ["mention", "comment", "like", "repost", "dm", "follower", "notice", "red_dot", "feed"]
# Rebalances on the embedded broker are slow by design (docs/cluster.md: a
# join about 10 s, a clean leave 5 s, a SIGKILL 11 s); these leave room for
# a restore and the directory's renewals on two busy cores.
SETTLE_TIMEOUT = 120
LAG_TIMEOUT = 120


def step(msg):
    log("%s %s" % (time.strftime("%H:%M:%S", time.gmtime()), msg))


class Pair:
    """`tally aggregate --advertise URL` and `tally serve --advertise URL`
    beside it on one state directory: one member, used as one process."""

    def __init__(self, aggregate, serve):
        self.aggregate, self.serve = aggregate, serve
        self.name = "%s + %s" % (aggregate.name, serve.name)

    @property
    def pid(self):
        return self.aggregate.pid

    def alive(self):
        return self.aggregate.alive() and self.serve.alive()

    def returncode(self):
        rc = self.aggregate.returncode()
        return rc if rc is not None else self.serve.returncode()

    def kill9(self):
        self.aggregate.kill9()
        self.serve.kill9()

    def stop(self, grace=20.0):
        """The HTTP half first, then the member's applier: (worst exit status, both clean)."""
        rcs, clean = [], True
        for p in (self.serve, self.aggregate):
            rc, ok = p.stop(grace=grace)
            rcs.append(rc)
            clean = clean and ok
        return next((rc for rc in rcs if rc != 0), 0), clean


class Member:
    """One member of the cluster: `tally up --brokers`, or with `split`
    `tally aggregate` beside `tally serve` (SPEC section 6 allows either)."""

    def __init__(self, h, brokers, name, split=False):
        self.name = name
        self.port = tallyctl.free_port()
        self.id = "127.0.0.1:%d" % self.port
        self.url = "http://" + self.id
        self.state = h.path(name)
        self.split = split
        if not split:
            argv = [h.tally, "up", "--brokers", brokers, "--group", GROUP, "--state-dir", self.state,
                    "--http", self.id, "--advertise", self.url, "--standbys", STANDBYS,
                    "--partitions", PARTITIONS]
            self.proc = h.spawn("tally up " + name, argv, name + ".log")
        else:
            agg = h.spawn("tally aggregate " + name,
                          [h.tally, "aggregate", "--brokers", brokers, "--group", GROUP, "--state-dir",
                           self.state, "--advertise", self.url, "--standbys", STANDBYS, "--partitions",
                           PARTITIONS], name + "-aggregate.log")
            tallyctl.wait_until("%s's aggregate to create the state" % name,
                                lambda: os.path.exists(os.path.join(self.state, "TALLY")), timeout=60, proc=agg)
            serve = h.spawn("tally serve " + name,
                            [h.tally, "serve", "--brokers", brokers, "--group", GROUP, "--state-dir", self.state,
                             "--http", self.id, "--advertise", self.url], name + "-serve.log")
            self.proc = Pair(agg, serve)
        self.client = tallyctl.Http(self.id)
        self.probe = tallyctl.Http(self.id, timeout=10)

    def wait_healthy(self):
        tallyctl.wait_healthy(self.client, timeout=120, proc=self.proc)
        step("%s (pid %d) healthy on %s" % (self.name, self.proc.pid, self.id))


class Cluster:
    """The members, the reference, what was published to each, and the
    checks of one settled state."""

    def __init__(self, h, brokers, ref_brokers, ref, ref_client):
        self.h, self.brokers, self.ref_brokers = h, brokers, ref_brokers
        self.ref, self.ref_client = ref, ref_client
        self.all = []  # every Member started
        self.live = []  # the Members that run and serve
        self.published = 0  # records in the cluster's tally.events
        self.ref_published = 0  # records in the reference's
        self.w = event_model.Workload(h.rng, N_POSTS, N_USERS)
        self.ts = int(time.time() * 1000) - 3_600_000  # extras: recent, never purged as inactive
        self.notice_id = 1000
        self.notices = []
        self.owners = {}  # partition -> member id, at the last settle
        self.moving_seen = 0  # 503 partition_moving answers while the group moved
        self.seen = set()  # what the reference's answers showed: unread kinds above 0, dots on and off, snapshots

    def next_ts(self):
        self.ts += 3
        return self.ts

    # -- publishing -------------------------------------------------------
    def publish(self, records):
        """(key, value) pairs to both logs, in the same order with the same keys."""
        tallyctl.publish(self.h.kcat, self.brokers, records)
        self.published += len(records)
        tallyctl.publish(self.h.kcat, self.ref_brokers, records)
        self.ref_published += len(records)

    def events(self, n):
        """n events of the model's eleven types plus notices (a few late, one
        repeated) and red dots; returns (key, value) pairs."""
        rng = self.h.rng
        recs = [(r.key, r.value) for r in self.w.stream(n)]
        extras = []
        for _ in range(max(4, n // 100)):
            self.notice_id += rng.randint(1, 3)
            self.notices.append(self.notice_id)
            extras.append({"type": "notice", "ts": self.next_ts(), "notice_id": self.notice_id,
                           "title": "notice %d" % self.notice_id})
        late = self.notice_id - 1
        if late not in self.notices:
            self.notices.append(late)
            extras.append({"type": "notice", "ts": self.next_ts(), "notice_id": late, "title": "late"})
        extras.append({"type": "notice", "ts": self.next_ts(), "notice_id": self.notices[0], "title": "again"})
        for _ in range(max(3, n // 200)):
            extras.append({"type": "red_dot", "ts": self.next_ts(), "channel": rng.choice(CHANNELS)})
        for e in extras:
            key = str(e["notice_id"]) if e["type"] == "notice" else e["channel"]
            recs.insert(rng.randrange(len(recs) + 1), (key, json.dumps(e, separators=(",", ":"))))
        return recs

    def post_events(self, member, n=40):
        """POSTs n commuting events (views, comments, reposts, mentions, DMs)
        to `member` and the same body to the reference."""
        rng = self.h.rng
        recs = [self.w.event(rng.choice(["view", "comment", "repost", "mention", "dm"])) for _ in range(n)]
        body = "[" + ",".join(r.value for r in recs) + "]"
        r = member.client.post("/v1/events", body)
        self.h.check(r.status == 202 and r.json() == {"accepted": n}, "POST /v1/events (%d) to %s: %r" % (
            n, member.name, r))
        self.published += n
        r = self.ref_client.post("/v1/events", body)
        if r.status != 202:
            raise tallyctl.TestFailure("the reference refused POST /v1/events: %r" % r)
        self.ref_published += n

    def reads(self, n_users=24):
        """`read` events of every kind for a sample of users (keyed by user,
        published after a barrier), and one HTTP reset per kind that a
        reset fills in alike on both sides, sent to a live member and to
        the reference. The model forgets the four unread kinds it keeps."""
        rng = self.h.rng
        m = self.w.model
        users = rng.sample(sorted(m.user_ids), min(n_users, len(m.user_ids)))
        recs = []
        for i, u in enumerate(users):
            kinds = READ_KINDS if i < 3 else rng.sample(READ_KINDS, 3)
            for kind in kinds:
                e = {"type": "read", "ts": self.next_ts(), "user_id": u, "kind": kind}
                if kind == "notice":
                    e["notice_id"] = rng.choice(self.notices)
                elif kind == "red_dot":
                    e["channel"] = rng.choice(CHANNELS)
                elif kind == "feed":
                    e["snapshot"] = {str(f): m.users.get(f, {}).get("posts", 0)
                                     for (a, f) in m.follows if a == u}
                if kind in event_model.UNREAD_CHECKED and u in m.unread:
                    m.unread[u][kind] = 0
                recs.append((str(u), json.dumps(e, separators=(",", ":"))))
        # A followee of one of the users whose feed was just read posts
        # again, so the next comparison shows a feed above 0 whatever the
        # random stream did (the snapshot in the read names the counts
        # before it, so the order the two are applied in does not matter).
        for u in users[:3]:
            followees = {f for (a, f) in m.follows if a == u}
            theirs = sorted(p for p, a in self.w.author.items() if a in followees)
            if theirs:
                e = {"type": "post", "ts": self.next_ts(), "author_id": self.w.author[theirs[0]],
                     "post_id": theirs[0]}
                m.apply(e)
                recs.append((str(theirs[0]), json.dumps(e, separators=(",", ":"))))
                break
        self.publish(recs)
        # The HTTP reset of these takes nothing from the clock that a read
        # shows (feed would: its snapshot's taken_ts).
        resets = ["like", "follower", "notice", "red_dot"]
        for kind in resets:
            u = rng.choice(users)
            member = rng.choice(self.live)
            path = "/v1/users/%d/unread/%s/reset" % (u, kind)
            if kind == "red_dot":
                path += "?channel=" + rng.choice(CHANNELS)
            r = member.client.post(path)
            self.h.check(r.status == 202 and r.json() == {"accepted": True}, "POST %s on %s: %r" % (
                path, member.name, r))
            self.published += 1
            r = self.ref_client.post(path)
            if r.status != 202:
                raise tallyctl.TestFailure("the reference refused POST %s: %r" % (path, r))
            self.ref_published += 1
        log("published %d read events and %d HTTP resets" % (len(recs), len(resets)))

    # -- settling -----------------------------------------------------------
    def probe_reads(self, odd, starting=()):
        """Reads a few ids on every live member while the group moves: 200
        with X-Tally-Member naming running members (live ones, or
        `starting` ones, which may answer for partitions they were given
        before their /healthz says ready), or 503 partition_moving with
        Retry-After; anything else is added to `odd` (a dict: what ->
        [count, first example])."""
        rng = self.h.rng
        ids = sorted(self.w.model.post_ids)
        live = {x.id for x in self.live} | {x.id for x in starting}

        def note(what, example):
            entry = odd.setdefault(what, [0, example])
            entry[0] += 1

        for m in self.live:
            paths = ["/v1/posts/%d/counts" % rng.choice(ids),
                     "/v1/posts/counts?ids=" + ",".join(str(rng.choice(ids)) for _ in range(12)),
                     "/v1/users/%d/unread" % rng.choice(sorted(self.w.model.user_ids))]
            for path in paths:
                try:
                    r = m.probe.get(path)
                except ConnectionError as e:
                    note("%s: no answer" % m.name, "%s: %s" % (path, e))
                    continue
                if r.status == 200:
                    names = [x.strip() for x in r.headers.get("x-tally-member", "").split(",") if x.strip()]
                    if not names or not all(n in live for n in names):
                        note("%s: 200 without an X-Tally-Member naming running members" % m.name,
                             "%s: X-Tally-Member %r" % (path, r.headers.get("x-tally-member")))
                    continue
                code = None
                try:
                    code = r.json()["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    pass
                if r.status == 503 and code == "partition_moving" and r.headers.get("retry-after", "").isdigit():
                    self.moving_seen += 1
                    moving = odd.setdefault(None, {})
                    at = time.monotonic()
                    moving.setdefault(m.name, [0, at, at, "%s: %s" % (path, r.text()[:240])])
                    moving[m.name][0] += 1
                    moving[m.name][2] = at
                else:
                    note("%s: HTTP %d %s" % (m.name, r.status, code), "%s: %r (Retry-After %r)" % (
                        path, r, r.headers.get("retry-after")))

    def cluster_views(self):
        """Every live member's GET /v1/cluster, parsed, or a reason why not."""
        views = {}
        for m in self.live:
            r = m.probe.try_get("/v1/cluster")
            if r is None or r.status != 200:
                return None, "%s: GET /v1/cluster: %r" % (m.name, r)
            try:
                views[m.name] = r.json()
            except ValueError:
                return None, "%s: GET /v1/cluster is not JSON: %r" % (m.name, r)
        return views, None

    def unsettled(self, views):
        """None when every view shows exactly the live members dividing every
        partition with nothing restoring, all alike; else what is not so."""
        live = {m.id: m for m in self.live}
        first = None
        for name, v in views.items():
            try:
                members = {x["member"]: x for x in v["members"]}
                if set(members) != set(live):
                    return "%s lists members %s, the live ones are %s" % (name, sorted(members), sorted(live))
                owns = sorted(p for x in members.values() for p in x["owns"])
                # Between a cooperative rebalance's two rounds the joiner's
                # record may show its generation with nothing yet while the
                # old owners' still show what they are about to give up.
                idle = [k for k, x in members.items() if not x["owns"]]
                if idle and len(members) <= PARTITIONS:
                    return "%s: %s own nothing yet (%d members, %d partitions)" % (
                        name, sorted(idle), len(members), PARTITIONS)
                if owns != list(range(PARTITIONS)):
                    return "%s: owns of all members together are %s, want each of 0..%d once" % (
                        name, owns, PARTITIONS - 1)
                restoring = {k: x["restoring"] for k, x in members.items() if x["restoring"]}
                if restoring:
                    return "%s: restoring %s" % (name, restoring)
                summary = (v["generation"], {k: sorted(x["owns"]) for k, x in members.items()})
            except (KeyError, TypeError) as e:
                return "%s: GET /v1/cluster lacks %r: %s" % (name, e, json.dumps(v)[:400])
            if first is None:
                first = (name, summary)
            elif summary != first[1]:
                return "%s shows generation/owners %s, %s shows %s" % (name, summary, first[0], first[1])
        return None

    def settle(self, what, standbys_before=False, joining=None):
        """Waits until the group settled (see unsettled) while sampling reads;
        then checks the shape of /v1/cluster and logs what moved. With
        `standbys_before` (every partition had a current standby when the
        change began), no sampled read may answer 503: SPEC section 6 has a
        current standby or old owner serve a partition while it moves.
        `joining`: a Member just started, live once its /healthz says so
        (reads are sampled on the others meanwhile: the group moves
        partitions to it before it is ready)."""
        t0 = time.monotonic()
        last = ["no answer yet"]
        procs = list(self.live) + ([joining] if joining else [])
        pending = [joining] if joining else []

        odd = {}
        missing = []
        probes = [0]

        def settled():
            for m in procs:
                if not m.proc.alive():
                    raise tallyctl.TestFailure("%s exited with status %s while the group settled" % (
                        m.name, m.proc.returncode()))
            self.probe_reads(odd, pending)
            probes[0] += 1
            for m in list(pending):
                r = m.probe.try_get("/healthz")
                if r is None or r.status != 200:
                    last[0] = "%s: /healthz %r" % (m.name, r)
                    return None
                pending.remove(m)
                self.live.append(m)
                step("%s (pid %d) healthy on %s" % (m.name, m.proc.pid, m.id))
            views, why = self.cluster_views()
            if views is None and "HTTP 404" in why:
                missing.append(why)  # no GET /v1/cluster at all: nothing to wait for
                return True
            if views is not None:
                why = self.unsettled(views)
            last[0] = why
            return views if why is None else None

        h = self.h
        try:
            views = tallyctl.wait_until("the group to settle after %s" % what, settled, SETTLE_TIMEOUT, interval=0.5)
        except tallyctl.TestFailure as e:
            raise tallyctl.TestFailure("%s; last: %s" % (e, last[0])) from None
        finally:
            moving = odd.pop(None, {})
            for name, (n, first, last_at, path) in sorted(moving.items()):
                line = "%s answered %d of %d sampled reads 503 partition_moving, from %.1f to %.1f s after %s " \
                    "(first: %s)" % (name, n, 3 * probes[0], first - t0, last_at - t0, what, path)
                log(line)
                h.check(not standbys_before, "every partition had a current standby (--standbys %d) when %s, so "
                        "its reads must go on (SPEC section 6), yet %s" % (STANDBYS, what, line))
            for kind, (n, example) in sorted(odd.items()):
                h.check(False, "while the group moved after %s: %d reads on %s (want 200 naming running members, "
                        "or 503 partition_moving with Retry-After); first: %s" % (what, n, kind, example))
        if missing:
            # Go on without it, so that one run shows everything else.
            h.check(False, missing[0])
            step("no GET /v1/cluster: not waiting for the group after %s" % what)
            return None
        step("group settled %.1f s after %s (%d rounds of 3 reads per member meanwhile)" % (
            time.monotonic() - t0, what, probes[0]))
        v = next(iter(views.values()))
        members = {x["member"]: x for x in v["members"]}
        h.check(v.get("group") in (GROUP, GROUP + "-applier"), "GET /v1/cluster group is %r, want %r" % (
            v.get("group"), GROUP))
        h.check(isinstance(v.get("generation"), int) and v["generation"] > 0,
                "GET /v1/cluster generation is %r" % v.get("generation"))
        for m in self.live:
            x = members[m.id]
            h.check(x.get("http") == m.url, "%s: http is %r, want %r" % (m.name, x.get("http"), m.url))
            h.check(len(x["owns"]) >= 1, "%s owns no partition after %s (%d members, %d partitions)" % (
                m.name, what, len(self.live), PARTITIONS))
        owners = {p: k for k, x in members.items() for p in x["owns"]}
        moved = {p: (self.owners.get(p), owners[p]) for p in owners if self.owners.get(p) != owners[p]}
        log("owners: %s; moved: %s" % (
            {m.name: members[m.id]["owns"] for m in self.live},
            {p: "%s -> %s" % (self.name_of(a), self.name_of(b)) for p, (a, b) in sorted(moved.items())}))
        self.owners = owners
        self.wait_standbys(what)
        return views

    def name_of(self, member_id):
        if member_id is None:
            return "-"
        return next((m.name for m in self.all if m.id == member_id), member_id)

    def wait_standbys(self, what):
        """--standbys 1: each partition is kept hot on a member besides its
        owner, once the group has settled (recorded, not fatal)."""
        want = min(STANDBYS, len(self.live) - 1)
        last = [None]

        def covered():
            views, why = self.cluster_views()
            if views is None:
                last[0] = why
                return False
            for name, v in views.items():
                held = {}
                for x in v["members"]:
                    for p in x.get("standby", []):
                        if p in x["owns"]:
                            last[0] = "%s: %s lists partition %d as owned and standby" % (name, x["member"], p)
                            return False
                        held[p] = held.get(p, 0) + 1
                short = [p for p in range(PARTITIONS) if held.get(p, 0) < want]
                if short:
                    last[0] = "%s: partitions %s have fewer than %d standby (%s)" % (
                        name, short, want, {x["member"]: x.get("standby") for x in v["members"]})
                    return False
                # The partition of the notices and red dots is kept like any
                # other (SPEC section 6): the members that neither own nor
                # stand by for it keep only the notices and red dots, and do
                # not list it.
                g = tallyctl.partition_of(0, PARTITIONS)
                if held.get(g, 0) > want:
                    last[0] = "%s: partition %d (notices, red dots) has %d standbys, not %d (%s)" % (
                        name, g, held[g], want, {x["member"]: x.get("standby") for x in v["members"]})
                    return False
            return True

        try:
            tallyctl.wait_until("standbys after %s" % what, covered, 30, interval=0.5)
        except tallyctl.TestFailure as e:
            self.h.check(False, "%s; last: %s" % (e, last[0]))

    def wait_visible(self, what):
        for m in self.live:
            try:
                w = tallyctl.wait_lag_zero(m.client, timeout=LAG_TIMEOUT, proc=m.proc, min_input_end=self.published)
            except tallyctl.TestFailure as e:
                raise tallyctl.TestFailure("%s (%s, %s); GET /v1/watermarks now: %r" % (
                    e, m.name, what, m.client.try_get("/v1/watermarks"))) from None
            have = {(p["topic"], p["partition"]) for p in w["partitions"]}
            for topic in (tallyctl.EVENTS_TOPIC, tallyctl.DELTAS_TOPIC):
                missing = [p for p in range(PARTITIONS) if (topic, p) not in have]
                self.h.check(not missing, "%s: GET /v1/watermarks lacks %s partitions %s (%s)" % (
                    m.name, topic, missing, what))
        tallyctl.wait_lag_zero(self.ref_client, timeout=LAG_TIMEOUT, proc=self.ref,
                               min_input_end=self.ref_published)
        step("lag 0 on %s and the reference (%d records published)" % (
            ", ".join(m.name for m in self.live), self.published))

    # -- answers ------------------------------------------------------------
    def paths(self):
        rng = self.h.rng
        m = self.w.model
        posts = sorted(m.post_ids)
        users = sorted(m.user_ids)
        shuffled = list(posts)
        rng.shuffle(shuffled)
        out = ["/v1/posts/%d/counts" % p for p in posts]
        out += ["/v1/posts/counts?ids=" + ",".join(map(str, shuffled[i:i + 200])) for i in range(0, len(posts), 200)]
        for u in users:
            out += ["/v1/users/%d/counts" % u, "/v1/users/%d/unread" % u, "/v1/users/%d/feed/snapshot" % u]
        likes = sorted(m.like_pairs)
        likes = rng.sample(likes, min(150, len(likes))) + [(rng.choice(posts), fresh_user(rng)) for _ in range(10)]
        out += ["/v1/posts/%d/likes/%d" % e for e in likes]
        viewed = sorted(m.viewed)
        views = rng.sample(viewed, min(40, len(viewed))) + [(rng.choice(posts), rng.choice(users)) for _ in range(20)]
        out += ["/v1/posts/%d/views/%d" % e for e in views]
        return out

    def check_reference(self, paths, answers, what):
        """The reference against the model where the model reaches."""
        m = self.w.model
        h = self.h
        bad = []
        for path in paths:
            status, body = answers[path]
            if status != 200:
                bad.append("%s: HTTP %d %s" % (path, status, body[:200]))
                continue
            got = json.loads(body)
            parts = path.split("?")[0].split("/")
            want = None
            if path.startswith("/v1/posts/counts?ids="):
                ids = [int(x) for x in path.split("=", 1)[1].split(",")]
                want = {"posts": [m.post_counts(p) for p in ids]}
            elif parts[2] == "posts" and parts[4] == "counts":
                want = m.post_counts(int(parts[3]))
            elif parts[2] == "posts" and parts[4] == "likes":
                want = {"liked": m.liked(int(parts[3]), int(parts[5]))}
            elif parts[2] == "posts" and parts[4] == "views":
                if (int(parts[3]), int(parts[5])) in m.viewed:
                    want = {"viewed": True}
            elif parts[2] == "users" and parts[4] == "counts":
                want = m.user_counts(int(parts[3]))
            elif parts[2] == "users" and parts[4] == "feed":
                if got.get("followees"):
                    self.seen.add("snapshot")
            elif parts[2] == "users" and parts[4] == "unread":
                self.seen.update(k for k in READ_KINDS if isinstance(got.get(k), int) and got[k] > 0)
                self.seen.update("dot %s" % v for v in got.get("red_dots", {}).values())
                got = {k: got.get(k) for k in event_model.UNREAD_CHECKED}
                want = m.unread_counts(int(parts[3]))
            if want is not None and got != want:
                bad.append("%s: reference answers %s, model says %s" % (path, json.dumps(got), json.dumps(want)))
        h.check(not bad, "%s: %d reference answers differ from the model:\n    %s" % (
            what, len(bad), "\n    ".join(bad[:20])))


    def check_all(self, what):
        paths = self.paths()
        t0 = time.monotonic()
        expected = {}
        for path in paths:
            r = self.ref_client.get(path)
            expected[path] = (r.status, r.text())
        self.check_reference(paths, expected, what)
        live = {m.id for m in self.live}
        for m in self.live:
            wrong, unnamed, answered_by = [], [], {}
            for path in paths:
                r = m.client.get(path)
                if (r.status, r.text()) != expected[path]:
                    wrong.append("%s\n      %s answers HTTP %d %s\n      reference     HTTP %d %s" % (
                        path, m.name, r.status, r.text()[:300], expected[path][0], expected[path][1][:300]))
                names = [s.strip() for s in r.headers.get("x-tally-member", "").split(",") if s.strip()]
                if not names or not all(n in live for n in names):
                    unnamed.append("%s: %r" % (path, r.headers.get("x-tally-member")))
                for n in names:
                    answered_by[self.name_of(n)] = answered_by.get(self.name_of(n), 0) + 1
            self.h.check(not wrong, "%s: %d of %d answers of %s differ from the reference's:\n    %s" % (
                what, len(wrong), len(paths), m.name, "\n    ".join(wrong[:12])))
            self.h.check(not unnamed, "%s: %d of %d answers of %s lack an X-Tally-Member naming live members "
                         "%s:\n    %s" % (what, len(unnamed), len(paths), m.name, sorted(live),
                                         "\n    ".join(unnamed[:5])))
            log("%s: %d answers, %d differ from the reference; answered by %s" % (
                m.name, len(paths), len(wrong), answered_by))
        step("compared %d paths on %d members with the reference in %.1f s" % (
            len(paths), len(self.live), time.monotonic() - t0))
        self.h.checkpoint(what)

    def check_windows(self, what):
        """Each live member's applier ends its windows as far apart as its
        share of the partitions says (aggregator/README.md, "Windows in a
        cluster, and at rest"): --flush-ms (20) x partitions / those it owns
        or stands by for, at most 60 ms, as its log says last."""
        views, why = self.cluster_views()
        if views is None:
            self.h.check(False, "%s: %s" % (what, why))
            return
        for m in self.live:
            mine = next((x for x in views[m.name]["members"] if x["member"] == m.id), None)
            if mine is None:
                self.h.check(False, "%s: %s is not in its own GET /v1/cluster" % (what, m.name))
                continue
            held = len(mine["owns"]) + len(mine["standby"])
            want = min(max(20 * PARTITIONS // held, 20), 60) if 0 < held < PARTITIONS else 20
            path = self.h.path(m.name + ("-aggregate.log" if m.split else ".log"))

            def last():
                lines = tallyctl.log_lines(path, " partitions: windows end ")
                return int(lines[-1].rsplit(" windows end ", 1)[1].split()[0]) if lines else 20
            try:
                tallyctl.wait_until("%s's log to say windows %d ms apart" % (m.name, want),
                                    lambda: last() == want, timeout=5)
            except tallyctl.TestFailure:
                self.h.check(False, "%s: %s applies %d of %d partitions, its windows should end %d ms "
                             "apart; its log last said %d" % (what, m.name, held, PARTITIONS, want, last()))

    def phase(self, what, member_for_post, standbys_before=True, joining=None):
        """After a change: settle, POST, barrier, reads, barrier, compare."""
        self.settle(what, standbys_before, joining)
        self.check_windows(what)
        self.post_events(member_for_post)
        self.wait_visible(what)
        self.reads()
        self.wait_visible(what + " and the reads")
        self.check_all(what)


def fresh_user(rng):
    return 900_000 + rng.randrange(1000)  # a user id no stream names


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_cluster", default_seed=6006) as h:
        t_start = time.monotonic()
        broker, brokers = h.start_broker(partitions=PARTITIONS)
        ref_port = tallyctl.free_port()
        ref_http = tallyctl.free_port()
        ref = h.spawn("tally up (reference)",
                      [h.tally, "up", "--port", ref_port, "--state-dir", h.path("reference"),
                       "--http", "127.0.0.1:%d" % ref_http, "--partitions", PARTITIONS], "reference.log")
        ref_client = tallyctl.Http("127.0.0.1:%d" % ref_http)
        c = Cluster(h, brokers, "127.0.0.1:%d" % ref_port, ref, ref_client)

        # 1. Three members form the group while the first events arrive.
        for name in ("m1", "m2", "m3"):
            # m3, which stays to the end, is the split kind.
            c.all.append(Member(h, brokers, name, split=(name == "m3")))
        tallyctl.wait_healthy(ref_client, timeout=120, proc=ref)
        step("reference (pid %d) healthy" % ref.pid)
        c.publish(c.events(1500))
        step("published %d records" % c.published)
        for m in c.all:
            m.wait_healthy()
        c.live = list(c.all)
        m1, m2, m3 = c.all
        c.phase("three members joined", m2, standbys_before=False)

        # 2. SIGKILL of a member that owns partitions; events go on.
        m1.proc.kill9()
        c.live.remove(m1)
        step("SIGKILLed m1 (%s)" % m1.id)
        c.publish(c.events(800))
        c.phase("m1 was SIGKILLed", m3)

        # 3. A fresh member with an empty state directory joins.
        m4 = Member(h, brokers, "m4")
        c.all.append(m4)
        c.publish(c.events(800))
        c.phase("m4 joined with an empty state", m4, joining=m4)
        h.check(any(o == m4.id for o in c.owners.values()), "m4 owns nothing after joining")

        # 4. A clean leave; events go on while it stops.
        m2.proc.popen.send_signal(signal.SIGTERM)
        c.live.remove(m2)
        step("SIGTERM to m2 (%s)" % m2.id)
        c.publish(c.events(800))
        rc = m2.proc.wait(60)
        h.check(rc == 0, "m2 on SIGTERM: exit %s (within 60 s)" % rc)
        m2.proc.stop(grace=5)
        step("m2 exited %s" % rc)
        c.phase("m2 left cleanly", m3)

        shapes = set(READ_KINDS) - {"red_dot"} | {"dot True", "dot False", "snapshot"}
        h.check(c.seen >= shapes, "the answers never showed %s: the stream does not exercise them" % (
            sorted(shapes - c.seen)))
        log("%d answers 503 partition_moving while the group moved" % c.moving_seen)
        for m in c.live:
            rc, clean = m.proc.stop(grace=60)
            h.check(clean and rc == 0, "%s on SIGTERM: exit %s%s" % (m.name, rc, "" if clean else " (SIGKILL)"))
        rc, clean = ref.stop(grace=60)
        h.check(clean and rc == 0, "the reference on SIGTERM: exit %s" % rc)
        step("done in %.0f s" % (time.monotonic() - t_start))
        h.finish_checks("e2e_cluster")


if __name__ == "__main__":
    main()
