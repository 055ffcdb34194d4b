"""Series written as UCR-anomaly archive files, for tests that hand a file to ``trep-edge score`` or ``replay``."""
from pathlib import Path

import numpy as np


def write_ucr(path: Path, values: np.ndarray) -> None:
    """``values`` as an archive file: one value per line. Its name (the archive's pattern) gives split and labels."""
    path.write_text("\n".join(repr(float(v)) for v in values) + "\n")
