"""A PostgreSQL cluster of the test's own, in a temporary folder on a free port, that the test may stop and start
(a database restart under a running worker): never the shared server named by ``MEDEVAL_TEST_POSTGRES_URL``.

initdb refuses to run as root, so as root the cluster belongs to the ``postgres`` user (``runuser``). Skipped, with
the reason, where PostgreSQL's binaries are missing or no user can own the cluster; ``.ci/run`` installs them and
runs as root, so CI runs these tests.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from tests.conftest import free_port


def _binaries() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    return found[-1].parent if found else None


class PostgresCluster:
    def __init__(self, bin_dir: Path, folder: Path, port: int, as_user: list[str]) -> None:
        self.bin_dir, self.folder, self.port, self.as_user = bin_dir, folder, port, as_user

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.bin_dir / tool), *args], check=True, capture_output=True,
                       timeout=120)

    def url(self, password: str = "") -> str:
        """The cluster's ``postgres`` database as user ``medeval`` (trust authentication: a password is accepted
        and ignored, so a test can check that it never shows)."""
        userinfo = f"medeval:{password}" if password else "medeval"
        return f"postgresql+psycopg://{userinfo}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.folder / "data"), "-l", str(self.folder / "server.log"), "-w", "-o",
                  f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off", "start")

    def stop(self) -> None:
        """A fast shutdown, as a restart does: sessions are cut, open transactions rolled back."""
        self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")


@pytest.fixture
def own_postgres() -> Iterator[PostgresCluster]:
    bin_dir = _binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL's server binaries are not installed (apt-get install postgresql; .ci/run does).")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="medeval-own-pg-"))
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("Running as root without a postgres user to own a test cluster (initdb refuses root).")
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    cluster = PostgresCluster(bin_dir, folder, free_port(), as_user)
    cluster._run("initdb", "-D", str(folder / "data"), "-U", "medeval", "--auth=trust", "-E", "UTF8")
    cluster.start()
    try:
        yield cluster
    finally:
        with suppress(subprocess.CalledProcessError):  # already stopped by the test
            cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
