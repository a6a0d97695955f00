"""Tests of the GPU paths: the tests marked gpu, the CPU fakes of what only a GPU has, and CUDA hidden from the rest."""
