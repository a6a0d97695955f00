"""What a request asks of the search, checked against the server's limits: beam and n-best within serve.max_beam,
and its glossary (nmt.translation.glossary) on top of the server's, within serve.max_terms."""

from __future__ import annotations

from dataclasses import replace

from nmt.config.experiment import DecodeConfig
from nmt.config.serve import ServeConfig
from nmt.errors import NmtError
from nmt.serve.http_errors import ApiError, shown
from nmt.serve.worker import Search
from nmt.translation import glossary
from nmt.translation.glossary import Glossary


def requested_search(decode: DecodeConfig, limits: ServeConfig, server_terms: Glossary | None, beam: int | None,
                     nbest: int | None, terms: dict[str, str] | None = None) -> Search:
    """The request's Search: the model's settings where it asks for none."""
    for name, value in (("beam", beam), ("nbest", nbest)):
        if value is not None and value > limits.max_beam:
            raise ApiError(400, f"{name} {shown(value)} is over the limit serve.max_beam={limits.max_beam}",
                           "serve.max_beam")
    beam = decode.beam if beam is None else beam
    nbest = min(decode.nbest, beam) if nbest is None else nbest
    if nbest > beam:
        raise ApiError(422, f"nbest must be between 1 and the beam size ({beam}), got {nbest}")
    return Search(replace(decode, beam=beam, nbest=nbest), glossary=requested_glossary(limits, server_terms, terms))


def requested_glossary(limits: ServeConfig, server_terms: Glossary | None,
                       terms: dict[str, str] | None) -> Glossary | None:
    """The server's glossary with the request's terms on top (they win for the same source term)."""
    if not terms:
        return server_terms
    if len(terms) > limits.max_terms:
        raise ApiError(400, f"{len(terms)} glossary terms, over the limit serve.max_terms={limits.max_terms}",
                       "serve.max_terms")
    try:
        asked = glossary.from_pairs(terms)
    except NmtError as e:
        raise ApiError(422, str(e)) from None
    return (server_terms or Glossary()).merged(asked)
