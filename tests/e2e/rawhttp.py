"""HTTP/1.1 over raw sockets, for the tests of tally's HTTP transport:
no HTTP library, so every byte on the wire is the test's choice, and an
answer is parsed as it comes (a `100 Continue` is an answer too).

A test imports it beside tallyctl and checks; it holds no checks itself.
"""

import json
import re
import socket
import time

HOST = "127.0.0.1"


class Resp:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "HTTP %d %r" % (self.status, self.body[:200])


def connect(port, source=None, timeout=5.0, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: the window follows
    if source:
        s.bind((source, 0))
    s.settimeout(timeout)
    s.connect((HOST, port))
    return s


def read_responses(sock, want=None, timeout=3.0):
    """Reads answers until `want` of them arrived, the peer closed, or
    `timeout` passed. Returns (responses, closed, leftover bytes)."""
    buf = b""
    out = []
    closed = False
    deadline = time.monotonic() + timeout
    while want is None or len(out) < want:
        # Parse what is there.
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end].decode("latin-1").split("\r\n")
            m = re.match(r"HTTP/1\.[01] (\d{3})", head[0])
            if not m:
                return out, closed, buf
            headers = {}
            for line in head[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0"))
            if len(buf) < end + 4 + n:
                break
            out.append(Resp(int(m.group(1)), headers, buf[end + 4:end + 4 + n]))
            buf = buf[end + 4 + n:]
        if (want is not None and len(out) >= want) or closed:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except OSError:
            closed = True
            break
        if not chunk:
            closed = True
        buf += chunk
    return out, closed, buf


def send_all(sock, data):
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False  # the server may close before reading everything


def closed_by_peer(sock, timeout):
    """True if the server closes `sock` (EOF or reset) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except socket.timeout:
            return False
        except OSError:
            return True
    return False


def request(method, target, body=None, headers=None):
    h = {"Host": "tally"}
    h.update(headers or {})
    if body is not None:
        if "Transfer-Encoding" not in h:
            h.setdefault("Content-Length", str(len(body)))
        h.setdefault("Content-Type", "application/json")
    data = ("%s %s HTTP/1.1\r\n" % (method, target)).encode("latin-1")
    data += b"".join(("%s: %s\r\n" % kv).encode("latin-1") for kv in h.items())
    return data + b"\r\n" + (body or b"")


def is_error_shape(r, status, code=None):
    if r is None or r.status != status:
        return False
    try:
        body = r.json()
    except ValueError:
        return False
    err = body.get("error") if isinstance(body, dict) else None
    return (isinstance(err, dict) and set(body) == {"error"} and set(err) == {"code", "message"}
            and isinstance(err["code"], str) and re.fullmatch(r"[a-z][a-z0-9_]*", err["code"]) is not None
            and (code is None or err["code"] == code)
            and isinstance(err["message"], str) and "\n" not in err["message"]
            and r.headers.get("content-type", "").startswith("application/json"))
