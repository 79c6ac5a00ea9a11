#!/usr/bin/env python3
"""What an event `id` costs at ingest (SPEC section 1: applied once per id).

For each of `--runs` rounds, alternately without and with ids: `tally
broker`, `tally produce --gen N [--ids]` (the generator's mix, every id
distinct: "g<seed>-<n>"), then `tally up --brokers` on that backlog until
every event is applied. Prints, per variant, the medians of: ingest rate,
CPU seconds of `tally up` per million events, and the state directory's
size after a clean stop (memtables flushed), and the extra state per
million ids.

  python3 tests/bench/event_ids_cost.py --tally build/tally [--events 1000000] [--runs 3]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))

import tallyctl  # noqa: E402


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def one_run(tally, events, ids, work):
    port, http = tallyctl.free_port(), tallyctl.free_port()
    broker = subprocess.Popen([tally, "broker", "--port", str(port), "--partitions", "16",
                               "--log-dir", os.path.join(work, "broker-data")],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "broker.log"), "w"))
    try:
        time.sleep(0.5)
        argv = [tally, "produce", "--brokers", "127.0.0.1:%d" % port, "--gen", str(events), "--log-level", "warn"]
        if ids:
            argv.append("--ids")
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        state = os.path.join(work, "state")
        t0 = time.monotonic()
        up = subprocess.Popen([tally, "up", "--brokers", "127.0.0.1:%d" % port, "--state-dir", state,
                               "--http", "127.0.0.1:%d" % http, "--partitions", "16"],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "up.log"), "w"))
        while True:
            try:
                w = get("http://127.0.0.1:%d/v1/watermarks" % http)
                ends = sum(p["end_offset"] for p in w["partitions"] if p["topic"] == "tally.events")
                if w["lag"] == 0 and ends >= events:
                    break
            except Exception:
                pass
            if time.monotonic() - t0 > 600:
                raise SystemExit("not applied within 600 s")
            time.sleep(0.02)
        secs = time.monotonic() - t0
        cpu = tallyctl.cpu_seconds(up.pid)
        up.send_signal(signal.SIGTERM)
        up.wait(60)
        size = dir_bytes(state)
        shutil.rmtree(state)
        return events / secs, cpu / events * 1e6, size
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tally", required=True)
    ap.add_argument("--events", type=int, default=1000000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tally-ids-bench-")
    results = {False: [], True: []}
    try:
        for run in range(args.runs):
            for ids in (False, True):
                rate, cpu, size = one_run(os.path.abspath(args.tally), args.events, ids, work)
                results[ids].append((rate, cpu, size))
                print("run %d %-11s %9.0f events/s  %6.2f cpu-s per M events  state %6.1f MB" % (
                    run + 1, "with ids" if ids else "without ids", rate, cpu, size / 1e6), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in results.items()}
    for ids in (False, True):
        rate, cpu, size = med[ids]
        print("median %-11s %9.0f events/s  %6.2f cpu-s per M events  state %6.1f MB" % (
            "with ids" if ids else "without ids", rate, cpu, size / 1e6))
    print("ids cost: %.2fx CPU per event, %.1f%% of the rate lost, %.1f MB more state per million ids" % (
        med[True][1] / med[False][1], 100 * (1 - med[True][0] / med[False][0]),
        (med[True][2] - med[False][2]) / 1e6 / (args.events / 1e6)))


if __name__ == "__main__":
    sys.exit(main())
