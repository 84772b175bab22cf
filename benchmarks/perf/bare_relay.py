"""A bare asyncio HTTP/1.1 relay: the floor of any Python proxy on this machine (for ``bench_serve.py``).

    python benchmarks/perf/bare_relay.py --upstream http://127.0.0.1:PORT/v1

It forwards each request's bytes to the upstream on a pooled keep-alive connection and the
response's bytes back, reading no more than the head and ``Content-Length``: no JSON, no ledger,
no call log. ``bench_serve.py --arms bare-relay`` measures it beside the proxy's arms, so the
latency and CPU the proxy adds can be read against what merely relaying costs here. Not for use.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from urllib.parse import urlsplit


async def _read_message(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return head + (await reader.readexactly(length) if length else b"")


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", required=True, help="the upstream base URL (http://host:port/v1)")
    args = p.parse_args()
    target = urlsplit(args.upstream)
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    request = await _read_message(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                upstream = idle.pop() if idle else await asyncio.open_connection(target.hostname, target.port)
                upstream[1].write(request)
                response = await _read_message(upstream[0])
                idle.append(upstream)
                writer.write(response)
        finally:
            writer.close()

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    print(f"serving http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1 (bare relay)", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
