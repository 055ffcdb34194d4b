"""Peak memory of the monitor at 200 streams with a model file in the old format (each extra graph with its own
weights) and in the current one (weights shared with the main graph), in one run.

    cd bench && flock /tmp/trep-heavy.lock nice -n 5 ../.venv/bin/python model_file_rss.py      # about 1 min

"Old" is the product before weights were shared: the shipped model file *and* the runtime as of ``--old-rev``
(git archive, imported ahead of the installed package); "new" is the working tree's model and runtime. Each is
measured by its own ``bench/memory.py`` worker in a fresh interpreter (load as the daemon does, the engine pinned
by ``--engine``, N streams registered and scored in one tick, checkpoint), ``--repeats`` times in alternation
(the engine's arena varies between runs); the JSON keeps every run and the table the median. Writes ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from memory import ROOT
from throughput import machine

OLD_REV = "040c2db"
"""The last commit whose shipped models stored each extra graph with its own weights."""
KEYS = ("load_peak_mib", "score_peak_mib", "peak_mib", "rss_mib")


def old_tree(rev: str, folder: Path) -> dict[str, str]:
    """Extract ``rev``'s runtime, CLI package, bench and models into ``folder``; the environment that imports them."""
    archive = subprocess.run(["git", "archive", rev, "runtime", "trep_edge", "bench", "models"], cwd=ROOT,
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    # trep_edge.runtime lives in runtime/trep_edge/runtime: an overlay package makes the path importable first.
    overlay = folder / "overlay" / "trep_edge"
    overlay.mkdir(parents=True)
    (overlay / "__init__.py").write_bytes((folder / "trep_edge" / "__init__.py").read_bytes())
    (overlay / "runtime").symlink_to(folder / "runtime" / "trep_edge" / "runtime")
    env = {**os.environ, "PYTHONPATH": str(overlay.parent)}
    probe = "import trep_edge.runtime.core.engine as e; print(e.__file__)"
    where = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    if not where.startswith(str(folder)):
        raise RuntimeError(f"the old runtime did not take precedence: engine imported from {where.strip()}")
    return env


WORKER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import memory
import trep_edge.runtime.core.engine as engine
load = engine.load_engine
engine.load_engine = lambda path, providers: load(path, providers, engine=sys.argv[3])
print(json.dumps(memory.worker(json.loads(sys.argv[2]))))
"""
"""``bench/memory.py``'s worker of one tree with the engine pinned (``memory.worker`` imports ``load_engine`` when
it runs, so the pinned one)."""


def measure(root: Path, env: dict[str, str] | None, case: dict, engine: str) -> dict:
    """One point by ``root``'s own ``bench/memory.py`` worker, in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", WORKER, str(root / "bench"), json.dumps(case), engine], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{case['model']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Measure both files, print a Markdown table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/icu-vitals.onnx", help="shipped model file (path in the repository)")
    parser.add_argument("--old-rev", default=OLD_REV, help="git revision holding the old-format file")
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine", default="pruned_pair",
                        help="engine both load (auto picks by timing, which a busy machine makes vary, and the "
                             "engines' working memory differs by tens of MiB)")  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "model_file_rss.json"))
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"old": (Path(tmp), old_tree(args.old_rev, Path(tmp))), "new": (ROOT, None)}
        for _ in range(args.repeats):
            for fmt, (root, env) in trees.items():
                case = {"model": str(root / args.model), "streams": args.streams, "channels": 1, "fill": "sparse"}
                point = measure(root, env, case, args.engine)
                point["path"] = args.model  # the repository path, not this machine's temporary or checkout folder
                runs[fmt].append(point)
        sizes = {fmt: (root / args.model).stat().st_size for fmt, (root, _) in trees.items()}
    median = {fmt: {k: statistics.median(r[k] for r in rows) for k in KEYS} for fmt, rows in runs.items()}
    print(f"| format | file bytes | {' | '.join(f'{k} (median MiB)' for k in KEYS)} |")
    print("|---|---:|" + "---:|" * len(KEYS))
    for fmt in runs:
        print(f"| {fmt} | {sizes[fmt]} | " + " | ".join(f"{median[fmt][k]:.1f}" for k in KEYS) + " |")
    result = {"command": " ".join(["python bench/model_file_rss.py", *(sys.argv[1:] if argv is None else argv)]),
              "machine": machine(), "model": args.model, "old_rev": args.old_rev, "streams": args.streams,
              "engine": args.engine,
              "file_bytes": sizes, "median": median, "runs": runs}  # fmt: skip
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
