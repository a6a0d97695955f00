"""Data, from raw text to training batches: `nmt prepare` (prepare), reading and cleaning corpora (corpus), the
data dir's layout (datadir), text -> token ids (encoding), token-budget batches (batching) read ahead (prefetch).
What training reads stays memory-mapped; nothing here knows the model."""
