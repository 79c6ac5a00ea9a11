#!/usr/bin/env python3
"""End to end: hostile HTTP clients against a real `tally up`.

Raw sockets, no HTTP library, so every byte is the test's choice:

1. ~50 malformed requests (bad ids, overflow, encoded NULs, unknown paths,
   wrong methods, bad query strings, bad bodies, a body over 1 MiB, a huge
   announced body, non-HTTP bytes, huge headers and URLs, pipelined garbage
   after good requests, a wrong bearer token): each gets its status and the
   JSON error shape {"error":{"code":..., "message":...}}, or, for bytes
   that are not HTTP (or limits that HTTP cannot answer without reading on),
   the connection is closed without an answer. A good request on another
   connection after each one is answered correctly.
2. Several hundred bad connections at once (idle ones, half-sent requests,
   one-byte-at-a-time drips, an unread answer): good requests on fresh and on
   keep-alive connections are still answered, p99 under a bound; every bad
   connection is closed within --idle-timeout-ms (plus the timer's
   granularity).
3. `tally serve --rate-limit`: a client over its rate gets 429 rate_limited
   with Retry-After and the JSON shape; another client address (127.0.0.2)
   and the probes are unaffected; after Retry-After the client is served
   again.
4. The HTTP tier listens on loopback unless told otherwise.

  python3 e2e_http_hostile.py --tally build/tally [--bad-connections 500] [--work-dir DIR]
"""

import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import event_model  # noqa: E402
import slow_clients  # noqa: E402
import tallyctl  # noqa: E402
from rawhttp import closed_by_peer, connect, is_error_shape, read_responses, request, send_all  # noqa: E402
from tallyctl import log  # noqa: E402

IDLE_TIMEOUT_MS = 2000
WRITE_TIMEOUT_MS = 2000
TOKEN = "s3cret-token"
MIB = 1 << 20


def extra_args(ap):
    ap.add_argument("--bad-connections", type=int, default=500, help="bad connections held open at once")
    ap.add_argument("--p99-ms", type=float, default=100.0, help="bound on good requests' p99 under attack")


# ---------------------------------------------------------------------------
# 1. Malformed requests.

GOOD = request("GET", "/v1/posts/1/counts")


def malformed_cases():
    """(kind, bytes to send, expected): expected is (status, code or None)
    for an answer with the error shape, or "close" for a connection closed
    without an answer."""
    ts = event_model.TS0
    big = b"[" + b" " * (MIB + 16) + b"]"
    chunked_big = b"".join(b"%x\r\n%s\r\n" % (64 * 1024, b" " * (64 * 1024)) for _ in range(17)) + b"0\r\n\r\n"
    auth = {"Authorization": "Bearer " + TOKEN}
    ev = json.dumps({"type": "like", "ts": ts, "post_id": 1, "user_id": 2}).encode()
    ids201 = ",".join(str(i) for i in range(1, 202))
    return [
        ("id not a number", request("GET", "/v1/posts/abc/counts"), (400, "bad_id")),
        ("id 0", request("GET", "/v1/posts/0/counts"), (400, "bad_id")),
        ("id negative", request("GET", "/v1/users/-1/counts"), (400, "bad_id")),
        ("id 2^63 (overflow by one)", request("GET", "/v1/posts/9223372036854775808/counts"), (400, "bad_id")),
        ("id of 40 digits", request("GET", "/v1/posts/%s/counts" % ("9" * 40)), (400, "bad_id")),
        ("id with a leading zero", request("GET", "/v1/posts/07/counts"), (400, "bad_id")),
        ("id with a sign", request("GET", "/v1/posts/+7/counts"), (400, "bad_id")),
        ("id in hex", request("GET", "/v1/posts/0x2a/counts"), (400, "bad_id")),
        ("encoded NUL as the id", request("GET", "/v1/posts/%00/counts"), (400, "bad_id")),
        ("encoded NUL after the id", request("GET", "/v1/posts/7%00/counts"), (400, "bad_id")),
        ("encoded NUL in ids=", request("GET", "/v1/posts/counts?ids=1%002"), (400, "bad_id")),
        ("bad user id in a like edge", request("GET", "/v1/posts/1/likes/x"), (400, "bad_id")),
        ("ids= empty", request("GET", "/v1/posts/counts?ids="), (400, "bad_request")),
        ("ids missing", request("GET", "/v1/posts/counts"), (400, "bad_request")),
        ("ids given twice", request("GET", "/v1/posts/counts?ids=1&ids=2"), (400, "bad_request")),
        ("ids with an empty element", request("GET", "/v1/posts/counts?ids=1,,2"), (400, "bad_id")),
        ("201 ids", request("GET", "/v1/posts/counts?ids=" + ids201), (400, "bad_request")),
        ("malformed percent escape", request("GET", "/v1/posts/counts?ids=%zz"), (400, "bad_request")),
        ("unknown path", request("GET", "/no/such/path"), (404, "not_found")),
        ("path with a trailing slash", request("GET", "/v1/info/"), (404, "not_found")),
        ("path with an extra segment", request("GET", "/v1/posts/1/counts/more"), (404, "not_found")),
        ("percent-encoded path", request("GET", "/v1/p%6fsts/1/counts"), (404, "not_found")),
        ("dot segments", request("GET", "/v1/posts/../users/1/counts"), (404, "not_found")),
        ("absolute-form target", request("GET", "http://evil.example/v1/posts/1/counts"), (404, "not_found")),
        ("DELETE on a read", request("DELETE", "/v1/posts/1/counts"), (405, "method_not_allowed")),
        ("lower-case method", request("get", "/v1/posts/1/counts"), "close"),
        ("PUT on /v1/events", request("PUT", "/v1/events", b"[]"), (405, "method_not_allowed")),
        ("GET on /v1/events", request("GET", "/v1/events"), (405, "method_not_allowed")),
        ("POST on a read", request("POST", "/v1/posts/1/counts", b"{}"), (405, "method_not_allowed")),
        ("HEAD", request("HEAD", "/v1/posts/1/counts"), (405, "method_not_allowed")),
        ("unknown kind in a reset", request("POST", "/v1/users/1/unread/bogus/reset", b"", auth), (400, "bad_kind")),
        ("red_dot reset without channel", request("POST", "/v1/users/1/unread/red_dot/reset", b"", auth),
         (400, "bad_request")),
        ("red_dot reset with a bad channel", request("POST", "/v1/users/1/unread/red_dot/reset?channel=A%2F..",
                                                     b"", auth), (400, "bad_request")),
        ("write without the bearer token", request("POST", "/v1/events", ev), (401, "unauthorized")),
        ("write with a wrong token", request("POST", "/v1/events", ev, {"Authorization": "Bearer nope"}),
         (401, "unauthorized")),
        ("body not JSON", request("POST", "/v1/events", b"{not json", auth), (400, "invalid_event")),
        ("body invalid UTF-8", request("POST", "/v1/events", b'{"type":"\xff"}', auth), (400, "invalid_event")),
        ("body with a NUL byte", request("POST", "/v1/events", ev[:-1] + b',"id":"\x00"}', auth),
         (400, "invalid_event")),
        ("body of 1001 events", request("POST", "/v1/events", b"[" + b",".join([ev] * 1001) + b"]", auth),
         (400, None)),
        ("body nested 100,000 deep", request("POST", "/v1/events", b"[" * 100000 + b"]" * 100000, auth),
         (400, None)),
        ("body over 1 MiB", request("POST", "/v1/events", big, auth), (413, "payload_too_large")),
        ("chunked body over 1 MiB", request("POST", "/v1/events", chunked_big,
                                            dict(auth, **{"Transfer-Encoding": "chunked"})),
         (413, "payload_too_large")),
        ("Content-Length of 100 MB (not read)", request("POST", "/v1/events", None,
                                                        dict(auth, **{"Content-Length": "100000000"})), "close"),
        ("Content-Length not a number", request("POST", "/v1/events", None, {"Content-Length": "abc"}), "close"),
        ("Content-Length and chunked at once", request("POST", "/v1/events", b"0\r\n\r\n",
                                                       {"Content-Length": "5", "Transfer-Encoding": "chunked"}),
         "close"),
        ("header value of 64 KiB", request("GET", "/v1/posts/1/counts", None, {"X-Big": "a" * 65536}), "close"),
        ("header block of 1 MiB", request("GET", "/v1/posts/1/counts", None,
                                          {"X-H%d" % i: "b" * 8000 for i in range(130)}), "close"),
        ("101 header fields", request("GET", "/v1/posts/1/counts", None,
                                      {"X-%d" % i: "1" for i in range(101)}), "close"),
        ("URL of 100 KiB", request("GET", "/v1/posts/counts?ids=" + "1," * 50000 + "1"), "close"),
        ("Transfer-Encoding: gzip, chunked (gzip not implemented)",
         request("POST", "/v1/events", b"%x\r\n%s\r\n0\r\n\r\n" % (len(ev), ev),
                 dict(auth, **{"Transfer-Encoding": "gzip, chunked"})), (501, "not_implemented")),
        ("Transfer-Encoding: chunked, gzip (chunked not last)",
         request("POST", "/v1/events", b"0\r\n\r\n", dict(auth, **{"Transfer-Encoding": "chunked, gzip"})),
         (400, "bad_request")),
        ("obs-folded header line (space)", b"GET /v1/posts/1/counts HTTP/1.1\r\nHost: x\r\nX-A: a\r\n folded\r\n\r\n",
         (400, "bad_request")),
        ("obs-folded header line (tab), empty value", b"GET /v1/posts/1/counts HTTP/1.1\r\nX-A:\r\n\tb\r\nHost: x\r\n\r\n",
         (400, "bad_request")),
        ("Expect: 100-continue without the token (body not sent)",
         request("POST", "/v1/events", None, {"Content-Length": str(len(ev)), "Expect": "100-continue"}),
         (401, "unauthorized")),
        ("Expect: 100-continue, body over 1 MiB (not sent)",
         request("POST", "/v1/events", None, dict(auth, **{"Content-Length": str(2 * MIB), "Expect": "100-continue"})),
         (413, "payload_too_large")),
        ("Expect: 100-continue, 100 MB announced (not sent)",
         request("POST", "/v1/events", None, dict(auth, **{"Content-Length": "100000000", "Expect": "100-continue"})),
         (413, "payload_too_large")),
        ("header line without a colon", b"GET /v1/posts/1/counts HTTP/1.1\r\nHost: x\r\nbroken\r\n\r\n", "close"),
        ("raw NUL in the request line", b"GET /v1/posts/\x00/counts HTTP/1.1\r\nHost: x\r\n\r\n", "close"),
        ("unknown method", request("BREW", "/v1/posts/1/counts"), "close"),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "close"),
        # RESTinio 0.6 does not pass the version on: answered as HTTP/1.1.
        ("HTTP/2.0 request line", b"GET /v1/posts/1/counts HTTP/2.0\r\nHost: x\r\n\r\n", "answered"),
        ("HTTP/0.9 request line", b"GET /v1/posts/1/counts\r\n\r\n", "answered"),
        ("TLS ClientHello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(32)) + b"\r\n\r\n",
         "close"),
        ("SSH banner", b"SSH-2.0-OpenSSH_9.2\r\n", "close"),
        ("4 KiB of binary noise", bytes((i * 37 + 11) % 256 for i in range(4096)), "close"),
        ("bare LF line ends with garbage", b"\n\n\n\x01\x02garbage\n\n", "close"),
    ]


def check_malformed(h, port, good_body):
    rows = []
    for kind, data, expected in malformed_cases():
        s = connect(port)
        t0 = time.monotonic()
        send_all(s, data)
        resps, closed, rest = read_responses(s, want=1, timeout=5.0)
        if expected == "answered":
            ok = bool(resps) and resps[0].status == 200 and resps[0].body == good_body
            got = "%d, as HTTP/1.1" % resps[0].status if ok else repr(resps[0] if resps else None)
            h.check(ok, "%s: want the answer as to HTTP/1.1, got %s" % (kind, got))
        elif expected == "close":
            if not resps and not closed:
                closed = closed_by_peer(s, 5.0)
            ok = not resps and closed
            got = "closed" if ok else ("%r" % resps[0] if resps else "still open after 5 s")
            h.check(ok, "%s: want the connection closed without an answer, got %s" % (kind, got))
        else:
            status, code = expected
            r = resps[0] if resps else None
            ok = is_error_shape(r, status, code)
            got = repr(r) if r else ("closed without an answer" if closed else "no answer in 5 s")
            h.check(ok, "%s: want %d %s with the JSON error shape, got %s" % (kind, status, code, got))
            if ok and status == 405:
                h.check(bool(r.headers.get("allow")), "%s: 405 without Allow" % kind)
            if ok and status == 401:
                h.check(r.headers.get("www-authenticate", "").startswith("Bearer"),
                        "%s: 401 without WWW-Authenticate: Bearer" % kind)
            if ok:
                got = "%d %s" % (r.status, r.json()["error"]["code"])
        ms = (time.monotonic() - t0) * 1000
        s.close()
        # A bad request never disturbs other requests.
        g = connect(port)
        g.sendall(GOOD)
        gr, _, _ = read_responses(g, want=1)
        g.close()
        h.check(bool(gr) and gr[0].status == 200 and gr[0].body == good_body,
                "after %s: a good request got %r" % (kind, gr[0] if gr else None))
        rows.append((kind, len(data), got, ms))
    log("malformed requests and answers:")
    for kind, size, got, ms in rows:
        log("  %-40s %9d B  %-28s %6.0f ms" % (kind, size, got, ms))
    return len(rows)


def check_pipelines(h, port, good_body):
    # Good requests, a bad one among them: all answered in order.
    s = connect(port)
    send_all(s, GOOD + request("GET", "/nope") + request("GET", "/v1/posts/x/counts") + GOOD)
    resps, _, _ = read_responses(s, want=4)
    h.check([r.status for r in resps] == [200, 404, 400, 200] and resps[0].body == good_body
            and resps[3].body == good_body,
            "pipelined good/404/400/good: got %s" % resps)
    s.close()
    # Good requests then garbage: the good requests before it are answered,
    # then the connection is closed at the garbage (a connection's requests
    # are read one at a time, each after the answer before it is written).
    s = connect(port)
    send_all(s, GOOD + GOOD + b"\x00\x01\x02 this is not HTTP \r\n\r\n" + GOOD)
    resps, closed, rest = read_responses(s, want=None, timeout=5.0)
    h.check(len(resps) == 2 and all(r.status == 200 and r.body == good_body for r in resps) and closed
            and not rest, "good, good, garbage, good pipelined: want two 200s then close, got %s, closed=%s, "
            "then %r" % (resps, closed, rest[:100]))
    log("pipelined good, good, garbage, good: %d answers (200), then closed" % len(resps))
    s.close()
    # Garbage after a good request that was already answered.
    s = connect(port)
    send_all(s, GOOD)
    resps, _, _ = read_responses(s, want=1)
    send_all(s, b"\x16\x03\x01 not HTTP\r\n\r\n")
    h.check(len(resps) == 1 and resps[0].status == 200 and closed_by_peer(s, 5.0),
            "good request, then garbage on the same connection: want 200 then close, got %s" % resps)
    s.close()
    # A 1 MiB body answered 413 keeps the connection usable.
    s = connect(port)
    send_all(s, request("POST", "/v1/events", b"[" + b" " * (MIB + 1) + b"]", {"Authorization": "Bearer " + TOKEN})
             + GOOD)
    resps, _, _ = read_responses(s, want=2, timeout=10.0)
    h.check([r.status for r in resps] == [413, 200], "413 then a good request on one connection: got %s" % resps)
    s.close()


def check_protocol(h, port, good_body):
    """Upgrade and 100-continue where tally answers: a request that asks to
    upgrade is answered as HTTP/1.1 and keeps its connection, so a request
    pipelined after it is answered too; a request with an expectation that
    its headers do not refuse gets 100 Continue, then its answer."""
    for upgrade in ({"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                     "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
                    {"Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c", "HTTP2-Settings": "AAMAAABkAAQAAP__"}):
        s = connect(port)
        send_all(s, request("GET", "/v1/posts/1/counts", None, upgrade) + GOOD)
        resps, closed, _ = read_responses(s, want=2, timeout=5.0)
        h.check(len(resps) == 2 and all(r.status == 200 and r.body == good_body for r in resps)
                and resps[0].headers.get("connection") != "close",
                "Upgrade: %s, then a good request pipelined: want two 200s on an open connection, got %s "
                "(first Connection: %s), closed=%s" % (upgrade["Upgrade"], resps, resps[0].headers.get("connection")
                                                        if resps else None, closed))
        s.close()
    log("Upgrade (websocket, h2c) with a request pipelined after it: both answered, connection kept")
    # Headers that pass: 100 Continue, then the body, then the answer (400:
    # not an event, so nothing is published), and the connection stays.
    s = connect(port)
    body = b'{"type":"like"}'
    send_all(s, request("POST", "/v1/events", None, {"Authorization": "Bearer " + TOKEN, "Expect": "100-continue",
                                                     "Content-Length": str(len(body))}))
    resps, _, _ = read_responses(s, want=1, timeout=5.0)
    h.check([r.status for r in resps] == [100], "Expect: 100-continue with good headers: want 100 first, got %s" % resps)
    send_all(s, body + GOOD)
    resps, _, _ = read_responses(s, want=2, timeout=5.0)
    h.check([r.status for r in resps] == [400, 200] and is_error_shape(resps[0], 400, "invalid_event"),
            "Expect: 100-continue, then the body and a good request: want 400 invalid_event and 200, got %s" % resps)
    s.close()
    # Refused by its headers: the final answer instead of 100, then the
    # connection closes (the body is never read).
    s = connect(port)
    send_all(s, request("POST", "/v1/events", None, {"Expect": "100-continue", "Content-Length": "10"}))
    resps, closed, _ = read_responses(s, want=None, timeout=5.0)
    h.check([r.status for r in resps] == [401] and closed,
            "Expect: 100-continue without the token: want 401 then close, got %s, closed=%s" % (resps, closed))
    s.close()
    # An unknown transfer coding: 501, and nothing more is read.
    s = connect(port)
    send_all(s, request("POST", "/v1/events", b"0\r\n\r\n", {"Authorization": "Bearer " + TOKEN,
                                                             "Transfer-Encoding": "gzip, chunked"}) + GOOD)
    resps, closed, _ = read_responses(s, want=None, timeout=5.0)
    h.check([r.status for r in resps] == [501] and closed,
            "gzip, chunked then a good request: want 501 then close, got %s, closed=%s" % (resps, closed))
    s.close()
    log("Expect: 100-continue: 100 then the answer when the headers pass; 401 and close when not; "
        "an unknown transfer coding: 501 and close")


# ---------------------------------------------------------------------------
# 3. Rate limit.


def check_rate_limit(h, port, good_body):
    s = connect(port)
    statuses, limited = [], None
    for _ in range(60):
        s.sendall(GOOD)
        rs, _, _ = read_responses(s, want=1)
        statuses.append(rs[0].status if rs else 0)
        if rs and rs[0].status == 429 and limited is None:
            limited = rs[0]
    n_ok, n_429 = statuses.count(200), statuses.count(429)
    log("rate limit 20/s, burst 20: 60 quick requests -> %d x 200, %d x 429" % (n_ok, n_429))
    h.check(20 <= n_ok <= 30 and n_ok + n_429 == 60, "60 quick requests at --rate-limit 20: %d x 200, %d x 429" % (
        n_ok, n_429))
    h.check(is_error_shape(limited, 429, "rate_limited"), "429 answer: %r" % limited)
    retry = int(limited.headers.get("retry-after", "0")) if limited else 0
    h.check(retry >= 1, "429 without a Retry-After of at least 1: %r" % (limited.headers if limited else None))
    # Probes are not limited; another client address has its own bucket.
    s.sendall(request("GET", "/healthz") + request("GET", "/metrics"))
    rs, _, _ = read_responses(s, want=2)
    h.check([r.status for r in rs] == [200, 200], "probes while limited: %s" % rs)
    other = connect(port, source="127.0.0.2")
    other.sendall(GOOD)
    rs, _, _ = read_responses(other, want=1)
    h.check(bool(rs) and rs[0].status == 200 and rs[0].body == good_body,
            "another client address (127.0.0.2) while 127.0.0.1 is limited: %s" % rs)
    other.close()
    # After Retry-After, served again.
    time.sleep(max(retry, 1))
    s.sendall(GOOD)
    rs, _, _ = read_responses(s, want=1)
    h.check(bool(rs) and rs[0].status == 200, "after Retry-After: %s" % rs)
    s.close()


def main():
    args = tallyctl.parse_args(__doc__, extra_args)
    with tallyctl.Harness(args, "e2e_http_hostile", default_seed=777) as h:
        t_start = time.monotonic()
        broker, brokers = h.start_broker(partitions=4)
        http_port = tallyctl.free_port()
        up, client = h.start_up(brokers, h.path("state"), http_port, partitions=4,
                                extra=["--auth-token", TOKEN, "--idle-timeout-ms", IDLE_TIMEOUT_MS,
                                       "--write-timeout-ms", WRITE_TIMEOUT_MS])
        w = event_model.Workload(h.rng, 50, 50)
        recs = w.stream(500)
        tallyctl.publish(h.kcat, brokers, [(r.key, r.value) for r in recs])
        tallyctl.wait_lag_zero(client, timeout=60, proc=up, min_input_end=len(recs))
        good_body = json.dumps(w.model.post_counts(1), separators=(",", ":")).encode()
        r = client.get("/v1/posts/1/counts")
        h.check(r.status == 200 and r.body == good_body, "GET /v1/posts/1/counts: %r, want %s" % (r, good_body))
        client.close()

        t = time.monotonic()
        n = check_malformed(h, http_port, good_body)
        check_pipelines(h, http_port, good_body)
        check_protocol(h, http_port, good_body)
        h.checkpoint("%d malformed requests, pipelines (%.1f s)" % (n, time.monotonic() - t))

        t = time.monotonic()
        stats = slow_clients.check_slow_clients(h, http_port, good_body, args.bad_connections, args.p99_ms, up.pid,
                                                IDLE_TIMEOUT_MS, WRITE_TIMEOUT_MS, TOKEN)
        h.checkpoint("%d bad connections held; good p99 %.1f ms (%.1f s)" % (
            stats["held"], stats["p99"], time.monotonic() - t))

        # Nothing the bad clients did was applied or published.
        rep = tallyctl.watermarks(tallyctl.Http("127.0.0.1:%d" % http_port))
        h.check(rep is not None and tallyctl.end_offsets(rep) == len(recs),
                "the input topic holds %s records, %d were published by the test"
                % (tallyctl.end_offsets(rep) if rep else None, len(recs)))

        t = time.monotonic()
        serve_port = tallyctl.free_port()
        serve = h.spawn("tally serve", [h.tally, "serve", "--state-dir", h.path("state"), "--http",
                                        "127.0.0.1:%d" % serve_port, "--rate-limit", 20, "--rate-burst", 20],
                        "serve.log")
        tallyctl.wait_healthy(tallyctl.Http("127.0.0.1:%d" % serve_port), timeout=60, proc=serve)
        check_rate_limit(h, serve_port, good_body)
        serve.stop()
        h.checkpoint("rate limit (%.1f s)" % (time.monotonic() - t))

        # Loopback unless told otherwise.
        for cmd in ("up", "serve"):
            out = subprocess.run([h.tally, cmd, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout
            h.check(re.search(rb"--http .*\(default 127\.0\.0\.1:8080\)", out) is not None,
                    "tally %s --help does not say the default listen address is 127.0.0.1:8080" % cmd)

        h.check(up.alive(), "tally up exited during the attack (status %s)" % up.returncode())
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit status %s%s" % (rc, "" if clean else " (SIGKILL)"))
        log("e2e_http_hostile took %.1f s" % (time.monotonic() - t_start))
        h.finish_checks("e2e_http_hostile")


if __name__ == "__main__":
    main()
