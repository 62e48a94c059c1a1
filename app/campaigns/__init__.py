"""Campaigns: several agents (each a session as today) on one problem with one evaluation
budget, one goal and one board (docs/campaigns.md).

  models.py      tables: campaign, campaign_member, board_entry, mutation
  schemas.py     what the API and the CLI accept (CampaignCreate)
  create.py      validate and create a campaign and its member sessions
  actions.py     start, pause, resume or stop every member at once
  board.py       conclusions posted by judged candidates; reading them (filters, memory bound)
  judge.py       the campaign judge: discarded / backup / campaign leader, the campaign plateau
  evolution.py   islands, parent choice, one bank question per child (credit flows back)
  hooks.py       what the candidate pipeline calls after each verdict of a member session
  views.py       read models: leaderboard, tree across agents, costs, pauses
  trace.py       a whole campaign as JSON Lines (export / import)
  cli.py         `socratic campaign create|list|show|export|import`

Campaign modules are domain code: they import sessions, models and question_bank, never the
runner, the tools or the web (the pipeline calls hooks.py; routes call create.py and views.py)."""
