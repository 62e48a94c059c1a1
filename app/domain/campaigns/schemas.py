"""What the API, the form and the CLI accept to create a campaign."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from app.domain.schemas import MAX_GOAL, InputModel, ScenarioIn, SessionCreate, ThresholdsIn


class MemberIn(InputModel):
    """One agent of the campaign: a session as today (the input limits of app/domain/schemas.py)."""

    agent: str | None = Field(default=None, max_length=80,
                              description="offline, claude, mcp, scripted; default as for a session")
    agent_config: dict[str, Any] = Field(default_factory=dict)
    title: str | None = Field(default=None, max_length=120)
    strategy: str = Field(default="", max_length=80, description="its first layer (or a strategy in words)")
    island: int | None = Field(default=None, ge=0, le=15, description="evolution mode: its island")


class CampaignCreate(InputModel):
    title: str = Field(min_length=1, max_length=200)
    mode: Literal["board", "evolution"] = "board"
    agents: int | None = Field(default=None, ge=1, le=16,
                               description="that many offline agents, each with another first layer and seed")
    members: list[MemberIn] | None = Field(default=None, min_length=1, max_length=16)
    policy: Literal["questions", "autonomous"] = Field(
        default="autonomous", description="the generated offline agents' plateau policy")
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="the generated agents' seeds are seed, seed+1, ...")
    candidate_kind: Literal["cuda", "python-cpu"] | None = None
    baseline: str | None = Field(default=None, max_length=200)
    suite_filter: str | None = Field(default=None, max_length=1000)
    scenarios: list[ScenarioIn] | None = Field(default=None, min_length=1, max_length=1000)
    goal_metric: str = Field(default="vs_baseline", max_length=40)
    goal_target: float | None = Field(default=None, gt=0, le=MAX_GOAL)
    budget_evaluations: int | None = Field(default=None, ge=1, le=100_000, description="over all agents together")
    memory_k: int | None = Field(default=None, ge=1, le=100_000, description="agents read the last K board entries; "
                                                                  "none: unbounded")
    plateau_window: int = Field(default=6, ge=1, le=1000, description="campaign evaluations without a new "
                                                                      "campaign leader")
    islands: int = Field(default=1, ge=1, le=16)
    thresholds: ThresholdsIn = Field(default_factory=ThresholdsIn)
    start: bool = True

    @field_validator("title", "goal_metric")
    @classmethod
    def _as_for_a_session(cls, v: str, info: ValidationInfo) -> str:
        """The same rules as a session's title and goal metric (app/domain/schemas.py)."""
        return str(getattr(SessionCreate.model_validate({"title": "t", info.field_name: v}), info.field_name or ""))

    @model_validator(mode="after")
    def _agents_or_members(self) -> CampaignCreate:
        if (self.agents is None) == (self.members is None):
            raise ValueError("give either agents (a number of offline agents) or members (a list)")
        return self
