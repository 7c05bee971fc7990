"""The files a student handed in, carried as one archive."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainSerializer, model_validator
from pydantic.functional_validators import BeforeValidator

from chalk_client.errors import InvalidJobError


def _decode(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError as exc:
            raise ValueError(f"tar must be base64 text: {exc}") from exc
    return value


Base64Bytes = Annotated[
    bytes,
    BeforeValidator(_decode),
    PlainSerializer(lambda data: base64.b64encode(data).decode("ascii"), when_used="json"),
]


class Submission(BaseModel):
    """The student's files: a tar archive (plain, gzip, bzip2 or xz), or a map of text files.

    In JSON, ``{"tar": "<base64>"}`` or ``{"files": {"answer.txt": "..."}}``.
    The worker unpacks either through the same checked extractor; nothing here
    is trusted.
    """

    model_config = ConfigDict(extra="forbid")

    tar: Base64Bytes | None = None
    files: dict[str, str] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Submission:
        if (self.tar is None) == (self.files is None):
            raise ValueError('a submission has exactly one of "tar" or "files"')
        return self

    @classmethod
    def from_dir(cls, path: str | os.PathLike[str]) -> Submission:
        """Archive a folder's contents (paths relative to it; links kept as links)."""
        root = Path(path)
        if not root.is_dir():
            raise InvalidJobError(f"Submission.from_dir: {root} is not a folder")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as archive:
            for entry in sorted(root.rglob("*")):
                archive.add(entry, arcname=entry.relative_to(root).as_posix(), recursive=False)
        return cls(tar=buffer.getvalue())

    @classmethod
    def from_tar(cls, source: str | os.PathLike[str] | bytes) -> Submission:
        """Take an archive as it is, from a path or from bytes."""
        if isinstance(source, (bytes, bytearray, memoryview)):
            return cls(tar=bytes(source))
        path = Path(source)
        if not path.is_file():
            raise InvalidJobError(f"Submission.from_tar: no archive at {path}")
        return cls(tar=path.read_bytes())

    @classmethod
    def from_files(cls, files: Mapping[str, str | bytes]) -> Submission:
        """Files made in memory, by relative path: ``{"answer.txt": "3.12.11", "a/b.bin": b".."}``.

        Text only stays a ``files`` map (readable JSON); with any bytes, the files
        are archived (``tar``). Either way the worker unpacks them the same way.
        """
        if all(isinstance(content, str) for content in files.values()):
            return cls(files={name: str(content) for name, content in files.items()})
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for name, content in files.items():
                data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                archive.addfile(info, io.BytesIO(data))
        return cls(tar=buffer.getvalue())

    def archive_bytes(self) -> bytes:
        """The submission as tar bytes (a ``files`` map is archived on the fly)."""
        if self.tar is not None:
            return self.tar
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for name, text in (self.files or {}).items():
                data = text.encode("utf-8")
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                archive.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    def digest(self) -> str:
        """A content hash (sha256 hex), for storing each distinct submission once."""
        return hashlib.sha256(self.archive_bytes()).hexdigest()
