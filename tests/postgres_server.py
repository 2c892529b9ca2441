"""A real PostgreSQL server (Debian's ``postgresql`` package) for the store and replica tests.

One cluster for the whole test session, on a temporary directory and a free loopback port;
each test that wants one gets a database of its own. ``initdb`` and ``postgres`` refuse to run
as root, so under root they run as the ``postgres`` user, which owns the directory.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.artifacts import artifact_path

__all__ = ["PostgresServer", "postgres_bin"]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's ``bin`` directory (Debian keeps it off PATH)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4])
    )
    return Path(found[-1]).parent if found else None


class PostgresServer:
    """One ``postgres`` process on 127.0.0.1:``port``, with a trust-authenticated superuser.

    Args:
        port: the loopback port.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.bin = postgres_bin()
        self.directory = Path(tempfile.mkdtemp(prefix="maskscope-pg-"))
        self.log_path = artifact_path("postgres")
        self._process: subprocess.Popen[bytes] | None = None

    def _as_postgres(self, *command: str) -> list[str]:
        # initdb/postgres refuse root; anyone else runs them as themself.
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else [*command]

    def url(self, database: str = "postgres") -> str:
        """The URL of ``database`` on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self, timeout_s: float = 60.0) -> None:
        """initdb, then start the server and wait until it accepts connections."""
        assert self.bin is not None, (
            "PostgreSQL is not installed (/usr/lib/postgresql/*/bin/postgres): run `make postgres` "
            "(`make test` does), or `apt-get install postgresql`"
        )
        data = self.directory / "data"
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        subprocess.run(
            self._as_postgres(
                str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                "--no-sync", "-E", "UTF8", "--locale=C.UTF-8",
            ),
            check=True, capture_output=True,
        )  # fmt: skip
        ARTIFACTS.mkdir(exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self._as_postgres(
                    str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port),
                    "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200",
                    "-c", f"unix_socket_directories={self.directory}",
                ),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                assert self._process.poll() is None, f"postgres exited: see {self.log_path}"
                assert time.monotonic() < deadline, f"postgres did not start: see {self.log_path}"
                time.sleep(0.1)

    def new_database(self) -> str:
        """A new empty database's URL."""
        name = f"t_{secrets.token_hex(6)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        if self._process is not None and self._process.poll() is None:
            # To the group: runuser does not pass signals on. SIGINT: PostgreSQL's fast shutdown.
            os.killpg(self._process.pid, signal.SIGINT)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
