"""What every object gpufleet writes carries: the action, incident, reason and actor, so that
`kubectl describe` leads back to the journal."""

from __future__ import annotations

from remediations.capabilities import WriteContext
from remediations.types import ACTION_ANNOTATION, INCIDENT_ANNOTATION, REASON_ANNOTATION

BY_ANNOTATION = "gpufleet.io/by"


def ctx_annotations(ctx: WriteContext) -> dict[str, str]:
    return {
        ACTION_ANNOTATION: ctx.action_id,
        INCIDENT_ANNOTATION: ctx.incident_id,
        REASON_ANNOTATION: f"{ctx.playbook}: {ctx.reason}"[:250],
        BY_ANNOTATION: ctx.actor,
    }
