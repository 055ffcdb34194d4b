"""Write a channel-codes table into shipped models' cards without re-exporting them.

    .venv/bin/python scripts/set_channel_codes.py models/icu-vitals.codes.json \
        models/icu-vitals.onnx models/icu-vitals.fp16.onnx models/icu-vitals-causal.onnx

The table (``channel -> {system, code, display, unit}``) is what ``trep-edge export --channel-codes FILE`` writes;
each model is loaded and verified as the daemon would load it, its card gets the codes, and the card is written
into the model file and its sidecar (``training/export.write_card``: the embedded graphs are kept).
"""
from __future__ import annotations

import argparse
import json

from trep_edge.runtime.core.engine import load_engine
from trep_edge.training.export import write_card


def main() -> int:
    """Parse the command line, rewrite each model's card with the codes, print what was written."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("codes", help="JSON file: channel -> {system, code, display, unit}")
    parser.add_argument("models", nargs="+", help="the .onnx model files to update")
    args = parser.parse_args()
    with open(args.codes) as fh:
        codes = json.load(fh)
    for model in args.models:
        engine = load_engine(model, "cpu")
        engine.card.channel_codes = codes
        write_card(engine.path, engine.card)
        load_engine(model, "cpu")  # the rewritten file passes every check at load (card, sidecar, graphs)
        print(json.dumps({"model": model, "channel_codes": sorted(codes)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
