"""The one classifier of errors no retry fixes (``core.permanent_errors``), and the step wiring that
fails such a step once (``defs.failures``), on the error texts the libraries really raise."""

from __future__ import annotations

import pytest

from prx_data.core.permanent_errors import PermanentError, permanent_cause
from prx_data.defs.failures import is_transient, readable_message


@pytest.mark.parametrize(
    "error,cause,setting",
    [
        (
            RuntimeError(
                "Failed to get cluster ID from GCS server: Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing or incorrect"
            ),
            "refused the driver's token",
            "RAY_AUTH_TOKEN_PATH",
        ),
        (
            OSError("AWS Error NO_SUCH_BUCKET during HeadBucket operation: The specified bucket does not exist"),
            "bucket does not exist",
            "PRX_LANCE_ROOT",
        ),
        (
            OSError("LanceError(IO): Generic S3 error: InvalidAccessKeyId: The AWS Access Key Id you provided does not exist"),
            "credentials",
            "AWS_ACCESS_KEY_ID",
        ),
        (RuntimeError("botocore.exceptions.NoCredentialsError: Unable to locate credentials"), "credentials", "AWS_SECRET_ACCESS_KEY"),
    ],
)
def test_library_errors_that_no_retry_fixes_name_the_cause_and_the_setting(error, cause, setting):
    found = permanent_cause(error)
    assert found is not None and cause in found.cause and setting in found.setting
    assert not is_transient(error)
    assert readable_message(error) == found.line() and "\n" not in found.line()


def test_a_cause_raised_from_another_error_is_found_and_transient_errors_stay_transient():
    try:
        try:
            raise PermanentError("no live Ray node offers the task resources", "PRX_RAY_TASK_RESOURCES")
        except PermanentError as inner:
            raise RuntimeError("step failed") from inner
    except RuntimeError as outer:
        assert permanent_cause(outer) is not None and not is_transient(outer)
    for transient in (ConnectionResetError("connection reset by peer"), OSError("AWS Error SLOW_DOWN (HTTP status 503)")):
        assert permanent_cause(transient) is None and is_transient(transient)
