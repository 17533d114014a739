#!/usr/bin/env python3
"""A source of temporary AWS credentials for ferry's tests: the EC2 instance metadata service
(IMDSv2 only) and the container credentials endpoint, on 127.0.0.1.

  PUT /latest/api/token                         needs X-aws-ec2-metadata-token-ttl-seconds; answers a
                                                session token
  GET /latest/meta-data/iam/security-credentials/         the role's name       } 401 without a
  GET /latest/meta-data/iam/security-credentials/ROLE     its credentials (JSON) } valid token
  GET /container/...                            the container protocol: the credentials (JSON),
                                                401 unless Authorization is the configured token

Options:
  --port N         listen on 127.0.0.1:N
  --config FILE    JSON read on every request (below); absent: the defaults
  --log FILE       one JSON line per request: method, path, status, time (Unix seconds), and for
                   an answer with credentials the access key id and expiration handed out

Config (every member optional):
  "credentials": [{"AccessKeyId", "SecretAccessKey", "Token"?}, ...]
                      handed out in turn, one per credentials answer; the last one repeats. No
                      "Token": none is sent (a store with static keys rejects unknown tokens)
  "lifetime": S       the credentials expire S seconds after they are handed out (default 3600)
  "expiration": "T"   send this Expiration instead (a bad date, or one in the past)
  "role": "NAME"      the instance's role (default ferry-test-role)
  "authorization": "TOKEN"  the container endpoint's required Authorization header
  "status": N         answer every credentials request (the role's and the container's) with N
  "body": "TEXT"      answer them with this body instead of the JSON document
  "huge": N           answer them with N bytes of JSON padding
  "code": "TEXT"      the instance metadata's Code (default Success)

Started and stopped by the integration tests, on 127.0.0.1 only.
"""
import argparse
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CREDENTIALS_PATH = "/latest/meta-data/iam/security-credentials/"


class State:
    options = None
    lock = threading.Lock()
    tokens = set()
    handed = 0  # credentials answers so far


def config():
    try:
        with open(State.options.config) as f:
            return json.load(f)
    except (OSError, ValueError, TypeError):
        return {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def answer(self, status, body=b"", extra=None):
        entry = {"method": self.command, "path": self.path, "status": status, "time": time.time()}
        entry.update(extra or {})
        if State.options.log:
            with State.lock, open(State.options.log, "a") as f:
                f.write(json.dumps(entry) + "\n")
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path != "/latest/api/token":
            return self.answer(404)
        if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self.answer(400)
        token = secrets.token_urlsafe(32)
        with State.lock:
            State.tokens.add(token)
        self.answer(200, token.encode())

    def do_GET(self):
        settings = config()
        if self.path.startswith("/latest/"):
            token = self.headers.get("X-aws-ec2-metadata-token")
            with State.lock:
                valid = token in State.tokens
            if not valid:
                return self.answer(401)
            role = settings.get("role", "ferry-test-role")
            if self.path == CREDENTIALS_PATH:
                return self.answer(200, role.encode())
            if self.path == CREDENTIALS_PATH + role:
                return self.credentials(settings, instance=True)
            return self.answer(404)
        if self.path.startswith("/container/"):
            wanted = settings.get("authorization")
            if wanted is not None and self.headers.get("Authorization") != wanted:
                return self.answer(401)
            return self.credentials(settings, instance=False)
        self.answer(404)

    def credentials(self, settings, instance):
        if "status" in settings:
            return self.answer(settings["status"])
        if "body" in settings:
            return self.answer(200, settings["body"].encode())
        if "huge" in settings:
            return self.answer(200, b'{"Padding": "' + b"x" * settings["huge"] + b'"}')
        given = settings.get("credentials") or [{"AccessKeyId": "ASIATESTDEFAULT", "SecretAccessKey": "default-secret", "Token": "default-token"}]
        with State.lock:
            keys = dict(given[min(State.handed, len(given) - 1)])
            State.handed += 1
        expiration = settings.get("expiration") or time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + settings.get("lifetime", 3600)))
        document = {"AccessKeyId": keys["AccessKeyId"], "SecretAccessKey": keys["SecretAccessKey"], "Expiration": expiration}
        if "Token" in keys:
            document["Token"] = keys["Token"]
        if instance:
            document.update({"Code": settings.get("code", "Success"), "Type": "AWS-HMAC",
                             "LastUpdated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        self.answer(200, json.dumps(document).encode(), {"access_key": keys["AccessKeyId"], "expiration": expiration})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--config")
    parser.add_argument("--log")
    State.options = parser.parse_args()
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", State.options.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
