#!/usr/bin/env python3
"""End to end, a cluster member whose `--http` port is taken: it must fail
its start before the consumer groups ever see it. `tally broker` (4
partitions) and one `tally up --brokers` member A, settled (it owns every
partition); then member B is started with `--http` on a port another
socket already listens on. B must exit non-zero within seconds, saying so
in one ERROR line that names the address, without having joined anything
(its log shows no group join, no directory record); and A must see
nothing: through the start and 12 s after B's exit, A's `/v1/cluster`
keeps its generation, its one member and its partitions, and A's log gains
no line of a rebalance (assigned, revoked, owned, given up). Last, the
same for `tally serve --advertise`'s port, which must fail alike.

  python3 e2e_http_port_taken.py --tally build/tally [--seed N] [--work-dir DIR]
"""

import os
import re
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tallyctl  # noqa: E402
from tallyctl import log  # noqa: E402

# What a member's router and applier log when the groups move partitions.
REBALANCE = re.compile(r"assigned |revoked |: owned|given up|handing over|joining the group|"
                       r"standby until its next owner|its new owner has caught up")
# How long A is watched after B's exit: a join on the embedded broker
# takes about 10 s to settle and a leave 5 s (docs/cluster.md), so a member
# that had joined shows within this.
WATCH_S = 12.0


def lines_of(path):
    with open(path, errors="replace") as f:
        return f.read().splitlines()


def occupy(port):
    """A socket listening on 127.0.0.1:port, as another server would."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", port))
    s.listen(16)
    return s


def failed_start(h, proc, log_name, port, what):
    """Checks that `proc` exits non-zero at once with one ERROR line naming
    127.0.0.1:port."""
    rc = proc.wait(30)
    h.check(rc is not None and rc != 0, "%s with its port taken: exit %s (want non-zero within 30 s)"
            % (what, rc))
    errors = [l for l in lines_of(h.path(log_name)) if "ERROR" in l]
    address = "127.0.0.1:%d" % port
    h.check(len(errors) == 1 and address in errors[0],
            "%s with its port taken: want one ERROR line naming %s, got %r" % (what, address, errors))
    return lines_of(h.path(log_name))


def main():
    args = tallyctl.parse_args(__doc__)
    with tallyctl.Harness(args, "e2e_http_port_taken", default_seed=7) as h:
        broker, brokers = h.start_broker(partitions=4)
        a, ca = h.start_up(brokers, h.path("a"), tallyctl.free_port(), log_name="a.log")
        tallyctl.wait_until("member A to own every partition", lambda: tallyctl.cluster_settled(ca, 1, 4),
                            60, proc=a)
        before = tallyctl.cluster_view(ca)
        log("A settled: generation %d, %s" % (before[0], before[1]))
        a_lines = len(lines_of(h.path("a.log")))

        taken_port = tallyctl.free_port()
        holder = occupy(taken_port)
        try:
            argv = [h.tally, "up", "--brokers", brokers, "--state-dir", h.path("b"), "--http",
                    "127.0.0.1:%d" % taken_port, "--partitions", "4"]
            t0 = time.monotonic()
            b = h.spawn("tally up b", argv, "b.log")
            views = []
            # A is watched from B's start to WATCH_S after B's exit.
            deadline = None
            while True:
                view = tallyctl.cluster_view(ca)
                if view is not None:
                    views.append(view)
                if deadline is None and not b.alive():
                    deadline = time.monotonic() + WATCH_S
                    log("B exited (status %s) after %.2f s; watching A for %.0f s"
                        % (b.returncode(), time.monotonic() - t0, WATCH_S))
                if deadline is not None and time.monotonic() > deadline:
                    break
                if deadline is None and time.monotonic() - t0 > 30:
                    break
                time.sleep(0.1)
            b_lines = failed_start(h, b, "b.log", taken_port, "tally up --brokers")
        finally:
            holder.close()
        joined = [l for l in b_lines if re.search(r"joining the group|member .* of group|routing |"
                                                   r"applying from offset", l)]
        h.check(not joined, "B joined something before it failed: %r" % joined[:3])
        changed = sorted(set(v for v in views if v != before))
        h.check(not changed, "A's /v1/cluster changed while B started and failed: %s -> %s"
                % (before, changed[:3]))
        moves = [l for l in lines_of(h.path("a.log"))[a_lines:] if REBALANCE.search(l)]
        h.check(not moves, "A's log shows a rebalance around B's failed start: %r" % moves[:5])
        h.check(tallyctl.cluster_settled(ca, 1, 4) and tallyctl.cluster_view(ca) == before,
                "A still owns every partition alone, same generation: %s" % (tallyctl.cluster_view(ca),))
        h.checkpoint("a member whose --http port is taken fails before the groups see it")

        # tally serve beside a member: the same refusal at once.
        taken_port = tallyctl.free_port()
        holder = occupy(taken_port)
        try:
            argv = [h.tally, "serve", "--brokers", brokers, "--state-dir", h.path("a"), "--http",
                    "127.0.0.1:%d" % taken_port, "--advertise", "http://127.0.0.1:%d" % taken_port]
            s = h.spawn("tally serve", argv, "serve.log")
            failed_start(h, s, "serve.log", taken_port, "tally serve --advertise")
        finally:
            holder.close()
        h.checkpoint("tally serve whose --http port is taken fails at once")

        h.stop_cleanly(a, "A")
        broker.stop()
        h.finish_checks("e2e_http_port_taken")


if __name__ == "__main__":
    main()
