"""Tests of the root modules of nmt: the model, its cache and kernels, precision, loss, tokenizer, checkpoint,
score, io, langcodes."""
