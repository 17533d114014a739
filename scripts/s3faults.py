#!/usr/bin/env python3
"""ferry's own hostile S3 store: a proxy in front of a real one (SeaweedFS, moto) that lies.

Every request goes to the upstream store as it came (the Host header too, so SigV4 signatures
still verify there), and the answer comes back as the store gave it, unless a fault says
otherwise. Options:

  --upstream PORT   the real store on 127.0.0.1
  --port PORT       where to listen (127.0.0.1 only)
  --log FILE        one JSON line per request: method, path, query, status, its Expect and Range headers
  --faults FILE     JSON read on every request: a list of rules, each
                    {"method": "PUT", "key": "substring of the path", "query": "substring of the
                     query", "times": N, <faults>}; the first rule that matches applies ("times":
                     only to its first N matches)

Faults:
  "status": N, "body": "xml"  answer this without asking the store (an AccessDenied, say)
  "echo_checksum": "value"    the answer's x-amz-checksum-sha256 says this (a store that says it
                              computed another hash over what it holds)
  "drop_checksums": true      no x-amz-checksum-* header, no <ChecksumSHA256>/<ChecksumType> in
                              the body (a store that computes nothing)
  "composite_bare": true      a composite checksum "X-N" loses its "-N" and its type (moto's dialect)
  "flip_body": true           the first byte of the answer's body flipped (the store holds other
                              bytes than it was sent, as reading it shows)
  "stall_after": N            the answer's first N body bytes, then nothing more (its length
                              announced whole) until the client gives up: a store or link that hangs
  "list_parts_truncated": true  every ListParts answer (GET with uploadId, without partNumber) is
                              the upload's first page, saying <IsTruncated>true</IsTruncated>,
                              whatever page was asked for: a store that never finishes listing

Started by the integration tests, on 127.0.0.1 only.
"""
import argparse
import http.client
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    options = None
    lock = threading.Lock()
    matched = {}
    first_pages = {}  # upload id -> its first ListParts answer (list_parts_truncated)


def rule_for(method, path, query):
    if not State.options.faults:
        return {}
    try:
        with open(State.options.faults) as f:
            rules = json.load(f)
    except (OSError, ValueError):
        return {}
    for i, rule in enumerate(rules):
        if rule.get("method", method) != method:
            continue
        if rule.get("key", "") not in path or rule.get("query", "") not in query:
            continue
        with State.lock:
            seen = State.matched.get(i, 0)
            State.matched[i] = seen + 1
        if "times" in rule and seen >= rule["times"]:
            continue
        return rule
    return {}


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def record(self, status):
        if not State.options.log:
            return
        path, _, query = self.path.partition("?")
        with State.lock, open(State.options.log, "a") as f:
            f.write(json.dumps({"method": self.command, "path": path, "query": query, "status": status,
                                "expect": self.headers.get("Expect"), "range": self.headers.get("Range")}) + "\n")

    def answer(self, status, headers, body, length=None):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        # A HEAD says the length of the body a GET would get.
        self.send_header("Content-Length", length if self.command == "HEAD" and length is not None else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.record(status)

    def stall(self, status, headers, body, after):
        """The answer with its whole length announced and only its first `after` bytes sent; then
        nothing, until the client closes the connection."""
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:after])
        self.wfile.flush()
        self.record(status)
        while self.connection.recv(65536):
            pass
        self.close_connection = True

    def handle_any(self):
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length", "0") or "0")
        body = self.rfile.read(length) if length > 0 else b""
        fault = rule_for(self.command, path, query)
        if "status" in fault:
            return self.answer(fault["status"], [("Content-Type", "application/xml")], fault.get("body", "").encode())
        upstream = http.client.HTTPConnection("127.0.0.1", State.options.upstream, timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "expect")}
        upstream.request(self.command, self.path, body=body if body or self.command in ("PUT", "POST") else None, headers=headers)
        reply = upstream.getresponse()
        data = reply.read()
        out = [(k, v) for k, v in reply.getheaders() if k.lower() not in ("content-length", "transfer-encoding", "connection")]
        upstream.close()
        if fault.get("drop_checksums"):
            out = [(k, v) for k, v in out if not k.lower().startswith("x-amz-checksum-")]
            data = re.sub(rb"<Checksum(SHA256|Type)>[^<]*</Checksum(SHA256|Type)>", b"", data)
        if "echo_checksum" in fault:
            out = [(k, v) for k, v in out if k.lower() != "x-amz-checksum-sha256"]
            out.append(("x-amz-checksum-sha256", fault["echo_checksum"]))
        if fault.get("composite_bare"):
            out = [(k, re.sub(r"-\d+$", "", v)) if k.lower() == "x-amz-checksum-sha256" else (k, v)
                   for k, v in out if k.lower() != "x-amz-checksum-type"]
            data = re.sub(rb"(<ChecksumSHA256>[^<-]*)-\d+(</ChecksumSHA256>)", rb"\1\2", data)
            data = re.sub(rb"<ChecksumType>[^<]*</ChecksumType>", b"", data)
        if fault.get("flip_body") and data:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        if fault.get("list_parts_truncated") and self.command == "GET":
            params = urllib.parse.parse_qs(query, keep_blank_values=True)
            if "uploadId" in params and "partNumber" not in params:
                with State.lock:
                    data = State.first_pages.setdefault(params["uploadId"][0], data)
                data = data.replace(b"<IsTruncated>false</IsTruncated>", b"<IsTruncated>true</IsTruncated>")
        if "stall_after" in fault and self.command == "GET":
            return self.stall(reply.status, out, data, int(fault["stall_after"]))
        self.answer(reply.status, out, data, reply.getheader("Content-Length"))

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log")
    parser.add_argument("--faults")
    State.options = parser.parse_args()
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", State.options.port), Proxy).serve_forever()


if __name__ == "__main__":
    main()
