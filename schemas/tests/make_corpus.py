#!/usr/bin/env python3
"""Builds the corpus of the schema conformance test (standard library only).

Each entry is raw bytes (any bytes: invalid UTF-8 and NUL included) plus,
for hand-written entries, the verdict the JSON Schema files are meant to
give; randomized entries (seeded mutations of valid events) carry none.
conformance.py imports this module; run directly, it writes the corpus file
that schemas_validate reads:

    make_corpus.py OUT [--seed N] [--random N]

File format: for each entry, a 4-byte little-endian length, then the bytes.
"""

import argparse
import json
import random
import struct
from typing import List, NamedTuple, Optional

MAX_ID = 2**63 - 1
MAX_TS = 253402300799999
MAX_TARGETS = 100
MAX_TITLE = 1024
MAX_SNAPSHOT = 10000
MAX_DEPTH = 64

TYPES = ["post", "post_delete", "like", "unlike", "repost", "comment", "view",
         "mention", "dm", "follow", "unfollow", "notice", "red_dot", "read"]
KINDS = ["mention", "comment", "like", "repost", "dm", "follower", "notice",
         "red_dot", "feed"]
ID_FIELDS = {"post_id", "user_id", "author_id", "target_id", "from_user_id",
             "to_user_id", "notice_id"}

# The minimal valid body of each type (beyond "type" and "ts"), the
# optional fields it may add, in SPEC section 1's order.
REQUIRED = {
    "post": {"author_id": 1, "post_id": 2},
    "post_delete": {"author_id": 1, "post_id": 2},
    "like": {"post_id": 2, "user_id": 3},
    "unlike": {"post_id": 2, "user_id": 3},
    "repost": {"post_id": 2, "user_id": 3},
    "comment": {"post_id": 2, "user_id": 3},
    "view": {"post_id": 2},
    "mention": {"user_id": 3, "target_ids": [4, 5]},
    "dm": {"from_user_id": 6, "to_user_id": 7},
    "follow": {"user_id": 3, "target_id": 8},
    "unfollow": {"user_id": 3, "target_id": 8},
    "notice": {"notice_id": 9},
    "red_dot": {"channel": "home"},
    "read": {"user_id": 3, "kind": "mention"},
}
OPTIONAL = {
    "like": {"author_id": 1},
    "repost": {"author_id": 1},
    "comment": {"author_id": 1},
    "view": {"user_id": 3},
    "notice": {"title": "maintenance tonight"},
}
# What read needs beyond user_id and kind, per kind.
READ_EXTRA = {"notice": {"notice_id": 9}, "red_dot": {"channel": "home"},
              "feed": {"snapshot": {"8": 3, "10": 0}}}


class Entry(NamedTuple):
    name: str
    data: bytes
    expect: Optional[bool]  # True valid, False invalid, None: not stated


class Raw:
    """JSON text inserted verbatim (numbers Python cannot hold, bad syntax)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self):
        return f"Raw({self.text!r})"


class Obj:
    """An object as ordered (key, value) pairs: may repeat a key."""

    def __init__(self, pairs):
        self.pairs = list(pairs)


def dump(v, ascii_only: bool = True) -> str:
    """Compact JSON text of v; Raw and Obj (and Raw keys) are honoured."""
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, (Obj, dict)):
        pairs = v.pairs if isinstance(v, Obj) else v.items()
        return "{" + ",".join(dump(k, ascii_only) + ":" + dump(x, ascii_only)
                              for k, x in pairs) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(dump(x, ascii_only) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=ascii_only)
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    raise TypeError(v)


def id_pattern() -> str:
    """The regex of defs.json#/$defs/id_string, derived from 2^63-1.

    Strings of up to 18 digits are all in range; 19-digit strings are bounded
    digit by digit: equal to the maximum up to position i, smaller at i.
    """
    m = str(MAX_ID)
    alts = ["[1-9][0-9]{0,%d}" % (len(m) - 2)]
    for i, c in enumerate(m):
        lo, hi = (1 if i == 0 else 0), int(c) - 1
        if hi < lo:
            continue
        digit = str(lo) if lo == hi else "[%d-%d]" % (lo, hi)
        rest = len(m) - i - 1
        alts.append(m[:i] + digit + ("[0-9]{%d}" % rest if rest else ""))
    alts.append(m)
    return "^(?:" + "|".join(alts) + ")$(?!\\n)"


def event(type_: str, ts=1700000000000, **fields) -> dict:
    e = {"type": type_, "ts": ts}
    e.update(REQUIRED[type_])
    e.update(fields)
    return e


def hand_entries() -> List[Entry]:
    out: List[Entry] = []

    def add(name, value, expect, ascii_only=True):
        data = value if isinstance(value, bytes) else dump(value, ascii_only).encode("utf-8")
        out.append(Entry(name, data, expect))

    def without(d, key):
        return {k: v for k, v in d.items() if k != key}

    # Every type: minimal, with every optional field, with an event id.
    for t in TYPES:
        add(f"{t}: minimal", event(t), True)
        add(f"{t}: optional fields", event(t, id="trace-1", **OPTIONAL.get(t, {})), True)
        add(f"{t}: type last", dict(list(without(event(t), "type").items()) + [("type", t)]),
            True)
        strs = {k: str(v) for k, v in event(t).items() if k in ID_FIELDS}
        add(f"{t}: ids as strings", event(t, **strs), True)
        for k in list(event(t)) + list(OPTIONAL.get(t, {})):
            if k in REQUIRED[t] or k in ("type", "ts"):
                add(f"{t}: missing {k}", without(event(t), k), False)

    # Ids: every id field of every type, the boundary values.
    valid_ids = [1, MAX_ID, "1", str(MAX_ID), 1.0, Raw("1e3"), Raw("1E0"), Raw("10e-1"),
                 Raw("0.1e1"), Raw("9223372036854774784.0"), Raw("9.2233720368547748e18"),
                 Raw("1.00000000000000000001")]
    invalid_ids = [0, MAX_ID + 1, -1, 2**64, 2**64 + 1, 10**30, "0", "01", " 1", "1 ", "+1",
                   "-1", "1.5", "1e3", "", "1\n", "\n1", "0x1", "9223372036854775808",
                   "99999999999999999999", "\uff11", "\u0661", Raw("1.5"), Raw("0.5"),
                   Raw("-0"), Raw("-0.0"), Raw("0.0"), Raw("1e19"),
                   Raw("9223372036854775807.0"), Raw("9.223372036854775807e18"),
                   Raw("1e400"), Raw("-1e400"), Raw("1e-400"), True, False, None, [], [1],
                   {}, {"id": 1}]
    first_field_cases = [(v, True) for v in valid_ids] + [(v, False) for v in invalid_ids]
    other_field_cases = [(MAX_ID, True), ("7", True), (MAX_ID + 1, False), ("07", False),
                         (True, False)]
    for t in TYPES:
        base = event(t, **OPTIONAL.get(t, {}))
        fields = [k for k in base if k in ID_FIELDS]
        for i, k in enumerate(fields):
            for v, ok in first_field_cases if i == 0 else other_field_cases:
                add(f"{t}: {k}={dump(v)}", dict(base, **{k: v}), ok)

    # ts.
    for v, ok in [(0, True), (MAX_TS, True), (MAX_TS + 1, False), (-1, False), (1.0, True),
                  (Raw("-0"), True), (Raw("-0.0"), True), (Raw("1.5e3"), True),
                  (Raw("1e-400"), True), (Raw("2.53402300799999e14"), True),
                  (Raw("2.534023007999991e14"), False), (Raw("1.5"), False),
                  (Raw("1e400"), False), (2**63, False), (2**64, False), ("1", False),
                  (Raw("1" + "0" * 400 + "e-400"), True), (Raw("2" + "0" * 310 + ".0e-300"), True),
                  (Raw("1." + "0" * 5000), True), (Raw("0." + "0" * 400 + "1e401"), True),
                  (Raw("1." + "0" * 400 + "1"), True), (Raw("1" + "0" * 400), False),
                  (True, False), (None, False), ([], False), ({}, False)]:
        add(f"ts={dump(v)}", event("like", ts=v), ok)

    # The event id: 1..64 printable ASCII characters (0x20..0x7E).
    for v, ok in [("abc", True), ("z", True), (" ", True), ("~" * 64, True), ("a b", True),
                  ("".join(chr(c) for c in range(0x20, 0x60)), True),
                  ("".join(chr(c) for c in range(0x3f, 0x7f)), True),
                  ("", False), ("x" * 65, False), ("y" * 5000, False), ("a\u0001b", False),
                  ("a\n", False), ("\na", False), ("a\u007f", False), ("\u0080", False),
                  ("\u00e9", False), ("\u00e9\u4e2d\U0001F600", False), ("\u0000", False),
                  ("\t", False), (5, False), (None, False), (True, False), ([], False)]:
        add(f"id={dump(v)}", event("view", id=v), ok)
        add(f"id={dump(v)} (UTF-8)", event("view", id=v), ok, ascii_only=False)

    # type.
    for v in ["poke", "", "POST", "post ", " post", "defs", "post\u0000", "read\n", 5, None,
              True, ["post"], {"post": 1}]:
        add(f"type={dump(v)}", dict(event("post"), type=v), False)
    add("type escaped", Obj([(Raw('"\\u0074ype"'), Raw('"p\\u006fst"')), ("ts", 1),
                             ("author_id", 1), ("post_id", 2)]), True)
    add("key case matters", Obj([("Type", "post"), ("ts", 1), ("author_id", 1),
                                 ("post_id", 2)]), False)

    # mention.target_ids.
    for n, ok in [(1, True), (MAX_TARGETS, True), (MAX_TARGETS + 1, False), (0, False)]:
        add(f"mention: {n} targets", event("mention", target_ids=list(range(1, n + 1))), ok)
    add("mention: duplicate targets", event("mention", target_ids=[4, 4, "4"]), True)
    add("mention: mixed targets", event("mention", target_ids=["5", 6.0, MAX_ID]), True)
    for bad in [[0], [4, "x"], [4, None], [4, [5]], [4, MAX_ID + 1], "4", 4, None, {"4": 4}]:
        add(f"mention: target_ids={dump(bad)}", event("mention", target_ids=bad), False)

    # notice.title counts code points.
    for s, ok in [("", True), ("a" * MAX_TITLE, True), ("a" * (MAX_TITLE + 1), False),
                  ("\u00e9" * MAX_TITLE, True), ("\u00e9" * (MAX_TITLE + 1), False),
                  ("\U0001F600" * MAX_TITLE, True), ("\U0001F600" * (MAX_TITLE + 1), False),
                  ("\u0000\n\t\"\\/", True)]:
        add(f"notice: title of {len(s)}", event("notice", title=s), ok)
        add(f"notice: title of {len(s)} (UTF-8)", event("notice", title=s), ok,
            ascii_only=False)
    for bad in [5, None, True, ["x"]]:
        add(f"notice: title={dump(bad)}", event("notice", title=bad), False)

    # Channels.
    for c, ok in [("a", True), ("a" * 64, True), ("a" * 65, False), ("", False),
                  ("a.b-c_d9", True), ("A", False), ("a b", False), ("a\n", False),
                  ("\na", False), ("\u00e9", False), ("a/b", False), (5, False),
                  (None, False)]:
        add(f"red_dot: channel={dump(c)}", event("red_dot", channel=c), ok)
        add(f"read red_dot: channel={dump(c)}",
            event("read", kind="red_dot", channel=c), ok)

    # read: kinds and their extra fields.
    for k in KINDS:
        add(f"read {k}", event("read", kind=k, **READ_EXTRA.get(k, {})), True)
        if k in READ_EXTRA:
            add(f"read {k}: missing extra", event("read", kind=k), False)
    for k in ["x", "", "Mention", "feed ", 5, None]:
        add(f"read kind={dump(k)}", event("read", kind=k), False)
    add("read: missing kind with notice_id", without(event("read", notice_id=5), "kind"),
        False)
    add("read mention: valid extras", event("read", notice_id=5, channel="c",
                                            snapshot={"1": 1}), True)
    add("read mention: bad notice_id", event("read", notice_id=0), False)
    add("read mention: bad channel", event("read", channel="A"), False)
    add("read mention: bad snapshot", event("read", snapshot={"01": 1}), False)
    snaps = [({}, True), ({"1": 0, "2": 5}, True), ({str(MAX_ID): MAX_ID}, True),
             ({"1": 1.0}, True), ({"1": Raw("-0")}, True), ({"1": Raw("2e3")}, True),
             ({"01": 1}, False), ({"0": 1}, False), ({"-1": 1}, False), ({"": 1}, False),
             ({" 1": 1}, False), ({"a": 1}, False), ({str(MAX_ID + 1): 1}, False),
             ({"1": -1}, False), ({"1": 1.5}, False), ({"1": "5"}, False),
             ({"1": True}, False), ({"1": None}, False), ({"1": MAX_ID + 1}, False),
             ({"1": Raw("1e400")}, False), ([], False), ("x", False), (None, False)]
    for s, ok in snaps:
        add(f"read feed: snapshot={dump(s)}", event("read", kind="feed", snapshot=s), ok)
    add("read feed: 10000 entries", event(
        "read", kind="feed", snapshot={str(i): i for i in range(1, MAX_SNAPSHOT + 1)}), True)
    add("read feed: 10001 entries", event(
        "read", kind="feed", snapshot={str(i): i for i in range(1, MAX_SNAPSHOT + 2)}), False)

    # Unknown fields, and known fields the type does not use, are ignored.
    extras = [5, "x", None, True, [], {}, [1, {"a": [None]}], {"a": {"b": {"c": 1}}},
              Raw("123456789012345678901234567890"), Raw("1" * 5000), Raw("1e400"),
              Raw("-1e400"), Raw("1e-400"), Raw("-0"), "\U0001F600", "\u0000"]
    for v in extras:
        add(f"extra={dump(v)[:40]}", dict(event("post"), extra=v), True)
    for t, k, v in [("dm", "post_id", True), ("post", "target_ids", "x"),
                    ("like", "title", 5), ("notice", "channel", "A"), ("view", "kind", "x"),
                    ("follow", "snapshot", [1]), ("unlike", "author_id", 0),
                    ("post", "user_id", Raw("1e400")), ("mention", "notice_id", "01"),
                    ("red_dot", "user_id", None)]:
        add(f"{t}: unused {k}={dump(v)}", event(t, **{k: v}), True)

    # JSON syntax.
    good = dump(event("like")).encode()
    inner = good[1:-1]
    for name, data, ok in [
        ("whitespace around", b" \t\r\n" + good + b" \n", True),
        ("whitespace inside", good.replace(b",", b" ,\n\t").replace(b":", b" : "), True),
        ("form feed before", b"\x0c" + good, False),
        ("NBSP after", good + "\u00a0".encode(), False),
        ("byte order mark", b"\xef\xbb\xbf" + good, False),
        ("trailing garbage", good + b"x", False),
        ("trailing brace", good + b"}", False),
        ("two objects", good + good, False),
        ("trailing comma", b"{" + inner + b",}", False),
        ("missing comma", good.replace(b",", b" ", 1), False),
        ("missing colon", good.replace(b":", b" ", 1), False),
        ("single quotes", good.replace(b'"', b"'"), False),
        ("unclosed", good[:-1], False),
        ("truncated", good[: len(good) // 2], False),
        ("empty", b"", False), ("whitespace only", b"  \n", False),
        ("array root", b"[" + good + b"]", False), ("number root", b"5", False),
        ("string root", b'"post"', False), ("null root", b"null", False),
        ("true root", b"true", False),
        ("NUL after", good + b"\x00", False), ("NUL before", b"\x00" + good, False),
        ("NUL inside", b"{\x00" + inner + b"}", False),
        ("raw NUL in string", good[:-1] + b',"x":"a\x00b"}', False),
        ("raw tab in string", good[:-1] + b',"x":"a\tb"}', False),
        ("raw newline in key", good[:-1] + b',"x\ny":1}', False),
        ("DEL in string", good[:-1] + b',"x":"a\x7fb"}', True),
        ("invalid UTF-8 in value", good[:-1] + b',"x":"\xff"}', False),
        ("invalid UTF-8 in key", good[:-1] + b',"\xfe":1}', False),
        ("invalid UTF-8 outside strings", good[:-1] + b"\xff}", False),
        ("overlong UTF-8", good[:-1] + b',"x":"\xc0\xaf"}', False),
        ("UTF-8 surrogate", good[:-1] + b',"x":"\xed\xa0\x80"}', False),
        ("truncated UTF-8", good[:-1] + b',"x":"\xe2\x82"}', False),
        ("UTF-8 beyond U+10FFFF", good[:-1] + b',"x":"\xf4\x90\x80\x80"}', False),
        ("valid 4-byte UTF-8", good[:-1] + b',"x":"\xf0\x9f\x98\x80"}', True),
        ("noncharacter", good[:-1] + b',"x":"\xef\xbf\xbe"}', True),
    ]:
        add(name, data, ok)
    for text, ok in [("NaN", False), ("Infinity", False), ("-Infinity", False), ("01", False),
                     ("1.", False), (".5", False), ("+1", False), ("-", False), ("1e", False),
                     ("1e+", False), ("0x10", False), ("1_000", False), ("--1", False),
                     ("1.5e+3", True), ("-0e-0", True), ("nul", False), ("tru", False),
                     ("truex", False), ("nulll", False), ("falsey", False), ("True", False),
                     ('"\\x"', False), ('"\\u00zz"', False), ('"\\u00"', False),
                     ('"\\ud800"', False), ('"\\udc00"', False), ('"\\ud800\\u0041"', False),
                     ('"\\ud800\\ud800"', False), ('"\\ud83d\\ude00"', True),
                     ('"\\u0000"', True), ('"\\/\\b\\f\\n\\r\\t\\"\\\\"', True),
                     ("[1,]", False), ("[1 2]", False), ("[,1]", False), ('{"a"}', False),
                     ('{"a":}', False), ("{1:2}", False), ('{"a":1,}', False),
                     ("[", False), ("]", False), ("{}", True), ("[[]]", True)]:
        add(f"extra={text}", good[:-1] + b',"x":' + text.encode() + b"}", ok)
    add("lone surrogate in id", good[:-1] + b',"id":"\\ud800"}', False)
    add("lone surrogate in key", good[:-1] + b',"\\udfff":1}', False)
    add("lone surrogate in type", b'{"type":"\\ud800","ts":1}', False)

    # Duplicate keys, in any object.
    dups = [
        ("type", Obj([("type", "post"), ("ts", 1), ("author_id", 1), ("post_id", 2),
                      ("type", "post")])),
        ("ts", Obj([("type", "post"), ("ts", 1), ("ts", 1), ("author_id", 1),
                    ("post_id", 2)])),
        ("post_id", Obj([("type", "post"), ("ts", 1), ("author_id", 1), ("post_id", 2),
                         ("post_id", 3)])),
        ("unused field", Obj([("type", "post"), ("ts", 1), ("author_id", 1), ("post_id", 2),
                              ("user_id", 1), ("user_id", 1)])),
        ("unknown", Obj([("type", "post"), ("ts", 1), ("author_id", 1), ("post_id", 2),
                         ("x", 1), ("x", 2)])),
        ("escaped", Obj([("type", "post"), ("ts", 1), ("author_id", 1), ("post_id", 2),
                         (Raw('"\\u0074ype"'), "post")])),
        ("nested", Obj([("type", "post"), ("ts", 1), ("author_id", 1), ("post_id", 2),
                        ("x", Obj([("a", 1), ("b", 2), ("a", 1)]))])),
        ("in array", Obj([("type", "post"), ("ts", 1), ("author_id", 1), ("post_id", 2),
                          ("x", [Obj([("a", 1)]), Obj([("a", 1), ("a", 1)])])])),
        ("in snapshot", Obj([("type", "read"), ("ts", 1), ("user_id", 1), ("kind", "feed"),
                             ("snapshot", Obj([("1", 1), ("2", 2), (Raw('"\\u0031"'), 1)]))])),
        ("in unused snapshot", Obj([("type", "post"), ("ts", 1), ("author_id", 1),
                                    ("post_id", 2), ("snapshot", Obj([("1", 1), ("1", 1)]))])),
    ]
    for name, v in dups:
        add(f"duplicate {name}", v, False)
    add("same key in sibling objects", dict(event("post"), x={"a": 1}, y={"a": 1}), True)
    add("same key at two depths", dict(event("post"), a={"a": {"a": 1}}), True)

    # Nesting: the event object is depth 1.
    for depth, ok in [(MAX_DEPTH, True), (MAX_DEPTH + 1, False), (2000, False)]:
        k = depth - 1
        add(f"array depth {depth}", good[:-1] + b',"x":' + b"[" * k + b"]" * k + b"}", ok)
        add(f"object depth {depth}",
            good[:-1] + b',"x":' + b'{"a":' * (k - 1) + b"{}" + b"}" * (k - 1) + b"}", ok)
    k = MAX_DEPTH
    add("depth 65 inside an unused field",
        dump(event("post")).encode()[:-1] + b',"target_ids":' + b"[" * k + b"]" * k + b"}", False)
    return out


# Values that stress a field's schema; some are right for some fields.
WEIRD = [0, 1, -1, 7, MAX_ID, MAX_ID + 1, 2**64, 1.0, 1.5, -0.0, True, False, None, "",
         "1", "01", " 1", "x", "home", "feed", "notice", "A", [], [1], ["1", 2], {}, {"1": 2},
         Raw("1e3"), Raw("1e400"), Raw("-0"), Raw("9223372036854775807.0"), Raw("2e0"),
         "\u00e9", "\U0001F600"]
SYNTAX_JUNK = [b"\x00", b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b",", b"}", b"{", b"]", b'"',
               b"\\", b"nul", b"1e", b"\xef\xbb\xbf", b"\t", b"\x0c", b"\\u", b"\\ud800"]


def random_id(rng: random.Random):
    n = rng.choice([rng.randint(1, 100), rng.randint(1, 10**6), rng.randint(1, MAX_ID),
                    MAX_ID, 1])
    form = rng.random()
    if form < 0.6:
        return n
    if form < 0.85:
        return str(n)
    if n < 2**53:
        return Raw(rng.choice([f"{n}.0", f"{n}e0", f"{n}0e-1"]))
    return n


def random_string(rng: random.Random, alphabet=None) -> str:
    alphabet = alphabet or ["a", "b", "z", "0", "_", ".", "-", " ", "\"", "\\", "\n", "\u0000",
                            "\u00e9", "\u4e2d", "\U0001F600", "\u2028"]
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def random_value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth > 3 or r < 0.55:
        return rng.choice(WEIRD + [random_string(rng), rng.randint(-10**20, 10**20),
                                   rng.uniform(-1e6, 1e6)])
    if r < 0.8:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return Obj((random_string(rng, ["a", "b", "c"]), random_value(rng, depth + 1))
               for _ in range(rng.randint(0, 4)))


def random_event(rng: random.Random) -> list:
    t = rng.choice(TYPES)
    pairs = [("type", t), ("ts", rng.choice([0, 1, MAX_TS, rng.randint(0, MAX_TS)]))]
    if rng.random() < 0.3:
        pairs.append(("id", random_string(rng)))
    body = dict(REQUIRED[t])
    for k, v in OPTIONAL.get(t, {}).items():
        if rng.random() < 0.5:
            body[k] = v
    if t == "read":
        body["kind"] = rng.choice(KINDS)
        body.update(READ_EXTRA.get(body["kind"], {}))
    for k in list(body):
        if k in ID_FIELDS:
            body[k] = random_id(rng)
        elif k == "target_ids":
            body[k] = [random_id(rng) for _ in range(rng.randint(1, 5))]
        elif k == "snapshot":
            body[k] = {str(rng.randint(1, MAX_ID)): rng.randint(0, 1000)
                       for _ in range(rng.randint(0, 4))}
        elif k == "channel":
            body[k] = random_string(rng, list("abcxyz019_.-"))[:64] or "c"
        elif k == "title":
            body[k] = random_string(rng)
    pairs += list(body.items())
    if rng.random() < 0.3:
        pairs.append((random_string(rng, ["x", "y"]) or "x", random_value(rng)))
    rng.shuffle(pairs)
    return pairs


def mutate_pairs(rng: random.Random, pairs: list) -> list:
    op = rng.randrange(9)
    if op == 0 and pairs:  # drop a field
        del pairs[rng.randrange(len(pairs))]
    elif op == 1 and pairs:  # give a field a stressing value
        i = rng.randrange(len(pairs))
        pairs[i] = (pairs[i][0], rng.choice(WEIRD + [random_value(rng)]))
    elif op == 2 and pairs:  # repeat a field
        k, v = rng.choice(pairs)
        pairs.insert(rng.randrange(len(pairs) + 1), (k, v if rng.random() < 0.5 else 1))
    elif op == 3:  # add a field, known or not
        key = rng.choice(sorted(ID_FIELDS) + ["title", "channel", "kind", "snapshot",
                                              "target_ids", "id", "zzz"])
        if all(k != key for k, _ in pairs):
            pairs.append((key, rng.choice(WEIRD + [random_value(rng)])))
    elif op == 4:  # another type
        pairs = [(k, rng.choice(TYPES + ["poke", ""]) if k == "type" else v)
                 for k, v in pairs]
    elif op == 5:  # another kind
        pairs = [(k, rng.choice(KINDS) if k == "kind" else v) for k, v in pairs]
    elif op == 6 and pairs:  # escape a key
        i = rng.randrange(len(pairs))
        k = pairs[i][0]
        if isinstance(k, str):
            pairs[i] = (Raw('"' + "".join("\\u%04x" % ord(c) for c in k) + '"'), pairs[i][1])
    elif op == 7:  # an id as a float
        for i, (k, v) in enumerate(pairs):
            if k in ID_FIELDS and isinstance(v, int):
                pairs[i] = (k, Raw(rng.choice([f"{v}.0", f"{v}e0", f"{v}.5"])))
                break
    elif op == 8:  # an id or ts as number text that is hard to round
        for i, (k, v) in enumerate(pairs):
            if k in ID_FIELDS or k == "ts":
                pairs[i] = (k, Raw(hard_number(rng)))
                break
    return pairs


def hard_number(rng: random.Random) -> str:
    """Number text near the edges of the id and ts ranges, or long."""
    base = rng.choice([MAX_ID, MAX_ID + 1, MAX_ID - 1, 2**63 - 512, 2**63 - 1024, 2**63 + 1024,
                       MAX_TS, MAX_TS + 1, 2**53, 2**53 + 1, 1, 0])
    digits = str(base)
    form = rng.randrange(5)
    if form == 0:  # many fraction digits, maybe not zero
        return digits + "." + "0" * rng.randint(1, 30) + rng.choice(["", "1", "5", "9"])
    if form == 1:  # shifted through the exponent
        shift = rng.randint(1, 40)
        return digits + "0" * shift + "e-" + str(shift)
    if form == 2:  # mantissa below 1
        return "0." + digits + "e" + str(len(digits))
    if form == 3:  # plain, sometimes negative zero
        return rng.choice([digits, "-0", "-0.0", "-" + digits])
    return f"{base:.{rng.randint(1, 20)}e}"


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    op = rng.randrange(5)
    if op == 0:
        return data[:i]
    if op == 1:
        return data[:i] + rng.choice(SYNTAX_JUNK) + data[i:]
    if op == 2:
        return data[:i] + data[i + 1:]
    if op == 3:
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
    return data + rng.choice([b" ", b"\n", b"x", b"{}", b"\x00"])


def random_entries(seed: int, n: int) -> List[Entry]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        pairs = random_event(rng)
        for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
            pairs = mutate_pairs(rng, pairs)
        data = dump(Obj(pairs), ascii_only=rng.random() < 0.5).encode("utf-8")
        if rng.random() < 0.15:
            data = mutate_bytes(rng, data)
        out.append(Entry(f"random #{i} (seed {seed})", data, None))
    return out


def build(seed: int = 20240601, n_random: int = 3000) -> List[Entry]:
    """The whole corpus: hand-written entries, then n_random seeded ones."""
    return hand_entries() + random_entries(seed, n_random)


def write(path: str, entries: List[Entry]) -> None:
    with open(path, "wb") as f:
        for e in entries:
            f.write(struct.pack("<I", len(e.data)))
            f.write(e.data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--random", type=int, default=3000)
    args = ap.parse_args()
    entries = build(args.seed, args.random)
    write(args.out, entries)
    print(f"{len(entries)} entries written to {args.out}")


if __name__ == "__main__":
    main()
