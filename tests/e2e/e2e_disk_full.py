#!/usr/bin/env python3
"""End to end, on a full disk: the state directory is a 20 MiB tmpfs, and a
filler file (fallocate) takes the room that is left while events flow.

1. Reserve (`--min-free-mb 8`): the filler leaves 1 MiB. tally must not
   crash; applied offsets freeze; one ERROR line names the disk; /healthz
   answers 503 naming it; reads answer 200 with the counts from before.
   The filler goes: applying resumes by itself, /healthz 200, every count
   equals the model.
2. RocksDB's own full disk (`--min-free-mb 0`): the filler takes every
   byte, so RocksDB's WAL, flushes and MANIFEST writes fail with ENOSPC.
   Same checks: no crash, 503 while full, reads 200, resumes by itself once
   the filler goes, every count equals the model. Space RocksDB gives back
   meanwhile is taken at once, so the disk stays full until the filler goes.
3. A restart on the still-full disk (`tally up` SIGKILLed there and started
   again): no abort; it either serves reads (/healthz 503 naming the disk)
   or exits 1 with one line naming it. The filler goes: every count equals
   the model.

Needs root (mount -t tmpfs); without it the test says so and is skipped
(exit 77).

  python3 e2e_disk_full.py --tally build/tally [--seed N]
"""

import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
import event_model  # noqa: E402
import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

SKIP = 77
TMPFS_MB = 20
# More than RocksDB can give back on its own (a flushed memtable's WAL, a
# compaction's inputs: a few MiB here), so a disk below it stays below it
# until the filler goes.
RESERVE_MB = 8
ERROR_LINE = "cannot commit the window"
RESUMED_LINE = "applying resumes"
ABORT_MARKS = ("Assertion", "Aborted", "terminate called")
# Small memtables, so that WAL files and flushes fit a 20 MiB disk.
UP_ARGS = ["--write-buffer-mb", "1", "--block-cache-mb", "8", "--read-cache-mb", "8", "--viewed-mb", "4"]


def mount_tmpfs(path):
    """Mounts a TMPFS_MB tmpfs on `path`; None, or why it cannot."""
    os.makedirs(path, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % TMPFS_MB, "tmpfs", path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if res.returncode != 0:
        return (res.stderr or res.stdout).decode(errors="replace").strip() or "exit %d" % res.returncode
    return None


def unmount(path):
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path, leave):
    """Creates `path`/filler taking all but `leave` bytes of the disk."""
    filler = os.path.join(path, "filler")
    size = max(free_bytes(path) - leave, 4096)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            pass  # took what there was
        # Whatever a WAL preallocation freed meanwhile: take it too.
        extra = free_bytes(path) - leave
        if extra > 0:
            try:
                os.posix_fallocate(fd, os.fstat(fd).st_size, extra)
            except OSError:
                pass
    finally:
        os.close(fd)
    log("filler: %.1f MiB, %.2f MiB left free" % (os.path.getsize(filler) / 2**20, free_bytes(path) / 2**20))
    return filler


class KeepFull:
    """Takes, every 10 ms, whatever space comes free on the disk (a WAL's
    preallocation given back when RocksDB closes a partition after a failed
    write, say), into a second filler, so that the disk stays full to the
    last byte until stop()."""

    def __init__(self, path):
        self.path = os.path.join(path, "filler-2")
        self.stopping = threading.Event()
        self.taken = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while not self.stopping.wait(0.01):
                extra = free_bytes(os.path.dirname(self.path))
                if extra > 0:
                    try:
                        os.posix_fallocate(fd, os.fstat(fd).st_size, extra)
                        self.taken += extra
                    except OSError:
                        pass
        finally:
            os.close(fd)

    def stop(self):
        self.stopping.set()
        self.thread.join()
        os.remove(self.path)
        log("the disk was kept full: %.2f MiB given back meanwhile were taken" % (self.taken / 2**20))


def health(client):
    r = client.try_get("/healthz")
    return (r.status, r.json()) if r is not None else (None, None)


def snapshot(client, model):
    out = {}
    for p in sorted(model.post_ids):
        out["p%d" % p] = client.get("/v1/posts/%d/counts" % p)
    for u in sorted(model.user_ids):
        out["u%d" % u] = client.get("/v1/users/%d/counts" % u)
    return out


def check_no_abort(h, log_name):
    with open(h.path(log_name), errors="replace") as f:
        bad = [l.strip() for l in f if any(m in l for m in ABORT_MARKS)]
    h.check(not bad, "%s shows an abort: %s" % (log_name, bad[:3]))


def main():
    args = tallyctl.parse_args(__doc__)
    t_begin = time.monotonic()
    work = os.path.abspath(args.work_dir) if args.work_dir else None
    if work:
        unmount(os.path.join(work, "state"))  # left by an interrupted run
    probe = tempfile.mkdtemp(prefix="tally-e2e-mount-probe-")
    why = mount_tmpfs(probe)
    unmount(probe)
    os.rmdir(probe)
    if why is not None:
        print("SKIPPED: e2e_disk_full mounts a tmpfs as the state directory (root only) and cannot here: %s"
              % why, flush=True)
        sys.exit(SKIP)
    state = None
    try:
        with tallyctl.Harness(args, "e2e_disk_full", default_seed=4242) as h:
            state = h.path("state")
            why = mount_tmpfs(state)
            if why is not None:
                raise tallyctl.TestFailure("mounting a tmpfs on %s: %s" % (state, why))
            log("state directory: a %d MiB tmpfs at %s" % (TMPFS_MB, state))
            broker, brokers = h.start_broker(partitions=4)
            w = event_model.Workload(h.rng, 300, 200)
            feed = checks.ModelFeed(h, brokers, w)

            def start(log_name, reserve_mb):
                return h.start_up(brokers, state, tallyctl.free_port(), partitions=4, log_name=log_name,
                                  extra=UP_ARGS + ["--min-free-mb", str(reserve_mb)])

            up, client = start("up.log", RESERVE_MB)
            feed.publish(3000)
            checks.caught_up_and_exact(h, client, up, w.model, feed.published, "before the disk fills")
            h.checkpoint("before the disk fills")

            # ---- round 1: below the reserve -------------------------------------
            before = snapshot(client, w.model)
            filler = fill(state, leave=1 << 20)
            feed.publish(3000)
            tallyctl.wait_until("the applier to log that the disk is full",
                                lambda: tallyctl.log_lines(h.path("up.log"), ERROR_LINE), timeout=30, proc=up)
            first = tallyctl.log_lines(h.path("up.log"), ERROR_LINE)[0]
            log("up.log: %s" % first[:300])
            h.check("disk" in first and "full" in first and "offset" in first,
                    "the error line does not name the disk and the offset: %s" % first)
            status, body = health(client)
            h.check(status == 503 and "disk" in str(body) and state in str(body),
                    "/healthz while the disk is full: %s %s" % (status, body))
            w1 = tallyctl.watermarks(client)
            time.sleep(1.5)  # measuring that nothing moves, not ordering
            w2 = tallyctl.watermarks(client)
            h.check(w1 is not None and w2 is not None and w2["lag"] > 0 and
                    tallyctl.applied_offsets(w1) == tallyctl.applied_offsets(w2),
                    "applied offsets moved (or lag 0) while the disk was full: %s -> %s" % (
                        w1 and tallyctl.applied_offsets(w1), w2 and tallyctl.applied_offsets(w2)))
            during = snapshot(client, w.model)
            bad = [k for k in before if during[k].status != 200 or during[k].text() != before[k].text()]
            h.check(not bad, "reads while the disk is full: %d of %d differ or fail, e.g. %s: %r" % (
                len(bad), len(before), bad[:1], bad and during[bad[0]]))
            h.check(up.alive(), "tally up exited while the disk was full")
            errors = tallyctl.log_lines(h.path("up.log"), "ERROR")
            h.check(len(errors) == 1, "%d ERROR lines for one full disk:\n  %s" % (
                len(errors), "\n  ".join(e[:200] for e in errors[:5])))
            os.remove(filler)
            log("filler removed: %.1f MiB free" % (free_bytes(state) / 2**20))
            tallyctl.wait_healthy(client, timeout=60, proc=up)
            tallyctl.wait_lag_zero(client, timeout=120, proc=up, min_input_end=feed.published)
            h.check(len(tallyctl.log_lines(h.path("up.log"), RESUMED_LINE)) == 1,
                    "expected one line saying applying resumes")
            checks.compare_with_model(h, client, w.model, "after the reserve's full disk")
            h.stop_cleanly(up, "tally up after the full disk")
            check_no_abort(h, "up.log")
            h.checkpoint("round 1: below the reserve, then freed")

            # ---- round 2: RocksDB's own ENOSPC ------------------------------------
            up, client = start("up-2.log", 0)
            filler = fill(state, leave=0)
            # What RocksDB gives back meanwhile (a WAL's preallocation, a
            # partition closed after a failed write) is taken at once, or a
            # retry would get through and end the full disk early.
            keep = KeepFull(state)
            deadline = time.monotonic() + 40
            while health(client)[0] != 503 and time.monotonic() < deadline and up.alive():
                feed.publish(2000)
            # More windows against the full disk: WAL writes, flushes and
            # RocksDB's own recovery attempts all meet ENOSPC meanwhile.
            feed.publish(2000)
            tallyctl.wait_until("the new events to reach the applier", lambda: (tallyctl.watermarks(client) or {})
                                .get("lag", 0) > 0 or not up.alive(), timeout=30)
            status, body = health(client)
            log("/healthz with the disk full to the last byte: %s %s" % (status, str(body)[:300]))
            h.check(up.alive(), "tally up exited when RocksDB ran out of space")
            h.check(status == 503, "/healthz with the disk full to the last byte: %s %s" % (status, body))
            reads = [client.get("/v1/posts/%d/counts" % p).status for p in sorted(w.model.post_ids)[:50]]
            h.check(all(s == 200 for s in reads), "reads with the disk full: %s" % sorted(set(reads)))
            # The disk stays full: several retries later (100 ms, 200, 400,
            # 800 ms apart) nothing has been applied, and /healthz still
            # says so. A partition reopened into the few KiB its old WAL
            # gave back would commit a window and flap to 200.
            time.sleep(2.0)  # measuring that nothing moves, not ordering
            status, body = health(client)
            h.check(status == 503, "/healthz 2 s later, the disk still full: %s %s" % (status, body))
            resumed = tallyctl.log_lines(h.path("up-2.log"), RESUMED_LINE)
            h.check(not resumed, "a window committed while the disk was full to the last byte: %s" %
                    (resumed[:1] and resumed[0][:300]))
            errors = tallyctl.log_lines(h.path("up-2.log"), "ERROR")
            h.check(1 <= len(errors) <= 2, "%d ERROR lines for one full disk:\n  %s" % (
                len(errors), "\n  ".join(e[:200] for e in errors[:5])))
            keep.stop()
            os.remove(filler)
            log("filler removed: %.1f MiB free" % (free_bytes(state) / 2**20))
            tallyctl.wait_healthy(client, timeout=60, proc=up)
            checks.caught_up_and_exact(h, client, up, w.model, feed.published,
                                       "after RocksDB's full disk")
            check_no_abort(h, "up-2.log")
            h.checkpoint("round 2: RocksDB out of space, then freed")

            # ---- round 3: a restart on the full disk -------------------------------
            h.stop_cleanly(up, "tally up after RocksDB's full disk")
            up, client = start("up-3.log", RESERVE_MB)
            filler = fill(state, leave=512 << 10)
            feed.publish(1000)
            tallyctl.wait_until("/healthz to say the disk is full", lambda: health(client)[0] == 503,
                                timeout=30, proc=up)
            up.kill9()
            client.close()
            port = tallyctl.free_port()
            argv = [h.tally, "up", "--brokers", brokers, "--state-dir", state, "--http", "127.0.0.1:%d" % port,
                    "--partitions", "4"] + UP_ARGS + ["--min-free-mb", str(RESERVE_MB)]
            up = h.spawn("tally up", argv, "up-4.log")
            client = tallyctl.Http("127.0.0.1:%d" % port)

            def settled():
                if not up.alive():
                    return "exited"
                s, b = health(client)
                return "serving" if s == 503 and "disk" in str(b) else None

            how = tallyctl.wait_until("the restart on a full disk to serve or to exit", settled, timeout=60)
            check_no_abort(h, "up-4.log")
            if how == "exited":
                rc = up.returncode()
                lines = tallyctl.log_lines(h.path("up-4.log"), "tally up: ")
                log("restart on the full disk: exit %s: %s" % (rc, lines[-1:] or "no line"))
                h.check(rc == 1 and lines and "disk" in lines[-1],
                        "restart on a full disk: exit %s (want 1, with a line naming the disk): %s" % (rc, lines))
            else:
                log("restart on the full disk serves reads; /healthz: %s" % str(health(client))[:300])
                r = client.get("/v1/posts/%d/counts" % sorted(w.model.post_ids)[0])
                h.check(r.status == 200, "a read after a restart on the full disk: %r" % r)
            os.remove(filler)
            if how == "exited":
                up, client = start("up-5.log", RESERVE_MB)
            tallyctl.wait_healthy(client, timeout=60, proc=up)
            checks.caught_up_and_exact(h, client, up, w.model, feed.published,
                                       "after a restart on the full disk")
            h.stop_cleanly(up, "tally up at the end")
            h.checkpoint("round 3: restart on the full disk, then freed")

            log("%d records published" % feed.published)
            h.finish_checks("e2e_disk_full")
            log("total %.0f s" % (time.monotonic() - t_begin))
    finally:
        if state is not None:
            unmount(state)


if __name__ == "__main__":
    main()
