"""nmt: train and run Transformer translation models from the command line."""

from nmt.threads import choose_wait_policy

choose_wait_policy()  # before anything imports torch: OpenMP reads it once, when torch loads it (nmt/threads.py)

__version__ = "0.1.0"
