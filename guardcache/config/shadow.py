"""``rails.shadow``: how shadow rails (``rails.input.shadow_flows``, ``rails.output.shadow_flows``)
sample live traffic.

A shadow rail is a guard being tried out: it judges a sample of the turns after they are answered and
its verdicts are only compared with the live rails' (``guardcache.rails.shadow``). These settings
bound what that costs: the share of turns judged, how many judgements may be under way at once (a
slow or hanging shadow guard drops samples rather than queueing them), and how long closing the
rails waits for the judgements under way.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field

from guardcache.config.fields import STRICT, PositiveFloat, PositiveInt, reject_bool

DEFAULT_SAMPLE = 0.1
"""The share of turns the shadow rails judge unless ``rails.shadow.sample`` says otherwise: a tenth
of the traffic shows agreement within hours without doubling the load on a guard being tried."""


class ShadowSettings(BaseModel):
    """``rails.shadow``: ``sample`` (the share of turns judged, in (0, 1]), ``max_concurrency``
    (samples under way at once; a sampled turn past it is dropped and counted, never queued) and
    ``close_timeout`` (seconds ``aclose()`` waits for samples under way before cancelling them)."""

    model_config = STRICT

    # gt=0: a sample of 0 is a shadow rail that never runs (remove it instead); le=1: a share.
    sample: Annotated[float, BeforeValidator(reject_bool), Field(gt=0, le=1, allow_inf_nan=False)] = (
        DEFAULT_SAMPLE
    )
    max_concurrency: PositiveInt = 4
    close_timeout: PositiveFloat = 2.0


__all__ = ["DEFAULT_SAMPLE", "ShadowSettings"]
