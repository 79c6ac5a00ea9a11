#!/usr/bin/env python3
"""End to end: at a steady load, `lag` in GET /v1/watermarks tells the truth
(SPEC section 4): it stays within twice what is really not yet visible
(rate x freshness), plus one window, and reaches exactly 0 once the
producers stop.

`tally up` with its embedded broker (16 partitions, as `scripts/run`) takes
`tally produce --gen --rate R` at a low rate (200 events/s) and then at a
high one (50,000 events/s; `--high-rate`; the suite runs it in the normal build only). In
each phase one thread samples `lag` every 25 ms while another publishes
probes (a like on a post of its own, through POST /v1/events) and polls
GET /v1/posts/{id}/counts until each shows, which gives the freshness F.
The rate R is what the input topic really took over the phase (its end
offsets), not what was asked. Checked: the 95th percentile of the lag
samples is at most 2 x R x F99 + R x window (F99 the 99th percentile of the
probes' freshness, window the applier's 20 ms), and every sample is within
twice that; then lag 0 once the producers stop, with every probe visible.

  python3 e2e_lag.py --tally build/tally [--high-rate 50000] [--seconds 8]
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

PARTITIONS = 16
WINDOW_S = 0.020  # the applier's window, --flush-ms (its default)
PROBE_POST_BASE = 10 ** 15  # far above the generator's post ids
PROBE_USER_BASE = 10 ** 15


def percentile(values, q):
    s = sorted(values)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, int(q * len(s)))]


def input_end(client):
    w = tallyctl.watermarks(client)
    return None if w is None else tallyctl.end_offsets(w)


class Phase:
    """One steady load: lag samples and probe freshness, measured at once."""

    def __init__(self, h, hostport, name, post_id):
        self.h, self.hostport, self.name, self.post_id = h, hostport, name, post_id
        self.lags, self.fresh = [], []
        self.trace = []  # (time, lag, of which tally.deltas rows), kept in lag-<phase>.tsv
        self.errors = []
        self.stop = threading.Event()

    def sample(self):
        client = tallyctl.Http(self.hostport)
        try:
            while not self.stop.is_set():
                t = time.monotonic()
                w = tallyctl.watermarks(client)
                if w is None:
                    self.errors.append("GET /v1/watermarks did not answer 200")
                else:
                    self.lags.append(w["lag"])
                    self.trace.append((t, w["lag"], sum(p["lag"] for p in w["partitions"]
                                                        if p["topic"] == tallyctl.DELTAS_TOPIC)))
                left = 0.025 - (time.monotonic() - t)
                if left > 0:
                    self.stop.wait(left)
        finally:
            client.close()

    def probe(self, probes):
        client = tallyctl.Http(self.hostport)
        path = "/v1/posts/%d/counts" % self.post_id
        try:
            for i in range(probes):
                if self.stop.is_set():
                    return
                user = PROBE_USER_BASE + i + 1
                event = {"type": "like", "ts": int(time.time() * 1000), "post_id": self.post_id, "user_id": user}
                t0 = time.monotonic()
                r = client.post("/v1/events", event)
                if r.status != 202:
                    self.errors.append("probe POST: %r" % r)
                    return
                deadline = t0 + 10
                while True:
                    r = client.get(path)
                    if r.status == 200 and r.json()["like"] >= i + 1:
                        self.fresh.append(time.monotonic() - t0)
                        self.trace.append((t0, "probe", self.fresh[-1]))
                        break
                    if time.monotonic() > deadline:
                        self.errors.append("probe %d not visible within 10 s" % i)
                        return
                    time.sleep(0.002)  # polling a read, not ordering anything
                # Probes spread over the phase, never two at once.
                self.stop.wait(0.15)
        finally:
            client.close()


def run_phase(h, brokers, hostport, client, name, rate, seconds, post_id, seed):
    """Publishes `rate` events/s for about `seconds` plus a warm-up second,
    measures, and returns (measured rate, lag samples, freshness samples)."""
    events = int(rate * (seconds + 1.5))
    start_end = input_end(client)
    prod = h.spawn("tally produce %s" % name,
                   [h.tally, "produce", "--brokers", brokers, "--gen", events, "--rate", rate, "--seed", seed],
                   "produce-%s.log" % name)
    # Warm-up: the load has reached the input topic for a second.
    warm = start_end + max(1, int(rate))
    tallyctl.wait_until("%s load to start" % name, lambda: (input_end(client) or 0) >= warm, 30, interval=0.05,
                        proc=prod)
    phase = Phase(h, hostport, name, post_id)
    t0, e0 = time.monotonic(), input_end(client)
    threads = [threading.Thread(target=phase.sample), threading.Thread(target=phase.probe, args=(10 ** 6,))]
    for t in threads:
        t.start()
    try:
        # Measure while the generator still runs.
        while time.monotonic() - t0 < seconds and prod.alive():
            time.sleep(0.05)
    finally:
        phase.stop.set()
        for t in threads:
            t.join()
    t1, e1 = time.monotonic(), input_end(client)
    with open(h.path("lag-%s.tsv" % name), "w") as f:
        for row in sorted(phase.trace, key=lambda r: r[0]):
            f.write("%.3f\t%s\t%s\n" % ((row[0] - t0) * 1000, row[1], row[2]))
    still_running = prod.alive()
    rc = prod.wait(120)
    h.check(rc == 0, "%s: tally produce exited %s" % (name, rc))
    h.check(still_running, "%s: the load ended before the measurement did (the generator fell behind?)" % name)
    for e in phase.errors[:5]:
        h.check(False, "%s: %s" % (name, e))
    measured = (e1 - e0) / (t1 - t0)
    return measured, phase.lags, phase.fresh


def judge(h, name, asked, rate, lags, fresh):
    h.check(len(fresh) >= 10, "%s: only %d probes measured" % (name, len(fresh)))
    h.check(len(lags) >= 100, "%s: only %d lag samples" % (name, len(lags)))
    if not fresh or not lags:
        return
    f50, f99 = percentile(fresh, 0.5), percentile(fresh, 0.99)
    real = rate * f99
    bound = 2 * real + rate * WINDOW_S
    l50, l95, lmax = percentile(lags, 0.5), percentile(lags, 0.95), max(lags)
    log("%s: asked %d events/s, carried %.0f; freshness p50 %.0f ms p99 %.0f ms (%d probes); "
        "not yet visible R x F99 = %.0f records; bound 2 R F99 + R W = %.0f; "
        "lag p50 %d p95 %d max %d (%d samples)" % (
            name, asked, rate, f50 * 1000, f99 * 1000, len(fresh), real, bound, l50, l95, lmax, len(lags)))
    h.check(rate >= 0.8 * asked, "%s: the input took %.0f events/s of the %d asked" % (name, rate, asked))
    h.check(l95 <= bound, "%s: lag p95 %d > 2 x R x F99 + R x W = %.0f (R %.0f/s, F99 %.0f ms)" % (
        name, l95, bound, rate, f99 * 1000))
    h.check(lmax <= 2 * bound, "%s: lag max %d > twice the bound %.0f" % (name, lmax, bound))


def main():
    def extra(ap):
        ap.add_argument("--low-rate", type=int, default=200)
        ap.add_argument("--high-rate", type=int, default=50000)
        ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per phase")

    args = tallyctl.parse_args(__doc__, extra)
    with tallyctl.Harness(args, "e2e_lag", default_seed=29) as h:
        port, http_port = tallyctl.free_port(), tallyctl.free_port()
        brokers = "127.0.0.1:%d" % port
        hostport = "127.0.0.1:%d" % http_port
        argv = [h.tally, "up", "--port", port, "--state-dir", h.path("state"), "--http", hostport,
                "--partitions", PARTITIONS]
        up = h.spawn("tally up", argv, "up.log")
        client = tallyctl.Http(hostport)
        tallyctl.wait_healthy(client, timeout=120, proc=up)

        results = []
        for i, (name, rate) in enumerate((("low", args.low_rate), ("high", args.high_rate))):
            measured, lags, fresh = run_phase(h, brokers, hostport, client, name, rate, args.seconds,
                                              PROBE_POST_BASE + i, h.seed + i)
            judge(h, name, rate, measured, lags, fresh)
            results.append((name, fresh))
            h.checkpoint("%s rate (%d events/s)" % (name, rate))

        # Producers stopped: lag reaches exactly 0, and then every probe shows.
        tallyctl.wait_lag_zero(client, timeout=120, proc=up)
        for i, (name, fresh) in enumerate(results):
            r = client.get("/v1/posts/%d/counts" % (PROBE_POST_BASE + i))
            h.check(r.status == 200 and r.json()["like"] >= len(fresh),
                    "%s: lag 0 but the probe post reads %r (%d probes seen before)" % (name, r, len(fresh)))
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit %s" % rc)
        h.finish_checks("e2e_lag")


if __name__ == "__main__":
    main()
