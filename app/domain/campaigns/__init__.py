"""Campaigns: several agents (each a session as today) on one problem with one evaluation
budget, one goal and one board (docs/campaigns.md).

  schemas.py     what the API and the CLI accept (CampaignCreate)
  members.py     a campaign and its members, read from the database
  actions.py     start, pause, resume or stop every member at once
  board.py       conclusions posted by judged candidates; reading them (filters, memory bound)
  campaign_judge.py  the campaign judge: discarded / backup / campaign leader, the campaign plateau
  evolution.py   islands, parent choice, one bank question per child (credit flows back)
  hooks.py       what the pipeline calls after a member's verdict: the board, then the campaign's
                 scope through app/domain/verdicts.py
  views.py       read models: leaderboard, tree across agents, costs, pauses
  trace.py       a whole campaign as JSON Lines (export / import)

Its tables are app/store/campaign_models.py; creating a campaign (its sessions need the agent
registry) is app/engine/campaigns.py; the command app/faces/commands/campaign.py."""
