"""Hostile commands against every sandbox backend: each is contained, reported as a typed
`ExecStatus`, and leaves nothing behind on the host.

What the process backend does not isolate (the filesystem, the network) is tested as the
documented weakness it is, in test_isolation.py; see docs/sandbox.md.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

import pytest

from openenv.sandbox import ExecStatus, Sandbox, SandboxError, SandboxLimits, process_count_bounded

from .conftest import has_cgroup, processes_with, survivors, unique_sleep

pytestmark = pytest.mark.timeout(300)

PY_FORK_BOMB = "import os\nwhile True:\n    os.fork()"
PY_FORK_BOMB_THAT_KEEPS_TRYING = (
    "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
)
BASH_FORK_BOMB = ":(){ :|:& };:"


def skip_unbounded_forks(kind: str) -> None:
    if os.geteuid() == 0 and (kind == "process-rlimits" or not process_count_bounded()):
        pytest.skip(
            "the process backend without a cgroup bounds processes by RLIMIT_NPROC, which does "
            "not bind root (documented in docs/sandbox.md); a fork bomb would reach the host"
        )


def test_a_command_runs_and_says_how_it_ended(make_box: Any, backend_kind: str) -> None:
    box = make_box()
    ok = box.run([box.python, "-c", "import os; print(6 * 7, os.getcwd())"])
    assert ok.status is ExecStatus.OK, ok
    assert ok.stdout.split() == ["42", box.workspace]
    assert (
        ok.backend == box.backend == ("bubblewrap" if backend_kind == "bubblewrap" else "process")
    )
    failed = box.run(["sh", "-c", "echo oops >&2; exit 3"])
    assert (failed.status, failed.exit_code, failed.stderr) == (ExecStatus.ERROR, 3, "oops\n")
    assert box.run(["cat"], stdin="fed").stdout == "fed"


def test_a_fork_bomb_hits_the_process_limit(make_box: Any, backend_kind: str) -> None:
    """Every process of this bomb forks until a fork fails, the first one included, so it
    always reaches the limit and fails there."""
    skip_unbounded_forks(backend_kind)
    box = make_box(max_processes=24)
    result = box.run([box.python, "-c", PY_FORK_BOMB])
    assert result.status is ExecStatus.PROCESS_LIMIT, result
    assert box.run(["true"]).ok  # the sandbox is still usable


def test_the_bash_fork_bomb_is_contained(make_box: Any, backend_kind: str) -> None:
    """`:(){ :|:& };:` returns at once and leaves the bomb in the background: it is killed with
    the command, whether or not it got to the process limit first (a race: ok or
    process_limit), and none of it survives."""
    skip_unbounded_forks(backend_kind)
    _, token = unique_sleep()
    box = make_box(max_processes=24)
    result = box.run(["bash", "-c", f"{BASH_FORK_BOMB} # {token}"])
    assert result.status in (ExecStatus.PROCESS_LIMIT, ExecStatus.OK), result
    assert survivors(token) == []
    waited = box.run(["bash", "-c", f"{BASH_FORK_BOMB}; wait; exit 3"])
    assert waited.status in (ExecStatus.PROCESS_LIMIT, ExecStatus.ERROR), waited
    assert box.run(["true"]).ok


def test_a_fork_bomb_that_keeps_trying_ends_at_the_wall_clock(
    make_box: Any, backend_kind: str
) -> None:
    skip_unbounded_forks(backend_kind)
    box = make_box(max_processes=16, wall_time_s=2, cpu_time_s=None)
    result = box.run([box.python, "-c", PY_FORK_BOMB_THAT_KEEPS_TRYING + "  # fbomb-token"])
    assert result.status is ExecStatus.TIMEOUT, result
    assert survivors("fbomb-token") == []


def test_a_memory_hog_hits_the_memory_limit(make_box: Any, backend_kind: str) -> None:
    box = make_box(memory_mb=96)
    hog = box.run([box.python, "-c", "chunks = []\nwhile True: chunks.append(bytearray(10**7))"])
    assert hog.status is ExecStatus.MEMORY_LIMIT, hog
    shell = box.run(["bash", "-c", "a=xxxxxxxx; while true; do a=$a$a; done"])
    assert shell.status is ExecStatus.MEMORY_LIMIT, shell


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_endless_output_is_cut_and_the_command_killed(
    make_box: Any, backend_kind: str, stream: str
) -> None:
    box = make_box(max_output_bytes=50_000)
    code = f"import sys\nwhile True: sys.{stream}.write('x' * 4096)"
    result = box.run([box.python, "-c", code])
    assert result.status is ExecStatus.OUTPUT_LIMIT, result
    assert result.truncated
    assert len(getattr(result, stream)) == 50_000


def test_a_cpu_spin_hits_the_cpu_limit(make_box: Any, backend_kind: str) -> None:
    box = make_box(cpu_time_s=1)
    result = box.run([box.python, "-c", "while True: pass"])
    assert result.status is ExecStatus.CPU_LIMIT, result


def test_a_sleeper_hits_the_wall_clock(make_box: Any, backend_kind: str) -> None:
    argument, token = unique_sleep()
    box = make_box(wall_time_s=1.5)
    result = box.run(["sleep", argument])
    assert result.status is ExecStatus.TIMEOUT, result
    assert survivors(token) == []


@pytest.mark.parametrize("writer", ["head", "python"])
def test_a_big_file_hits_the_file_limit(make_box: Any, backend_kind: str, writer: str) -> None:
    box = make_box(max_file_mb=1)
    argv = (
        ["sh", "-c", "head -c 5000000 /dev/zero > big"]
        if writer == "head"
        else [box.python, "-c", "open('big', 'wb').write(bytes(5_000_000))"]
    )
    result = box.run(argv)
    assert result.status is ExecStatus.FILE_LIMIT, result
    assert box.host_path("big").stat().st_size <= 1024 * 1024


def test_a_huge_argv_is_the_commands_error_and_a_huge_stdin_is_fed(
    make_box: Any, backend_kind: str
) -> None:
    box = make_box()
    too_long = box.run(["echo", "x" * 3_000_000])
    assert (too_long.status, too_long.exit_code) == (ExecStatus.ERROR, 126), too_long
    assert "too long" in too_long.message
    fed = box.run(["wc", "-c"], stdin=b"y" * 20_000_000)
    assert fed.status is ExecStatus.OK and fed.stdout.strip() == "20000000", fed
    ignored = box.run(["true"], stdin=b"z" * 20_000_000)  # never reads it: no hang
    assert ignored.status is ExecStatus.OK, ignored


def test_stdin_nobody_reads_cannot_hang_the_caller(make_box: Any, backend_kind: str) -> None:
    """A background process that escaped the kill (process backend without a cgroup) and
    holds stdin open without reading it must not block run() writing a large stdin."""
    argument, token = unique_sleep()
    box = make_box()
    try:
        result = box.run(["sh", "-c", f"setsid sleep {argument} & exit 0"], stdin=b"s" * 5_000_000)
        assert result.status is ExecStatus.OK, result
    finally:
        for pid in processes_with(token):  # the documented escape of the weakest configuration
            os.kill(pid, signal.SIGKILL)


def test_a_missing_program_is_the_commands_error(make_box: Any, backend_kind: str) -> None:
    result = make_box().run(["no-such-program-anywhere"])
    assert (result.status, result.exit_code) == (ExecStatus.ERROR, 127), result


def test_non_utf8_output_is_replaced_not_fatal(make_box: Any, backend_kind: str) -> None:
    box = make_box()
    code = (
        "import sys; sys.stdout.buffer.write(b'\\xff\\xfe ok'); sys.stderr.buffer.write(b'\\x80')"
    )
    result = box.run([box.python, "-c", code])
    assert result.status is ExecStatus.OK, result
    assert result.stdout == "\ufffd\ufffd ok" and result.stderr == "\ufffd"


def test_closing_stdout_early_does_not_end_the_wait(make_box: Any, backend_kind: str) -> None:
    argument, token = unique_sleep()
    box = make_box(wall_time_s=1)
    result = box.run(["sh", "-c", f"exec >&- 2>&-; sleep {argument}"])
    assert result.status is ExecStatus.TIMEOUT, result
    assert survivors(token) == []
    finished = box.run(
        ["sh", "-c", "exec >&- 2>&-; sleep 0.2; exit 4"], limits=SandboxLimits(wall_time_s=60)
    )
    assert (finished.status, finished.exit_code) == (ExecStatus.ERROR, 4), finished


LEFTOVERS = {
    "background": "sleep {arg} & echo started",
    "nohup": "nohup sleep {arg} >/dev/null 2>&1 & echo started",
    "setsid": "setsid sleep {arg} >/dev/null 2>&1 < /dev/null & echo started",
    "double-fork": (
        "{python} -c 'import os, sys\n"
        "if os.fork(): sys.exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): sys.exit(0)\n"
        'os.execvp("sleep", ["sleep", "{arg}"])\' && echo started'
    ),
}


@pytest.mark.parametrize("how", list(LEFTOVERS))
def test_no_background_process_survives_the_command(
    make_box: Any, backend_kind: str, how: str
) -> None:
    argument, token = unique_sleep()
    box = make_box()
    result = box.run(["bash", "-c", LEFTOVERS[how].format(arg=argument, python=box.python)])
    assert result.status is ExecStatus.OK and result.stdout == "started\n", result
    assert survivors(token) == []


def test_without_a_cgroup_an_escaper_that_clears_its_environment_survives(
    make_box: Any, backend_kind: str
) -> None:
    """The documented limit of the weakest configuration: the process backend without a
    cgroup finds escaped processes by a mark in their environment, so one started with a
    cleared environment outside the process group is not found."""
    if backend_kind != "process-rlimits":
        pytest.skip("a cgroup or bubblewrap's PID namespace kills it (tested above)")
    argument, token = unique_sleep()
    box = make_box()
    try:
        escape = (
            f"env -i setsid sh -c 'touch up; exec sleep {argument}' >/dev/null 2>&1 </dev/null &"
            " while [ ! -e up ]; do sleep 0.01; done"
        )
        assert box.run(["sh", "-c", escape]).status is ExecStatus.OK
        assert processes_with(token) != []
    finally:
        for pid in processes_with(token):
            os.kill(pid, signal.SIGKILL)


def test_spawned_processes_die_with_close(make_box: Any, backend_kind: str) -> None:
    argument, token = unique_sleep()
    box: Sandbox = make_box()
    child = box.spawn(["bash", "-c", f"sleep {argument} & exec cat"])
    child.stdin.write(b"ping\n")
    child.stdin.flush()
    assert child.stdout.readline() == b"ping\n"
    assert child.alive()
    box.close()
    assert not child.alive()
    assert survivors(token) == []


def test_close_kills_a_command_another_thread_waits_on(make_box: Any, backend_kind: str) -> None:
    argument, token = unique_sleep()
    box: Sandbox = make_box()
    results: list[Any] = []
    waiter = threading.Thread(target=lambda: results.append(box.run(["sleep", argument])))
    waiter.start()
    while not survivors(token, settle_s=0):  # until the command is running
        assert waiter.is_alive()
        threading.Event().wait(0.02)
    box.close()
    waiter.join(60)
    assert results and results[0].status is ExecStatus.KILLED, results
    assert survivors(token) == []
    after = box.run(["true"])
    assert after.status is ExecStatus.SANDBOX_ERROR  # closed: the sandbox's own failure
    with pytest.raises(SandboxError):
        after.check()


def test_many_threads_share_one_sandbox(make_box: Any, backend_kind: str) -> None:
    """Commands started from many server threads at once each get their own limits and result."""
    box: Sandbox = make_box(max_processes=24, memory_mb=96, max_output_bytes=20_000)
    jobs: dict[str, tuple[list[str], ExecStatus]] = {
        "ok": ([box.python, "-c", "print('fine')"], ExecStatus.OK),
        "error": (["sh", "-c", "exit 2"], ExecStatus.ERROR),
        "output": ([box.python, "-c", "while True: print('x' * 999)"], ExecStatus.OUTPUT_LIMIT),
        "memory": (
            [box.python, "-c", "a = []\nwhile True: a.append(bytearray(10**7))"],
            ExecStatus.MEMORY_LIMIT,
        ),
    }
    if has_cgroup(backend_kind) or backend_kind == "bubblewrap":
        # rlimits count every process of the user, so with rlimits only a bomb in one command
        # would starve its neighbours (documented); with a cgroup each command has its own.
        jobs["forks"] = ([box.python, "-c", PY_FORK_BOMB], ExecStatus.PROCESS_LIMIT)
    results: dict[str, Any] = {}

    def run(name: str, argv: list[str]) -> None:
        results[name] = box.run(argv)

    threads = [
        threading.Thread(target=run, args=(f"{name}-{i}", argv))
        for i in range(2)
        for name, (argv, _) in jobs.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    for key, result in results.items():
        assert result.status is jobs[key.rsplit("-", 1)[0]][1], (key, result)
    assert len(results) == len(threads)


def test_output_cannot_fake_a_sandbox_error(make_box: Any, backend_kind: str) -> None:
    box = make_box()
    lying = box.run(
        [
            "sh",
            "-c",
            "echo 'bwrap: Creating new namespace failed: Operation not permitted' >&2; "
            "echo 'setpriv: setresuid failed' >&2; exit 1",
        ]
    )
    assert (lying.status, lying.exit_code) == (ExecStatus.ERROR, 1), lying
    lying.check()  # not an infrastructure error


def test_limit_words_in_stderr_are_not_believed_where_a_cgroup_counts(
    make_box: Any, backend_kind: str
) -> None:
    if not has_cgroup(backend_kind):
        pytest.skip("no cgroup here: stderr is the only evidence of an rlimit hit (documented)")
    box = make_box()
    result = box.run(
        [
            "sh",
            "-c",
            "echo MemoryError >&2; echo 'fork: Resource temporarily unavailable' >&2; exit 1",
        ]
    )
    assert result.status is ExecStatus.ERROR, result


def test_a_sandbox_that_cannot_start_is_an_infrastructure_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bubblewrap failing before the command runs (here: a bind whose source is gone, injected
    into its arguments) is SANDBOX_ERROR, which `check()` raises as an infrastructure error."""
    from .conftest import bubblewrap_problem

    if problem := bubblewrap_problem():
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    real = Sandbox._bwrap_argv

    def with_a_missing_bind(self: Sandbox, *args: Any) -> list[str]:
        argv = real(self, *args)
        return [argv[0], "--ro-bind", "/nonexistent-openenv-source", "/missing", *argv[1:]]

    monkeypatch.setattr(Sandbox, "_bwrap_argv", with_a_missing_bind)
    with Sandbox(backend="bubblewrap") as box:
        result = box.run(["true"])
    assert result.status is ExecStatus.SANDBOX_ERROR, result
    assert "bubblewrap could not start the command" in result.message
    with pytest.raises(SandboxError) as raised:
        result.check()
    assert raised.value.data["category"] == "infrastructure"


def test_the_servers_environment_variables_stay_out(
    make_box: Any, backend_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENENV_TEST_SECRET", "hunter2")
    box = make_box()
    result = box.run([box.python, "-c", "import os; print(sorted(os.environ))"])
    assert "OPENENV_TEST_SECRET" not in result.stdout and "hunter2" not in result.stdout


def test_limits_per_call_override_the_sandbox_defaults(make_box: Any, backend_kind: str) -> None:
    box = make_box(wall_time_s=60)
    result = box.run(["sleep", "30"], limits=SandboxLimits(wall_time_s=1))
    assert result.status is ExecStatus.TIMEOUT, result
    assert sys.executable  # the interpreter the sandbox hands out is the server's
    assert box.python == sys.executable
