"""What a Job pod's container does, read from its command as a real cluster would run it (pure).

The same convention as a RayJob's entrypoint (``kubesim.entrypoint.Entrypoint``): the container's
shell line is ``command`` + ``args`` (for ``sh -c`` / ``bash -c`` the script after ``-c``); ``sleep N``
runs N simulated seconds (several add up, ``sleep infinity`` never ends), ``--epochs N`` / ``NUM_EPOCHS=N``
trains N epochs of ``EPOCH_SECONDS``, ``exit N`` ends it with that exit code, ``echo`` writes its
arguments to the container log (and takes no time). A command that says none of this runs
``DEFAULT_DURATION`` (30 s).
The pod is running ``DEFAULT_STARTUP`` (5 s) after it was placed, as a Ray pod is.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from kubesim.entrypoint import DEFAULT_DURATION, DEFAULT_STARTUP, EPOCH_SECONDS, Entrypoint

SHELLS = ("sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/env")
STARTUP = DEFAULT_STARTUP


@dataclass(frozen=True)
class ContainerRun:
    seconds: float
    exit_code: int
    output: tuple[str, ...]


def shell_line(container: dict) -> str:
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    if words and words[0] in SHELLS and "-c" in words:
        index = words.index("-c")
        return " ".join(words[index + 1 : index + 2])
    return shlex.join(words)


def echoed(line: str) -> tuple[str, ...]:
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return ()
    out, command = [], []
    for token in [*tokens, ";"]:
        if token in (";", "&&", "||", "&", "|"):
            if command and command[0] == "echo":
                out.append(" ".join(command[1:]))
            command = []
        else:
            command.append(token)
    return tuple(out)


def container_run(container: dict) -> ContainerRun:
    line = shell_line(container)
    entry = Entrypoint.parse(line)
    output = echoed(line)
    seconds = entry.sleep + (entry.epochs or 0) * EPOCH_SECONDS
    if not entry.sleep and entry.epochs is None and not entry.exit_code and not output:
        seconds = DEFAULT_DURATION
    return ContainerRun(seconds=seconds, exit_code=entry.exit_code, output=output)
