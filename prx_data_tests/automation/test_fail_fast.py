"""Retries only for what can succeed on retry: a spec pointing at a missing table fails once,
with its message and no Rust source paths, and the run is not re-launched by run retries; a
transient error still goes to the step retry policy."""

from __future__ import annotations

import errno

import dagster as dg
import pytest
from dagster._core.events import RunFailureReason
from dagster._core.execution.retries import auto_reexecution_should_retry_run

from prx_data.core.locking import TableLocked
from prx_data.core.retry import Retryable
from prx_data.defs.failures import RETRY_ON_STEP_FAILURE_TAG, fail_fast, is_transient, permanent_failure, readable_message
from prx_data.ingest.read.raw_item import SourceUnavailable
from prx_data_tests.conftest import run_source

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _step_events(result, kind: str) -> list:
    return [e for e in result.all_events if e.event_type_value == kind]


def test_a_spec_pointing_at_a_missing_table_fails_once_with_its_message(data_root, prx_defs, instance):
    missing = data_root / "inputs" / "gone.lance"
    (data_root / "sources" / "gone.yaml").write_text(
        f"name: gone\nshape: lance\nlocation: {missing}\nlicense: cc0\nfields: {{key: id, image: image, caption: text}}\n"
    )
    result = run_source(prx_defs, instance, "gone", selection=[dg.AssetKey("raw_samples")])

    assert not result.success
    assert _step_events(result, "STEP_UP_FOR_RETRY") == []  # one attempt, not three
    failure = _step_events(result, "STEP_FAILURE")[0].event_specific_data.error
    assert "gone.lance" in failure.message and "was not found" in failure.message
    assert ".rs:" not in failure.message
    assert failure.cause is None  # the summary opens on the message, not on a chained stack
    run = instance.get_run_by_id(result.run_id)
    assert run.tags[RETRY_ON_STEP_FAILURE_TAG] == "false"
    # What the run-retry daemon asks before re-launching (dagster.yaml enables 2 run retries).
    assert not auto_reexecution_should_retry_run(instance, run, RunFailureReason.STEP_FAILURE)


def test_a_transient_error_is_still_retried_by_the_step_policy(data_root, prx_defs, instance, monkeypatch):
    attempts = []

    def flaky(*args, **kwargs):
        attempts.append(1)
        raise OSError("AWS Error SLOW_DOWN during PutObject operation: Please reduce your request rate. (503)")

    monkeypatch.setattr("prx_data.ingest.driver.ingest_source", flaky)  # the asset imports it when it runs
    (data_root / "inputs" / "f").mkdir(parents=True)
    (data_root / "sources" / "f.yaml").write_text(f"name: f\nshape: image_folder\nlocation: {data_root / 'inputs' / 'f'}\nlicense: cc0\n")
    result = run_source(prx_defs, instance, "f", selection=[dg.AssetKey("raw_samples")])
    assert not result.success
    assert len(attempts) == 3  # first attempt + TRANSIENT_RETRY's two retries
    assert RETRY_ON_STEP_FAILURE_TAG not in instance.get_run_by_id(result.run_id).tags


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError("Connection reset by peer"),
        OSError("AWS Error SLOW_DOWN: Please reduce your request rate (HTTP 503)"),
        OSError("Retryable commit conflict for version 7: This CreateIndex transaction was preempted"),
        type("ActorDiedError", (RuntimeError,), {})("The actor died unexpectedly before finishing this task"),
        TableLocked("lock on s3://b/sources/a.lock held by another run past 600 s"),
        Retryable("HTTP 502"),
        RuntimeError("something nobody classified"),
    ],
)
def test_transient_errors(error):
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        SourceUnavailable("image folder /data/x does not exist"),
        ValueError("fields.image is required for shape 'parquet'"),
        KeyError("no source spec named 'x'"),
        FileNotFoundError("s3://bucket/sources/x.lance"),
        dg.Failure("bad", allow_retries=False),
        OSError(errno.ENOSPC, "No space left on device", "/mds/shard.00000.mds"),
        OSError("[errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device"),
        RuntimeError("LanceError(IO): Generic LocalFileSystem error: No space left on device (os error 28), x.rs:1:2"),
        OSError(errno.EROFS, "Read-only file system", "/mds"),
    ],
)
def test_permanent_errors(error):
    assert not is_transient(error)


def test_a_full_disk_under_a_wrapper_is_permanent_and_named():
    """Whatever wraps it (a Ray task's error, a message that reads like a network blip), a full
    disk fails once, and the failure's text is the full disk's, with its file."""
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/mds/photos/shard.00000.mds")
        except OSError as exc:
            raise RuntimeError("export task failed: connection reset while writing") from exc
    except RuntimeError as wrapped:
        assert not is_transient(wrapped)
        description = permanent_failure(wrapped).description or ""
    assert "No space left on device" in description and "/mds/photos/shard.00000.mds" in description, description


def test_a_permanent_cause_wrapped_in_a_network_message_is_retried():
    try:
        try:
            raise OSError("connection timed out")
        except OSError as exc:
            raise SourceUnavailable("cannot open Lance table s3://b/t.lance") from exc
    except SourceUnavailable as wrapped:
        assert is_transient(wrapped)


def test_readable_message_drops_rust_locations():
    message = (
        "Dataset at path tmp/x.lance was not found: Not found: tmp/x.lance/_versions, "
        "/home/runner/work/lance/lance/rust/lance-table/src/io/commit.rs:653:26, "
        "/home/runner/work/lance/lance/rust/lance/src/dataset/builder.rs:921:29"
    )
    assert readable_message(ValueError(message)) == "Dataset at path tmp/x.lance was not found: Not found: tmp/x.lance/_versions"


def test_fail_fast_keeps_the_signature_dagster_reads():
    def body(context: dg.AssetExecutionContext, storage: int) -> dg.MaterializeResult:
        return dg.MaterializeResult()

    import inspect

    assert list(inspect.signature(fail_fast(body)).parameters) == ["context", "storage"]
