"""Ray: making an already imported Ray see the auth mode and loopback switch of the environment.

Ray 2.60 reads ``RAY_AUTH_MODE`` into its C++ config when ``ray._raylet`` loads (re-read on
``Config.initialize``, with the token cached by ``AuthenticationTokenLoader``), and
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` into ``ray._private.ray_constants.ENABLE_RAY_CLUSTER`` when
it is first imported; none of this has a public setter. A Dagster run process has usually
imported Ray before a stage starts one inside it, so ``in_process_ray_auth`` refreshes both, as
Ray's own tests do (``core.ray_auth`` holds the token and the switch values).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from prx_data.core.ray_auth import LOOPBACK_SWITCH, head_env, remove_token, write_token

WRITTEN_FOR = "2.60.0"
_RAYLET = "ray._raylet"
_CONSTANTS = "ray._private.ray_constants"


def refresh_loaded_ray() -> None:
    """Make an already imported Ray see the current environment (nothing when Ray is not loaded)."""
    if _RAYLET in sys.modules:
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    if _CONSTANTS in sys.modules:
        constants = sys.modules[_CONSTANTS]
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
    refresh_loaded_ray()
    try:
        yield env
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        refresh_loaded_ray()
        remove_token(token_path)


def version_mismatch() -> str | None:
    """Why the installed Ray may not be the one this adapter was written for, or None."""
    import ray

    if ray.__version__ == WRITTEN_FOR:
        return None
    return (
        f"ray is {ray.__version__}, prx_data.compat.ray_config was written for {WRITTEN_FOR}: re-check that "
        "ray._raylet.Config.initialize re-reads RAY_AUTH_MODE, that AuthenticationTokenLoader.instance().reset_cache() "
        "drops the cached token, and that ray._private.ray_constants.ENABLE_RAY_CLUSTER is what decides the node "
        "address, then update WRITTEN_FOR"
    )
