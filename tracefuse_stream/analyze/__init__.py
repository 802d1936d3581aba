"""The analysis stage: what the reports present, computed from the matched collectives.

Why a stage of its own: report/ presents (text, JSON, the page, the merge's summary
track) and this computes (info's single pass and its per-segment timeline, the
straggler verdict, the why, the per-collective rows, the cross-rank dependency graph
and its critical path), so every analysis plugs in here without touching the pages.
Depends on align/ and below only (tests/test_layers.py).
"""
