"""A scripted OpenAI-compatible model server over real HTTP, for tests.

Each POST to /v1/chat/completions takes the next scripted step: a text reply, tool calls,
or an error status. Streaming requests get Server-Sent Events exactly as OpenAI sends
them (content split into several chunks, a final usage chunk, `[DONE]`; a chunked body on
a connection kept open for the next request). A request whose history holds a tool call
not answered by a tool message right after it is refused with a 400, as OpenAI refuses it
("tool_call_ids did not have response messages"), and so is one whose history holds a tool
message that answers no call of the assistant message right before its run of tool
messages ("messages with role 'tool' must be a response to a preceding message with
'tool_calls'"). Every request body is recorded so tests
can assert what the model was sent, and `connections` counts the connections opened
(`open_connections` those still open).
"""
from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)  # (name, args)
    status: int = 200
    error: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunk_delay: float = 0.0  # seconds between streamed chunks, to watch a reply stream in
    chunk_size: int = 5  # characters per streamed chunk
    usage: tuple[int, int] | None = (11, 7)
    drop: bool = False  # close the connection without an answer (a server restarting, a kept connection let go)
    # Streamed as given instead of the chunks `text` makes: each a `data:` line's payload
    # (a malformed one, a lone surrogate half...); [DONE] follows.
    raw_events: list[str] | None = None
    keepalive: float = 0.0  # seconds of SSE comment lines (": keep-alive") before the answer
    done: bool = True  # end the stream with `data: [DONE]` (False: the body just ends)
    finish: str = ""  # the finish_reason to give (default: stop, or tool_calls)
    args_chunk_size: int = 0  # characters of a tool call's arguments per streamed chunk (0: two halves)
    reset: bool = False  # after the events, reset the connection mid-body (no [DONE], no end of the chunked body)
    # Answered as given (status 200, this Content-Type) whatever was asked: an HTML page, a
    # whole JSON completion to a streaming request...
    body: bytes | None = None
    content_type: str = "text/event-stream"  # of a streamed answer
    byte_delay: float = 0.0  # seconds between each byte of a streamed answer (a trickle)
    # Answer only once this is set (or HOLD_MOST seconds have passed): a model call that
    # hangs for as long as the test needs it to, and not a fixed time after.
    hold: threading.Event | None = None


HOLD_MOST = 120.0  # seconds a held answer waits for its test at most


def reply(text: str, **kw: Any) -> Step:
    return Step(text=text, **kw)


def tool_call(name: str, args: dict[str, Any] | str, text: str = "") -> Step:
    return Step(text=text, tool_calls=[(name, args)])


def dropped() -> Step:
    return Step(drop=True)


def error(status: int, message: str = "scripted failure", code: str | None = None, **kw: Any) -> Step:
    return Step(status=status, error={"message": message, "type": "server_error", "code": code}, **kw)


class ModelServer:
    def __init__(self) -> None:
        self.script: list[Step] = []
        self.default: Step | Callable[[dict[str, Any]], Step] | None = None
        self.requests: list[dict[str, Any]] = []
        self.arrivals: list[float] = []  # time.monotonic() of each request, in order
        self.authorizations: list[str] = []  # each request's Authorization header, in order
        # What a request sent with one key gets, whatever the script says (as a server that
        # rate-limits each key on its own): the key → its answer.
        self.keyed: dict[str, Step] = {}
        self.in_flight = 0  # chat completions being answered now
        self.most_in_flight = 0  # the most answered at once
        # As Ollama does: a request whose history holds a tool call with arguments that are not
        # a JSON object is refused (400 "invalid tool call arguments").
        self.tool_arguments_checked = False
        self.connections = 0  # TCP connections clients opened to this server
        self.open_connections = 0  # of those, the ones not closed yet
        self.cut_streams = 0  # streamed answers the client stopped reading before their end
        # Speech to text: what to answer next (a text, or an error Step), and what came in.
        self.transcripts: list[str | Step] = []
        self.transcriptions: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def add(self, *steps: Step) -> None:
        with self._lock:
            self.script.extend(steps)

    def _next(self, body: dict[str, Any], authorization: str = "") -> Step:
        with self._lock:
            self.requests.append(body)
            self.arrivals.append(time.monotonic())
            keyed = self.keyed.get(authorization.removeprefix("Bearer "))
            if keyed is not None:
                return keyed
            if self.script:
                return self.script.pop(0)
        default = self.default
        if callable(default):
            return default(body)
        return default or reply("(the script is empty)")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            # As real servers do: a response's writes leave at once (not after the client's
            # delayed ACK of the headers, ~40 ms on a connection kept open).
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.connections += 1
                    server.open_connections += 1

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    with server._lock:
                        server.open_connections -= 1

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") == "/v1/audio/transcriptions":
                    return self._transcribe(raw)
                body = json.loads(raw or b"{}")
                server.authorizations.append(self.headers.get("Authorization", ""))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._json(404, {"error": {"message": "not found"}})
                with server._lock:
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                try:
                    unanswered = _unanswered_calls(body)
                    if unanswered:  # as OpenAI, vLLM and llama.cpp's server refuse it
                        with server._lock:
                            server.requests.append(body)
                        return self._json(400, {"error": {
                            "message": "An assistant message with 'tool_calls' must be followed by tool messages "
                                       "responding to each 'tool_call_id'. The following tool_call_ids did not "
                                       f"have response messages: {', '.join(unanswered)}",
                            "type": "invalid_request_error", "param": "messages"}})
                    if _unasked_results(body):  # as OpenAI refuses it
                        with server._lock:
                            server.requests.append(body)
                        return self._json(400, {"error": {
                            "message": "Invalid parameter: messages with role 'tool' must be a response to a "
                                       "preceeding message with 'tool_calls'.",
                            "type": "invalid_request_error", "param": "messages"}})
                    if server.tool_arguments_checked and not _arguments_are_objects(body):
                        with server._lock:
                            server.requests.append(body)
                        return self._json(400, {"error": {"message": "invalid tool call arguments",
                                                          "type": "invalid_request_error"}})
                    step = server._next(body, self.headers.get("Authorization", ""))
                    if step.drop:
                        self.close_connection = True
                        return
                    if step.delay:
                        time.sleep(step.delay)
                    if step.hold is not None:
                        step.hold.wait(HOLD_MOST)
                    if step.status != 200:
                        return self._json(step.status, {"error": step.error}, step.headers)
                    if step.body is not None:
                        return self._raw(step)
                    if body.get("stream"):
                        return self._stream(body, step)
                    return self._json(200, _completion(body, step))
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _transcribe(self, raw: bytes) -> None:
                """OpenAI's speech to text: a multipart form with `model` and `file`."""
                import email.parser
                import email.policy

                form = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                    b"Content-Type: " + self.headers.get("Content-Type", "").encode() + b"\r\n\r\n" + raw)
                fields = {part.get_param("name", header="content-disposition"): part for part in form.iter_parts()}
                audio = fields["file"].get_payload(decode=True) if "file" in fields else b""
                with server._lock:
                    server.transcriptions.append({
                        "model": fields["model"].get_content().strip() if "model" in fields else "",
                        "filename": fields["file"].get_filename() if "file" in fields else "",
                        "content_type": fields["file"].get_content_type() if "file" in fields else "",
                        "audio": audio,
                    })
                    answer = server.transcripts.pop(0) if server.transcripts else "(no transcript scripted)"
                if isinstance(answer, Step):
                    return self._json(answer.status, {"error": answer.error}, answer.headers)
                return self._json(200, {"text": answer})

            def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _raw(self, step: Step) -> None:
                assert step.body is not None
                self.send_response(200)
                self.send_header("Content-Type", step.content_type)
                self.send_header("Content-Length", str(len(step.body)))
                self.end_headers()
                self.wfile.write(step.body)

            def _stream(self, body: dict[str, Any], step: Step) -> None:
                self.send_response(200)
                self.send_header("Content-Type", step.content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    until = time.monotonic() + step.keepalive
                    while time.monotonic() < until:
                        self._part(b": keep-alive\n\n")
                        time.sleep(0.1)
                    events = step.raw_events if step.raw_events is not None else [
                        json.dumps(chunk) for chunk in _chunks(body, step)]
                    for event in events:
                        data = b"data: " + event.encode() + b"\n\n"
                        for piece in ([data[i:i + 1] for i in range(len(data))] if step.byte_delay else [data]):
                            self._part(piece)
                            if step.byte_delay:
                                time.sleep(step.byte_delay)
                        if step.chunk_delay:
                            time.sleep(step.chunk_delay)
                    if step.reset:
                        # Half a chunk, then SO_LINGER 0: the close sends a reset, not the body's end.
                        self.wfile.write(b"40\r\ndata: {\"id\": \"chatcmpl-scr")
                        self.wfile.flush()
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        self.close_connection = True
                        return
                    if step.done:
                        self._part(b"data: [DONE]\n\n")
                    self._part(b"")  # the body's end; the connection stays open for the next request
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading (a Stop)
                    self.close_connection = True
                    with server._lock:
                        server.cut_streams += 1

            def _part(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        return Handler


def _unanswered_calls(body: dict[str, Any]) -> list[str]:
    """The ids of tool calls the request's history makes without the tool messages right
    after the call's message answering each of them."""
    messages = body.get("messages") or []
    missing: list[str] = []
    for i, message in enumerate(messages):
        calls = [call.get("id", "") for call in message.get("tool_calls") or []]
        answered = set()
        for after in messages[i + 1:]:
            if after.get("role") != "tool":
                break
            answered.add(after.get("tool_call_id"))
        missing += [c for c in calls if c not in answered]
    return missing


def _unasked_results(body: dict[str, Any]) -> list[str]:
    """The ids of tool messages that answer no call of the assistant message right before
    their run of tool messages (a result whose call is not there)."""
    asked: set[str] = set()
    unasked: list[str] = []
    for message in body.get("messages") or []:
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in asked:
                unasked.append(str(message.get("tool_call_id")))
            continue
        asked = {call.get("id", "") for call in message.get("tool_calls") or []}
    return unasked


def _arguments_are_objects(body: dict[str, Any]) -> bool:
    for message in body.get("messages") or []:
        for call in message.get("tool_calls") or []:
            try:
                if not isinstance(json.loads(call["function"]["arguments"]), dict):
                    return False
            except ValueError:
                return False
    return True


def _args(args: dict[str, Any] | str) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def _completion(body: dict[str, Any], step: Step) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
    if step.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": _args(a)}}
            for i, (n, a) in enumerate(step.tool_calls)
        ]
    out: dict[str, Any] = {
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if step.tool_calls else "stop"}],
    }
    if step.usage:
        out["usage"] = {"prompt_tokens": step.usage[0], "completion_tokens": step.usage[1],
                        "total_tokens": sum(step.usage)}
    return out


def _chunks(body: dict[str, Any], step: Step) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    text = step.text
    size = step.chunk_size
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    out += [chunk({"content": p}) for p in pieces]
    for i, (name, args) in enumerate(step.tool_calls):
        raw = _args(args)
        out.append(chunk({"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                          "function": {"name": name, "arguments": ""}}]}))
        half = len(raw) // 2
        size = step.args_chunk_size
        parts = [raw[j:j + size] for j in range(0, len(raw), size)] if size else [raw[:half], raw[half:]]
        for part in parts:
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    out.append(chunk({}, step.finish or ("tool_calls" if step.tool_calls else "stop")))
    if step.usage and (body.get("stream_options") or {}).get("include_usage"):
        out.append({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": body.get("model", "scripted"), "choices": [],
                    "usage": {"prompt_tokens": step.usage[0], "completion_tokens": step.usage[1],
                              "total_tokens": sum(step.usage)}})
    return out
