#!/usr/bin/env python3
"""A loopback TCP proxy that answers every request late: a store under
strain, for running the test suite on a slow store (docs/testing.md).

    infra/delay_proxy.py TARGET_HOST:PORT LOW_MS HIGH_MS

Listens on a free loopback port, prints `PORT` on its first line of stdout,
and forwards every connection to the target; each request (what the client
sends after the store's last answer, however many reads it takes) waits a
uniform draw of LOW_MS..HIGH_MS before it is forwarded. Python's standard
library only.
"""

import asyncio
import random
import sys


async def pipe(reader, writer, before_each):
    """Copies reader to writer, awaiting `before_each()` before each read's bytes."""
    try:
        while data := await reader.read(65536):
            await before_each()
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main():
    target, low, high = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    host, port = target.rsplit(":", 1)

    async def serve(client_reader, client_writer):
        try:
            store_reader, store_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        state = {"answered": True}

        async def a_new_request_waits():
            # The first bytes after an answer start a request: it waits.
            if state["answered"]:
                state["answered"] = False
                await asyncio.sleep(random.uniform(low, high) / 1000)

        async def an_answer():
            state["answered"] = True

        await asyncio.gather(
            pipe(client_reader, store_writer, a_new_request_waits),
            pipe(store_reader, client_writer, an_answer),
        )

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
