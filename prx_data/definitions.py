"""Dagster entry point (``-m prx_data.definitions``): the Definitions built in ``prx_data.defs``."""

from prx_data.defs.build import build_defs

defs = build_defs()
