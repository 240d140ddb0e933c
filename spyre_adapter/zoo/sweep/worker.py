"""A family-sweep worker: runs the items listed in a file, one JSON line per
item in its journal (a ``start`` line first, so a crash or hang names it)."""

from __future__ import annotations

import gc
import json
import logging
import sys
import warnings
from pathlib import Path

import spyre_adapter
from spyre_adapter.zoo.sweep.item import Item, run_item


def run(items_path: Path, journal: Path) -> int:
    import torch
    from transformers.utils import logging as tf_logging

    spyre_adapter.register()  # when autoload is off
    torch._logging.set_logs(dynamo=logging.ERROR, inductor=logging.ERROR)  # graph-break chatter
    tf_logging.set_verbosity_error()
    warnings.simplefilter("ignore")
    todo = [Item(*line.split(":", 1)) for line in items_path.read_text().split()]
    with journal.open("a") as out:
        for item in todo:
            out.write(json.dumps({"start": item.key}) + "\n")
            out.flush()
            out.write(json.dumps(run_item(item)) + "\n")
            out.flush()
            gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]), Path(sys.argv[2])))  # argv[3]: unused (the runner passes max_samples)
