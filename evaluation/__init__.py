"""Evaluation: episodes, scoring against ground truth, the static-rule baseline, replay for
`backtest`, `eval` and the dashboard's what-if."""
