"""Replaying the pipeline over history: `gpufleet detect`, `gpufleet backtest`, the dashboard's
What-if and the live cycle's episodes. Production code: it never imports the simulator or the lab.
"""
