#!/usr/bin/env python3
"""ferry's WAN in the lab: a TCP relay that adds a link's delay and bandwidth (the kernel's netem
is not available in containers).

Every connection accepted on --port (127.0.0.1) is relayed to --target. Bytes in each direction
wait --delay-ms (one way: a round trip through the relay costs twice that) and share that
direction's --rate-mbit with every other connection, as on one link: a chunk leaves when the link
is free, and arrives its serialization time plus the delay later. Order within a connection is
kept, and a half-close is passed on after the bytes before it.

  --port PORT         where to listen (0: any; the port is printed on the first line of stdout)
  --target HOST:PORT  where to relay to
  --delay-ms MS       one-way delay, each direction (default 25: a 50 ms round trip)
  --rate-mbit N       each direction's bandwidth in Mbit/s (default 100; 0: unlimited)
  --stall-file FILE   while FILE exists, no byte moves either way (connections stay open): a path
                      that hangs on demand
  --log FILE          one JSON line per connection when it ends: bytes each way, seconds open

Started by the benchmark and the tests, on 127.0.0.1 only.
"""
import argparse
import asyncio
import json
import os
import time

CHUNK = 64 << 10


class Link:
    """One direction of the link: when it is next free to send, shared by every connection."""

    def __init__(self, rate_mbit):
        self.bytes_per_second = rate_mbit * 1e6 / 8 if rate_mbit > 0 else 0
        self.free_at = 0.0

    def depart(self, size, now):
        """When a chunk of `size` bytes that is ready at `now` has left: the link is then busy until then."""
        start = max(now, self.free_at)
        self.free_at = start + (size / self.bytes_per_second if self.bytes_per_second else 0)
        return self.free_at


class Relay:
    def __init__(self, options):
        self.options = options
        self.delay = options.delay_ms / 1000
        self.up, self.down = Link(options.rate_mbit), Link(options.rate_mbit)

    async def stalled(self):
        """Returns once the stall file is gone (at once when there is none)."""
        while self.options.stall_file and os.path.exists(self.options.stall_file):
            await asyncio.sleep(0.01)

    async def pump(self, reader, writer, link, counted):
        """Moves bytes from `reader` to `writer` through `link`, each at its arrival time."""
        queue = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def deliver():
            while True:
                arrival, data = await queue.get()
                wait = arrival - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self.stalled()
                if data is None:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while True:
                await self.stalled()
                data = await reader.read(CHUNK)
                now = loop.time()
                if not data:
                    await queue.put((max(now, link.free_at) + self.delay, None))
                    break
                counted[0] += len(data)
                await queue.put((link.depart(len(data), now) + self.delay, data))
            await sender
        except (OSError, asyncio.CancelledError):
            # A side that went away: what is queued for it goes too.
            sender.cancel()

    async def connection(self, client_reader, client_writer):
        host, port = self.options.target.rsplit(":", 1)
        opened = time.monotonic()
        try:
            server_reader, server_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        sent, received = [0], [0]
        await asyncio.gather(self.pump(client_reader, server_writer, self.up, sent),
                             self.pump(server_reader, client_writer, self.down, received),
                             return_exceptions=True)
        for w in (server_writer, client_writer):
            w.close()
        if self.options.log:
            with open(self.options.log, "a") as f:
                f.write(json.dumps({"up": sent[0], "down": received[0],
                                    "seconds": round(time.monotonic() - opened, 3)}) + "\n")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--target", required=True)
    parser.add_argument("--delay-ms", type=float, default=25)
    parser.add_argument("--rate-mbit", type=float, default=100)
    parser.add_argument("--stall-file")
    parser.add_argument("--log")
    options = parser.parse_args()
    relay = Relay(options)
    server = await asyncio.start_server(relay.connection, "127.0.0.1", options.port, backlog=511)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
