"""Translation: the loaded model that turns lines into translations (translator), the `nmt translate` command
(command), glossaries (glossary: which terms a line holds; terminology: terms put in place), word alignment
(alignment) and documents (documents/: every file format, and paragraphs translated across their formatting)."""
