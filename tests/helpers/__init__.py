"""What several test modules share, as plain functions, classes and constants.

- paths: the checkout, the committed fixtures (tests/fixtures/), ../shared/data/multi30k."""
