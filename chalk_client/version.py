"""The installed chalk-queue version, for ``chalk --version`` and reports."""

from __future__ import annotations

from importlib import metadata


def chalk_version() -> str:
    """The installed chalk-queue version, or ``"unknown"`` when it is not installed."""
    try:
        return metadata.version("chalk-queue")
    except metadata.PackageNotFoundError:
        return "unknown"
