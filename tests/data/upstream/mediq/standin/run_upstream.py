"""Runs MediQ's own ``src/mediQ_benchmark.py`` with the stand-ins of this folder ahead of MediQ's modules.

Usage: python run_upstream.py MEDIQ_SRC_DIR [mediQ_benchmark.py arguments...]
"""

import runpy
import sys
from pathlib import Path

source = Path(sys.argv[1]).resolve()
sys.path[:0] = [str(Path(__file__).resolve().parent), str(source)]
sys.argv = [str(source / "mediQ_benchmark.py"), *sys.argv[2:]]
runpy.run_path(str(source / "mediQ_benchmark.py"), run_name="__main__")
