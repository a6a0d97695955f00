"""Search over the model's incremental decoder: greedy and beam (beam), lexically constrained beam (constrained).
It knows the model and the kernels only: no files, configs or tokenizers."""
