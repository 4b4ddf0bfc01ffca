"""The front: one HTTP + WebSocket + OpenAI-compatible API in front of N replicas.

Every route of the single server (docs/server.md) answers here with the same bodies; the front
authenticates a request by asking a replica who its token is (`/v1/whoami`, cached), picks the
replica (placement.py, pids.py) and forwards the request unchanged (proxy.py). What the single
server keeps in one place is gathered from all replicas: the process list, the KV file list (each
file gains a `"replica"` field; lost files are listed under `"lost"`), `/health` and `/metrics`.
Uploaded programs are copied to every replica, so a program id works wherever its run lands.
`X-Symphony-Replica: rN` sends a program (or a debugger session) to replica N instead of the user's
home — to read a `/shared/` file that lives there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from .faults import ReplicaDeath, lost_outcome
from .pids import decode_pid, replica_name
from .pool import ReplicaPool
from .proxy import ReplicaUnreachable, forward, relay_ws, request_headers

MAX_OWNERS = 100_000  # pids remembered with their user, to answer for them after their replica died


class FrontError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error", headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.headers = status, message, type, headers

    def response(self) -> JSONResponse:
        return JSONResponse(
            {"error": {"type": self.type, "message": self.message, "param": None, "code": self.status}},
            status_code=self.status,
            headers=self.headers,
        )


def _token(headers, query) -> str:
    auth = headers.get("authorization", "")
    return (
        auth[7:].strip()
        if auth.lower().startswith("bearer ")
        else (query.get("token") or headers.get("x-api-key") or "")
    )


class Front:
    def __init__(self, pool: ReplicaPool, auth_ttl: float = 30.0) -> None:
        self.pool, self.auth_ttl = pool, auth_ttl
        self.http = pool.http
        self._users: dict[str, tuple[str, float]] = {}  # token -> (user, checked at)
        self.owners: dict[int, str] = {}  # pid -> user, for pids handed out through the front

    # --- who and where ----------------------------------------------------------------------------
    def _any_live(self) -> int:
        live = self.pool.live()
        if not live:
            raise FrontError(503, "no replica is running; Ray is restarting them", "unavailable", {"Retry-After": "5"})
        return live[0]

    async def user_of(self, headers, query) -> str | Response:
        """The token's user, or the replica's 401 answer as it stands."""
        tok = _token(headers, query)
        hit = self._users.get(tok)
        if hit is not None and time.monotonic() - hit[1] < self.auth_ttl:
            return hit[0]
        r = self._any_live()
        url = self.pool.url(r)
        assert url is not None  # _any_live returns a replica that is up, with its info
        try:
            resp = await self.http.get(url + "/v1/whoami", headers={"authorization": f"Bearer {tok}"} if tok else {})
        except httpx.HTTPError:
            await self.pool.confirm_death(r, None)
            raise FrontError(
                503, f"replica {replica_name(r)} did not answer; try again", "unavailable", {"Retry-After": "2"}
            ) from None
        if resp.status_code != 200:
            return Response(resp.content, status_code=resp.status_code, media_type="application/json")
        user = resp.json()["user"]
        self._users[tok] = (user, time.monotonic())
        return user

    def _override(self, headers) -> int | None:
        want = headers.get("x-symphony-replica")
        if want is None:
            return None
        idx = want.removeprefix("r")
        if not idx.isdigit() or int(idx) not in self.pool.replicas:
            raise FrontError(422, f"X-Symphony-Replica names no replica: {want!r} (there are r1..r{self.pool.n})")
        return int(idx)

    def _up_or_503(self, r: int, why: str) -> str:
        url = self.pool.url(r)
        if url is None:
            reason = self.pool.replicas[r].down_reason or "it is starting"
            raise FrontError(
                503,
                f"replica {replica_name(r)} ({why}) is down: {reason}; Ray is restarting it, try again shortly",
                "unavailable",
                {"Retry-After": "5"},
            )
        return url

    def home(self, user: str, headers) -> int:
        forced = self._override(headers)
        return forced if forced is not None else self.pool.placement.home_of(user, self.pool.live())

    async def _send(self, r: int, request: Request, body: bytes | None = None, stream: bool = False) -> Response:
        url = self._up_or_503(r, "the replica this request goes to")
        self.pool.placement.begin(r)
        try:
            return await forward(self.http, url, request, body, stream)
        except ReplicaUnreachable as e:
            if await self.pool.confirm_death(r, None) is None:  # a broken connection, not a dead replica
                raise FrontError(
                    502, f"the connection to replica {replica_name(r)} broke ({e}); try again", "bad_gateway"
                ) from None
            raise FrontError(
                503,
                f"replica {replica_name(r)} stopped answering; Ray is restarting it",
                "unavailable",
                {"Retry-After": "5"},
            ) from None
        finally:
            self.pool.placement.end(r)

    def _own(self, pid: int, user: str) -> None:
        self.owners[pid] = user
        while len(self.owners) > MAX_OWNERS:  # oldest first: a bounded memory of who ran what
            self.owners.pop(next(iter(self.owners)))

    # --- processes by pid -------------------------------------------------------------------------
    def _death_for_pid(self, pid: int, user: str) -> tuple[int, ReplicaDeath | None]:
        rp = decode_pid(pid)
        if rp is None or rp.replica not in self.pool.replicas:
            raise FrontError(404, f"no process {pid} of user {user!r}", "not_found")
        death = self.pool.faults.death_of(rp.replica, rp.generation)
        if death is None and self.pool.generation(rp.replica) not in (None, rp.generation):
            death = ReplicaDeath(rp.replica, rp.generation, 0.0, "before the front last saw it")
        if death is not None and self.owners.get(pid) != user:
            raise FrontError(404, f"no process {pid} of user {user!r}", "not_found")
        return rp.replica, death

    def _lost_answer(self, pid: int, death: ReplicaDeath, tail: str, request: Request) -> Response:
        if tail == "result" or tail == "cancel" or (tail == "" and request.method == "DELETE"):
            return JSONResponse(lost_outcome(pid, death) if tail == "result" else {"pid": pid, "status": "failed"})
        if tail == "":
            out = lost_outcome(pid, death)
            return JSONResponse({**out, "name": None, "user": self.owners.get(pid), "error": out["error"]["message"]})
        if tail == "messages" and request.method == "GET":
            return JSONResponse(
                {"messages": [], "next": int(request.query_params.get("after", "0") or 0), "done": True}
            )
        raise FrontError(
            409, f"process {pid} has ended (failed): {lost_outcome(pid, death)['error']['message']}", "conflict"
        )

    async def by_pid(self, request: Request) -> Response:
        user = await self.user_of(request.headers, request.query_params)
        if isinstance(user, Response):
            return user
        raw, tail = request.path_params["pid"], request.path_params.get("tail", "")
        try:
            pid = int(raw)
        except ValueError:
            raise FrontError(422, f"process id must be an integer, got {raw!r}") from None
        r, death = self._death_for_pid(pid, user)
        if death is None:
            try:
                return await self._send(r, request)
            except FrontError:
                rp = decode_pid(pid)
                assert rp is not None  # _death_for_pid refused a pid that does not decode
                death = self.pool.faults.death_of(r, rp.generation)
                if death is None or self.owners.get(pid) != user:
                    raise
        return self._lost_answer(pid, death, tail, request)

    # --- launching --------------------------------------------------------------------------------
    def _refuse_if_files_lost(self, user: str) -> None:
        lost = self.pool.faults.lost_files(user)
        if lost:
            paths = ", ".join(f["path"] for f in lost[:5]) + (" …" if len(lost) > 5 else "")
            raise FrontError(
                409,
                f"user {user!r}: named KV files were lost when their replica died ({lost[0]['message']}): "
                f"{paths}. A program would find them missing; acknowledge each with "
                "DELETE /v1/kv/<path> (GET /v1/kv lists them under 'lost'), then run again",
                "kv_files_lost",
            )

    async def create_process(self, request: Request) -> Response:
        user = await self.user_of(request.headers, request.query_params)
        if isinstance(user, Response):
            return user
        self._refuse_if_files_lost(user)
        resp = await self._send(self.home(user, request.headers), request)
        if resp.status_code == 201:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self._own(json.loads(bytes(resp.body))["pid"], user)
        return resp

    async def list_processes(self, request: Request) -> Response:
        user = await self.user_of(request.headers, request.query_params)
        if isinstance(user, Response):
            return user
        procs = []
        for body in await self._gather_json(request):
            procs.extend(body.get("processes", []))
        return JSONResponse({"processes": sorted(procs, key=lambda p: p.get("pid", 0))})

    async def _gather_json(self, request: Request) -> list[dict]:
        async def one(r: int):
            try:
                resp = await self._send(r, request, b"")
            except FrontError:
                return None
            return {**json.loads(bytes(resp.body)), "_replica": r} if resp.status_code == 200 else None

        return [b for b in await asyncio.gather(*(one(r) for r in self.pool.live())) if b is not None]

    # --- uploaded programs: on every replica ------------------------------------------------------
    async def programs_everywhere(self, request: Request) -> Response:
        user = await self.user_of(request.headers, request.query_params)
        if isinstance(user, Response):
            return user
        home = self.home(user, request.headers)
        body = await request.body()
        others = [r for r in self.pool.live() if r != home]
        answers = await asyncio.gather(
            self._send(home, request, body), *(self._send(r, request, body) for r in others), return_exceptions=True
        )
        if isinstance(answers[0], BaseException):
            raise answers[0]
        return answers[0]

    async def to_home(self, request: Request) -> Response:
        user = await self.user_of(request.headers, request.query_params)
        if isinstance(user, Response):
            return user
        return await self._send(self.home(user, request.headers), request)

    # --- KV files ---------------------------------------------------------------------------------
    async def kv_list(self, request: Request) -> Response:
        user = await self.user_of(request.headers, request.query_params)
        if isinstance(user, Response):
            return user
        home = self.home(user, request.headers)
        self._up_or_503(home, f"home of user {user!r}")
        files: list[dict] = []
        seen_home = False
        for body in await self._gather_json(request):
            seen_home |= body["_replica"] == home
            files.extend({**f, "replica": replica_name(body["_replica"])} for f in body.get("files", []))
        if not seen_home:  # the replica's own refusal (403 for another user's directory, …) as it stands
            return await self._send(home, request)
        return JSONResponse(
            {"files": sorted(files, key=lambda f: f["path"]), "lost": self.pool.faults.lost_files(user)}
        )

    async def kv_remove(self, request: Request) -> Response:
        user = await self.user_of(request.headers, request.query_params)
        if isinstance(user, Response):
            return user
        raw = request.path_params["path"].lstrip("/")
        path = "/" + raw if raw.startswith(("users/", "shared/")) else f"/users/{user}/{raw}"
        if self.pool.faults.acknowledge(user, path):
            return Response(status_code=204)
        return await self._send(self.home(user, request.headers), request)

    # --- OpenAI-compatible ------------------------------------------------------------------------
    async def openai(self, request: Request) -> Response:
        user = await self.user_of(request.headers, request.query_params)
        if isinstance(user, Response):
            return user
        body = await request.body()
        try:
            req = json.loads(body)
            prompt = json.dumps(req.get("messages")) if "messages" in req else str(req.get("prompt", ""))
        except (ValueError, AttributeError):
            prompt = ""  # the replica answers the malformed body with its own 400/422
        forced = self._override(request.headers)
        r = forced if forced is not None else self.pool.placement.for_prompt(prompt, self.pool.live())
        return await self._send(r, request, body, stream=True)

    # --- the server as a whole --------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        """The first replica that answers, plus every replica's state; 503 when none answers."""
        out: dict = {"status": "unavailable"}
        for r in self.pool.live():
            try:
                resp = await self._send(r, request)
            except FrontError:
                continue
            if resp.status_code == 200:
                out = json.loads(bytes(resp.body))
                break
        out["replicas"] = [
            {
                "replica": replica_name(i),
                "up": st.up,
                "generation": None if st.info is None else st.info.generation,
                "url": None if st.info is None else st.info.url,
                "node": None if st.info is None else st.info.node_id[:12],
                "down_reason": st.down_reason or None,
                # as of the monitor's last poll: what a death of this replica would list as lost
                "named_files": sum(map(len, st.files.values())),
            }
            for i, st in sorted(self.pool.replicas.items())
        ]
        return JSONResponse(out, status_code=200 if out["status"] == "ok" else 503)

    async def metrics(self, request: Request) -> Response:
        """Every replica's samples with a `replica` label, grouped by metric family."""
        families: dict[str, list[str]] = {}
        for r in self.pool.live():
            try:
                text = bytes((await self._send(r, request, b"")).body).decode()
            except FrontError:
                continue
            family = ""
            for line in text.splitlines():
                if line.startswith("# "):
                    family = line.split()[2]
                    if line not in families.setdefault(family, []):
                        families[family].append(line)
                elif line.strip():
                    name, _, value = line.rpartition(" ")
                    label = f'replica="{replica_name(r)}"'
                    name = name.replace("{", "{" + label + ",", 1) if "{" in name else f"{name}{{{label}}}"
                    families.setdefault(family, []).append(f"{name} {value}")
        return PlainTextResponse(
            "".join(line + "\n" for lines in families.values() for line in lines),
            media_type="text/plain; version=0.0.4",
        )

    # --- WebSockets -------------------------------------------------------------------------------
    async def ws_session(self, ws: WebSocket) -> None:
        """`/v1/ws`: the first message says where the session goes (run: home; attach: the pid's replica)."""
        await ws.accept()
        try:
            user = await self.user_of(ws.headers, ws.query_params)
            if isinstance(user, Response):
                err = json.loads(bytes(user.body)).get("error", {})
                return await _ws_close(ws, {"type": "error", "error": err}, 4401)
            first = await asyncio.wait_for(ws.receive_text(), 60)
            try:
                msg = json.loads(first)
            except ValueError:
                msg = None
            op = msg.get("op") if isinstance(msg, dict) else None
            if op == "attach" and isinstance(msg.get("pid"), int):
                r, death = self._death_for_pid(msg["pid"], user)
                if death is not None:
                    await ws.send_json({"type": "started", "pid": msg["pid"], "name": None, "sandboxed": None})
                    return await _ws_close(ws, {"type": "result", **lost_outcome(msg["pid"], death)}, 1000)
            else:
                if op == "run":
                    self._refuse_if_files_lost(user)
                r = self.home(user, ws.headers)
            await self._relay(ws, r, "/v1/ws", first, user)
        except FrontError as e:
            await _ws_close(
                ws,
                {"type": "error", "error": {"type": e.type, "message": e.message, "code": e.status}},
                4401 if e.status == 401 else (1013 if e.status == 503 else 4400),
            )
        except (TimeoutError, RuntimeError):
            return

    async def _relay(self, ws: WebSocket, r: int, path: str, first: str | None, user: str) -> None:
        base = self._up_or_503(r, "the replica this session goes to")
        query = f"?{ws.url.query}" if ws.url.query else ""
        url = "ws" + base[len("http") :] + path + query

        async def started(pid: int) -> None:
            self._own(pid, user)

        generation = self.pool.generation(r)
        self.pool.placement.begin(r)
        try:
            end = await relay_ws(ws, url, request_headers(ws), first, started)
        except ReplicaUnreachable as e:
            if await self.pool.confirm_death(r, None) is None:
                raise FrontError(
                    502, f"could not reach replica {replica_name(r)} ({e}); try again", "bad_gateway"
                ) from None
            raise FrontError(
                503, f"replica {replica_name(r)} stopped answering; Ray is restarting it", "unavailable"
            ) from None
        finally:
            self.pool.placement.end(r)
        if end.client_left:
            return
        if end.upstream_broke and not end.got_result:
            death = await self.pool.confirm_death(r, generation)
            if death is not None and end.pid is not None:
                return await _ws_close(ws, {"type": "result", **lost_outcome(end.pid, death)}, 1000)
            return await _ws_close(
                ws,
                {
                    "type": "error",
                    "error": {
                        "type": "unavailable",
                        "code": 503,
                        "message": f"the connection to replica {replica_name(r)} broke",
                    },
                },
                1011,
            )
        with contextlib.suppress(RuntimeError):
            await ws.close(code=end.close_code or 1000, reason=end.close_reason[:120])

    # --- anything else (plugins such as the debugger at /v1/debug): the user's home ----------------
    async def fallback_http(self, request: Request) -> Response:
        user = await self.user_of(request.headers, request.query_params)
        r = self._any_live() if isinstance(user, Response) else self.home(user, request.headers)
        return await self._send(r, request, stream=True)

    async def fallback_ws(self, ws: WebSocket) -> None:
        await ws.accept()
        try:
            user = await self.user_of(ws.headers, ws.query_params)
            r = self._any_live() if isinstance(user, Response) else self.home(user, ws.headers)
            await self._relay(ws, r, ws.url.path, None, user if isinstance(user, str) else "")
        except FrontError as e:
            await _ws_close(
                ws, {"type": "error", "error": {"type": e.type, "message": e.message, "code": e.status}}, 1013
            )


async def _ws_close(ws: WebSocket, last: dict, code: int) -> None:
    with contextlib.suppress(Exception):
        await ws.send_json(last)
        await ws.close(code=code, reason=str(last.get("error", {}).get("message", ""))[:120])


def create_front_app(pool: ReplicaPool) -> Starlette:
    """The front's ASGI app; its lifespan runs the pool's monitor."""
    front = Front(pool)

    async def on_front_error(request, exc: Exception) -> Response:
        assert isinstance(exc, FrontError)  # registered for FrontError only
        return exc.response()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        task = asyncio.ensure_future(pool.monitor())
        try:
            yield
        finally:
            task.cancel()

    all_methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    routes = [
        Route("/health", front.health),
        Route("/metrics", front.metrics),
        Route("/v1/whoami", front.to_home),
        Route("/v1/models", front.to_home),
        Route("/v1/programs", front.programs_everywhere, methods=["POST"]),
        Route("/v1/programs", front.to_home, methods=["GET"]),
        Route("/v1/programs/{prog}", front.programs_everywhere, methods=["DELETE"]),
        Route("/v1/processes", front.create_process, methods=["POST"]),
        Route("/v1/processes", front.list_processes, methods=["GET"]),
        Route("/v1/processes/{pid}", front.by_pid, methods=["GET", "DELETE"]),
        Route("/v1/processes/{pid}/{tail}", front.by_pid, methods=["GET", "POST"]),
        Route("/v1/kv", front.kv_list, methods=["GET"]),
        Route("/v1/kv/{path:path}", front.kv_remove, methods=["DELETE"]),
        Route("/v1/completions", front.openai, methods=["POST"]),
        Route("/v1/chat/completions", front.openai, methods=["POST"]),
        WebSocketRoute("/v1/ws", front.ws_session),
        Route("/{rest:path}", front.fallback_http, methods=all_methods),
        WebSocketRoute("/{rest:path}", front.fallback_ws),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={FrontError: on_front_error})
    app.state.front = front
    return app
