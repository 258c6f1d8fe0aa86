"""The incident simulator: simulated GPU nodes (node.py), their scenarios (scenarios.py), a fake
shell that speaks the real tools' formats (shell.py, commands.py) and injectable time (clock.py)."""
