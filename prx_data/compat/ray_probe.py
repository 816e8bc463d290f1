"""Ray: one bounded call to a cluster before ``ray.init``, to tell a wrong token or an address
that is not a Ray cluster from a cluster that is down for a moment.

``ray.init`` on a GCS that refuses the token logs ``InvalidAuthToken`` once a second and keeps
trying (measured on Ray 2.60: past 90 s), and on an address where something else listens it
waits as long; dagster-ray then retries the connect for 120 s more. This probe sends the one RPC
a driver sends first (``GetClusterId`` to the GCS, ``ClusterInfo`` to a Ray client server) with
the token Ray itself would attach (its private ``_get_authentication_metadata_tuple``, which
reads ``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH`` / ``~/.ray/auth_token`` when
``RAY_AUTH_MODE=token``) and a deadline. Nothing listening is left to the caller's retries (a
head may be restarting); an answer that refuses the token or is not Ray's protocol is final.
"""

from __future__ import annotations

from typing import Any

from prx_data.core.permanent_errors import RAY_TOKEN_SETTINGS, PermanentError

WRITTEN_FOR = "2.60.0"
ADDRESS_SETTING = "PRX_RAY_ADDRESS (host:port of the head's GCS, or ray://host:10001)"


def _metadata() -> tuple[tuple[str, str], ...]:
    from ray._private.authentication.grpc_authentication_client_interceptor import _get_authentication_metadata_tuple

    try:
        return _get_authentication_metadata_tuple()
    except Exception as exc:  # noqa: BLE001 - a token file Ray cannot read is the same mistake
        raise PermanentError(f"Ray could not load the driver's token ({exc})", RAY_TOKEN_SETTINGS) from None


def probe_cluster(address: str, wait_s: float = 10.0) -> None:
    """Return once ``address`` answers as a Ray cluster that accepts the token. Raise
    :class:`PermanentError` at once when it refuses the token or is not Ray, and when nothing
    answers there for ``wait_s`` (a head that restarts answers again within that)."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        left = deadline - time.monotonic()
        if _probe_once(address, max(1.0, min(5.0, left))):
            return
        if time.monotonic() >= deadline:
            raise PermanentError(f"nothing answers as a Ray cluster at {address} (waited {wait_s:.0f}s)", ADDRESS_SETTING)
        time.sleep(0.5)


def _probe_once(address: str, timeout_s: float) -> bool:
    """True: a Ray cluster accepted the call; False: nothing answered (yet)."""
    import grpc

    stub: Any
    client = address.startswith("ray://")
    target = address.removeprefix("ray://")
    if target in ("auto", "") or "://" in target:
        return True
    metadata = _metadata()
    with grpc.insecure_channel(target) as channel:
        try:
            if client:
                from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc

                messages: Any = ray_client_pb2  # generated protobuf modules: no attributes mypy can see
                stub = ray_client_pb2_grpc.RayletDriverStub(channel)
                request = messages.ClusterInfoRequest(type=messages.ClusterInfoType.PING)
                stub.ClusterInfo(request, timeout=timeout_s, metadata=metadata)
            else:
                from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

                messages = gcs_service_pb2
                stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
                stub.GetClusterId(messages.GetClusterIdRequest(), timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as exc:
            code, details = exc.code(), (exc.details() or "")
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or "InvalidAuthToken" in details:
                raise PermanentError(
                    f"the Ray cluster at {address} refused the driver's token ({details.strip() or code.name})", RAY_TOKEN_SETTINGS
                ) from None
            if code in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
                raise PermanentError(f"{address} is not a Ray cluster ({code.name}: {details.strip()[:200]})", ADDRESS_SETTING) from None
            if code == grpc.StatusCode.UNAVAILABLE and ("Connection refused" not in details and "failed to connect" not in details.lower()):
                # Something answered, but not with gRPC (an HTTP server, a database...).
                raise PermanentError(f"{address} is not a Ray cluster ({details.strip()[:200]})", ADDRESS_SETTING) from None
            return False  # nothing listening, or no answer in time
    return True
