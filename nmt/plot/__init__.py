"""Pictures: training curves, attention heatmaps and alignments (charts), the paper's mechanisms (paper).
matplotlib is optional: imported inside the functions that draw."""
