"""Questions that move an agent to another layer of the problem: model, bank, ranking, evidence."""
