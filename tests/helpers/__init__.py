"""What several test files share, as plain functions, classes and constants. Fixtures live in the conftest.py of the
folder whose tests use them (tests/conftest.py when several folders do); no test module imports another test module
or a conftest.py (tests/test_layout.py checks it): a helper two test files need lives here.

- paths: the checkout, the committed fixtures (tests/fixtures/: the demo model, its golden outputs, the Marian
  model), configs/, ../shared/data/multi30k;
- cuda: the machine's real CUDA, read before the suite hides it (tests/conftest.py), and hiding or showing it;
- cli: `nmt ...` in-process or as a child process, a child's environment, and a refusal's one error line;
- training: the tiny model config that fast CPU tests train;
- report: a suite's figures printed after its tests;
- golden: the golden outputs' modes and input, and how a translation is compared with them;
- modeling: a small random Transformer and a padded batch for it;
- tables: stub models whose next-token probabilities are a table, the copy task, nmt.search.run called on them;
- documents: the document tests' fake translator and comparing a zip container's members;
- plotting: a PNG's pixel size and a metrics.jsonl to plot;
- serving: real `nmt serve` processes on 127.0.0.1;
- browser: a headless Chromium (or why there is none);
- exporting: the model kinds `nmt export` is proven on, and how they are built;
- marian: a small Hugging Face Marian model built and trained here (needs transformers)."""
