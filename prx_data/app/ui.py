"""``prx-data ui``: the Dagster UI (``dagster dev``) on one data root, with its own warm Ray.

``dagster dev`` runs in its own process group with the data root's ``DAGSTER_HOME`` and the
packaged workspace (``prx_data/app/resources/``, so it works from a wheel as from a checkout),
from the Dagster home folder (so no ``dagster.yaml`` of the working
folder is picked up by mistake). A loopback Ray head lives as long as the UI: every run the UI
or automation launches connects to it (``PRX_RAY_ADDRESS``), so no run pays a Ray start. Ctrl-C
(or SIGTERM) stops the UI's process group, then the Ray head.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib.resources import files
from pathlib import Path

import prx_data
from prx_data.app.local_ray import RECORDS_DIR, free_port, listening, shared_local_ray, stop_process_group
from prx_data.defs.asset_groups import lineage_path

# The folder prx_data was imported from (a checkout or site-packages): the UI's code server
# gets it first on its PYTHONPATH so it loads the same prx_data as the CLI that started it.
PACKAGE_PARENT = Path(prx_data.__file__).resolve().parent.parent
DEFAULT_PORT = 3000


def packaged_config(name: str) -> str:
    """The text of a Dagster config file shipped in the package (``dagster.yaml``, ``workspace.yaml``)."""
    return (files("prx_data.app") / "resources" / name).read_text()


def install_config(dagster_home: Path, name: str, *, overwrite: bool) -> Path:
    """Write the packaged ``name`` into ``dagster_home``; a user's own copy is kept unless ``overwrite``."""
    target = dagster_home / name
    text = packaged_config(name)
    if not target.exists() or (overwrite and target.read_text() != text):
        target.write_text(text)
    return target


def pick_port(port: int | None, host: str = "127.0.0.1") -> int:
    if port:
        return port
    return DEFAULT_PORT if not listening(DEFAULT_PORT, host) else free_port()


def ui_log_level() -> str:
    # The daemon logs every sensor tick and automation evaluation at INFO (~22 lines a minute),
    # and every run its step events at DEBUG, which scrolls the address away;
    # PRX_UI_LOG_LEVEL=info (or debug) brings them back.
    return os.environ.get("PRX_UI_LOG_LEVEL", "warning")


def dagster_dev_command(workspace: Path, port: int, host: str) -> list[str]:
    dagster = Path(sys.executable).with_name("dagster")
    # Without the script beside this Python (a venv that reuses another's packages), run
    # Dagster's module with this Python rather than whatever `dagster` PATH finds first.
    launcher = [str(dagster)] if dagster.exists() else [sys.executable, "-m", "dagster"]
    return [*launcher, "dev", "-w", str(workspace), "-p", str(port), "-h", host, "--log-level", ui_log_level()]


def repeat_address_on_request(line: str) -> None:
    """Print ``line`` again on SIGUSR1, and on Enter when the terminal is interactive."""
    # lazy: only the UI command needs a reader thread
    import threading

    def show(*_args) -> None:
        print(line, flush=True)

    signal.signal(signal.SIGUSR1, show)
    if sys.stdin is not None and sys.stdin.isatty():

        def read() -> None:
            for _ in sys.stdin:
                show()

        threading.Thread(target=read, name="prx-ui-address", daemon=True).start()


def start_ui(dagster_home: Path, port: int, host: str = "127.0.0.1", log_file=None) -> subprocess.Popen:
    """``dagster dev`` in its own process group, with the current environment (PRX_DATA_ROOT,
    PRX_RAY_ADDRESS, ...) and ``DAGSTER_HOME``."""
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "DAGSTER_DISABLE_TELEMETRY": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_PARENT), env.get("PYTHONPATH")) if p)
    # The workspace is ours, not the user's: refreshed so an upgraded package serves its own.
    workspace = install_config(dagster_home, "workspace.yaml", overwrite=True)
    # `dagster dev` is what this command wraps on purpose; its notice to use `dg dev` is noise.
    env.setdefault("PYTHONWARNINGS", "ignore:Function `dev_command` is superseded")
    return subprocess.Popen(
        dagster_dev_command(workspace, port, host),
        cwd=dagster_home,
        env=env,
        start_new_session=True,
        stdout=log_file,
        stderr=subprocess.STDOUT if log_file is not None else None,
    )


def wait_for_port(process: subprocess.Popen, port: int, host: str = "127.0.0.1", timeout_s: float = 180.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if listening(port, host):
            return True
        time.sleep(0.5)
    return False


def serve_ui(data_root: Path, dagster_home: Path, port: int | None = None, host: str = "127.0.0.1") -> int:
    port = pick_port(port, host)

    def _stop(signum, _frame):
        raise KeyboardInterrupt

    # SIGTERM and a closed terminal stop it as Ctrl-C does: dagster dev and Ray run in their own
    # process groups, so nothing else would stop them. SIGINT too, explicitly: a command started
    # in the background by a non-interactive shell inherits SIGINT ignored, and Python then
    # installs no KeyboardInterrupt for it.
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    with shared_local_ray(records_dir=dagster_home / RECORDS_DIR) as ray_address:
        process = start_ui(dagster_home, port, host, log_file=subprocess.PIPE)
        # lazy: only the UI command reads its child's output
        import threading

        from prx_data.app.ui_log import forward

        assert process.stdout is not None
        threading.Thread(target=forward, args=(process.stdout, sys.stdout, ui_log_level()), name="prx-ui-log", daemon=True).start()
        try:
            print(f"Dagster UI on {data_root}")
            print(f"  DAGSTER_HOME={dagster_home}")
            print(f"  Ray: {ray_address or 'one per run'}")
            if wait_for_port(process, port, host):
                address = (
                    f"  lineage, every group open: http://{host}:{port}{lineage_path()}\n"
                    f"  open http://{host}:{port}   (Enter prints this again; Ctrl-C stops it)"
                )
                print(address, flush=True)
                repeat_address_on_request(address)
            elif process.poll() is not None:
                print(f"dagster dev exited with {process.returncode} (see above)", file=sys.stderr)
            return process.wait()
        except KeyboardInterrupt:
            print("\nstopping the Dagster UI ...", flush=True)
            return 0
        finally:
            stop_process_group(process, timeout_s=30)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
