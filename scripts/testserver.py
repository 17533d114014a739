#!/usr/bin/env python3
"""ferry's own test HTTP server: serves a directory like `python3 -m http.server` (no ranges, no
ETags) and adds what tests need to see and to break.

  --log FILE                 append one JSON line per request: method, path, headers that matter
  --redirect PREFIX=URL      answer GETs under PREFIX with 302 to URL + the rest of the path
  --require-basic USER:PASS  answer 401 unless the request carries these basic credentials

Used by the integration tests; started and stopped by them on 127.0.0.1.
"""
import argparse
import base64
import functools
import http.server
import json
import os
import sys
import threading


class Handler(http.server.SimpleHTTPRequestHandler):
    options = None
    lock = threading.Lock()

    def log_message(self, format, *args):
        pass

    def record(self):
        if not self.options.log:
            return
        entry = {
            "method": self.command,
            "path": self.path,
            "authorization": self.headers.get("Authorization"),
            "range": self.headers.get("Range"),
            "if_range": self.headers.get("If-Range"),
        }
        with self.lock, open(self.options.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def do_GET(self):
        self.record()
        for rule in self.options.redirect:
            prefix, target = rule.split("=", 1)
            if self.path.startswith(prefix):
                self.send_response(302)
                self.send_header("Location", target + self.path[len(prefix):])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        if self.options.require_basic:
            expected = "Basic " + base64.b64encode(self.options.require_basic.encode()).decode()
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="ferry"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        super().do_GET()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--directory", required=True)
    parser.add_argument("--log")
    parser.add_argument("--redirect", action="append", default=[])
    parser.add_argument("--require-basic")
    options = parser.parse_args()
    Handler.options = options
    handler = functools.partial(Handler, directory=options.directory)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", options.port), handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
