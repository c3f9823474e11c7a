"""Looking into a region directory and removing orphaned regions."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from . import _lib

DEFAULT_DIR = "/dev/shm"


@dataclass(frozen=True)
class RegionInfo:
    """One region-related file, as ``ectier inspect --json`` shows it.

    ``kind`` is ``region`` (a valid ectier region), ``bad`` (ectier magic,
    bad header), ``foreign`` (named like a region, not one) or ``temp`` (a
    creation in progress or interrupted).  ``removed`` and ``error`` are set
    for the results of :meth:`RegionDirectory.gc`.  ``fields`` holds every
    member the library reported (geometry, creator pid, instance id...).
    """

    name: str
    path: str
    kind: str
    file_size: int
    holders: int
    orphaned: bool
    holder_pids: List[int]
    fields: Dict[str, Any] = field(repr=False)
    removed: Optional[bool] = None
    error: Optional[str] = None

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "RegionInfo":
        return cls(
            name=obj["name"],
            path=obj["path"],
            kind=obj["kind"],
            file_size=int(obj["file_size"]),
            holders=int(obj["holders"]),
            orphaned=bool(obj["orphaned"]),
            holder_pids=[int(p) for p in obj.get("holder_pids", [])],
            fields=obj,
            removed=obj.get("removed"),
            error=obj.get("error"),
        )


class RegionDirectory:
    """A directory of ectier regions (``/dev/shm`` unless told otherwise).

    Args:
        path: the directory.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"] = DEFAULT_DIR) -> None:
        self.path = os.fspath(path)

    def inspect(self) -> List[RegionInfo]:
        """Every region-related file, in name order; changes nothing.

        Raises:
            NotFoundError: no such directory.
        """
        out = _lib.call_text(_lib.lib().ect_region_list_json, _lib.encode(self.path))
        return [RegionInfo.from_json(o) for o in json.loads(out or "[]")]

    def gc(self, dry_run: bool = False) -> List[RegionInfo]:
        """Remove orphaned regions (no live holder) and stale temp files;
        files without ectier magic are never touched.  Returns each orphan
        with ``removed`` (True: removed, or would be in a dry run) and
        ``error`` when it could not be.
        """
        out = _lib.call_text(_lib.lib().ect_region_gc_json, _lib.encode(self.path), int(dry_run))
        return [RegionInfo.from_json(o) for o in json.loads(out or "[]")]

    def __repr__(self) -> str:
        return f"<ectier.RegionDirectory {self.path}>"
