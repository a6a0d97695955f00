"""Pictures: training curves and attention heatmaps (charts), the paper's mechanisms (paper).
matplotlib is optional: imported inside the functions that draw."""
