"""A seeded random event stream and a naive reference model of tally's
counters, written from SPEC.md sections 1-3 and nothing else.

The stream is published with the keys SPEC section 2 recommends (post id for
like/unlike and the other post events, user id for follow/unfollow, the
author for post/post_delete), so every order-dependent effect (a like and
its unlike, a follow and its unfollow, a post and its delete clamped at 0)
is applied in publishing order, and applying the events in generation order
here gives exactly the totals tally must reach.

Stdlib only.
"""

import json
import random

MAX_ID = 2**63 - 1
TS0 = 1_700_000_000_000

POST_FIELDS = ("like", "repost", "comment", "view")
USER_FIELDS = ("posts", "followers", "following")
# Unread kinds whose effect the SPEC defines without any ambiguity: plain
# increments of one counter per user, no condition, no reset in our streams.
UNREAD_CHECKED = ("mention", "comment", "repost", "dm")


class Record:
    """One Kafka record to publish: key and value as text, plus the event it
    encodes (None for a record that must go to tally.dlq)."""

    __slots__ = ("key", "value", "event", "reason")

    def __init__(self, key, value, event=None, reason=None):
        self.key = key
        self.value = value
        self.event = event
        self.reason = reason

    @property
    def valid(self):
        return self.event is not None


class IndexedSet:
    """A set with O(1) add, remove and uniform random choice, whose choices
    depend only on the sequence of operations (so a seed replays)."""

    def __init__(self):
        self._items = []
        self._index = {}

    def add(self, x):
        if x not in self._index:
            self._index[x] = len(self._items)
            self._items.append(x)

    def remove(self, x):
        i = self._index.pop(x)
        last = self._items.pop()
        if i < len(self._items):
            self._items[i] = last
            self._index[last] = i

    def choice(self, rng):
        return self._items[rng.randrange(len(self._items))]

    def __contains__(self, x):
        return x in self._index

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(self._items)


class Model:
    """The reference: dictionaries of counters and sets of edges."""

    def __init__(self):
        self.posts = {}  # post id -> {like, repost, comment, view}
        self.users = {}  # user id -> {posts, followers, following}
        self.unread = {}  # user id -> {mention, comment, repost, dm}
        self.likes = IndexedSet()  # (post, user) like edges that are set
        self.follows = IndexedSet()  # (user, target): user follows target
        self.viewed = set()  # (post, user) pairs with a view
        self.like_pairs = set()  # every (post, user) a like/unlike touched
        self.likers = {}  # post id -> [users a like/unlike named], in order
        self.post_ids = set()  # every post id an event named
        self.user_ids = set()  # every user id an event named

    # -- counters ---------------------------------------------------------
    def _post(self, p):
        self.post_ids.add(p)
        return self.posts.setdefault(p, dict.fromkeys(POST_FIELDS, 0))

    def _user(self, u):
        self.user_ids.add(u)
        return self.users.setdefault(u, dict.fromkeys(USER_FIELDS, 0))

    def _unread(self, u, kind):
        self.user_ids.add(u)
        c = self.unread.setdefault(u, dict.fromkeys(UNREAD_CHECKED, 0))
        c[kind] += 1

    def _touch_like(self, edge):
        if edge not in self.like_pairs:
            self.like_pairs.add(edge)
            self.likers.setdefault(edge[0], []).append(edge[1])

    def apply(self, ev):
        t = ev["type"]
        if t == "post":
            self._user(ev["author_id"])["posts"] += 1
            self.post_ids.add(ev["post_id"])
        elif t == "post_delete":
            c = self._user(ev["author_id"])
            c["posts"] = max(0, c["posts"] - 1)
            self.post_ids.add(ev["post_id"])
        elif t == "like":
            edge = (ev["post_id"], ev["user_id"])
            self._touch_like(edge)
            c = self._post(ev["post_id"])
            self._user(ev["user_id"])
            if edge not in self.likes:
                self.likes.add(edge)
                c["like"] += 1
        elif t == "unlike":
            edge = (ev["post_id"], ev["user_id"])
            self._touch_like(edge)
            c = self._post(ev["post_id"])
            self._user(ev["user_id"])
            if edge in self.likes:
                self.likes.remove(edge)
                c["like"] = max(0, c["like"] - 1)
        elif t in ("repost", "comment"):
            self._post(ev["post_id"])[t] += 1
            self._user(ev["user_id"])
            if ev.get("author_id") is not None:
                self._unread(ev["author_id"], t)
        elif t == "view":
            self._post(ev["post_id"])["view"] += 1
            if ev.get("user_id") is not None:
                self._user(ev["user_id"])
                self.viewed.add((ev["post_id"], ev["user_id"]))
        elif t == "follow":
            u, v = ev["user_id"], ev["target_id"]
            cu, cv = self._user(u), self._user(v)
            if (u, v) not in self.follows:
                self.follows.add((u, v))
                cu["following"] += 1
                cv["followers"] += 1
        elif t == "unfollow":
            u, v = ev["user_id"], ev["target_id"]
            cu, cv = self._user(u), self._user(v)
            if (u, v) in self.follows:
                self.follows.remove((u, v))
                cu["following"] = max(0, cu["following"] - 1)
                cv["followers"] = max(0, cv["followers"] - 1)
        elif t == "mention":
            self._user(ev["user_id"])
            for target in ev["target_ids"]:
                self._unread(target, "mention")
        elif t == "dm":
            self._user(ev["from_user_id"])
            self._unread(ev["to_user_id"], "dm")
        else:
            raise ValueError("model does not know event type %r" % t)

    # -- expected HTTP answers (parsed JSON) ------------------------------
    def post_counts(self, p):
        c = self.posts.get(p, dict.fromkeys(POST_FIELDS, 0))
        return {"post_id": p, **c}

    def user_counts(self, u):
        c = self.users.get(u, dict.fromkeys(USER_FIELDS, 0))
        return {"user_id": u, **c}

    def unread_counts(self, u):
        return dict(self.unread.get(u, dict.fromkeys(UNREAD_CHECKED, 0)))

    def liked(self, p, u):
        return (p, u) in self.likes


class Workload:
    """Generates `n` events over `n_posts` posts and `n_users` users (plus the
    largest legal id, 2^63-1, for both), with `n_invalid` invalid records
    mixed in. Every valid event is applied to `self.model` as it is made."""

    def __init__(self, rng, n_posts, n_users, mix=None):
        self.rng = rng
        self.model = Model()
        self.post_ids = list(range(1, n_posts + 1)) + [MAX_ID]
        self.user_ids = list(range(1, n_users + 1)) + [MAX_ID]
        self.author = {p: rng.choice(self.user_ids) for p in self.post_ids}
        self.seq = 0
        self.emitted = {}  # value of every valid record made -> its event (ts makes each unique)
        self.mix = mix or {
            "post": 7,
            "post_delete": 3,
            "like": 24,
            "unlike": 9,
            "repost": 7,
            "comment": 9,
            "view": 14,
            "follow": 12,
            "unfollow": 6,
            "mention": 3,
            "dm": 3,
        }
        self._types = list(self.mix)
        self._weights = [self.mix[t] for t in self._types]

    # -- id choice and rendering ------------------------------------------
    def _pick(self, ids):
        # A few hot ids get half the traffic (hot keys, duplicates), the
        # rest is uniform; the largest id shows up now and then.
        r = self.rng.random()
        if r < 0.01:
            return ids[-1]
        if r < 0.5:
            return ids[self.rng.randrange(max(1, len(ids) // 20))]
        return ids[self.rng.randrange(len(ids) - 1)]

    def post(self):
        return self._pick(self.post_ids)

    def user(self):
        return self._pick(self.user_ids)

    def _id(self, x):
        """An id as a JSON number, or (one time in five) a decimal string."""
        return str(x) if self.rng.random() < 0.2 else x

    def _ts(self):
        self.seq += 1
        return TS0 + self.seq * 7

    # -- events -----------------------------------------------------------
    def event(self, t=None):
        """Returns a valid Record of type `t` (random by the mix if None) and
        applies it to the model."""
        rng = self.rng
        m = self.model
        t = t or rng.choices(self._types, self._weights)[0]
        ev = {"type": t, "ts": self._ts()}
        if t in ("post", "post_delete"):
            p = self.post()
            a = self.author[p]
            ev.update(author_id=a, post_id=p)
            key = a
        elif t == "like":
            p = self.post()
            likers = m.likers.get(p) if rng.random() < 0.3 else None
            u = rng.choice(likers) if likers else self.user()
            ev.update(post_id=p, user_id=u)
            if rng.random() < 0.7:
                ev["author_id"] = self.author[p]
            key = p
        elif t == "unlike":
            if m.likes and rng.random() < 0.75:
                p, u = m.likes.choice(rng)
            else:
                p, u = self.post(), self.user()
            ev.update(post_id=p, user_id=u)
            key = p
        elif t in ("repost", "comment"):
            p = self.post()
            ev.update(post_id=p, user_id=self.user())
            if rng.random() < 0.8:
                ev["author_id"] = self.author[p]
            key = p
        elif t == "view":
            p = self.post()
            ev["post_id"] = p
            if rng.random() < 0.7:
                ev["user_id"] = self.user()
            key = p
        elif t == "follow":
            if m.follows and rng.random() < 0.3:
                u, v = m.follows.choice(rng)  # a duplicate follow
            else:
                u, v = self.user(), self.user()
                while v == u:
                    v = self.user()
            ev.update(user_id=u, target_id=v)
            key = u
        elif t == "unfollow":
            if m.follows and rng.random() < 0.75:
                u, v = m.follows.choice(rng)
            else:
                u, v = self.user(), self.user()
            ev.update(user_id=u, target_id=v)
            key = u
        elif t == "mention":
            u = self.user()
            targets = rng.sample(self.user_ids, rng.randint(1, 4))
            ev.update(user_id=u, target_ids=targets)
            key = u
        elif t == "dm":
            u, v = self.user(), self.user()
            ev.update(from_user_id=u, to_user_id=v)
            key = u
        else:
            raise ValueError(t)
        m.apply(ev)
        # Render: ids sometimes as decimal strings, sometimes an "id" for
        # tracing and unknown extra fields (which must be ignored).
        out = {}
        for k, v in ev.items():
            if k.endswith("_id"):
                out[k] = self._id(v)
            elif k == "target_ids":
                out[k] = [self._id(x) for x in v]
            else:
                out[k] = v
        r = rng.random()
        if r < 0.05:
            out["id"] = "trace-%d" % self.seq
        elif r < 0.08:
            out["x_extra"] = {"nested": [1, "two", None], "flag": True}
        rec = Record(str(key), json.dumps(out, separators=(",", ":")), ev)
        self.emitted[rec.value] = ev
        return rec

    def invalid(self, i=None):
        """A record that must not be applied and must reach tally.dlq."""
        rng = self.rng
        ts = self._ts()
        p, u = self.post(), self.user()
        cases = [
            ("not JSON (truncated)", '{"type":"like","ts":%d,"post_id":%d' % (ts, p)),
            ("not JSON", "this is not json"),
            ("not an object", "[1,2,3]"),
            ("unknown type", '{"type":"explode","ts":%d,"post_id":%d}' % (ts, p)),
            ("missing user_id", '{"type":"like","ts":%d,"post_id":%d}' % (ts, p)),
            ("missing ts", '{"type":"comment","post_id":%d,"user_id":%d}' % (p, u)),
            ("missing type", '{"ts":%d,"post_id":%d,"user_id":%d}' % (ts, p, u)),
            ("post_id 0", '{"type":"like","ts":%d,"post_id":0,"user_id":%d}' % (ts, u)),
            ("post_id 2^63", '{"type":"view","ts":%d,"post_id":9223372036854775808}' % ts),
            ("negative user_id", '{"type":"follow","ts":%d,"user_id":-4,"target_id":%d}' % (ts, u)),
            ("bad decimal string", '{"type":"repost","ts":%d,"post_id":"12a","user_id":%d}' % (ts, u)),
            ("ts not an integer", '{"type":"repost","ts":"yesterday","post_id":%d,"user_id":%d}' % (p, u)),
            ("user_id of wrong type", '{"type":"unlike","ts":%d,"post_id":%d,"user_id":true}' % (ts, p)),
            ("empty target_ids", '{"type":"mention","ts":%d,"user_id":%d,"target_ids":[]}' % (ts, u)),
        ]
        reason, value = cases[i % len(cases)] if i is not None else rng.choice(cases)
        return Record(str(rng.choice([p, u])), value, None, reason)

    def stream(self, n, n_invalid=0):
        """n valid events with n_invalid invalid records at random places
        (each invalid case at least once when n_invalid allows)."""
        slots = set(self.rng.sample(range(n + n_invalid), n_invalid))
        out = []
        inv = 0
        for i in range(n + n_invalid):
            if i in slots:
                out.append(self.invalid(inv))
                inv += 1
            else:
                out.append(self.event())
        return out


def new_workload(seed, n_posts, n_users):
    return Workload(random.Random(seed), n_posts, n_users)
