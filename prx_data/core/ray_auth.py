"""Token auth and a loopback node address for every Ray this project starts on the user's machine.

Ray 2.60 (measured; docs/security.md, "Local Ray on loopback"):
- ``_node_ip_address="127.0.0.1"`` alone is rewritten to the machine's external address unless
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which Ray reads into ``ray_constants`` when it is
  first imported;
- with ``RAY_AUTH_MODE=disabled`` anyone who reaches a port runs code as the user.

So every head gets a random token of its own and the loopback switch. A Ray started from inside
a process (``ray.init()`` with no address) gets them through ``compat.ray_config``, which also
makes an already imported Ray see them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile

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
