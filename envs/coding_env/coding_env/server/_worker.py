"""The interpreter that runs inside the sandbox (stdlib only; passed to `python -c`).

The server writes a random token line, then one JSON request per line, on stdin. Replies are
frames `\\n<token> <length>\\n<json>` on a private copy of the original stdout. Before any
request runs, fd 0 is pointed at /dev/null and fds 1 and 2 at the cell's own files in the
workspace, so nothing the code prints (or its child processes print) reaches the frame channel.

Requests:
- `{"op": "setup", "out", "err"}`: the files a persistent interpreter's cells print to, opened
  once, before its first cell (the server reads them through its own descriptors). No reply.
- `{"op": "exec", "code", "cell", ["out", "err"]}`: run `code` in the one namespace this process
  keeps (a REPL), printing to the given files or the setup ones; reply `{"cell", "exit_code",
  "exception", "duration_s"}`.
- `{"op": "judge", "solution", "calls", "out", "err"}`: run `solution`, then evaluate each call
  expression; one reply per call, `{"case", "value"}` (JSON data) or `{"case", "error"}`.
  Expected values never enter the sandbox: the server compares.
"""

import json
import linecache
import os
import sys
import time
import traceback

_ORIGINAL_STREAMS = (sys.stdout, sys.stderr, sys.stdin)
_MAIN_PID = os.getpid()
# Bound now: code that patches the json module later cannot change what this file sends.
_dumps, _loads = json.dumps, json.loads


def _frames_writer(token):
    channel = os.dup(1)  # not inherited by children (Python fds are non-inheritable)

    def send(payload):
        data = _dumps(payload).encode()
        header = b"\n" + token + b" " + str(len(data)).encode() + b"\n"
        view = memoryview(header + data)
        while view:
            view = view[os.write(channel, view) :]

    return send


#: A persistent interpreter's own output files, opened once ("setup"): fd 1 and 2 are pointed
#: back at them, emptied, before each cell.
_SESSION_FILES = []


def _redirect(request):
    """Point fds 1 and 2 (and Python's streams) at this cell's output files."""
    for stream in _ORIGINAL_STREAMS[:2]:
        try:
            stream.flush()
        except Exception:
            pass
    sys.stdout, sys.stderr, sys.stdin = _ORIGINAL_STREAMS
    if "out" not in request:
        for fd, target in zip((1, 2), _SESSION_FILES, strict=True):
            os.ftruncate(target, 0)
            os.lseek(target, 0, os.SEEK_SET)
            os.dup2(target, fd)
        return
    for fd, path in ((1, request["out"]), (2, request["err"])):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)


def _flush():
    for stream in (sys.stdout, sys.stderr, *_ORIGINAL_STREAMS[:2]):
        try:
            stream.flush()
        except Exception:
            pass


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _describe(exc):
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return {"type": type(exc).__name__, "message": str(exc), "traceback": text}


def _run(code, name, namespace):
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    exec(compile(code, name, "exec"), namespace)


def exec_cell(request, namespace):
    _redirect(request)
    name = f"<cell-{request['cell']}>"
    exit_code, exception = 0, None
    started = time.perf_counter()
    try:
        _run(request["code"], name, namespace)
    except SystemExit as exc:
        exit_code = _exit_code(exc)
    except BaseException as exc:
        exit_code, exception = 1, _describe(exc)
        sys.stderr = _ORIGINAL_STREAMS[1]
        print(exception["traceback"], end="", file=sys.stderr)
    duration = time.perf_counter() - started
    _flush()
    _end_if_forked()
    return {
        "cell": request["cell"],
        "exit_code": exit_code,
        "exception": exception,
        "duration_s": round(duration, 6),
    }


def _end_if_forked():
    """A process the code forked must not go on to read requests or send replies."""
    if os.getpid() != _MAIN_PID:
        os._exit(0)


def _as_data(value):
    """The value as JSON data, or raise TypeError: nothing but plain data reaches the judge."""
    return _loads(_dumps(value, allow_nan=True))


def judge(request, send):
    _redirect(request)
    namespace = {"__name__": "__main__"}
    try:
        _run(request["solution"], "<solution>", namespace)
    except BaseException as exc:
        _flush()
        _end_if_forked()
        message = f"the solution raised {type(exc).__name__}: {exc}"
        for case in range(len(request["calls"])):
            send({"case": case, "error": message})
        return
    for case, call in enumerate(request["calls"]):
        try:
            value = _as_data(eval(compile(call, "<test>", "eval"), namespace))
        except BaseException as exc:
            _flush()
            _end_if_forked()
            send({"case": case, "error": f"{type(exc).__name__}: {exc}"})
            continue
        _flush()
        _end_if_forked()
        send({"case": case, "value": value})


def main():
    requests = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.close(null)
    token = requests.readline().strip()
    send = _frames_writer(token)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    send({"ready": True})
    for line in requests:
        request = json.loads(line)
        if request["op"] == "setup":
            _SESSION_FILES[:] = [os.open(request[key], os.O_WRONLY) for key in ("out", "err")]
            continue
        if request["op"] == "judge":
            judge(request, send)
            send({"done": True})
        else:
            send(exec_cell(request, namespace))


if __name__ == "__main__":
    main()
