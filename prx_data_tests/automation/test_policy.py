"""Policy applied to the whole asset graph: every asset says how it is kept up to date, code
versions name what decides each output, one writer per Lance table, retries, the GPU pool, the
maintenance schedule, and the instance config that the per-partition limit needs."""

from __future__ import annotations

import dagster as dg
import yaml

from prx_data.defs.code_versions import INGEST_CODE_VERSION, asset_code_versions
from prx_data.defs.export.resources import ExportResource
from prx_data.defs.policies import SOURCE_TABLE_WRITER_TAG, TRANSIENT_RETRY
from prx_data.imaging.colour import COLOUR_VERSION
from prx_data.imaging.phash import PHASH_VERSION
from prx_data.models.captioning.prompt import caption_prompt_version
from prx_data.stages.versions import export_version
from prx_data_tests.automation.conftest import PER_SOURCE

# Left out of automation on purpose: observed by a sensor / run by a schedule.
NOT_AUTOMATED = {"optout_folder", "table_maintenance", "source_registry"}  # source_registry: its check is reported by the registry sensor
WRITERS = {"raw_samples", "phashes", "captions", "caption_labels"}

# The instance settings the final report asks to put in dagster.yaml (kept here so the snippet
# is proven valid and to mean what it says).
DAGSTER_YAML = """
concurrency:
  runs:
    max_concurrent_runs: 4
    tag_concurrency_limits:
      - key: dagster/partition
        value:
          applyLimitPerUniqueValue: true
        limit: 1
  pools:
    default_limit: 1
    granularity: op
run_retries:
  enabled: true
  max_retries: 2
  retry_on_asset_or_op_failure: true
"""


def test_every_asset_has_an_automation_condition(prx_defs):
    graph = prx_defs.resolve_asset_graph()
    labels = {}
    for key in graph.get_all_asset_keys():
        condition = graph.get(key).automation_condition
        labels[key.to_user_string()] = condition.get_label() if condition else None
    missing = sorted(k for k, label in labels.items() if label is None and k not in NOT_AUTOMATED)
    assert not missing, f"{missing}: give them automation_condition=PER_SOURCE or CORPUS_SETTLED (prx_data/defs/conditions.py)"
    for name, label in labels.items():
        partitioned = graph.get(dg.AssetKey(name)).partitions_def is not None
        if name not in NOT_AUTOMATED:
            assert label == ("per_source" if partitioned else "corpus_settled"), name
    assert set(PER_SOURCE) <= {k for k, v in labels.items() if v == "per_source"}


def test_code_versions_name_what_decides_each_output(prx_defs, redeploy):
    graph = prx_defs.resolve_asset_graph()
    version = {k.to_user_string(): graph.get(k).code_version for k in graph.get_all_asset_keys()}
    assert version["raw_samples"] == INGEST_CODE_VERSION
    # The asset also reads colour spaces; the hash's own version is unchanged by that.
    assert version["phashes"] == f"{PHASH_VERSION}+{COLOUR_VERSION}"
    assert version["captions"] == "source@source"  # the CPU default keeps source captions
    assert version["caption_labels"].startswith("sentence-transformers/all-MiniLM-L6-v2@")
    assert version["mds_shards"] == f"{export_version(ExportResource().bucket_config())}+{COLOUR_VERSION}"
    # What `prx-data run` compares before it builds the Definitions is what they carry.
    assert asset_code_versions() == {k: v for k, v in version.items() if v is not None}

    other = redeploy({"backend": "openai", "model_id": "qwen3-vl-8b", "server": {"base_url": "http://127.0.0.1:9/v1", "model": "served"}})
    assert other.resolve_asset_graph().get(dg.AssetKey("captions")).code_version == f"qwen3-vl-8b@{caption_prompt_version()}"


def test_one_writer_per_table_gpu_pool_and_retries(prx_defs, redeploy):
    graph = prx_defs.resolve_asset_graph()
    ((key, value),) = SOURCE_TABLE_WRITER_TAG.items()
    for name in PER_SOURCE:
        node = graph.get(dg.AssetKey(name))
        assets_def = prx_defs.resolve_assets_def(name)
        op_tags = assets_def.node_def.tags
        assert (op_tags.get(key) == value) == (name in WRITERS), name
        retried = name in {"raw_samples", "phashes", "mds_shards"}  # model backends retry per request
        assert (assets_def.node_def.retry_policy == TRANSIENT_RETRY) == retried, name
        # The CPU defaults (source captions, MiniLM labels) use no GPU: no pool to queue on.
        assert not node.pools, name
    # Launched runs (automation's implicit job and the source job) run a run's steps in its own
    # process one after the other, as the CLI does: one writer of the source table at a time.
    for job in (prx_defs.resolve_implicit_global_asset_job_def(), prx_defs.resolve_job_def("source_pipeline")):
        assert job.executor_def.name == dg.in_process_executor.name
    assert TRANSIENT_RETRY.backoff == dg.Backoff.EXPONENTIAL and TRANSIENT_RETRY.max_retries >= 2

    on_gpu = redeploy({"backend": "vllm"}).resolve_asset_graph()
    assert on_gpu.get(dg.AssetKey("captions")).pools == {"gpu"}
    assert not on_gpu.get(dg.AssetKey("caption_labels")).pools  # MiniLM on the CPU still
    remote = redeploy({"backend": "openai", "model_id": "m", "server": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}})
    assert not remote.resolve_asset_graph().get(dg.AssetKey("captions")).pools  # a server elsewhere


def test_sensors_and_the_maintenance_schedule(prx_defs):
    automation = prx_defs.resolve_sensor_def("prx_automation")
    assert automation.default_status == dg.DefaultSensorStatus.RUNNING
    for name in ("optout_folder_sensor", "source_registry_sensor"):
        assert prx_defs.resolve_sensor_def(name).default_status == dg.DefaultSensorStatus.RUNNING
    schedule = prx_defs.resolve_schedule_def("maintenance_daily")
    assert schedule.cron_schedule == "0 3 * * *" and schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    job = prx_defs.resolve_job_def(schedule.job_name)
    assert job.asset_layer.executable_asset_keys == {dg.AssetKey("table_maintenance")}


def test_instance_config_limits_runs_per_partition():
    with dg.instance_for_test(overrides=yaml.safe_load(DAGSTER_YAML)) as instance:
        config = instance.get_concurrency_config()
        assert config.run_queue_config is not None
        assert config.run_queue_config.tag_concurrency_limits == [
            {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
        ]
        assert config.pool_config.default_pool_limit == 1
        assert instance.run_retries_enabled and instance.run_retries_max_retries == 2
