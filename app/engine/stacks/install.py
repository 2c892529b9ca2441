"""``make stacks``: install each layered stack's pins from the registry, once.

Run as ``python -m app.engine.stacks.install``. For every ``NAME=PIN... over BASE`` line of
``MASKSCOPE_STACKS``, BASE's own pip installs the pins ``--no-deps`` into
``MASKSCOPE_STACKS_DIR/NAME`` (a release's wheel over an environment that has its dependencies:
how vLLM 0.34.0 runs on CPU, where no CPU build of it exists); a marker file holding the pins
says it is done, so a second run installs nothing. A stack with an environment of its own is
installed by its own target (``make vllm-install``) and only checked here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from app.engine.stack_pins import MARKER, Stack, configured
from app.settings import Settings

__all__ = ["install", "main"]


def install(stack: Stack) -> bool:
    """Install a layered stack's pins into its directory, unless its marker says they are.

    Returns:
        Whether anything was installed.

    Raises:
        subprocess.CalledProcessError: pip failed (its output is on stderr).
    """
    target = stack.paths[0]
    marker = target / MARKER
    wanted = "\n".join(stack.pins) + "\n"
    if marker.is_file() and marker.read_text() == wanted:
        return False
    if target.exists():
        shutil.rmtree(target)  # other pins, or a run cut short: start again
    command = [str(stack.python), "-m", "pip", "--disable-pip-version-check", "install"]
    command += ["--no-deps", "--target", str(target), *stack.pins]
    subprocess.run(command, check=True)
    marker.write_text(wanted)
    return True


def main() -> int:
    """Install every layered stack of the settings; say what each is."""
    settings = Settings()
    failed = 0
    for stack in configured(settings).values():
        if not stack.python.is_file():
            print(f"{stack.name}: {stack.python} is missing (make vllm-install)", file=sys.stderr)
            failed += 1
            continue
        if not stack.layered:
            print(f"{stack.name}: its own environment ({stack.python.parent.parent.name})")
            continue
        done = install(stack)
        state = "installed" if done else "already installed"
        print(f"{stack.name}: {' '.join(stack.pins)} {state} over {stack.over}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
