#!/usr/bin/env python3
"""A hostile SFTP server for ferry's tests: sshd runs it as the sftp subsystem (stdin/stdout are
the channel). It speaks just enough SFTP v3 to be asked for a file, then answers every READ in
the way MODE says:
  empty    DATA with no bytes (a client that asks again at the same offset never ends)
  dribble  DATA with one byte (a client without a bound makes a round trip per byte)
  missing  no file at any name, and no extensions (a server without posix-rename@openssh.com)
Every file is a regular file of 1 MiB (but with `missing`)."""
import struct
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "empty"
SIZE = 1 << 20
inp, out = sys.stdin.buffer, sys.stdout.buffer


def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = inp.read(n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data


def send(kind, body):
    out.write(struct.pack(">IB", len(body) + 1, kind) + body)
    out.flush()


def attrs():
    # flags SIZE | PERMISSIONS | ACMODTIME; a regular file, 0644, an mtime in 2020
    return struct.pack(">IQIII", 0x1 | 0x4 | 0x8, SIZE, 0o100644, 1577934245, 1577934245)


def status(rid, code):
    send(101, struct.pack(">II", rid, code) + struct.pack(">I", 0) + struct.pack(">I", 0))


while True:
    length, kind = struct.unpack(">IB", read_exact(5))
    body = read_exact(length - 1)
    if kind == 1:  # INIT
        send(2, struct.pack(">I", 3))
        continue
    rid = struct.unpack(">I", body[:4])[0]
    if kind in (7, 17) and MODE == "missing":  # LSTAT, STAT
        status(rid, 2)  # NO_SUCH_FILE
    elif kind in (7, 8, 17):  # LSTAT, FSTAT, STAT
        send(105, struct.pack(">I", rid) + attrs())
    elif kind == 3:  # OPEN
        send(102, struct.pack(">I", rid) + struct.pack(">I", 1) + b"h")
    elif kind == 5:  # READ
        data = b"" if MODE == "empty" else b"x"
        send(103, struct.pack(">I", rid) + struct.pack(">I", len(data)) + data)
    elif kind == 4:  # CLOSE
        status(rid, 0)
    else:
        status(rid, 8)  # OP_UNSUPPORTED
