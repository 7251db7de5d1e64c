"""Example and default remediation policies (YAML), shipped as package data."""
