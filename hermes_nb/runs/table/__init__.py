"""Reading runs: status, results and history, and the runs table (compare, notes, delete/archive)."""
