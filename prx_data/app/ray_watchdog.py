"""Stops a local Ray head when the command that started it is gone, however it went.

``python -m prx_data.app.ray_watchdog SID FOLDERS RECORD`` (FOLDERS: ``os.pathsep``-separated) with stdin the read end of a pipe
whose only write end the command holds. The kernel closes that end when the command exits, is
killed (``kill -9`` included) or crashes, so end-of-file is the one signal that cannot be
missed; the watchdog then stops the head's session, deletes its temp and token folders
and its record. A normal exit of the command closes the pipe the same way, so there is one path.

Stdlib only, and in a session of its own: a signal to the command's process group or terminal
does not reach it before it has done its job.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

from prx_data.app.process_session import stop_session


def _read_until_eof(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 4096):
                return
        except InterruptedError:
            continue


def main(argv: list[str]) -> int:
    sid, folders, record = int(argv[0]), argv[1].split(os.pathsep), argv[2]
    # The command's Ctrl-C is the command's business; it closes the pipe when it is done.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: os.close(0))  # asked to stop: do the cleanup now
    try:
        _read_until_eof(0)
    except OSError:
        pass
    stop_session(sid)
    for folder in folders:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    try:
        os.unlink(record)
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
