#!/usr/bin/env python3
"""ferry's own test HTTP server, with fault injection.

Serves a directory over HTTP/1.1 (keep-alive) with Range, If-Range and strong ETags, like nginx,
and misbehaves on request. Options:

  --log FILE                 append one JSON line per request: method, path, headers that matter
                             (Authorization, Range, If-Range, If-None-Match, Expect), status
  --redirect PREFIX=URL      answer GETs under PREFIX with 302 to URL + the rest of the path
  --require-basic USER:PASS  answer 401 unless the request carries these basic credentials
  --faults FILE              JSON read on every request: {"<path>": {fault: value, ...}, "*": {...}}
  --dav                      accept WebDAV writes (PUT, MKCOL, MOVE, DELETE, PROPFIND) under --directory
  --digests                  answer Want-Repr-Digest with Repr-Digest (RFC 9530) of the stored bytes

Faults (per path, "*" for all):
  "rate": N              send the body at about N bytes per second (slow drip)
  "reset_after": N       close the connection abruptly after N body bytes (connection reset)
  "truncate_after": N    announce the full length but close cleanly after N body bytes
  "statuses": [503, ...] answer the first requests for the path with these statuses, in order
  "retry_after": S       with "statuses": add Retry-After: S
  "reason": "text"       with "statuses": use this reason phrase (control bytes and all)
  "body": "text"         with "statuses": answer with this body (an S3 <Error> document, say)
  "header_bytes": N      add a response header N bytes long (X-Padding)
  "ignore_range": true   answer range requests with 200 and the whole body
  "wrong_range": N       answer range requests with a Content-Range starting N bytes off
  "no_multipart": true   answer a request for several ranges as one for the first of them only
                         (its Content-Range says so), as a server without multipart/byteranges
  "multipart_swap": true answer a request for several ranges with its first two parts swapped
  "log_sent": true       log {"sent": N, "sent_path": path} once a body ends (sent whole or cut
                         short by the client): the bytes that really left
  "flip_ranges": N       flip the first byte of the body of the first N answers to a range
                         request for the path (-1: of every one), as a cache serving bad bytes
  "etag": "\"x\""        use this ETag (change it to simulate a changed file)
  "no_validators": true  send neither ETag nor Last-Modified
  "no_etag": true        send Last-Modified only (as Python's http.server does)
  "stall_after": N       after N body bytes, send nothing more (until the client gives up)
  "delay": S             wait S seconds (a fraction allowed) before answering: a far or busy server
                         (logged as "concurrent": how many requests were waiting out a delay, it
                         included, when it began)
  "date_offset": S       the Date header S seconds off the real time (a server whose clock is wrong,
                         or a client's)
  "hang": true           accept the request (a GET, or a WebDAV PUT's body) and never answer it
                         (logged with status 0), as a hung proxy does, until the client gives up
  "only_first": N        apply reset_after, truncate_after and stall_after to the first N
                         requests for the path only
  "store_truncate": N    WebDAV: a file PUT or MOVEd to the path keeps only its first N bytes
                         (and the answer says nothing of it)
  "store_flip": true     WebDAV: a file PUT or MOVEd to the path has its first byte flipped
  "move_noop": true      WebDAV: a MOVE to the path answers 201 and moves nothing
  "move_elsewhere": "S"  WebDAV: a MOVE to the path moves the file to the path + S instead
  "move_then_reset": true  WebDAV: a MOVE to the path moves it, then resets the connection instead of
                         answering (the client never learns that the move happened)
  "gets_fail_after_move": N  after a MOVE to the path, the next N GETs of it answer 503
  "move_stall": N        WebDAV: the first N MOVEs to the path answer 201 with a 10-byte body
                         announced, send none of it and never finish (nothing is moved)
  "log_overlap": true    when a body has been sent, log {"method": "BODY", "path", "overlapped"}:
                         whether another body was being sent at any moment meanwhile; a string
                         (".bin") counts only bodies whose path ends with it, so a manifest fetched
                         beside a file transfer is not an overlap

Started and stopped by the integration tests and by the quickstart, on 127.0.0.1 only.
"""
import argparse
import base64
import email.utils
import hashlib
import shutil
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    options = None
    lock = threading.Lock()
    counts = {}
    sending = {}  # bodies being sent: id -> [overlapped]
    failing_gets = {}  # path -> GETs still to answer 503 (gets_fail_after_move)
    delaying = 0  # requests waiting out a "delay" now


def load_faults(path):
    if not State.options.faults:
        return {}
    try:
        with open(State.options.faults) as f:
            table = json.load(f)
    except (OSError, ValueError):
        return {}
    merged = dict(table.get("*", {}))
    merged.update(table.get(path, {}))
    return merged


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    date_offset = 0

    def date_time_string(self, timestamp=None):
        return super().date_time_string((time.time() if timestamp is None else timestamp) + self.date_offset)

    def record(self, status):
        if not State.options.log:
            return
        entry = {"method": self.command, "path": self.path, "status": status,
                 "authorization": self.headers.get("Authorization"), "range": self.headers.get("Range"),
                 "if_range": self.headers.get("If-Range"), "if_none_match": self.headers.get("If-None-Match"),
                 "expect": self.headers.get("Expect")}
        if getattr(self, "concurrent", None):
            entry["concurrent"] = self.concurrent
        with State.lock, open(State.options.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def simple(self, status, headers=None, body=b"", reason=None):
        self.record(status)
        self.send_response(status, reason)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    # WebDAV, enough for a push: a fault per destination path can make the server lie about what
    # it stored or moved.
    def local(self, url_path):
        path = urllib.parse.unquote(urllib.parse.urlsplit(url_path).path)
        full = os.path.realpath(os.path.join(State.options.directory, path.lstrip("/")))
        root = os.path.realpath(State.options.directory)
        if full != root and not full.startswith(root + os.sep):
            return None, path
        return full, path

    def dav_allowed(self):
        if not State.options.dav:
            self.simple(405, {}, b"no WebDAV here\n")
            return False
        return True

    def do_PUT(self):
        if not self.dav_allowed():
            return
        full, path = self.local(self.path)
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length) if length > 0 else b""
        if load_faults(path).get("hang"):
            self.record(0)
            while self.connection.recv(65536):
                pass
            self.close_connection = True
            return
        if full is None:
            return self.simple(403)
        if not os.path.isdir(os.path.dirname(full)):
            return self.simple(409, {}, b"no parent collection\n")
        existed = os.path.exists(full)
        with open(full, "wb") as f:
            f.write(body)
        self.damage(full, load_faults(path))
        self.simple(204 if existed else 201)

    def damage(self, full, faults):
        """Stores other bytes than were sent, as a broken or lying server would."""
        if "store_truncate" in faults:
            os.truncate(full, int(faults["store_truncate"]))
        if faults.get("store_flip") and os.path.getsize(full) > 0:
            with open(full, "r+b") as f:
                first = f.read(1)
                f.seek(0)
                f.write(bytes([first[0] ^ 0xFF]))

    def do_MKCOL(self):
        if not self.dav_allowed():
            return
        full, _ = self.local(self.path.rstrip("/"))
        if full is None:
            return self.simple(403)
        if os.path.exists(full):
            return self.simple(405)
        if not os.path.isdir(os.path.dirname(full)):
            return self.simple(409)
        os.mkdir(full)
        self.simple(201)

    def do_DELETE(self):
        if not self.dav_allowed():
            return
        full, _ = self.local(self.path.rstrip("/"))
        if full is None or full == os.path.realpath(State.options.directory):
            return self.simple(403)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        elif os.path.lexists(full):
            os.unlink(full)
        else:
            return self.simple(404)
        self.simple(204)

    def do_MOVE(self):
        if not self.dav_allowed():
            return
        source, _ = self.local(self.path)
        target, target_path = self.local(self.headers.get("Destination", ""))
        if source is None or target is None:
            return self.simple(403)
        if not os.path.exists(source):
            return self.simple(404)
        if not os.path.isdir(os.path.dirname(target)):
            return self.simple(409)
        faults = load_faults(target_path)
        existed = os.path.exists(target)
        if faults.get("move_stall"):
            with State.lock:
                n = State.counts.get(("MOVE", target_path), 0)
                State.counts[("MOVE", target_path)] = n + 1
            if n < int(faults["move_stall"]):
                self.record(201)
                self.send_response(201)
                self.send_header("Content-Length", "10")
                self.end_headers()
                self.wfile.flush()
                time.sleep(3600)
                return
        if faults.get("move_noop"):
            return self.simple(201)
        if "move_elsewhere" in faults:
            target = target + faults["move_elsewhere"]
        if os.path.isdir(target) and not os.path.isdir(source):
            return self.simple(409)
        os.replace(source, target)
        self.damage(target, faults)
        if faults.get("gets_fail_after_move"):
            with State.lock:
                State.failing_gets[target_path] = int(faults["gets_fail_after_move"])
        if faults.get("move_then_reset"):
            self.record(0)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.close_connection = True
            self.connection.close()
            return
        self.simple(204 if existed else 201)

    def do_PROPFIND(self):
        if not self.dav_allowed():
            return
        length = int(self.headers.get("Content-Length", "0"))
        if length > 0:
            self.rfile.read(length)
        full, path = self.local(self.path)
        if full is None or not os.path.exists(full):
            return self.simple(404)
        names = [""]
        if os.path.isdir(full) and self.headers.get("Depth", "infinity") != "0":
            names += sorted(os.listdir(full))
        base = self.path if self.path.endswith("/") or not os.path.isdir(full) else self.path + "/"
        responses = "".join("<D:response><D:href>%s</D:href><D:propstat><D:prop/><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>"
                            % (base + urllib.parse.quote(n)) for n in names)
        body = ('<?xml version="1.0" encoding="utf-8"?><D:multistatus xmlns:D="DAV:">%s</D:multistatus>' % responses).encode()
        self.simple(207, {"Content-Type": "application/xml; charset=utf-8"}, body)

    def do_GET(self):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        admitted = self.admit(path)
        if admitted is None:
            return
        faults, n = admitted

        full = os.path.realpath(os.path.join(State.options.directory, path.lstrip("/")))
        if not full.startswith(os.path.realpath(State.options.directory)) or not os.path.isfile(full):
            return self.simple(404, {}, b"not found\n")
        st = os.stat(full)
        size = st.st_size
        etag = faults.get("etag", '"%x-%x-%x"' % (st.st_mtime_ns, size, st.st_ino))
        last_modified = email.utils.formatdate(st.st_mtime, usegmt=True)
        validators = {} if faults.get("no_validators") else {"ETag": etag, "Last-Modified": last_modified}
        if faults.get("no_etag"):
            validators.pop("ETag", None)

        if not faults.get("no_validators") and self.headers.get("If-None-Match") == etag:
            return self.simple(304, validators)

        start, end, status = 0, size, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and "," in rng and not faults.get("ignore_range") and not faults.get("no_multipart"):
            return self.multipart(full, size, rng[6:], validators, faults, path)
        if rng and rng.startswith("bytes=") and "," in rng and faults.get("no_multipart"):
            rng = rng.split(",")[0]
        if rng and rng.startswith("bytes=") and not faults.get("ignore_range"):
            if_range = self.headers.get("If-Range")
            if if_range is None or if_range in (etag, last_modified):
                first, _, last = rng[6:].partition("-")
                if first.isdigit():
                    start = int(first)
                    if start >= size:
                        return self.simple(416, {"Content-Range": "bytes */%d" % size})
                    if last.isdigit():
                        end = min(size, int(last) + 1)
                    status = 206
        headers = dict(validators)
        headers["Accept-Ranges"] = "bytes"
        if State.options.digests and self.headers.get("Want-Repr-Digest"):
            with open(full, "rb") as f:
                digest = base64.b64encode(hashlib.sha256(f.read()).digest()).decode()
            headers["Repr-Digest"] = "sha-256=:%s:" % digest
        if status == 206:
            shown = start + int(faults.get("wrong_range", 0))
            headers["Content-Range"] = "bytes %d-%d/%d" % (shown, end - 1, size)
        self.record(status)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(end - start))
        if "header_bytes" in faults:
            self.send_header("X-Padding", "p" * int(faults["header_bytes"]))
        self.end_headers()
        if self.command == "HEAD":
            return
        if "only_first" in faults and n >= faults["only_first"]:
            faults = {k: v for k, v in faults.items() if k not in ("reset_after", "truncate_after", "stall_after")}
        flips = faults.get("flip_ranges", 0)
        if status == 206 and flips:
            with State.lock:
                done = State.counts.get(("FLIP", path), 0)
                State.counts[("FLIP", path)] = done + 1
            faults = dict(faults, flip=flips < 0 or done < flips)
        self.send_body(full, start, end, faults)

    def admit(self, path):
        """Answers a GET redirected, refused or failed by a fault (None); else (its faults, earlier GETs)."""
        for rule in State.options.redirect:
            prefix, target = rule.split("=", 1)
            if self.path.startswith(prefix):
                return self.simple(302, {"Location": target + self.path[len(prefix):]})
        if State.options.require_basic:
            expected = "Basic " + base64.b64encode(State.options.require_basic.encode()).decode()
            if self.headers.get("Authorization") != expected:
                return self.simple(401, {"WWW-Authenticate": 'Basic realm="ferry"'})
        faults = load_faults(path)
        with State.lock:
            n = State.counts.get(path, 0)
            State.counts[path] = n + 1
            failing = State.failing_gets.get(path, 0)
            if failing:
                State.failing_gets[path] = failing - 1
        self.date_offset = float(faults.get("date_offset", 0))
        self.concurrent = None
        if faults.get("delay"):
            with State.lock:
                State.delaying += 1
                self.concurrent = State.delaying
            time.sleep(float(faults["delay"]))
            with State.lock:
                State.delaying -= 1
        if faults.get("hang"):
            self.record(0)
            # Nothing is ever sent: wait for the client to give up and close.
            while self.connection.recv(65536):
                pass
            self.close_connection = True
            return None
        if failing:
            return self.simple(503, {}, b"injected failure after a move\n")
        statuses = faults.get("statuses", [])
        if n < len(statuses):
            headers = {"Retry-After": str(faults["retry_after"])} if "retry_after" in faults else {}
            body = faults["body"].encode() if "body" in faults else b"injected failure\n"
            return self.simple(statuses[n], headers, body, faults.get("reason"))
        return faults, n

    def multipart(self, full, size, spec, validators, faults, path):
        """A 206 multipart/byteranges answer to a request for several ranges (at most 200)."""
        ranges = []
        for item in spec.split(",")[:200]:
            a, _, b = item.strip().partition("-")
            if not (a.isdigit() and b.isdigit()) or int(a) > int(b) or int(a) >= size:
                return self.simple(416, {"Content-Range": "bytes */%d" % size})
            ranges.append((int(a), min(int(b), size - 1)))
        if faults.get("multipart_swap") and len(ranges) >= 2:
            ranges[0], ranges[1] = ranges[1], ranges[0]
        boundary = "ferrytestboundary"
        body = b""
        flips = faults.get("flip_ranges", 0)
        with State.lock:
            done = State.counts.get(("FLIP", path), 0)
            State.counts[("FLIP", path)] = done + 1
        flip = flips and (flips < 0 or done < flips)
        with open(full, "rb") as f:
            for k, (a, b) in enumerate(ranges):
                f.seek(a)
                data = f.read(b - a + 1)
                if k == 0 and flip:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                body += ("\r\n--%s\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes %d-%d/%d\r\n\r\n"
                         % (boundary, a, b, size)).encode() + data
        body += ("\r\n--%s--\r\n" % boundary).encode()
        self.record(206)
        self.send_response(206)
        for k, v in validators.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "multipart/byteranges; boundary=" + boundary)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # Paced like a single range's body under "rate".
        rate, sent, began = faults.get("rate"), 0, time.monotonic()
        step = 16384 if rate else len(body)
        try:
            while sent < len(body):
                self.wfile.write(body[sent:sent + step])
                sent += len(body[sent:sent + step])
                if rate and sent < len(body):
                    ahead = sent / rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if faults.get("log_sent") and State.options.log:
            with State.lock, open(State.options.log, "a") as f:
                f.write(json.dumps({"sent": sent, "sent_path": self.path}) + "\n")

    def send_body(self, full, start, size, faults):
        track = faults.get("log_overlap")
        counted = track is True or (isinstance(track, str) and self.path.endswith(track))
        me = object()
        overlapped = [False]
        if counted:
            with State.lock:
                overlapped[0] = bool(State.sending)
                for other in State.sending.values():
                    other[0] = True
                State.sending[id(me)] = overlapped

        def done():
            with State.lock:
                State.sending.pop(id(me), None)
        sent = [0]
        try:
            self.send_bytes(full, start, size, faults, done, sent)
        finally:
            done()
            if faults.get("log_sent") and State.options.log:
                with State.lock, open(State.options.log, "a") as f:
                    f.write(json.dumps({"sent": sent[0], "sent_path": self.path}) + "\n")
            if counted and State.options.log:
                with State.lock, open(State.options.log, "a") as f:
                    f.write(json.dumps({"method": "BODY", "path": self.path, "overlapped": overlapped[0]}) + "\n")

    def send_bytes(self, full, start, size, faults, done=lambda: None, counted=None):
        """done() is called before the last piece is written: the client can start its next
        request only after it has that piece, so a busy host that runs this thread late never
        makes the next body look overlapped."""
        rate = faults.get("rate")
        reset_after = faults.get("reset_after")
        truncate_after = faults.get("truncate_after")
        stall_after = faults.get("stall_after")
        sent = 0
        chunk = 16384 if rate else 262144
        with open(full, "rb") as f:
            f.seek(start)
            began = time.monotonic()
            while start + sent < size:
                limit = min(chunk, size - start - sent)
                for cut in (reset_after, truncate_after, stall_after):
                    if cut is not None:
                        limit = min(limit, max(0, cut - sent))
                if limit == 0:
                    if reset_after is not None and sent >= reset_after:
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    if stall_after is not None and sent >= stall_after:
                        time.sleep(3600)
                    self.close_connection = True
                    self.connection.close()
                    return
                data = f.read(limit)
                if not data:
                    break
                if start + sent + len(data) >= size:
                    done()
                if sent == 0 and faults.get("flip"):
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    return
                sent += len(data)
                if counted is not None:
                    counted[0] = sent
                # No pacing after the last byte: the body is sent, and a client that starts its
                # next request now must not see this one as still sending ("overlapped").
                if rate and start + sent < size:
                    ahead = sent / rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--directory", required=True)
    parser.add_argument("--log")
    parser.add_argument("--redirect", action="append", default=[])
    parser.add_argument("--require-basic")
    parser.add_argument("--faults")
    parser.add_argument("--dav", action="store_true")
    parser.add_argument("--digests", action="store_true")
    State.options = parser.parse_args()
    # A listen backlog like nginx's: with Python's default of 5, a client opening several
    # connections at once has some of its SYNs dropped and retried a second later.
    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer(("127.0.0.1", State.options.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
