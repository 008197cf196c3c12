"""Small tools every domain uses and none owns: host lists, atomic files, SQLite opening, amounts
(`10%` or `4`), the packaged data files, progress lines, the watchdog, exit codes, JSON shapes and robust
statistics.  It imports nothing of the package."""
