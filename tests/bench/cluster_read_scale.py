#!/usr/bin/env python3
"""What a read costs a cluster of 3 members against a cluster of 1.

For each size in --sizes (default 1,3): starts a `tally broker` and that
many members (`tally up --brokers`, one group, 16 partitions), fills them
with --events generated events, and learns which member answers each of
the first 1000 post ids from its own state (X-Tally-Member). Then wrk
drives GET /v1/posts/{id}/counts (or batches of --batch ids) in two ways,
--runs times each, --seconds each, --connections keep-alive connections:

  owner  each member in turn is asked for the ids it owns, as a client that
         routes by GET /v1/cluster does;
  any    the first member is asked for every id, two thirds of which it
         asks their owner for (with 3 members).

With --pin (the default) every member's threads run on CPU 0 and wrk on
CPU 1, as tally-bench's query workloads pin theirs, so a member's CPU per
request is not what the scheduler made of two busy cores. The CPU time
(utime + stime, /proc/<pid>/stat) of every member is read
before and after each run: the CPU per request is the sum over all members,
the idle ones included, divided by the requests answered. Prints each
size's medians and the ratio of 3 members to 1 for each way.

  python3 tests/bench/cluster_read_scale.py --tally build/tally [--runs 3] [--seconds 8] [--batch 20]
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


def pin(pid, cpus):
    """Every thread of pid, now and later, on `cpus`."""
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], capture_output=True, check=True)

PARTITIONS = 16
IDS = 1000


def settled(client, n):
    """True when n members divide every partition, none restoring, and
    nothing is left to apply."""
    if not tallyctl.cluster_settled(client, n, PARTITIONS):
        return False
    w = client.try_get("/v1/watermarks")
    return w is not None and w.status == 200 and w.json()["lag"] == 0


def measure(h, args, size):
    """{way: [(requests/s, CPU us per request summed over the members)]}"""
    broker, brokers = h.start_broker(partitions=PARTITIONS, log_name="broker-%d.log" % size)
    members = []  # (proc, client, "host:port")
    for i in range(size):
        port = tallyctl.free_port()
        url = "http://127.0.0.1:%d" % port
        proc, client = h.start_up(brokers, h.path("state-%d-%d" % (size, i)), port, partitions=PARTITIONS,
                                  log_name="up-%d-%d.log" % (size, i),
                                  extra=["--group", "scale-%d" % size, "--advertise", url])
        members.append((proc, client, "127.0.0.1:%d" % port))
    gen = subprocess.run([h.tally, "produce", "--brokers", brokers, "--gen", str(args.events),
                          "--users", str(IDS), "--posts", str(IDS), "--seed", str(h.seed)],
                         capture_output=True, text=True, check=True)
    log(gen.stdout.strip() or gen.stderr.strip())
    first = members[0][1]
    tallyctl.wait_until("%d member(s) to settle and apply everything" % size, lambda: settled(first, size),
                        timeout=240)
    owned = {m[2]: [] for m in members}
    for pid in range(1, IDS + 1):
        who = first.get("/v1/posts/%d/counts" % pid).headers.get("x-tally-member")
        if who not in owned:
            raise tallyctl.TestFailure("post %d answered by %r, not a member" % (pid, who))
        owned[who].append(pid)
    log("%d member(s): ids owned %s" % (size, ", ".join("%s %d" % (k, len(v)) for k, v in owned.items())))

    def paths(ids):
        if args.batch <= 0:
            return ["/v1/posts/%d/counts" % i for i in ids[:200]]
        return ["/v1/posts/counts?ids=" + ",".join(str(ids[(j * args.batch + k) % len(ids)])
                                                    for k in range(args.batch)) for j in range(200)]

    def script(ps):
        fd, path = tempfile.mkstemp(suffix=".lua", dir=h.path())
        with os.fdopen(fd, "w") as f:
            f.write(tallyctl.WRK_PATHS_SCRIPT % ", ".join('"%s"' % p for p in ps))
        return path

    # "any": every id at the first member, in an order that mixes owners.
    mixed = sorted(range(1, IDS + 1), key=lambda i: (i * 2654435761) % 4294967296)
    targets = {"owner": [(m[2], script(paths(owned[m[2]]))) for m in members]}
    if size > 1:  # alone, every id is the first member's own
        targets["any"] = [(members[0][2], script(paths(mixed)))]
    if args.pin:
        for m in members:
            pin(m[0].pid, "0")
    results = {way: [] for way in targets}
    for run in range(args.runs):
        for way in targets:
            for at, path in targets[way]:
                c0 = sum(tallyctl.cpu_seconds(m[0].pid) for m in members)
                t0 = time.monotonic()
                n, bad = tallyctl.wrk("http://%s" % at, path, args.seconds, args.connections,
                             cpus="1" if args.pin else None)
                wall = time.monotonic() - t0
                cpu = sum(tallyctl.cpu_seconds(m[0].pid) for m in members) - c0
                if bad:
                    raise tallyctl.TestFailure("%d answers other than 200 at %s (%s)" % (bad, at, way))
                row = (n / wall, cpu / n * 1e6)
                results[way].append(row)
                log("%d member(s), run %d, %-5s at %s: %7.0f req/s, CPU per request %.2f us" % (
                    size, run + 1, way, at, *row))
    for proc, _, _ in members:
        proc.stop(grace=30)
    broker.stop(grace=10)
    return results


def main():
    def extra(ap):
        ap.add_argument("--sizes", default="1,3", help="cluster sizes to compare, the first the baseline")
        ap.add_argument("--runs", type=int, default=3, help="runs of each way and member")
        ap.add_argument("--seconds", type=int, default=8, help="length of a run")
        ap.add_argument("--connections", type=int, default=8, help="wrk's keep-alive connections")
        ap.add_argument("--events", type=int, default=200000, help="generated events to fill the state")
        ap.add_argument("--batch", type=int, default=0,
                        help="ids per batch request (0: single reads of one post)")
        ap.add_argument("--pin", type=int, default=1,
                        help="1: the members on CPU 0, wrk on CPU 1, as tally-bench's --pin; 0: unpinned")

    args = tallyctl.parse_args(__doc__, extra)
    with tallyctl.Harness(args, "cluster_read_scale", default_seed=7) as h:
        sizes = [int(x) for x in args.sizes.split(",")]
        med = {}
        for size in sizes:
            res = measure(h, args, size)
            med[size] = {way: (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
                         for way, rows in res.items()}
        base = sizes[0]
        what = "batches of %d ids" % args.batch if args.batch > 0 else "single reads"
        print()
        print("| members | asked | requests/s | CPU/request, all members | x %d member%s |" % (
            base, "" if base == 1 else "s"))
        print("|---|---|---|---|---|")
        for size in sizes:
            for way in med[size]:
                rps, us = med[size][way]
                print("| %d | %s | %.0f | %.2f us | %.2fx |" % (
                    size, "the owner" if way == "owner" else "one member, every id", rps, us,
                    us / med[base]["owner"][1]))
        print()
        print("medians of %d runs of %d s per member asked, %d connections, %s, %s" % (
            args.runs, args.seconds, args.connections, what,
            "members on CPU 0 and wrk on CPU 1" if args.pin else "unpinned"))


if __name__ == "__main__":
    main()
