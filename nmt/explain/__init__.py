"""`nmt explain`: one sentence walked through the model in the paper's order (numbers), written as one
self-contained page (page, with its renderer in static/) by the command (command). `nmt serve` serves the same view."""
