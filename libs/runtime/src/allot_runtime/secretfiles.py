"""Files and directories that hold credentials: readable by their owner only.

A state directory (``.allot``) holds ``stack.json`` (the database and NATS URLs, with their passwords), the embedded
servers' password files and the NATS config. Every such file is written 0600 (created with that mode, so no other user
can open it even for an instant) and its directory is 0700. When the embedded PostgreSQL runs as its own system user
(we are root), that user's group may traverse the directory (0710): it needs the path to its data directory, nothing
else in it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """Create ``path`` (and its parents) if missing and make it 0700; a group traverse bit given to the embedded
    PostgreSQL's user (see :func:`allot_runtime.embedded.EmbeddedPostgres`) is kept."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    path.chmod(DIR_MODE | (path.stat().st_mode & 0o010))
    return path


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a sibling temporary file, then a rename), readable by its owner only."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, FILE_MODE)  # in case the umask took bits away, never added: keep it exact
    tmp.replace(path)


def generate_password() -> str:
    """A password for a server that only Allot's own processes use: 32 URL-safe characters (192 bits), so it can sit
    in a URL and in a NATS config without quoting."""
    return secrets.token_urlsafe(24)


def read_or_create_password(path: Path) -> str:
    """The password kept in ``path`` (0600), generated and written on first use."""
    if path.exists():
        password = path.read_text().strip()
        if password:
            return password
    password = generate_password()
    write_private(path, password + "\n")
    return password
