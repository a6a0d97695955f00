"""Training: the update loop (loop), its exact-resume state (state), the optimizer and schedules (optim),
out-of-memory retry (oom), data parallelism (distributed), validation (validate), the run's time budget (budget)."""
