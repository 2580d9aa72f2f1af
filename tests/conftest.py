import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("WANDB_SILENT", "true")
sys.path.insert(0, os.path.dirname(__file__))
# The fused stat kernel compiles in the background at first use; tests use the eager
# kernel except tests/telemetry/test_accumulate.py, which checks the compiled one.
os.environ.setdefault("RLTEL_COMPILE", "0")
