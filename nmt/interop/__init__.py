"""Other toolkits' models in and ours out: `nmt import` of Hugging Face Marian / OPUS-MT models (marian), the one
description of a model both directions use (modelspec), and `nmt export` to CTranslate2, Argos and Hugging Face
(export/)."""
