"""What a warm container runs while it waits for its one operation.

A warm container (``hands.sandbox.pool``) is created and started with the tool's image
and the tool's hardening, but its command is this bootstrap followed by the tool's own
command: ``python3 -c SOURCE <tool command...>``. The bootstrap waits on its attached
stdin for one job — the operation id and the environment a cold run would have been
given — and then runs the tool in the same interpreter (a Python tool: its script, module
or ``-c`` code; any other command is ``exec``'d with that environment), so the
interpreter's start is paid before the operation, not during it.

Before the tool starts, the bootstrap writes one line to stderr, ``BOUND_MARK`` and a
JSON object with the operation id and when it was bound. A Hands that reconnects to
the container reads it: present, the tool may have run (its timeout counts from
``at``); absent once the container has stopped, the tool never started (the input never
arrived: exit ``NEVER_BOUND``). The Hands strip the line from the stderr they show.

A container nobody binds exits ``NEVER_BOUND`` after ``BH_WARM_IDLE_S`` seconds; so does
one whose input is cut short (the Hands died while writing it: stdin is closed when the
one attached client goes).
"""

from __future__ import annotations

#: the first stderr line of a bound warm container starts with this
BOUND_MARK = "bh-warm-bound "
#: the last line of a warm run's stdout and of its stderr: ``EXIT_MARK<nonce> <code>``
#: (each after a newline of its own), written once the tool's interpreter is done
EXIT_MARK = "bh-warm-exit "
#: the exit code of a warm container whose input never (completely) arrived
NEVER_BOUND = 121
#: what it writes to stderr when its input was cut short
CUT_SHORT = "warm container: its input was cut short or malformed"
#: how large a job may be (the arguments' own cap plus the environment around them)
MAX_JOB_BYTES = 4 * 2**20

SOURCE = f"""
import atexit, json, os, re, runpy, select, sys, time
def main():
    command = sys.argv[1:]
    idle = float(os.environ.pop("BH_WARM_IDLE_S", "300"))
    if not select.select([0], [], [], idle)[0]:
        sys.exit({NEVER_BOUND})
    data = bytearray()
    while chunk := os.read(0, 65536):
        data += chunk
        if len(data) > {MAX_JOB_BYTES}:
            break
    try:
        job = json.loads(data)
        operation, nonce = str(job["operation"]), str(job["nonce"])
        environment = dict(job["environment"])
    except (ValueError, KeyError, TypeError):
        sys.stderr.write({CUT_SHORT!r} + "\\n")
        sys.exit({NEVER_BOUND})
    data[:] = b""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.update({{str(k): str(v) for k, v in environment.items()}})
    mark = json.dumps({{"operation": operation, "at": time.time()}})
    sys.stderr.write({BOUND_MARK!r} + mark + "\\n")
    sys.stderr.flush()
    code = [0]
    def finish():
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:
                pass
        trailer = ("\\n" + {EXIT_MARK!r} + nonce + " " + str(code[0]) + "\\n").encode()
        os.write(1, trailer)
        os.write(2, trailer)
    python = re.fullmatch(r"python[0-9.]*", os.path.basename(command[0])) and len(command) > 1
    flag = python and command[1] in ("-m", "-c")
    if not python or flag and len(command) < 3 or not flag and command[1].startswith("-"):
        os.execvp(command[0], command)
    atexit.register(finish)
    try:
        if command[1] == "-m":
            sys.argv = [command[2], *command[3:]]
            runpy.run_module(command[2], run_name="__main__", alter_sys=True)
        elif command[1] == "-c":
            sys.argv = ["-c", *command[3:]]
            exec(compile(command[2], "<string>", "exec"), {{"__name__": "__main__"}})
        else:
            sys.argv = command[1:]
            sys.path[0] = os.path.dirname(os.path.abspath(command[1]))
            runpy.run_path(command[1], run_name="__main__")
    except SystemExit as stop:
        code[0] = 0 if stop.code is None else stop.code & 255 if isinstance(stop.code, int) else 1
        raise
    except BaseException:
        code[0] = 1
        raise
main()
"""


def command_of(tool_command: tuple[str, ...]) -> list[str]:
    """The warm container's command for a tool whose own command is ``tool_command``."""
    return ["python3", "-c", SOURCE, *tool_command]
