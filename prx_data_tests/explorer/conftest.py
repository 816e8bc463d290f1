"""One explored corpus and one live server for the whole explorer test package."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from prx_data_tests.explorer.corpus import ExploredCorpus, build


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> ExploredCorpus:
    return build(tmp_path_factory.mktemp("explorer") / "data")


@pytest.fixture(scope="session")
def app(corpus):
    from prx_data.explorer.app import build_app

    return build_app(corpus.settings)


@pytest.fixture(scope="session")
def client(app):
    import warnings

    with warnings.catch_warnings():
        # Starlette 1.x asks for httpx2 in its TestClient; httpx (pinned by the project) works.
        warnings.filterwarnings("ignore", message=".*httpx2.*")
        from starlette.testclient import TestClient

    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def live_server(corpus):
    """The app under uvicorn on a free loopback port, with the Host check ``serve`` uses.

    The socket is bound here and handed to uvicorn, so no other process can take the port
    between choosing it and listening on it."""
    import uvicorn

    from prx_data.explorer.app import build_app
    from prx_data.explorer.security import allowed_hosts_for

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = build_app(corpus.settings, allowed_hosts=allowed_hosts_for("127.0.0.1"))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the explorer did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()
