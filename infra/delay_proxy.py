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


async def pipe_requests(reader, writer, state, low, high):
    try:
        while data := await reader.read(65536):
            if state["answered"]:
                state["answered"] = False
                await asyncio.sleep(random.uniform(low, high) / 1000)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def pipe_answers(reader, writer, state):
    try:
        while data := await reader.read(65536):
            state["answered"] = True
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
        await asyncio.gather(
            pipe_requests(client_reader, store_writer, state, low, high),
            pipe_answers(store_reader, client_writer, state),
        )

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
