#!/usr/bin/env python3
"""The benchmark mock of bench/mock_server.py, served by aiohttp instead.

Same answers (built by `mock_server.build_answer`), another HTTP server: it
paces, buffers and closes connections as aiohttp does, which is what many
users' servers are built on (an OpenAI-compatible proxy, a vLLM front end of
their own). The dispatch benchmark measures todod and wrk against both.

    python3 bench/aiohttp_server.py [--port 0] [--host 127.0.0.1]

Needs aiohttp (Debian: apt-get install -y python3-aiohttp, for
/usr/bin/python3). Prints exactly one line, `listening on http://HOST:PORT`,
once it accepts connections, then serves until SIGTERM or SIGINT.
"""
import argparse
import asyncio
import signal
import socket

from aiohttp import web

from mock_server import _MODELS, build_answer, error_body

_DONE = b"data: [DONE]\n\n"


async def completions(request: web.Request, chat: bool) -> web.StreamResponse:
    raw = await request.read()
    try:
        answer = build_answer(raw, chat)
    except ValueError as e:
        return web.Response(body=error_body(400, f"bad request body: {e}"),
                            status=400, content_type="application/json")
    if isinstance(answer, bytes):
        return web.Response(body=answer, content_type="application/json")
    response = web.StreamResponse(headers={"content-type": "text/event-stream",
                                           "cache-control": "no-cache"})
    await response.prepare(request)
    try:
        # One write per event, as a server flushes each token.
        for event in answer:
            await response.write(event)
        await response.write(_DONE)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the peer is gone (wrk drops its connections at the end)
    return response


async def chat(request: web.Request) -> web.StreamResponse:
    return await completions(request, True)


async def text(request: web.Request) -> web.StreamResponse:
    return await completions(request, False)


async def models(_request: web.Request) -> web.Response:
    return web.Response(body=_MODELS, content_type="application/json")


async def serve(host: str, port: int) -> None:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", text)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    bound = next(s for s in site._server.sockets
                 if s.family in (socket.AF_INET, socket.AF_INET6))
    shown = bound.getsockname()[0]
    if ":" in shown:
        shown = f"[{shown}]"
    print(f"listening on http://{shown}:{bound.getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
