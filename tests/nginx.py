"""A real nginx (Debian's package) as a child process, with a temporary configuration.

It runs in the foreground as one process (no daemon, no master, no system service) with its
pid, logs and temporary files in a directory of the test's, and stops with the test.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["NGINX", "Nginx"]

NGINX = Path(shutil.which("nginx") or "/usr/sbin/nginx")

_MAIN = """daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    include {dir}/site.conf;
}}
"""


class Nginx:
    """nginx serving ``site`` (what goes inside ``http { }``) from ``directory``.

    Args:
        directory: an empty directory of the test's.
        site: the server configuration.
        port: the port its ``listen`` names (waited for).
    """

    def __init__(self, directory: Path, site: str, port: int) -> None:
        self.directory = directory
        self.port = port
        (directory / "site.conf").write_text(site)
        self.config = directory / "nginx.conf"
        self.config.write_text(_MAIN.format(dir=directory))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Check the configuration, start nginx, and wait until it listens."""
        assert NGINX.exists(), "nginx is missing: run `make proxy` (`make test` does)"
        command = [str(NGINX), "-p", str(self.directory), "-e", str(self.directory / "error.log")]
        check = subprocess.run(
            [*command, "-t", "-c", str(self.config)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stderr
        self.process = subprocess.Popen([*command, "-c", str(self.config)])
        deadline = time.monotonic() + 20
        while True:
            assert self.process.poll() is None, self.error_log()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, f"nginx did not listen:\n{self.error_log()}"
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop nginx."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def error_log(self) -> str:
        """nginx's error log."""
        path = self.directory / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""
