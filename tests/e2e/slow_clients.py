"""Hundreds of bad connections held against a tally HTTP server (idle ones,
half-sent requests, one-byte-at-a-time drips, answers left unread) while
good requests are timed on fresh and keep-alive connections; then every bad
connection must be closed by the server within its timeouts. Part of
e2e_http_hostile.py (section 2), kept apart for size.
"""

import os
import selectors
import time

from rawhttp import connect, read_responses, request
from tallyctl import log

GOOD = request("GET", "/v1/posts/1/counts")


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def open_sockets(pid):
    """How many sockets process `pid` holds (its connections, listeners, Kafka)."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:")
        except OSError:
            pass
    return n


def check_slow_clients(h, port, good_body, n_bad, p99_bound_ms, server_pid, idle_timeout_ms, write_timeout_ms,
                       token):
    base_sockets = open_sockets(server_pid)
    kinds = ["idle", "half-sent headers", "drip", "half-sent body", "unread answers"]
    bad = []  # (kind, socket)
    opened = {}  # socket -> when it was connected
    for i in range(n_bad):
        kind = kinds[i % len(kinds)]
        s = connect(port, rcvbuf=4096 if kind == "unread answers" else None)
        opened[s] = time.monotonic()
        s.setblocking(False)
        if kind == "drip":
            s.send(b"GET /v1/posts/1/counts HTTP/1.1\r\nHost: tally\r\nX-Drip: ")
        elif kind == "half-sent headers":
            s.send(b"GET /v1/posts/1/counts HTTP/1.1\r\nHost: tally\r\nX-Slow: ")
        elif kind == "half-sent body":
            s.send(request("POST", "/v1/events", None, {"Content-Length": "1000",
                                                        "Authorization": "Bearer " + token}) + b"[{")
        elif kind == "unread answers":
            # Pipelined requests for 180 KB of answers the client does not
            # read: the server's writes stall.
            s.setblocking(True)
            s.sendall(request("GET", "/v1/posts/counts?ids=" + ",".join(["1"] * 200)) * 16)
            s.setblocking(False)
        bad.append((kind, s))
    t_open = time.monotonic()
    log("holding %d bad connections (%s)" % (n_bad, ", ".join("%d %s" % (sum(1 for k, _ in bad if k == x), x)
                                                             for x in kinds)))

    held = wait_for(lambda: open_sockets(server_pid) >= base_sockets + n_bad - 2, 5.0)
    log("server sockets: %d before, %d while attacked" % (base_sockets, open_sockets(server_pid)))
    h.check(held, "the server holds %d sockets, want at least %d + %d bad connections" % (
        open_sockets(server_pid), base_sockets, n_bad))

    # Good requests meanwhile, while the drips send one byte every 100 ms.
    drips = [s for k, s in bad if k == "drip"]
    lat_fresh, lat_keep, failures = [], [], []
    keep = connect(port)
    next_drip = 0.0
    i = 0
    def drip():
        for s in drips:
            try:
                s.send(b"b")
            except OSError:
                pass

    while time.monotonic() - t_open < idle_timeout_ms / 1000.0 * 0.8 or i < 300:
        if time.monotonic() >= next_drip:
            drip()
            next_drip = time.monotonic() + 0.1
        t0 = time.monotonic()
        if i % 2 == 0:
            g = connect(port)
            g.sendall(GOOD)
            rs, _, _ = read_responses(g, want=1, timeout=5.0)
            g.close()
            lat_fresh.append((time.monotonic() - t0) * 1000)
        else:
            keep.sendall(GOOD)
            rs, _, _ = read_responses(keep, want=1, timeout=5.0)
            lat_keep.append((time.monotonic() - t0) * 1000)
        if not rs or rs[0].status != 200 or rs[0].body != good_body:
            failures.append(rs[0] if rs else None)
        i += 1
    keep.close()
    all_lat = lat_fresh + lat_keep
    p50, p99, mx = percentile(all_lat, 50), percentile(all_lat, 99), max(all_lat)
    log("under attack: %d good requests (%d on fresh connections: p50 %.2f ms p99 %.2f ms; %d keep-alive: "
        "p50 %.2f ms p99 %.2f ms); overall p50 %.2f ms p99 %.2f ms max %.1f ms" % (
            len(all_lat), len(lat_fresh), percentile(lat_fresh, 50), percentile(lat_fresh, 99), len(lat_keep),
            percentile(lat_keep, 50), percentile(lat_keep, 99), p50, p99, mx))
    h.check(not failures, "%d good requests failed under attack, e.g. %r" % (len(failures), failures[:3]))
    h.check(p99 < p99_bound_ms, "good requests under attack: p99 %.1f ms, want < %.0f ms" % (p99, p99_bound_ms))

    # Every bad connection is closed by the server within the idle timeout
    # (the write timeout for those that do not read their answers; RESTinio
    # checks its timers once a second).
    sel = selectors.DefaultSelector()
    for kind, s in bad:
        sel.register(s, selectors.EVENT_READ, kind)
    open_left = {s: kind for kind, s in bad}
    closed_at = []
    deadline = t_open + max(idle_timeout_ms, write_timeout_ms) / 1000.0 + 4.0
    closed_kind = {}
    while open_left and time.monotonic() < deadline:
        drip()  # the drips go on: activity does not extend the limit
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            try:
                data = s.recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                closed_at.append(time.monotonic() - opened[s])
                k = key.data
                lo, hi = closed_kind.get(k, (1e9, 0))
                closed_kind[k] = (min(lo, closed_at[-1]), max(hi, closed_at[-1]))
                sel.unregister(s)
                open_left.pop(s, None)
    still = {}
    for s, kind in open_left.items():
        still[kind] = still.get(kind, 0) + 1
    log("bad connections closed by the server: %d of %d, after %.2f..%.2f s (idle timeout %.1f s)" % (
        len(closed_at), n_bad, min(closed_at or [0]), max(closed_at or [0]), idle_timeout_ms / 1000.0))
    for k, (lo, hi) in sorted(closed_kind.items()):
        log("  %-18s closed after %.2f..%.2f s" % (k, lo, hi))
    h.check(not open_left, "%d bad connections still open %.1f s after they were opened: %s" % (
        len(open_left), deadline - t_open, still))
    h.check(not closed_at or min(closed_at) >= idle_timeout_ms / 1000.0 * 0.9,
            "a bad connection was closed after %.2f s, before the idle timeout" % min(closed_at or [0]))
    after = open_sockets(server_pid)
    log("server sockets after the timeouts: %d (before the attack: %d)" % (after, base_sockets))
    h.check(after <= base_sockets + 2, "the server still holds %d sockets after the timeouts, %d before the attack"
            % (after, base_sockets))
    for _, s in bad:
        s.close()
    sel.close()
    return {"held": n_bad, "p50": p50, "p99": p99, "max": mx, "good": len(all_lat),
            "closed_max_s": max(closed_at or [0])}
