#!/usr/bin/env python3
"""End to end: what `tally up`'s embedded broker acknowledged is kept (SPEC
section 4, "Acknowledged means kept").

`tally up` without --brokers runs its embedded broker as a process of its
own, its log on disk in the state directory (SPEC section 7). Events are
published over HTTP (`POST /v1/events`) and with kcat (unkeyed, any
partition) while `tally up` is SIGKILLed at random instants, again and
again, every second time together with its broker, and restarted on the
same state directory. Each event is a
`view` of a post id of its own, so its count says how often it was applied:
every event that was acknowledged (202 over HTTP, kcat's exit 0) must read 1;
one whose request got no answer may read 0 or 1, never more.

Then the case that was measured before the broker had a process of its own:
10,000 likes acknowledged over HTTP, SIGKILL right after the last answer,
restart: every like is counted.

Last, clean stops: SIGTERM right after 10,000 more likes were acknowledged
(some not applied yet) stops tally up and its broker; the next tally up
counts every like. Nothing is left running.

  python3 e2e_acked.py --tally build/tally [--kills 10] [--work-dir DIR]
"""

import http.client
import itertools
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

LIKED_POST = 10 ** 12  # the post of the 10,000 likes; views use 1, 2, 3, ...


def extra_args(ap):
    ap.add_argument("--kills", type=int, default=10, help="SIGKILLs of tally up while events flow")


def post_once(hostport, body, timeout=15):
    """One POST /v1/events on a new connection, never retried (a retry could
    publish twice). Returns the status, or None when no answer came."""
    host, _, port = hostport.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("POST", "/v1/events", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


class Publishers:
    """Two publishers of unique views while tally up lives and dies: one over
    HTTP, one with kcat straight to the embedded broker."""

    def __init__(self, h, hostport, bootstrap, ids):
        self.h, self.hostport, self.bootstrap, self.ids = h, hostport, bootstrap, ids
        self.acked, self.unanswered = set(), set()
        self.acked_http = 0
        self.refused = 0  # HTTP requests refused before tally up listened: nothing published
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._http, daemon=True),
                        threading.Thread(target=self._kcat, daemon=True)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        return False

    def _take(self, n):
        with self.lock:
            return [next(self.ids) for _ in range(n)]

    def _record(self, ids, acked):
        with self.lock:
            (self.acked if acked else self.unanswered).update(ids)

    def _http(self):
        rng = self.h.rng
        while not self.stop.is_set():
            ids = self._take(rng.randint(1, 40))
            body = json.dumps([{"type": "view", "ts": int(time.time() * 1000), "post_id": i} for i in ids])
            status = post_once(self.hostport, body)
            if status == 202:
                self._record(ids, True)
                with self.lock:
                    self.acked_http += len(ids)
            elif status is None and not self._listening():
                with self.lock:
                    self.refused += 1  # connection refused: nothing was sent
                time.sleep(0.02)
            else:
                self._record(ids, False)

    def _listening(self):
        host, _, port = self.hostport.rpartition(":")
        try:
            with tallyctl.socket.create_connection((host, int(port)), timeout=1):
                return True
        except OSError:
            return False

    def _kcat(self):
        while not self.stop.is_set():
            ids = self._take(300)
            data = "".join(json.dumps({"type": "view", "ts": int(time.time() * 1000), "post_id": i}) + "\n"
                           for i in ids).encode()
            argv = [self.h.kcat, "-P", "-b", self.bootstrap, "-t", tallyctl.EVENTS_TOPIC, "-q",
                    "-X", "enable.idempotence=true"]
            try:
                res = subprocess.run(argv, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
                self._record(ids, res.returncode == 0)
            except subprocess.TimeoutExpired:
                self._record(ids, False)
            time.sleep(0.05)


def main():
    args = tallyctl.parse_args(__doc__, extra=extra_args)
    with tallyctl.Harness(args, "e2e_acked", default_seed=1717) as h:
        port, http_port = tallyctl.free_port(), tallyctl.free_port()
        bootstrap, hostport = "127.0.0.1:%d" % port, "127.0.0.1:%d" % http_port
        state = h.path("state")
        argv = [h.tally, "up", "--port", port, "--state-dir", state, "--http", hostport, "--partitions", 8]

        def up(i):
            p = h.spawn("tally up", argv, "up.log")
            client = tallyctl.Http(hostport)
            tallyctl.wait_healthy(client, timeout=120, proc=p)
            return p, client

        ids = itertools.count(1)
        p, client = up(0)
        broker_pid = tallyctl.embedded_broker_pid(state)
        h.check(broker_pid is not None, "tally up recorded its embedded broker in the state directory")
        pubs = Publishers(h, hostport, bootstrap, ids)
        both = 0
        with pubs:
            for k in range(args.kills):
                time.sleep(h.rng.uniform(0.2, 1.2))
                p.kill9()
                if k % 2 == 1:
                    # The broker too: what it acknowledged is on disk.
                    os.kill(broker_pid, 9)
                    tallyctl.wait_until("the broker to die", lambda: not tallyctl.pid_alive(broker_pid), 10)
                    log("SIGKILLed tally up's broker (pid %d) too" % broker_pid)
                    both += 1
                else:
                    h.check(broker_pid is not None and tallyctl.pid_alive(broker_pid),
                            "the embedded broker outlives SIGKILL %d of tally up" % (k + 1))
                time.sleep(h.rng.uniform(0.0, 0.5))  # kcat goes on publishing (or retrying) meanwhile
                p, client = up(k + 1)
                broker_pid = tallyctl.embedded_broker_pid(state)
        found = tallyctl.log_lines(h.path("up.log"), "found the embedded broker")
        h.check(len(found) == args.kills - both, "each restart went on with a running broker: %d of %d said so" % (
            len(found), args.kills - both))
        started = tallyctl.log_lines(h.path("up.log"), "started the embedded broker")
        h.check(len(started) == 1 + both, "a broker was started at first and after each broker SIGKILL: %d, want %d"
                % (len(started), 1 + both))
        log("published: %d acknowledged (%d over HTTP), %d without an answer, %d HTTP requests refused" % (
            len(pubs.acked), pubs.acked_http, len(pubs.unanswered), pubs.refused))
        h.check(pubs.acked_http > 500, "HTTP acknowledged enough events to mean something: %d" % pubs.acked_http)
        h.check(len(pubs.acked) > 1000, "enough events were acknowledged to mean something: %d" % len(pubs.acked))

        tallyctl.wait_lag_zero(client, timeout=120, proc=p)
        every = sorted(pubs.acked | pubs.unanswered)
        views = {}
        for i in range(0, len(every), 200):
            chunk = every[i:i + 200]
            r = client.get("/v1/posts/counts?ids=" + ",".join(map(str, chunk)))
            h.check(r.status == 200, "batch read: %r" % r)
            for post in r.json()["posts"]:
                views[post["post_id"]] = post["view"]
        lost = [i for i in sorted(pubs.acked) if views.get(i, 0) == 0]
        doubled = [i for i in every if views.get(i, 0) > 1]
        h.check(not lost, "%d acknowledged events were lost, e.g. post ids %s" % (len(lost), lost[:10]))
        h.check(not doubled, "%d events were counted more than once, e.g. %s" % (
            len(doubled), [(i, views[i]) for i in doubled[:10]]))
        applied_unanswered = sum(1 for i in pubs.unanswered if views.get(i, 0) == 1)
        log("of %d events without an answer, %d were applied" % (len(pubs.unanswered), applied_unanswered))
        h.checkpoint("%d SIGKILLs while publishing" % args.kills)

        # 10,000 likes acknowledged, then SIGKILL right after the last answer.
        users = list(range(1, 10001))
        for i in range(0, len(users), 500):
            body = json.dumps([{"type": "like", "ts": 1, "post_id": LIKED_POST, "user_id": u}
                               for u in users[i:i + 500]])
            status = post_once(hostport, body)
            if status != 202:
                raise tallyctl.TestFailure("POST of likes %d..%d: %s" % (i, i + 499, status))
        p.kill9()
        p, client = up(args.kills + 1)
        tallyctl.wait_lag_zero(client, timeout=120, proc=p)
        like = client.get("/v1/posts/%d/counts" % LIKED_POST).json()["like"]
        h.check(like == 10000, "10,000 likes acknowledged before a SIGKILL read %d after the restart" % like)
        h.checkpoint("SIGKILL right after the last acknowledged like")

        # A clean stop right after the last acknowledged like, with likes
        # still unapplied: tally up stops its broker all the same (its log
        # is on disk), and the next tally up applies the rest.
        def clean_stop(what):
            pid = tallyctl.embedded_broker_pid(state)
            t0 = time.monotonic()
            rc, clean = p.stop(grace=30)
            took = time.monotonic() - t0
            log("%s: tally up stopped in %.1f s, exit %s" % (what, took, rc))
            h.check(clean and rc == 0, "%s: tally up on SIGTERM: exit %s" % (what, rc))
            h.check(pid is not None, "%s: tally up had recorded its broker" % what)
            if pid is not None:
                tallyctl.wait_until("the embedded broker to stop", lambda: not tallyctl.pid_alive(pid), 15)
            h.check(not os.path.exists(os.path.join(state, "BROKER")),
                    "%s: the broker's record is gone after a clean stop" % what)

        for i in range(0, len(users), 500):
            body = json.dumps([{"type": "like", "ts": 1, "post_id": LIKED_POST + 1, "user_id": u}
                               for u in users[i:i + 500]])
            status = post_once(hostport, body)
            if status != 202:
                raise tallyctl.TestFailure("POST of likes %d..%d: %s" % (i, i + 499, status))
        clean_stop("SIGTERM right after the last acknowledged like")
        p, client = up(args.kills + 2)
        tallyctl.wait_lag_zero(client, timeout=120, proc=p)
        like = client.get("/v1/posts/%d/counts" % (LIKED_POST + 1)).json()["like"]
        h.check(like == 10000, "10,000 likes acknowledged before a clean stop read %d after the restart" % like)
        h.checkpoint("a clean stop right after the last acknowledged like")

        clean_stop("a clean stop")
        h.finish_checks("e2e_acked")


if __name__ == "__main__":
    main()
