#!/usr/bin/env python3
"""What a remote read costs in a cluster, against a local one.

Starts `tally broker` and two members (`tally up --brokers`, one group,
--partitions 4), fills them with --events generated events, and picks post
ids that member A answers from its own state (X-Tally-Member is A) and ids
it asks member B for. Then wrk drives GET /v1/posts/{id}/counts at A, for
local ids and for remote ids in turn (--runs each, alternating,
--seconds each, --connections keep-alive connections), while the CPU time
(utime + stime, /proc/<pid>/stat) of both members is read before and after.
Prints requests/s and CPU microseconds per request of A, of B and of both,
and the ratio remote/local, as medians over the runs. With --batch N the
requests are GET /v1/posts/counts?ids= of N ids: "local" batches hold ids
A answers itself, "remote" ones half of those and half ids of B's, as a
timeline of random posts spans the members.

  python3 tests/bench/cluster_read_cost.py --tally build/tally [--runs 3] [--seconds 10] [--batch 20]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

def main():
    def extra(ap):
        ap.add_argument("--runs", type=int, default=3, help="runs of each kind, alternating")
        ap.add_argument("--seconds", type=int, default=10, help="length of a run")
        ap.add_argument("--connections", type=int, default=8, help="wrk's keep-alive connections")
        ap.add_argument("--events", type=int, default=200000, help="generated events to fill the state")
        ap.add_argument("--batch", type=int, default=0,
                        help="ids per batch request (0: single reads of one post)")

    args = tallyctl.parse_args(__doc__, extra)
    with tallyctl.Harness(args, "cluster_read_cost", default_seed=7) as h:
        broker, brokers = h.start_broker(partitions=4)
        members = []
        for name in ("a", "b"):
            port = tallyctl.free_port()
            proc, client = h.start_up(brokers, h.path("state-" + name), port, partitions=4,
                                      log_name="up-%s.log" % name, extra=["--group", "bench"])
            members.append((proc, client, "127.0.0.1:%d" % port))
        (pa, ca, a), (pb, cb, b) = members
        gen = subprocess.run([h.tally, "produce", "--brokers", brokers, "--gen", str(args.events),
                              "--users", "1000", "--posts", "1000", "--seed", str(h.seed)],
                             capture_output=True, text=True, check=True)
        log(gen.stdout.strip() or gen.stderr.strip())

        def settled():
            r = ca.try_get("/v1/watermarks")
            return r is not None and r.status == 200 and r.json()["lag"] == 0
        tallyctl.wait_until("both members to apply everything", settled, timeout=180)
        local, remote = [], []
        for pid in range(1, 1001):
            r = ca.get("/v1/posts/%d/counts" % pid)
            who = r.headers.get("x-tally-member")
            (local if who == a else remote if who == b else []).append("/v1/posts/%d/counts" % pid)
        log("A (%s) answers %d of 1000 posts itself and asks B (%s) for %d" % (a, len(local), b, len(remote)))
        if len(local) < 50 or len(remote) < 50:
            raise tallyctl.TestFailure("the partitions are not split between the members")
        if args.batch > 0:
            ids = lambda paths: [p.split("/")[3] for p in paths]  # noqa: E731
            lid, rid = ids(local), ids(remote)
            half = max(1, args.batch // 2)
            lb, rb = [], []
            for i in range(200):
                lb.append([lid[(i * args.batch + k) % len(lid)] for k in range(args.batch)])
                mixed = [lid[(i * half + k) % len(lid)] for k in range(args.batch - half)]
                mixed += [rid[(i * half + k) % len(rid)] for k in range(half)]
                rb.append(sorted(mixed, key=int))
            local = ["/v1/posts/counts?ids=" + ",".join(b) for b in lb]
            remote = ["/v1/posts/counts?ids=" + ",".join(b) for b in rb]
        scripts = {}
        for kind, paths in (("local", local), ("remote", remote)):
            fd, path = tempfile.mkstemp(suffix=".lua", dir=h.path())
            with os.fdopen(fd, "w") as f:
                f.write(tallyctl.WRK_PATHS_SCRIPT % ", ".join('"%s"' % p for p in paths[:200]))
            scripts[kind] = path
        results = {"local": [], "remote": []}
        for run in range(args.runs):
            for kind in ("local", "remote"):
                ta, tb = tallyctl.cpu_seconds(pa.pid), tallyctl.cpu_seconds(pb.pid)
                t0 = time.monotonic()
                n, bad = tallyctl.wrk("http://%s" % a, scripts[kind], args.seconds, args.connections)
                wall = time.monotonic() - t0
                da, db = tallyctl.cpu_seconds(pa.pid) - ta, tallyctl.cpu_seconds(pb.pid) - tb
                if bad:
                    raise tallyctl.TestFailure("%d answers other than 200 in a %s run" % (bad, kind))
                row = (n / wall, da / n * 1e6, db / n * 1e6, (da + db) / n * 1e6)
                results[kind].append(row)
                log("run %d %-6s: %7.0f req/s, CPU per request A %.1f us, B %.1f us, both %.1f us" % (
                    run + 1, kind, *row))
        print()
        print("| reads at A of | requests/s | CPU/request A | CPU/request B | CPU/request both |")
        print("|---|---|---|---|---|")
        med = {}
        for kind in ("local", "remote"):
            cols = list(zip(*results[kind]))
            med[kind] = [statistics.median(c) for c in cols]
            print("| %s ids | %.0f | %.1f us | %.1f us | %.1f us |" % (kind, *med[kind]))
        print()
        print("remote / local, CPU of both members per request: %.1fx (medians of %d runs of %d s, "
              "%d connections%s)" % (med["remote"][3] / med["local"][3], args.runs, args.seconds, args.connections,
                                     ", batches of %d ids" % args.batch if args.batch > 0 else ""))
        for proc, _, _ in members:
            proc.stop(grace=30)


if __name__ == "__main__":
    main()
