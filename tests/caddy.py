"""A real Caddy (Debian's package) as a child process, with a temporary Caddyfile: plain HTTP
on one loopback port, no admin endpoint, its state in a directory of the test's."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["CADDY", "Caddy"]

CADDY = Path(shutil.which("caddy") or "/usr/bin/caddy")


class Caddy:
    """Caddy serving ``site`` (a Caddyfile's site blocks) from ``directory``.

    Args:
        directory: an empty directory of the test's.
        site: the site blocks (their addresses plain ``http://127.0.0.1:<port>``).
        port: the port they listen on (waited for).
    """

    def __init__(self, directory: Path, site: str, port: int) -> None:
        self.directory = directory
        self.port = port
        self.config = directory / "Caddyfile"
        self.config.write_text("{\n\tadmin off\n\tauto_https off\n}\n\n" + site)
        self.log_path = directory / "caddy.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start Caddy and wait until it listens."""
        assert CADDY.exists(), "caddy is missing: run `make proxy` (`make test` does)"
        env = {**os.environ, "HOME": str(self.directory), "XDG_DATA_HOME": str(self.directory),
               "XDG_CONFIG_HOME": str(self.directory)}  # fmt: skip
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(CADDY), "run", "--config", str(self.config), "--adapter", "caddyfile"],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            assert self.process.poll() is None, self.log_path.read_text(errors="replace")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, self.log_path.read_text(errors="replace")
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop Caddy."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
