"""Configuration: the experiment config (YAML sections with `--set` overrides, every key checked: experiment) and
the `serve` section (serve). Its own package because every stage reads it and it reads no stage."""
