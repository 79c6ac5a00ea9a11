#!/usr/bin/env python3
"""End to end: `tally up` pointed at a damaged or foreign state directory
must stop with a clear one-line error and a non-zero exit: never a crash (a
signal, a core) and never a start that would serve wrong counts.

A good state is built first (tally up over a few thousand events, stopped
cleanly); each case is a copy of it, damaged one way, or something that is
not a tally state at all:

  garbage CURRENT, garbage MANIFEST, garbage inside the table files (or WAL),
  a missing partition directory, garbage TALLY file, a TALLY file of an
  unknown format, a state made with another partition count, a plain RocksDB
  directory (no TALLY), a plain file, a directory that cannot be created.

The good copy is then started once more: it still answers the same counts.

  python3 e2e_state_dirs.py --tally build/tally [--work-dir DIR]
"""

import glob
import json
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

PATHS = ["/v1/posts/%d/counts" % p for p in range(1, 31)] + ["/v1/users/%d/counts" % u for u in range(1, 31)]


def overwrite(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_state_dirs", default_seed=31) as h:
        broker, brokers = h.start_broker(partitions=4)
        good = h.path("good")
        up, client = h.start_up(brokers, good, tallyctl.free_port(), partitions=4, log_name="up-good.log")
        import subprocess
        res = subprocess.run([h.tally, "produce", "--brokers", brokers, "--gen", "3000", "--seed", "5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        h.check(res.returncode == 0, "tally produce: %s" % res.stderr[-300:])
        tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=3000)
        before = {p: client.get(p).text() for p in PATHS}
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit %s" % rc)
        client.close()

        cases = []

        def case(name, expect, build):
            cases.append((name, expect, build))

        def copy(name):
            d = h.path("case-" + name)
            shutil.copytree(good, d)
            return d

        def garbage_current(d):
            overwrite(os.path.join(d, "partition-001", "CURRENT"), 0, b"\x00\xffnot a manifest name\n")

        def garbage_manifest(d):
            m = sorted(glob.glob(os.path.join(d, "partition-002", "MANIFEST-*")))[-1]
            size = os.path.getsize(m)
            overwrite(m, 0, os.urandom(size))

        def garbage_data(d):
            # Every table file of partition 3 (without one, its WAL): a
            # checksum must catch it.
            files = glob.glob(os.path.join(d, "partition-003", "*.sst"))
            if not files:
                files = glob.glob(os.path.join(d, "partition-003", "*.log"))
            for f in files:
                # Mid-file: a damaged record followed by good ones is damage;
                # garbage at the very end looks like a crash's torn tail, which
                # RocksDB drops by design (it was never acknowledged).
                size = os.path.getsize(f)
                overwrite(f, size // 3, os.urandom(min(size // 3, 64)))

        def missing_partition(d):
            shutil.rmtree(os.path.join(d, "partition-002"))

        def garbage_tally(d):
            with open(os.path.join(d, "TALLY"), "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n garbage")

        def future_tally(d):
            with open(os.path.join(d, "TALLY")) as f:
                meta = json.load(f)
            meta["format"] = 99
            with open(os.path.join(d, "TALLY"), "w") as f:
                json.dump(meta, f)

        def other_partition_count(d):
            with open(os.path.join(d, "TALLY")) as f:
                meta = json.load(f)
            meta["partitions"] = 8
            with open(os.path.join(d, "TALLY"), "w") as f:
                json.dump(meta, f)

        def plain_rocksdb(d):
            # A RocksDB that is not a tally state: one partition's database
            # where the state directory should be.
            tmp = d + ".tmp"
            os.rename(d, tmp)
            shutil.copytree(os.path.join(tmp, "partition-000"), d)
            shutil.rmtree(tmp)

        def plain_file(d):
            shutil.rmtree(d)
            with open(d, "w") as f:
                f.write("not a directory\n")

        case("garbage-current", ("partition-001", "corrupt|CURRENT|invalid"), garbage_current)
        case("garbage-manifest", ("partition-002", "corrupt|MANIFEST"), garbage_manifest)
        case("garbage-data", ("partition-003", "corrupt|checksum|block"), garbage_data)
        case("missing-partition", ("partition-002", "does not exist|missing"), missing_partition)
        case("garbage-tally", ("TALLY",), garbage_tally)
        case("future-format", ("unsupported format",), future_tally)
        case("other-partition-count", ("8 partitions", "tally.deltas has 4"), other_partition_count)
        case("plain-rocksdb", ("not a tally state directory",), plain_rocksdb)
        case("plain-file", ("not a directory|not a tally state",), plain_file)

        import re
        for name, expect, build in cases:
            d = copy(name)
            build(d)
            run_case(h, brokers, name, d, expect, re)
        # A directory that cannot be created (a path under /proc).
        run_case(h, brokers, "uncreatable", "/proc/tally-e2e-state-%d" % os.getpid(),
                 ("/proc/tally-e2e-state", "creating|cannot"), re)
        h.checkpoint("%d damaged or foreign state directories" % (len(cases) + 1))

        # The good state still opens and answers what it answered.
        up, client = h.start_up(brokers, good, tallyctl.free_port(), partitions=4, log_name="up-good-2.log")
        after = {p: client.get(p).text() for p in PATHS}
        diff = [p for p in PATHS if before[p] != after[p]]
        h.check(not diff, "the good state answers differently after a restart: %s" % diff[:3])
        rc, clean = up.stop(grace=30)
        h.check(clean and rc == 0, "tally up on SIGTERM: exit %s" % rc)
        h.finish_checks("e2e_state_dirs")


def run_case(h, brokers, name, state_dir, expect, re):
    """tally up on `state_dir` must exit non-zero by itself, without a signal,
    with one stderr line naming the problem (every regex in `expect`)."""
    log_name = "up-%s.log" % name
    p = h.spawn("tally up (%s)" % name, [h.tally, "up", "--brokers", brokers, "--state-dir", state_dir,
                                          "--http", "127.0.0.1:%d" % tallyctl.free_port(), "--partitions", 4],
                log_name)
    t0 = time.monotonic()
    rc = p.wait(60)
    took = time.monotonic() - t0
    if rc is None:
        p.stop(grace=5)
        h.check(False, "%s: tally up did not exit within 60 s (it started on a bad state?)" % name)
        return
    p.stop()
    with open(h.path(log_name), errors="replace") as f:
        text = f.read()
    fails = [l for l in text.splitlines() if l.startswith("tally up: ")]
    h.check(rc > 0, "%s: exit status %s (want a non-zero exit, not a signal)" % (name, rc))
    h.check(rc != -signal.SIGSEGV and rc != -signal.SIGABRT and "core dumped" not in text,
            "%s: crashed (status %s)" % (name, rc))
    h.check(len(fails) == 1, "%s: want one 'tally up: <reason>' line, got %d" % (name, len(fails)))
    line = fails[-1] if fails else ""
    for pattern in expect:
        h.check(re.search(pattern, line, re.I), "%s: the error line does not match /%s/: %s" % (name, pattern, line))
    log("%s: exit %s in %.1f s: %s" % (name, rc, took, line[:200]))


if __name__ == "__main__":
    main()
