"""Token auth and a loopback node address for every Ray this project starts on the user's machine.

Ray 2.60 (measured; docs/security.md, "Local Ray on loopback"):
- ``_node_ip_address="127.0.0.1"`` alone is rewritten to the machine's external address unless
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which Ray reads into ``ray_constants`` when it is
  first imported;
- with ``RAY_AUTH_MODE=disabled`` anyone who reaches a port runs code as the user; the auth mode
  is read by Ray's C++ config when ``ray._raylet`` loads, and re-read on ``Config.initialize``.

So a Ray started from inside a process (``ray.init()`` with no address) gets a random token of
its own, and both switches are applied whether or not ``ray`` was imported before.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator

from prx_data.core.quiet import quiet_ray_env

LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def write_token() -> str:
    """A random token in a 0600 file inside a private (0700) folder; returns the file's path."""
    # Its own folder: Ray makes its temp folder world-writable (0777, measured), so the token
    # cannot live there.
    folder = tempfile.mkdtemp(prefix="prx-ray-auth-", dir="/tmp" if os.path.isdir("/tmp") else None)
    path = os.path.join(folder, "auth_token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_urlsafe(32).encode())
    finally:
        os.close(fd)
    return path


def remove_token(token_path: str) -> None:
    shutil.rmtree(os.path.dirname(token_path), ignore_errors=True)


def head_env(token_path: str) -> dict[str, str]:
    """What a local head and every process that talks to it need: token auth on, the token by
    path (never in the environment, so never in a process listing), the node on loopback."""
    return {
        **quiet_ray_env(),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": token_path,
        LOOPBACK_SWITCH: "0",
    }


def _refresh_loaded_ray() -> None:
    """Make an already imported Ray see the current environment (its own tests do the same)."""
    if "ray._raylet" in sys.modules:
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    if "ray._private.ray_constants" in sys.modules:
        constants = sys.modules["ray._private.ray_constants"]
        constants.ENABLE_RAY_CLUSTER = os.environ.get(LOOPBACK_SWITCH, "1").lower() not in ("0", "false")  # type: ignore[attr-defined]


@contextlib.contextmanager
def in_process_ray_auth() -> Iterator[dict[str, str]]:
    """For a ``ray.init()`` that starts Ray inside this process: token auth and loopback while
    it lives; the previous environment (and Ray's view of it) is restored afterwards, so a later
    connection to another cluster from the same process uses its own settings."""
    token_path = write_token()
    env = head_env(token_path)
    saved = {name: os.environ.get(name) for name in (*env, "RAY_AUTH_TOKEN")}
    os.environ.pop("RAY_AUTH_TOKEN", None)  # would win over the path
    os.environ.update(env)
    _refresh_loaded_ray()
    try:
        yield env
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _refresh_loaded_ray()
        remove_token(token_path)
