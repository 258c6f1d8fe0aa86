"""The incident simulator: simulated GPU nodes (node.py: a SimHost's state and physics, host.py, built
from a scenario, scenarios.py and machine.py), a fake shell that speaks the real tools' formats
(shell.py, commands.py, the cmd_* modules) and injectable time (console/clock.py). The command modules
read and change a SimHost; only node.py, above them, ties the host to the shell and the scenarios."""
