"""A sweep worker: runs the items listed in a file, appending one JSON line per
item to its journal (a ``start`` line first, so a crash or hang names the item)."""

from __future__ import annotations

import gc
import json
import logging
import sys
import warnings
from pathlib import Path

import spyre_adapter
from spyre_adapter.opinfo.corpus import Item
from spyre_adapter.opinfo.expectations import load

#: A full garbage collection costs ~1 s with op_db loaded; do it now and then.
GC_EVERY_ITEMS = 50


def run(items_path: Path, journal: Path, max_samples: int) -> int:
    import torch

    spyre_adapter.register()  # when autoload is off
    from spyre_shims.runtime import reset_compiled

    from spyre_adapter.opinfo.sweep import run_item

    torch._logging.set_logs(dynamo=logging.ERROR, inductor=logging.ERROR)  # graph-break chatter
    warnings.simplefilter("ignore")
    expectations = load()
    from spyre_adapter.opinfo.corpus import op_db

    op_db()
    gc.collect()
    gc.freeze()  # op_db's ~10^6 objects never die: keep them out of every later collection
    todo = [Item(*line.split(":", 1)) for line in items_path.read_text().split()]
    with journal.open("a") as out:
        for n, item in enumerate(todo):
            out.write(json.dumps({"start": item.key}) + "\n")
            out.flush()
            record = run_item(item, expectations, max_samples)
            out.write(json.dumps(record) + "\n")
            out.flush()
            # Each item compiles a fresh function per sample: drop Dynamo's caches per item
            # (bounds memory and keeps the recompile count of the shared code object low).
            reset_compiled()
            if (n + 1) % GC_EVERY_ITEMS == 0:
                gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])))
