"""Kubernetes' remote-command protocol (``kubectl exec``) over a SPDY session, versions 4 and 5.

The client opens one stream per channel, each named by its ``streamType`` header: ``error``
always, ``stdin``/``stdout``/``stderr`` as the request's ``input=1``/``output=1``/``error=1`` ask
(kube-apiserver's names; kubectl's ``stdin``/``stdout``/``stderr`` are accepted too; no stderr
with a TTY: it shares stdout), and ``resize`` with a TTY (JSON ``{"Width": w,
"Height": h}`` objects). When the command ends and its output has been sent, the error stream
carries a ``metav1.Status`` as JSON: ``Success``, or ``Failure`` with reason ``NonZeroExitCode``
and a cause ``ExitCode`` whose message is the exit code (what makes ``kubectl exec`` exit with
it), or ``Failure`` with a message for anything else. Over SPDY v5 is v4 (v5 only adds a close
signal that WebSockets need).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import struct
import termios
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainop_core.node import spdy
from trainop_core.node.http import HttpError, Request

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STREAM_CREATION_TIMEOUT = 30.0  # the kubelet's default
MAX_COMMAND = 256 * 1024  # bytes of argv in total
_READ = 32 * 1024
# The query parameters kube-apiserver sends a kubelet (core/v1's Exec*Param), and kubectl's names
STREAM_PARAMS = (("input", "stdin"), ("output", "stdout"), ("error", "stderr"))


@dataclass(frozen=True)
class ExecOptions:
    """What ``/exec/{namespace}/{pod}/{container}?command=...`` asks for."""

    namespace: str
    pod: str
    container: str
    command: tuple[str, ...]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @classmethod
    def from_request(
        cls, namespace: str, pod: str, container: str, request: Request
    ) -> ExecOptions:
        """Read the query; HttpError 400 naming the parameter when it is unusable."""
        command = tuple(request.query.get("command", []))
        if not command or not command[0]:
            raise HttpError(400, "command: at least one non-empty command parameter is required")
        if sum(len(part) for part in command) > MAX_COMMAND or any("\0" in c for c in command):
            raise HttpError(400, f"command: longer than {MAX_COMMAND} bytes or holds a NUL")
        tty = request.flag("tty")
        stdin, stdout, stderr = (_stream_flag(request, name) for name in STREAM_PARAMS)
        options = cls(namespace, pod, container, command, stdin, stdout, stderr and not tty, tty)
        if not (stdin or stdout or stderr):
            raise HttpError(400, "input (stdin), output (stdout), error (stderr): one must be 1")
        return options

    def expected_streams(self) -> set[str]:
        wanted = {"error", "stdin" if self.stdin else "", "stdout" if self.stdout else ""}
        wanted |= {"stderr" if self.stderr else "", "resize" if self.tty else ""}
        return wanted - {""}


def _stream_flag(request: Request, names: tuple[str, str]) -> bool:
    return any(request.flag(name) for name in names)


@dataclass(frozen=True)
class ExecCommand:
    """How to start a command in a container: the runtime's answer to an exec request.

    `argv` is run as is (a runtime may wrap the user's command, e.g. to enter the pod's network
    namespace); `env` replaces the environment (None: this process's); `preexec` runs in the
    child between fork and exec (e.g. to join the container's cgroup or namespaces)."""

    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    preexec: Callable[[], None] | None = field(default=None, compare=False)


def status_json(exit_code: int | None, message: str = "") -> bytes:
    """The v4 error stream's message: success, a non-zero exit code, or a failure `message`."""
    status: dict[str, Any] = {"metadata": {}, "status": "Success"}
    if exit_code is None:
        status.update(status="Failure", message=message, reason="InternalError", code=500)
    elif exit_code != 0:
        status.update(
            status="Failure",
            message=f"command terminated with non-zero exit code: exit status {exit_code}",
            reason="NonZeroExitCode",
            details={"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
        )
    return json.dumps(status).encode()


async def accept_streams(
    session: spdy.Session, wanted: set[str], timeout: float = STREAM_CREATION_TIMEOUT
) -> dict[str, spdy.Stream] | None:
    """Accept the streams `wanted` (by streamType) within `timeout`; None if they did not all
    come. A stream of another or a repeated type is reset."""
    streams: dict[str, spdy.Stream] = {}
    deadline = asyncio.get_running_loop().time() + timeout
    while set(streams) != wanted:
        left = deadline - asyncio.get_running_loop().time()
        stream = await session.accept(max(left, 0.0)) if left > 0 else None
        if stream is None:
            return None
        kind = stream.headers.get("streamtype", "")
        if kind not in wanted or kind in streams:
            await stream.reset(spdy.PROTOCOL_ERROR)
            continue
        await stream.reply()
        streams[kind] = stream
    return streams


async def run_exec(
    streams: dict[str, spdy.Stream], options: ExecOptions, command: ExecCommand | None
) -> None:
    """Run `command` wired to the streams, then report its end on the error stream."""
    error = streams["error"]
    if command is None:
        what = f"container {options.container!r} in pod {options.namespace}/{options.pod}"
        await _finish(streams, status_json(None, f"{what} is not running on this node"))
        return
    try:
        process, terminal = await _start(command, options)
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        if "stderr" in streams or "stdout" in streams:
            where = streams.get("stderr") or streams["stdout"]
            await where.write(f"exec {options.command[0]!r}: {exc.strerror}\n".encode())
        await _finish(streams, status_json(code))
        return
    try:
        code = await _pump(process, terminal, streams)
    finally:  # cancelled: the client left, nobody will read the command's output
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    await error.write(status_json(code))
    await _finish(streams, None)


async def _finish(streams: dict[str, spdy.Stream], status: bytes | None) -> None:
    if status is not None:
        await streams["error"].write(status)
    for stream in streams.values():
        await stream.close()


async def _start(command: ExecCommand, options: ExecOptions) -> tuple[Any, int | None]:
    """The process, and the master side of its terminal when it has one."""
    common: dict[str, Any] = {"env": command.env, "cwd": command.cwd}
    if not options.tty:
        pipe, devnull = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
        process = await asyncio.create_subprocess_exec(
            *command.argv,
            stdin=pipe if options.stdin else devnull,
            stdout=pipe if options.stdout else devnull,
            stderr=pipe if options.stderr else devnull,
            preexec_fn=command.preexec,
            **common,
        )
        return process, None
    master, slave = os.openpty()
    try:
        process = await asyncio.create_subprocess_exec(
            *command.argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=_controlling_terminal(command.preexec),
            **common,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return process, master


def _controlling_terminal(then: Callable[[], None] | None) -> Callable[[], None]:
    def preexec() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        if then is not None:
            then()

    return preexec


async def _pump(process: Any, terminal: int | None, streams: dict[str, spdy.Stream]) -> int:
    """Copy between the streams and the process until its output ends and it exits."""
    if terminal is not None:
        return await _pump_terminal(process, terminal, streams)
    tasks = [asyncio.create_task(_to_stdin(streams.get("stdin"), process.stdin))]
    outputs = [
        asyncio.create_task(_from(reader, streams[name]))
        for name, reader in (("stdout", process.stdout), ("stderr", process.stderr))
        if reader is not None
    ]
    code = await process.wait()
    await asyncio.gather(*outputs)
    for task in tasks:
        task.cancel()
    return _exit_code(code)


async def _to_stdin(stream: spdy.Stream | None, writer: asyncio.StreamWriter | None) -> None:
    if stream is None or writer is None:
        return
    try:
        while chunk := await stream.read(_READ):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass  # the command closed its standard input: what is left is dropped, as a pipe does
    finally:
        writer.close()


async def _from(reader: asyncio.StreamReader, stream: spdy.Stream) -> None:
    while chunk := await reader.read(_READ):
        await stream.write(chunk)
    await stream.close()


async def _pump_terminal(process: Any, master: int, streams: dict[str, spdy.Stream]) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=4 * _READ)  # pauses reading the terminal when full
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(master, "rb", buffering=0)
    )
    tasks = [
        asyncio.create_task(_stdin_to_terminal(streams.get("stdin"), master)),
        asyncio.create_task(_resizes(streams.get("resize"), master)),
    ]
    stdout = streams.get("stdout")
    try:
        while chunk := await _read_terminal(reader):
            if stdout is not None:
                await stdout.write(chunk)
        code = await process.wait()
    finally:
        for task in tasks:
            task.cancel()
        transport.close()  # closes the master side too
    if stdout is not None:
        await stdout.close()
    return _exit_code(code)


async def _read_terminal(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.read(_READ)
    except OSError:  # EIO: every process holding the terminal's other side has ended
        return b""


async def _stdin_to_terminal(stream: spdy.Stream | None, master: int) -> None:
    if stream is None:
        return
    while chunk := await stream.read(_READ):
        with contextlib.suppress(OSError):
            os.write(master, chunk)  # a terminal's input buffer; ^D is how one ends it


async def _resizes(stream: spdy.Stream | None, master: int) -> None:
    if stream is None:
        return
    decoder, text = json.JSONDecoder(), ""
    while chunk := await stream.read(4096):
        text = (text + chunk.decode(errors="replace")).lstrip()
        while text:
            try:
                size, end = decoder.raw_decode(text)
            except json.JSONDecodeError:
                break
            text = text[end:].lstrip()
            _set_size(master, size)
        if len(text) > 4096:
            return  # not a stream of sizes: stop reading it


def _set_size(master: int, size: Any) -> None:
    if not isinstance(size, dict):
        return
    width, height = size.get("Width"), size.get("Height")
    if isinstance(width, int) and isinstance(height, int) and 0 <= width < 65536 > height >= 0:
        with contextlib.suppress(OSError):
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))


def _exit_code(returncode: int) -> int:
    """A shell's convention for a signal: 128 + its number."""
    return 128 - returncode if returncode < 0 else returncode
