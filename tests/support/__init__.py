"""What the tests share: child processes, the models and entries they build, counter readers, servers.

The test directory is on `sys.path` (pytest puts it there, and scripts run by
path from it see it as their own directory), so tests import these modules as
`support.<name>`.
"""
