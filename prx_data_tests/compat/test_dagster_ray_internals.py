"""Pins what prx_data.defs.compat.dagster_ray_internals relies on in dagster-ray: connecting a
resource built with ``Lifecycle(connect=False)`` on demand, and forgetting a connection."""

from __future__ import annotations

from typing import Any

import dagster as dg
from dagster_ray import LocalRay
from dagster_ray.configs import Lifecycle

from prx_data.defs.compat import dagster_ray_internals as compat


def test_installed_dagster_ray_is_the_version_the_adapter_was_written_for() -> None:
    assert compat.version_mismatch() is None, compat.version_mismatch()


CALLS: list[str] = []


class _Recording(LocalRay):
    """LocalRay whose connect records the call instead of starting Ray."""

    # The base method is wrapped in tenacity's retry, which mypy sees as another signature.
    def connect(self, context: Any) -> Any:  # type: ignore[override]
        CALLS.append("connect")
        self._context = _Disconnects()  # type: ignore[assignment]  # what a real connect sets
        return self._context

    def on_connect(self, context: Any) -> None:
        CALLS.append("on_connect")


class _Disconnects:
    def disconnect(self) -> None:
        CALLS.append("disconnect")


def test_connect_takes_the_lifecycle_path_once_and_forget_leaves_cleanup_nothing() -> None:
    CALLS.clear()
    resource = _Recording(lifecycle=Lifecycle(connect=False))
    context = dg.build_init_resource_context()
    assert not resource.connected
    compat.connect(resource, context)
    assert resource.connected and CALLS == ["connect", "on_connect"]
    compat.connect(resource, context)  # connected already: no second connection
    assert CALLS == ["connect", "on_connect"]
    held = resource.context
    compat.forget_connection(resource)
    assert not resource.connected
    resource.cleanup(context, None)  # nothing to disconnect: the forgotten connection stays open
    assert CALLS == ["connect", "on_connect"]
    connected_again = _Recording(lifecycle=Lifecycle(connect=False))
    compat.connect(connected_again, context)
    connected_again.cleanup(context, None)  # what forget_connection prevents
    assert CALLS[-1] == "disconnect" and held is not None
