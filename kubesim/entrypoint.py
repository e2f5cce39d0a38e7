"""What a command line says about how long it runs and how it ends (pure): the shared model of a workload.

A RayJob's entrypoint (read by the simulated Ray dashboard, ``kubesim.kuberay.dashboard``) and a batch Job
container's shell line (``kubesim.batch.container``) are read the same way, as a real cluster would run
them: ``sleep N``, ``--epochs N`` / ``NUM_EPOCHS=N``, ``exit N``. Apart from both controllers so that
neither imports the other.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

EPOCH_SECONDS = 20.0
"""Simulated seconds one training epoch takes (``NUM_EPOCHS`` / ``EPOCHS`` / ``--epochs N``)."""
DEFAULT_DURATION = 30.0
"""Simulated seconds a Ray job runs when neither its entrypoint nor its runtime env says how long."""
DEFAULT_STARTUP = 5.0
"""Simulated seconds until a pod is running once placed (image pull, container start): Ray's and Jobs'."""
EPOCH_VARIABLES = ("NUM_EPOCHS", "EPOCHS")
_EPOCH_FLAGS = ("--num-epochs", "--num_epochs", "--epochs", "--max-epochs", "--max_epochs")
_SEPARATORS = (";", "&&", "||", "&", "|")


def seconds(value: str | None, default: float) -> float:
    """``value`` as simulated seconds (``inf`` / ``infinity`` never end), else ``default``."""
    if value is None or value == "":
        return default
    if str(value).lower() in ("inf", "infinity"):
        return math.inf
    try:
        return max(0.0, float(value))
    except ValueError:
        return default


@dataclass(frozen=True)
class Entrypoint:
    """What a RayJob's shell entrypoint does, as far as the simulation cares.

    * ``sleep N`` (seconds, or ``infinity``) runs that long; several sleeps add up;
    * ``--epochs N`` (also ``--num-epochs``, ``--max-epochs``, ``=N`` forms) or a ``NUM_EPOCHS=N`` /
      ``EPOCHS=N`` prefix trains N epochs of ``EPOCH_SECONDS`` each;
    * ``exit N`` ends it with exit code N (what follows never runs). Conditions (``&&``, ``||``) are not
      evaluated: an ``exit`` anywhere is taken.
    """

    sleep: float = 0.0
    epochs: int | None = None
    exit_code: int = 0

    @classmethod
    def parse(cls, command: str) -> Entrypoint:
        try:
            lexer = shlex.shlex(command or "", posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError:  # unbalanced quotes: a real shell would refuse it too; nothing to learn
            return cls()
        sleep, epochs, exit_code = 0.0, None, 0
        for words in _commands(tokens):
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                name, _, value = words.pop(0).partition("=")
                if name in EPOCH_VARIABLES and value.isdigit():
                    epochs = int(value)
            if not words:
                continue
            if words[0] == "sleep" and len(words) > 1:
                sleep += seconds(words[1], 0.0)
            elif words[0] == "exit":
                exit_code = int(words[1]) if len(words) > 1 and words[1].lstrip("-").isdigit() else 0
                break
            for index, word in enumerate(words):
                flag, has_value, value = word.partition("=")
                if flag not in _EPOCH_FLAGS:
                    continue
                value = value if has_value else (words[index + 1] if index + 1 < len(words) else "")
                if value.isdigit():
                    epochs = int(value)
        return cls(sleep=sleep, epochs=epochs, exit_code=exit_code)


def _commands(tokens: list[str]) -> list[list[str]]:
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]
