"""The `nmt` command line: the Typer app and shared options (common), the pipeline's commands (main), the commands
around a trained model (tools), `nmt info` (info). It imports every stage; no stage imports it."""
