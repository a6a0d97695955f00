"""The built-in demo corpora that need no network: English->German (german, with clock times from clock),
English->Chinese (chinese), written as train/valid/test files (files)."""
