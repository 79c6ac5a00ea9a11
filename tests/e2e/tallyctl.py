"""Helpers for tally's end-to-end tests: start `tally broker`, `tally up`,
`tally serve` and `tally replay` as child processes, talk HTTP to them,
publish and consume with kcat, wait for conditions with deadlines.

Rules the tests keep:
- nothing is ordered by a fixed sleep: every wait polls a condition with a
  deadline and says what it was waiting for when the deadline passes;
- every child is stopped on every exit path (SIGTERM, then SIGKILL after a
  grace period; and PR_SET_PDEATHSIG, so that even a SIGKILLed test leaves
  no process behind);
- every child's output goes to a log file in the work directory; the logs
  are printed when a test fails.

Stdlib only (Python 3.8+).
"""

import argparse
import ctypes
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

EVENTS_TOPIC = "tally.events"
DELTAS_TOPIC = "tally.deltas"
DLQ_TOPIC = "tally.dlq"

_T0 = time.monotonic()


def log(msg):
    print("[%7.2fs] %s" % (time.monotonic() - _T0, msg), flush=True)


class TestFailure(Exception):
    """A check of the product failed (as opposed to a harness problem)."""


# ---------------------------------------------------------------------------
# Arguments shared by every e2e test.


def parse_args(description, extra=None):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--tally", required=True, help="path of the tally binary")
    ap.add_argument("--kcat", default=shutil.which("kcat") or "kcat", help="path of kcat")
    ap.add_argument("--work-dir", default=None,
                    help="directory for state and logs (emptied first; default: a new temp dir)")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("TALLY_E2E_SEED", "0")) or None,
                    help="random seed (default: $TALLY_E2E_SEED, else a fixed per-test seed)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory on success")
    if extra:
        extra(ap)
    return ap.parse_args()


# ---------------------------------------------------------------------------
# Ports.


def partition_of(entity, partitions):
    """The deltas partition of an entity id (schemas::PartitionOf); the
    notices and red dots live in partition_of(0, n)."""
    mask = (1 << 64) - 1
    z = (entity + 0x9e3779b97f4a7c15) & mask
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & mask
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & mask
    z ^= z >> 31
    return z % partitions


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# Child processes.

_PR_SET_PDEATHSIG = 1
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover
    _libc = None


def _child_setup():
    # Runs in the child between fork and exec. The child dies with the
    # thread that forked it: spawn only from threads that outlive it.
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


_SYS_TGKILL = 234  # x86_64


def signal_thread(pid, thread_name, sig):
    """Sends `sig` to the thread of process `pid` named `thread_name` (its
    /proc comm), as the kernel may hand a process-directed signal to any
    thread that does not block it. Returns the thread id."""
    for tid in sorted(os.listdir("/proc/%d/task" % pid)):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() != thread_name:
                    continue
        except OSError:
            continue
        if _libc is None or _libc.syscall(_SYS_TGKILL, pid, int(tid), int(sig)) != 0:
            raise TestFailure("tgkill %d/%s %s failed (errno %d)" % (pid, tid, sig, ctypes.get_errno()))
        return int(tid)
    raise TestFailure("process %d has no thread named %r" % (pid, thread_name))


def embedded_broker_pid(state_dir):
    """The pid `tally up`'s embedded broker recorded in STATE_DIR/BROKER, or
    None if there is no record."""
    try:
        with open(os.path.join(state_dir, "BROKER")) as f:
            return int(json.load(f)["pid"])
    except (OSError, ValueError, KeyError):
        return None


def pid_alive(pid):
    """True while `pid` runs (a zombie, exited but not reaped, does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def cpu_seconds(pid):
    """CPU time `pid` has used so far, every thread: utime + stime of
    /proc/<pid>/stat, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_pid(pid, grace=10.0, sig=signal.SIGTERM):
    """Signals a process that is not our child and waits for it to end
    (SIGKILL after `grace` s). True if it was running."""
    if not pid_alive(pid):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while pid_alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.05)
    return True


class Proc:
    """A child process whose stdout and stderr go to `log_path` (appended)."""

    def __init__(self, name, argv, log_path, cwd=None, capture_stdout=False):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        with open(log_path, "a") as f:
            f.write("\n==== %s: %s\n" % (time.strftime("%H:%M:%S"), " ".join(self.argv)))
        self._log = open(log_path, "ab", buffering=0)
        self.stdout_lines = []
        self._stdout_cv = threading.Condition()
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture_stdout else self._log,
            stderr=self._log,
            cwd=cwd,
            preexec_fn=_child_setup,
        )
        self._reader = None
        if capture_stdout:
            self._reader = threading.Thread(target=self._read_stdout, daemon=True)
            self._reader.start()
        log("started %s (pid %d): %s" % (name, self.popen.pid, " ".join(self.argv)))

    def _read_stdout(self):
        for raw in iter(self.popen.stdout.readline, b""):
            self._log.write(raw)
            with self._stdout_cv:
                self.stdout_lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._stdout_cv.notify_all()
        with self._stdout_cv:
            self._stdout_cv.notify_all()

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def returncode(self):
        return self.popen.poll()

    def wait_stdout(self, predicate, timeout):
        """Waits for a stdout line satisfying predicate; returns it, or None
        if the process exits or the deadline passes first."""
        deadline = time.monotonic() + timeout
        with self._stdout_cv:
            seen = 0
            while True:
                for line in self.stdout_lines[seen:]:
                    if predicate(line):
                        return line
                seen = len(self.stdout_lines)
                left = deadline - time.monotonic()
                if left <= 0 or (not self.alive() and not self._reader.is_alive()):
                    return None
                self._stdout_cv.wait(min(left, 0.2))

    def wait(self, timeout):
        """Waits for exit; returns the exit status or None on timeout."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill9(self):
        """SIGKILL and reap: a crash."""
        if self.alive():
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()
        self._close()
        log("SIGKILLed %s (pid %d)" % (self.name, self.pid))

    def stop(self, grace=20.0, sig=signal.SIGTERM):
        """SIGTERM (or `sig`), wait up to `grace` s, then SIGKILL. Returns
        (exit status, True if it stopped within the grace period)."""
        clean = True
        if self.alive():
            try:
                self.popen.send_signal(sig)
            except ProcessLookupError:
                pass
            if self.wait(grace) is None:
                clean = False
                log("%s (pid %d) ignored signal %d for %.0f s; SIGKILL" % (self.name, self.pid, sig, grace))
                self.popen.kill()
                self.popen.wait()
        self._close()
        return self.popen.returncode, clean

    def _close(self):
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self.popen.stdout:
            try:
                self.popen.stdout.close()
            except OSError:
                pass
        try:
            self._log.close()
        except OSError:
            pass


def tail(path, lines=150):
    try:
        with open(path, "rb") as f:
            data = f.read().decode("utf-8", "replace").splitlines()
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)
    cut = data[-lines:]
    head = "... (%d earlier lines in %s)\n" % (len(data) - len(cut), path) if len(data) > len(cut) else ""
    return head + "\n".join(cut)


# ---------------------------------------------------------------------------
# HTTP.


class Reply:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def text(self):
        return self.body.decode("utf-8", "replace")

    def __repr__(self):
        return "HTTP %d %s" % (self.status, self.text()[:300])


class Http:
    """A keep-alive HTTP/1.1 client for one server; reconnects when the
    server closes. Not thread-safe: one per thread."""

    def __init__(self, hostport, timeout=15.0):
        host, _, port = hostport.rpartition(":")
        self.host, self.port, self.timeout = host, int(port), timeout
        self.hostport = hostport
        self._conn = None

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method, path, body=None, headers=None):
        hdrs = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        last = None
        for attempt in range(2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._conn.request(method, path, body=body, headers=hdrs)
                resp = self._conn.getresponse()
                data = resp.read()
                reply = Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
                if resp.will_close:
                    self.close()
                return reply
            except (OSError, http.client.HTTPException) as e:
                # A stale keep-alive connection: retry once on a new one.
                last = e
                self.close()
        raise ConnectionError("%s %s on %s failed: %r" % (method, path, self.hostport, last))

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body=None, headers=None):
        return self.request("POST", path, body=body, headers=headers)

    def try_get(self, path):
        """GET, or None when nothing answers."""
        try:
            return self.get(path)
        except ConnectionError:
            return None


def wait_until(what, predicate, timeout, interval=0.1, proc=None):
    """Polls predicate() until it returns a true value (returned) or the
    deadline passes (TestFailure naming `what`). If `proc` exits meanwhile,
    that is a failure too."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and not proc.alive():
            raise TestFailure("%s exited with status %s while waiting for %s"
                              % (proc.name, proc.returncode(), what))
        if time.monotonic() > deadline:
            raise TestFailure("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def wait_healthy(client, timeout=90, proc=None):
    def ok():
        r = client.try_get("/healthz")
        return r is not None and r.status == 200 and r.json() == {"ok": True}

    wait_until("GET /healthz on %s to answer 200 {\"ok\":true}" % client.hostport, ok, timeout, proc=proc)


def cluster_settled(client, members, partitions=None):
    """True when `client`'s GET /v1/cluster lists `members` members, each
    owning some partition and none restoring; with `partitions`, their
    `owns` together also name each of 0..partitions-1 once."""
    r = client.try_get("/v1/cluster")
    if r is None or r.status != 200:
        return False
    ms = r.json().get("members", [])
    if len(ms) != members or not all(m["owns"] and not m["restoring"] for m in ms):
        return False
    return partitions is None or sorted(p for m in ms for p in m["owns"]) == list(range(partitions))


def cluster_view(client):
    """`client`'s GET /v1/cluster as (generation, ((member, owns), ...)), or
    None if it is not 200: what two reads compare to see the group still."""
    r = client.try_get("/v1/cluster")
    if r is None or r.status != 200:
        return None
    doc = r.json()
    return (doc["generation"], tuple((m["member"], tuple(m["owns"])) for m in doc["members"]))


def watermarks(client):
    """The parsed /v1/watermarks answer, or None if it is not 200."""
    r = client.try_get("/v1/watermarks")
    if r is None or r.status != 200:
        return None
    return r.json()


def metric(client, name):
    """The sum of every sample of metric `name` in GET /metrics (with any
    labels), or None if it is absent."""
    r = client.get("/metrics")
    if r.status != 200:
        return None
    total, seen = 0.0, False
    for line in r.text().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def log_lines(path, needle):
    """The lines of the log at `path` that contain `needle`."""
    with open(path, errors="replace") as f:
        return [l.rstrip("\n") for l in f if needle in l]


def end_offsets(report, topic=EVENTS_TOPIC):
    return sum(p["end_offset"] for p in report["partitions"] if p["topic"] == topic)


def applied_offsets(report, topic=EVENTS_TOPIC):
    return sum(p["applied_offset"] for p in report["partitions"] if p["topic"] == topic)


def wait_lag_zero(client, timeout=120, proc=None, min_input_end=None):
    """Waits until GET /v1/watermarks says "lag":0 twice in a row (and, with
    `min_input_end`, the input topic's end offsets add up to at least that:
    everything published is counted). Returns the last report."""
    last = [None]

    def caught_up():
        w = watermarks(client)
        last[0] = w
        if w is None or w.get("lag") != 0:
            return None
        if min_input_end is not None and end_offsets(w) < min_input_end:
            return None
        w2 = watermarks(client)
        last[0] = w2
        if w2 is None or w2.get("lag") != 0:
            return None
        return w2

    try:
        return wait_until("lag 0 on %s" % client.hostport, caught_up, timeout, interval=0.2, proc=proc)
    except TestFailure as e:
        w = last[0]
        detail = "no 200 answer from /v1/watermarks" if w is None else "last watermarks: lag=%s, lagging %s" % (
            w.get("lag"), [p for p in w.get("partitions", []) if p.get("lag")][:8])
        raise TestFailure("%s; %s" % (e, detail)) from None


# ---------------------------------------------------------------------------
# kcat.


def publish(kcat, brokers, records, topic=EVENTS_TOPIC, timeout=180, keyed=True):
    """Publishes (key, value) pairs with kcat, keyed (`-K '\\t'`), with the
    idempotent producer; returns when kcat has flushed everything. With
    keyed=False, `records` are values, published without a key, each on a
    partition the producer picks at random (its sticky partitioner, which
    would put a burst on one partition, off)."""
    lines = []
    for record in records:
        key, value = record if keyed else ("", record)
        if "\t" in key or "\n" in key or "\n" in value:
            raise ValueError("key/value not publishable as a kcat line: %r %r" % (key, value))
        lines.append("%s\t%s\n" % (key, value) if keyed else "%s\n" % value)
    data = "".join(lines).encode()
    argv = [kcat, "-P", "-b", brokers, "-t", topic, "-X", "enable.idempotence=true", "-q"]
    # Keyed as tally keys its own records (the HTTP resets: murmur2, as the
    # Java client), so a read and a reset of one user share a partition and
    # keep their order; librdkafka's default (CRC32) would split them.
    argv += ["-K", "\\t", "-X", "partitioner=murmur2_random"] if keyed else [
        "-X", "sticky.partitioning.linger.ms=0"]
    try:
        res = subprocess.run(argv, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             timeout=timeout, preexec_fn=_child_setup)
    except subprocess.TimeoutExpired:
        raise TestFailure("kcat did not publish %d records within %d s" % (len(records), timeout))
    if res.returncode != 0:
        raise TestFailure("kcat -P exited %d: %s" % (res.returncode, res.stderr.decode(errors="replace")[-2000:]))


def consume(kcat, brokers, topic, fmt, timeout=60):
    """Every record of `topic` from the beginning to the current end,
    formatted by kcat's -f `fmt`. Returns stdout as text."""
    argv = [kcat, "-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-q", "-f", fmt]
    try:
        res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                             preexec_fn=_child_setup)
    except subprocess.TimeoutExpired:
        raise TestFailure("kcat -C -t %s did not reach the end within %d s" % (topic, timeout))
    if res.returncode != 0:
        raise TestFailure("kcat -C -t %s exited %d: %s" % (topic, res.returncode,
                                                           res.stderr.decode(errors="replace")[-2000:]))
    return res.stdout.decode("utf-8", "replace")


# ---------------------------------------------------------------------------
# The harness: a work directory, the children, cleanup, logs on failure.


# A wrk script that GETs `paths` in turn: WRK_PATHS_SCRIPT % '"/a", "/b"'.
WRK_PATHS_SCRIPT = """
local paths = {%s}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i %% #paths) + 1])
end
"""


def wrk(url, script, seconds, connections, cpus=None):
    """(requests, non-2xx answers) of one run of wrk (2 threads) with
    `script`; on `cpus` (taskset) if given."""
    argv = ["wrk", "-t", "2", "-c", str(connections), "-d", "%ds" % seconds, "-s", script, url]
    if cpus is not None:
        argv = ["taskset", "-c", cpus] + argv
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    m = re.search(r"(\d+) requests in", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return int(m.group(1)), int(non2xx.group(1)) if non2xx else 0


class Harness:
    def __init__(self, args, name, default_seed):
        self.args = args
        self.name = name
        self.tally = os.path.abspath(args.tally)
        self.kcat = args.kcat
        self.seed = args.seed if args.seed is not None else default_seed
        self.rng = random.Random(self.seed)
        if args.work_dir:
            self.work = os.path.abspath(args.work_dir)
            shutil.rmtree(self.work, ignore_errors=True)
            os.makedirs(self.work)
            self._temp = False
        else:
            self.work = tempfile.mkdtemp(prefix="tally-e2e-%s-" % name)
            self._temp = True
        self.procs = []
        self.logs = []
        self.failures = []
        self._reported = 0
        self._sections = []

    # -- lifecycle ----------------------------------------------------------
    def __enter__(self):
        log("%s: seed %d (rerun with --seed %d), work dir %s" % (self.name, self.seed, self.seed, self.work))
        for tool in (self.tally, self.kcat):
            if not shutil.which(tool):
                raise TestFailure("%s is not an executable" % tool)

        def on_signal(signum, frame):
            raise KeyboardInterrupt("signal %d" % signum)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        return self

    def __exit__(self, exc_type, exc, tb):
        failed = exc_type is not None
        for p in reversed(self.procs):
            try:
                if p.alive():
                    p.stop(grace=15)
            except Exception as e:  # keep stopping the others
                log("stopping %s: %r" % (p.name, e))
        # `tally up`'s embedded broker runs in a session of its own and
        # outlives a SIGKILLed `tally up` by design; stop any left running.
        for root, _, files in os.walk(self.work):
            if "BROKER" in files:
                pid = embedded_broker_pid(root)
                if pid is not None and stop_pid(pid, grace=10):
                    log("stopped the embedded broker of %s (pid %d)" % (root, pid))
        if failed:
            print("\n======== FAILED: %s (seed %d) ========" % (self.name, self.seed))
            if exc_type is TestFailure:
                print(str(exc))
            else:
                traceback.print_exception(exc_type, exc, tb)
            for path in self.logs:
                print("\n-------- %s --------" % path)
                print(tail(path))
            print("\n======== FAILED: %s (seed %d); work dir kept: %s ========" % (self.name, self.seed, self.work))
            sys.stdout.flush()
            raise SystemExit(1)
        if self.args.keep:
            log("work dir kept: %s" % self.work)
        elif self._temp:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            # An explicit work dir keeps the children's logs, not the state.
            for entry in os.listdir(self.work):
                if os.path.isdir(os.path.join(self.work, entry)):
                    shutil.rmtree(os.path.join(self.work, entry), ignore_errors=True)
            log("logs kept in %s" % self.work)
        log("%s: PASSED" % self.name)
        return False

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def spawn(self, name, argv, log_name, capture_stdout=False):
        path = self.path(log_name)
        if path not in self.logs:
            self.logs.append(path)
        p = Proc(name, argv, path, cwd=self.work, capture_stdout=capture_stdout)
        self.procs.append(p)
        return p

    # -- checks ----------------------------------------------------------------
    def check(self, ok, message):
        """Records a failed check (all are reported at the end)."""
        if not ok:
            self.failures.append(message)
            if len(self.failures) <= 50:
                log("CHECK FAILED: %s" % message)
        return ok

    def stop_cleanly(self, proc, what=None, grace=30):
        """SIGTERM to `proc`; checks it exited 0 within `grace` s. Returns the code."""
        rc, clean = proc.stop(grace=grace)
        self.check(clean and rc == 0, "%s on SIGTERM: exit %s%s"
                   % (what or proc.name, rc, "" if clean else " (SIGKILL)"))
        return rc

    def checkpoint(self, what):
        """Logs how a group of checks went; failures stay recorded for
        finish_checks(), so one run reports everything that is wrong."""
        n = len(self.failures) - self._reported
        self._reported = len(self.failures)
        if n:
            log("%s: %d check(s) FAILED" % (what, n))
            self._sections.append("%s: %d failed" % (what, n))
        else:
            log("%s: all checks passed" % what)
            self._sections.append("%s: ok" % what)

    def finish_checks(self, what):
        """Raises TestFailure listing every failed check, if any."""
        if self._reported != len(self.failures):
            self.checkpoint(what)
        if self.failures:
            shown = "\n  ".join(self.failures[:80])
            more = "" if len(self.failures) <= 80 else "\n  ... and %d more" % (len(self.failures) - 80)
            raise TestFailure("%d check(s) failed.\nSections:\n  %s\nFailures:\n  %s%s" % (
                len(self.failures), "\n  ".join(self._sections), shown, more))
        log("%s: all checks passed" % what)

    # -- tally processes -------------------------------------------------------
    def start_broker(self, partitions=4, attempts=3, log_name="broker.log", port=None, log_dir=None, extra=()):
        """`tally broker --port P --partitions N --log-dir D`; returns (proc,
        bootstrap). The log dir defaults to one named after `log_name`
        (broker.log: broker-data), so a broker started again with the same
        name and port goes on with its log, as a restarted Kafka broker."""
        log_dir = log_dir or self.path(os.path.splitext(log_name)[0] + "-data")
        fixed_port = port
        for attempt in range(attempts):
            port = fixed_port or free_port()
            p = self.spawn("tally broker", [self.tally, "broker", "--port", port, "--partitions", partitions,
                                            "--log-dir", log_dir] + list(extra),
                           log_name, capture_stdout=True)
            line = p.wait_stdout(lambda l: l.startswith("bootstrap: "), timeout=60)
            if line:
                bootstrap = line.split(" ", 1)[1].strip()
                log("broker ready at %s" % bootstrap)
                return p, bootstrap
            rc, _ = p.stop(grace=5)
            log("tally broker on port %d did not print its bootstrap address (exit %s); retrying" % (port, rc))
        raise TestFailure("tally broker did not start (see %s)" % log_name)

    def start_up(self, brokers, state_dir, http_port, partitions=4, log_name="up.log", extra=()):
        """`tally up --brokers B --state-dir D --http 127.0.0.1:H
        --partitions N`, waited for until /healthz answers."""
        argv = [self.tally, "up", "--brokers", brokers, "--state-dir", state_dir,
                "--http", "127.0.0.1:%d" % http_port, "--partitions", partitions] + list(extra)
        p = self.spawn("tally up", argv, log_name)
        client = Http("127.0.0.1:%d" % http_port)
        wait_healthy(client, timeout=120, proc=p)
        log("tally up (pid %d) healthy on :%d" % (p.pid, http_port))
        return p, client

    def start_serve(self, brokers, state_dir, http_port, log_name="serve.log"):
        argv = [self.tally, "serve", "--state-dir", state_dir, "--http", "127.0.0.1:%d" % http_port]
        if brokers:
            argv += ["--brokers", brokers]
        p = self.spawn("tally serve", argv, log_name)
        client = Http("127.0.0.1:%d" % http_port)
        wait_healthy(client, timeout=60, proc=p)
        log("tally serve (pid %d) healthy on :%d" % (p.pid, http_port))
        return p, client

    def replay(self, brokers, state_dir, from_input=False, timeout=240, log_name="replay.log", extra_args=()):
        """Runs `tally replay` to completion; TestFailure unless it exits 0."""
        argv = [self.tally, "replay", "--brokers", brokers, "--state-dir", state_dir]
        if from_input:
            argv.append("--from-input")
        argv += list(extra_args)
        p = self.spawn("tally replay", argv, log_name)
        t0 = time.monotonic()
        rc = p.wait(timeout)
        if rc is None:
            p.stop(grace=10)
            raise TestFailure("%s did not finish within %d s" % (" ".join(argv), timeout))
        p.stop()
        if rc != 0:
            raise TestFailure("%s exited %d (see %s)" % (" ".join(argv), rc, log_name))
        log("tally replay%s finished in %.1f s" % (" --from-input" if from_input else "", time.monotonic() - t0))
