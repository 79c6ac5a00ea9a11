#!/usr/bin/env python3
"""End to end: hostile input records through real processes.

A `tally broker` and a `tally up`; ~1,500 valid events from the seeded
workload with, between them, one record of each of ~50 malformed kinds (not
JSON, truncated, NUL bytes, wrong types, out-of-range ids, unknown types,
missing fields, oversized arrays, bad channels, invalid UTF-8, a 1 MiB+
value, deep nesting, duplicate keys, BOM, lone surrogates, ...) and a few
unusual records that SPEC says are valid (unknown extra fields, one of 1 MiB,
integral floats as ids, the largest id). Records are published byte for byte
(kcat with a multi-byte delimiter, so NUL, newlines and invalid UTF-8 pass
untouched), each partition in order.

Checks: every malformed record is in tally.dlq exactly once, with its
original bytes, its source topic/partition/offset and a reason header that
names what is wrong; nothing else is there; every valid neighbour is applied
and every count equals the reference model (so no malformed record was
partly applied); `tally_router_invalid_total` counts every malformed record
while up.log names only the first 10 and says it leaves the next ones out;
tally up is still running and stops cleanly.

  python3 e2e_badinput.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

PARTITIONS = 4
N_VALID = 1500
N_POSTS = 120
N_USERS = 90
TS = event_model.TS0 + 5
MIB = 1 << 20
FRESH = checks.FRESH  # user ids above the workload's

# Record and key delimiters for kcat -P: byte sequences no test record holds.
_REC_DELIM = b"\x1e\x1d\x1e\x1d"
_KEY_DELIM = b"\x1f\x1d\x1f\x1d"


def _esc(b):
    return "".join("\\x%02x" % c for c in b)


def publish_raw(kcat, brokers, partition, records, timeout=120):
    """Publishes (key bytes, value bytes) pairs to one partition of the input
    topic, in order, byte for byte (values may hold NUL, newlines, invalid
    UTF-8, and be over 1 MB)."""
    data = b"".join(k + _KEY_DELIM + v + _REC_DELIM for k, v in records)
    for k, v in records:
        if _REC_DELIM in v or _KEY_DELIM in v or _KEY_DELIM in k or _REC_DELIM in k:
            raise ValueError("record holds the delimiter")
    argv = [kcat, "-P", "-b", brokers, "-t", tallyctl.EVENTS_TOPIC, "-p", str(partition),
            "-D", _esc(_REC_DELIM), "-K", _esc(_KEY_DELIM), "-q",
            "-X", "enable.idempotence=true", "-X", "message.max.bytes=8000000"]
    res = subprocess.run(argv, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=timeout, preexec_fn=tallyctl._child_setup)
    if res.returncode != 0:
        raise tallyctl.TestFailure("kcat -P exited %d: %s" % (res.returncode, res.stderr.decode(errors="replace")))


def consume_raw(kcat, brokers, topic, timeout=60):
    """Every record of `topic`: list of dicts with partition, offset, headers
    (dict) and value (bytes, None for a null value), read byte-exactly."""
    fmt = "%p\t%o\t%S\t%h\n%s\n"
    argv = [kcat, "-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-q", "-f", fmt,
            "-X", "fetch.message.max.bytes=16000000"]
    res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                         preexec_fn=tallyctl._child_setup)
    if res.returncode != 0:
        raise tallyctl.TestFailure("kcat -C -t %s exited %d: %s" % (topic, res.returncode, res.stderr[-2000:]))
    out, i, recs = res.stdout, 0, []
    while i < len(out):
        nl = out.index(b"\n", i)
        part, off, size, hdrs = out[i:nl].split(b"\t", 3)
        size = int(size)
        i = nl + 1
        value = None if size < 0 else out[i:i + size]
        i += max(size, 0) + 1
        headers = {}
        for kv in hdrs.decode("utf-8", "replace").split(","):
            if "=" in kv:
                k, v = kv.split("=", 1)
                headers[k] = v
        recs.append({"partition": int(part), "offset": int(off), "headers": headers, "value": value})
    return recs


def like(post, user, **extra):
    d = {"type": "like", "ts": TS, "post_id": post, "user_id": user}
    d.update(extra)
    return d


def dumps(d):
    return json.dumps(d, separators=(",", ":")).encode()


def malformed_cases(p, u):
    """(kind, bytes, regex the reason must match). `p`, `u` are ids the
    workload uses, so a record applied by mistake would change a count."""
    base = '"type":"like","ts":%d,"post_id":%d,"user_id":%d' % (TS, p, u)
    B = base.encode()
    cases = [
        ("not JSON at all", b"this is not json", r"not valid JSON"),
        ("truncated object (no closing brace)", b"{" + B, r"not valid JSON: truncated"),
        ("truncated inside a string", b"{" + B[:-3], r"not valid JSON: unclosed string"),
        ("truncated after a colon", b'{"type":"like","ts":', r"not valid JSON"),
        ("NUL byte inside a string", b"{" + B + b',"id":"a\x00b"}', r"not valid JSON: unescaped control"),
        ("NUL byte after the object", b"{" + B + b"}\x00", r"not valid JSON"),
        ("NUL byte before the object", b"\x00{" + B + b"}", r"not valid JSON"),
        ("escaped NUL in type", ('{"type":"like\\u0000","ts":%d,"post_id":%d,"user_id":%d}' % (TS, p, u)).encode(),
         r"unknown type"),
        ("empty record", b"", r"empty"),
        ("whitespace only", b"  \t ", r"not valid JSON: empty"),
        ("JSON null", b"null", r"not a JSON object"),
        ("JSON array of an event", b"[{" + B + b"}]", r"not a JSON object"),
        ("JSON number", b"42", r"not a JSON object"),
        ("JSON true", b"true", r"not a JSON object"),
        ("JSON string", b'"like"', r"not a JSON object"),
        ("two objects in one record", b"{" + B + b"}{" + B + b"}", r"trailing content"),
        ("byte order mark", b"\xef\xbb\xbf{" + B + b"}", r"byte order mark"),
        ("invalid UTF-8 (0xff)", b"{" + B + b',"id":"\xff\xfe"}', r"invalid UTF-8"),
        ("overlong UTF-8 (0xc0 0xaf)", b"{" + B + b',"id":"\xc0\xaf"}', r"invalid UTF-8"),
        ("UTF-8 encoded surrogate (0xed 0xa0 0x80)", b"{" + B + b',"x":"\xed\xa0\x80"}', r"invalid UTF-8"),
        ("lone high surrogate escape", b"{" + B + b',"id":"\\ud800"}', r"lone surrogate"),
        ("lone low surrogate escape", b"{" + B + b',"id":"\\udc00x"}', r"lone surrogate"),
        ("raw control character in a string", b"{" + B + b',"id":"a\x01b"}', r"unescaped control"),
        ("trailing comma", b"{" + B + b",}", r"not valid JSON"),
        ("single quotes", b"{'type':'like'}", r"not valid JSON"),
        ("NaN as ts", ('{"type":"like","ts":NaN,"post_id":%d,"user_id":%d}' % (p, u)).encode(), r"not valid JSON"),
        ("nesting 100 deep", b"{" + B + b',"x":' + b"[" * 100 + b"]" * 100 + b"}", r"nesting deeper than 64"),
        ("nesting 100,000 deep", b"{" + B + b',"x":' + b"[" * 100000 + b"]" * 100000 + b"}",
         r"nesting deeper than 64"),
        ("duplicate key", b"{" + B + (',"user_id":%d}' % (u + 1)).encode(), r'duplicate field "user_id"'),
        ("duplicate key in an ignored field", b"{" + B + b',"x":{"a":1,"a":2}}', r'duplicate field "a"'),
        ("unknown type", dumps({"type": "poke", "ts": TS, "post_id": p, "user_id": u}), r'unknown type "poke"'),
        ("type in upper case", dumps({"type": "LIKE", "ts": TS, "post_id": p, "user_id": u}), r'unknown type "LIKE"'),
        ("type is a number", dumps({"type": 3, "ts": TS, "post_id": p, "user_id": u}), r"field type: expected a string"),
        ("missing type", dumps({"ts": TS, "post_id": p, "user_id": u}), r"missing field type"),
        ("missing ts", dumps({"type": "comment", "post_id": p, "user_id": u}), r"missing field ts"),
        ("missing user_id", dumps({"type": "like", "ts": TS, "post_id": p}), r"missing field user_id"),
        ("missing target_ids", dumps({"type": "mention", "ts": TS, "user_id": u}), r"missing field target_ids"),
        ("post_id 0", dumps(like(0, u)), r"field post_id: id out of range"),
        ("post_id -1", dumps(like(-1, u)), r"field post_id: id out of range"),
        ("post_id 2^63", dumps(like(2**63, u)), r"field post_id: id out of range"),
        ("post_id 2^64", dumps(like(2**64, u)), r"field post_id: id out of range"),
        ("post_id \"2^63\" as a string", dumps(like(str(2**63), u)), r"field post_id: id out of range"),
        ("post_id 1e300", ('{"type":"like","ts":%d,"post_id":1e300,"user_id":%d}' % (TS, u)).encode(),
         r"field post_id: id out of range"),
        ("post_id 1.5 (float)", ('{"type":"like","ts":%d,"post_id":1.5,"user_id":%d}' % (TS, u)).encode(),
         r"field post_id: expected an id"),
        ("post_id \"-5\"", dumps(like("-5", u)), r"field post_id: not a canonical decimal id"),
        ("post_id \"05\" (leading zero)", dumps(like("05", u)), r"field post_id: not a canonical decimal id"),
        ("post_id \" 5\" (space)", dumps(like(" 5", u)), r"field post_id: not a canonical decimal id"),
        ("post_id \"12a\"", dumps(like("12a", u)), r"field post_id: not a canonical decimal id"),
        ("post_id null", dumps(like(None, u)), r"field post_id: expected an id"),
        ("post_id true", dumps(like(True, u)), r"field post_id: expected an id"),
        ("post_id an object", dumps(like({}, u)), r"field post_id: expected an id"),
        ("post_id an array", dumps(like([p], u)), r"field post_id: expected an id"),
        ("author_id 0 (optional but present)", dumps(like(p, u, author_id=0)), r"field author_id: id out of range"),
        ("ts as a string", dumps({"type": "like", "ts": str(TS), "post_id": p, "user_id": u}),
         r"field ts: expected an integer"),
        ("ts a float", ('{"type":"like","ts":%d.5,"post_id":%d,"user_id":%d}' % (TS, p, u)).encode(),
         r"field ts: expected an integer"),
        ("ts negative", dumps({"type": "like", "ts": -1, "post_id": p, "user_id": u}), r"field ts: out of range"),
        ("ts past year 9999", dumps({"type": "like", "ts": 10**17, "post_id": p, "user_id": u}), r"field ts: out of range"),
        ("event id a number", dumps(like(p, u, id=5)), r"field id: expected a string"),
        ("event id empty", dumps(like(p, u, id="")), r"field id: .*1\.\.64 printable ASCII"),
        ("event id of 65 characters", dumps(like(p, u, id="i" * 65)), r"field id: .*1\.\.64 printable ASCII"),
        ("event id an escaped surrogate pair (not ASCII)", b"{" + B + b',"id":"\\ud83d\\ude00"}',
         r"field id: .*1\.\.64 printable ASCII"),
        ("target_ids empty", dumps({"type": "mention", "ts": TS, "user_id": u, "target_ids": []}),
         r"field target_ids: expected 1..100"),
        ("target_ids 101 ids", dumps({"type": "mention", "ts": TS, "user_id": u, "target_ids": list(range(1, 102))}),
         r"field target_ids: expected 1..100"),
        ("target_ids 100,000 ids", dumps({"type": "mention", "ts": TS, "user_id": u,
                                          "target_ids": list(range(1, 100001))}),
         r"field target_ids: expected 1..100"),
        ("target_ids not an array", dumps({"type": "mention", "ts": TS, "user_id": u, "target_ids": u}),
         r"field target_ids: expected an array"),
        ("target_ids holding 0", dumps({"type": "mention", "ts": TS, "user_id": u, "target_ids": [u, 0]}),
         r"field target_ids\[1\]: id out of range"),
        ("channel in upper case", dumps({"type": "red_dot", "ts": TS, "channel": "Discover"}), r"field channel"),
        ("channel empty", dumps({"type": "red_dot", "ts": TS, "channel": ""}), r"field channel"),
        ("channel 65 characters", dumps({"type": "red_dot", "ts": TS, "channel": "a" * 65}), r"field channel"),
        ("channel with a slash", dumps({"type": "red_dot", "ts": TS, "channel": "../etc"}), r"field channel"),
        ("channel with an escaped NUL", dumps({"type": "red_dot", "ts": TS, "channel": "a\u0000"}), r"field channel"),
        ("channel a number", dumps({"type": "red_dot", "ts": TS, "channel": 7}), r"field channel"),
        ("read of an unknown kind", dumps({"type": "read", "ts": TS, "user_id": u, "kind": "everything"}),
         r'field kind: unknown kind "everything"'),
        ("read notice without notice_id", dumps({"type": "read", "ts": TS, "user_id": u, "kind": "notice"}),
         r"missing field notice_id"),
        ("read feed with a bad snapshot key", dumps({"type": "read", "ts": TS, "user_id": u, "kind": "feed",
                                                     "snapshot": {"abc": 1}}), r"field snapshot"),
        ("read feed with a negative count", dumps({"type": "read", "ts": TS, "user_id": u, "kind": "feed",
                                                   "snapshot": {str(u): -1}}), r"field snapshot"),
        ("notice title of 1,025 characters", dumps({"type": "notice", "ts": TS, "notice_id": 9,
                                                    "title": "t" * 1025}), r"field title: longer than 1024"),
        # Over 1 MB: more than librdkafka's default message.max.bytes, so
        # the dead letter cannot carry all of it (see README).
        ("notice title of 1 MiB (record over 1 MB)", dumps({"type": "notice", "ts": TS, "notice_id": 9,
                                                            "title": "t" * MIB}), r"field title: longer than 1024"),
        ("1 MiB of invalid UTF-8 bytes", b"\xff" * MIB, r"not valid JSON"),
    ]
    return cases


def valid_oddities(p, u, model):
    """Records SPEC calls valid though they look odd: (kind, bytes); each is
    applied to `model`. Their likes come from users the workload never
    names, so where they land among the valid events does not matter."""
    u = FRESH
    out = [
        ("unknown extra fields", like(p, u + 1, zzz=[1, {"b": None}], extra="x"),
         dumps(like(p, u + 1, zzz=[1, {"b": None}], extra="x"))),
        ("1 MiB unknown field (record over 1 MB)", like(p, u + 2), dumps(like(p, u + 2, pad="p" * MIB))),
        ("ids as decimal strings", like(p, u + 3), dumps(like(str(p), str(u + 3)))),
        ("id as an integral float 5.0", {"type": "view", "ts": TS, "post_id": p},
         ('{"type":"view","ts":%d,"post_id":%d.0}' % (TS, p)).encode()),
        ("id in exponent form", {"type": "view", "ts": TS, "post_id": 1000},
         ('{"type":"view","ts":%d,"post_id":1e3}' % TS).encode()),
        ("largest id 2^63-1", {"type": "view", "ts": TS, "post_id": 2**63 - 1, "user_id": u},
         dumps({"type": "view", "ts": TS, "post_id": 2**63 - 1, "user_id": u})),
        ("event id of 64 printable ASCII characters", like(p, u + 4),
         dumps(like(p, u + 4, id=" !~" + "x" * 61))),
        ("whitespace around the object", like(p, u + 5), b" \n\t" + dumps(like(p, u + 5)) + b"\r\n "),
        ("ts 0", {"type": "view", "ts": 0, "post_id": p}, dumps({"type": "view", "ts": 0, "post_id": p})),
    ]
    for _, ev, _ in out:
        model.apply(ev)
    return [(k, b) for k, _, b in out]


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_badinput", default_seed=4242) as h:
        t_start = time.monotonic()
        # Records over 1 MB are valid input (SPEC section 1): the topics take
        # them once the broker allows them, as Kafka's message.max.bytes does.
        broker, brokers = h.start_broker(partitions=PARTITIONS, extra=["--message-max-bytes", 8000000])
        up, client = h.start_up(brokers, h.path("state"), tallyctl.free_port(), partitions=PARTITIONS)

        w = event_model.Workload(h.rng, N_POSTS, N_USERS)
        valid = w.stream(N_VALID)
        p, u = w.post_ids[3], w.user_ids[5]
        bad = malformed_cases(p, u)
        odd = valid_oddities(p, u, w.model)
        kinds = [k for k, _, _ in bad]
        h.check(len(set(kinds)) == len(kinds), "duplicate kind names")

        # Spread valid events over the partitions by their key (so each
        # key's events keep their order), and put one odd record between
        # valid neighbours at a random place of a random partition.
        parts = [[] for _ in range(PARTITIONS)]
        for r in valid:
            parts[int(r.key) % PARTITIONS].append((r.key.encode(), r.value.encode(), None))
        for i, (kind, value, reason) in enumerate(bad):
            q = parts[h.rng.randrange(PARTITIONS)]
            q.insert(h.rng.randrange(1, len(q)), (b"bad-%d" % i, value, (kind, reason)))
        for i, (kind, value) in enumerate(odd):
            q = parts[h.rng.randrange(PARTITIONS)]
            q.insert(h.rng.randrange(1, len(q)), (b"odd-%d" % i, value, None))
        expected_dlq = {}  # (partition, offset) -> (kind, value, reason regex)
        for part, recs in enumerate(parts):
            for off, (_, value, bad_kind) in enumerate(recs):
                if bad_kind:
                    expected_dlq[(part, off)] = (bad_kind[0], value, bad_kind[1])
        total = sum(len(q) for q in parts)
        for part, recs in enumerate(parts):
            publish_raw(h.kcat, brokers, part, [(k, v) for k, v, _ in recs])
        log("published %d records: %d valid events, %d valid oddities, %d malformed of %d kinds" % (
            total, len(valid), len(odd), len(bad), len(set(kinds))))

        report = tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=total)
        h.check(tallyctl.end_offsets(report) == total, "%s holds %d records, %d were published" % (
            tallyctl.EVENTS_TOPIC, tallyctl.end_offsets(report), total))

        # 1. Dead letters: each malformed record exactly once, byte for byte,
        #    with its coordinates and a reason that says what is wrong.
        got = []

        def all_dead():
            got[:] = consume_raw(h.kcat, brokers, tallyctl.DLQ_TOPIC)
            return len(got) >= len(expected_dlq)

        try:
            tallyctl.wait_until("%d records in tally.dlq" % len(expected_dlq), all_dead, 30, interval=0.5)
        except tallyctl.TestFailure as e:
            h.check(False, "%s (found %d)" % (e, len(got)))
        seen = {}
        for rec in got:
            hd = rec["headers"]
            try:
                key = (int(hd.get("tally.source.partition", "-1")), int(hd.get("tally.source.offset", "-1")))
            except ValueError:
                key = (-1, -1)
            if not h.check(key in expected_dlq and hd.get("tally.source.topic") == tallyctl.EVENTS_TOPIC,
                           "tally.dlq holds a record that was not malformed (or bad coordinates): headers %s, "
                           "value %r" % (hd, (rec["value"] or b"")[:120])):
                continue
            h.check(key not in seen, "tally.dlq holds %s twice" % (key,))
            seen[key] = rec
        rows = []
        for key, (kind, value, reason_re) in sorted(expected_dlq.items(), key=lambda kv: kv[1][0]):
            rec = seen.get(key)
            if not h.check(rec is not None, "malformed record %r (%s/%d@%d) is not in tally.dlq" % (
                    kind, tallyctl.EVENTS_TOPIC, key[0], key[1])):
                rows.append((kind, len(value), "MISSING", ""))
                continue
            reason = rec["headers"].get("tally.reason", "")
            dv = rec["value"] or b""
            truncated = rec["headers"].get("tally.value.truncated")
            if truncated is not None:
                # Too large for a dead letter: a prefix and the full size.
                h.check(truncated == str(len(value)) and value.startswith(dv) and len(dv) < len(value),
                        "%r: truncated dead letter: header says %s, value %d bytes of %d, prefix ok %s" % (
                            kind, truncated, len(dv), len(value), value.startswith(dv)))
            else:
                h.check(dv == value, "%r: dead letter value differs from the record sent (%d vs %d bytes): %r" % (
                    kind, len(dv), len(value), dv[:80]))
            h.check(re.search(reason_re, reason) is not None,
                    "%r: reason %r does not match /%s/" % (kind, reason, reason_re))
            rows.append((kind, len(value), reason, "truncated to %d B" % len(dv) if truncated else "whole"))
        log("bad-input kinds and tally's reasons:")
        for kind, size, reason, how in rows:
            log("  %-44s %8d B  %-9s %s" % (kind, size, how, reason[:90]))
        checks.check_invalid_logged(h, client, len(expected_dlq))
        h.checkpoint("tally.dlq: %d malformed records of %d kinds, counted and logged" % (
            len(expected_dlq), len(set(kinds))))

        # 2. Every valid neighbour applied, nothing else: counts = model.
        checks.check_counts(h, client, w.model, extra_posts=[1000, 2**63 - 1], views=False)
        h.checkpoint("counts equal the model (%d valid events, %d oddities)" % (len(valid), len(odd)))

        h.check(up.alive(), "tally up exited (status %s) after the malformed records" % up.returncode())
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit status %s%s" % (rc, "" if clean else " (SIGKILL)"))
        log("e2e_badinput took %.1f s" % (time.monotonic() - t_start))
        h.finish_checks("e2e_badinput")


if __name__ == "__main__":
    main()
