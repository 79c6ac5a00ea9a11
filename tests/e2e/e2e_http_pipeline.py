#!/usr/bin/env python3
"""End to end: HTTP/1.1 pipelining against a real `tally up` (SPEC section 4:
pipelined requests on one connection are all answered, in order).

Raw sockets, so the test decides how the bytes travel:

1. 1,000 pipelined requests in one send on one connection: GET counts of
   posts and users, GET /healthz and POST /v1/events (each POST carrying a
   different number of events, so its answer says which it was). Every
   answer comes, in order, each the one its request asked for.
2. The same 1,000 requests in many small sends (1 to 40 bytes, cut through
   request lines, headers and bodies), while the answers are read.
3. A client that pipelines without reading: the server stops reading once
   answers wait (TCP pushes back on the client, tally buffers nothing more),
   and when the client reads, every request it got to send is answered, in
   order. tally's RSS stays bounded meanwhile.
4. The events POSTed are all counted.

  python3 e2e_http_pipeline.py --tally build/tally [--work-dir DIR]
"""

import json
import os
import random
import re
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

HOST = "127.0.0.1"
TS0 = 1_700_000_000_000


def request(method, target, body=None):
    head = "%s %s HTTP/1.1\r\nHost: tally\r\n" % (method, target)
    if body is not None:
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return head.encode() + b"\r\n" + (body or b"")


class Mix:
    """A mix of pipelined requests and, for each, what its answer must be."""

    def __init__(self, rng, n, first_view_post):
        self.requests = []  # bytes
        self.expect = []  # (status, check(body) -> bool, description)
        self.views = {}  # post id -> views POSTed
        for i in range(n):
            kind = i % 5
            if kind in (0, 1):
                pid = rng.randint(1, 10**12)
                self.requests.append(request("GET", "/v1/posts/%d/counts" % pid))
                self.expect.append((200, lambda b, pid=pid: json.loads(b)["post_id"] == pid,
                                    "GET counts of post %d" % pid))
            elif kind == 2:
                uid = rng.randint(1, 10**12)
                self.requests.append(request("GET", "/v1/users/%d/counts" % uid))
                self.expect.append((200, lambda b, uid=uid: json.loads(b)["user_id"] == uid,
                                    "GET counts of user %d" % uid))
            elif kind == 3:
                self.requests.append(request("GET", "/healthz"))
                self.expect.append((200, lambda b: json.loads(b) == {"ok": True}, "GET /healthz"))
            else:
                # k views of one post: the answer {"accepted":k} tells the POSTs apart.
                k = 1 + (i // 5) % 7
                pid = first_view_post + i
                self.views[pid] = k
                body = json.dumps([{"type": "view", "ts": TS0 + i, "post_id": pid}] * k).encode()
                self.requests.append(request("POST", "/v1/events", body))
                self.expect.append((202, lambda b, k=k: json.loads(b) == {"accepted": k},
                                    "POST of %d events" % k))


class Reader:
    """Parses answers (Content-Length framed) off a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.closed = False

    def next(self, deadline):
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                head = self.buf[:end].decode("latin-1").split("\r\n")
                m = re.match(r"HTTP/1\.1 (\d{3}) ", head[0])
                if not m:
                    raise tallyctl.TestFailure("not an HTTP answer: %r" % self.buf[:200])
                n = 0
                for line in head[1:]:
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        n = int(v)
                if len(self.buf) >= end + 4 + n:
                    body = self.buf[end + 4:end + 4 + n]
                    self.buf = self.buf[end + 4 + n:]
                    return int(m.group(1)), body
            if self.closed:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                continue
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
            self.buf += chunk


def check_answers(h, what, reader, mix, count, timeout):
    """Reads `count` answers and checks each against its request."""
    deadline = time.monotonic() + timeout
    for i in range(count):
        got = reader.next(deadline)
        want_status, check, desc = mix.expect[i]
        if got is None:
            h.check(False, "%s: %d of %d answers, then %s" % (
                what, i, count, "the connection closed" if reader.closed else "nothing for %d s" % timeout))
            return i
        status, body = got
        try:
            ok = status == want_status and check(body)
        except ValueError:
            ok = False
        if not h.check(ok, "%s: answer %d (to %s) is %d %r" % (what, i, desc, status, body[:200])):
            return i
    return count


def connect(port, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect((HOST, port))
    return s


def sender(sock, chunks, errors):
    try:
        for c in chunks:
            sock.sendall(c)
    except OSError as e:
        errors.append(e)


def one_send(h, port, mix):
    s = connect(port)
    errors = []
    t = threading.Thread(target=sender, args=(s, [b"".join(mix.requests)], errors))
    t0 = time.monotonic()
    t.start()
    n = check_answers(h, "1,000 requests in one send", Reader(s), mix, len(mix.requests), 60)
    t.join(30)
    s.close()
    h.check(not errors, "sending 1,000 pipelined requests: %s" % errors)
    log("one send: %d of %d answers in order (%.2f s)" % (n, len(mix.requests), time.monotonic() - t0))


def small_sends(h, port, mix, rng):
    data = b"".join(mix.requests)
    chunks, i = [], 0
    while i < len(data):
        k = rng.randint(1, 40)
        chunks.append(data[i:i + k])
        i += k
    s = connect(port)
    errors = []
    t = threading.Thread(target=sender, args=(s, chunks, errors))
    t0 = time.monotonic()
    t.start()
    n = check_answers(h, "1,000 requests in %d small sends" % len(chunks), Reader(s), mix, len(mix.requests), 120)
    t.join(30)
    s.close()
    h.check(not errors, "sending in small pieces: %s" % errors)
    log("%d small sends: %d of %d answers in order (%.2f s)" % (len(chunks), n, len(mix.requests),
                                                               time.monotonic() - t0))


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def unread_pipeline(h, port, pid):
    """Pipelines GETs without reading until TCP pushes back for 1 s, then
    reads: every request sent is answered, in order."""
    req = request("GET", "/v1/posts/counts?ids=" + ",".join(str(i) for i in range(1, 201)))
    rss0 = vm_rss_kib(pid)
    s = connect(port, rcvbuf=4096)
    s.setblocking(False)
    sent, pos, blocked_since = 0, 0, None
    total = 64 << 20  # far more than the kernel's buffers take
    deadline = time.monotonic() + 30
    block = req * 64
    reset = None
    while sent < total and time.monotonic() < deadline:
        try:
            n = s.send(block[pos:])
            sent += n
            pos = (pos + n) % len(block)
            blocked_since = None
        except BlockingIOError:
            now = time.monotonic()
            if blocked_since is None:
                blocked_since = now
            elif now - blocked_since >= 1.0:
                break
            select.select([], [s], [], 0.1)
        except OSError as e:
            reset = e
            break
    rss1 = vm_rss_kib(pid)
    if not h.check(reset is None, "a client pipelining without reading: %r after %d bytes" % (reset, sent)):
        s.close()
        return
    whole = sent // len(req)
    log("a client that does not read got %.1f MiB (%d requests) into TCP before it pushed back; "
        "tally RSS %.1f -> %.1f MiB" % (sent / 1048576.0, whole, rss0 / 1024.0, rss1 / 1024.0))
    h.check(blocked_since is not None, "TCP never pushed back on a client that sent %.0f MiB without reading"
            % (sent / 1048576.0))
    h.check(rss1 - rss0 < 64 * 1024, "tally's RSS grew %.1f MiB while a client pipelined %.1f MiB unread" % (
        (rss1 - rss0) / 1024.0, sent / 1048576.0))
    # Finish the cut request (TCP takes it once answers are read), and read
    # everything.
    s.setblocking(True)
    rest = (len(req) - sent % len(req)) % len(req)
    errors = []
    t = threading.Thread(target=sender, args=(s, [req[len(req) - rest:]] if rest else [], errors))
    t.start()
    whole += 1 if rest else 0
    reader = Reader(s)
    want = json.dumps({"posts": [{"post_id": i, "like": 0, "repost": 0, "comment": 0, "view": 0}
                                 for i in range(1, 201)]}, separators=(",", ":")).encode()
    deadline = time.monotonic() + 120
    n = 0
    while n < whole:
        got = reader.next(deadline)
        if got is None or got[0] != 200 or got[1] != want:
            break
        n += 1
    t.join(30)
    s.close()
    h.check(not errors, "finishing the cut request: %s" % errors)
    h.check(n == whole, "a client that pipelined %d requests before reading got %d answers in order" % (whole, n))
    log("then it read %d answers of %d, in order" % (n, whole))


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_http_pipeline", default_seed=1000) as h:
        _, brokers = h.start_broker(partitions=2)
        http_port = tallyctl.free_port()
        up, client = h.start_up(brokers, h.path("state"), http_port, partitions=2)

        # Posts 1..200 stay untouched (section 3 reads them); views go above.
        mix1 = Mix(h.rng, 1000, first_view_post=10_000)
        one_send(h, http_port, mix1)
        h.checkpoint("1,000 pipelined requests in one send")
        mix2 = Mix(h.rng, 1000, first_view_post=20_000)
        small_sends(h, http_port, mix2, h.rng)
        h.checkpoint("1,000 pipelined requests in small sends")
        unread_pipeline(h, http_port, up.pid)
        h.checkpoint("a pipelining client that does not read")

        views = dict(mix1.views)
        views.update(mix2.views)
        tallyctl.wait_lag_zero(client, timeout=60, proc=up)
        wrong = []
        for pid, k in sorted(views.items()):
            got = client.get("/v1/posts/%d/counts" % pid).json()["view"]
            if got != k:
                wrong.append((pid, k, got))
        h.check(not wrong, "views POSTed through pipelines counted wrongly (post, want, got): %s" % wrong[:5])
        h.checkpoint("the %d POSTed views are counted" % sum(views.values()))
        h.finish_checks("e2e_http_pipeline")


if __name__ == "__main__":
    main()
