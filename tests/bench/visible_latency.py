#!/usr/bin/env python3
"""How long POST /v1/events?wait=visible takes, at rest and under load.

Starts `tally up` (embedded broker, 16 partitions), or with --members N a
`tally broker` and N `tally up --brokers` members of one group, and for
each load in
--loads (events/s; 0 = at rest) runs `tally produce --gen --rate` in the
background, then sends --requests likes one after another on one keep-alive
connection, alternating plain POSTs (202, the broker's acknowledgement
only) and ?wait=visible POSTs (200 once visible), and prints p50/p99/max of
each and the load the input topic really carried.

  python3 tests/bench/visible_latency.py --tally build/tally [--loads 0,100000] [--requests 200]
                                        [--members 3]

With members, the events are posted to the first member and the load is
published to the broker; every member routes and applies its share.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

BASE = 10 ** 15


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000 if s else float("nan")


def main():
    def extra(ap):
        ap.add_argument("--loads", default="0,100000", help="background loads, events/s (0: none)")
        ap.add_argument("--requests", type=int, default=200, help="requests of each kind per load")
        ap.add_argument("--members", type=int, default=0,
                        help="0: one `tally up` on its embedded broker; N: a `tally broker` and N members")

    args = tallyctl.parse_args(__doc__, extra)
    with tallyctl.Harness(args, "visible_latency", default_seed=5) as h:
        procs = []
        if args.members > 0:
            broker, brokers = h.start_broker(partitions=16)
            clients = []
            for i in range(args.members):
                hp = tallyctl.free_port()
                url = "http://127.0.0.1:%d" % hp
                m, c = h.start_up(brokers, h.path("state-%d" % i), hp, partitions=16, log_name="member-%d.log" % i,
                                  extra=["--group", "visible-latency", "--advertise", url])
                procs.append(m)
                clients.append(c)
            tallyctl.wait_until("%d members to divide the partitions" % args.members,
                                lambda: tallyctl.cluster_settled(clients[0], args.members, 16), timeout=180)
            p, client = procs[0], clients[0]
            procs.append(broker)
        else:
            port, http_port = tallyctl.free_port(), tallyctl.free_port()
            brokers, hostport = "127.0.0.1:%d" % port, "127.0.0.1:%d" % http_port
            p = h.spawn("tally up", [h.tally, "up", "--port", port, "--state-dir", h.path("state"), "--http",
                                     hostport, "--partitions", 16], "up.log")
            client = tallyctl.Http(hostport)
            tallyctl.wait_healthy(client, timeout=120, proc=p)
            procs.append(p)
        rows = []
        for n, rate in enumerate(int(x) for x in args.loads.split(",")):
            prod = None
            if rate > 0:
                prod = h.spawn("tally produce", [h.tally, "produce", "--brokers", brokers, "--gen", rate * 60,
                                                 "--rate", rate, "--seed", n + 1], "produce-%d.log" % rate)
                time.sleep(2)  # let the load settle (a measurement warm-up, orders nothing)
            e0, t0 = tallyctl.end_offsets(tallyctl.watermarks(client)), time.monotonic()
            plain, visible = [], []
            for i in range(args.requests * 2):
                ev = {"type": "like", "ts": int(time.time() * 1000), "post_id": BASE + n,
                      "user_id": BASE + i + 1}
                wait = i % 2 == 1
                s = time.monotonic()
                r = client.post("/v1/events?wait=visible" if wait else "/v1/events", ev)
                d = time.monotonic() - s
                want = 200 if wait else 202
                if r.status != want:
                    raise tallyctl.TestFailure("request %d: %r" % (i, r))
                (visible if wait else plain).append(d)
            carried = (tallyctl.end_offsets(tallyctl.watermarks(client)) - e0) / (time.monotonic() - t0)
            if prod is not None:
                if not prod.alive():
                    log("warning: the load generator ended before the measurement did")
                prod.stop(grace=10)
            tallyctl.wait_lag_zero(client, timeout=120, proc=p)
            rows.append((rate, carried, plain, visible))
        print()
        print("| load asked | carried | POST (202) p50 / p99 / max | POST ?wait=visible (200) p50 / p99 / max |")
        print("|---|---|---|---|")
        for rate, carried, plain, visible in rows:
            print("| %s | %.0f/s | %.1f / %.1f / %.1f ms | %.1f / %.1f / %.1f ms |" % (
                "at rest" if rate == 0 else "%d/s" % rate, carried, pct(plain, 0.5), pct(plain, 0.99),
                max(plain) * 1000, pct(visible, 0.5), pct(visible, 0.99), max(visible) * 1000))
        for q in procs:
            q.stop(grace=30)


if __name__ == "__main__":
    main()
